/* Jobs in the daemon (server/jobs.h): choosing a device, tickets,
 * streaming the package in chunks, results recorded exactly once, cancel,
 * expiry. */
#include "server/jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/id.h"
#include "core/log.h"
#include "core/manifest.h"
#include "proto/cpkg.h"
#include "proto/result_msg.h"
#include "proto/ticket.h"
#include "server/admin_ops.h"
#include "server/metrics.h"

#define JOB_CHUNK (60u << 10)
#define JOB_SEND_WINDOW (1u << 20) /* queued bytes before the sender waits */
#define JOB_TICKET_TTL_S 600

struct waiter {
  struct admin_conn *conn;
  struct waiter *next;
};

struct jobs {
  uv_loop_t *loop;
  struct server_db *db;
  struct sessions *sessions;
  const uint8_t *ticket_sk, *publisher_pk;
  unsigned grace_s;
  uv_timer_t expiry;
  bool started;
  struct live_job *list;
};

/* A job the daemon is sending or waiting for. */
struct live_job {
  struct jobs *owner;
  char id[CORDON_ID_HEX_SIZE];
  uint8_t raw_id[CORDON_ID_LEN];
  char device_id[CORDON_ID_HEX_SIZE];
  char user[SERVER_DB_NAME_MAX + 1];
  char package[160];       /* name@version, for the log */
  int64_t dispatched_ms;   /* core_mono_ms of the request */
  struct session *session; /* while it is being sent */
  int fd;                  /* the package, while sending */
  uint64_t size, sent;
  uv_timer_t pump;
  struct waiter *waiters;
  struct live_job *next;
};

static void job_unlink(struct live_job *j) {
  for (struct live_job **pp = &j->owner->list; *pp; pp = &(*pp)->next)
    if (*pp == j) {
      *pp = j->next;
      break;
    }
}

static void job_pump_closed(uv_handle_t *h) {
  free(h->data);
}

/* A waiter whose job is not over when the daemon stops: the job id and its
 * state, not an error about the job (it goes on; its result is recorded
 * when the agent delivers it to the next daemon). */
static json_t *reply_stopped(struct live_job *j) {
  struct server_db_job job;
  const char *state = "unknown";
  if (server_db_job_get(j->owner->db, j->id, &job, NULL) == 0) {
    state = server_db_job_state_name(job.state);
    server_db_job_release(&job);
  }
  char msg[400];
  snprintf(msg, sizeof(msg),
           "the server stopped before job %s finished (it is %s on device %s); `cordon-server "
           "job %s` shows its result once the agent delivers it",
           j->id, state, j->device_id, j->id);
  json_t *e = admin_reply_error(-ESHUTDOWN, msg);
  json_object_set_new(e, ADMIN_REPLY_JOB_ID, json_string(j->id));
  json_object_set_new(e, ADMIN_REPLY_STATE, json_string(state));
  return e;
}

static void job_free(struct live_job *j) {
  job_unlink(j);
  if (j->fd >= 0)
    close(j->fd);
  for (struct waiter *w = j->waiters, *n; w; w = n) {
    n = w->next;
    admin_conn_reply(w->conn, reply_stopped(j));
    free(w);
  }
  uv_close((uv_handle_t *)&j->pump, job_pump_closed);
}

static struct live_job *job_find(struct jobs *js, const char *id) {
  for (struct live_job *j = js->list; j; j = j->next)
    if (strcmp(j->id, id) == 0)
      return j;
  return NULL;
}

static json_t *job_json(struct jobs *js, const char *id) {
  struct server_db_job job;
  if (server_db_job_get(js->db, id, &job, NULL) < 0)
    return NULL;
  json_t *o = server_db_job_to_json(&job);
  server_db_job_release(&job);
  return o;
}

