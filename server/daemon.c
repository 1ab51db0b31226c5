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
#include "server/db.h"
#include "server/events.h"
#include "server/http.h"
#include "server/jobs.h"
#include "server/keys.h"
#include "server/lock.h"
#include "server/logfile.h"
#include "server/metrics.h"
#include "server/notify.h"
#include "server/pair.h"
#include "server/session.h"
#include "svc/journal.h"

#define DRAIN_POLL_MS 100

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
  struct pair_ctx *pair;
  struct events *events;
  struct jobs *jobs;
  struct admin_sock *admin;
  struct http_server *http;
  struct notify *notify;
  uv_signal_t sigterm, sigint, sighup;
  uv_timer_t status_timer, watchdog_timer, drain_timer;
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
  jobs_on_device_online(d->jobs, s);
}

/* SIGHUP: `cordon-server keys rotate` or `retire` committed new keys. */
static void reload_keys(struct daemon *d) {
  struct cordon_diag diag = {{0}};
  size_t before = d->keyring.n_chain;
  if (server_keyring_reload(d->state_dir, &d->keyring, &diag) < 0) {
    core_log_kv(CORE_LOG_ERROR, "SIGHUP: the keys were not reloaded", "error", diag.msg, NULL);
    return;
  }
  memcpy(d->ticket_pk, d->keyring.ticket_pk, sizeof(d->ticket_pk));
  memcpy(d->publisher_pk, d->keyring.publisher_pk[0], sizeof(d->publisher_pk));
  if (d->keyring.n_chain == before)
    return;
  char serial[24];
  snprintf(serial, sizeof(serial), "%zu", d->keyring.n_chain);
  core_log_kv(CORE_LOG_INFO, "SIGHUP: keys reloaded, announcing them to connected agents", "serial",
              serial, NULL);
  sessions_foreach(d->sessions, send_keys, d);
}

static void on_session_closed(void *data, struct session *s) {
  struct daemon *d = data;
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
  (void)server_db_job_count_by_state(d->db, jobs, NULL);
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
  char u[24], p[24];
  snprintf(u, sizeof(u), "%ld", uid);
  snprintf(p, sizeof(p), "%ld", pid);
  bool reads = op == ADMIN_OP_PING || op == ADMIN_OP_SESSIONS;
  const char *user = admin_request_string(req, ADMIN_ARG_USER);
  const char *device = admin_request_string(req, ADMIN_ARG_DEVICE);
  const char *package = admin_request_string(req, ADMIN_ARG_PACKAGE);
  const char *job = admin_request_string(req, ADMIN_ARG_JOB);
  core_log_kv(reads ? CORE_LOG_DEBUG : CORE_LOG_INFO, "admin request", "op", admin_op_name(op),
              "uid", u, "pid", p, "user", user ? user : "-", "device", device ? device : "-",
              "package", package ? package : "-", "job", job ? job : "-", NULL);
}

static void daemon_op_ping(struct daemon *d, struct admin_conn *c, const json_t *req) {
  (void)d;
  (void)req;
  admin_conn_reply(c, admin_reply_ok());
}

static void add_session(struct session *s, void *data) {
  json_array_append_new(data,
                        json_pack("{s:s, s:s, s:s, s:I}", "device", s->device_id, "user", s->user,
                                  "address", s->addr, "since", (json_int_t)s->since));
}

static void daemon_op_sessions(struct daemon *d, struct admin_conn *c, const json_t *req) {
  (void)req;
  json_t *list = json_array();
  sessions_foreach(d->sessions, add_session, list);
  admin_conn_reply(c, json_pack("{s:b, s:o, s:b}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_SESSIONS, list,
                                ADMIN_REPLY_DRAINING, d->phase != DAEMON_RUNNING));
}

static void daemon_op_dispatch(struct daemon *d, struct admin_conn *c, const json_t *req) {
  if (d->phase != DAEMON_RUNNING) {
    if (jobs_op_dispatch_known(d->jobs, c, req))
      return; /* its key names a job that exists: that one */
    core_log_kv(CORE_LOG_INFO, "dispatch refused", "user",
                admin_request_string(req, ADMIN_ARG_USER), "reason", "draining", NULL);
    admin_conn_reply(c, admin_reply_error(-ESHUTDOWN, "the server is shutting down: it takes "
                                                      "no new jobs"));
    return;
  }
  jobs_op_dispatch(d->jobs, c, req);
}

