/* Device sessions across a cluster's instances (server/cluster.h). */
#include "server/cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/id.h"
#include "core/log.h"
#include "core/ratelimit.h"
#include "proto/msg.h"
#include "server/relay.h"

#define CLUSTER_PURGE_TICKS 5          /* the packages of sent jobs go every 5th tick */
#define CLUSTER_RELAY_PENDING_MAX 1024 /* payloads waiting for the next loop turn's NOTIFY */
#define CLUSTER_RELAY_LOG_WINDOW_MS 60000
#define CLUSTER_LISTEN_STEP_MS 100 /* a LISTEN connection being made is taken further */

/* A handle of its own that LISTENs for queued jobs, and its poll. */
struct listener {
  uv_poll_t poll;
  bool polling; /* it listens, its socket polled; else its connection is being made */
  struct server_db *db;
  struct cluster *c;
};

struct cluster {
  uv_loop_t *loop;
  struct server_db *db;
  struct sessions *sessions;
  const char *state_dir;
  struct cluster_hooks hooks;
  struct listener *listener; /* NULL: none (the next tick opens one) */
  uv_timer_t listen_step;    /* an attempt in progress, taken further */
  bool listen_warned;        /* "cannot LISTEN" said, since it last listened */
  bool listen_lost;          /* it listened, and that broke */
  bool shared;               /* PostgreSQL: there may be other instances */
  bool started;
  char instance[CORDON_ID_HEX_SIZE];
  uv_timer_t tick;
  unsigned ticks;
  int64_t cancel_since; /* the last tick's clock: cancels from then on are relayed */
  /* the relay of events (PostgreSQL): this server's events out, the
   * others' in (server/relay.h) */
  struct events *events;
  uint64_t events_token; /* 0: not subscribed */
  uint64_t seq;          /* payloads sent */
  char **pending;        /* payloads for the next NOTIFY, oldest first */
  size_t n_pending;
  uv_timer_t flush; /* 0 ms: the payloads of a loop turn go in the next */
  bool flush_on;
  struct relay_msg *msg;           /* the payload being read */
  uint8_t *key;                    /* the relay's key (sodium_malloc), RELAY_KEY_LEN */
  struct core_ratelimit log_sent;  /* NOTIFY failures, dropped payloads */
  struct core_ratelimit log_heard; /* payloads this server cannot read */
};

int cluster_new(uv_loop_t *loop, struct server_db *db, struct sessions *sessions,
                struct events *events, const uint8_t *secret, size_t secret_len,
                const char *state_dir, const struct cluster_hooks *hooks,
                struct cluster **out_cluster) {
  struct cluster *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->key = sodium_malloc(RELAY_KEY_LEN);
  int r = c->key ? relay_key_derive(secret, secret_len, c->key) : -ENOMEM;
  if (r < 0) {
    cluster_free(c);
    return r;
  }
  c->events = events;
  c->log_sent.window_ms = CLUSTER_RELAY_LOG_WINDOW_MS;
  c->log_heard.window_ms = CLUSTER_RELAY_LOG_WINDOW_MS;
  c->loop = loop;
  c->state_dir = state_dir;
  c->hooks = *hooks;
  c->db = db;
  c->sessions = sessions;
  c->shared = server_db_is_shared(db);
  uint8_t id[CORDON_ID_LEN];
  cordon_id_random(id);
  cordon_id_to_hex(id, c->instance);
  *out_cluster = c;
  return 0;
}

/* ---- LISTEN ---- */

static void listener_closed(uv_handle_t *h) {
  struct listener *l = h->data;
  server_db_close(l->db);
  free(l);
}

static bool listening(const struct cluster *c) {
  return c->listener && c->listener->polling;
}

