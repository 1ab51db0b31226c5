#include "net/conn.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "proto/frame.h"

/* Buffers are reused rather than handed back to malloc at once: freeing and
 * re-allocating 64 KiB per record lets the allocator give the pages back
 * and fault them in again, which costs more than the encryption. */
#define READ_BUF_LEN (256u << 10)
#define SPARE_MAX 64                /* write buffers kept per connection, at most wq_high bytes */
#define SPARE_KEEP_IDLE (16u << 10) /* after a tick without sends, keep only */
#define SPARE_KEEP_IDLE_N 2         /* this many spares of at most this size; */
                                    /* after a second such tick, none */
#define CORK_BUF_LEN (16u << 10)    /* a corked write's buffer, unless one record is larger */

/* The deadline wheel: a connection waits in the slot of the tick at which
 * its earliest deadline falls (tick number modulo the slots; one that is
 * more than WHEEL_SLOTS ticks away is passed over until its round). */
#define WHEEL_SLOTS 512
#define NO_DEADLINE UINT64_MAX

/* One read buffer, lent to one read at a time. libuv reads into it and
 * on_read consumes it entirely before returning, so all connections of one
 * loop can share it; a second reader while it is lent gets malloc. */
struct read_buf {
  uint8_t *base;
  bool lent;
};

enum conn_state {
  CONN_CONNECTING,
  CONN_HANDSHAKE,
  CONN_READY,
  CONN_FLUSHING, /* net_conn_flush_close: sending what is queued, then closing */
  CONN_CLOSING,
};

/* The deadlines of a server's connections, or of one initiator connection:
 * one libuv timer every tick_ms, which looks only at the connections whose
 * slot is due and at those holding buffers to give back. A connection's
 * place is its earliest deadline when it was scheduled; a later read only
 * moves its deadlines later, so it is checked again when the slot comes up
 * and put back further on (events that bring a deadline nearer reschedule
 * it at once). */
struct conn_wheel {
  uv_timer_t timer; /* first: the tick callback casts back */
  uint64_t tick_ms;
  uint64_t tick;                       /* ticks up to this one are processed (uv_now / tick_ms) */
  struct net_conn *slots[WHEEL_SLOTS]; /* by due tick modulo WHEEL_SLOTS */
  struct net_conn *holding;            /* connections with spare or reader buffers */
  unsigned n_waiting, n_holding;       /* the timer runs while either is > 0 */
};

/* Connections of one address still in the handshake (the per-address cap):
 * a chained hash table keyed by the address text. */
struct addr_count {
  struct addr_count *next;
  unsigned n;
  char addr[64];
};

struct net_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  uv_timer_t retry;     /* accept again after running out of memory */
  int handles_open;     /* listener, retry and the wheel's timer until closed */
  uint8_t *static_priv; /* sodium_malloc */
  unsigned modes;
  struct net_limits limits;
  const struct net_conn_ops *ops;
  void *data;
  struct read_buf rbuf; /* shared by the server's connections */
  struct conn_wheel wheel;
  struct addr_count **preauth; /* n_preauth_buckets chains */
  unsigned n_preauth_buckets;  /* a power of two */
  struct net_conn *conns;      /* linked list, every connection until freed */
  unsigned n_conns;            /* length of conns */
  unsigned n_live;             /* of those, accepted under the caps and not closing */
  bool closing;
  int port;
};

struct net_conn {
  uv_tcp_t tcp;
  uv_connect_t connect_req;
  int handles_open;
  enum conn_state state;
  enum noise_role role;
  enum noise_mode mode;
  struct net_server *server; /* responder side */
  struct net_conn *next, **pprev;
  struct conn_wheel *wheel;         /* the server's, or own_wheel */
  struct conn_wheel *own_wheel;     /* initiator: malloc, its timer one of handles_open */
  struct net_conn *wnext, **wpprev; /* in a wheel slot (wpprev NULL: in none) */
  uint64_t due_tick;                /* the slot's tick */
  struct net_conn *hnext, **hpprev; /* in wheel->holding (hpprev NULL: not) */
  unsigned idle_ticks;              /* ticks in a row without sends or reads */
  struct addr_count *preauth;       /* counted in the server's per-address table */
  uv_loop_t *loop;
  struct net_limits limits;
  const struct net_conn_ops *ops;
  void *data;
  uint8_t *static_priv; /* responder: the server's; initiator: NULL (hs has it) */
  struct noise_handshake *hs;
  struct noise_session *session;
  struct frame_reader reader;
  uint64_t started, last_rx, frame_started, flush_started;
  bool quiet_signalled;
  bool reading;
  bool live; /* counted in server->n_live */
  size_t queued;
  struct write_req *spare[SPARE_MAX]; /* finished write buffers for reuse */
  unsigned n_spare;
  size_t spare_bytes;
  bool sent_this_tick;
  bool corked;              /* net_conn_cork: records wait in held */
  struct write_req *held;   /* records queued while corked, not written yet */
  bool read_this_tick;      /* the frame reader was used */
  struct read_buf own_rbuf; /* initiator */
  struct read_buf *rbuf;    /* own_rbuf or the server's */
  int close_err;
  char peer[64];
};

