/* cordon-agent run: stay connected to the paired server, run the jobs it
 * sends, and deliver every result at least once (spool until ack).
 *
 * CONFIG/spool/<job>.running  written (fsync) when a job is accepted;
 * CONFIG/spool/<job>.result   the encoded result message (fsync + rename)
 *                              before it is sent; removed at the server's ack.
 * CONFIG/seen/<job>           job ids already accepted (replay journal),
 *                              each holding its ticket's expiry; pruned
 *                              after expiry.
 * A .running without .result at start means the agent died while the job
 * ran: the job is reported failed with agent_restarted. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "agent/commands.h"
#include "agent/cpkg_stage.h"
#include "agent/hello.h"
#include "agent/job.h"
#include "agent/state.h"
#include "compat/posix.h"
#include "core/file.h"
#include "net/conn.h"
#include "platform/fs.h"
#include "proto/msg.h"
#include "proto/result_msg.h"
#include "proto/ticket.h"

struct runner;

struct rjob {
  struct runner *rn;
  uint8_t raw_id[16];
  char id[33];
  struct agent_job job;
  bool job_made;
  struct agent_cpkg_stager *stager;
  int stage_fd;
  uint64_t pkg_size, received;
  uint8_t index_hash[32];
  char **args;
  size_t n_args;
  int cancel_pipe[2];
  bool running; /* in the thread pool */
  uv_work_t work;
  struct rjob *next;
};

struct runner {
  const struct agent_config *cfg;
  struct agent_pairing pairing;
  struct agent_facts facts;
  uint8_t *priv;
  uv_loop_t *loop;
  struct net_limits limits;
  struct net_conn *conn;
  bool ready; /* welcome received */
  uint8_t session_id[16];
  int64_t clock_offset_ms; /* server - local */
  uv_timer_t retry, ping;
  uv_signal_t sigterm, sigint;
  uv_async_t stop_async; /* agent_run_request_stop, from another thread */
  unsigned backoff_ms;
  bool stopping;
  struct cpkg_trust *trust;
  struct rjob *jobs;
  unsigned n_running;
  char spool[3072], seen[3072]; /* short enough for spool/<id>.<ext> in PATH_MAX */
  uint64_t ping_nonce;
  int exit_code;
};

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("cordon-agent: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int send_msg(struct runner *rn, const struct msg *m) {
  if (!rn->conn || !rn->ready)
    return -ENOTCONN;
  uint8_t *buf;
  size_t len;
  int r = msg_encode_alloc(m, &buf, &len, NULL);
  if (r < 0)
    return r;
  r = net_conn_send(rn->conn, buf, len);
  free(buf);
  return r;
}

static void write_connection_state(struct runner *rn, bool connected) {
  const char *s = connected ? "connected\n" : "disconnected\n";
  core_write_file_atomic(rn->cfg->dir, "connection", s, strlen(s), 0600);
}

/* ---- spool ---- */

static void spool_path(struct runner *rn, const char *id, const char *ext, char *out, size_t n) {
  snprintf(out, n, "%s/%s.%s", rn->spool, id, ext);
}

static void send_spooled(struct runner *rn, const char *id) {
  char path[PATH_MAX];
  spool_path(rn, id, "result", path, sizeof(path));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size <= (off_t)MSG_ENCODED_MAX) {
    uint8_t *buf = malloc((size_t)st.st_size);
    if (buf && read(fd, buf, (size_t)st.st_size) == st.st_size && rn->conn && rn->ready)
      net_conn_send(rn->conn, buf, (size_t)st.st_size);
    free(buf);
  }
  close(fd);
}

