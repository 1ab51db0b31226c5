/* The cordon-server daemon (server/daemon.h): the loop, the keys, the
 * composition of sessions, pairing, jobs and the admin socket, the routing
 * of their events, signals, the drain, readiness and metrics. */
#include "server/daemon.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "core/clock.h"
#include "core/id.h"
#include "core/log.h"
#include "proto/msg.h"
#include "server/admin_ops.h"
#include "server/admin_sock.h"
#include "server/admin_view.h"
#include "server/cli.h"
#include "server/cluster.h"
#include "server/db.h"
#include "server/events.h"
#include "server/http.h"
#include "server/jobs.h"
#include "server/keys.h"
#include "server/keysync.h"
#include "server/lock.h"
#include "server/logfile.h"
#include "server/metrics.h"
#include "server/notify.h"
#include "server/pair.h"
#include "server/session.h"
#include "svc/journal.h"

#define DRAIN_POLL_MS 100
#define DAEMON_ADMIN_JOBS_LIMIT 100 /* jobs without a limit: the newest 100 */

enum daemon_phase {
  DAEMON_RUNNING,
  DAEMON_DRAINING, /* no new jobs; waiting for the running ones' results */
  DAEMON_STOPPING,
};

struct daemon {
  uv_loop_t *loop;
  const char *state_dir;
  struct server_lock *lock;
  struct server_db *db;
  uint8_t *noise_priv;           /* sodium_malloc */
  struct server_keyring keyring; /* the ticket and publisher keys, the chain (server/keys.h) */
  uint8_t *ticket_sk;            /* keyring.ticket_sk: reloaded in place on SIGHUP */
  uint8_t ticket_pk[crypto_sign_PUBLICKEYBYTES];
  uint8_t publisher_pk[crypto_sign_PUBLICKEYBYTES];
  uint8_t server_id[CORDON_ID_LEN];
  struct net_limits limits;
  struct net_server *srv;
  struct sessions *sessions;
  struct cluster *cluster; /* the device sessions of other instances (server/cluster.h) */
  struct keysync *keysync; /* key rotations of other servers (server/keysync.h) */
  struct pair_ctx *pair;
  struct events *events;
  struct jobs *jobs;
  struct admin_sock *admin;
  struct http_server *http;
  struct notify *notify;
  uv_signal_t sigterm, sigint, sighup;
  uv_timer_t status_timer, watchdog_timer, drain_timer;
  size_t finished[SERVER_DB_JOB_STATE_COUNT]; /* metrics_job_counts' last full count */
  uint64_t finished_at;                       /* its core_mono_ms, 0 for none yet */
  bool watchdog_on;
  enum daemon_phase phase;
  unsigned drain_timeout_s;
  int64_t drain_deadline_ms; /* core_mono_ms */
  char status[160];          /* the last STATUS= sent */
  uint64_t start_time_s;
};

static const char *log_target(void) {
  if (logfile_active())
    return "file";
  return journal_active() ? "journal" : "stderr";
}

/* ---- session events ---- */

static void on_pair_hello(void *data, struct session *s, const struct msg_hello *h) {
  struct daemon *d = data;
  pair_on_hello(d->pair, s, h);
}

static int on_pair_proof(void *data, struct session *s, const struct msg_pair_proof *p) {
  struct daemon *d = data;
  return pair_on_proof(d->pair, s, p);
}

static bool on_session_message(void *data, struct session *s, struct msg *m) {
  struct daemon *d = data;
  return jobs_on_message(d->jobs, s, m);
}

/* The chain of key announcements (server/keys.h), oldest first: the
 * agent applies those newer than what it has, before any job of this
 * session (a job's ticket may be signed by a key announced here). */
static void send_keys(struct session *s, void *data) {
  struct daemon *d = data;
  for (size_t i = 0; i < d->keyring.n_chain; i++) {
    struct msg m = {.type = MSG_KEYS};
    m.keys = d->keyring.chain[i];
    if (session_send(s, &m) < 0)
      break;
  }
}

static void on_session_online(void *data, struct session *s) {
  struct daemon *d = data;
  send_keys(s, d);
  const struct event ev = {.kind = EVENT_DEVICE_ONLINE, .device_id = s->device_id, .user = s->user};
  events_publish(d->events, &ev);
  cluster_on_session_online(d->cluster, s); /* cluster: the device's row is this instance's */
  jobs_on_device_online(d->jobs, s);
}

/* SIGHUP: `cordon-server keys rotate` or `retire` committed new keys; or
 * keysync installed another server's (from_cluster). */
static void reload_keys(struct daemon *d, bool from_cluster) {
  struct cordon_diag diag = {{0}};
  size_t before = d->keyring.n_chain;
  if (server_keyring_reload(d->state_dir, &d->keyring, &diag) < 0) {
    core_log_kv(CORE_LOG_ERROR,
                from_cluster ? "cluster: the keys were not reloaded"
                             : "SIGHUP: the keys were not reloaded",
                "error", diag.msg, NULL);
    return;
  }
  memcpy(d->ticket_pk, d->keyring.ticket_pk, sizeof(d->ticket_pk));
  memcpy(d->publisher_pk, d->keyring.publisher_pk[0], sizeof(d->publisher_pk));
  if (d->keyring.n_chain == before)
    return;
  char serial[24];
  snprintf(serial, sizeof(serial), "%zu", d->keyring.n_chain);
  core_log_kv(CORE_LOG_INFO,
              from_cluster ? "cluster: keys reloaded, announcing them to connected agents"
                           : "SIGHUP: keys reloaded, announcing them to connected agents",
              "serial", serial, NULL);
  sessions_foreach(d->sessions, send_keys, d);
}

static void on_session_closed(void *data, struct session *s) {
  struct daemon *d = data;
  if (s->since) { /* it was online */
    const struct event ev = {
        .kind = EVENT_DEVICE_OFFLINE, .device_id = s->device_id, .user = s->user};
    events_publish(d->events, &ev);
  }
  cluster_on_session_closed(d->cluster, s); /* cluster: its row goes, if still its own */
  jobs_on_session_closed(d->jobs, s);
  pair_on_closed(d->pair, s);
}

/* ---- live numbers ---- */

struct in_flight {
  struct daemon *d;
  size_t jobs;
};

static void count_in_flight(struct session *s, void *data) {
  struct in_flight *f = data;
  size_t n = 0;
  if (server_db_job_count_in_flight(f->d->db, s->device_id, &n, NULL) == 0)
    f->jobs += n;
}

/* Jobs sent to or running on a device that is connected now: the results
 * a drain can still receive. */
static size_t jobs_in_flight_online(struct daemon *d) {
  struct in_flight f = {d, 0};
  sessions_foreach(d->sessions, count_in_flight, &f);
  return f.jobs;
}