struct write_req {
  uv_write_t req;
  struct net_conn *conn;
  size_t len; /* bytes in buf being written */
  size_t cap; /* capacity of buf */
  uint8_t buf[];
};

/* The kernel caps it at net.core.somaxconn; 128 dropped SYNs when 10,000
 * devices reconnected at once, each drop costing seconds of TCP backoff
 * (bench/scale). */
#define NET_LISTEN_BACKLOG 4096

void net_limits_default(struct net_limits *out_limits) {
  *out_limits = (struct net_limits){
      .handshake_ms = 10000,
      .frame_ms = 30000,
      .idle_ms = 90000,
      .quiet_ms = 30000,
      .wq_high = 4u << 20,
      .wq_hard = 16u << 20,
      .max_conns = NET_MAX_CONNS_DEFAULT,
      .max_per_addr = NET_MAX_PREAUTH_PER_ADDR_DEFAULT,
      .tick_ms = 100,
  };
}

/* ---- the deadline wheel (struct conn_wheel) ---------------------------- */

static void on_tick(uv_timer_t *t);

static void wheel_init(struct conn_wheel *w, uv_loop_t *loop, uint64_t tick_ms) {
  memset(w, 0, sizeof(*w));
  w->tick_ms = tick_ms;
  w->tick = uv_now(loop) / tick_ms;
  uv_timer_init(loop, &w->timer);
}

static void wheel_run(struct conn_wheel *w) {
  uv_handle_t *h = (uv_handle_t *)&w->timer;
  if (!uv_is_active(h) && !uv_is_closing(h))
    uv_timer_start(&w->timer, on_tick, w->tick_ms, w->tick_ms);
}

static void wheel_link(struct conn_wheel *w, struct net_conn **head, struct net_conn *c) {
  c->wnext = *head;
  if (*head)
    (*head)->wpprev = &c->wnext;
  c->wpprev = head;
  *head = c;
  w->n_waiting++;
}

static void wheel_unlink(struct net_conn *c) {
  if (!c->wpprev)
    return;
  if (c->wnext)
    c->wnext->wpprev = c->wpprev;
  *c->wpprev = c->wnext;
  c->wnext = NULL;
  c->wpprev = NULL;
  c->wheel->n_waiting--;
}

static uint64_t after(uint64_t t, uint64_t ms) {
  return ms > NO_DEADLINE - t ? NO_DEADLINE : t + ms;
}