/* Spool the result, then send it. */
static void deliver(struct runner *rn, const uint8_t raw_id[16], struct job_result *res) {
  char id[33];
  sodium_bin2hex(id, sizeof(id), raw_id, 16);
  struct msg m;
  result_to_msg(res, raw_id, rn->pairing.device_id, &m);
  uint8_t *buf;
  size_t len;
  struct cordon_diag diag = {{0}};
  int r = msg_encode_alloc(&m, &buf, &len, &diag);
  if (r < 0) {
    logf_("job %s: cannot encode its result: %s", id, diag.msg);
    return;
  }
  char name[64];
  snprintf(name, sizeof(name), "%s.result", id);
  r = core_write_file_atomic(rn->spool, name, buf, len, 0600);
  if (r < 0)
    logf_("job %s: cannot spool its result: %s", id, strerror(-r));
  char running[PATH_MAX];
  spool_path(rn, id, "running", running, sizeof(running));
  unlink(running);
  if (rn->conn && rn->ready)
    net_conn_send(rn->conn, buf, len);
  free(buf);
}

static void refuse(struct runner *rn, const uint8_t raw_id[16], int err, const char *why) {
  struct job_result res;
  job_result_init(&res);
  sodium_bin2hex(res.job_id, sizeof(res.job_id), raw_id, 16);
  job_result_fail(&res, err, "%s", why);
  logf_("job %s refused: %s: %s", res.job_id, cordon_err_name(err), why);
  deliver(rn, raw_id, &res);
  job_result_release(&res);
}

/* Jobs that were running when the agent died, and results not yet acked. */
static void spool_recover(struct runner *rn) {
  DIR *d = opendir(rn->spool);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (n != 32 + 8 || strcmp(de->d_name + 32, ".running") != 0)
      continue;
    char id[33];
    memcpy(id, de->d_name, 32);
    id[32] = '\0';
    char res[PATH_MAX];
    spool_path(rn, id, "result", res, sizeof(res));
    if (access(res, F_OK) == 0)
      continue;
    uint8_t raw[16];
    if (sodium_hex2bin(raw, 16, id, 32, NULL, NULL, NULL) != 0)
      continue;
    int killed = sandbox_reap_leftovers(id);
    if (killed > 0)
      logf_("job %s: killed %d process(es) left from before the restart", id, killed);
    char jobs[PATH_MAX];
    snprintf(jobs, sizeof(jobs), "%s/jobs", rn->cfg->dir);
    int jfd = open(jobs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (jfd >= 0) { /* its staging directory */
      fs_remove_tree_at(jfd, id);
      close(jfd);
    }
    struct job_result r;
    job_result_init(&r);
    snprintf(r.job_id, sizeof(r.job_id), "%s", id);
    job_result_fail(&r, CORDON_E_AGENT_RESTARTED, "the agent restarted while the job ran");
    deliver(rn, raw, &r);
    job_result_release(&r);
  }
  closedir(d);
}

static void resend_all(struct runner *rn) {
  DIR *d = opendir(rn->spool);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (n == 32 + 7 && strcmp(de->d_name + 32, ".result") == 0) {
      char id[33];
      memcpy(id, de->d_name, 32);
      id[32] = '\0';
      send_spooled(rn, id);
    }
  }
  closedir(d);
}

/* ---- the replay journal ---- */

static int seen_check_and_add(struct runner *rn, const char *id, uint64_t expires_ms) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", rn->seen, id);
  if (access(path, F_OK) == 0)
    return CORDON_E_TICKET_REPLAYED;
  char text[32];
  int n = snprintf(text, sizeof(text), "%" PRIu64 "\n", expires_ms);
  return core_write_file_atomic(rn->seen, id, text, (size_t)n, 0600);
}

static void seen_prune(struct runner *rn) {
  DIR *d = opendir(rn->seen);
  if (!d)
    return;
  int64_t now = wall_ms() + rn->clock_offset_ms;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.')
      continue;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", rn->seen, de->d_name);
    FILE *f = fopen(path, "re");
    unsigned long long exp = 0;
    if (f) {
      if (fscanf(f, "%llu", &exp) != 1)
        exp = 0;
      fclose(f);
    }
    if (exp && (int64_t)exp < now - 60000)
      unlink(path);
  }
  closedir(d);
}

/* ---- jobs ---- */

