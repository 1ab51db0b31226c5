#include "proto/result_msg.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a stream the wire carries is one a result's JSON is sized for */
_Static_assert(MSG_OUTPUT_MAX == RESULT_OUTPUT_MAX, "the output caps agree");

/* limit_mech and msg_enforce use the same order */
static enum msg_enforce to_enforce(enum limit_mech m) {
  return (enum msg_enforce)m;
}

void result_to_msg(const struct job_result *r, const uint8_t job_id[CORDON_ID_LEN],
                   const uint8_t device_id[CORDON_ID_LEN], struct msg *out) {
  memset(out, 0, sizeof(*out));
  out->type = MSG_RESULT;
  struct msg_result *m = &out->result;
  memcpy(m->job_id, job_id, CORDON_ID_LEN);
  memcpy(m->device_id, device_id, CORDON_ID_LEN);
  if (r->ran && r->exited) {
    m->has_exit_code = true;
    m->exit_code = r->exit_code;
  } else if (r->ran && r->signal > 0) {
    m->has_signal = true;
    m->signal = r->signal;
  }
  m->stdout_buf.data = r->out.data;
  m->stdout_buf.len = r->out.len;
  m->stderr_buf.data = r->err.data;
  m->stderr_buf.len = r->err.len;
  m->stdout_truncated = r->out.truncated;
  m->stderr_truncated = r->err.truncated;
  m->wall_ms = r->wall_ms;
  m->timed_out = r->timed_out;
  m->has_oom_killed = r->oom_killed >= 0;
  m->oom_killed = r->oom_killed == 1;
  m->orphans_killed = r->orphans_killed;
  m->has_kill_scope = r->kill_scope != KILL_SCOPE_NONE;
  m->kill_scope = (uint32_t)r->kill_scope;
  m->sandbox.requested = (enum msg_level)r->requested;
  m->sandbox.has_level = r->level_known;
  m->sandbox.level = (enum msg_level)r->level;
  m->sandbox.mechanism = r->mechanism[0] ? (char *)r->mechanism : NULL;
  m->sandbox.downgrade_reason =
      r->level_known && r->level != SANDBOX_LEVEL_ISOLATED
          ? (char *)(r->downgrade_reason ? r->downgrade_reason : "unknown")
          : NULL;
  m->sandbox.limits.memory = to_enforce(r->lim_memory);
  m->sandbox.limits.processes = to_enforce(r->lim_processes);
  m->sandbox.limits.cpu = to_enforce(r->lim_cpu);
  m->sandbox.limits.time = to_enforce(r->lim_time);
  m->sandbox.limits.disk = to_enforce(r->lim_disk);
  if (r->error || !(m->has_exit_code || m->has_signal)) {
    m->has_error = true;
    m->error.code = (char *)cordon_err_name(r->error ? r->error : CORDON_E_INTERNAL);
    m->error.message =
        (char *)(r->error_message[0] ? r->error_message : cordon_err_message(r->error));
  }
}

static int copy_buf(struct result_buf *dst, const struct msg_bytes *src, bool truncated) {
  dst->data = malloc(src->len ? src->len : 1);
  if (!dst->data)
    return -ENOMEM;
  if (src->len)
    memcpy(dst->data, src->data, src->len);
  dst->len = src->len;
  dst->truncated = truncated;
  return 0;
}

int result_from_msg(const struct msg_result *m, struct job_result *r) {
  sodium_bin2hex(r->job_id, sizeof(r->job_id), m->job_id, CORDON_ID_LEN);
  sodium_bin2hex(r->device_id, sizeof(r->device_id), m->device_id, CORDON_ID_LEN);
  r->ran = m->has_exit_code || m->has_signal;
  r->exited = m->has_exit_code;
  r->exit_code = (int)m->exit_code;
  r->signal = m->has_signal ? m->signal : 0;
  if (copy_buf(&r->out, &m->stdout_buf, m->stdout_truncated) < 0 ||
      copy_buf(&r->err, &m->stderr_buf, m->stderr_truncated) < 0)
    return -ENOMEM;
  r->wall_ms = m->wall_ms;
  r->timed_out = m->timed_out;
  r->oom_killed = m->has_oom_killed ? (m->oom_killed ? 1 : 0) : -1;
  r->orphans_killed = m->orphans_killed;
  r->kill_scope = m->has_kill_scope ? (enum kill_scope)m->kill_scope : KILL_SCOPE_NONE;
  r->requested = (enum sandbox_level)m->sandbox.requested;
  r->level_known = m->sandbox.has_level;
  r->level = (enum sandbox_level)m->sandbox.level;
  snprintf(r->mechanism, sizeof(r->mechanism), "%s",
           m->sandbox.mechanism ? m->sandbox.mechanism : "");
  if (m->sandbox.downgrade_reason) {
    snprintf(r->reason_store, sizeof(r->reason_store), "%s", m->sandbox.downgrade_reason);
    r->downgrade_reason = r->reason_store;
  }
  r->lim_memory = (enum limit_mech)m->sandbox.limits.memory;
  r->lim_processes = (enum limit_mech)m->sandbox.limits.processes;
  r->lim_cpu = (enum limit_mech)m->sandbox.limits.cpu;
  r->lim_time = (enum limit_mech)m->sandbox.limits.time;
  r->lim_disk = (enum limit_mech)m->sandbox.limits.disk;
  if (m->has_error) {
    int code = cordon_err_from_name(m->error.code);
    r->error = code ? code : CORDON_E_INTERNAL;
    snprintf(r->error_message, sizeof(r->error_message), "%s",
             m->error.message ? m->error.message : "");
    /* the wire's message (UTF-8, up to MSG_TEXT_MAX) may be cut inside a
     * character: back to the last whole one, so that the JSON takes it */
    size_t n = strlen(r->error_message);
    while (n > 0 && !utf8_valid((const uint8_t *)r->error_message, n))
      r->error_message[--n] = '\0';
  }
  return 0;
}
