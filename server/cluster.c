/* Device sessions across a cluster's instances (server/cluster.h). */
#include "server/cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/id.h"
#include "core/log.h"
#include "proto/msg.h"

#define CLUSTER_PURGE_TICKS 5 /* the packages of sent jobs go every 5th tick */

/* A handle of its own that LISTENs for queued jobs, and its poll. */
struct listener {
  uv_poll_t poll;
  struct server_db *db;
  struct cluster *c;
};

struct cluster {
  uv_loop_t *loop;
  struct server_db *db;
  struct sessions *sessions;
  const char *state_dir;
  struct cluster_hooks hooks;
  struct listener *listener; /* NULL: not listening (the next tick tries again) */
  bool shared;               /* PostgreSQL: there may be other instances */
  bool started;
  char instance[CORDON_ID_HEX_SIZE];
  uv_timer_t tick;
  unsigned ticks;
  int64_t cancel_since; /* the last tick's clock: cancels from then on are relayed */
};

int cluster_new(uv_loop_t *loop, struct server_db *db, struct sessions *sessions,
                const char *state_dir, const struct cluster_hooks *hooks,
                struct cluster **out_cluster) {
  struct cluster *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
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

static void listen_stop(struct cluster *c) {
  if (!c->listener)
    return;
  uv_poll_stop(&c->listener->poll);
  uv_close((uv_handle_t *)&c->listener->poll, listener_closed);
  c->listener = NULL;
}

static void on_notified(uv_poll_t *p, int status, int events) {
  (void)events;
  struct listener *l = p->data;
  struct cluster *c = l->c;
  int n = status < 0 ? status : server_db_queue_notifications(l->db);
  if (n < 0) {
    core_log_kv(CORE_LOG_WARN, "the queue's LISTEN connection broke: polling until it is back",
                "error", cordon_err_message(n), NULL);
    listen_stop(c);
    return;
  }
  if (n > 0 && c->hooks.queued)
    c->hooks.queued(c->hooks.data);
}

/* A second handle LISTENs; failures leave the poll of the queue alone. */
static void listen_start(struct cluster *c) {
  struct cordon_diag diag = {{0}};
  struct listener *l = calloc(1, sizeof(*l));
  int fd = -1;
  int r = l ? server_db_open(c->state_dir, 0, &l->db, &diag) : -ENOMEM;
  if (r == 0)
    r = server_db_queue_listen(l->db, &fd, &diag);
  if (r == 0)
    r = uv_poll_init(c->loop, &l->poll, fd);
  if (r < 0) {
    if (!c->ticks) /* once, not at every retry */
      core_log_kv(CORE_LOG_WARN, "cannot LISTEN for queued jobs: the queue is polled", "error",
                  diag.msg[0] ? diag.msg : cordon_err_message(r), NULL);
    if (l)
      server_db_close(l->db);
    free(l);
    return;
  }
  l->c = c;
  l->poll.data = l;
  uv_poll_start(&l->poll, UV_READABLE, on_notified);
  c->listener = l;
}

void cluster_close(struct cluster *c) {
  if (!c)
    return;
  listen_stop(c);
  if (c->started && !uv_is_closing((uv_handle_t *)&c->tick))
    uv_close((uv_handle_t *)&c->tick, NULL);
}

void cluster_free(struct cluster *c) {
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
  if (!c->listener)
    listen_start(c);
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
  listen_start(c);
  uv_timer_init(c->loop, &c->tick);
  c->tick.data = c;
  uv_timer_start(&c->tick, on_tick, CLUSTER_RENEW_MS, CLUSTER_RENEW_MS);
  c->started = true;
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