static struct rjob *job_find(struct runner *rn, const uint8_t raw[16]) {
  for (struct rjob *j = rn->jobs; j; j = j->next)
    if (memcmp(j->raw_id, raw, 16) == 0)
      return j;
  return NULL;
}

static void rjob_free(struct rjob *j) {
  struct runner *rn = j->rn;
  for (struct rjob **pp = &rn->jobs; *pp; pp = &(*pp)->next)
    if (*pp == j) {
      *pp = j->next;
      break;
    }
  agent_cpkg_stager_free(j->stager);
  if (j->stage_fd >= 0)
    close(j->stage_fd);
  if (j->job_made)
    agent_job_release(&j->job);
  for (size_t i = 0; i < j->n_args; i++)
    free(j->args[i]);
  free(j->args);
  for (int i = 0; i < 2; i++)
    if (j->cancel_pipe[i] >= 0)
      close(j->cancel_pipe[i]);
  free(j);
}

static void fail_job(struct rjob *j, int err, const char *why) {
  refuse(j->rn, j->raw_id, err, why);
  rjob_free(j);
}

static void on_job(struct runner *rn, struct msg_job *mj) {
  char id[33];
  sodium_bin2hex(id, sizeof(id), mj->job_id, 16);
  struct ticket t;
  int r =
      ticket_verify(mj->ticket.data, mj->ticket.len, mj->ticket_sig, rn->pairing.ticket_key, &t);
  if (r < 0) {
    refuse(rn, mj->job_id, CORDON_E_SIGNATURE_INVALID, "the ticket's signature does not verify");
    return;
  }
  uint8_t tag[16], args_hash[32];
  ticket_user_tag(rn->pairing.user, tag);
  ticket_args_hash(mj->args, mj->n_args, args_hash);
  if (sodium_memcmp(t.device_id, rn->pairing.device_id, 16) != 0 ||
      sodium_memcmp(t.user_tag, tag, 16) != 0 ||
      sodium_memcmp(t.session_id, rn->session_id, 16) != 0) {
    refuse(rn, mj->job_id, CORDON_E_WRONG_DEVICE,
           "the ticket is for another device, user or session");
    return;
  }
  if (memcmp(t.job_id, mj->job_id, 16) != 0 || memcmp(t.index_hash, mj->pkg_hash, 32) != 0 ||
      memcmp(t.args_hash, args_hash, 32) != 0) {
    refuse(rn, mj->job_id, CORDON_E_SIGNATURE_INVALID, "the job does not match its ticket");
    return;
  }
  int64_t server_now = wall_ms() + rn->clock_offset_ms;
  if ((int64_t)t.expires_ms < server_now) {
    refuse(rn, mj->job_id, CORDON_E_TICKET_EXPIRED, "the ticket has expired");
    return;
  }
  r = seen_check_and_add(rn, id, t.expires_ms);
  if (r == CORDON_E_TICKET_REPLAYED) {
    refuse(rn, mj->job_id, r, "this job id was already seen");
    return;
  }
  if (r < 0) {
    refuse(rn, mj->job_id, CORDON_E_SPAWN_FAILED, "cannot record the job id");
    return;
  }
  if (rn->n_running >= rn->cfg->max_jobs) {
    refuse(rn, mj->job_id, CORDON_E_SPAWN_FAILED, "the agent is at its max_jobs limit");
    return;
  }
  struct rjob *j = calloc(1, sizeof(*j));
  if (!j) {
    refuse(rn, mj->job_id, CORDON_E_SPAWN_FAILED, "out of memory");
    return;
  }
  j->rn = rn;
  j->stage_fd = -1;
  j->cancel_pipe[0] = j->cancel_pipe[1] = -1;
  memcpy(j->raw_id, mj->job_id, 16);
  memcpy(j->index_hash, t.index_hash, 32);
  snprintf(j->id, sizeof(j->id), "%s", id);
  j->pkg_size = mj->pkg_size;
  j->next = rn->jobs;
  rn->jobs = j;
  j->args = calloc(mj->n_args + 1, sizeof(char *));
  bool copied = j->args != NULL;
  for (size_t i = 0; copied && i < mj->n_args; i++)
    copied = (j->args[i] = strdup(mj->args[i])) != NULL;
  j->n_args = j->args ? mj->n_args : 0;
  if (!copied) {
    fail_job(j, CORDON_E_SPAWN_FAILED, "out of memory");
    return;
  }
  struct cordon_diag diag = {{0}};
  char running_name[64];
  snprintf(running_name, sizeof(running_name), "%s.running", id);
  if (core_write_file_atomic(rn->spool, running_name, "", 0, 0600) < 0) {
    fail_job(j, CORDON_E_SPAWN_FAILED, "cannot write the spool");
    return;
  }
  r = agent_job_begin_stream(&j->job, rn->cfg, id, &j->stage_fd, &diag);
  j->job_made = true;
  if (r == 0)
    r = agent_cpkg_stager_new(rn->trust, j->stage_fd, &j->stager, &diag);
  if (r < 0)
    fail_job(j, CORDON_E_SPAWN_FAILED, diag.msg);
}

