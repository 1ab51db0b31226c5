/* cordon-agent run: stay connected to the paired server, run the jobs it
 * sends, and deliver every result at least once. This file assembles the
 * parts and runs the loop: agent/session.c (the connection), agent/
 * dispatch.c (the jobs), agent/spool.c (results until acked), agent/seen.c
 * (the replay journal), agent/ctl_server.c (what `status` and `metrics`
 * ask); and it owns what makes it a daemon an operator can trust
 * (docs/OPERATIONS.md, "The running agent"):
 *
 * - one per config directory: CONFIG/agent.lock (platform/daemon.h), taken
 *   before anything else is touched; the control socket is the holder's;
 * - SIGHUP re-reads config.json: the jobs that come after get the new
 *   ceiling, running ones keep theirs;
 * - SIGTERM, SIGINT and agent_run_request_stop (agent/stop.c) drain: the
 *   server is told goaway `shutdown`, running jobs get drain_timeout_s to
 *   finish and are cancelled after it, every result is spooled (and sent
 *   after the restart), exit 0. A second signal cancels at once;
 * - the service manager hears READY=1 once the first connection attempt
 *   is made (not when it succeeds: a server that is down must not fail the
 *   start), STATUS= lines as things change, STOPPING=1, and WATCHDOG=1
 *   from the loop when it asked for one;
 * - the server's word that this device is gone ends it with
 *   AGENT_EXIT_UNPAIRED. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "agent/commands.h"
#include "agent/ctl.h"
#include "agent/ctl_server.h"
#include "agent/dispatch.h"
#include "agent/health.h"
#include "agent/hello.h"
#include "agent/job.h"
#include "agent/recover.h"
#include "agent/resend.h"
#include "agent/seen.h"
#include "agent/session.h"
#include "agent/spool.h"
#include "agent/state.h"
#include "agent/stop.h"
#include "agent/trust.h"
#include "compat/posix.h"
#include "core/log.h"
#include "platform/daemon.h"
#include "platform/sandbox.h"
#include "proto/msg.h"
#include "svc/journal.h"

#define AGENT_LOCK_FILE "agent.lock"

struct runner {
  const struct agent_config *cfg; /* a reference: the current config */
  struct agent_run_options opt;
  struct agent_pairing pairing;
  struct agent_facts facts;
  uint8_t *priv;
  struct cpkg_trust *trust;
  /* trusts replaced by a `keys` message: a staging job may still hold one;
   * freed once the dispatcher has no job (old_trust_prune) */
  struct cpkg_trust **old_trust;
  size_t n_old_trust;
  struct agent_health health;
  struct agent_spool spool;
  struct agent_seen seen;
  struct agent_session session;
  struct agent_dispatch jobs;
  struct agent_resend resend; /* results the server asked for again */
  struct agent_ctl_server ctl;
  uv_signal_t sigterm, sigint, sighup;
  uv_async_t stop_async; /* agent_run_request_stop, from another thread */
  uv_timer_t drain_timer, watchdog;
  uint64_t watchdog_usec;
  bool ready_told, draining, cancelled, finished;
  char status_told[512];
  int exit_code;
};

/* ---- the service manager ---- */

static void tell_status(struct runner *rn) {
  char status[512];
  unsigned n = rn->jobs.n_running;
  const char *jobs = n == 1 ? "job" : "jobs";
  if (rn->draining)
    snprintf(status, sizeof(status), "STATUS=stopping: %u %s running", n, jobs);
  else if (rn->health.connected)
    snprintf(status, sizeof(status), "STATUS=connected to %s, %u %s running", rn->health.server, n,
             jobs);
  else if (rn->health.last_error_ms)
    snprintf(status, sizeof(status), "STATUS=connecting to %s (last error: %.150s)",
             rn->health.server, rn->health.last_error);
  else
    snprintf(status, sizeof(status), "STATUS=connecting to %s", rn->health.server);
  if (strcmp(status, rn->status_told) == 0)
    return;
  snprintf(rn->status_told, sizeof(rn->status_told), "%s", status);
  if (!rn->ready_told)
    return; /* READY=1 carries the first one */
  (void)daemon_notify(status);
}

