#include "agent/health.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compat/posix.h"
#include "core/clock.h"
#include "core/error.h"

static const char *const outcome_names[] = {
#define AGENT_OUTCOME_NAME(id, name) name,
    AGENT_OUTCOMES(AGENT_OUTCOME_NAME)
#undef AGENT_OUTCOME_NAME
};

const char *agent_outcome_name(enum agent_outcome o) {
  return (unsigned)o < AGENT_OUTCOME_N ? outcome_names[o] : "refused";
}

enum agent_outcome agent_outcome_of(const struct job_result *r) {
  if (r->error == CORDON_E_CANCELLED)
    return AGENT_OUTCOME_CANCELLED;
  if (r->timed_out)
    return AGENT_OUTCOME_TIMED_OUT;
  if (r->error == CORDON_E_AGENT_RESTARTED || r->error == CORDON_E_AGENT_STOPPED ||
      r->error == CORDON_E_DEVICE_LOST)
    return AGENT_OUTCOME_LOST;
  if (!r->ran)
    return AGENT_OUTCOME_REFUSED;
  if (r->exited)
    return r->exit_code == 0 && !r->error ? AGENT_OUTCOME_SUCCEEDED : AGENT_OUTCOME_FAILED;
  return AGENT_OUTCOME_KILLED;
}

void agent_health_init(struct agent_health *h) {
  memset(h, 0, sizeof(*h));
  h->started_ms = core_wall_ms();
}

void agent_health_error(struct agent_health *h, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->last_error, sizeof(h->last_error), fmt, ap);
  va_end(ap);
  h->last_error_ms = core_wall_ms();
}