static void update_status(struct daemon *d) {
  size_t jobs[SERVER_DB_JOB_STATE_COUNT] = {0};
  (void)server_db_job_count_live(d->db, jobs, NULL);
  size_t online = sessions_count(d->sessions);
  size_t running = jobs[SERVER_DB_JOB_SENT] + jobs[SERVER_DB_JOB_RUNNING];
  char status[sizeof(d->status)];
  if (d->phase == DAEMON_DRAINING) {
    size_t left = jobs_in_flight_online(d);
    snprintf(status, sizeof(status), "draining: %zu job%s to finish, %zu device%s online", left,
             left == 1 ? "" : "s", online, online == 1 ? "" : "s");
  } else
    snprintf(status, sizeof(status), "%zu device%s online, %zu job%s running", online,
             online == 1 ? "" : "s", running, running == 1 ? "" : "s");
  if (strcmp(status, d->status) == 0)
    return;
  snprintf(d->status, sizeof(d->status), "%s", status);
  char msg[sizeof(status) + 16];
  snprintf(msg, sizeof(msg), "STATUS=%s", status);
  (void)notify_send(d->notify, msg);
}

static void on_status_tick(uv_timer_t *t) {
  update_status(t->data);
}

static void on_watchdog_tick(uv_timer_t *t) {
  struct daemon *d = t->data;
  (void)notify_send(d->notify, "WATCHDOG=1");
}

/* ---- admin ops: the handler column of ADMIN_OPS ---- */

/* Every admin request is logged with who asked (SO_PEERCRED); read-only
 * ones at debug. */
static void log_admin(struct admin_conn *c, enum admin_op op, const json_t *req) {
  long uid, pid;
  admin_conn_peer(c, &uid, &pid);
  char u[24], p[24], n[24] = "-";
  snprintf(u, sizeof(u), "%ld", uid);
  snprintf(p, sizeof(p), "%ld", pid);
  bool reads = op == ADMIN_OP_PING || op == ADMIN_OP_SESSIONS || op == ADMIN_OP_HELLO ||
               op == ADMIN_OP_JOB || op == ADMIN_OP_JOBS || op == ADMIN_OP_DEVICES ||
               op == ADMIN_OP_DEVICE || op == ADMIN_OP_PAIR_CODES;
  const char *user = admin_request_string(req, ADMIN_ARG_USER);
  const char *device = admin_request_string(req, ADMIN_ARG_DEVICE);
  const char *package = admin_request_string(req, ADMIN_ARG_PACKAGE);
  const char *job = admin_request_string(req, ADMIN_ARG_JOB);
  if (admin_request_get(req, ADMIN_ARG_BYTES))
    snprintf(n, sizeof(n), "%lld", admin_request_int(req, ADMIN_ARG_BYTES, 0));
  core_log_kv(reads ? CORE_LOG_DEBUG : CORE_LOG_INFO, "admin request", "op", admin_op_name(op),
              "uid", u, "pid", p, "user", user ? user : "-", "device", device ? device : "-",
              "package", package ? package : "-", "bytes", n, "job", job ? job : "-", NULL);
}

static void reply_usage(struct admin_conn *c, const char *what, const char *arg) {
  char msg[700];
  snprintf(msg, sizeof(msg), "%s%.600s", what, arg);
  admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, msg));
}

static void daemon_op_hello(struct daemon *d, struct admin_conn *c, const json_t *req,
                            const char *body) {
  (void)d;
  (void)body;
  if (admin_conn_requests(c) != 1) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "hello must be the first request"));
    return;
  }
  int best = 0;
  size_t i;
  json_t *v;
  json_array_foreach(admin_request_get(req, ADMIN_ARG_VERSIONS), i, v) {
    if (!json_is_integer(v)) {
      admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "versions: integers"));
      return;
    }
    json_int_t n = json_integer_value(v);
    if (n >= 1 && n <= ADMIN_VERSION && n > best)
      best = (int)n;
  }
  if (!best) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "no common version: this server speaks "
                                                          "version 1"));
    return;
  }
  admin_conn_set_version(c, best);
  json_t *ops = json_array();
  for (int op = 0; ops && op < ADMIN_OP_COUNT_; op++)
    json_array_append_new(ops, json_string(admin_op_name((enum admin_op)op)));
  admin_conn_reply(c, json_pack("{s:b, s:i, s:s, s:o}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_VERSION,
                                best, ADMIN_REPLY_SERVER, SERVER_PROG, ADMIN_REPLY_OPS,
                                ops ? ops : json_array()));
}

static void daemon_op_ping(struct daemon *d, struct admin_conn *c, const json_t *req,
                           const char *body) {
  (void)d;
  (void)req;
  (void)body;
  admin_conn_reply(c, admin_reply_ok());
}

static void add_session(struct session *s, void *data) {
  json_array_append_new(data,
                        json_pack("{s:s, s:s, s:s, s:I}", "device", s->device_id, "user", s->user,
                                  "address", s->addr, "since", (json_int_t)s->since));
}

static void daemon_op_sessions(struct daemon *d, struct admin_conn *c, const json_t *req,
                               const char *body) {
  (void)req;
  (void)body;
  json_t *list = json_array();
  sessions_foreach(d->sessions, add_session, list);
  admin_conn_reply(c, json_pack("{s:b, s:o, s:b, s:s}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_SESSIONS,
                                list, ADMIN_REPLY_DRAINING, d->phase != DAEMON_RUNNING, "instance",
                                cluster_instance(d->cluster)));
}

/* A database error as a reply, with the command line's codes (-ENOENT
 * not_found, -EINVAL and -ENOTUNIQ usage, -EEXIST already_exists). */
static void reply_db_error(struct admin_conn *c, int err, const struct cordon_diag *diag) {
  err = server_cli_db_code(err);
  admin_conn_reply(c, admin_reply_error(err, diag->msg[0] ? diag->msg : cordon_err_message(err)));
}

/* The id of the request's user (0: none asked). false: answered. */
static bool request_user(struct daemon *d, struct admin_conn *c, const json_t *req,
                         int64_t *out_id) {
  const char *name = admin_request_string(req, ADMIN_ARG_USER);
  struct server_db_user u;
  *out_id = 0;
  if (!name)
    return true;
  struct cordon_diag diag = {{0}};
  int err = server_db_user_get_by_name(d->db, name, &u, &diag);
  if (err == -ENOENT) {
    char msg[SERVER_DB_NAME_MAX + 80];
    snprintf(msg, sizeof(msg), "no user '%.*s'", SERVER_DB_NAME_MAX, name);
    admin_conn_reply(c, admin_reply_error(CORDON_E_NOT_FOUND, msg));
    return false;
  }
  if (err < 0) { /* the database failed: never "no such user" */
    admin_conn_reply(c, admin_reply_error(err, diag.msg));
    return false;
  }
  *out_id = u.id;
  return true;
}

/* The request's device, resolved as the command line does (id, name or a
 * unique id prefix, among the user's devices when user is given). false:
 * answered (not_found, or usage naming the devices it could be). */