static uint64_t earlier(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

/* The first moment (uv_now) at which one of c's deadlines has passed. */
static uint64_t conn_next_deadline(const struct net_conn *c) {
  const struct net_limits *l = &c->limits;
  uint64_t d = NO_DEADLINE;
  switch (c->state) {
  case CONN_CONNECTING:
  case CONN_HANDSHAKE:
    if (l->handshake_ms)
      d = after(c->started, l->handshake_ms);
    break;
  case CONN_FLUSHING:
    d = after(c->flush_started, l->frame_ms ? l->frame_ms : 1000);
    break;
  case CONN_READY:
    if (l->frame_ms && frame_reader_in_frame(&c->reader))
      d = after(c->frame_started, l->frame_ms);
    if (l->idle_ms)
      d = earlier(d, after(c->last_rx, l->idle_ms));
    if (l->quiet_ms && !c->quiet_signalled && c->ops && c->ops->on_quiet)
      d = earlier(d, after(c->last_rx, l->quiet_ms));
    break;
  case CONN_CLOSING:
    break;
  }
  return d;
}

/* Put c in the slot of its next deadline, unless it waits in an earlier
 * one already (it is checked then and put further on). Called when a
 * deadline may have come nearer: a new state, a frame begun, the quiet
 * signal re-armed. */
static void conn_schedule(struct net_conn *c) {
  struct conn_wheel *w = c->wheel;
  if (!w)
    return;
  uint64_t d = conn_next_deadline(c);
  if (d == NO_DEADLINE) {
    wheel_unlink(c);
    return;
  }
  /* the first tick at or after d; a tick not yet processed */
  uint64_t k = d / w->tick_ms + (d % w->tick_ms != 0);
  if (k <= w->tick)
    k = w->tick + 1;
  if (c->wpprev && c->due_tick <= k)
    return;
  wheel_unlink(c);
  c->due_tick = k;
  wheel_link(w, &w->slots[k % WHEEL_SLOTS], c);
  wheel_run(w);
}

static void holding_join(struct net_conn *c) {
  struct conn_wheel *w = c->wheel;
  if (c->hpprev || !w || c->state == CONN_CLOSING)
    return;
  c->idle_ticks = 0;
  c->hnext = w->holding;
  if (w->holding)
    w->holding->hpprev = &c->hnext;
  c->hpprev = &w->holding;
  w->holding = c;
  w->n_holding++;
  wheel_run(w);
}

static void holding_leave(struct net_conn *c) {
  if (!c->hpprev)
    return;
  if (c->hnext)
    c->hnext->hpprev = c->hpprev;
  *c->hpprev = c->hnext;
  c->hnext = NULL;
  c->hpprev = NULL;
  c->wheel->n_holding--;
}

static void spares_release(struct net_conn *c, size_t keep_up_to, unsigned keep_n) {
  unsigned kept = 0;
  for (unsigned i = 0; i < c->n_spare; i++) {
    if (kept < keep_n && c->spare[i]->cap <= keep_up_to) {
      c->spare[kept++] = c->spare[i];
    } else {
      c->spare_bytes -= c->spare[i]->cap;
      free(c->spare[i]);
    }
  }
  c->n_spare = kept;
}

/* Give back the frame reader's buffer between frames. */
static void reader_shrink(struct net_conn *c) {
  if (c->reader.body_cap == 0 || c->reader.err || frame_reader_in_frame(&c->reader))
    return;
  uint32_t max = c->reader.max_body;
  frame_reader_release(&c->reader);
  (void)frame_reader_init(&c->reader, max); /* cannot fail: max was valid */
}

/* Connections that hold buffers for reuse: after a tick without sends only
 * small spares are kept; after a second tick without sends or reads,
 * nothing, and the connection leaves the list. */
static void holding_tick(struct conn_wheel *w) {
  for (struct net_conn *c = w->holding, *next; c; c = next) {
    next = c->hnext;
    bool sent = c->sent_this_tick, read = c->read_this_tick;
    c->sent_this_tick = c->read_this_tick = false;
    if (!sent && c->n_spare > 0)
      spares_release(c, SPARE_KEEP_IDLE, SPARE_KEEP_IDLE_N); /* not streaming: give them back */
    if (sent || read) {
      c->idle_ticks = 0;
      continue;
    }
    if (++c->idle_ticks < 2)
      continue;
    spares_release(c, 0, 0);
    reader_shrink(c);
    if (c->n_spare == 0 && c->reader.body_cap == 0)
      holding_leave(c);
  }
}

static void conn_free(struct net_conn *c) {
  free(c->held);
  spares_release(c, 0, 0);
  free(c->own_wheel);
  free(c->own_rbuf.base);
  noise_handshake_free(c->hs);
  noise_session_free(c->session);
  frame_reader_release(&c->reader);
  free(c);
}

static void maybe_free_server(struct net_server *s) {
  if (s->closing && s->handles_open == 0 && s->n_conns == 0) {
    free(s->preauth); /* its chains are empty: every connection left them */
    free(s->rbuf.base);
    sodium_free(s->static_priv);
    free(s);
  }
}

static void on_handle_closed(uv_handle_t *h) {
  struct net_conn *c = h->data;
  if (--c->handles_open > 0)
    return;
  struct net_server *s = c->server;
  if (c->ops && c->ops->on_close)
    c->ops->on_close(c, c->close_err);
  if (s) {
    if (c->next)
      c->next->pprev = c->pprev;
    *c->pprev = c->next;
    s->n_conns--;
  }
  conn_free(c);
  if (s)
    maybe_free_server(s);
}

static void conn_unlive(struct net_conn *c) {
  if (c->live) {
    c->live = false;
    c->server->n_live--;
  }
}

/* ---- connections in the handshake, per address (the per-address cap) -- */

static struct addr_count **preauth_bucket(struct net_server *s, const char *addr) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)addr; *p; p++)
    h = (h ^ *p) * 16777619u;
  return &s->preauth[h & (s->n_preauth_buckets - 1)];
}

static unsigned preauth_count(struct net_server *s, const char *addr) {
  for (struct addr_count *e = *preauth_bucket(s, addr); e; e = e->next)
    if (strcmp(e->addr, addr) == 0)
      return e->n;
  return 0;
}

/* c (live, in the handshake) counts against its address. 0 or -ENOMEM. */
static int preauth_enter(struct net_conn *c) {
  struct addr_count **b = preauth_bucket(c->server, c->peer), *e = *b;
  while (e && strcmp(e->addr, c->peer) != 0)
    e = e->next;
  if (!e) {
    e = calloc(1, sizeof(*e));
    if (!e)
      return -ENOMEM;
    memcpy(e->addr, c->peer, sizeof(e->addr));
    e->next = *b;
    *b = e;
  }
  e->n++;
  c->preauth = e;
  return 0;
}

/* c leaves the handshake (ready, flushing or closing). */
static void preauth_leave(struct net_conn *c) {
  struct addr_count *e = c->preauth;
  if (!e)
    return;
  c->preauth = NULL;
  if (--e->n > 0)
    return;
  struct addr_count **pp = preauth_bucket(c->server, e->addr);
  while (*pp != e)
    pp = &(*pp)->next;
  *pp = e->next;
  free(e);
}