/* Tell everyone waiting for j that it is over, then forget it. */
static void job_finished(struct live_job *j) {
  json_t *o = job_json(j->owner, j->id);
  for (struct waiter *w = j->waiters, *n; w; w = n) {
    n = w->next;
    admin_conn_reply(w->conn, o ? json_pack("{s:b, s:O}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_JOB, o)
                                : admin_reply_error(CORDON_E_INTERNAL, "job lost"));
    free(w);
  }
  j->waiters = NULL;
  json_decref(o);
  job_free(j);
}

static void pump(uv_timer_t *t) {
  struct live_job *j = t->data;
  struct session *s = j->session;
  if (!s || s->state != SESSION_ACTIVE) {
    uv_timer_stop(t);
    return;
  }
  uint8_t buf[JOB_CHUNK];
  while (j->sent < j->size && net_conn_queued(s->conn) < JOB_SEND_WINDOW) {
    size_t want = j->size - j->sent < sizeof(buf) ? (size_t)(j->size - j->sent) : sizeof(buf);
    ssize_t n = pread(j->fd, buf, want, (off_t)j->sent);
    if (n <= 0) {
      core_log_kv(CORE_LOG_ERROR, "cannot read the package", "job", j->id, "device", j->device_id,
                  "package", j->package, "error", n < 0 ? strerror(errno) : "EOF", NULL);
      session_goaway(s, MSG_GOAWAY_PROTOCOL, "package unreadable on the server");
      uv_timer_stop(t);
      return;
    }
    struct msg m = {.type = MSG_CHUNK};
    memcpy(m.chunk.job_id, j->raw_id, CORDON_ID_LEN);
    m.chunk.offset = j->sent;
    m.chunk.data.data = buf;
    m.chunk.data.len = (size_t)n;
    if (session_send(s, &m) < 0) {
      uv_timer_stop(t);
      return;
    }
    j->sent += (uint64_t)n;
  }
  if (j->sent >= j->size) {
    uv_timer_stop(t);
    close(j->fd);
    j->fd = -1;
    j->session = NULL;
  }
}

/* Read the package's signed index with the server's own publisher key. */
static int read_package(struct jobs *js, int fd, struct manifest **out_m,
                        uint8_t hash[CPKG_HASH_SIZE], uint64_t *out_size,
                        struct cordon_diag *diag) {
  struct cpkg_trust *trust;
  struct cpkg_stream *st = NULL;
  int r = cpkg_trust_new(&trust);
  if (r < 0)
    return r;
  r = cpkg_trust_add(trust, js->publisher_pk);
  if (r == 0)
    r = cpkg_stream_new(trust, &st);
  uint8_t buf[65536];
  bool have_index = false;
  off_t off = 0;
  while (r == 0 && !have_index) {
    ssize_t n = pread(fd, buf, sizeof(buf), off);
    if (n <= 0) {
      r = cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "the package ends before its index");
      break;
    }
    off += n;
    size_t pos = 0;
    while (r == 0 && !have_index) {
      size_t used;
      struct cpkg_event ev;
      r = cpkg_stream_next(st, buf + pos, (size_t)n - pos, &used, &ev, diag);
      pos += used;
      if (r == 0 && ev.type == CPKG_EVENT_INDEX)
        have_index = true;
      else if (r == 0 && ev.type == CPKG_EVENT_NEED_MORE)
        break;
    }
  }
  if (r == 0) {
    const struct cpkg_index *ix = cpkg_stream_index(st);
    r = manifest_parse((const char *)ix->manifest_json, ix->manifest_len, out_m, diag);
    if (r == 0) {
      cpkg_stream_index_hash(st, hash);
      *out_size = cpkg_stream_package_size(st);
    }
  }
  cpkg_stream_free(st);
  cpkg_trust_free(trust);
  return r;
}

static unsigned platform_bit(const char *p) {
  return manifest_platform_from_name(p);
}

/* Choose a device; on failure, reasons names why each candidate was not. */
static int choose_device(struct jobs *js, int64_t user_id, const char *want,
                         const struct manifest *m, char out_id[CORDON_ID_HEX_SIZE],
                         json_t *reasons) {
  struct server_db_device_list list;
  int r = server_db_device_list(js->db, user_id, &list, NULL);
  if (r < 0)
    return r;
  bool found = false, named = false;
  for (size_t i = 0; i < list.count && !found; i++) {
    struct server_db_device *dev = &list.items[i];
    if (want && strcmp(want, dev->id) != 0)
      continue;
    named = true;
    const char *why = NULL;
    size_t in_flight = 0;
    server_db_job_count_in_flight(js->db, dev->id, &in_flight, NULL);
    if (dev->state != SERVER_DB_DEVICE_ACTIVE)
      why = "revoked";
    else if (!sessions_find(js->sessions, dev->id))
      why = "offline";
    else if (!(m->platforms & platform_bit(dev->platform)))
      why = "platform not in the package's platforms";
    else if (!dev->has_level || dev->best_level < m->min_sandbox)
      why = "best sandbox level below min_sandbox";
    else if (dev->max_jobs > 0 && in_flight >= (size_t)dev->max_jobs)
      why = "at its concurrency limit";
    if (why) {
      json_array_append_new(reasons, json_pack("{s:s, s:s, s:s}", "device", dev->id, "name",
                                               dev->name, "reason", why));
    } else {
      snprintf(out_id, CORDON_ID_HEX_SIZE, "%s", dev->id);
      found = true;
    }
  }
  if (want && !named) /* another user's device is never named back */
    json_array_append_new(
        reasons, json_pack("{s:s, s:s}", "device", want, "reason", "no such device for this user"));
  server_db_device_list_release(&list);
  return found ? 0 : CORDON_E_NO_ELIGIBLE_DEVICE;
}