static bool request_device(struct daemon *d, struct admin_conn *c, const json_t *req,
                           struct server_db_device *out_dev) {
  int64_t uid;
  if (!request_user(d, c, req, &uid))
    return false;
  struct cordon_diag diag = {{0}};
  int r = server_db_device_resolve(d->db, admin_request_string(req, ADMIN_ARG_DEVICE), uid, out_dev,
                                   &diag);
  if (r < 0) {
    reply_db_error(c, r, &diag);
    return false;
  }
  return true;
}

/* The request's job, or not_found answered (false). */
static bool request_job(struct daemon *d, struct admin_conn *c, const json_t *req,
                        struct server_db_job *out_job) {
  struct cordon_diag diag = {{0}};
  int err = server_db_job_get(d->db, admin_request_string(req, ADMIN_ARG_JOB), out_job, &diag);
  if (err < 0)
    admin_conn_reply(c, err == -ENOENT ? admin_reply_error(CORDON_E_NOT_FOUND, "no such job")
                                       : admin_reply_error(err, diag.msg));
  return err == 0;
}

static void daemon_op_dispatch(struct daemon *d, struct admin_conn *c, const json_t *req,
                               const char *body) {
  if (d->phase != DAEMON_RUNNING) {
    if (jobs_op_dispatch_known(d->jobs, c, req))
      return; /* its key names a job that exists: that one */
    core_log_kv(CORE_LOG_INFO, "dispatch refused", "user",
                admin_request_string(req, ADMIN_ARG_USER), "reason", "draining", NULL);
    admin_conn_reply(c, admin_reply_error(-ESHUTDOWN, "the server is shutting down: it takes "
                                                      "no new jobs"));
    return;
  }
  bool has_path = admin_request_get(req, ADMIN_ARG_PACKAGE) != NULL;
  bool has_bytes = admin_request_get(req, ADMIN_ARG_BYTES) != NULL;
  if (has_path == has_bytes) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "dispatch needs user, package and args"));
    return;
  }
  if (has_path && !admin_conn_is_owner(c)) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE,
                                          "a package path is for the daemon's own user and root: "
                                          "send the package's bytes"));
    return;
  }
  int64_t uid;
  if (!request_user(d, c, req, &uid))
    return;
  /* the job's device by id, name or id prefix among the user's devices; a
   * whole id is taken as it is (the choice says why another user's device
   * is not eligible) */
  const char *device = admin_request_string(req, ADMIN_ARG_DEVICE);
  char device_id[CORDON_ID_HEX_SIZE] = "";
  if (device && !cordon_id_hex_valid(device)) {
    struct server_db_device dev;
    if (!request_device(d, c, req, &dev))
      return;
    snprintf(device_id, sizeof(device_id), "%s", dev.id);
    server_db_device_release(&dev);
  }
  if (has_path && !device_id[0]) {
    jobs_op_dispatch(d->jobs, c, req);
    return;
  }
  /* the bytes are in a file of ours for the call: the job reads it there */
  json_t *copy = json_deep_copy(req);
  bool bad = !copy;
  if (!bad && has_bytes)
    bad = json_object_del(copy, admin_arg_key(ADMIN_ARG_BYTES)) < 0 ||
          admin_request_set(copy, ADMIN_ARG_PACKAGE, json_string(body ? body : "")) < 0;
  if (!bad && device_id[0])
    bad = admin_request_set(copy, ADMIN_ARG_DEVICE, json_string(device_id)) < 0;
  if (bad) {
    json_decref(copy);
    admin_conn_reply(c, admin_reply_error(-ENOMEM, "out of memory"));
    return;
  }
  jobs_op_dispatch(d->jobs, c, copy);
  json_decref(copy);
}

static void daemon_op_cancel(struct daemon *d, struct admin_conn *c, const json_t *req,
                             const char *body) {
  (void)body;
  struct server_db_job j;
  if (!request_job(d, c, req, &j))
    return;
  if (server_db_job_state_is_final(j.state)) {
    char msg[CORDON_ID_HEX_SIZE + 64];
    snprintf(msg, sizeof(msg), "job %s already ended: %s", j.id, server_db_job_state_name(j.state));
    admin_conn_reply(c, admin_reply_error(CORDON_E_NOT_RUNNING, msg));
  } else {
    jobs_op_cancel(d->jobs, c, &j);
  }
  server_db_job_release(&j);
}

static void daemon_op_wait(struct daemon *d, struct admin_conn *c, const json_t *req,
                           const char *body) {
  (void)body;
  struct server_db_job j;
  if (!request_job(d, c, req, &j))
    return;
  jobs_op_wait(d->jobs, c, &j);
  server_db_job_release(&j);
}

static void daemon_op_follow(struct daemon *d, struct admin_conn *c, const json_t *req,
                             const char *body) {
  (void)body;
  struct server_db_job j;
  if (!request_job(d, c, req, &j))
    return;
  jobs_op_follow(d->jobs, c, &j);
  server_db_job_release(&j);
}

static json_t *online_of(struct daemon *d, const char *device_id) {
  /* cluster: a session here or a live lease on another instance */
  return device_id && device_id[0] ? json_boolean(cluster_device_online(d->cluster, device_id))
                                   : json_null();
}

static json_t *session_online(void *ctx, const char *device_id) {
  return online_of(ctx, device_id);
}

/* {"ok": true, key: value} (value stolen; NULL: out of memory). */
static void reply_value(struct admin_conn *c, const char *key, json_t *value) {
  json_t *reply = value ? json_pack("{s:b, s:o}", ADMIN_REPLY_OK, 1, key, value) : NULL;
  admin_conn_reply(c, reply ? reply : admin_reply_error(-ENOMEM, "out of memory"));
}

static void log_device_change(struct admin_conn *c, const char *what,
                              const struct server_db_device *dev, bool disconnected) {
  long uid, pid;
  admin_conn_peer(c, &uid, &pid);
  char u[24];
  snprintf(u, sizeof(u), "%ld", uid);
  core_log_kv(CORE_LOG_INFO, what, "device", dev->id, "user", dev->owner, "uid", u, "disconnected",
              disconnected ? "yes" : "no", NULL);
}

/* Close the device's live session, if it has one: whether it had. */
static bool close_session(struct daemon *d, const char *id, const char *why) {
  struct session *s = sessions_find(d->sessions, id);
  if (s)
    session_goaway(s, MSG_GOAWAY_REVOKED, why);
  return s != NULL;
}

