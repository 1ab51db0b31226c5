/* The cordon-server daemon (server/daemon.h): the loop, the keys, the
 * composition of sessions, pairing, jobs and the admin socket, and the
 * routing of their events. */
#include "server/daemon.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "core/id.h"
#include "core/log.h"
#include "proto/msg.h"
#include "server/admin_ops.h"
#include "server/admin_sock.h"
#include "server/db.h"
#include "server/jobs.h"
#include "server/keys.h"
#include "server/pair.h"
#include "server/session.h"

struct daemon {
  uv_loop_t *loop;
  const char *state_dir;
  struct server_db *db;
  uint8_t *noise_priv; /* sodium_malloc */
  uint8_t *ticket_sk;  /* sodium_malloc, crypto_sign_SECRETKEYBYTES */
  uint8_t ticket_pk[crypto_sign_PUBLICKEYBYTES];
  uint8_t publisher_pk[crypto_sign_PUBLICKEYBYTES];
  uint8_t server_id[CORDON_ID_LEN];
  struct net_limits limits;
  struct net_server *srv;
  struct sessions *sessions;
  struct pair_ctx *pair;
  struct jobs *jobs;
  struct admin_sock *admin;
  uv_signal_t sigterm, sigint;
  bool stopping;
};

/* ---- session events ---- */

static void on_pair_hello(void *data, struct session *s, const struct msg_hello *h) {
  struct daemon *d = data;
  pair_on_hello(d->pair, s, h);
}

static int on_pair_proof(void *data, struct session *s, const struct msg_pair_proof *p) {
  struct daemon *d = data;
  return pair_on_proof(d->pair, s, p);
}

static bool on_session_message(void *data, struct session *s, struct msg *m) {
  struct daemon *d = data;
  return jobs_on_message(d->jobs, s, m);
}

static void on_session_online(void *data, struct session *s) {
  struct daemon *d = data;
  jobs_on_device_online(d->jobs, s);
}

static void on_session_closed(void *data, struct session *s) {
  struct daemon *d = data;
  jobs_on_session_closed(d->jobs, s);
  pair_on_closed(d->pair, s);
}

/* ---- admin ops: the handler column of ADMIN_OPS ---- */

static void daemon_op_ping(struct daemon *d, struct admin_conn *c, const json_t *req) {
  (void)d;
  (void)req;
  admin_conn_reply(c, admin_reply_ok());
}

static void daemon_op_dispatch(struct daemon *d, struct admin_conn *c, const json_t *req) {
  jobs_op_dispatch(d->jobs, c, req);
}

static void daemon_op_cancel(struct daemon *d, struct admin_conn *c, const json_t *req) {
  jobs_op_cancel(d->jobs, c, req);
}

static void daemon_op_wait(struct daemon *d, struct admin_conn *c, const json_t *req) {
  jobs_op_wait(d->jobs, c, req);
}