void jobs_op_dispatch(struct jobs *js, struct admin_conn *c, const json_t *req) {
  const char *user = admin_request_string(req, ADMIN_ARG_USER);
  const char *device = admin_request_string(req, ADMIN_ARG_DEVICE);
  const char *path = admin_request_string(req, ADMIN_ARG_PACKAGE);
  json_t *args = admin_request_get(req, ADMIN_ARG_ARGS);
  bool wait = admin_request_flag(req, ADMIN_ARG_WAIT);
  int64_t dispatched_ms = core_mono_ms();
  size_t n_args = args ? json_array_size(args) : 0;
  if (n_args > MSG_ARGS_MAX) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "too many arguments"));
    return;
  }
  char **argv = calloc(n_args + 1, sizeof(char *));
  if (!argv) {
    admin_conn_reply(c, admin_reply_error(-ENOMEM, "out of memory"));
    return;
  }
  for (size_t i = 0; i < n_args; i++) {
    const char *s = json_string_value(json_array_get(args, i));
    if (!s || strlen(s) > MSG_ARG_MAX) {
      free(argv);
      admin_conn_reply(
          c, admin_reply_error(CORDON_E_USAGE, "arguments must be strings of at most 4096 bytes"));
      return;
    }
    argv[i] = (char *)s;
  }
  struct server_db_user u;
  struct cordon_diag diag = {{0}};
  struct manifest *m = NULL;
  int fd = -1;
  char msgbuf[600];
  if (server_db_user_get_by_name(js->db, user, &u, NULL) < 0) {
    snprintf(msgbuf, sizeof(msgbuf), "no user '%s'", user);
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, msgbuf));
    goto out;
  }
  fd = open(path, O_RDONLY | O_CLOEXEC);
  uint8_t hash[CPKG_HASH_SIZE];
  uint64_t size;
  int r = fd < 0 ? cordon_diag_set(&diag, CORDON_E_USAGE, "%s: %s", path, strerror(errno))
                 : read_package(js, fd, &m, hash, &size, &diag);
  if (r < 0) {
    admin_conn_reply(c, admin_reply_error(r, diag.msg[0] ? diag.msg : cordon_err_message(r)));
    goto out;
  }
  json_t *reasons = json_array();
  char dev_id[CORDON_ID_HEX_SIZE];
  r = choose_device(js, u.id, device, m, dev_id, reasons);
  if (r < 0) {
    core_log_kv(CORE_LOG_INFO, "dispatch refused", "user", user, "device", device ? device : "-",
                "package", m->name, "version", m->version, "reason", "no_eligible_device", NULL);
    json_t *e = admin_reply_error(CORDON_E_NO_ELIGIBLE_DEVICE, "no device can run this job");
    json_object_set_new(e, ADMIN_REPLY_CANDIDATES, reasons);
    admin_conn_reply(c, e);
    goto out;
  }
  json_decref(reasons);
  /* the job, committed before anything is sent */
  char *args_json = args ? json_dumps(args, JSON_COMPACT) : strdup("[]");
  struct server_db_job_new nj = {
      .user_id = u.id,
      .device_id = dev_id,
      .package_hash = hash,
      .args_json = args_json,
      .deadline = (int64_t)(core_wall_ms() / 1000) + m->timeout_s + js->grace_s,
  };
  char job_id[CORDON_ID_HEX_SIZE];
  r = server_db_job_add(js->db, &nj, job_id, &diag);
  free(args_json);
  if (r == 0)
    r = server_db_job_transition(js->db, job_id, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL,
                                 &diag);
  if (r < 0) {
    admin_conn_reply(c, admin_reply_error(r, diag.msg));
    goto out;
  }
  struct session *s = sessions_find(js->sessions, dev_id);
  struct live_job *j = calloc(1, sizeof(*j));
  struct waiter *w = wait ? calloc(1, sizeof(*w)) : NULL;
  if (!j || (wait && !w)) {
    free(j);
    free(w);
    server_db_job_transition(js->db, job_id, SERVER_DB_JOB_SENT, SERVER_DB_JOB_FAILED,
                             "internal_error", NULL);
    admin_conn_reply(c, admin_reply_error(-ENOMEM, "out of memory"));
    goto out;
  }
  j->owner = js;
  j->fd = fd;
  fd = -1;
  j->size = size;
  j->session = s;
  snprintf(j->id, sizeof(j->id), "%s", job_id);
  snprintf(j->device_id, sizeof(j->device_id), "%s", dev_id);
  snprintf(j->user, sizeof(j->user), "%s", user);
  snprintf(j->package, sizeof(j->package), "%s@%s", m->name, m->version);
  j->dispatched_ms = dispatched_ms;
  cordon_id_from_hex(job_id, j->raw_id);
  uv_timer_init(js->loop, &j->pump);
  j->pump.data = j;
  j->next = js->list;
  js->list = j;

  struct ticket t = {0};
  memcpy(t.job_id, j->raw_id, CORDON_ID_LEN);
  cordon_id_from_hex(dev_id, t.device_id);
  ticket_user_tag(user, t.user_tag);
  memcpy(t.session_id, s->session_id, CORDON_ID_LEN);
  memcpy(t.index_hash, hash, CPKG_HASH_SIZE);
  ticket_args_hash(argv, n_args, t.args_hash);
  t.issued_ms = core_wall_ms();
  t.expires_ms = t.issued_ms + JOB_TICKET_TTL_S * 1000ull;
  uint8_t body[TICKET_BODY_LEN];
  ticket_encode(&t, body);
  struct msg jm = {.type = MSG_JOB};
  memcpy(jm.job.job_id, j->raw_id, CORDON_ID_LEN);
  jm.job.ticket.data = body;
  jm.job.ticket.len = sizeof(body);
  ticket_sign(body, js->ticket_sk, jm.job.ticket_sig);
  memcpy(jm.job.pkg_hash, hash, CPKG_HASH_SIZE);
  jm.job.pkg_size = size;
  jm.job.args = argv;
  jm.job.n_args = n_args;
  session_send(s, &jm);
  uv_timer_start(&j->pump, pump, 0, 2);
  metrics_job_dispatched();
  {
    char sz[24], dl[24], na[16];
    snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
    snprintf(dl, sizeof(dl), "%lld", (long long)nj.deadline);
    snprintf(na, sizeof(na), "%zu", n_args);
    core_log_kv(CORE_LOG_INFO, "job sent", "job", job_id, "user", user, "device", dev_id, "package",
                j->package, "size", sz, "args", na, "deadline", dl, NULL);
  }
  if (w) {
    w->conn = c;
    j->waiters = w;
  } else {
    admin_conn_reply(c, json_pack("{s:b, s:s, s:s}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_JOB_ID, job_id,
                                  ADMIN_REPLY_DEVICE, dev_id));
  }
