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
 * Memory: a server's connections share one 256 KiB read buffer (an agent
 * connection has its own); each connection has a frame reader (a buffer of
 * 4 KiB up to one record while a frame arrives in pieces) and its send
 * queue (at most wq_hard). Finished write buffers are kept for reuse while
 * a connection keeps sending (at most wq_high bytes of them): allocating
 * and freeing 64 KiB per record let the allocator return and re-fault the
 * pages, which cost more than the encryption. After a tick without sends
 * only two small ones are kept, after a second tick without sends or reads
 * none, nor the reader's buffer: an idle session holds no buffer.
 *
 * Timers: one libuv timer per server (and one per initiator connection)
 * drives a wheel of deadlines; a tick costs in proportion to the
 * connections whose deadline is due and to those holding buffers, not to
 * all connections. The per-address count of handshakes is a hash table.
 *
 * Nothing here knows what the records mean. docs/protocol/wire.md section 9
 * describes the behaviour on the wire (mode byte, deadlines, limits).
 */
#ifndef CORDON_NET_CONN_H
#define CORDON_NET_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/noise.h"

/* Deadlines are checked every tick_ms, so one fires up to tick_ms late. A
 * deadline of 0 is off. A timed-out connection closes with -ETIMEDOUT. */
struct net_limits {
  uint64_t handshake_ms; /* from accept/connect to a finished handshake */
  uint64_t frame_ms;     /* from the first byte of a frame to its last (after
                            the handshake); also bounds net_conn_flush_close */
  uint64_t idle_ms;      /* silence after which the connection closes */
  uint64_t quiet_ms;     /* silence after which on_quiet is called (pings) */
  size_t wq_high;        /* queued bytes above which reading stops; it
                            resumes once at most wq_high / 2 are queued */
  size_t wq_hard;        /* a send that would queue more closes the
                            connection (CORDON_E_LIMIT); >= wq_high */
  unsigned max_conns;    /* server: all connections */
  unsigned max_per_addr; /* server: connections from one IP address that
                            have not finished the handshake yet (finished
                            ones count only against max_conns) */
  uint64_t tick_ms;      /* how often deadlines are checked; > 0 */
};

#define NET_MAX_CONNS_DEFAULT 10000         /* cordon-server run --max-connections */
#define NET_MAX_PREAUTH_PER_ADDR_DEFAULT 64 /* run --max-preauth-per-address */

/* 10 s handshake, 30 s per frame, 90 s idle, 30 s quiet, 4 MiB / 16 MiB
 * queue, NET_MAX_CONNS_DEFAULT connections, NET_MAX_PREAUTH_PER_ADDR_DEFAULT
 * in the handshake per address, 100 ms tick. */
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
 * secure memory. modes: bit (1 << NOISE_MODE_*) for each accepted mode; a
 * message 1 asking for another mode closes that connection
 * (CORDON_E_PROTOCOL). A connection over max_conns, or over max_per_addr
 * (its address's connections still in the handshake), is
 * accepted and closed at once without any callback. Returns 0, -EINVAL (bad
 * address, limits or modes), -EADDRINUSE, -EACCES, CORDON_E_CRYPTO (libsodium
 * failed to initialise) or -ENOMEM. The loop must run to free a server that
 * failed to listen. */
int net_server_new(uv_loop_t *loop, const char *host, int port,
                   const uint8_t static_priv[NOISE_KEY_LEN], unsigned modes,
                   const struct net_limits *limits, const struct net_conn_ops *ops, void *data,
                   struct net_server **out_server);
/* The bound port (useful after port 0). */
int net_server_port(const struct net_server *s);
void *net_server_data(const struct net_server *s);
/* Connections accepted under the caps and not closing (in handshake or
 * ready). */
unsigned net_server_count(const struct net_server *s);
/* Stop listening and close every connection; the server is freed once all
 * its handles are closed (the loop then has nothing left of it). */
void net_server_close(struct net_server *s);

/* Connect as the initiator in mode (session or pairing); check_peer decides
 * on the server's key. Returns 0 (then on_close is called exactly once,
 * whatever happens), or -EINVAL, CORDON_E_CRYPTO, -ENOMEM or a connect error
 * (then no callback is called). */
int net_connect(uv_loop_t *loop, const char *host, int port,
                const uint8_t static_priv[NOISE_KEY_LEN], enum noise_mode mode,
                const struct net_limits *limits, const struct net_conn_ops *ops, void *data,
                struct net_conn **out_conn);

/* Encrypt and queue one record. Returns 0, CORDON_E_LIMIT (too big, or the
 * queue passed its hard limit: the connection is closing), -EPIPE when
 * closing or not ready. */
int net_conn_send(struct net_conn *c, const uint8_t *data, size_t len);
/* Records sent between net_conn_cork and net_conn_uncork are written
 * together: as few writes as their sizes allow (one while they fit 16 KiB,
 * or one record larger than that), in order, when the buffer fills or at
 * uncork — for records sent back to back (a job and its package's first
 * chunk), one system call and one wakeup of the peer instead of several.
 * Not nested. Held records count in net_conn_queued; a close drops them
 * with the rest of the queue, net_conn_flush_close writes them first. */
void net_conn_cork(struct net_conn *c);
void net_conn_uncork(struct net_conn *c);
/* Close (idempotent): queued records that have not been written are
 * dropped. err is passed to on_close, which runs from the loop later. */
void net_conn_close(struct net_conn *c, int err);
/* Stop reading and accepting records, write what is queued, then close
 * with err (e.g. after a goaway or error message). If the queue does not
 * drain within frame_ms (1 s if 0), close anyway with err. Idempotent;
 * net_conn_close during the flush closes at once. (Added by the owner of
 * net/ after the first version; purely additive.) */
void net_conn_flush_close(struct net_conn *c, int err);

/* The application's pointer: for an agent connection the data given to
 * net_connect; for a server connection NULL until net_conn_set_data (the
 * server's data is net_server_data(net_conn_server(c))). on_close may see
 * NULL for a connection whose handshake never finished. */
void *net_conn_data(const struct net_conn *c);
void net_conn_set_data(struct net_conn *c, void *data);
enum noise_mode net_conn_mode(const struct net_conn *c);
/* The handshake is done and the connection is neither flushing nor closing. */
bool net_conn_ready(const struct net_conn *c);
/* After on_ready. */
void net_conn_remote_key(const struct net_conn *c, uint8_t out_key[NOISE_KEY_LEN]);
void net_conn_handshake_hash(const struct net_conn *c, uint8_t out_h[NOISE_HASH_LEN]);
/* The peer's address as text ("" if unknown). */
const char *net_conn_peer(const struct net_conn *c);
size_t net_conn_queued(const struct net_conn *c);
struct net_server *net_conn_server(const struct net_conn *c);

#endif