/* {"ok": true, "device": the devices object of id as it is now, ...} */
static json_t *device_reply(struct daemon *d, const char *id) {
  struct server_db_device dev;
  if (server_db_device_get(d->db, id, &dev, NULL) < 0)
    return json_pack("{s:b, s:n}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_DEVICE);
  json_t *o = admin_view_device(&dev, online_of(d, dev.id));
  server_db_device_release(&dev);
  return o ? json_pack("{s:b, s:o}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_DEVICE, o) : NULL;
}

static void reply_with(struct admin_conn *c, json_t *reply, const char *key, json_t *value) {
  if (!reply || json_object_set_new(reply, key, value) < 0) {
    json_decref(reply);
    admin_conn_reply(c, admin_reply_error(-ENOMEM, "out of memory"));
    return;
  }
  admin_conn_reply(c, reply);
}

/* The revocation is committed first (the key is refused at every
 * handshake from then on), then the live session is closed. */
static void daemon_op_revoke(struct daemon *d, struct admin_conn *c, const json_t *req,
                             const char *body) {
  (void)body;
  struct server_db_device dev;
  if (!request_device(d, c, req, &dev))
    return;
  struct cordon_diag diag = {{0}};
  int r = server_db_device_revoke(d->db, dev.id, &diag);
  if (r < 0 && r != -EALREADY) {
    server_db_device_release(&dev);
    reply_db_error(c, r, &diag);
    return;
  }
  bool gone = close_session(d, dev.id, "this device was revoked");
  log_device_change(c, "device revoked", &dev, gone);
  json_t *reply = device_reply(d, dev.id);
  server_db_device_release(&dev);
  if (reply)
    json_object_set_new(reply, ADMIN_REPLY_ALREADY, json_boolean(r == -EALREADY));
  reply_with(c, reply, ADMIN_REPLY_DISCONNECTED, json_boolean(gone));
}

static void daemon_op_job(struct daemon *d, struct admin_conn *c, const json_t *req,
                          const char *body) {
  (void)body;
  struct server_db_job j;
  if (!request_job(d, c, req, &j))
    return;
  json_t *o = admin_view_job(&j, online_of(d, j.device_id));
  server_db_job_release(&j);
  reply_value(c, ADMIN_REPLY_JOB, o);
}

static void daemon_op_jobs(struct daemon *d, struct admin_conn *c, const json_t *req,
                           const char *body) {
  (void)body;
  long long limit = admin_request_int(req, ADMIN_ARG_LIMIT, DAEMON_ADMIN_JOBS_LIMIT);
  long long since = admin_request_int(req, ADMIN_ARG_SINCE, 0);
  const char *state = admin_request_string(req, ADMIN_ARG_JOB_STATE);
  struct server_db_job_filter f = {.since = since, .limit = (size_t)limit};
  if (limit < 0 || limit > ADMIN_JOBS_MAX) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "limit: 0 to 1000000 (0: all)"));
    return;
  }
  if (since < 0) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "since: Unix seconds, 0 or more"));
    return;
  }
  if (state && server_db_job_state_parse(state, &f.state) < 0) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE,
                                          "job_state: queued, sent, running, done, failed, "
                                          "expired or cancelled"));
    return;
  }
  f.has_state = state != NULL;
  if (!request_user(d, c, req, &f.user_id))
    return;
  struct server_db_device dev = {0};
  if (admin_request_get(req, ADMIN_ARG_DEVICE)) {
    if (!request_device(d, c, req, &dev))
      return;
    f.device_id = dev.id;
  }
  struct server_db_job_list l;
  struct cordon_diag diag = {{0}};
  int r = server_db_job_list_filtered(d->db, &f, &l, &diag);
  server_db_device_release(&dev);
  if (r < 0) {
    reply_db_error(c, r, &diag);
    return;
  }
  json_t *arr = admin_view_job_summaries(&l, session_online, d);
  server_db_job_list_release(&l);
  reply_value(c, ADMIN_REPLY_JOBS, arr);
}

static void daemon_op_devices(struct daemon *d, struct admin_conn *c, const json_t *req,
                              const char *body) {
  (void)body;
  int64_t uid;
  if (!request_user(d, c, req, &uid))
    return;
  struct server_db_device_list l;
  struct cordon_diag diag = {{0}};
  int r = server_db_device_list(d->db, uid, &l, &diag);
  if (r < 0) {
    reply_db_error(c, r, &diag);
    return;
  }
  json_t *arr = admin_view_devices(&l, session_online, d);
  server_db_device_list_release(&l);
  reply_value(c, ADMIN_REPLY_DEVICES, arr);
}

static void daemon_op_device(struct daemon *d, struct admin_conn *c, const json_t *req,
                             const char *body) {
  (void)body;
  struct server_db_device dev;
  if (!request_device(d, c, req, &dev))
    return;
  json_t *o = NULL;
  struct cordon_diag diag = {{0}};
  int r = admin_view_device_show(d->db, &dev, online_of(d, dev.id), &o, &diag);
  server_db_device_release(&dev);
  if (r < 0) {
    reply_db_error(c, r, &diag);
    return;
  }
  reply_value(c, ADMIN_REPLY_DEVICE, o);
}

static void daemon_op_label(struct daemon *d, struct admin_conn *c, const json_t *req,
                            const char *body) {
  (void)body;
  json_t *set = admin_request_get(req, ADMIN_ARG_SET);
  json_t *remove = admin_request_get(req, ADMIN_ARG_REMOVE);
  if (json_array_size(set) > SERVER_DB_LABELS_MAX ||
      json_array_size(remove) > SERVER_DB_LABELS_MAX) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_LIMIT, "a device has at most 32 labels"));
    return;
  }
  struct server_db_label labels[SERVER_DB_LABELS_MAX];
  const char *keys[SERVER_DB_LABELS_MAX];
  struct cordon_diag diag = {{0}};
  size_t i, n_set = json_array_size(set), n_remove = json_array_size(remove);
  json_t *v;
  json_array_foreach(set, i, v) {
    if (!json_is_string(v) || server_db_label_parse(json_string_value(v), &labels[i], &diag) < 0) {
      reply_usage(c, "set: ", diag.msg[0] ? diag.msg : "labels are KEY=VALUE strings");
      return;
    }
  }
  json_array_foreach(remove, i, v) {
    keys[i] = json_string_value(v);
    if (!keys[i] || !server_db_label_key_valid(keys[i])) {
      admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE,
                                            "remove: a label key is 1..63 of [a-z0-9._-] "
                                            "starting with a letter or digit"));
      return;
    }
  }
  struct server_db_device dev;
  if (!request_device(d, c, req, &dev))
    return;
  struct server_db_labels after;
  int r = server_db_device_label(d->db, dev.id, labels, n_set, keys, n_remove, &after, &diag);
  server_db_device_release(&dev);
  if (r < 0) {
    reply_db_error(c, r, &diag);
    return;
  }
  admin_conn_reply(c, json_pack("{s:b, s:o}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_LABELS,
                                server_db_labels_to_json(&after)));
}

