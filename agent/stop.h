/* Stopping `cordon-agent run` from another thread (the Windows Service
 * Control Manager's handler runs on a thread of its own). A process-wide
 * latch: a request is kept until a run's loop takes it, so one made before
 * the loop is up stops it as soon as it is. One run at a time per process. */
#ifndef CORDON_AGENT_STOP_H
#define CORDON_AGENT_STOP_H

#include <stdbool.h>
#include <uv.h>

/* Make agent_cmd_run stop as SIGTERM does (running jobs are cancelled and
 * their results spooled). Safe from any thread. */
void agent_run_request_stop(void);
/* The run's side: target (an initialised uv_async_t of the running loop)
 * is sent every request from now on, and at once when one is pending.
 * NULL detaches it (before the handle is closed) and drops a pending
 * request. Aborts when the lock cannot be made. */
void agent_run_stop_target_set(uv_async_t *target);

struct job_result;
/* A job the agent cancelled because it stops (drain timeout, a second
 * signal, revocation) ends agent_stopped, never cancelled (the code of an
 * operator's cancel): when stopped is true and res says cancelled, res
 * says agent_stopped from now on. Anything else is left as it is. */
void agent_stopped_code(bool stopped, struct job_result *res);

#endif