void net_conn_close(struct net_conn *c, int err) {
  if (!c || c->state == CONN_CLOSING)
    return;
  /* a flush that ends in a close keeps the reason given when it began */
  if (c->state != CONN_FLUSHING)
    c->close_err = err;
  c->state = CONN_CLOSING;
  if (c->held) { /* never written: dropped with the rest of the queue */
    c->queued -= c->held->len;
    free(c->held);
    c->held = NULL;
  }
  c->corked = false;
  conn_unlive(c);
  preauth_leave(c);
  wheel_unlink(c);
  holding_leave(c);
  if (c->own_wheel) {
    uv_timer_stop(&c->own_wheel->timer);
    uv_close((uv_handle_t *)&c->own_wheel->timer, on_handle_closed);
  }
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void conn_resume(struct net_conn *c);

static void on_write(uv_write_t *req, int status) {
  struct write_req *w = (struct write_req *)req;
  struct net_conn *c = w->conn;
  c->queued -= w->len;
  if (c->n_spare < SPARE_MAX && c->spare_bytes + w->cap <= c->limits.wq_high &&
      c->state != CONN_CLOSING) {
    c->spare[c->n_spare++] = w;
    c->spare_bytes += w->cap;
    holding_join(c);
  } else {
    free(w);
  }

  if (status < 0) {
    net_conn_close(c, status == UV_ECANCELED ? c->close_err : -EPIPE);
    return;
  }
  if (c->state == CONN_FLUSHING) {
    if (c->queued == 0)
      net_conn_close(c, c->close_err);
    return;
  }
  /* drained enough: read again */
  if (!c->reading && c->queued <= c->limits.wq_high / 2)
    conn_resume(c);
}

/* Hand w (its len bytes) to libuv; its bytes are counted in queued already.
 * 0, or -EPIPE with w freed and c closing. */
static int write_submit(struct net_conn *c, struct write_req *w) {
  w->conn = c;
  uv_buf_t b = uv_buf_init((char *)w->buf, (unsigned)w->len);
  int r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
  if (r < 0) {
    c->queued -= w->len;
    free(w);
    net_conn_close(c, -EPIPE);
    return -EPIPE;
  }
  return 0;
}

/* A write buffer of at least need bytes: a spare, or a new one of at least
 * min_cap. NULL when out of memory. */
static struct write_req *write_buf(struct net_conn *c, size_t need, size_t min_cap) {
  for (unsigned i = 0; i < c->n_spare; i++)
    if (c->spare[i]->cap >= need) {
      struct write_req *w = c->spare[i];
      c->spare[i] = c->spare[--c->n_spare];
      c->spare_bytes -= w->cap;
      w->len = 0;
      return w;
    }
  size_t cap = need < min_cap ? min_cap : need;
  struct write_req *w = malloc(sizeof(*w) + cap);
  if (w) {
    w->cap = cap;
    w->len = 0;
  }
  return w;
}

/* Queue one frame: body as it is (handshake) or sealed as the next record.
 * Corked, it joins the held buffer while that has room (a full one is
 * written first, in order); else it is written at once. */
static int queue_frame(struct net_conn *c, const uint8_t *body, size_t body_len, bool encrypt) {
  size_t enc_len = encrypt ? body_len + NOISE_TAG_LEN : body_len;
  uint32_t max = encrypt ? FRAME_MAX_SESSION : FRAME_MAX_HANDSHAKE;
  if (enc_len > max)
    return CORDON_E_LIMIT;
  if (c->queued + enc_len + FRAME_HEADER_LEN > c->limits.wq_hard) {
    net_conn_close(c, CORDON_E_LIMIT);
    return CORDON_E_LIMIT;
  }
  size_t need = FRAME_HEADER_LEN + enc_len;
  struct write_req *w = c->corked ? c->held : NULL;
  if (w && w->cap - w->len < need) { /* full: it goes, a new one is held */
    c->held = NULL;
    int r = write_submit(c, w);
    if (r < 0)
      return r;
    w = NULL;
  }
  if (!w && !(w = write_buf(c, need, c->corked ? CORK_BUF_LEN : 4096 - sizeof(*w))))
    return -ENOMEM;
  uint8_t *at = w->buf + w->len;
  int r = frame_encode_header(enc_len, max, at);
  if (r == 0 && encrypt) {
    size_t out_len;
    r = noise_session_encrypt(c->session, body, body_len, at + FRAME_HEADER_LEN, enc_len, &out_len);
  } else if (r == 0) {
    memcpy(at + FRAME_HEADER_LEN, body, body_len);
  }
  if (r < 0) {
    if (w != c->held)
      free(w);
    net_conn_close(c, r); /* drops the held buffer too */
    return r;
  }
  w->len += need;
  c->queued += need;
  c->sent_this_tick = true;
  if (c->corked) {
    c->held = w;
  } else if ((r = write_submit(c, w)) < 0) {
    return r;
  }
  if (c->queued > c->limits.wq_high && c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
  }
  return 0;
}

void net_conn_cork(struct net_conn *c) {
  if (c && c->state != CONN_CLOSING)
    c->corked = true;
}

void net_conn_uncork(struct net_conn *c) {
  if (!c)
    return;
  c->corked = false;
  struct write_req *w = c->held;
  c->held = NULL;
  if (w)
    (void)write_submit(c, w); /* a failure closes c */
}

int net_conn_send(struct net_conn *c, const uint8_t *data, size_t len) {
  if (!c || (!data && len > 0))
    return -EINVAL;
  if (c->state != CONN_READY)
    return -EPIPE;
  if (len > NOISE_MAX_PLAINTEXT)
    return CORDON_E_LIMIT;
  return queue_frame(c, data, len, true);
}

void net_conn_flush_close(struct net_conn *c, int err) {
  if (!c || c->state == CONN_FLUSHING || c->state == CONN_CLOSING)
    return;
  if (c->queued == 0 || c->state == CONN_CONNECTING) {
    net_conn_close(c, err);
    return;
  }
  c->close_err = err;
  c->state = CONN_FLUSHING;
  net_conn_uncork(c); /* what is held goes too */
  if (c->state == CONN_CLOSING)
    return;
  preauth_leave(c);
  c->flush_started = uv_now(c->loop);
  conn_schedule(c);
  if (c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
  }
}

static int become_ready(struct net_conn *c) {
  int r = noise_handshake_split(&c->hs, &c->session);
  if (r < 0)
    return r;
  /* the handshake's frames are read: a fresh reader for records gives back
   * the buffer they needed, which an idle session would keep */
  frame_reader_release(&c->reader);
  r = frame_reader_init(&c->reader, FRAME_MAX_SESSION);
  if (r < 0)
    return r;
  c->state = CONN_READY;
  preauth_leave(c);
  conn_schedule(c);
  if (c->ops->on_ready)
    return c->ops->on_ready(c);
  return 0;
}

static int write_hs(struct net_conn *c, const uint8_t *payload, size_t len) {
  uint8_t msg[256];
  size_t n;
  int r = noise_handshake_write_message(c->hs, payload, len, msg, sizeof(msg), &n);
  if (r < 0)
    return r;
  return queue_frame(c, msg, n, false);
}

static int handle_handshake(struct net_conn *c, const uint8_t *body, size_t len) {
  int r;
  if (c->role == NOISE_RESPONDER && !c->hs) {
    /* message 1: e || mode byte (clear) */
    if (len != NOISE_MSG1_LEN(1))
      return CORDON_E_PROTOCOL;
    uint8_t mode = body[NOISE_KEY_LEN];
    if ((mode != NOISE_MODE_SESSION && mode != NOISE_MODE_PAIRING) ||
        !(c->server->modes & (1u << mode)))
      return CORDON_E_PROTOCOL;
    c->mode = (enum noise_mode)mode;
    uint8_t pro[NOISE_PROLOGUE_LEN];
    size_t pl;
    r = noise_prologue_build(NOISE_WIRE_VERSION, c->mode, pro, sizeof(pro), &pl);
    if (r == 0)
      r = noise_handshake_new(NOISE_RESPONDER, c->static_priv, pro, pl, &c->hs);
    uint8_t payload[8];
    size_t plen;
    if (r == 0)
      r = noise_handshake_read_message(c->hs, body, len, payload, sizeof(payload), &plen);
    if (r == 0)
      r = write_hs(c, NULL, 0);
    return r;
  }
  if (noise_handshake_next(c->hs) != NOISE_ACTION_READ)
    return CORDON_E_PROTOCOL;
  uint8_t payload[64];
  size_t plen;
  r = noise_handshake_read_message(c->hs, body, len, payload, sizeof(payload), &plen);
  if (r < 0)
    return r;
  if (plen != 0)
    return CORDON_E_PROTOCOL;
  if (c->role == NOISE_INITIATOR) {
    /* message 2 read: check the server before saying anything more */
    uint8_t key[NOISE_KEY_LEN];
    r = noise_handshake_remote_static(c->hs, key);
    if (r == 0 && c->ops->check_peer)
      r = c->ops->check_peer(c, key);
    if (r < 0)
      return r;
    r = write_hs(c, NULL, 0);
    if (r < 0)
      return r;
  }
  if (noise_handshake_next(c->hs) == NOISE_ACTION_SPLIT)
    return become_ready(c);
  return 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct net_conn *c = h->data;
  struct read_buf *rb = c->rbuf;
  if (!rb->lent && !rb->base)
    rb->base = malloc(READ_BUF_LEN);
  if (!rb->lent && rb->base) {
    rb->lent = true;
    *buf = uv_buf_init((char *)rb->base, READ_BUF_LEN);
    return;
  }
  buf->base = malloc(READ_BUF_LEN);
  buf->len = buf->base ? READ_BUF_LEN : 0;
}

static void read_buf_return(struct net_conn *c, const uv_buf_t *buf) {
  if (buf->base && (uint8_t *)buf->base == c->rbuf->base)
    c->rbuf->lent = false;
  else
    free(buf->base);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  struct net_conn *c = stream->data;
  if (nread < 0) {
    read_buf_return(c, buf);
    /* an orderly end only between two records of a finished handshake */
    bool orderly = nread == UV_EOF && c->state == CONN_READY && !frame_reader_in_frame(&c->reader);
    net_conn_close(c, orderly ? 0 : -ECONNRESET);
    return;
  }
  uint8_t *p = (uint8_t *)buf->base; /* ours: records are decrypted in place */
  size_t left = (size_t)nread;
  if (left) {
    c->last_rx = uv_now(c->loop);
    if (c->quiet_signalled) {
      c->quiet_signalled = false;
      conn_schedule(c); /* the quiet deadline is armed again */
    }
  }
  while (left > 0 && (c->state == CONN_HANDSHAKE || c->state == CONN_READY)) {
    if (c->state == CONN_READY && left > FRAME_HEADER_LEN && !frame_reader_in_frame(&c->reader)) {
      /* a whole record in this read: decrypt it where it lies rather than
       * copy it into the reader. Any length the reader would refuse (0, over
       * the limit) or that is not all here takes the reader's path. */
      uint32_t flen = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
      if (flen >= 1 && flen <= FRAME_MAX_SESSION && flen <= left - FRAME_HEADER_LEN) {
        uint8_t *rec = p + FRAME_HEADER_LEN;
        size_t plen;
        p += FRAME_HEADER_LEN + flen;
        left -= FRAME_HEADER_LEN + flen;
        int r = noise_session_decrypt(c->session, rec, flen, rec, flen, &plen);
        if (r < 0) {
          net_conn_close(c, r);
          break;
        }
        if (c->ops->on_record)
          c->ops->on_record(c, rec, plen);
        continue;
      }
    }
    size_t used;
    const uint8_t *body;
    size_t blen;
    bool was_in_frame = frame_reader_in_frame(&c->reader);
    int r = frame_reader_feed(&c->reader, p, left, &used, &body, &blen);
    p += used;
    left -= used;
    if (r < 0) {
      net_conn_close(c, r);
      break;
    }
    if (r == 0) {
      if (!was_in_frame && frame_reader_in_frame(&c->reader)) {
        c->frame_started = uv_now(c->loop);
        conn_schedule(c);
      }
      continue;
    }
    if (c->state == CONN_HANDSHAKE) {
      r = handle_handshake(c, body, blen);
    } else {
      /* decrypt in place: the reader's buffer is ours until the next feed */
      size_t plen;
      r = noise_session_decrypt(c->session, body, blen, (uint8_t *)body, blen, &plen);
      if (r == 0 && c->ops->on_record)
        c->ops->on_record(c, body, plen);
    }
    if (r < 0)
      net_conn_close(c, r);
  }
  if (c->reader.body_cap > 0) {
    c->read_this_tick = true;
    holding_join(c);
  }
  read_buf_return(c, buf);
}

static void conn_resume(struct net_conn *c) {
  if ((c->state != CONN_HANDSHAKE && c->state != CONN_READY) || c->reading)
    return;
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
    c->reading = true;
}

/* What on_tick does for one connection whose slot is due: close it on a
 * passed deadline, signal quiet, or put it back for its next deadline. */
static void conn_check(struct net_conn *c, uint64_t now) {
  const struct net_limits *l = &c->limits;
  switch (c->state) {
  case CONN_CONNECTING:
  case CONN_HANDSHAKE:
    if (l->handshake_ms && now - c->started >= l->handshake_ms) {
      net_conn_close(c, -ETIMEDOUT);
      return;
    }
    break;
  case CONN_FLUSHING:
    /* a peer that does not read cannot hold the connection open */
    if (now - c->flush_started >= (l->frame_ms ? l->frame_ms : 1000)) {
      net_conn_close(c, c->close_err);
      return;
    }
    break;
  case CONN_READY:
    if (l->frame_ms && frame_reader_in_frame(&c->reader) && now - c->frame_started >= l->frame_ms) {
      net_conn_close(c, -ETIMEDOUT);
      return;
    }
    if (l->idle_ms && now - c->last_rx >= l->idle_ms) {
      net_conn_close(c, -ETIMEDOUT);
      return;
    }
    if (l->quiet_ms && !c->quiet_signalled && now - c->last_rx >= l->quiet_ms && c->ops->on_quiet) {
      c->quiet_signalled = true;
      c->ops->on_quiet(c);
    }
    break;
  case CONN_CLOSING:
    return;
  }
  conn_schedule(c);
}

/* Every tick_ms: the connections holding buffers, then the slots from the
 * last tick processed up to the next one (a deadline of the next tick may
 * have passed already: each is checked against now, so none fires more
 * than a tick late). */
static void on_tick(uv_timer_t *t) {
  struct conn_wheel *w = (struct conn_wheel *)t;
  uint64_t now = uv_now(t->loop);
  holding_tick(w);
  uint64_t from = w->tick + 1, to = now / w->tick_ms + 1;
  if (to > w->tick + 1)
    w->tick = to - 1;
  for (uint64_t k = from; k <= to && k - from < WHEEL_SLOTS; k++) {
    /* detached first: a callback may close or schedule any connection */
    struct net_conn **slot = &w->slots[k % WHEEL_SLOTS], *due = *slot;
    *slot = NULL;
    if (due)
      due->wpprev = &due;
    while (due) {
      struct net_conn *c = due;
      wheel_unlink(c);
      if (c->due_tick > to) /* a later round */
        wheel_link(w, &w->slots[c->due_tick % WHEEL_SLOTS], c);
      else
        conn_check(c, now);
    }
  }
  if (w->n_waiting == 0 && w->n_holding == 0)
    uv_timer_stop(&w->timer);
}

/* wheel: the server's, or NULL for one of the connection's own. */
static struct net_conn *conn_new(uv_loop_t *loop, const struct net_limits *limits,
                                 const struct net_conn_ops *ops, void *data,
                                 struct conn_wheel *wheel) {
  struct net_conn *c = calloc(1, sizeof(*c));
  if (!c)
    return NULL;
  c->loop = loop;
  c->limits = *limits;
  c->ops = ops;
  c->data = data;
  if (frame_reader_init(&c->reader, FRAME_MAX_HANDSHAKE) < 0) {
    free(c);
    return NULL;
  }
  if (!wheel) {
    c->own_wheel = malloc(sizeof(*c->own_wheel));
    if (!c->own_wheel) {
      free(c);
      return NULL;
    }
    wheel_init(c->own_wheel, loop, limits->tick_ms);
    c->own_wheel->timer.data = c;
    c->handles_open++;
    wheel = c->own_wheel;
  }
  c->wheel = wheel;
  uv_tcp_init(loop, &c->tcp);
  c->tcp.data = c;
  c->rbuf = &c->own_rbuf;
  c->handles_open++;
  c->started = c->last_rx = uv_now(loop);
  return c;
}

static void peer_name(struct net_conn *c) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET)
      uv_ip4_name((struct sockaddr_in *)&ss, c->peer, sizeof(c->peer));
    else if (ss.ss_family == AF_INET6)
      uv_ip6_name((struct sockaddr_in6 *)&ss, c->peer, sizeof(c->peer));
  }
}