static void daemon_op_rename(struct daemon *d, struct admin_conn *c, const json_t *req,
                             const char *body) {
  (void)body;
  struct server_db_device dev;
  if (!request_device(d, c, req, &dev))
    return;
  struct cordon_diag diag = {{0}};
  int r = server_db_device_rename(d->db, dev.id, admin_request_string(req, ADMIN_ARG_NAME), &diag);
  if (r < 0) {
    server_db_device_release(&dev);
    reply_db_error(c, r == -EPERM ? -EINVAL : r, &diag);
    return;
  }
  log_device_change(c, "device renamed", &dev, false);
  json_t *reply = device_reply(d, dev.id);
  reply_with(c, reply, ADMIN_REPLY_OLD_NAME, json_string(dev.name));
  server_db_device_release(&dev);
}

/* approve and reject: of a pending device only (approve of an active one
 * is answered "already", as revoke is). */
static void decide(struct daemon *d, struct admin_conn *c, const json_t *req, bool approve) {
  struct server_db_device dev;
  if (!request_device(d, c, req, &dev))
    return;
  struct cordon_diag diag = {{0}};
  int r = 0;
  bool already = approve && dev.state == SERVER_DB_DEVICE_ACTIVE;
  if (already)
    r = 0;
  else if (dev.state == SERVER_DB_DEVICE_ACTIVE)
    r = cordon_diag_set(&diag, -EINVAL, "device %s is active, not pending: revoke it", dev.id);
  else if (dev.state != SERVER_DB_DEVICE_PENDING)
    r = cordon_diag_set(&diag, -ENOENT, "device %s (%s) is revoked, not pending", dev.id,
                        dev.owner);
  else if (approve)
    r = server_db_device_approve(d->db, dev.id, &diag);
  else
    r = server_db_device_revoke(d->db, dev.id, &diag);
  if (r < 0) {
    server_db_device_release(&dev);
    reply_db_error(c, r, &diag);
    return;
  }
  bool gone = !approve && close_session(d, dev.id, "this device was rejected");
  if (!already)
    log_device_change(c, approve ? "device approved" : "device rejected", &dev, gone);
  json_t *reply = device_reply(d, dev.id);
  server_db_device_release(&dev);
  if (approve)
    reply_with(c, reply, ADMIN_REPLY_ALREADY, json_boolean(already));
  else
    reply_with(c, reply, ADMIN_REPLY_DISCONNECTED, json_boolean(gone));
}

static void daemon_op_approve(struct daemon *d, struct admin_conn *c, const json_t *req,
                              const char *body) {
  (void)body;
  decide(d, c, req, true);
}

static void daemon_op_reject(struct daemon *d, struct admin_conn *c, const json_t *req,
                             const char *body) {
  (void)body;
  decide(d, c, req, false);
}

static void daemon_op_pair_codes(struct daemon *d, struct admin_conn *c, const json_t *req,
                                 const char *body) {
  (void)body;
  int64_t uid;
  if (!request_user(d, c, req, &uid))
    return;
  struct server_db_code_list l = {0};
  struct cordon_diag diag = {{0}};
  int r = server_db_code_list(d->db, uid, &l, &diag);
  if (r < 0) {
    reply_db_error(c, r, &diag);
    return;
  }
  json_t *arr = admin_view_codes(&l);
  server_db_code_list_release(&l);
  reply_value(c, ADMIN_REPLY_CODES, arr);
}

static void daemon_op_pair_code_revoke(struct daemon *d, struct admin_conn *c, const json_t *req,
                                       const char *body) {
  (void)body;
  char id[SERVER_DB_CODE_ID_SIZE];
  server_cli_code_id(admin_request_string(req, ADMIN_ARG_CODE), id);
  struct cordon_diag diag = {{0}};
  int r = server_db_code_revoke(d->db, id, &diag);
  if (r < 0 && r != -EALREADY) {
    reply_db_error(c, r, &diag);
    return;
  }
  long uid, pid;
  admin_conn_peer(c, &uid, &pid);
  char u[24];
  snprintf(u, sizeof(u), "%ld", uid);
  if (r == 0)
    core_log_kv(CORE_LOG_INFO, "pairing code revoked", "code", id, "uid", u, NULL);
  admin_conn_reply(c, json_pack("{s:b, s:s, s:b}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_CODE_ID, id,
                                ADMIN_REPLY_ALREADY, r == -EALREADY));
}

/* A watch: every event but output, as lines, until the client goes. */
struct watcher {
  struct daemon *d;
  struct admin_conn *conn;
  uint64_t token;
};

static void watch_gone(void *ctx, struct admin_conn *c) {
  struct watcher *w = ctx;
  (void)c;
  events_unsubscribe(w->d->events, w->token);
  free(w);
}

static const char *event_name(enum event_kind k) {
  switch (k) {
  case EVENT_JOB_STATE:
    return "job_state";
  case EVENT_JOB_OUTPUT:
    return "output";
  case EVENT_DEVICE_ONLINE:
    return "device_online";
  case EVENT_DEVICE_OFFLINE:
    return "device_offline";
  }
  return "unknown";
}

static void watch_event(void *ctx, const struct event *ev) {
  struct watcher *w = ctx;
  if (ev->kind == EVENT_JOB_OUTPUT)
    return;
  json_t *line = json_pack("{s:s, s:s?, s:s?, s:s?, s:I}", ADMIN_REPLY_EVENT, event_name(ev->kind),
                           "device", ev->device_id, "user", ev->user, "job", ev->job_id, "time",
                           (json_int_t)(core_wall_ms() / 1000));
  if (line && ev->kind == EVENT_JOB_STATE) {
    json_object_set_new(line, "state", json_string(ev->state ? ev->state : "unknown"));
    json_object_set_new(line, "code", ev->code ? json_string(ev->code) : json_null());
  }
  (void)admin_conn_stream_send(w->conn, line);
}

static void daemon_op_watch(struct daemon *d, struct admin_conn *c, const json_t *req,
                            const char *body) {
  (void)req;
  (void)body;
  struct watcher *w = calloc(1, sizeof(*w));
  if (!w || events_subscribe(d->events, NULL, watch_event, w, &w->token) < 0) {
    free(w);
    admin_conn_reply(c, admin_reply_error(-ENOMEM, "out of memory"));
    return;
  }
  w->d = d;
  w->conn = c;
  if (admin_conn_stream_start(c, watch_gone, w) < 0) {
    events_unsubscribe(d->events, w->token);
    free(w);
  }
}

static void (*const op_handlers[])(struct daemon *d, struct admin_conn *c, const json_t *req,
                                   const char *body) = {
#define DAEMON_OP_HANDLER_(id, name, handler, required, optional, usage) [ADMIN_OP_##id] = handler,
    ADMIN_OPS(DAEMON_OP_HANDLER_)
#undef DAEMON_OP_HANDLER_
};

static void on_admin_request(void *data, struct admin_conn *c, const json_t *req, enum admin_op op,
                             const char *body) {
  struct daemon *d = data;
  log_admin(c, op, req);
  /* Group commit (server/jobs.c): a dispatch joins the loop turn's commit
   * group and is answered once it is durable. Every other op that reads
   * the database answers at once, so the group is committed first: no
   * reply tells of a change that is not durable. */
  if (op != ADMIN_OP_DISPATCH && op != ADMIN_OP_HELLO && op != ADMIN_OP_PING)
    server_db_group_commit(d->db, NULL);
  op_handlers[op](d, c, req, body);
}

