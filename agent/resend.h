/* Results the server asked to get again on the live session: an `ack`
 * with `retry_ms` says the result was not recorded (the server's disk is
 * full, its database busy) and is still wanted. The result stays in the
 * spool; it is sent again after retry_ms, then after twice the last wait
 * each time the server asks again, at most AGENT_RESEND_MAX_MS apart
 * (docs/protocol/messages.md, "ack"). A plain ack of the job ends it; a
 * lost session forgets them all (the next session's welcome resends the
 * whole spool anyway). At most AGENT_RESEND_JOBS jobs are tracked; beyond
 * that a result waits for the next session. Loop thread only. */
#ifndef CORDON_AGENT_RESEND_H
#define CORDON_AGENT_RESEND_H

#include <stdint.h>
#include <uv.h>

#include "agent/session.h"
#include "agent/spool.h"
#include "core/id.h"

#define AGENT_RESEND_JOBS 64
#define AGENT_RESEND_MAX_MS 30000

struct agent_resend_entry {
  uint8_t id[CORDON_ID_LEN];
  uint64_t wait_ms; /* the last wait */
  uint64_t due_ms;  /* uv_now when it is sent again; 0: a free slot */
};

struct agent_resend {
  uv_timer_t timer;
  const struct agent_spool *spool; /* borrowed */
  struct agent_session *session;   /* borrowed */
  struct agent_resend_entry e[AGENT_RESEND_JOBS];
};

void agent_resend_init(struct agent_resend *r, uv_loop_t *loop, const struct agent_spool *spool,
                       struct agent_session *session);
/* The server asked for job id's result again after retry_ms. */
void agent_resend_later(struct agent_resend *r, const uint8_t id[CORDON_ID_LEN], uint32_t retry_ms);
/* The server recorded it (a plain ack): stop. */
void agent_resend_forget(struct agent_resend *r, const uint8_t id[CORDON_ID_LEN]);
/* The session was lost: stop them all. */
void agent_resend_clear(struct agent_resend *r);
/* Close the timer (the loop then ends without it). */
void agent_resend_close(struct agent_resend *r);

#endif
