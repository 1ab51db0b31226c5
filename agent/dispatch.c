#include "agent/dispatch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/cpkg_stage.h"
#include "agent/job.h"
#include "compat/posix.h"
#include "core/clock.h"
#include "core/log.h"
#include "platform/fs.h"
#include "platform/sandbox.h"
#include "proto/receipt.h"
#include "proto/result_msg.h"
#include "proto/ticket.h"

struct agent_dispatch_job {
  struct agent_dispatch *d;
  const struct agent_config *cfg; /* a reference: the ceiling it came under */
  uint8_t raw_id[CORDON_ID_LEN];
  char id[CORDON_ID_HEX_SIZE];
  char package[160];   /* name@version, once the manifest is known */
  uint64_t started_ms; /* wall clock, when it started running */
  const char *level;   /* the planned sandbox level, once planned */
  struct agent_job job;
  bool job_made;
  struct agent_cpkg_stager *stager;
  int stage_fd;
  uint64_t pkg_size, received;
  uint8_t index_hash[CPKG_HASH_SIZE];
  uint8_t ticket[TICKET_BODY_LEN]; /* what its receipt is bound to */
  char **args;
  size_t n_args;
  int cancel_pipe[2];
  bool running; /* in the thread pool */
  uv_work_t work;
  struct agent_dispatch_job *next;
};

void agent_dispatch_init(struct agent_dispatch *d, uv_loop_t *loop, const struct agent_config *cfg,
                         const struct agent_pairing *pairing, const struct cpkg_trust *trust,
                         struct agent_session *session, const struct agent_spool *spool,
                         const struct agent_seen *seen, struct agent_health *health) {
  *d = (struct agent_dispatch){.cfg = agent_config_ref(cfg),
                               .pool_size = cfg->max_jobs,
                               .pairing = pairing,
                               .trust = trust,
                               .loop = loop,
                               .session = session,
                               .spool = spool,
                               .seen = seen,
                               .health = health};
}

void agent_dispatch_set_config(struct agent_dispatch *d, const struct agent_config *cfg) {
  const struct agent_config *old = d->cfg;
  d->cfg = agent_config_ref(cfg);
  agent_config_free((struct agent_config *)old);
}

static void changed(struct agent_dispatch *d) {
  if (d->on_change)
    d->on_change(d->ctx);
}

/* One line per result: "job refused" with its code and reason, or "job
 * finished" with how it ended. j is NULL for a job refused before it was
 * made or one recovered after a restart. */
static void log_result(struct agent_dispatch *d, const struct agent_dispatch_job *j, const char *id,
                       const struct job_result *res, enum agent_outcome o) {
  const char *package = j && j->package[0] ? j->package : "-";
  const char *code = res->error ? cordon_err_name(res->error) : "-";
  if (o == AGENT_OUTCOME_REFUSED) {
    core_log_kv(CORE_LOG_WARN, "job refused", "job", id, "user", d->pairing->user, "package",
                package, "code", code, "reason", res->error_message, NULL);
    return;
  }
  char status[16] = "-", duration[24];
  const char *status_key = "exit_code";
  if (res->ran && res->exited)
    snprintf(status, sizeof(status), "%d", res->exit_code);
  else if (res->ran)
    status_key = "signal", snprintf(status, sizeof(status), "%d", res->signal);
  snprintf(duration, sizeof(duration), "%llu", (unsigned long long)res->wall_ms);
  core_log_kv(o == AGENT_OUTCOME_LOST ? CORE_LOG_WARN : CORE_LOG_INFO, "job finished", "job", id,
              "user", d->pairing->user, "package", package, "outcome", agent_outcome_name(o),
              status_key, status, "level", res->level_known ? sandbox_level_name(res->level) : "-",
              "duration_ms", duration, "code", code, NULL);
}

/* Count and log the result, sign its receipt (bound to the ticket when
 * the job's is known: j's, or ticket), spool it, then send it. */
