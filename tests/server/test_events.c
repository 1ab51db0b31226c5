/* server/events.c: matching, order, and subscribers that come and go
 * while an event is being delivered. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "server/events.h"

#define JOB_A "0123456789abcdef0123456789abcdef"
#define JOB_B "fedcba9876543210fedcba9876543210"

struct rec {
  struct events *bus;
  int calls;
  char order[16];
  uint64_t drop; /* a token to drop when called, or 0 */
  bool add;      /* subscribe another when called */
};

static struct rec *g_order_rec;

static void hear(void *ctx, const struct event *ev) {
  struct rec *r = ctx;
  r->calls++;
  size_t n = strlen(g_order_rec->order);
  if (n + 1 < sizeof(g_order_rec->order))
    g_order_rec->order[n] = (char)('a' + (r - g_order_rec) % 26);
  (void)ev;
  if (r->drop) {
    events_unsubscribe(r->bus, r->drop);
    r->drop = 0;
  }
  if (r->add) {
    uint64_t t;
    r->add = false;
    cr_assert_eq(events_subscribe(r->bus, NULL, hear, r + 1, &t), 0);
  }
}

Test(events, job_filter_and_order) {
  struct events *bus = events_new();
  cr_assert(bus);
  struct rec r[3] = {{.bus = bus}, {.bus = bus}, {.bus = bus}};
  g_order_rec = r;
  uint64_t t0, t1, t2;
  cr_assert_eq(events_subscribe(bus, NULL, hear, &r[0], &t0), 0);
  cr_assert_eq(events_subscribe(bus, JOB_A, hear, &r[1], &t1), 0);
  cr_assert_eq(events_subscribe(bus, JOB_B, hear, &r[2], &t2), 0);
  cr_assert_neq(t0, t1);
  events_publish(bus, &(struct event){.kind = EVENT_JOB_STATE, .job_id = JOB_A, .state = "sent"});
  cr_assert_eq(r[0].calls, 1);
  cr_assert_eq(r[1].calls, 1);
  cr_assert_eq(r[2].calls, 0, "another job's subscriber hears nothing");
  cr_assert_str_eq(r[0].order, "ab", "in subscription order");
  events_publish(bus, &(struct event){.kind = EVENT_DEVICE_ONLINE, .device_id = JOB_A});
  cr_assert_eq(r[0].calls, 2, "device events reach the subscriber to all");
  cr_assert_eq(r[1].calls, 1, "device events do not reach a job's subscriber");
  events_unsubscribe(bus, t1);
  events_unsubscribe(bus, t1); /* twice: ignored */
  events_unsubscribe(bus, 9999);
  cr_assert_eq(events_count(bus), 2);
  events_publish(bus, &(struct event){.kind = EVENT_JOB_OUTPUT, .job_id = JOB_A});
  cr_assert_eq(r[1].calls, 1, "an unsubscribed one hears nothing");
  events_free(bus);
}

Test(events, changes_during_publish) {
  struct events *bus = events_new();
  struct rec r[3] = {{.bus = bus}, {.bus = bus}, {.bus = bus}};
  g_order_rec = r;
  uint64_t t0, t1;
  cr_assert_eq(events_subscribe(bus, NULL, hear, &r[0], &t0), 0);
  cr_assert_eq(events_subscribe(bus, NULL, hear, &r[1], &t1), 0);
  r[0].drop = t1;  /* the first drops the second before it is reached */
  r[0].add = true; /* and adds r[1] anew: it hears only the next event */
  events_publish(bus, &(struct event){.kind = EVENT_DEVICE_OFFLINE});
  cr_assert_eq(r[0].calls, 1);
  cr_assert_eq(r[1].calls, 0, "dropped before it was reached, added after the publish began");
  cr_assert_eq(events_count(bus), 2);
  events_publish(bus, &(struct event){.kind = EVENT_DEVICE_OFFLINE});
  cr_assert_eq(r[0].calls, 2);
  cr_assert_eq(r[1].calls, 1, "the new subscription hears the next event");
  /* a subscriber dropping itself */
  r[0].drop = t0;
  events_publish(bus, &(struct event){.kind = EVENT_DEVICE_OFFLINE});
  events_publish(bus, &(struct event){.kind = EVENT_DEVICE_OFFLINE});
  cr_assert_eq(r[0].calls, 3);
  cr_assert_eq(events_count(bus), 1);
  events_free(bus);
}

Test(events, bad_arguments) {
  struct events *bus = events_new();
  uint64_t t;
  cr_assert_eq(events_subscribe(bus, "short", hear, NULL, &t), -EINVAL);
  cr_assert_eq(events_subscribe(bus, NULL, NULL, NULL, &t), -EINVAL);
  cr_assert_eq(events_count(bus), 0);
  events_publish(NULL, &(struct event){.kind = EVENT_DEVICE_OFFLINE});
  events_free(bus);
  events_free(NULL);
}

static void keep_remote(void *ctx, const struct event *ev) {
  int *seen = ctx;
  *seen = ev->remote ? 2 : 1;
}

/* The cluster's relay sends on only what happened here: the mark comes
 * to every subscriber as published, a job's subscribers included. */
Test(events, the_remote_mark_reaches_subscribers_as_published) {
  struct events *bus = events_new();
  uint64_t t;
  int all = 0, job = 0;
  cr_assert_eq(events_subscribe(bus, NULL, keep_remote, &all, &t), 0);
  cr_assert_eq(events_subscribe(bus, JOB_A, keep_remote, &job, &t), 0);
  events_publish(bus, &(struct event){.kind = EVENT_JOB_STATE, .job_id = JOB_A, .remote = true});
  cr_expect_eq(all, 2);
  cr_expect_eq(job, 2);
  events_publish(bus, &(struct event){.kind = EVENT_JOB_OUTPUT, .job_id = JOB_A});
  cr_expect_eq(all, 1);
  cr_expect_eq(job, 1);
  events_free(bus);
}
