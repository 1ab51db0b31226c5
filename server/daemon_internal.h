/* Internals shared by server/daemon.c (connections, pairing, admin socket)
 * and server/daemon_jobs.c (dispatch, results, revoke, cancel). */
#ifndef CORDON_SERVER_DAEMON_INTERNAL_H
#define CORDON_SERVER_DAEMON_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "net/conn.h"
#include "core/manifest.h"
#include "proto/msg.h"
#include "server/daemon.h"
#include "server/db.h"

#define DAEMON_PAIR_RATE_SLOTS 64

struct pair_rate {
  char addr[64];
  uint64_t window_start;
  unsigned count;
};

struct daemon_job; /* daemon_jobs.c */

struct daemon {
  uv_loop_t *loop;
  const char *state_dir;
  struct server_db *db;
  uint8_t *noise_priv; /* sodium_malloc */
  uint8_t *ticket_sk;  /* sodium_malloc, 64 bytes */
  uint8_t ticket_pk[32];
  uint8_t publisher_pk[32];
  uint8_t server_id[16];
  struct net_limits limits;
  struct net_server *srv;
  uv_pipe_t admin;
  uv_signal_t sigterm, sigint;
  uv_timer_t jobs_timer;
  bool stopping;
  unsigned job_grace_s;
  struct session *sessions;
  struct daemon_job *jobs;
  struct pair_rate pair_rates[DAEMON_PAIR_RATE_SLOTS];
};

enum session_state {
  SESSION_HELLO,
  SESSION_PAIR_PROOF,
  SESSION_ACTIVE,
  SESSION_DONE,
};

struct session {
  struct daemon *d;
  struct net_conn *conn;
  enum session_state state;
  bool closing; /* a goaway is on its way out: no longer a device's session */
  uint8_t session_id[16];
  struct msg_welcome welcome;
  /* session mode */
  char device_id[CORDON_ID_HEX_SIZE];
  int64_t user_id;
  char user[SERVER_DB_NAME_MAX + 1];
  uint32_t max_jobs;
  /* pairing mode */
  char code_id[SERVER_DB_CODE_ID_SIZE];
  uint8_t code_key[32];
  bool code_real, code_done;
  char *pair_name, *pair_platform, *pair_reason;
  enum sandbox_level pair_level;
  int pair_max_jobs;
  struct session *next;
};

struct admin_client;

void daemon_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t daemon_now_ms(void);
int session_send(struct session *s, const struct msg *m);
void session_goaway(struct session *s, const char *code, const char *message);
struct session *daemon_find_session(struct daemon *d, const char *device_id);
void daemon_shutdown(struct daemon *d);

/* Reply to an admin request (takes the reference) and close. */
void admin_reply(struct admin_client *a, json_t *resp);
json_t *admin_error(int err, const char *message);

/* daemon_jobs.c */
void daemon_jobs_start(struct daemon *d);
void daemon_jobs_shutdown(struct daemon *d);
void daemon_session_message(struct session *s, struct msg *m);
void daemon_session_closed(struct session *s);
void daemon_admin_request(struct daemon *d, struct admin_client *a, json_t *req);

#endif
