/* The daemon's in-process event bus: parts that see something happen
 * (jobs.c: a job's state changes or its output arrives; daemon.c: a
 * device comes online or goes; cluster.c: what another server of the
 * cluster saw, marked remote) publish it; parts that stream it to
 * someone (the admin socket's `watch` and `follow`) or send it on (the
 * cluster's relay) subscribe.
 *
 * Synchronous and single-threaded: events_publish() calls every matching
 * subscriber before it returns, in subscription order. A subscriber may
 * unsubscribe itself or any other, and may subscribe new ones, from
 * inside its callback; one subscribed during a publish hears the next
 * event, not this one. Every pointer in an event is borrowed for the call
 * only. Pure: no I/O, no libuv. */
#ifndef CORDON_SERVER_EVENTS_H
#define CORDON_SERVER_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum event_kind {
  EVENT_JOB_STATE = 1, /* job_id, state; device_id, user, code when known */
  EVENT_JOB_OUTPUT,    /* job_id, stream, offset, data/len */
  EVENT_DEVICE_ONLINE, /* device_id, user */
  EVENT_DEVICE_OFFLINE,
};

enum event_stream {
  EVENT_STDOUT = 1,
  EVENT_STDERR = 2,
};

struct event {
  enum event_kind kind;
  const char *job_id;    /* lower-case hex (CORDON_ID_HEX_LEN), or NULL */
  const char *device_id; /* lower-case hex, or NULL */
  const char *user;      /* the user's name, or NULL */
  const char *state;     /* EVENT_JOB_STATE: the new state ("sent", "done", ...) */
  const char *code;      /* EVENT_JOB_STATE: the error code it ended with, or NULL */
  enum event_stream stream;
  uint64_t offset; /* EVENT_JOB_OUTPUT: where data starts in its stream */
  const uint8_t *data;
  size_t len;
  /* Heard from another server of the cluster (server/cluster.c, the
   * relay): published here for this server's subscribers, never sent on
   * to the others again. false for what happened here. */
  bool remote;
};

typedef void (*event_fn)(void *ctx, const struct event *ev);

struct events;

/* NULL on ENOMEM. */
struct events *events_new(void);
/* NULL-safe. Subscribers are dropped without being called. */
void events_free(struct events *bus);

/* Hear every event (job_id NULL) or only the JOB_* events of one job
 * (job_id, lower-case hex). *out_token names the subscription for
 * events_unsubscribe(); tokens are never reused. 0, -EINVAL or -ENOMEM. */
int events_subscribe(struct events *bus, const char *job_id, event_fn fn, void *ctx,
                     uint64_t *out_token);
/* An unknown or already dropped token is ignored. */
void events_unsubscribe(struct events *bus, uint64_t token);
void events_publish(struct events *bus, const struct event *ev);
/* Live subscriptions (for tests and metrics). */
size_t events_count(const struct events *bus);

#endif