out:
  if (fd >= 0)
    close(fd);
  manifest_free(m);
  free(argv);
}

void jobs_op_cancel(struct jobs *js, struct admin_conn *c, const json_t *req) {
  const char *id = admin_request_string(req, ADMIN_ARG_JOB);
  struct server_db_job job;
  if (server_db_job_get(js->db, id, &job, NULL) < 0) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "no such job"));
    return;
  }
  enum server_db_job_state st = job.state;
  char dev[CORDON_ID_HEX_SIZE];
  snprintf(dev, sizeof(dev), "%s", job.device_id);
  server_db_job_release(&job);
  if (server_db_job_state_is_final(st)) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "the job has already finished"));
    return;
  }
  struct session *s = dev[0] ? sessions_find(js->sessions, dev) : NULL;
  /* recorded first; the device's late result is still stored, state stays */
  int r = server_db_job_transition(js->db, id, st, SERVER_DB_JOB_CANCELLED, "cancelled", NULL);
  if (r < 0) {
    admin_conn_reply(c, admin_reply_error(r, "the job changed state meanwhile; try again"));
    return;
  }
  if (s) {
    struct msg m = {.type = MSG_CANCEL};
    cordon_id_from_hex(id, m.cancel.job_id);
    session_send(s, &m);
  }
  metrics_job_finished(SERVER_DB_JOB_CANCELLED, -1);
  core_log_kv(CORE_LOG_INFO, "job cancelled", "job", id, "device", dev[0] ? dev : "-", "was",
              server_db_job_state_name(st), "device_told", s ? "yes" : "no", NULL);
  struct live_job *j = job_find(js, id);
  if (j && j->session == NULL && !j->waiters) /* fully sent, nobody waiting */
    job_free(j);
  admin_conn_reply(c, json_pack("{s:b, s:s}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_STATE, "cancelled"));
}

/* ---- from the agent ---- */

/* One line per result, saying what became of it (and the metrics). */
static void log_result(struct jobs *js, struct session *s, const struct live_job *dj,
                       const char *id, const struct job_result *r, bool readable, int rc,
                       enum server_db_job_state after, const struct cordon_diag *diag) {
  char user[SERVER_DB_NAME_MAX + 1] = "-", code[16] = "-", sig[16] = "-", secs[24];
  struct server_db_job job;
  if (dj)
    snprintf(user, sizeof(user), "%s", dj->user);
  else if (server_db_job_get(js->db, id, &job, NULL) == 0) {
    snprintf(user, sizeof(user), "%s", job.user);
    server_db_job_release(&job);
  }
  if (r->ran && r->exited)
    snprintf(code, sizeof(code), "%d", r->exit_code);
  else if (r->ran)
    snprintf(sig, sizeof(sig), "%d", r->signal);
  snprintf(secs, sizeof(secs), "%.3f", (double)r->wall_ms / 1000.0);
  const char *level = r->level_known ? sandbox_level_name(r->level) : NULL;
  const char *pkg = dj ? dj->package : "-";
  const char *err = r->error ? cordon_err_name(r->error) : "-";
  if (rc == 0 && after != SERVER_DB_JOB_EXPIRED) {
    /* a cancelled job was counted when it was cancelled */
    metrics_job_finished(after == SERVER_DB_JOB_CANCELLED ? -1 : (int)after, (int64_t)r->wall_ms);
    core_log_kv(CORE_LOG_INFO, "job finished", "job", id, "user", user, "device", s->device_id,
                "package", pkg, "outcome", server_db_job_state_name(after), "exit_code", code,
                "signal", sig, "error", err, "timed_out", r->timed_out ? "yes" : "no", "level",
                level ? level : "-", "mechanism", r->mechanism[0] ? r->mechanism : "-",
                "duration_s", secs, NULL);
    return;
  }
  enum metrics_result_refusal why;
  const char *what;
  enum core_log_level lvl = CORE_LOG_WARN;
  if (rc == 0) { /* kept with the job, whose state stays expired */
    why = METRICS_REFUSAL_LATE;
    what = "the job had expired: the result is kept, the state stays expired";
  } else if (rc == -EALREADY) {
    why = METRICS_REFUSAL_ALREADY_RECORDED;
    what = "a result was recorded before: acknowledged again, nothing changed";
    lvl = CORE_LOG_INFO;
  } else if (rc == -ENOENT) {
    why = METRICS_REFUSAL_NOT_THIS_DEVICE;
    what = "no such job for this device: not stored, not acknowledged";
  } else if (rc == -ESTALE) {
    why = METRICS_REFUSAL_NOT_SENT;
    what = "the job was never sent: not stored";
  } else if (!readable) {
    why = METRICS_REFUSAL_MALFORMED;
    what = "the result could not be read: not stored";
  } else {
    why = METRICS_REFUSAL_STORE_FAILED;
    what = diag->msg[0] ? diag->msg : cordon_err_message(rc);
    lvl = CORE_LOG_ERROR;
  }
  static const char *const codes[] = {
#define REFUSAL_NAME_(id, label) [METRICS_REFUSAL_##id] = label,
      METRICS_RESULT_REFUSALS(REFUSAL_NAME_)
#undef REFUSAL_NAME_
  };
  metrics_result_refused(why);
  core_log_kv(lvl, why == METRICS_REFUSAL_LATE ? "late result" : "result refused", "job", id,
              "user", user, "device", s->device_id, "package", pkg, "code", codes[why], "detail",
              what, "exit_code", code, "signal", sig, "level", level ? level : "-", "duration_s",
              secs, NULL);
}

static void on_result(struct jobs *js, struct session *s, struct msg_result *mr) {
  char id[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(mr->job_id, id);
  struct job_result r;
  job_result_init(&r);
  int rc = result_from_msg(mr, &r);
  bool readable = rc == 0;
  json_t *j = rc == 0 ? job_result_to_json(&r) : NULL;
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  bool ok = r.ran && r.exited && r.exit_code == 0 && !r.error;
  enum server_db_job_state after = SERVER_DB_JOB_QUEUED;
  struct cordon_diag diag = {{0}};
  rc = text ? server_db_job_record_result(
                  js->db, id, s->device_id, ok ? SERVER_DB_JOB_DONE : SERVER_DB_JOB_FAILED,
                  r.error ? cordon_err_name(r.error) : NULL, text, &after, &diag)
            : -ENOMEM;
  free(text);
  struct live_job *dj = job_find(js, id);
  log_result(js, s, dj, id, &r, readable, rc, after, &diag);
  job_result_release(&r);
  if (rc == 0 || rc == -EALREADY) {
    /* recorded (now or before): the agent may forget it */
    struct msg ack = {.type = MSG_ACK};
    memcpy(ack.ack.job_id, mr->job_id, CORDON_ID_LEN);
    session_send(s, &ack);
  } else if (rc == -ENOENT) { /* not this device's job: never ack, never store */
    return;
  }
  if (dj)
    job_finished(dj);
}

bool jobs_on_message(struct jobs *js, struct session *s, struct msg *m) {
  char id[CORDON_ID_HEX_SIZE];
  switch (m->type) {
  case MSG_RUNNING: {
    cordon_id_to_hex(m->running.job_id, id);
    int r =
        server_db_job_transition(js->db, id, SERVER_DB_JOB_SENT, SERVER_DB_JOB_RUNNING, NULL, NULL);
    struct live_job *dj = job_find(js, id);
    char ms[24] = "-";
    if (dj && r == 0) {
      int64_t lat = core_mono_ms() - dj->dispatched_ms;
      metrics_dispatch_latency((uint64_t)(lat > 0 ? lat : 0));
      snprintf(ms, sizeof(ms), "%.3f", (double)lat / 1000.0);
    }
    core_log_kv(r == 0 ? CORE_LOG_INFO : CORE_LOG_DEBUG, "job running", "job", id, "user",
                dj ? dj->user : "-", "device", s->device_id, "package", dj ? dj->package : "-",
                "latency_s", ms, "recorded", r == 0 ? "yes" : "no", NULL);
    return true;
  }
  case MSG_RESULT:
    on_result(js, s, &m->result);
    return true;
  default:
    return false;
  }
}

void jobs_on_session_closed(struct jobs *js, struct session *s) {
  for (struct live_job *j = js->list; j; j = j->next)
    if (j->session == s) {
      j->session = NULL;
      uv_timer_stop(&j->pump);
    }
}

/* Every second: jobs past their deadline expire with device_lost. */
static void expire_tick(uv_timer_t *t) {
  struct jobs *js = t->data;
  struct server_db_job_list list;
  if (server_db_job_list_overdue(js->db, &list, NULL) < 0)
    return;
  for (size_t i = 0; i < list.count; i++) {
    struct server_db_job *job = &list.items[i];
    if (server_db_job_transition(js->db, job->id, job->state, SERVER_DB_JOB_EXPIRED, "device_lost",
                                 NULL) == 0) {
      metrics_job_finished(SERVER_DB_JOB_EXPIRED, -1);
      core_log_kv(CORE_LOG_WARN, "job expired", "job", job->id, "user", job->user, "device",
                  job->device_id[0] ? job->device_id : "-", "was",
                  server_db_job_state_name(job->state), "error", "device_lost", NULL);
      struct live_job *dj = job_find(js, job->id);
      if (dj)
        job_finished(dj);
    }
  }
  server_db_job_list_release(&list);
}

/* ---- lifecycle ---- */

int jobs_new(const struct jobs_config *cfg, struct jobs **out_jobs) {
  struct jobs *js = calloc(1, sizeof(*js));
  if (!js)
    return -ENOMEM;
  js->loop = cfg->loop;
  js->db = cfg->db;
  js->sessions = cfg->sessions;
  js->ticket_sk = cfg->ticket_sk;
  js->publisher_pk = cfg->publisher_pk;
  js->grace_s = cfg->grace_s ? cfg->grace_s : JOBS_DEFAULT_GRACE_S;
  *out_jobs = js;
  return 0;
}

void jobs_start(struct jobs *js) {
  uv_timer_init(js->loop, &js->expiry);
  js->expiry.data = js;
  uv_timer_start(&js->expiry, expire_tick, 1000, 1000);
  js->started = true;
}

void jobs_close(struct jobs *js) {
  if (js->started && !uv_is_closing((uv_handle_t *)&js->expiry))
    uv_close((uv_handle_t *)&js->expiry, NULL);
  while (js->list)
    job_free(js->list);
}

void jobs_free(struct jobs *js) {
  free(js);
}