static void listen_stop(struct cluster *c) {
  struct listener *l = c->listener;
  if (!l)
    return;
  c->listener = NULL;
  if (c->started)
    uv_timer_stop(&c->listen_step);
  if (!l->polling) { /* no poll yet: nothing of the loop's to wait for */
    server_db_close(l->db);
    free(l);
    return;
  }
  c->listen_lost = true;
  uv_poll_stop(&l->poll);
  uv_close((uv_handle_t *)&l->poll, listener_closed);
}

/* ---- the relay of events ---- */

static void relay_heard(struct cluster *c, const char *payload, size_t len) {
  if (!c->msg || !c->events_token || relay_is_from(payload, len, c->instance))
    return; /* its own (every listener hears every NOTIFY) */
  const char *why = "";
  uint64_t n;
  char sup[24];
  if (relay_decode(c->key, payload, len, c->msg, &why) < 0) {
    if (core_ratelimit_hit(&c->log_heard, core_mono_ms(), &n))
      core_log_kv(CORE_LOG_WARN, "relayed event dropped: not a payload this server reads",
                  "channel", SERVER_DB_EVENTS_CHANNEL, "reason", why, "suppressed",
                  core_ratelimit_fmt(n, sup), NULL);
    return;
  }
  struct event *ev = &c->msg->ev;
  /* a device that left another server for this one: its session here is
   * the news, not the other's end */
  if (ev->kind == EVENT_DEVICE_OFFLINE && sessions_find(c->sessions, ev->device_id))
    return;
  ev->remote = true;
  events_publish(c->events, ev);
}

struct heard {
  struct cluster *c;
  int queued;
};

static void on_note(void *ctx, const char *channel, const char *payload, size_t len) {
  struct heard *h = ctx;
  if (strcmp(channel, SERVER_DB_EVENTS_CHANNEL) == 0)
    relay_heard(h->c, payload, len);
  else
    h->queued++;
}

/* What arrived on the LISTEN connection: queued jobs, others' events. */
static void read_notes(struct cluster *c, int status) {
  struct heard h = {.c = c};
  int n = status < 0 ? status : server_db_notifications(c->listener->db, on_note, &h);
  if (n < 0) {
    core_log_kv(CORE_LOG_WARN,
                "the LISTEN connection broke: the queue is polled, events are not relayed until "
                "it is back",
                "error", cordon_err_message(n), NULL);
    listen_stop(c);
    return;
  }
  if (h.queued > 0 && c->hooks.queued)
    c->hooks.queued(c->hooks.data);
}

static void on_notified(uv_poll_t *p, int status, int events) {
  (void)events;
  struct listener *l = p->data;
  read_notes(l->c, status);
}

static void relay_dropped(struct cluster *c, size_t count, const char *error) {
  uint64_t n;
  char sup[24], cnt[24];
  snprintf(cnt, sizeof(cnt), "%zu", count);
  if (core_ratelimit_hit(&c->log_sent, core_mono_ms(), &n))
    core_log_kv(CORE_LOG_WARN,
                "events not relayed to the other servers: their follow and watch miss them",
                "payloads", cnt, "error", error, "suppressed", core_ratelimit_fmt(n, sup), NULL);
}

/* The payloads waiting go out, SERVER_DB_EVENTS_BATCH_MAX per statement,
 * on the LISTEN connection: outside the group's transaction (what they
 * tell was committed before they were published), so that a failed NOTIFY
 * never touches a job's commit. */
static void relay_flush(struct cluster *c, bool then_read) {
  char **batch = c->pending;
  size_t n = c->n_pending, sent = 0;
  c->pending = NULL;
  c->n_pending = 0;
  if (!batch)
    return;
  while (sent < n && listening(c)) {
    size_t k = n - sent < SERVER_DB_EVENTS_BATCH_MAX ? n - sent : SERVER_DB_EVENTS_BATCH_MAX;
    struct cordon_diag diag = {{0}};
    int r = server_db_events_notify(c->listener->db, (const char *const *)batch + sent, k, &diag);
    if (r < 0) {
      relay_dropped(c, k, diag.msg);
      if (r == -ECONNRESET)
        listen_stop(c);
    }
    sent += k;
  }
  if (sent < n)
    relay_dropped(c, n - sent, "no LISTEN connection (it is tried again every tick)");
  for (size_t i = 0; i < n; i++)
    free(batch[i]);
  free(batch);
  /* what libpq read meanwhile is not on the socket any more */
  if (listening(c) && then_read)
    read_notes(c, 0);
}