static void tell_ready(struct runner *rn) {
  if (rn->ready_told)
    return;
  rn->ready_told = true;
  tell_status(rn);
  char msg[600];
  snprintf(msg, sizeof(msg), "READY=1\n%s", rn->status_told);
  (void)daemon_notify(msg);
}

static void on_watchdog(uv_timer_t *t) {
  (void)t;
  (void)daemon_notify("WATCHDOG=1");
}

/* ---- stopping ---- */

/* Close what keeps the loop alive besides the session and the jobs: the
 * loop ends once those are done too. */
static void finish(struct runner *rn) {
  if (rn->finished)
    return;
  rn->finished = true;
  agent_run_stop_target_set(NULL);
  uv_close((uv_handle_t *)&rn->stop_async, NULL);
  uv_close((uv_handle_t *)&rn->sigterm, NULL);
  uv_close((uv_handle_t *)&rn->sigint, NULL);
  uv_close((uv_handle_t *)&rn->sighup, NULL);
  uv_close((uv_handle_t *)&rn->drain_timer, NULL);
  uv_close((uv_handle_t *)&rn->watchdog, NULL);
  agent_ctl_server_close(&rn->ctl);
  agent_resend_close(&rn->resend);
  agent_session_close(&rn->session);
}

static void cancel_now(struct runner *rn, const char *why) {
  if (rn->cancelled)
    return;
  rn->cancelled = true;
  if (rn->jobs.n_running) {
    char n[16];
    snprintf(n, sizeof(n), "%u", rn->jobs.n_running);
    core_log_kv(CORE_LOG_WARN, "cancelling the running jobs", "reason", why, "running", n, NULL);
  }
  agent_dispatch_cancel_running(&rn->jobs);
}

static void on_drain_timeout(uv_timer_t *t) {
  cancel_now(t->data, "drain timeout");
}

/* No new jobs; the running ones finish (until the drain timeout); then
 * finish(). A second request cancels them at once. */
static void drain(struct runner *rn, const char *why) {
  if (rn->finished)
    return;
  if (rn->draining) {
    cancel_now(rn, "asked again");
    return;
  }
  rn->draining = rn->health.draining = true;
  char n[16], t[16], msg[64];
  snprintf(n, sizeof(n), "%u", rn->jobs.n_running);
  snprintf(t, sizeof(t), "%u", rn->opt.drain_timeout_s);
  snprintf(msg, sizeof(msg), "%s: stopping", why); /* "SIGTERM: stopping" */
  core_log_kv(CORE_LOG_INFO, msg, "running", n, "drain_timeout_s", t, NULL);
  agent_dispatch_drain(&rn->jobs);
  agent_session_shutdown(&rn->session, "the agent is stopping");
  tell_status(rn);
  (void)daemon_notify("STOPPING=1");
  if (rn->jobs.n_running == 0) {
    finish(rn);
    return;
  }
  if (rn->opt.drain_timeout_s == 0)
    cancel_now(rn, "drain timeout");
  else
    uv_timer_start(&rn->drain_timer, on_drain_timeout, (uint64_t)rn->opt.drain_timeout_s * 1000, 0);
}

