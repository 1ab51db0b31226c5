/* The listening side of the control protocol (agent/ctl.h) in the loop of
 * `cordon-agent run`: the endpoint daemon_ctl_path names for
 * CONFIG/agent.sock (a UNIX stream socket; a named pipe on Windows), bound
 * only by the holder of CONFIG/agent.lock (so a socket left by a killed
 * agent is replaced, never shared), restricted to the agent's account
 * before it listens (daemon_ctl_restrict: 0600, or the pipe's DACL),
 * removed when closed. At most AGENT_CTL_MAX_CLIENTS at once (more are closed at
 * accept); a client gets AGENT_CTL_CLIENT_MS to finish each request; a
 * request that breaks the rules gets an error reply and the connection
 * closes. The reply comes from the answer callback.
 *
 * The struct is the caller's storage holding libuv handles: it must not
 * move between agent_ctl_server_start and the end of the loop run after
 * agent_ctl_server_close. Loop thread only. */
#ifndef CORDON_AGENT_CTL_SERVER_H
#define CORDON_AGENT_CTL_SERVER_H

#include <stdbool.h>
#include <uv.h>

#include "agent/ctl.h"

#define AGENT_CTL_MAX_CLIENTS 8
#define AGENT_CTL_CLIENT_MS 5000

/* The reply line for op (malloc'd, ending in '\n'), or NULL when out of
 * memory (the client is then closed). */
typedef char *(*agent_ctl_answer_fn)(void *ctx, enum agent_ctl_op op);

struct agent_ctl_client;

struct agent_ctl_server {
  uv_pipe_t pipe;
  bool open; /* pipe initialised, to be closed */
  char path[256];
  agent_ctl_answer_fn answer;
  void *ctx;
  struct agent_ctl_client *clients;
  unsigned n_clients;
};

/* Replace whatever is at path (the lock is held), bind, restrict and
 * listen. 0, or a libuv / -errno code (the server is then closed: the
 * loop still has to run for its handle to go). */
int agent_ctl_server_start(struct agent_ctl_server *s, uv_loop_t *loop, const char *path,
                           agent_ctl_answer_fn answer, void *ctx);
/* Stop listening, close every client, remove the socket. Idempotent. */
void agent_ctl_server_close(struct agent_ctl_server *s);

#endif