static void deliver_bound(struct agent_dispatch *d, const struct agent_dispatch_job *j,
                          const uint8_t raw_id[CORDON_ID_LEN], const struct msg_bytes *ticket,
                          struct job_result *res) {
  char id[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(raw_id, id);
  enum agent_outcome o = agent_outcome_of(res);
  d->health->outcomes[o]++;
  log_result(d, j, id, res, o);
  struct msg m;
  result_to_msg(res, raw_id, d->pairing->device_id, &m);
  m.result.has_started_ms = m.result.has_ended_ms = true;
  m.result.started_ms = j ? j->started_ms : 0; /* 0 until it started */
  m.result.ended_ms = core_wall_ms();
  const uint8_t *tk = j ? j->ticket : ticket ? ticket->data : NULL;
  size_t tk_len = j ? sizeof(j->ticket) : ticket ? ticket->len : 0;
  uint8_t *buf;
  size_t len;
  struct cordon_diag diag = {{0}};
  int r = d->pairing->sign_sk ? receipt_sign_result(&m.result, tk, tk_len, d->pairing->sign_sk) : 0;
  if (r < 0)
    core_log_kv(CORE_LOG_ERROR, "cannot sign a result's receipt", "job", id, NULL);
  r = msg_encode_alloc(&m, &buf, &len, &diag);
  if (r < 0) {
    core_log_kv(CORE_LOG_ERROR, "cannot encode a result", "job", id, "reason", diag.msg, NULL);
    agent_health_error(d->health, "job %s: cannot encode its result: %s", id, diag.msg);
    return;
  }
  r = agent_spool_put_result(d->spool, raw_id, buf, len);
  if (r < 0) {
    core_log_kv(CORE_LOG_ERROR, "cannot spool a result", "job", id, "reason", strerror(-r), NULL);
    agent_health_error(d->health, "job %s: cannot spool its result: %s", id, strerror(-r));
  }
  agent_session_send_encoded(d->session, buf, len);
  free(buf);
}

static void deliver(struct agent_dispatch *d, const struct agent_dispatch_job *j,
                    const uint8_t raw_id[CORDON_ID_LEN], struct job_result *res) {
  deliver_bound(d, j, raw_id, NULL, res);
}

/* A job refused before it was made: its receipt is bound to mj's ticket. */
static void refuse_job(struct agent_dispatch *d, const struct msg_job *mj, int err,
                       const char *why) {
  struct job_result res;
  job_result_init(&res);
  cordon_id_to_hex(mj->job_id, res.job_id);
  job_result_fail(&res, err, "%s", why);
  deliver_bound(d, NULL, mj->job_id, &mj->ticket, &res);
  job_result_release(&res);
}

static void refuse(struct agent_dispatch *d, const struct agent_dispatch_job *j,
                   const uint8_t raw_id[CORDON_ID_LEN], int err, const char *why) {
  struct job_result res;
  job_result_init(&res);
  cordon_id_to_hex(raw_id, res.job_id);
  job_result_fail(&res, err, "%s", why);
  deliver(d, j, raw_id, &res);
  job_result_release(&res);
}

static struct agent_dispatch_job *job_find(struct agent_dispatch *d,
                                           const uint8_t raw[CORDON_ID_LEN]) {
  for (struct agent_dispatch_job *j = d->jobs; j; j = j->next)
    if (memcmp(j->raw_id, raw, CORDON_ID_LEN) == 0)
      return j;
  return NULL;
}

static void job_free(struct agent_dispatch_job *j) {
  struct agent_dispatch *d = j->d;
  for (struct agent_dispatch_job **pp = &d->jobs; *pp; pp = &(*pp)->next)
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
  agent_config_free((struct agent_config *)j->cfg);
  free(j);
}

static void fail_job(struct agent_dispatch_job *j, int err, const char *why) {
  refuse(j->d, j, j->raw_id, err, why);
  job_free(j);
}

void agent_dispatch_on_job(struct agent_dispatch *d, struct msg_job *mj) {
  char id[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(mj->job_id, id);
  if (d->draining) {
    refuse_job(d, mj, CORDON_E_SPAWN_FAILED, "the agent is stopping");
    return;
  }
  struct ticket t;
  int r =
      ticket_verify(mj->ticket.data, mj->ticket.len, mj->ticket_sig, d->pairing->ticket_key, &t);
  if (r < 0) {
    refuse_job(d, mj, CORDON_E_SIGNATURE_INVALID, "the ticket's signature does not verify");
    return;
  }
  uint8_t tag[CORDON_ID_LEN], args_hash[32];
  ticket_user_tag(d->pairing->user, tag);
  ticket_args_hash(mj->args, mj->n_args, args_hash);
  if (sodium_memcmp(t.device_id, d->pairing->device_id, CORDON_ID_LEN) != 0 ||
      sodium_memcmp(t.user_tag, tag, CORDON_ID_LEN) != 0 ||
      sodium_memcmp(t.session_id, d->session->id, CORDON_ID_LEN) != 0) {
    refuse_job(d, mj, CORDON_E_WRONG_DEVICE, "the ticket is for another device, user or session");
    return;
  }
  if (memcmp(t.job_id, mj->job_id, CORDON_ID_LEN) != 0 ||
      memcmp(t.index_hash, mj->pkg_hash, sizeof(t.index_hash)) != 0 ||
      memcmp(t.args_hash, args_hash, sizeof(args_hash)) != 0) {
    refuse_job(d, mj, CORDON_E_SIGNATURE_INVALID, "the job does not match its ticket");
    return;
  }
  if ((int64_t)t.expires_ms < agent_session_server_now_ms(d->session)) {
    refuse_job(d, mj, CORDON_E_TICKET_EXPIRED, "the ticket has expired");
    return;
  }
  r = agent_seen_check_and_add(d->seen, mj->job_id, t.expires_ms);
  if (r == CORDON_E_TICKET_REPLAYED) {
    refuse_job(d, mj, r, "this job id was already seen");
    return;
  }
  if (r < 0) {
    refuse_job(d, mj, CORDON_E_SPAWN_FAILED, "cannot record the job id");
    return;
  }
  unsigned max_jobs = d->cfg->max_jobs < d->pool_size ? d->cfg->max_jobs : d->pool_size;
  if (d->n_running >= max_jobs) {
    refuse_job(d, mj, CORDON_E_SPAWN_FAILED, "the agent is at its max_jobs limit");
    return;
  }
  struct agent_dispatch_job *j = calloc(1, sizeof(*j));
  if (!j) {
    refuse_job(d, mj, CORDON_E_SPAWN_FAILED, "out of memory");
    return;
  }
  j->d = d;
  j->cfg = agent_config_ref(d->cfg);
  j->stage_fd = -1;
  j->cancel_pipe[0] = j->cancel_pipe[1] = -1;
  memcpy(j->raw_id, mj->job_id, CORDON_ID_LEN);
  memcpy(j->index_hash, t.index_hash, sizeof(j->index_hash));
  memcpy(j->ticket, mj->ticket.data, sizeof(j->ticket)); /* verified: TICKET_BODY_LEN bytes */
  snprintf(j->id, sizeof(j->id), "%s", id);
  j->pkg_size = mj->pkg_size;
  j->next = d->jobs;
  d->jobs = j;
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
  if (agent_spool_mark_running(d->spool, j->raw_id) < 0) {
    fail_job(j, CORDON_E_SPAWN_FAILED, "cannot write the spool");
    return;
  }
  core_log_kv(CORE_LOG_DEBUG, "job accepted", "job", id, "user", d->pairing->user, NULL);
  r = agent_job_begin_stream(&j->job, j->cfg, id, &j->stage_fd, &diag);
  j->job_made = true;
  if (r == 0)
    r = agent_cpkg_stager_new(d->trust, j->stage_fd, &j->stager, &diag);
  if (r < 0)
    fail_job(j, CORDON_E_SPAWN_FAILED, diag.msg);
}

static void work_run(uv_work_t *w) {
  struct agent_dispatch_job *j = w->data;
  int r = sandbox_run(j->job.plan, &j->job.result);
  if (r < 0 && !j->job.result.error)
    job_result_fail(&j->job.result, r, "%s", cordon_err_message(r));
}

static void work_done(uv_work_t *w, int status) {
  (void)status;
  struct agent_dispatch_job *j = w->data;
  struct agent_dispatch *d = j->d;
  d->n_running--;
  j->running = false;
  deliver(d, j, j->raw_id, &j->job.result);
  job_free(j);
  changed(d);
}

/* The whole package arrived: verify, plan, and run it on the pool. */
static void start_job(struct agent_dispatch_job *j) {
  struct agent_dispatch *d = j->d;
  struct manifest *m = NULL;
  uint8_t hash[CPKG_HASH_SIZE];
  struct cordon_diag diag = {{0}};
  int r = agent_cpkg_stager_finish(j->stager, &m, hash, &diag);
  if (r < 0) {
    fail_job(j, r, diag.msg);
    return;
  }
  snprintf(j->package, sizeof(j->package), "%s@%s", m->name, m->version);
  if (memcmp(hash, j->index_hash, sizeof(hash)) != 0) {
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
    deliver(d, j, j->raw_id, res);
    job_free(j);
    return;
  }
  j->job.sjob.cancel_fd = j->cancel_pipe[0];
  memcpy(j->job.result.job_id, j->id, sizeof(j->id));
  cordon_id_to_hex(d->pairing->device_id, j->job.result.device_id);
  struct msg running = {.type = MSG_RUNNING};
  memcpy(running.running.job_id, j->raw_id, CORDON_ID_LEN);
  agent_session_send(d->session, &running);
  j->running = true;
  d->n_running++;
  j->started_ms = core_wall_ms();
  j->work.data = j;
  const char *why;
  j->level = sandbox_level_name(sandbox_probe_best(j->job.probe, &why)); /* the plan's level */
  core_log_kv(CORE_LOG_INFO, "job started", "job", j->id, "user", d->pairing->user, "package",
              j->package, "level", j->level, NULL);
  uv_queue_work(d->loop, &j->work, work_run, work_done);
  changed(d);
}

void agent_dispatch_on_chunk(struct agent_dispatch *d, const struct msg_chunk *c) {
  struct agent_dispatch_job *j = job_find(d, c->job_id);
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

void agent_dispatch_on_cancel(struct agent_dispatch *d, const uint8_t job_id[CORDON_ID_LEN]) {
  struct agent_dispatch_job *j = job_find(d, job_id);
  if (!j)
    return;
  if (j->running) {
    (void)!write(j->cancel_pipe[1], "c", 1);
  } else {
    fail_job(j, CORDON_E_CANCELLED, "the job was cancelled before it started");
  }
}

static void recover_one(void *ctx, const uint8_t raw[CORDON_ID_LEN]) {
  struct agent_dispatch *d = ctx;
  char id[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(raw, id);
  int killed = sandbox_reap_leftovers(id);
  if (killed > 0) {
    char n[16];
    snprintf(n, sizeof(n), "%d", killed);
    core_log_kv(CORE_LOG_WARN, "killed processes left from before the restart", "job", id, "killed",
                n, NULL);
  }
  char jobs[PATH_MAX];
  snprintf(jobs, sizeof(jobs), "%s/jobs", d->cfg->dir);
  int jfd = open(jobs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (jfd >= 0) { /* its staging directory */
    fs_remove_tree_at(jfd, id);
    close(jfd);
  }
  struct job_result res;
  job_result_init(&res);
  snprintf(res.job_id, sizeof(res.job_id), "%s", id);
  job_result_fail(&res, CORDON_E_AGENT_RESTARTED, "the agent restarted while the job ran");
  deliver(d, NULL, raw, &res);
  job_result_release(&res);
}

void agent_dispatch_recover(struct agent_dispatch *d) {
  agent_spool_each_orphan(d->spool, recover_one, d);
}

void agent_dispatch_connection_lost(struct agent_dispatch *d) {
  /* jobs whose package was still arriving cannot finish without it */
  for (struct agent_dispatch_job *j = d->jobs, *n; j; j = n) {
    n = j->next;
    if (!j->running)
      fail_job(j, CORDON_E_DEVICE_LOST,
               d->draining ? "the agent stopped while the package arrived"
                           : "the connection closed while the package arrived");
  }
}

void agent_dispatch_drain(struct agent_dispatch *d) {
  d->draining = true;
}

size_t agent_dispatch_list(const struct agent_dispatch *d, struct agent_ctl_job *out, size_t max) {
  size_t n = 0;
  for (const struct agent_dispatch_job *j = d->jobs; j && n < max; j = j->next) {
    if (!j->running)
      continue;
    struct agent_ctl_job *o = &out[n++];
    memcpy(o->id, j->id, sizeof(o->id));
    snprintf(o->package, sizeof(o->package), "%s", j->package);
    o->started_ms = j->started_ms;
    o->level = j->level;
  }
  return n;
}

void agent_dispatch_cancel_running(struct agent_dispatch *d) {
  for (struct agent_dispatch_job *j = d->jobs; j; j = j->next)
    if (j->running)
      (void)!write(j->cancel_pipe[1], "c", 1);
}

void agent_dispatch_release(struct agent_dispatch *d) {
  while (d->jobs)
    job_free(d->jobs);
  agent_config_free((struct agent_config *)d->cfg);
  d->cfg = NULL;
}