static void on_signal(uv_signal_t *s, int signum) {
  drain(s->data, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

static void on_stop_request(uv_async_t *a) {
  drain(a->data, "stop requested");
}

/* ---- SIGHUP: the ceiling again ---- */

static void log_ceiling(const char *msg, const struct agent_config *c) {
  char roots[1024], max_jobs[16];
  agent_config_grant_roots_text(c, roots, sizeof(roots));
  snprintf(max_jobs, sizeof(max_jobs), "%u", c->max_jobs);
  core_log_kv(CORE_LOG_INFO, msg, "net", c->net ? "true" : "false", "lowest_level",
              sandbox_level_name(c->lowest_level), "grant_roots", roots, "job_user", c->job_user,
              "bwrap_path", c->bwrap_path, "max_jobs", max_jobs, NULL);
}

static bool same_strings(char *const *a, size_t na, char *const *b, size_t nb) {
  if (na != nb)
    return false;
  for (size_t i = 0; i < na; i++)
    if (strcmp(a[i], b[i]) != 0)
      return false;
  return true;
}

/* The staging directory must be reachable by the job user (at start and
 * after a reload, which may name another job user): 0, or the check's
 * error with diag. */
static int check_staging(const struct agent_config *cfg, struct cordon_diag *diag) {
  char jobs[PATH_MAX];
  int r = agent_job_dir_prepare(cfg, jobs, sizeof(jobs), diag);
  if (r == 0)
    r = daemon_job_reach_check(cfg->job_user, jobs, diag);
  return r;
}

static void reload(struct runner *rn) {
  struct agent_config *nc;
  struct cordon_diag diag = {{0}};
  if (agent_config_load(rn->cfg->dir, &nc, &diag) < 0) {
    core_log_kv(CORE_LOG_ERROR, "config reload failed: keeping the current ceiling", "reason",
                diag.msg, NULL);
    agent_health_error(&rn->health, "config reload failed: %s", diag.msg);
    return;
  }
  if (nc->max_jobs > rn->jobs.pool_size) {
    char was[16];
    snprintf(was, sizeof(was), "%u", rn->jobs.pool_size);
    core_log_kv(CORE_LOG_WARN, "max_jobs above its value at start takes a restart", "max_jobs", was,
                NULL);
  }
  if (!same_strings(nc->trusted_publishers, nc->n_trusted_publishers, rn->cfg->trusted_publishers,
                    rn->cfg->n_trusted_publishers))
    core_log_kv(CORE_LOG_WARN, "trusted_publishers are read at start: the change takes a restart",
                NULL);
  if (check_staging(nc, &diag) == CORDON_E_CONFIG_INVALID) {
    core_log_kv(CORE_LOG_ERROR, "jobs will fail: the staging directory is out of reach", "reason",
                diag.msg, NULL);
    agent_health_error(&rn->health, "%s", diag.msg);
  }
  struct agent_facts facts;
  if (agent_facts_probe(nc, &facts) == 0) {
    if (facts.max_jobs > rn->jobs.pool_size)
      facts.max_jobs = rn->jobs.pool_size;
    rn->facts = facts; /* what the next hello says */
  }
  agent_dispatch_set_config(&rn->jobs, nc);
  agent_config_free((struct agent_config *)rn->cfg);
  rn->cfg = nc;
  log_ceiling("config reloaded", nc);
}

static void on_sighup(uv_signal_t *s, int signum) {
  (void)signum;
  struct runner *rn = s->data;
  core_log_kv(CORE_LOG_INFO, "SIGHUP: reloading config.json", NULL);
  reload(rn);
}

/* ---- what the session and the dispatcher hand over ---- */

static void resend_one(void *ctx, const uint8_t *msg, size_t len) {
  struct runner *rn = ctx;
  agent_session_send_encoded(&rn->session, msg, len);
}

static void on_welcome(void *ctx) {
  struct runner *rn = ctx;
  agent_seen_prune(&rn->seen, agent_session_server_now_ms(&rn->session));
  agent_spool_each_result(&rn->spool, MSG_ENCODED_MAX, resend_one, rn);
  tell_status(rn);
}

/* The replaced trusts, when no job is left that may hold one. */
static void old_trust_prune(struct runner *rn) {
  if (rn->jobs.jobs)
    return;
  for (size_t i = 0; i < rn->n_old_trust; i++)
    cpkg_trust_free(rn->old_trust[i]);
  free(rn->old_trust);
  rn->old_trust = NULL;
  rn->n_old_trust = 0;
}

/* A `keys` announcement (agent/trust.h): the new ticket key is in
 * rn->pairing at once; when the publisher keys changed they take a new
 * trust, for the jobs that start from now on (one that names the same
 * keys allocates nothing). */
static void on_keys(struct runner *rn, const struct msg_keys *k) {
  struct cordon_diag diag = {{0}};
  char serial[24];
  snprintf(serial, sizeof(serial), "%llu", (unsigned long long)k->serial);
  bool fresh_pairing = agent_trust_keys_serial(rn->cfg->dir) == 0;
  bool changed = false;
  int r = agent_trust_apply_keys_changed(rn->cfg->dir, &rn->pairing, k, &changed, &diag);
  if (r == CORDON_E_SIGNATURE_INVALID && fresh_pairing) {
    /* a device paired after this rotation holds the keys of a later
     * announcement, which the chain brings next: nothing to verify here */
    core_log_kv(CORE_LOG_DEBUG, "server keys older than this pairing", "serial", serial, NULL);
    return;
  }
  if (r < 0) {
    core_log_kv(CORE_LOG_WARN, "server keys refused", "serial", serial, "reason", diag.msg, NULL);
    agent_health_error(&rn->health, "server keys %s refused: %s", serial, diag.msg);
    return;
  }
  if (r == 0)
    return;
  old_trust_prune(rn);
  if (!changed) { /* the same publisher keys: the trust stands */
    core_log_kv(CORE_LOG_INFO, "server keys updated", "serial", serial, "old_trusts", "0", NULL);
    return;
  }
  struct cpkg_trust *fresh = NULL;
  struct cpkg_trust **v = realloc(rn->old_trust, (rn->n_old_trust + 1) * sizeof(*v));
  if (v)
    rn->old_trust = v;
  if (!v || agent_job_load_trust(rn->cfg, NULL, &fresh, &diag) < 0) {
    core_log_kv(CORE_LOG_ERROR, "server keys accepted but the trusted keys were not reloaded",
                "serial", serial, "reason", v ? diag.msg : "out of memory", NULL);
    return;
  }
  rn->old_trust[rn->n_old_trust++] = rn->trust;
  rn->trust = fresh;
  rn->jobs.trust = fresh;
  char held[24];
  snprintf(held, sizeof(held), "%zu", rn->n_old_trust);
  core_log_kv(CORE_LOG_INFO, "server keys updated", "serial", serial, "old_trusts", held, NULL);
}

static void on_message(void *ctx, struct msg *m) {
  struct runner *rn = ctx;
  switch (m->type) {
  case MSG_KEYS:
    on_keys(rn, &m->keys);
    break;
  case MSG_JOB:
    agent_dispatch_on_job(&rn->jobs, &m->job);
    break;
  case MSG_CHUNK:
    agent_dispatch_on_chunk(&rn->jobs, &m->chunk);
    break;
  case MSG_CANCEL:
    agent_dispatch_on_cancel(&rn->jobs, m->cancel.job_id);
    break;
  case MSG_ACK:
    if (m->ack.has_retry_ms) { /* not recorded: still wanted, on this session */
      agent_resend_later(&rn->resend, m->ack.job_id, m->ack.retry_ms);
      break;
    }
    agent_resend_forget(&rn->resend, m->ack.job_id);
    agent_spool_ack(&rn->spool, m->ack.job_id);
    break;
  case MSG_ERROR: {
    /* the server's word on a result it refuses or records without its
     * output, before its ack (docs/protocol/messages.md, "Results the
     * server refuses") */
    char hex[CORDON_ID_HEX_SIZE] = "-";
    if (m->error.has_job_id)
      cordon_id_to_hex(m->error.job_id, hex);
    core_log_kv(CORE_LOG_WARN, "the server answered a result with an error", "job", hex, "code",
                m->error.code, "detail", m->error.message ? m->error.message : "", NULL);
    break;
  }
  default:
    break;
  }
}

static void on_lost(void *ctx) {
  struct runner *rn = ctx;
  agent_dispatch_connection_lost(&rn->jobs);
  agent_resend_clear(&rn->resend);
  tell_status(rn);
}

static void on_attempt(void *ctx) {
  tell_ready(ctx);
}

/* The server will never take this device again: say so, cancel what
 * runs, and exit AGENT_EXIT_UNPAIRED. */
static void on_revoked(void *ctx, const char *why) {
  struct runner *rn = ctx;
  core_log_kv(CORE_LOG_ERROR, "stopping: this device is not paired any more", "reason", why, NULL);
  agent_health_error(&rn->health, "%s", why);
  rn->exit_code = AGENT_EXIT_UNPAIRED;
  cancel_now(rn, "revoked");
  finish(rn);
}

static const struct agent_session_ops run_session_ops = {
    .on_welcome = on_welcome,
    .on_message = on_message,
    .on_lost = on_lost,
    .on_attempt = on_attempt,
    .on_revoked = on_revoked,
};

static void on_jobs_changed(void *ctx) {
  struct runner *rn = ctx;
  old_trust_prune(rn);
  tell_status(rn);
  if (rn->draining && rn->jobs.n_running == 0)
    finish(rn);
}

/* ---- the control socket ---- */

static char *answer(void *ctx, enum agent_ctl_op op) {
  struct runner *rn = ctx;
  struct agent_ctl_job jobs[64];
  struct agent_ctl_view v = {
      .pid = (long)uv_os_getpid(),
      .version = AGENT_VERSION,
      .config_dir = rn->cfg->dir,
      .health = &rn->health,
      .jobs = jobs,
      .n_jobs = agent_dispatch_list(&rn->jobs, jobs, sizeof(jobs) / sizeof(jobs[0])),
      .max_jobs = rn->cfg->max_jobs < rn->jobs.pool_size ? rn->cfg->max_jobs : rn->jobs.pool_size,
  };
  return agent_ctl_reply(op, &v);
}

static void start_ctl(struct runner *rn, uv_loop_t *loop) {
  char path[256];
  int r = daemon_ctl_path(rn->cfg->dir, AGENT_CTL_SOCKET, path, sizeof(path));
  if (r == -ENOTSUP) {
    core_log_kv(CORE_LOG_INFO, "no control socket on this platform: status cannot ask the agent",
                NULL);
    return;
  }
  if (r == 0)
    r = agent_ctl_server_start(&rn->ctl, loop, path, answer, rn);
  else
    snprintf(path, sizeof(path), "%s/%s", rn->cfg->dir, AGENT_CTL_SOCKET);
  if (r < 0) {
    const char *why = r == -ENAMETOOLONG ? "the path is too long for a socket" : uv_strerror(r);
    core_log_kv(CORE_LOG_WARN, "no control socket: status cannot ask the agent", "path", path,
                "reason", why, NULL);
    agent_health_error(&rn->health, "no control socket at %s: %s", path, why);
  }
}

/* ---- start ---- */

/* The lock, before anything in the directory is touched: 0, or the exit
 * status after the one-line error. *out_lock stays NULL when the
 * directory does not exist yet (then nothing is paired either). */
static int take_lock(const struct agent_config *cfg, struct daemon_lock **out_lock) {
  int r = daemon_lock_take(cfg->dir, AGENT_LOCK_FILE, out_lock);
  if (r == 0 || r == -ENOENT)
    return 0;
  char msg[PATH_MAX + 200];
  if (r == -EAGAIN) {
    long pid = daemon_lock_holder(cfg->dir, AGENT_LOCK_FILE);
    char who[32] = "another process";
    if (pid > 0)
      snprintf(who, sizeof(who), "pid %ld", pid);
    snprintf(msg, sizeof(msg),
             "%s is in use by another cordon-agent run (%s holds %s/" AGENT_LOCK_FILE
             "); stop it first or use another --config",
             cfg->dir, who, cfg->dir);
    return agent_usage(msg);
  }
  snprintf(msg, sizeof(msg), "cannot lock %s/" AGENT_LOCK_FILE ": %s", cfg->dir, strerror(-r));
  return agent_fail(r, msg);
}

static enum core_log_level log_level(void) {
  enum core_log_level l = CORE_LOG_DEBUG;
  while (l < CORE_LOG_ERROR && !core_log_enabled(l))
    l = (enum core_log_level)(l + 1);
  return l;
}

static void log_start(const struct runner *rn) {
  char pid[24], drain_s[16], max_jobs[16];
  snprintf(pid, sizeof(pid), "%ld", (long)uv_os_getpid());
  snprintf(drain_s, sizeof(drain_s), "%u", rn->opt.drain_timeout_s);
  snprintf(max_jobs, sizeof(max_jobs), "%u", rn->cfg->max_jobs);
  core_log_kv(CORE_LOG_INFO, "agent started", "version", AGENT_VERSION, "pid", pid, "config",
              rn->cfg->dir, "server", rn->health.server, "best_level",
              sandbox_level_name(rn->facts.best), "max_jobs", max_jobs, "drain_timeout_s", drain_s,
              "log_level", core_log_level_name(log_level()), "log",
              journal_active() ? "journal" : "stderr", NULL);
}

/* What a crash left, finished or removed before the first connection
 * (agent/recover.h): the jobs that were running are reported
 * agent_restarted once the session is up. */
static void recover(struct runner *rn) {
  int killed = agent_recover_sandbox(rn->cfg->dir);
  int temps = agent_recover_temps(&rn->spool, &rn->seen);
  agent_dispatch_recover(&rn->jobs);
  int dirs = agent_recover_staging(rn->cfg->dir, &rn->spool);
  if (temps > 0 || dirs > 0 || killed > 0) {
    char t[16], s[16], k[16];
    snprintf(t, sizeof(t), "%d", temps);
    snprintf(s, sizeof(s), "%d", dirs);
    snprintf(k, sizeof(k), "%d", killed);
    core_log_kv(CORE_LOG_INFO, "removed what a crash left", "temp_files", t, "staging_dirs", s,
                "processes_killed", k, NULL);
  }
}

int agent_cmd_run(const struct agent_config *cfg, const struct agent_run_options *opt) {
  struct runner rn = {.cfg = agent_config_ref(cfg)};
  rn.opt.drain_timeout_s = opt ? opt->drain_timeout_s : AGENT_DRAIN_TIMEOUT_DEFAULT_S;
  agent_health_init(&rn.health);
  struct daemon_lock *lock = NULL;
  struct cordon_diag diag = {{0}};
  int rc = take_lock(cfg, &lock);
  if (rc != 0)
    goto out_cfg;
  /* before any thread: a job never outlives this process (platform/sandbox.h) */
  int rr = sandbox_reaper_start(cfg->dir);
  /* as the server's open_log without --log-file: the journal when stderr is it */
  (void)journal_install_if_stderr();
  if (rr < 0)
    core_log_kv(CORE_LOG_WARN, "no reaper: jobs a killed agent leaves run on until its next start",
                "error", strerror(-rr), NULL);
  int r = agent_pairing_load(cfg->dir, &rn.pairing, &diag);
  if (r == -ENOENT) {
    agent_say_error(r, diag.msg);
    rc = AGENT_EXIT_UNPAIRED;
    goto out_lock;
  }
  if (r == 0)
    r = agent_trust_server_keys_load(cfg->dir, &rn.pairing, &diag);
  if (r == 0)
    r = agent_identity_load(cfg->dir, &rn.priv, &diag);
  if (r == 0)
    r = agent_signing_key_load(cfg->dir, &rn.pairing, &diag);
  if (r == 0)
    r = agent_job_load_trust(cfg, NULL, &rn.trust, &diag);
  if (r == 0 && (r = agent_facts_probe(cfg, &rn.facts)) < 0)
    cordon_diag_set(&diag, r, "probing the sandbox failed");
  if (r < 0) {
    rc = agent_fail(r, diag.msg);
    goto out_keys;
  }
  r = check_staging(cfg, &diag);
  if (r == CORDON_E_CONFIG_INVALID) {
    agent_say_error(r, diag.msg);
    rc = 2;
    goto out_keys;
  }
  if (r < 0 && r != CORDON_E_JOB_USER_MISSING) /* that one: every job says so */
    core_log_kv(CORE_LOG_WARN, "cannot check the staging directory", "reason", diag.msg, NULL);
  (void)agent_spool_init(&rn.spool, cfg->dir);
  (void)agent_seen_init(&rn.seen, cfg->dir);
  char stale[PATH_MAX];
  snprintf(stale, sizeof(stale), "%s/connection", cfg->dir);
  (void)unlink(stale); /* written by agents before the control socket; never read now */
  signal(SIGPIPE, SIG_IGN);
  rn.watchdog_usec = daemon_notify_init();
  /* one pool thread per concurrent job (libuv reads this once, at first use) */
  char pool[16];
  snprintf(pool, sizeof(pool), "%u", cfg->max_jobs);
  setenv("UV_THREADPOOL_SIZE", pool, 1);
  uv_loop_t loop;
  uv_loop_init(&loop);
  agent_session_init(&rn.session, &loop, cfg, &rn.pairing, &rn.facts, rn.priv, &rn.health,
                     &run_session_ops, &rn);
  agent_dispatch_init(&rn.jobs, &loop, cfg, &rn.pairing, rn.trust, &rn.session, &rn.spool, &rn.seen,
                      &rn.health);
  agent_resend_init(&rn.resend, &loop, &rn.spool, &rn.session);
  rn.jobs.on_change = on_jobs_changed;
  rn.jobs.ctx = &rn;
  uv_signal_init(&loop, &rn.sigterm);
  uv_signal_init(&loop, &rn.sigint);
  uv_signal_init(&loop, &rn.sighup);
  rn.sigterm.data = rn.sigint.data = rn.sighup.data = &rn;
  uv_signal_start(&rn.sigterm, on_signal, SIGTERM);
  uv_signal_start(&rn.sigint, on_signal, SIGINT);
  uv_signal_start(&rn.sighup, on_sighup, SIGHUP);
  uv_timer_init(&loop, &rn.drain_timer);
  uv_timer_init(&loop, &rn.watchdog);
  rn.drain_timer.data = rn.watchdog.data = &rn;
  if (rn.watchdog_usec) { /* twice per interval, as sd_watchdog_enabled(3) advises */
    uint64_t every = rn.watchdog_usec / 2000;
    uv_timer_start(&rn.watchdog, on_watchdog, every ? every : 1, every ? every : 1);
  }
  uv_async_init(&loop, &rn.stop_async, on_stop_request);
  rn.stop_async.data = &rn;
  agent_run_stop_target_set(&rn.stop_async);
  start_ctl(&rn, &loop);
  log_start(&rn);
  recover(&rn);
  agent_session_start(&rn.session);
  uv_run(&loop, UV_RUN_DEFAULT);
  agent_dispatch_release(&rn.jobs);
  r = uv_loop_close(&loop);
  if (r != 0)
    rc = agent_fail(CORDON_E_INTERNAL, "the event loop did not close cleanly");
  else
    rc = rn.exit_code;
  char code[8];
  snprintf(code, sizeof(code), "%d", rc);
  core_log_kv(CORE_LOG_INFO, "agent stopped", "exit_status", code, NULL);

out_keys:
  cpkg_trust_free(rn.trust);
  for (size_t i = 0; i < rn.n_old_trust; i++)
    cpkg_trust_free(rn.old_trust[i]);
  free(rn.old_trust);
  sodium_free(rn.priv);
  sodium_free((void *)rn.pairing.sign_sk);
out_lock:
  daemon_lock_release(lock);
out_cfg:
  agent_config_free((struct agent_config *)rn.cfg);
  return rc;
}