static void on_retry(uv_timer_t *t);

static void on_connection(uv_stream_t *listener, int status) {
  struct net_server *s = listener->data;
  if (status < 0 || s->closing)
    return;
  /* a connection's data starts NULL: the application sets it (typically in
   * on_ready) and finds the server's via net_conn_server */
  struct net_conn *c = conn_new(s->loop, &s->limits, s->ops, NULL, &s->wheel);
  if (!c) {
    /* libuv holds the connection and stops listening until it is accepted,
     * which needs memory: try again shortly rather than stall for good */
    uv_timer_start(&s->retry, on_retry, 100, 0);
    return;
  }
  c->role = NOISE_RESPONDER;
  c->server = s;
  c->static_priv = s->static_priv;
  c->rbuf = &s->rbuf;
  c->next = s->conns;
  if (s->conns)
    s->conns->pprev = &c->next;
  c->pprev = &s->conns;
  s->conns = c;
  s->n_conns++;
  c->state = CONN_HANDSHAKE;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) < 0) {
    net_conn_close(c, -ECONNABORTED);
    return;
  }
  peer_name(c);
  /* only connections under the caps count: a flood of refused ones from
   * one address must not push others over the global cap. The per-address
   * cap is the handshake-flood defence: it counts the connections of that
   * address that have not finished their handshake, never the sessions of
   * the many devices behind one NAT. */
  int r = 0;
  if (s->n_live >= s->limits.max_conns || preauth_count(s, c->peer) >= s->limits.max_per_addr)
    r = CORDON_E_LIMIT;
  else
    r = preauth_enter(c);
  if (r < 0) {
    c->ops = NULL; /* never seen by the application */
    net_conn_close(c, r);
    return;
  }
  c->live = true;
  s->n_live++;
  uv_tcp_nodelay(&c->tcp, 1);
  conn_schedule(c);
  conn_resume(c);
}

