#include "agent/stop.h"
#include "compat/posix.h"
#include "core/result.h"

#include <stdbool.h>
#include <stdlib.h>

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

void agent_run_stop_target_set(uv_async_t *target) {
  uv_once(&stop_once, stop_lock_init);
  uv_mutex_lock(&stop_lock);
  stop_target = target;
  if (target && stop_requested)
    uv_async_send(target);
  if (!target)
    stop_requested = false;
  uv_mutex_unlock(&stop_lock);
}

void agent_stopped_code(bool stopped, struct job_result *res) {
  if (!stopped || res->error != CORDON_E_CANCELLED)
    return;
  job_result_fail(res, CORDON_E_AGENT_STOPPED,
                  "the agent was stopped before the job finished (drain timeout, a second "
                  "signal or revocation)");
}