static void work_run(uv_work_t *w) {
  struct rjob *j = w->data;
  int r = sandbox_run(j->job.plan, &j->job.result);
  if (r < 0 && !j->job.result.error)
    job_result_fail(&j->job.result, r, "%s", cordon_err_message(r));
}

static void work_done(uv_work_t *w, int status) {
  (void)status;
  struct rjob *j = w->data;
  struct runner *rn = j->rn;
  rn->n_running--;
  logf_("job %s finished: %s", j->id,
        j->job.result.error    ? cordon_err_name(j->job.result.error)
        : j->job.result.exited ? "exited"
                               : "killed");
  deliver(rn, j->raw_id, &j->job.result);
  rjob_free(j);
}

static void start_job(struct rjob *j) {
  struct runner *rn = j->rn;
  struct manifest *m = NULL;
  uint8_t hash[32];
  struct cordon_diag diag = {{0}};
  int r = agent_cpkg_stager_finish(j->stager, &m, hash, &diag);
  if (r < 0) {
    fail_job(j, r, diag.msg);
    return;
  }
  if (memcmp(hash, j->index_hash, 32) != 0) {
    manifest_free(m);
    fail_job(j, CORDON_E_SIGNATURE_INVALID, "the package is not the one the ticket names");
    return;
  }
  close(j->stage_fd);
  j->stage_fd = -1;
  r = agent_job_end_stream(&j->job, m, &diag);
  if (r < 0) {
    fail_job(j, CORDON_E_SPAWN_FAILED, diag.msg);
    return;
  }
  if (pipe2(j->cancel_pipe, O_CLOEXEC) < 0) {
    fail_job(j, CORDON_E_SPAWN_FAILED, "pipe");
    return;
  }
  /* min_sandbox and the owner's ceiling are checked again, here */
  r = agent_job_plan(&j->job, j->args, j->n_args, false);
  if (r < 0) {
    struct job_result *res = &j->job.result;
    if (!res->error)
      job_result_fail(res, r, "%s", cordon_err_message(r));
    logf_("job %s refused: %s: %s", j->id, cordon_err_name(res->error), res->error_message);
    deliver(rn, j->raw_id, res);
    rjob_free(j);
    return;
  }
  j->job.sjob.cancel_fd = j->cancel_pipe[0];
  memcpy(j->job.result.job_id, j->id, sizeof(j->id));
  sodium_bin2hex(j->job.result.device_id, sizeof(j->job.result.device_id), rn->pairing.device_id,
                 16);
  struct msg m2 = {.type = MSG_RUNNING};
  memcpy(m2.running.job_id, j->raw_id, 16);
  send_msg(rn, &m2);
  j->running = true;
  rn->n_running++;
  j->work.data = j;
  logf_("job %s started", j->id);
  uv_queue_work(rn->loop, &j->work, work_run, work_done);
}

