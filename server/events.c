/* server/events.h: a list of subscribers, walked on each publish. Removal
 * while a publish walks the list only marks the entry; the outermost
 * publish sweeps marked entries once it is done. */
#include "server/events.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/id.h"

struct sub {
  struct sub *next;
  uint64_t token;
  event_fn fn;
  void *ctx;
  bool all;
  bool dead;
  char job_id[CORDON_ID_HEX_SIZE];
};

struct events {
  struct sub *head, **tail;
  uint64_t next_token;
  unsigned depth; /* publishes under way (a callback may publish) */
  size_t live;
};

struct events *events_new(void) {
  struct events *bus = calloc(1, sizeof(*bus));
  if (!bus)
    return NULL;
  bus->tail = &bus->head;
  bus->next_token = 1;
  return bus;
}

void events_free(struct events *bus) {
  if (!bus)
    return;
  struct sub *s = bus->head;
  while (s) {
    struct sub *n = s->next;
    free(s);
    s = n;
  }
  free(bus);
}

int events_subscribe(struct events *bus, const char *job_id, event_fn fn, void *ctx,
                     uint64_t *out_token) {
  if (!bus || !fn || !out_token || (job_id && strlen(job_id) != CORDON_ID_HEX_LEN))
    return -EINVAL;
  struct sub *s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  s->token = bus->next_token++;
  s->fn = fn;
  s->ctx = ctx;
  s->all = job_id == NULL;
  if (job_id)
    memcpy(s->job_id, job_id, CORDON_ID_HEX_SIZE);
  /* appended at the tail: a publish under way stops at the entry that was
   * last when it began (see events_publish) */
  *bus->tail = s;
  bus->tail = &s->next;
  bus->live++;
  *out_token = s->token;
  return 0;
}

static void sweep(struct events *bus) {
  struct sub **pp = &bus->head;
  bus->tail = &bus->head;
  while (*pp) {
    struct sub *s = *pp;
    if (s->dead) {
      *pp = s->next;
      free(s);
      continue;
    }
    bus->tail = &s->next;
    pp = &s->next;
  }
}

void events_unsubscribe(struct events *bus, uint64_t token) {
  if (!bus)
    return;
  for (struct sub *s = bus->head; s; s = s->next) {
    if (s->token == token && !s->dead) {
      s->dead = true;
      bus->live--;
      break;
    }
  }
  if (bus->depth == 0)
    sweep(bus);
}

static bool matches(const struct sub *s, const struct event *ev) {
  if (s->all)
    return true;
  if (ev->kind != EVENT_JOB_STATE && ev->kind != EVENT_JOB_OUTPUT)
    return false;
  return ev->job_id && strcmp(ev->job_id, s->job_id) == 0;
}

void events_publish(struct events *bus, const struct event *ev) {
  if (!bus || !ev)
    return;
  /* only those subscribed before this publish began hear it */
  uint64_t last = bus->next_token;
  bus->depth++;
  for (struct sub *s = bus->head; s; s = s->next) {
    if (s->token >= last)
      break;
    if (!s->dead && matches(s, ev))
      s->fn(s->ctx, ev);
  }
  if (--bus->depth == 0)
    sweep(bus);
}

size_t events_count(const struct events *bus) {
  return bus ? bus->live : 0;
}