static int limits_check(const struct net_limits *l) {
  if (!l || l->tick_ms == 0 || l->wq_high == 0 || l->wq_high > l->wq_hard)
    return -EINVAL;
  return 0;
}

static void on_retry(uv_timer_t *t) {
  struct net_server *s = t->data;
  on_connection((uv_stream_t *)&s->listener, 0);
}

static void on_server_handle_closed(uv_handle_t *h) {
  struct net_server *s = h->data;
  s->handles_open--;
  maybe_free_server(s);
}

static void server_close_handles(struct net_server *s) {
  s->closing = true;
  uv_close((uv_handle_t *)&s->retry, on_server_handle_closed);
  uv_close((uv_handle_t *)&s->wheel.timer, on_server_handle_closed);
  uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
}

int net_server_new(uv_loop_t *loop, const char *host, int port,
                   const uint8_t static_priv[NOISE_KEY_LEN], unsigned modes,
                   const struct net_limits *limits, const struct net_conn_ops *ops, void *data,
                   struct net_server **out_server) {
  struct sockaddr_storage addr;
  if (!loop || !host || !static_priv || !ops || !out_server || limits_check(limits) < 0 ||
      (modes & ~((1u << NOISE_MODE_SESSION) | (1u << NOISE_MODE_PAIRING))) != 0 || modes == 0)
    return -EINVAL;
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) != 0 &&
      uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr) != 0)
    return -EINVAL;
  if (sodium_init() < 0)
    return CORDON_E_CRYPTO;
  struct net_server *s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  s->static_priv = sodium_malloc(NOISE_KEY_LEN);
  if (!s->static_priv) {
    free(s);
    return -ENOMEM;
  }
  /* about two connections a chain when max_conns are in the handshake */
  s->n_preauth_buckets = 16;
  while (s->n_preauth_buckets < limits->max_conns / 2 && s->n_preauth_buckets < (1u << 16))
    s->n_preauth_buckets *= 2;
  s->preauth = calloc(s->n_preauth_buckets, sizeof(*s->preauth));
  if (!s->preauth) {
    sodium_free(s->static_priv);
    free(s);
    return -ENOMEM;
  }
  memcpy(s->static_priv, static_priv, NOISE_KEY_LEN);
  s->loop = loop;
  s->modes = modes;
  s->limits = *limits;
  s->ops = ops;
  s->data = data;
  uv_tcp_init(loop, &s->listener);
  uv_timer_init(loop, &s->retry);
  wheel_init(&s->wheel, loop, limits->tick_ms);
  s->listener.data = s;
  s->retry.data = s;
  s->wheel.timer.data = s;
  s->handles_open = 3;
  int r = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
  if (r == 0)
    r = uv_listen((uv_stream_t *)&s->listener, NET_LISTEN_BACKLOG, on_connection);
  if (r < 0) {
    server_close_handles(s);
    return r == UV_EADDRINUSE ? -EADDRINUSE : r == UV_EACCES ? -EACCES : -EINVAL;
  }
  struct sockaddr_storage bound;
  int blen = sizeof(bound);
  uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &blen);
  s->port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                             : ((struct sockaddr_in6 *)&bound)->sin6_port);
  *out_server = s;
  return 0;
}