/* ---- metrics ---- */

/* cordon_jobs: the live states (queued, sent, running) at each scrape, an
 * index range each; the finished ones, whose count is a scan of the whole
 * history (about 0.1 s a million jobs, on the loop), at most once every
 * DAEMON_FINISHED_COUNT_MS, so that a scrape does not stall every session
 * of a server with a long history (docs/OPERATIONS.md, "Metrics"). */
#define DAEMON_FINISHED_COUNT_MS 60000

static int metrics_job_counts(struct daemon *d, size_t out[SERVER_DB_JOB_STATE_COUNT]) {
  size_t live[SERVER_DB_JOB_STATE_COUNT];
  int err = server_db_job_count_live(d->db, live, NULL);
  if (err)
    return err;
  uint64_t now = core_mono_ms();
  if (!d->finished_at || now - d->finished_at >= DAEMON_FINISHED_COUNT_MS) {
    size_t all[SERVER_DB_JOB_STATE_COUNT];
    if ((err = server_db_job_count_by_state(d->db, all, NULL)))
      return err;
    memcpy(d->finished, all, sizeof(all));
    d->finished_at = now ? now : 1;
  }
  for (int i = 0; i < SERVER_DB_JOB_STATE_COUNT; i++) {
    bool is_live =
        i == SERVER_DB_JOB_QUEUED || i == SERVER_DB_JOB_SENT || i == SERVER_DB_JOB_RUNNING;
    out[i] = is_live ? live[i] : d->finished[i];
  }
  return 0;
}

static void on_http(void *data, const struct http_request *req, struct http_response *out) {
  struct daemon *d = data;
  if (strcmp(req->path, "/healthz") == 0) {
    bool ok = d->phase == DAEMON_RUNNING;
    out->status = ok ? 200 : 503;
    out->body = strdup(ok ? "ok\n" : "draining\n");
    out->len = out->body ? strlen(out->body) : 0;
    return;
  }
  if (strcmp(req->path, "/metrics") != 0) {
    out->status = 404;
    out->body = strdup("not found: try /metrics or /healthz\n");
    out->len = out->body ? strlen(out->body) : 0;
    return;
  }
  struct metrics_gauges g = {
      .sessions_online = sessions_count(d->sessions),
      .connections = net_server_count(d->srv),
      .draining = d->phase != DAEMON_RUNNING,
      .start_time_s = d->start_time_s,
      .db_commits = server_db_commit_count(d->db),
      .instance = cluster_instance(d->cluster),
  };
  size_t devs[2], jobs[SERVER_DB_JOB_STATE_COUNT];
  if (server_db_device_count_by_state(d->db, devs, NULL) == 0 && metrics_job_counts(d, jobs) == 0) {
    g.have_db = true;
    g.devices_active = devs[SERVER_DB_DEVICE_ACTIVE];
    g.devices_revoked = devs[SERVER_DB_DEVICE_REVOKED];
    for (int i = 0; i < SERVER_DB_JOB_STATE_COUNT; i++)
      g.jobs[i] = jobs[i];
  }
  if (metrics_render(&g, &out->body, &out->len) < 0) {
    out->status = 500;
    return;
  }
  out->status = 200;
  out->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/* ---- lifecycle ---- */

static void daemon_shutdown(struct daemon *d) {
  if (d->phase == DAEMON_STOPPING)
    return;
  d->phase = DAEMON_STOPPING;
  (void)notify_send(d->notify, "STOPPING=1\nSTATUS=stopping");
  sessions_shutdown(d->sessions);
  net_server_close(d->srv);
  admin_sock_close(d->admin);
  http_server_close(d->http);
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
  uv_close((uv_handle_t *)&d->sighup, NULL);
  uv_close((uv_handle_t *)&d->status_timer, NULL);
  uv_close((uv_handle_t *)&d->watchdog_timer, NULL);
  uv_close((uv_handle_t *)&d->drain_timer, NULL);
  cluster_close(d->cluster);
  keysync_close(d->keysync);
  jobs_close(d->jobs);
}

static void on_drain_tick(uv_timer_t *t) {
  struct daemon *d = t->data;
  size_t left = jobs_in_flight_online(d);
  bool timeout = core_mono_ms() >= d->drain_deadline_ms;
  if (left > 0 && !timeout)
    return;
  char n[24];
  snprintf(n, sizeof(n), "%zu", left);
  if (left == 0)
    core_log_kv(CORE_LOG_INFO, "drained: shutting down", "jobs_left", n, NULL);
  else
    core_log_kv(CORE_LOG_WARN, "drain timed out: shutting down", "jobs_left", n, NULL);
  daemon_shutdown(d);
}

static void daemon_drain(struct daemon *d, int signum) {
  size_t left = jobs_in_flight_online(d);
  char sig[16], n[24], timeout[24];
  snprintf(sig, sizeof(sig), "%d", signum);
  snprintf(n, sizeof(n), "%zu", left);
  snprintf(timeout, sizeof(timeout), "%u", d->drain_timeout_s);
  core_log_kv(CORE_LOG_INFO, "signal: draining, then shutting down", "signal", sig, "jobs_running",
              n, "drain_timeout_s", timeout, NULL);
  d->phase = DAEMON_DRAINING;
  jobs_drain(d->jobs);
  d->drain_deadline_ms = core_mono_ms() + (int64_t)d->drain_timeout_s * 1000;
  (void)notify_send(d->notify, "STOPPING=1");
  update_status(d);
  uv_timer_start(&d->drain_timer, on_drain_tick, 0, DRAIN_POLL_MS);
}

static void on_signal(uv_signal_t *sig, int signum) {
  struct daemon *d = sig->data;
  if (d->phase == DAEMON_RUNNING) {
    daemon_drain(d, signum);
    return;
  }
  char s[16];
  snprintf(s, sizeof(s), "%d", signum);
  core_log_kv(CORE_LOG_WARN, "signal again: shutting down now", "signal", s, NULL);
  daemon_shutdown(d);
}

static void on_sighup(uv_signal_t *sig, int signum) {
  (void)signum;
  reload_keys(sig->data, false);
  if (!logfile_active()) {
    core_log_kv(CORE_LOG_INFO, "SIGHUP: no log file to reopen", "log", log_target(), NULL);
    return;
  }
  struct cordon_diag diag = {{0}};
  if (logfile_reopen(&diag) < 0)
    core_log_kv(CORE_LOG_ERROR, "SIGHUP: the log file was not reopened", "path", logfile_path(),
                "error", diag.msg, NULL);
  else
    core_log_kv(CORE_LOG_INFO, "SIGHUP: log file reopened", "path", logfile_path(), NULL);
}

static void hex8(const uint8_t *key, char out[17]) {
  sodium_bin2hex(out, 17, key, 8);
}

static int load_keys(struct daemon *d, struct cordon_diag *diag) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", d->state_dir, SERVER_NOISE_KEY_FILE);
  int r = keys_read_file(path, KEYFILE_NOISE_SECRET, &d->noise_priv, diag);
  if (r < 0)
    return r;
  r = server_keyring_load(d->state_dir, &d->keyring, diag);
  if (r < 0)
    return r;
  d->ticket_sk = d->keyring.ticket_sk;
  memcpy(d->ticket_pk, d->keyring.ticket_pk, sizeof(d->ticket_pk));
  memcpy(d->publisher_pk, d->keyring.publisher_pk[0], sizeof(d->publisher_pk));
  /* the server id: stable, derived from its Noise public key */
  uint8_t npub[NOISE_KEY_LEN];
  noise_public_key(d->noise_priv, npub);
  crypto_generichash(d->server_id, sizeof(d->server_id), npub, sizeof(npub), NULL, 0);
  return 0;
}

