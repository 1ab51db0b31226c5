/* The jobs the server dispatches to `cordon-agent run`, as a state machine
 * per job:
 *   job message -> the ticket checked (signature; device, user and session;
 *     job, package and arguments bound; expiry on the server's clock; the
 *     id not seen before, then journaled) -> .running spooled ->
 *   chunks -> the package verified as it streams into the job directory ->
 *   planned (min_sandbox and the owner's ceiling checked again) -> running
 *     message -> sandbox_run on libuv's thread pool (what the job prints
 *     goes out live as output messages meanwhile: bounded, dropped rather
 *     than waited for, messages.md 6.17) ->
 *   result -> spooled, then sent (agent/spool.h; resent until acked).
 * A refusal at any step is a result too (its error code), spooled and sent
 * the same way. A job whose package was still arriving when the connection
 * closed fails with device_lost; a cancel stops a running job through its
 * cancel pipe, or fails one not yet started.
 *
 * The dispatcher owns its jobs (at most max_jobs running: the config's,
 * capped at the value at init, which sized the thread pool); everything
 * it is given at init is borrowed and must outlive it, except the config:
 * each job holds a reference to the config current when it came
 * (agent_dispatch_set_config changes it for the jobs after), so a job
 * keeps its ceiling to its end. It logs each job's start, end and refusal
 * (core_log_kv: job, user, package name@version, outcome, exit_code or
 * signal, level, duration_ms) and counts outcomes in the agent_health.
 * Loop thread only, except the sandbox run itself on a pool thread. */
#ifndef CORDON_AGENT_DISPATCH_H
#define CORDON_AGENT_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "agent/config.h"
#include "agent/ctl.h"
#include "agent/health.h"
#include "agent/seen.h"
#include "agent/session.h"
#include "agent/spool.h"
#include "agent/state.h"
#include "core/id.h"
#include "proto/cpkg.h"
#include "proto/msg.h"

struct agent_dispatch_job;

struct agent_dispatch {
  const struct agent_config *cfg; /* a reference: the current config */
  unsigned pool_size;             /* max_jobs at init: the thread pool's size */
  const struct agent_pairing *pairing;
  const struct cpkg_trust *trust;
  uv_loop_t *loop;
  struct agent_session *session;
  const struct agent_spool *spool;
  const struct agent_seen *seen;
  struct agent_health *health;
  struct agent_dispatch_job *jobs;
  unsigned n_running;
  bool draining; /* no new jobs */
  /* called after a job started or ended (optional) */
  void (*on_change)(void *ctx);
  void *ctx;
};

void agent_dispatch_init(struct agent_dispatch *d, uv_loop_t *loop, const struct agent_config *cfg,
                         const struct agent_pairing *pairing, const struct cpkg_trust *trust,
                         struct agent_session *session, const struct agent_spool *spool,
                         const struct agent_seen *seen, struct agent_health *health);
/* The config for the jobs that come from now on (a reference is taken;
 * the previous one is dropped when its last job ends). */
void agent_dispatch_set_config(struct agent_dispatch *d, const struct agent_config *cfg);
/* The running jobs, at most max of them, into out: returns how many. */
size_t agent_dispatch_list(const struct agent_dispatch *d, struct agent_ctl_job *out, size_t max);
/* The messages that drive the jobs; a chunk or cancel for no known job is
 * ignored. */
void agent_dispatch_on_job(struct agent_dispatch *d, struct msg_job *mj);
void agent_dispatch_on_chunk(struct agent_dispatch *d, const struct msg_chunk *c);
void agent_dispatch_on_cancel(struct agent_dispatch *d, const uint8_t job_id[CORDON_ID_LEN]);
/* At start: each job the spool says was running when the agent died has
 * what is left of it killed and removed, and is reported agent_restarted. */
void agent_dispatch_recover(struct agent_dispatch *d);
/* The connection closed: the jobs whose package was arriving fail. */
void agent_dispatch_connection_lost(struct agent_dispatch *d);
/* Draining: new jobs are refused from now on (the server was told
 * goaway; one that comes anyway fails with spawn_failed). */
void agent_dispatch_drain(struct agent_dispatch *d);
/* Stopping: every running job is told to cancel (its result is spooled
 * when its run returns). */
void agent_dispatch_cancel_running(struct agent_dispatch *d);
/* After the loop has ended: free every job left, drop the config. */
void agent_dispatch_release(struct agent_dispatch *d);

#endif