static void on_flush(uv_timer_t *t) {
  struct cluster *c = t->data;
  c->flush_on = false;
  relay_flush(c, true);
}

static int relay_queue(void *ctx, const struct relay_payload *p) {
  struct cluster *c = ctx;
  if (!c->pending) {
    c->pending = calloc(CLUSTER_RELAY_PENDING_MAX, sizeof(*c->pending));
    if (!c->pending)
      return -ENOMEM;
  }
  if (c->n_pending == CLUSTER_RELAY_PENDING_MAX)
    return -ENOBUFS;
  char *copy = malloc(p->len + 1);
  if (!copy)
    return -ENOMEM;
  memcpy(copy, p->text, p->len + 1);
  c->pending[c->n_pending++] = copy;
  return 0;
}

/* Every event of this server's bus: one payload (an output event one per
 * RELAY_CHUNK_MAX bytes) for the next loop turn's NOTIFY. */
static void relay_event(void *ctx, const struct event *ev) {
  struct cluster *c = ctx;
  if (ev->remote)
    return; /* the others heard it from its server */
  int r = relay_encode(c->key, c->instance, &c->seq, ev, relay_queue, c);
  if (r == -EINVAL) {
    core_log_kv(CORE_LOG_DEBUG, "event not relayed: a field the relay cannot carry", "job",
                ev->job_id, "device", ev->device_id, NULL);
  } else if (r < 0) {
    relay_dropped(c, 1, cordon_err_message(r));
  }
  if (c->n_pending && !c->flush_on) {
    uv_timer_start(&c->flush, on_flush, 0, 0);
    c->flush_on = true;
  }
}

static void relay_start(struct cluster *c) {
  uv_timer_init(c->loop, &c->flush);
  c->flush.data = c;
  c->msg = malloc(sizeof(*c->msg));
  if (!c->events || !c->msg ||
      events_subscribe(c->events, NULL, relay_event, c, &c->events_token) < 0) {
    core_log_kv(CORE_LOG_WARN, "events are not relayed between the servers: out of memory", NULL);
    c->events_token = 0;
  }
}

static void relay_stop(struct cluster *c) {
  if (c->events_token) {
    events_unsubscribe(c->events, c->events_token);
    c->events_token = 0;
  }
  relay_flush(c, false); /* what this server's last loop turn published */
  if (!uv_is_closing((uv_handle_t *)&c->flush))
    uv_close((uv_handle_t *)&c->flush, NULL);
}

static void listen_start(struct cluster *c);

static void on_listen_step(uv_timer_t *t) {
  listen_start(t->data);
}

/* A second handle LISTENs, its connection made without holding the loop
 * (server_db_listener_open): tried at the start and at every tick while
 * it does not listen, an attempt in progress taken further every
 * CLUSTER_LISTEN_STEP_MS. Failures leave the poll of the queue alone. */