static void daemon_op_cancel(struct daemon *d, struct admin_conn *c, const json_t *req) {
  jobs_op_cancel(d->jobs, c, req);
}

static void daemon_op_wait(struct daemon *d, struct admin_conn *c, const json_t *req) {
  jobs_op_wait(d->jobs, c, req);
}

/* The database part of a revoke is the command's; the live session is ours. */
static void daemon_op_revoke(struct daemon *d, struct admin_conn *c, const json_t *req) {
  const char *id = admin_request_string(req, ADMIN_ARG_DEVICE);
  struct session *s = sessions_find(d->sessions, id);
  long uid, pid;
  admin_conn_peer(c, &uid, &pid);
  char u[24];
  snprintf(u, sizeof(u), "%ld", uid);
  core_log_kv(CORE_LOG_INFO, "device revoked", "device", id, "user", s ? s->user : "-", "addr",
              s ? s->addr : "-", "uid", u, "disconnected", s ? "yes" : "no", NULL);
  if (s)
    session_goaway(s, MSG_GOAWAY_REVOKED, "this device was revoked");
  admin_conn_reply(c,
                   json_pack("{s:b, s:b}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_DISCONNECTED, s != NULL));
}

static void (*const op_handlers[])(struct daemon *d, struct admin_conn *c, const json_t *req) = {
#define DAEMON_OP_HANDLER_(id, name, handler, required, optional, usage) [ADMIN_OP_##id] = handler,
    ADMIN_OPS(DAEMON_OP_HANDLER_)
#undef DAEMON_OP_HANDLER_
};

static void on_admin_request(void *data, struct admin_conn *c, json_t *req) {
  struct daemon *d = data;
  enum admin_op op;
  struct cordon_diag diag = {{0}};
  int r = admin_request_check(req, &op, &diag);
  if (r < 0) {
    long uid, pid;
    admin_conn_peer(c, &uid, &pid);
    char u[24];
    snprintf(u, sizeof(u), "%ld", uid);
    core_log_kv(CORE_LOG_WARN, "admin request refused", "uid", u, "error", diag.msg, NULL);
    admin_conn_reply(c, admin_reply_error(r, diag.msg));
    return;
  }
  log_admin(c, op, req);
  op_handlers[op](d, c, req);
}

/* ---- metrics ---- */

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
  };
  size_t devs[2], jobs[SERVER_DB_JOB_STATE_COUNT];
  if (server_db_device_count_by_state(d->db, devs, NULL) == 0 &&
      server_db_job_count_by_state(d->db, jobs, NULL) == 0) {
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
  reload_keys(sig->data);
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

/* The parts, before anything listens. 0 or -ENOMEM. */
static int compose(struct daemon *d, const struct daemon_options *opt) {
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
    r = pair_new(d->db, d->ticket_pk, d->publisher_pk, &d->pair);
  if (r == 0)
    pair_set_require_approval(d->pair, opt->require_approval);
  if (r == 0) {
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
  if (r == 0)
    r = server_db_device_set_all_offline(d->db, diag);
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
  jobs_recover(d->jobs); /* before anything listens */
  r = net_server_new(d->loop, opt->host, opt->port, d->noise_priv,
                     (1u << NOISE_MODE_SESSION) | (1u << NOISE_MODE_PAIRING), &d->limits,
                     &sessions_net_ops, d->sessions, &d->srv);
  if (r < 0) {
    cordon_diag_set(diag, r, "cannot listen on %s:%d: %s", opt->host, opt->port, strerror(-r));
    goto out_loop;
  }
  char sock[4096];
  snprintf(sock, sizeof(sock), "%s/%s", d->state_dir, ADMIN_SOCKET_FILE);
  r = admin_sock_open(d->loop, sock, on_admin_request, d, &d->admin);
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
  sessions_free(d->sessions);
  server_db_close(d->db);
  notify_close(d->notify);
  server_lock_release(d->lock);
  sodium_free(d->noise_priv);
  server_keyring_release(&d->keyring);
  free(d);
  return r;
}