static void on_chunk(struct runner *rn, struct msg_chunk *c) {
  struct rjob *j = job_find(rn, c->job_id);
  if (!j || j->running || !j->stager)
    return; /* refused already, or a stray chunk */
  if (c->offset != j->received || c->data.len > j->pkg_size - j->received) {
    fail_job(j, CORDON_E_PACKAGE_CORRUPT, "chunks out of order or past the package size");
    return;
  }
  struct cordon_diag diag = {{0}};
  int r = agent_cpkg_stager_feed(j->stager, c->data.data, c->data.len, &diag);
  if (r < 0) {
    fail_job(j, r, diag.msg);
    return;
  }
  j->received += c->data.len;
  if (j->received == j->pkg_size)
    start_job(j);
}

static void on_cancel(struct runner *rn, const uint8_t raw[16]) {
  struct rjob *j = job_find(rn, raw);
  if (!j)
    return;
  if (j->running) {
    (void)!write(j->cancel_pipe[1], "c", 1);
  } else {
    fail_job(j, CORDON_E_CANCELLED, "the job was cancelled before it started");
  }
}

static void on_ack(struct runner *rn, const uint8_t raw[16]) {
  char id[33], path[PATH_MAX];
  sodium_bin2hex(id, sizeof(id), raw, 16);
  spool_path(rn, id, "result", path, sizeof(path));
  unlink(path);
}

/* ---- the connection ---- */

static void schedule_connect(struct runner *rn);
static void stop_for_good(struct runner *rn, const char *why);

static int on_check_peer(struct net_conn *c, const uint8_t key[NOISE_KEY_LEN]) {
  struct runner *rn = net_conn_data(c);
  if (sodium_memcmp(key, rn->pairing.server_key, NOISE_KEY_LEN) != 0) {
    logf_("the server's key is not the one pinned at pairing: not connecting");
    return CORDON_E_UNKNOWN_KEY;
  }
  return 0;
}

static int on_ready(struct net_conn *c) {
  struct runner *rn = net_conn_data(c);
  struct msg m;
  agent_hello_fill(&rn->facts, rn->cfg, &m);
  m.hello.has_device_id = true;
  memcpy(m.hello.device_id, rn->pairing.device_id, 16);
  uint8_t *buf;
  size_t len;
  int r = msg_encode_alloc(&m, &buf, &len, NULL);
  if (r < 0)
    return r;
  r = net_conn_send(c, buf, len);
  free(buf);
  return r;
}

static void on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct runner *rn = net_conn_data(c);
  struct msg m;
  struct cordon_diag diag = {{0}};
  if (msg_decode(data, len, &m, &diag) < 0) {
    logf_("bad message from the server: %s", diag.msg);
    net_conn_close(c, CORDON_E_PROTOCOL);
    return;
  }
  if (!(msg_type_senders(m.type) & MSG_FROM_SERVER)) {
    net_conn_close(c, CORDON_E_PROTOCOL);
  } else if (!rn->ready) {
    if (m.type == MSG_WELCOME && m.welcome.version >= MSG_PROTO_VERSION_MIN &&
        m.welcome.version <= MSG_PROTO_VERSION_MAX) {
      rn->ready = true;
      rn->backoff_ms = 0;
      memcpy(rn->session_id, m.welcome.session_id, 16);
      rn->clock_offset_ms = (int64_t)m.welcome.time_ms - wall_ms();
      write_connection_state(rn, true);
      logf_("connected to %s:%d as device of %s", rn->pairing.host, rn->pairing.port,
            rn->pairing.user);
      seen_prune(rn);
      resend_all(rn);
    } else if (m.type == MSG_GOAWAY) {
      logf_("the server refused the session: %s: %s", m.goaway.code,
            m.goaway.message ? m.goaway.message : "");
      if (strcmp(m.goaway.code, MSG_GOAWAY_REVOKED) == 0 ||
          strcmp(m.goaway.code, MSG_GOAWAY_UNPAIRED) == 0)
        stop_for_good(rn, "this device is no longer paired with the server; run `cordon-agent "
                          "unpair`, then pair again");
      net_conn_close(c, 0);
    } else {
      net_conn_close(c, CORDON_E_PROTOCOL);
    }
  } else {
    switch (m.type) {
    case MSG_PING: {
      struct msg p = {.type = MSG_PONG};
      p.pong.nonce = m.ping.nonce;
      send_msg(rn, &p);
      break;
    }
    case MSG_PONG:
      break;
    case MSG_JOB:
      on_job(rn, &m.job);
      break;
    case MSG_CHUNK:
      on_chunk(rn, &m.chunk);
      break;
    case MSG_CANCEL:
      on_cancel(rn, m.cancel.job_id);
      break;
    case MSG_ACK:
      on_ack(rn, m.ack.job_id);
      break;
    case MSG_GOAWAY:
      logf_("the server closed the session: %s: %s", m.goaway.code,
            m.goaway.message ? m.goaway.message : "");
      if (strcmp(m.goaway.code, MSG_GOAWAY_REVOKED) == 0 ||
          strcmp(m.goaway.code, MSG_GOAWAY_UNPAIRED) == 0)
        stop_for_good(rn, "this device was revoked or unpaired; run `cordon-agent unpair`, "
                          "then pair again");
      net_conn_close(c, 0);
      break;
    default:
      break;
    }
  }
  msg_release(&m);
}