int net_server_port(const struct net_server *s) {
  return s->port;
}
void *net_server_data(const struct net_server *s) {
  return s->data;
}
unsigned net_server_count(const struct net_server *s) {
  return s->n_live;
}

void net_server_close(struct net_server *s) {
  if (!s || s->closing)
    return;
  server_close_handles(s);
  for (struct net_conn *c = s->conns; c; c = c->next)
    net_conn_close(c, 0);
}

static void on_connect(uv_connect_t *req, int status) {
  struct net_conn *c = req->data;
  if (c->state == CONN_CLOSING)
    return;
  if (status < 0) {
    net_conn_close(c, -ECONNREFUSED);
    return;
  }
  peer_name(c);
  uv_tcp_nodelay(&c->tcp, 1);
  c->state = CONN_HANDSHAKE;
  uint8_t mode = (uint8_t)c->mode;
  int r = write_hs(c, &mode, 1);
  if (r < 0) {
    net_conn_close(c, r);
    return;
  }
  conn_resume(c);
}

int net_connect(uv_loop_t *loop, const char *host, int port,
                const uint8_t static_priv[NOISE_KEY_LEN], enum noise_mode mode,
                const struct net_limits *limits, const struct net_conn_ops *ops, void *data,
                struct net_conn **out_conn) {
  struct sockaddr_storage addr;
  if (!loop || !host || !static_priv || !ops || !out_conn || limits_check(limits) < 0 ||
      (mode != NOISE_MODE_SESSION && mode != NOISE_MODE_PAIRING))
    return -EINVAL;
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) != 0 &&
      uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr) != 0)
    return -EINVAL;
  if (sodium_init() < 0)
    return CORDON_E_CRYPTO;
  struct net_conn *c = conn_new(loop, limits, ops, data, NULL);
  if (!c)
    return -ENOMEM;
  c->role = NOISE_INITIATOR;
  c->mode = mode;
  c->state = CONN_CONNECTING;
  /* the handshake keeps the only copy of the static key (in its secure
   * memory); secure allocations are costly, so there is no second one */
  uint8_t pro[NOISE_PROLOGUE_LEN];
  size_t pl;
  int r = noise_prologue_build(NOISE_WIRE_VERSION, mode, pro, sizeof(pro), &pl);
  if (r == 0)
    r = noise_handshake_new(NOISE_INITIATOR, static_priv, pro, pl, &c->hs);
  if (r < 0) {
    c->ops = NULL; /* the caller hears of it from the return value only */
    net_conn_close(c, r);
    return r;
  }
  c->connect_req.data = c;
  r = uv_tcp_connect(&c->connect_req, &c->tcp, (struct sockaddr *)&addr, on_connect);
  if (r < 0) {
    c->ops = NULL;
    net_conn_close(c, r);
    return r;
  }
  conn_schedule(c);
  *out_conn = c;
  return 0;
}

void *net_conn_data(const struct net_conn *c) {
  return c->data;
}
void net_conn_set_data(struct net_conn *c, void *data) {
  c->data = data;
}
enum noise_mode net_conn_mode(const struct net_conn *c) {
  return c->mode;
}
bool net_conn_ready(const struct net_conn *c) {
  return c->state == CONN_READY;
}
void net_conn_remote_key(const struct net_conn *c, uint8_t out_key[NOISE_KEY_LEN]) {
  noise_session_remote_static(c->session, out_key);
}
void net_conn_handshake_hash(const struct net_conn *c, uint8_t out_h[NOISE_HASH_LEN]) {
  noise_session_hash(c->session, out_h);
}
const char *net_conn_peer(const struct net_conn *c) {
  return c->peer;
}
size_t net_conn_queued(const struct net_conn *c) {
  return c->queued;
}
struct net_server *net_conn_server(const struct net_conn *c) {
  return c->server;
}
