/* cordon-agent run: stay connected to the paired server, run the jobs it
 * sends, and deliver every result at least once. This file assembles the
 * parts and runs the loop: agent/session.c (the connection), agent/
 * dispatch.c (the jobs), agent/spool.c (results until acked), agent/seen.c
 * (the replay journal); it stops on SIGTERM, SIGINT, agent_run_request_stop
 * (agent/stop.c) or the server's word that this device is gone. */
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

#include "agent/commands.h"
#include "agent/dispatch.h"
#include "agent/hello.h"
#include "agent/job.h"
#include "agent/seen.h"
#include "agent/session.h"
#include "agent/spool.h"
#include "agent/state.h"
#include "agent/stop.h"
#include "compat/posix.h"
#include "core/log.h"
#include "proto/msg.h"

struct runner {
  const struct agent_config *cfg;
  struct agent_pairing pairing;
  struct agent_facts facts;
  uint8_t *priv;
  struct cpkg_trust *trust;
  struct agent_spool spool;
  struct agent_seen seen;
  struct agent_session session;
  struct agent_dispatch jobs;
  uv_signal_t sigterm, sigint;
  uv_async_t stop_async; /* agent_run_request_stop, from another thread */
  int exit_code;
};

static void stop_running(struct runner *rn) {
  agent_run_stop_target_set(NULL);
  uv_close((uv_handle_t *)&rn->stop_async, NULL);
  agent_dispatch_cancel_running(&rn->jobs);
  uv_close((uv_handle_t *)&rn->sigterm, NULL);
  uv_close((uv_handle_t *)&rn->sigint, NULL);
  agent_session_close(&rn->session);
}

static void on_signal(uv_signal_t *s, int signum) {
  struct runner *rn = s->data;
  core_log("signal %d: stopping", signum);
  stop_running(rn);
}

static void on_stop_request(uv_async_t *a) {
  struct runner *rn = a->data;
  core_log("stop requested: stopping");
  stop_running(rn);
}

/* ---- what the session hands over ---- */

static void resend_one(void *ctx, const uint8_t *msg, size_t len) {
  struct runner *rn = ctx;
  agent_session_send_encoded(&rn->session, msg, len);
}

static void on_welcome(void *ctx) {
  struct runner *rn = ctx;
  agent_seen_prune(&rn->seen, agent_session_server_now_ms(&rn->session));
  agent_spool_each_result(&rn->spool, MSG_ENCODED_MAX, resend_one, rn);
}

static void on_message(void *ctx, struct msg *m) {
  struct runner *rn = ctx;
  switch (m->type) {
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
    agent_spool_ack(&rn->spool, m->ack.job_id);
    break;
  default:
    break;
  }
}

static void on_lost(void *ctx) {
  struct runner *rn = ctx;
  agent_dispatch_connection_lost(&rn->jobs);
}

/* The server will never take this device again: say so and exit 1. */
static void on_revoked(void *ctx, const char *why) {
  struct runner *rn = ctx;
  core_log("%s", why);
  rn->exit_code = 1;
  stop_running(rn);
}

static const struct agent_session_ops run_session_ops = {
    .on_welcome = on_welcome,
    .on_message = on_message,
    .on_lost = on_lost,
    .on_revoked = on_revoked,
};

int agent_cmd_run(const struct agent_config *cfg) {
  struct runner rn = {.cfg = cfg};
  struct cordon_diag diag = {{0}};
  int r = agent_pairing_load(cfg->dir, &rn.pairing, &diag);
  if (r == 0)
    r = agent_identity_load(cfg->dir, &rn.priv, &diag);
  if (r == 0)
    r = agent_job_load_trust(cfg, NULL, &rn.trust, &diag);
  if (r == 0 && (r = agent_facts_probe(cfg, &rn.facts)) < 0)
    cordon_diag_set(&diag, r, "probing the sandbox failed");
  if (r < 0)
    goto out_fail;
  (void)agent_spool_init(&rn.spool, cfg->dir);
  (void)agent_seen_init(&rn.seen, cfg->dir);
  signal(SIGPIPE, SIG_IGN);
  /* one pool thread per concurrent job (libuv reads this once, at first use) */
  char pool[16];
  snprintf(pool, sizeof(pool), "%u", cfg->max_jobs);
  setenv("UV_THREADPOOL_SIZE", pool, 1);
  uv_loop_t loop;
  uv_loop_init(&loop);
  agent_session_init(&rn.session, &loop, cfg, &rn.pairing, &rn.facts, rn.priv, &run_session_ops,
                     &rn);
  agent_dispatch_init(&rn.jobs, &loop, cfg, &rn.pairing, rn.trust, &rn.session, &rn.spool,
                      &rn.seen);
  uv_signal_init(&loop, &rn.sigterm);
  uv_signal_init(&loop, &rn.sigint);
  rn.sigterm.data = rn.sigint.data = &rn;
  uv_signal_start(&rn.sigterm, on_signal, SIGTERM);
  uv_signal_start(&rn.sigint, on_signal, SIGINT);
  uv_async_init(&loop, &rn.stop_async, on_stop_request);
  rn.stop_async.data = &rn;
  agent_run_stop_target_set(&rn.stop_async);
  agent_dispatch_recover(&rn.jobs);
  agent_session_start(&rn.session);
  uv_run(&loop, UV_RUN_DEFAULT);
  agent_session_release(&rn.session);
  agent_dispatch_release(&rn.jobs);
  r = uv_loop_close(&loop);
  cpkg_trust_free(rn.trust);
  sodium_free(rn.priv);
  if (r != 0)
    return agent_fail(CORDON_E_INTERNAL, "the event loop did not close cleanly");
  return rn.exit_code;

out_fail:
  cpkg_trust_free(rn.trust);
  sodium_free(rn.priv);
  return agent_fail(r, diag.msg);
}