static void on_quiet(struct net_conn *c) {
  struct runner *rn = net_conn_data(c);
  struct msg p = {.type = MSG_PING};
  p.ping.nonce = ++rn->ping_nonce;
  send_msg(rn, &p);
}

static void on_close(struct net_conn *c, int err) {
  struct runner *rn = net_conn_data(c);
  if (rn->conn == c) {
    rn->conn = NULL;
    if (rn->ready)
      write_connection_state(rn, false);
    rn->ready = false;
  }
  if (err && !rn->stopping)
    logf_("connection to %s:%d lost: %s", rn->pairing.host, rn->pairing.port,
          cordon_err_message(err));
  /* jobs whose package was still arriving cannot finish without it */
  for (struct rjob *j = rn->jobs, *n; j; j = n) {
    n = j->next;
    if (!j->running)
      fail_job(j, CORDON_E_DEVICE_LOST, "the connection closed while the package arrived");
  }
  if (!rn->stopping)
    schedule_connect(rn);
}

static const struct net_conn_ops run_ops = {
    .check_peer = on_check_peer,
    .on_ready = on_ready,
    .on_record = on_record,
    .on_quiet = on_quiet,
    .on_close = on_close,
};

static void do_connect(uv_timer_t *t) {
  struct runner *rn = t->data;
  if (rn->stopping || rn->conn)
    return;
  int r = net_connect(rn->loop, rn->pairing.host, rn->pairing.port, rn->priv, NOISE_MODE_SESSION,
                      &rn->limits, &run_ops, rn, &rn->conn);
  if (r < 0) {
    rn->conn = NULL;
    schedule_connect(rn);
  }
}

static void schedule_connect(struct runner *rn) {
  /* exponential backoff with jitter: 0.5 s doubling, capped at 30 s */
  unsigned b = rn->backoff_ms ? rn->backoff_ms : 500;
  rn->backoff_ms = b * 2 > 30000 ? 30000 : b * 2;
  unsigned delay = b / 2 + randombytes_uniform(b / 2 + 1);
  uv_timer_start(&rn->retry, do_connect, delay, 0);
}

/* agent_run_request_stop's target: the running loop's async handle, or
 * NULL; stop_requested keeps a request that came before the loop was up. */
static uv_once_t stop_once = UV_ONCE_INIT;
static uv_mutex_t stop_lock;
static uv_async_t *stop_target;
static bool stop_requested;

static void stop_lock_init(void) {
  if (uv_mutex_init(&stop_lock) != 0)
    abort();
}

void agent_run_request_stop(void) {
  uv_once(&stop_once, stop_lock_init);
  uv_mutex_lock(&stop_lock);
  stop_requested = true;
  if (stop_target)
    uv_async_send(stop_target);
  uv_mutex_unlock(&stop_lock);
}

