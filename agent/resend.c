#include "agent/resend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "proto/msg.h"

static void on_due(uv_timer_t *t);

static void arm(struct agent_resend *r) {
  uint64_t now = uv_now(r->timer.loop), next = 0;
  for (size_t i = 0; i < AGENT_RESEND_JOBS; i++)
    if (r->e[i].due_ms && (!next || r->e[i].due_ms < next))
      next = r->e[i].due_ms;
  if (!next) {
    uv_timer_stop(&r->timer);
    return;
  }
  uv_timer_start(&r->timer, on_due, next > now ? next - now : 0, 0);
}

static void on_due(uv_timer_t *t) {
  struct agent_resend *r = t->data;
  uint64_t now = uv_now(t->loop);
  for (size_t i = 0; i < AGENT_RESEND_JOBS; i++) {
    struct agent_resend_entry *e = &r->e[i];
    if (!e->due_ms || e->due_ms > now)
      continue;
    e->due_ms = 0; /* until the server answers again */
    uint8_t *msg;
    size_t len;
    if (agent_spool_get_result(r->spool, e->id, MSG_ENCODED_MAX, &msg, &len) < 0) {
      memset(e, 0, sizeof(*e)); /* acked meanwhile, or unreadable: the welcome's job */
      continue;
    }
    char hex[CORDON_ID_HEX_SIZE];
    cordon_id_to_hex(e->id, hex);
    core_log_kv(CORE_LOG_INFO, "sending a result again: the server asked", "job", hex, NULL);
    agent_session_send_encoded(r->session, msg, len);
    free(msg);
  }
  arm(r);
}

void agent_resend_init(struct agent_resend *r, uv_loop_t *loop, const struct agent_spool *spool,
                       struct agent_session *session) {
  memset(r, 0, sizeof(*r));
  r->spool = spool;
  r->session = session;
  uv_timer_init(loop, &r->timer);
  r->timer.data = r;
}

static struct agent_resend_entry *find(struct agent_resend *r, const uint8_t id[CORDON_ID_LEN]) {
  for (size_t i = 0; i < AGENT_RESEND_JOBS; i++)
    if (r->e[i].wait_ms && memcmp(r->e[i].id, id, CORDON_ID_LEN) == 0)
      return &r->e[i];
  return NULL;
}

void agent_resend_later(struct agent_resend *r, const uint8_t id[CORDON_ID_LEN],
                        uint32_t retry_ms) {
  struct agent_resend_entry *e = find(r, id);
  uint64_t wait = retry_ms ? retry_ms : 1;
  if (e) {
    wait = e->wait_ms * 2 > wait ? e->wait_ms * 2 : wait;
  } else {
    for (size_t i = 0; !e && i < AGENT_RESEND_JOBS; i++)
      if (!r->e[i].wait_ms)
        e = &r->e[i];
    if (!e)
      return; /* the next session sends it */
    memcpy(e->id, id, CORDON_ID_LEN);
  }
  if (wait > AGENT_RESEND_MAX_MS)
    wait = AGENT_RESEND_MAX_MS;
  e->wait_ms = wait;
  e->due_ms = uv_now(r->timer.loop) + wait;
  char hex[CORDON_ID_HEX_SIZE], ms[24];
  cordon_id_to_hex(id, hex);
  snprintf(ms, sizeof(ms), "%llu", (unsigned long long)wait);
  core_log_kv(CORE_LOG_WARN, "the server could not record a result: sending it again later", "job",
              hex, "retry_ms", ms, NULL);
  arm(r);
}

void agent_resend_forget(struct agent_resend *r, const uint8_t id[CORDON_ID_LEN]) {
  struct agent_resend_entry *e = find(r, id);
  if (e) {
    memset(e, 0, sizeof(*e));
    arm(r);
  }
}

void agent_resend_clear(struct agent_resend *r) {
  memset(r->e, 0, sizeof(r->e));
  uv_timer_stop(&r->timer);
}

void agent_resend_close(struct agent_resend *r) {
  if (!uv_is_closing((uv_handle_t *)&r->timer))
    uv_close((uv_handle_t *)&r->timer, NULL);
}