static void listen_start(struct cluster *c) {
  if (listening(c))
    return;
  struct cordon_diag diag = {{0}};
  struct listener *l = c->listener;
  int fd = -1, r = 0;
  if (!l) {
    l = calloc(1, sizeof(*l));
    r = l ? server_db_listener_open(c->db, &l->db, &diag) : -ENOMEM;
    if (r == 0) {
      l->c = c;
      c->listener = l;
    } else {
      free(l);
    }
  }
  if (r == 0)
    r = server_db_queue_listen(l->db, &fd, &diag);
  if (r == 0)
    r = server_db_events_listen(l->db, &diag);
  if (r == 0)
    r = uv_poll_init(c->loop, &l->poll, fd);
  if (r == -EINPROGRESS) {
    uv_timer_start(&c->listen_step, on_listen_step, CLUSTER_LISTEN_STEP_MS, 0);
    return;
  }
  if (r < 0) {             /* the handle stays: its next attempt after its backoff */
    if (!c->listen_warned) /* once, not at every retry */
      core_log_kv(CORE_LOG_WARN,
                  "cannot LISTEN for queued jobs and events: the queue is polled, events are not "
                  "relayed",
                  "error", diag.msg[0] ? diag.msg : cordon_err_message(r), NULL);
    c->listen_warned = true;
    return;
  }
  l->polling = true;
  l->poll.data = l;
  uv_poll_start(&l->poll, UV_READABLE, on_notified);
  if (c->listen_warned || c->listen_lost)
    core_log_kv(CORE_LOG_INFO, "listening for queued jobs and events again", NULL);
  c->listen_warned = c->listen_lost = false;
}

void cluster_close(struct cluster *c) {
  if (!c)
    return;
  if (c->started)
    relay_stop(c);
  listen_stop(c);
  if (c->started && !uv_is_closing((uv_handle_t *)&c->tick)) {
    uv_close((uv_handle_t *)&c->tick, NULL);
    uv_close((uv_handle_t *)&c->listen_step, NULL);
  }
}

void cluster_free(struct cluster *c) {
  if (!c)
    return;
  for (size_t i = 0; i < c->n_pending; i++)
    free(c->pending[i]);
  free(c->pending);
  free(c->msg);
  sodium_free(c->key);
  free(c);
}

const char *cluster_instance(const struct cluster *c) {
  return c->instance;
}

int cluster_recover_devices(struct server_db *db, struct cordon_diag *diag) {
  if (!server_db_is_shared(db))
    return server_db_device_set_all_offline(db, diag);
  return server_db_session_expire(db, true, diag);
}

static int64_t lease_end(const struct cluster *c) {
  return server_db_now(c->db) + CLUSTER_LEASE_S;
}

