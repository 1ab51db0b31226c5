/* Connections: Noise XX sessions over libuv TCP, one layer for the server
 * (responder) and the agent (initiator).
 *
 * Each connection has a frame reader with a per-state limit, a deadline for
 * the handshake, for a half-received frame and for silence, a write queue
 * with a high-water mark (reading from that peer stops) and a hard limit
 * (the connection closes). The server has a global and a per-address
 * connection cap: a connection over a cap is accepted and closed at once,
 * so the listener keeps working. There is one close path, idempotent; the
 * connection is freed only in libuv's close callback, after on_close.
 *
 * Message 1 of the handshake carries, in clear, one byte: the mode
 * (NOISE_MODE_SESSION or NOISE_MODE_PAIRING). The responder builds its
 * prologue from it; the prologue binds it, so a changed byte fails the
 * handshake. docs/protocol/wire.md describes the bytes.
 *
 * Nothing here knows what the records mean.
 */
#ifndef CORDON_NET_CONN_H
#define CORDON_NET_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/noise.h"

struct net_limits {
  uint64_t handshake_ms; /* from accept/connect to a finished handshake */
  uint64_t frame_ms;     /* from the first byte of a frame to its last */
  uint64_t idle_ms;      /* silence after which the connection closes */
  uint64_t quiet_ms;     /* silence after which on_quiet is called (pings) */
  size_t wq_high;        /* queued bytes above which reading stops */
  size_t wq_hard;        /* queued bytes above which the connection closes */
  unsigned max_conns;    /* server: all connections */
  unsigned max_per_addr; /* server: connections from one IP address */
  uint64_t tick_ms;      /* how often deadlines are checked */
};

/* 10 s handshake, 30 s per frame, 90 s idle, 30 s quiet, 4 MiB / 16 MiB
 * queue, 1024 connections, 16 per address, 100 ms tick. */
void net_limits_default(struct net_limits *out_limits);

struct net_conn;

struct net_conn_ops {
  /* Initiator only, after message 2: the responder's static key. Return 0
   * to go on, a negative code to close without sending message 3. NULL
   * accepts any key. */
  int (*check_peer)(struct net_conn *c, const uint8_t key[NOISE_KEY_LEN]);
  /* The handshake is done (remote key and handshake hash are available).
   * Return a negative code to close. */
  int (*on_ready)(struct net_conn *c);
  /* One decrypted record; data is valid only during the call. */
  void (*on_record)(struct net_conn *c, const uint8_t *data, size_t len);
  /* quiet_ms without anything received (optional). */
  void (*on_quiet)(struct net_conn *c);
  /* The connection is closed; err is 0 for a close asked by this side or an
   * orderly EOF, otherwise why. The connection is freed after this. */
  void (*on_close)(struct net_conn *c, int err);
};

struct net_server;

/* Listen on host:port (IPv4 or IPv6 literal). The static key is copied into
 * secure memory. modes: bit (1 << NOISE_MODE_*) for each accepted mode. */
int net_server_new(uv_loop_t *loop, const char *host, int port,
                   const uint8_t static_priv[NOISE_KEY_LEN], unsigned modes,
                   const struct net_limits *limits, const struct net_conn_ops *ops, void *data,
                   struct net_server **out_server);
/* The bound port (useful after port 0). */
int net_server_port(const struct net_server *s);
void *net_server_data(const struct net_server *s);
unsigned net_server_count(const struct net_server *s);
/* Stop listening and close every connection; the server is freed once all
 * its handles are closed (the loop then has nothing left of it). */
void net_server_close(struct net_server *s);

/* Connect as the initiator. pinned may be NULL (pairing). */
int net_connect(uv_loop_t *loop, const char *host, int port,
                const uint8_t static_priv[NOISE_KEY_LEN], enum noise_mode mode,
                const struct net_limits *limits, const struct net_conn_ops *ops, void *data,
                struct net_conn **out_conn);

/* Encrypt and queue one record. Returns 0, CORDON_E_LIMIT (too big, or the
 * queue passed its hard limit: the connection is closing), -EPIPE when
 * closing or not ready. */
int net_conn_send(struct net_conn *c, const uint8_t *data, size_t len);
/* Close (idempotent). err is passed to on_close. */
void net_conn_close(struct net_conn *c, int err);

void *net_conn_data(const struct net_conn *c);
void net_conn_set_data(struct net_conn *c, void *data);
enum noise_mode net_conn_mode(const struct net_conn *c);
bool net_conn_ready(const struct net_conn *c);
/* After on_ready. */
void net_conn_remote_key(const struct net_conn *c, uint8_t out_key[NOISE_KEY_LEN]);
void net_conn_handshake_hash(const struct net_conn *c, uint8_t out_h[NOISE_HASH_LEN]);
/* The peer's address as text ("" if unknown). */
const char *net_conn_peer(const struct net_conn *c);
size_t net_conn_queued(const struct net_conn *c);
struct net_server *net_conn_server(const struct net_conn *c);

#endif
