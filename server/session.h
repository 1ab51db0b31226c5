/* Agents' sessions on the daemon's listener: one struct session per
 * connection (net/conn.h), from hello to close.
 *
 * Here: decoding and the sender check of every record, the version
 * negotiation and the welcome, who the device is (its key must be a paired,
 * unrevoked device whose id the hello names; a newer session replaces an
 * older one), ping/pong (a session silent for 2 * SERVER_PING_MS is pinged;
 * the connection layer closes one silent for 4 * SERVER_PING_MS), unpair,
 * goaway, closing a pairing connection after pair_done, and the device's
 * online flag. What
 * a session carries beyond that belongs to others and reaches them through
 * struct session_hooks: the pairing exchange (server/pair.c) and job
 * messages (server/jobs.c). Those modules call back only the functions
 * below; this file calls none of theirs.
 *
 * A struct session is read by the hook owners (its fields are documented
 * read-only outside this file), never freed by them: it lives until the
 * connection closes, when hooks.closed runs last. */
#ifndef CORDON_SERVER_SESSION_H
#define CORDON_SERVER_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "core/id.h"
#include "core/ratelimit.h"
#include "net/conn.h"
#include "proto/msg.h"
#include "server/db.h"

#define SERVER_PING_MS 15000u /* the welcome's ping interval */

enum session_state {
  SESSION_HELLO,      /* waiting for the hello */
  SESSION_PAIR_PROOF, /* pairing: waiting for the agent's proof */
  SESSION_ACTIVE,     /* a known device's session */
  SESSION_DONE,       /* pairing finished: pair_done is flushed, then the connection closes */
};

struct pair_attempt; /* server/pair.c */

struct session {
  struct net_conn *conn;
  enum session_state state;
  bool closing; /* a goaway is on its way out: no longer a device's session */
  uint8_t session_id[CORDON_ID_LEN];
  char addr[64];         /* the peer's address, for the log */
  int64_t opened_ms;     /* core_mono_ms at the handshake's end */
  int64_t since;         /* SESSION_ACTIVE: wall clock seconds of the welcome */
  char close_reason[48]; /* why it ends, for the log ("" until known) */
  /* SESSION_ACTIVE */
  char device_id[CORDON_ID_HEX_SIZE];
  int64_t user_id;
  char user[SERVER_DB_NAME_MAX + 1];
  uint32_t max_jobs;
  int64_t touched_ms; /* core_mono_ms when last_seen was last written */
  /* the device's receipt signing key once server/jobs.c read it (registered
   * once, it never changes) */
  bool sign_key_known;
  uint8_t sign_key[SERVER_DB_SIGN_KEY_SIZE];
  /* pairing: server/pair.c's, which frees it in its closed hook */
  struct pair_attempt *pair;
  /* the log lines a peer's messages cause (refused results, ignored
   * output, stray messages): core/ratelimit.h, per session */
  struct core_ratelimit log_refused, log_output;
  struct sessions *owner;
  struct session *next, **pprev; /* every session of owner */
  struct session *hnext;         /* owner's index by device id, while in it */
  bool indexed;                  /* in the index: SESSION_ACTIVE and not closing */
};

/* Called on the loop's thread with hooks.data. */
struct session_hooks {
  void *data;
  /* A hello in pairing mode, after the welcome; the session is in
   * SESSION_PAIR_PROOF. */
  void (*pair_hello)(void *data, struct session *s, const struct msg_hello *h);
  /* The agent's proof. 0: paired, the session becomes SESSION_DONE; an
   * error: the hook has sent the goaway. */
  int (*pair_proof)(void *data, struct session *s, const struct msg_pair_proof *p);
  /* A message of an active session that is not the session's own (ping,
   * pong, goaway, error, unpair). false: not one the hook knows, the
   * session is closed as a protocol error. */
  bool (*message)(void *data, struct session *s, struct msg *m);
  /* The connection closed; s is freed when this returns. */
  void (*closed)(void *data, struct session *s);
  /* A device's session became active and its welcome is queued: jobs that
   * wait for the device may be sent now. May be NULL. */
  void (*online)(void *data, struct session *s);
};

struct sessions;

/* The sessions of one listener. server_id (CORDON_ID_LEN bytes) and db are
 * borrowed for its lifetime. 0 or -ENOMEM. */
int sessions_new(struct server_db *db, const uint8_t *server_id, const struct session_hooks *hooks,
                 struct sessions **out_sessions);
/* The addresses every welcome lists (run --advertise; welcome.servers,
 * docs/protocol/messages.md 6.2): n (0..MSG_SERVERS_MAX) strings that
 * msg_addr_parse() accepts, borrowed for the sessions' lifetime. */
void sessions_set_servers(struct sessions *t, const char *const *servers, size_t n);
/* After the listener is closed and the loop has finished. NULL-safe. */
void sessions_free(struct sessions *t);

/* The callbacks for net_server_new(); its data must be the struct sessions. */
extern const struct net_conn_ops sessions_net_ops;

/* The device's active session that is not on its way out, or NULL. O(1):
 * a hash table by device id holds exactly those sessions. */
struct session *sessions_find(struct sessions *t, const char *device_id);
/* Shutdown: a goaway `shutdown` to every active session (the listener's
 * close then closes them). */
void sessions_shutdown(struct sessions *t);

/* Active sessions that are not on their way out (O(1)). */
size_t sessions_count(const struct sessions *t);
/* Call fn for each of them, in no particular order. */
void sessions_foreach(struct sessions *t, void (*fn)(struct session *s, void *data), void *data);

/* Encode and queue m (logged when it cannot be encoded). 0 or an error. */
int session_send(struct session *s, const struct msg *m);
/* A ping carrying this host's clock (time_ms): the agent learns the
 * server's clock again from it, before any job sent after it. */
void session_ping_clock(struct session *s);
/* Send a goaway, flush it and close: from now on s is no device's session.
 * The code is the reason the close is logged with. */
void session_goaway(struct session *s, const char *code, const char *message);
/* The same with retry_ms (0: none): the agent reconnects no sooner. */
void session_goaway_retry(struct session *s, const char *code, const char *message,
                          uint32_t retry_ms);
#define SESSION_UNAVAILABLE_RETRY_MS 2000u /* the database failed: back in 2-4 s */
#define SESSION_SHUTDOWN_RETRY_MS 1000u    /* shutting down: back in 1-3 s */

#endif