static void claim(struct cluster *c, struct session *s) {
  char sid[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(s->session_id, sid);
  struct cordon_diag diag = {{0}};
  if (server_db_session_claim(c->db, s->device_id, c->instance, sid, lease_end(c), &diag) < 0)
    core_log_kv(CORE_LOG_WARN, "cannot record the device's session: claimed again next tick",
                "device", s->device_id, "error", diag.msg, NULL);
}

void cluster_on_session_online(struct cluster *c, struct session *s) {
  if (c->shared)
    claim(c, s);
}

void cluster_on_session_closed(struct cluster *c, struct session *s) {
  if (!c->shared || !s->since)
    return;
  char sid[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(s->session_id, sid);
  if (server_db_session_release(c->db, s->device_id, c->instance, sid, NULL) != -ENOENT)
    return;
  /* another session holds the row: when it is another instance's, the
   * device is still online (session.c has just marked it offline) */
  char inst[CORDON_ID_HEX_SIZE];
  int64_t lease = 0;
  if (server_db_session_get(c->db, s->device_id, inst, NULL, &lease, NULL) == 0 &&
      strcmp(inst, c->instance) != 0 && lease > server_db_now(c->db))
    (void)server_db_device_set_online(c->db, s->device_id, true, NULL);
}

bool cluster_device_leased(struct server_db *db, const char *device_id) {
  if (!server_db_is_shared(db) || !cordon_id_hex_valid(device_id))
    return false;
  int64_t lease = 0;
  return server_db_session_get(db, device_id, NULL, NULL, &lease, NULL) == 0 &&
         lease > server_db_now(db);
}

bool cluster_device_online(struct cluster *c, const char *device_id) {
  return sessions_find(c->sessions, device_id) || cluster_device_leased(c->db, device_id);
}

/* ---- the tick ---- */

static int row_cmp(const void *a, const void *b) {
  return strcmp(((const struct server_db_session_row *)a)->session_id,
                ((const struct server_db_session_row *)b)->session_id);
}

struct check {
  struct cluster *c;
  struct server_db_session_rows rows; /* sorted by session id */
};

/* A local session whose row this instance no longer holds: replaced by a
 * newer session elsewhere, or (its lease passed, or its claim failed) to
 * be claimed again. */
static void check_session(struct session *s, void *data) {
  struct check *k = data;
  struct cluster *c = k->c;
  struct server_db_session_row key;
  memset(&key, 0, sizeof(key));
  cordon_id_to_hex(s->session_id, key.session_id);
  if (k->rows.count && bsearch(&key, k->rows.items, k->rows.count, sizeof(key), row_cmp))
    return;
  char inst[CORDON_ID_HEX_SIZE], sid[CORDON_ID_HEX_SIZE];
  int r = server_db_session_get(c->db, s->device_id, inst, sid, NULL, NULL);
  if (r == -ENOENT ||
      (r == 0 && strcmp(inst, c->instance) == 0 && strcmp(sid, key.session_id) == 0)) {
    /* its lease passed (a stalled tick: another instance's expiry took
     * the row and the device offline) or its claim failed */
    claim(c, s);
    (void)server_db_device_set_online(c->db, s->device_id, true, NULL);
    return;
  }
  if (r < 0 || strcmp(inst, c->instance) == 0)
    return; /* the database is busy, or a newer session here: session.c replaces */
  core_log_kv(CORE_LOG_INFO, "session replaced", "device", s->device_id, "addr", s->addr, "by",
              "another server", "instance", inst, NULL);
  session_goaway(s, MSG_GOAWAY_REPLACED, "a newer session of this device took over");
}

/* Devices revoked through another instance: their sessions here close. */
static void close_revoked(struct cluster *c) {
  struct server_db_session_rows rows = {0};
  if (server_db_session_list_revoked(c->db, c->instance, &rows, NULL) < 0)
    return;
  for (size_t i = 0; i < rows.count; i++) {
    struct session *s = sessions_find(c->sessions, rows.items[i].device_id);
    if (!s)
      continue;
    core_log_kv(CORE_LOG_INFO, "device revoked through another server: session closed", "device",
                s->device_id, "addr", s->addr, NULL);
    session_goaway(s, MSG_GOAWAY_REVOKED, "this device was revoked");
  }
  server_db_session_rows_release(&rows);
}

/* Jobs cancelled (through any instance) on devices connected here: their
 * agents are told. A cancel this instance sent itself goes again, which
 * the agent ignores (docs/protocol/messages.md, `cancel`). */
static void relay_cancels(struct cluster *c) {
  int64_t now = server_db_now(c->db);
  struct server_db_session_rows rows = {0};
  if (server_db_session_list_cancelled(c->db, c->instance, c->cancel_since, &rows, NULL) < 0)
    return;
  c->cancel_since = now;
  for (size_t i = 0; i < rows.count; i++) {
    struct session *s = sessions_find(c->sessions, rows.items[i].device_id);
    if (!s)
      continue;
    struct msg m = {.type = MSG_CANCEL};
    if (cordon_id_from_hex(rows.items[i].job_id, m.cancel.job_id) < 0)
      continue;
    (void)session_send(s, &m);
    core_log_kv(CORE_LOG_DEBUG, "job cancel relayed", "job", rows.items[i].job_id, "device",
                s->device_id, NULL);
  }
  server_db_session_rows_release(&rows);
}

static void on_tick(uv_timer_t *t) {
  struct cluster *c = t->data;
  struct cordon_diag diag = {{0}};
  size_t held = 0;
  if (server_db_session_renew(c->db, c->instance, lease_end(c), &held, &diag) < 0) {
    core_log_kv(CORE_LOG_WARN, "cannot renew the session leases", "error", diag.msg, NULL);
    return;
  }
  /* one UPDATE when every session still holds its row; a list only when
   * one may have been taken */
  if (held < sessions_count(c->sessions)) {
    struct check k = {.c = c};
    if (server_db_session_list(c->db, c->instance, &k.rows, NULL) == 0) {
      if (k.rows.count) /* items is NULL without rows */
        qsort(k.rows.items, k.rows.count, sizeof(*k.rows.items), row_cmp);
      sessions_foreach(c->sessions, check_session, &k);
      server_db_session_rows_release(&k.rows);
    }
  }
  (void)server_db_session_expire(c->db, false, NULL);
  listen_start(c); /* when it does not listen */
  close_revoked(c);
  relay_cancels(c);
  if (++c->ticks % CLUSTER_PURGE_TICKS == 0) {
    (void)server_db_job_package_purge(c->db, NULL);
    if (c->hooks.sweep)
      c->hooks.sweep(c->hooks.data);
  }
}

void cluster_start(struct cluster *c) {
  core_log_kv(CORE_LOG_INFO, "server instance", "instance", c->instance, "cluster",
              c->shared ? "yes" : "no", NULL);
  if (!c->shared)
    return;
  c->cancel_since = server_db_now(c->db);
  uv_timer_init(c->loop, &c->tick);
  c->tick.data = c;
  uv_timer_init(c->loop, &c->listen_step);
  c->listen_step.data = c;
  c->started = true;
  relay_start(c);
  listen_start(c);
  uv_timer_start(&c->tick, on_tick, CLUSTER_RENEW_MS, CLUSTER_RENEW_MS);
}

/* ---- queued packages ---- */

/* Its package into the database. */
static void package_keep(struct server_db *db, const char *job_id, const char *path) {
  struct cordon_diag diag = {{0}};
  int r;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0)
    r = cordon_diag_set(&diag, -errno, "%s: %s", path, strerror(errno));
  else
    r = server_db_job_package_store(db, job_id, fd, (uint64_t)st.st_size, &diag);
  if (r < 0)
    core_log_kv(CORE_LOG_WARN, "queued package not kept in the database: only this server sends it",
                "job", job_id, "error", diag.msg, NULL);
  if (fd >= 0)
    close(fd);
}

void cluster_job_queued(struct server_db *db, const char *job_id, const char *path) {
  if (!server_db_is_shared(db))
    return;
  package_keep(db, job_id, path);
  struct cordon_diag diag = {{0}};
  if (server_db_queue_notify(db, &diag) < 0)
    core_log_kv(CORE_LOG_WARN, "cannot NOTIFY the queued job: the others' poll finds it", "job",
                job_id, "error", diag.msg, NULL);
}

int cluster_package_fetch(struct server_db *db, const char *job_id, const char *path) {
  if (!server_db_is_shared(db))
    return -ENOENT;
  char tmp[4200];
  snprintf(tmp, sizeof(tmp), "%s.part", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -errno;
  struct cordon_diag diag = {{0}};
  uint64_t size = 0;
  int r = server_db_job_package_load(db, job_id, fd, &size, &diag);
  if (r == 0 && fsync(fd) < 0)
    r = cordon_diag_set(&diag, -errno, "fsync: %s", strerror(errno));
  close(fd);
  if (r == 0 && rename(tmp, path) < 0)
    r = cordon_diag_set(&diag, -errno, "rename: %s", strerror(errno));
  if (r < 0) {
    unlink(tmp);
    if (r != -ENOENT)
      core_log_kv(CORE_LOG_WARN, "cannot write a queued package fetched from the database", "job",
                  job_id, "error", diag.msg[0] ? diag.msg : strerror(-r), NULL);
  }
  return r;
}
