/* The session of `cordon-agent run` with its paired server: connect over
 * Noise (the server's key pinned at pairing), hello/welcome, pings, the
 * server's goaway, and reconnecting with backoff (0.5 s doubling to 30 s,
 * jittered) until closed.
 *
 * A cluster's servers (agent/servers.h): each round of attempts starts at
 * the address that worked last and, while an attempt fails (no connection,
 * or closed before the welcome), goes on at once to the next address of
 * the known list, wrapping, until each was tried once; the backoff is
 * waited between rounds, and after a session ends. A goaway's retry_ms
 * holds back whichever attempt comes next. A welcome's servers list and
 * the address it came from are stored (CONFIG/servers.json) when they
 * change. Its state, errors and counters go into the
 * runner's agent_health (agent/health.h), which `status` asks for over
 * the control socket.
 *
 * The session knows no jobs: what it receives for them it hands to its
 * owner through agent_session_ops, and the owner sends through it. It logs
 * its own events (core_log_kv: server=, reason=, code=). The struct is the caller's storage and
 * holds libuv handles: it must not move between agent_session_init and the end of the loop run
 * after agent_session_close. Loop thread only. */
#ifndef CORDON_AGENT_SESSION_H
#define CORDON_AGENT_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "agent/config.h"
#include "agent/health.h"
#include "agent/hello.h"
#include "agent/servers.h"
#include "agent/state.h"
#include "core/id.h"
#include "net/conn.h"
#include "proto/msg.h"

struct agent_session_ops {
  /* The welcome came: the session is ready; results may be sent. */
  void (*on_welcome)(void *ctx);
  /* A message of a ready session that is not the session's own (job,
   * chunk, cancel, ack, or one this agent does not know); valid during the
   * call only. */
  void (*on_message)(void *ctx, struct msg *m);
  /* A connection ended; unless closed, the session tries again. */
  void (*on_lost)(void *ctx);
  /* A connection attempt was made (optional): the first one tells the
   * runner that start-up is over. */
  void (*on_attempt)(void *ctx);
  /* The server says this device is revoked or unpaired: it will never take
   * it again. why is for the log. The connection closes after this. */
  void (*on_revoked)(void *ctx, const char *why);
};

struct agent_session {
  /* read-only outside session.c */
  bool ready;                /* the welcome came on this connection */
  uint8_t id[CORDON_ID_LEN]; /* the welcome's session id (tickets name it) */
  uint16_t version;          /* the welcome's protocol version */
  /* private */
  uv_loop_t *loop;
  const struct agent_config *cfg;
  const struct agent_pairing *pairing;
  const struct agent_facts *facts;
  const uint8_t *priv;
  struct agent_health *health;
  const struct agent_session_ops *ops;
  void *ctx;
  struct net_limits limits;
  struct net_conn *conn;
  /* the server's clock as last learned (welcome, ping, pong), carried on
   * core_boot_ms, which neither clock's step moves and a suspend does not
   * stop: clock_server_ms was the server's time at clock_boot_ms */
  bool clock_known;
  int64_t clock_server_ms;
  int64_t clock_boot_ms;
  uv_timer_t retry;
  struct agent_servers servers; /* the cluster's addresses, read-only outside */
  size_t cur;                   /* the address of this attempt, an index in servers */
  size_t tried;                 /* attempts in this round */
  bool servers_unsaved;         /* their last change could not be written */
  unsigned backoff_ms;
  uint32_t retry_after_ms; /* a goaway's retry_ms: the next connect waits at least this */
  bool stopping;
  bool flushing; /* the goaway of agent_session_shutdown is being written */
  uint64_t ping_nonce;
  /* after a goaway `shutdown`, until this (core_mono_ms): the server is
   * likely restarting, so rounds are at most 2 s apart */
  int64_t restart_until_ms;
};

/* Set up (no connection yet). cfg, pairing, facts, priv (the identity
 * key) and health are borrowed for the session's life; facts may change
 * between connections (the next hello says what they say then). */
void agent_session_init(struct agent_session *s, uv_loop_t *loop, const struct agent_config *cfg,
                        const struct agent_pairing *pairing, const struct agent_facts *facts,
                        const uint8_t *priv, struct agent_health *health,
                        const struct agent_session_ops *ops, void *ctx);
/* Connect from the next loop turn on. */
void agent_session_start(struct agent_session *s);
/* Encode and send one message: 0, -ENOTCONN when no session is ready, or
 * the codec's or net_conn_send's error. */
int agent_session_send(struct agent_session *s, const struct msg *m);
/* Send an encoded message: as agent_session_send. */
int agent_session_send_encoded(struct agent_session *s, const uint8_t *buf, size_t len);
/* Bytes queued on the connection and not yet written (0 without one). */
size_t agent_session_unsent(const struct agent_session *s);
/* Now on the server's clock (ms since the epoch): its time as last learned
 * (welcome, ping, pong) plus the boot-time clock's advance since, so a step
 * of this machine's wall clock changes nothing; this machine's wall clock
 * before any welcome. */
int64_t agent_session_server_now_ms(const struct agent_session *s);
/* For good: no reconnecting; the retry timer and the connection close
 * (their callbacks run in the loop; on_lost is still called). */
void agent_session_close(struct agent_session *s);
/* Stopping: a ready session is told goaway `shutdown` (the server takes
 * no more jobs from it), written out, then closed; then as
 * agent_session_close. */
void agent_session_shutdown(struct agent_session *s, const char *why);

#endif