static void stop_target_set(uv_async_t *target) {
  uv_once(&stop_once, stop_lock_init);
  uv_mutex_lock(&stop_lock);
  stop_target = target;
  if (target && stop_requested)
    uv_async_send(target);
  if (!target)
    stop_requested = false;
  uv_mutex_unlock(&stop_lock);
}

static void stop_running(struct runner *rn) {
  rn->stopping = true;
  stop_target_set(NULL);
  uv_close((uv_handle_t *)&rn->stop_async, NULL);
  for (struct rjob *j = rn->jobs; j; j = j->next)
    if (j->running)
      (void)!write(j->cancel_pipe[1], "c", 1);
  uv_timer_stop(&rn->retry);
  uv_close((uv_handle_t *)&rn->retry, NULL);
  uv_close((uv_handle_t *)&rn->sigterm, NULL);
  uv_close((uv_handle_t *)&rn->sigint, NULL);
  if (rn->conn)
    net_conn_close(rn->conn, 0);
}

static void on_signal(uv_signal_t *s, int signum) {
  struct runner *rn = s->data;
  logf_("signal %d: stopping", signum);
  stop_running(rn);
}

static void on_stop_request(uv_async_t *a) {
  struct runner *rn = a->data;
  logf_("stop requested: stopping");
  stop_running(rn);
}

/* The server will never take this device again: say so and exit 1. */
static void stop_for_good(struct runner *rn, const char *why) {
  logf_("%s", why);
  rn->exit_code = 1;
  stop_running(rn);
}

int agent_cmd_run(const struct agent_config *cfg) {
  struct runner rn = {.cfg = cfg};
  struct cordon_diag diag = {{0}};
  int r = agent_pairing_load(cfg->dir, &rn.pairing, &diag);
  if (r == 0)
    r = agent_identity_load(cfg->dir, &rn.priv, &diag);
  if (r == 0)
    r = agent_job_load_trust(cfg, NULL, &rn.trust, &diag);
  if (r < 0)
    return agent_fail(r, diag.msg);
  r = agent_facts_probe(cfg, &rn.facts);
  if (r < 0)
    return agent_fail(r, "probing the sandbox failed");
  snprintf(rn.spool, sizeof(rn.spool), "%s/spool", cfg->dir);
  snprintf(rn.seen, sizeof(rn.seen), "%s/seen", cfg->dir);
  fs_mkdir_p(rn.spool, 0700);
  fs_mkdir_p(rn.seen, 0700);
  signal(SIGPIPE, SIG_IGN);
  /* one pool thread per concurrent job (libuv reads this once, at first use) */
  char pool[16];
  snprintf(pool, sizeof(pool), "%u", cfg->max_jobs);
  setenv("UV_THREADPOOL_SIZE", pool, 1);
  uv_loop_t loop;
  uv_loop_init(&loop);
  rn.loop = &loop;
  net_limits_default(&rn.limits);
  rn.limits.quiet_ms = 10000;
  rn.limits.idle_ms = 60000;
  uv_timer_init(&loop, &rn.retry);
  rn.retry.data = &rn;
  uv_signal_init(&loop, &rn.sigterm);
  uv_signal_init(&loop, &rn.sigint);
  rn.sigterm.data = rn.sigint.data = &rn;
  uv_signal_start(&rn.sigterm, on_signal, SIGTERM);
  uv_signal_start(&rn.sigint, on_signal, SIGINT);
  uv_async_init(&loop, &rn.stop_async, on_stop_request);
  rn.stop_async.data = &rn;
  stop_target_set(&rn.stop_async);
  spool_recover(&rn);
  uv_timer_start(&rn.retry, do_connect, 0, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  write_connection_state(&rn, false);
  while (rn.jobs)
    rjob_free(rn.jobs);
  r = uv_loop_close(&loop);
  cpkg_trust_free(rn.trust);
  sodium_free(rn.priv);
  if (r != 0)
    return agent_fail(CORDON_E_INTERNAL, "the event loop did not close cleanly");
  return rn.exit_code;
}