/* The public halves, so that a key that changed between two starts shows
 * in the log (never a secret). */
static void log_keys(struct daemon *d) {
  uint8_t npub[NOISE_KEY_LEN];
  noise_public_key(d->noise_priv, npub);
  char n[17], t[17], p[17], id[CORDON_ID_HEX_SIZE];
  hex8(npub, n);
  hex8(d->ticket_pk, t);
  hex8(d->publisher_pk, p);
  cordon_id_to_hex(d->server_id, id);
  core_log_kv(CORE_LOG_INFO, "keys loaded", "server_id", id, "noise_public", n, "ticket_public", t,
              "publisher_public", p, NULL);
}

/* cluster: another server queued a job, perhaps for a device here */
static void on_cluster_queued(void *data) {
  struct daemon *d = data;
  jobs_scan_queue(d->jobs);
}

static void on_keys_installed(void *data, uint64_t serial) {
  (void)serial;
  reload_keys(data, true);
}

static void on_cluster_sweep(void *data) {
  struct daemon *d = data;
  jobs_sweep_queue(d->jobs);
}

/* The parts, before anything listens. 0 or -ENOMEM. */
static int compose(struct daemon *d, const struct daemon_options *opt) {
  const struct cluster_hooks cluster_hooks = {
      .data = d, .queued = on_cluster_queued, .sweep = on_cluster_sweep};
  const struct session_hooks hooks = {
      .data = d,
      .pair_hello = on_pair_hello,
      .pair_proof = on_pair_proof,
      .message = on_session_message,
      .closed = on_session_closed,
      .online = on_session_online,
  };
  d->events = events_new();
  if (!d->events)
    return -ENOMEM;
  int r = sessions_new(d->db, d->server_id, &hooks, &d->sessions);
  if (r == 0)
    r = cluster_new(d->loop, d->db, d->sessions, d->events, d->noise_priv, NOISE_KEY_LEN,
                    d->state_dir, &cluster_hooks, &d->cluster);
  if (r == 0) {
    const struct keysync_hooks kh = {.data = d, .installed = on_keys_installed};
    r = keysync_new(d->loop, d->db, d->state_dir, d->noise_priv, &d->keyring, &kh, &d->keysync);
  }
  if (r == 0)
    r = pair_new(d->db, d->ticket_pk, d->publisher_pk, &d->pair);
  if (r == 0)
    pair_set_require_approval(d->pair, opt->require_approval);
  if (r == 0) /* run --advertise */
    sessions_set_servers(d->sessions, opt->advertise, opt->n_advertise);
  if (r == 0) {
    /* CORDON_RESULT_STORE_MAX: for tests, a lower cap on a result stored
     * with its output (docs/OPERATIONS.md, "A result the server cannot
     * store"); never above SERVER_DB_RESULT_MAX */
    const char *rmax = getenv("CORDON_RESULT_STORE_MAX");
    const struct jobs_config cfg = {
        .loop = d->loop,
        .db = d->db,
        .sessions = d->sessions,
        .state_dir = d->state_dir,
        .ticket_sk = d->ticket_sk,
        .publisher_pk = d->publisher_pk,
        .keyring = &d->keyring,
        .grace_s = opt->job_grace_s,
        .queue_ttl_s = opt->queue_ttl_s,
        .result_max = rmax ? (size_t)strtoull(rmax, NULL, 10) : 0,
        .events = d->events,
    };
    r = jobs_new(&cfg, &d->jobs);
  }
  return r;
}

/* Where the lines go from now on: a file, the journal or stderr. */
static int open_log(const struct daemon_options *opt, struct cordon_diag *diag) {
  if (opt->log_file)
    return logfile_open(opt->log_file, diag);
  (void)journal_install_if_stderr(); /* no journal socket after all: stderr */
  return 0;
}

static void start_handles(struct daemon *d) {
  uv_signal_init(d->loop, &d->sigterm);
  uv_signal_init(d->loop, &d->sigint);
  uv_signal_init(d->loop, &d->sighup);
  d->sigterm.data = d->sigint.data = d->sighup.data = d;
  uv_signal_start(&d->sigterm, on_signal, SIGTERM);
  uv_signal_start(&d->sigint, on_signal, SIGINT);
  uv_signal_start(&d->sighup, on_sighup, SIGHUP);
  signal(SIGPIPE, SIG_IGN);
  uv_timer_init(d->loop, &d->status_timer);
  uv_timer_init(d->loop, &d->watchdog_timer);
  uv_timer_init(d->loop, &d->drain_timer);
  d->status_timer.data = d->watchdog_timer.data = d->drain_timer.data = d;
  uint64_t wd = notify_watchdog_usec();
  if (d->notify && wd) {
    uint64_t every = wd / 2000; /* half the interval, in ms */
    uv_timer_start(&d->watchdog_timer, on_watchdog_tick, 0, every ? every : 1);
    d->watchdog_on = true;
  }
  if (d->notify)
    uv_timer_start(&d->status_timer, on_status_tick, DAEMON_STATUS_MS, DAEMON_STATUS_MS);
}

static void format_addr(const char *host, int port, char *buf, size_t size) {
  snprintf(buf, size, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

/* Each connection is a descriptor: raise the soft limit toward what
 * max_conns needs (the hard limit caps it), and say so when it cannot. */
static void raise_fd_limit(unsigned max_conns) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
    return;
  rlim_t want = (rlim_t)max_conns + 64; /* the database, logs, sockets */
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    char have[24], need[24];
    snprintf(have, sizeof(have), "%llu", (unsigned long long)rl.rlim_cur);
    snprintf(need, sizeof(need), "%llu", (unsigned long long)want);
    core_log_kv(CORE_LOG_WARN, "the open-file limit is below what --max-connections needs", "limit",
                have, "needed", need, NULL);
  }
}