/* The database part of a revoke is the command's; the live session is ours. */
static void daemon_op_revoke(struct daemon *d, struct admin_conn *c, const json_t *req) {
  struct session *s = sessions_find(d->sessions, admin_request_string(req, ADMIN_ARG_DEVICE));
  if (s)
    session_goaway(s, MSG_GOAWAY_REVOKED, "this device was revoked");
  admin_conn_reply(c,
                   json_pack("{s:b, s:b}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_DISCONNECTED, s != NULL));
}

static void (*const op_handlers[])(struct daemon *d, struct admin_conn *c, const json_t *req) = {
#define DAEMON_OP_HANDLER_(id, name, handler, required, optional, usage) [ADMIN_OP_##id] = handler,
    ADMIN_OPS(DAEMON_OP_HANDLER_)
#undef DAEMON_OP_HANDLER_
};

static void on_admin_request(void *data, struct admin_conn *c, json_t *req) {
  struct daemon *d = data;
  enum admin_op op;
  struct cordon_diag diag = {{0}};
  int r = admin_request_check(req, &op, &diag);
  if (r < 0)
    admin_conn_reply(c, admin_reply_error(r, diag.msg));
  else
    op_handlers[op](d, c, req);
}

/* ---- lifecycle ---- */

static void daemon_shutdown(struct daemon *d) {
  if (d->stopping)
    return;
  d->stopping = true;
  sessions_shutdown(d->sessions);
  net_server_close(d->srv);
  admin_sock_close(d->admin);
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
  jobs_close(d->jobs);
}

static void on_signal(uv_signal_t *sig, int signum) {
  struct daemon *d = sig->data;
  core_log("signal %d: shutting down", signum);
  daemon_shutdown(d);
}

static int load_keys(struct daemon *d, struct cordon_diag *diag) {
  char path[4096];
  uint8_t *seed = NULL;
  snprintf(path, sizeof(path), "%s/%s", d->state_dir, SERVER_NOISE_KEY_FILE);
  int r = keys_read_file(path, KEYFILE_NOISE_SECRET, &d->noise_priv, diag);
  if (r < 0)
    return r;
  snprintf(path, sizeof(path), "%s/%s", d->state_dir, SERVER_TICKET_KEY_FILE);
  r = keys_read_file(path, KEYFILE_TICKET_SECRET, &seed, diag);
  if (r < 0)
    return r;
  d->ticket_sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
  if (!d->ticket_sk) {
    sodium_free(seed);
    return -ENOMEM;
  }
  crypto_sign_seed_keypair(d->ticket_pk, d->ticket_sk, seed);
  sodium_free(seed);
  snprintf(path, sizeof(path), "%s/%s", d->state_dir, SERVER_PUBLISHER_PUB_FILE);
  uint8_t *pub = NULL;
  r = keys_read_file(path, KEYFILE_PUBLISHER_PUBLIC, &pub, diag);
  if (r < 0)
    return r;
  memcpy(d->publisher_pk, pub, sizeof(d->publisher_pk));
  sodium_free(pub);
  /* the server id: stable, derived from its Noise public key */
  uint8_t npub[NOISE_KEY_LEN];
  noise_public_key(d->noise_priv, npub);
  crypto_generichash(d->server_id, sizeof(d->server_id), npub, sizeof(npub), NULL, 0);
  return 0;
}

/* The parts, before anything listens. 0 or -ENOMEM. */
static int compose(struct daemon *d, const struct daemon_options *opt) {
  const struct session_hooks hooks = {
      .data = d,
      .pair_hello = on_pair_hello,
      .pair_proof = on_pair_proof,
      .message = on_session_message,
      .closed = on_session_closed,
      .online = on_session_online,
  };
  int r = sessions_new(d->db, d->server_id, &hooks, &d->sessions);
  if (r == 0)
    r = pair_new(d->db, d->ticket_pk, d->publisher_pk, &d->pair);
  if (r == 0) {
    const struct jobs_config cfg = {
        .loop = d->loop,
        .db = d->db,
        .sessions = d->sessions,
        .state_dir = d->state_dir,
        .ticket_sk = d->ticket_sk,
        .publisher_pk = d->publisher_pk,
        .grace_s = opt->job_grace_s,
        .queue_ttl_s = opt->queue_ttl_s,
    };
    r = jobs_new(&cfg, &d->jobs);
  }
  return r;
}

int daemon_run(const struct daemon_options *opt, struct cordon_diag *diag) {
  struct daemon *d = calloc(1, sizeof(*d));
  if (!d)
    return -ENOMEM;
  d->state_dir = opt->state_dir;
  if (opt->limits)
    d->limits = *opt->limits;
  else
    net_limits_default(&d->limits);
  d->limits.quiet_ms = SERVER_PING_MS * 2;
  d->limits.idle_ms = SERVER_PING_MS * 4;
  int r = load_keys(d, diag);
  if (r == 0)
    r = server_db_open(d->state_dir, 0, &d->db, diag);
  if (r == 0)
    r = server_db_device_set_all_offline(d->db, diag);
  if (r < 0)
    goto out_free;
  d->loop = malloc(sizeof(*d->loop));
  if (!d->loop || uv_loop_init(d->loop) < 0) {
    free(d->loop);
    d->loop = NULL;
    r = -ENOMEM;
    goto out_free;
  }
  if ((r = compose(d, opt)) < 0)
    goto out_loop;
  r = net_server_new(d->loop, opt->host, opt->port, d->noise_priv,
                     (1u << NOISE_MODE_SESSION) | (1u << NOISE_MODE_PAIRING), &d->limits,
                     &sessions_net_ops, d->sessions, &d->srv);
  if (r < 0) {
    cordon_diag_set(diag, r, "cannot listen on %s:%d: %s", opt->host, opt->port, strerror(-r));
    goto out_loop;
  }
  char sock[4096];
  snprintf(sock, sizeof(sock), "%s/%s", d->state_dir, ADMIN_SOCKET_FILE);
  r = admin_sock_open(d->loop, sock, on_admin_request, d, &d->admin);
  if (r < 0) {
    cordon_diag_set(diag, -EIO, "cannot bind the admin socket %s: %s", sock, uv_strerror(r));
    d->stopping = true;
    net_server_close(d->srv);
    uv_run(d->loop, UV_RUN_DEFAULT);
    r = -EIO;
    goto out_loop;
  }
  uv_signal_init(d->loop, &d->sigterm);
  uv_signal_init(d->loop, &d->sigint);
  d->sigterm.data = d->sigint.data = d;
  uv_signal_start(&d->sigterm, on_signal, SIGTERM);
  uv_signal_start(&d->sigint, on_signal, SIGINT);
  signal(SIGPIPE, SIG_IGN);
  jobs_start(d->jobs);
  core_log("listening on %s:%d (state %s)", opt->host, net_server_port(d->srv), d->state_dir);
  uv_run(d->loop, UV_RUN_DEFAULT);
  unlink(sock);
  r = uv_loop_close(d->loop);
  if (r != 0) {
    cordon_diag_set(diag, CORDON_E_INTERNAL, "event loop did not close cleanly: %s",
                    uv_strerror(r));
    r = CORDON_E_INTERNAL;
  }
out_loop:
  if (r != CORDON_E_INTERNAL)
    free(d->loop);
out_free:
  jobs_free(d->jobs);
  admin_sock_free(d->admin);
  pair_free(d->pair);
  sessions_free(d->sessions);
  server_db_close(d->db);
  sodium_free(d->noise_priv);
  sodium_free(d->ticket_sk);
  free(d);
  return r;
}