int daemon_run(const struct daemon_options *opt, struct cordon_diag *diag) {
  struct daemon *d = calloc(1, sizeof(*d));
  if (!d)
    return -ENOMEM;
  d->state_dir = opt->state_dir;
  core_log_set_level(opt->log_level);
  d->drain_timeout_s =
      opt->drain_timeout_s < 0 ? DAEMON_DRAIN_TIMEOUT_S : (unsigned)opt->drain_timeout_s;
  d->start_time_s = core_wall_ms() / 1000;
  if (opt->limits)
    d->limits = *opt->limits;
  else
    net_limits_default(&d->limits);
  d->limits.quiet_ms = SERVER_PING_MS * 2;
  d->limits.idle_ms = SERVER_PING_MS * 4;
  /* the keys first (read only, and the friendliest error for a state that
   * was never made); everything that writes comes after the lock */
  int r = load_keys(d, diag);
  if (r == 0)
    r = server_lock_take(d->state_dir, &d->lock, diag);
  if (r == 0)
    r = server_db_open(d->state_dir, 0, &d->db, diag);
  struct cordon_diag notify_diag = {{0}};
  bool notify_bad = r == 0 && notify_open(&d->notify, &notify_diag) < 0;
  if (r == 0)
    r = open_log(opt, diag);
  if (r == 0 && notify_bad) /* not fatal: only systemd would have listened */
    core_log_kv(CORE_LOG_WARN, "no readiness notifications", "error", notify_diag.msg, NULL);
  if (r == 0) {
    struct cordon_diag ck = {{0}};
    if (server_db_checkpoint_behind(d->db, &ck) < 0) /* not fatal: then in COMMIT, as SQLite does */
      core_log_kv(CORE_LOG_WARN, "checkpoints stay on the loop", "error", ck.msg, NULL);
    server_db_clock_follow(d->db); /* steps of the host's clock move no deadline */
  }
  if (r == 0)
    r = cluster_recover_devices(d->db, diag); /* cluster: not another instance's devices */
  if (r < 0)
    goto out_free;
  raise_fd_limit(d->limits.max_conns);
  d->loop = malloc(sizeof(*d->loop));
  if (!d->loop || uv_loop_init(d->loop) < 0) {
    free(d->loop);
    d->loop = NULL;
    r = -ENOMEM;
    goto out_free;
  }
  if ((r = compose(d, opt)) < 0)
    goto out_loop;
  (void)keysync_check(d->keysync); /* a rotation made while this server was down */
  jobs_recover(d->jobs);           /* before anything listens */
  r = net_server_new(d->loop, opt->host, opt->port, d->noise_priv,
                     (1u << NOISE_MODE_SESSION) | (1u << NOISE_MODE_PAIRING), &d->limits,
                     &sessions_net_ops, d->sessions, &d->srv);
  if (r < 0) {
    cordon_diag_set(diag, r, "cannot listen on %s:%d: %s", opt->host, opt->port, strerror(-r));
    goto out_loop;
  }
  char sock[4096];
  snprintf(sock, sizeof(sock), "%s/%s", d->state_dir, ADMIN_SOCKET_FILE);
  /* CORDON_ADMIN_GROUP, _STREAM_MAX, _REQUEST_TIMEOUT_MS, _IDLE_TIMEOUT_MS: for tests
   * (docs/protocol/admin.md) */
  const char *group = getenv("CORDON_ADMIN_GROUP");
  const char *smax = getenv("CORDON_ADMIN_STREAM_MAX");
  const char *rto = getenv("CORDON_ADMIN_REQUEST_TIMEOUT_MS"),
             *ito = getenv("CORDON_ADMIN_IDLE_TIMEOUT_MS");
  const struct admin_sock_config acfg = {
      .path = sock,
      .spool_dir = d->state_dir,
      .group = group && *group ? group : ADMIN_GROUP,
      .stream_queue_max = smax ? (size_t)strtoull(smax, NULL, 10) : 0,
      .request_timeout_ms = rto ? strtoull(rto, NULL, 10) : 0,
      .idle_timeout_ms = ito ? strtoull(ito, NULL, 10) : 0,
  };
  r = admin_sock_open(d->loop, &acfg, on_admin_request, d, &d->admin);
  if (r < 0) {
    cordon_diag_set(diag, -EIO, "cannot bind the admin socket %s: %s", sock, uv_strerror(r));
    r = -EIO;
    goto out_unwind;
  }
  if (opt->metrics_host) {
    r = http_server_open(d->loop, opt->metrics_host, opt->metrics_port, on_http, d, &d->http);
    if (r < 0) {
      cordon_diag_set(diag, -EIO, "cannot listen for metrics on %s:%d: %s", opt->metrics_host,
                      opt->metrics_port, uv_strerror(r));
      r = -EIO;
      admin_sock_close(d->admin);
      unlink(sock);
      goto out_unwind;
    }
  }
  start_handles(d);
  jobs_start(d->jobs);
  cluster_start(d->cluster);
  keysync_start(d->keysync);
  log_keys(d);
  char listen[300], metrics[300] = "-";
  format_addr(opt->host, net_server_port(d->srv), listen, sizeof(listen));
  if (d->http)
    format_addr(opt->metrics_host, http_server_port(d->http), metrics, sizeof(metrics));
  char pid[24];
  snprintf(pid, sizeof(pid), "%ld", (long)getpid());
  core_log_kv(CORE_LOG_INFO, "listening", "listen", listen, "state", d->state_dir, "metrics",
              metrics, "log", log_target(), "log_level", core_log_level_name(opt->log_level), "pid",
              pid, "watchdog", d->watchdog_on ? "yes" : "no", NULL);
  update_status(d);
  (void)notify_send(d->notify, "READY=1");
  uv_run(d->loop, UV_RUN_DEFAULT);
  unlink(sock); /* ours: we hold the lock */
  core_log_kv(CORE_LOG_INFO, "stopped", NULL);
  r = uv_loop_close(d->loop);
  if (r != 0) {
    cordon_diag_set(diag, CORDON_E_INTERNAL, "event loop did not close cleanly: %s",
                    uv_strerror(r));
    r = CORDON_E_INTERNAL;
  }
  goto out_loop;
out_unwind:
  d->phase = DAEMON_STOPPING;
  net_server_close(d->srv);
  uv_run(d->loop, UV_RUN_DEFAULT);
  uv_loop_close(d->loop);
out_loop:
  if (r != CORDON_E_INTERNAL)
    free(d->loop);
out_free:
  jobs_free(d->jobs);
  events_free(d->events);
  admin_sock_free(d->admin);
  pair_free(d->pair);
  cluster_free(d->cluster);
  keysync_free(d->keysync);
  sessions_free(d->sessions);
  server_db_close(d->db);
  notify_close(d->notify);
  server_lock_release(d->lock);
  sodium_free(d->noise_priv);
  server_keyring_release(&d->keyring);
  free(d);
  return r;
}
