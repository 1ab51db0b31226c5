/* bench/loadgen: N synthetic devices on one libuv loop against a real
 * `cordon-server run`, speaking the real wire (proto/noise.h, proto/frame.h,
 * proto/msg.h, proto/pairing.h), and a dispatcher on the daemon's admin
 * socket (server/admin_ops.h). It runs nothing: each job is answered at once
 * with `running` and a synthetic successful `result` (result_fill, the one
 * place a result is made), kept until its `ack` and sent again after a
 * reconnect, as the agent's spool does. So what is measured is the server.
 *
 * The connection code is its own, over proto/ (not net/conn.c's
 * net_connect): each device binds its own loopback source address
 * (127.1.x.y, at most 16 devices per address: the server's per-address cap;
 * pairing from 127.2.x.y, one device per address: the server allows 10
 * pairings per address per minute), which net_connect cannot, and one
 * process holds 10,000 of them without a timer and a 256 KiB read buffer
 * each.
 *
 * Usage: bench_loadgen --server HOST:PORT --state DIR --devices N --ids FILE
 *                      [--backoff] [--jobs-log FILE] [--package FILE.cpkg]
 * then commands on stdin, one per line, each answered by one line on stdout
 * (`<command> ok key=value ...` or `<command> fail why`):
 *   pair                      pair the devices FILE does not hold yet (codes
 *                             from `cordon-server pair-code`, users
 *                             lg<k>, three devices per user) and save FILE
 *   connect                   open every session; when all are welcomed:
 *                             n, ms, sessions_per_s
 *   dispatch COUNT NDEV CONC RATE
 *                             COUNT jobs over the admin socket to the first
 *                             NDEV devices in turn, at most CONC requests in
 *                             flight, RATE per second (0: as fast as CONC
 *                             allows); each is over when its dispatch reply
 *                             and its ack (the result stored) are in:
 *                             n, ok, failed, ms, jobs_per_s, p50_ms, p99_ms
 *   mark                      note the time (before a server restart);
 *                             "!mark" runs at once, even during a dispatch
 *   waitall SECONDS           wait until every device is welcomed again:
 *                             ms from the mark until the moment all were
 *                             back (after at least one was lost), reconnects
 *   stats                     ready, jobs, dup_jobs, results, acks, unacked
 *   echo-connect HOST:PORT    the baseline: N plain TCP connections from the
 *                             same source addresses, each connected once its
 *                             first message came back: n, ms, conns_per_s
 *   echo COUNT NDEV CONC RATE the baseline's messages: a 300-byte message
 *                             echoed by bench_echo: as dispatch
 *   quit
 * --backoff: reconnect with the agent's backoff (agent/session.c: 0.5 s
 * doubling to 30 s, each delay uniform in [b/2, b]); without it, at once. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "core/id.h"
#include "proto/frame.h"
#include "proto/msg.h"
#include "proto/noise.h"
#include "proto/pairing.h"
#include "proto/receipt.h"

#define SERVER_BIN CORDON_BINARY_DIR "/cordon-server"
#define PER_ADDR 16         /* devices per source address (the server's cap) */
#define DEVS_PER_USER 3     /* live pairing codes a user may hold */
#define CONNECT_WINDOW 96   /* handshakes in progress at once while connecting */
#define PING_QUIET_MS 10000 /* the agent pings after 10 s of silence */
#define BACKOFF_FIRST_MS 500
#define BACKOFF_MAX_MS 30000
#define ECHO_MSG 300

/* A result not acknowledged yet: enough to make it again, signed alike. */
struct spooled {
  uint8_t id[CORDON_ID_LEN];
  uint8_t ticket[256]; /* a version-1 ticket body is 161 bytes */
  size_t ticket_len;
  uint64_t started_ms;
};

enum dev_state { D_IDLE, D_CONNECTING, D_HANDSHAKE, D_HELLO, D_READY, D_CLOSING };

struct dev {
  unsigned idx;
  uint8_t priv[NOISE_KEY_LEN];
  uint8_t device_id[CORDON_ID_LEN];
  char device_hex[CORDON_ID_HEX_SIZE];
  char user[32];
  bool paired;
  /* pairing */
  bool pairing;
  int pstate; /* 0 hello sent, 1 welcome, 2 proof sent, 3 done */
  char code_id[PAIRING_CODE_ID_CHARS + 1];
  uint8_t code_key[PAIRING_KEY_LEN];
  /* the connection */
  enum dev_state state;
  bool echo;
  uv_tcp_t *tcp;
  uv_connect_t creq;
  struct noise_handshake *hs;
  struct noise_session *ns;
  struct frame_reader fr;
  uint64_t last_rx;
  uint64_t ping_nonce;
  bool in_window; /* counted in connecting_now */
  unsigned fails; /* failed first connects (connect, echo-connect) */
  uint8_t *eacc;  /* echo: a message arriving in parts */
  size_t ehave;
  /* reconnecting */
  uv_timer_t *retry;
  unsigned backoff_ms;
  /* results not acknowledged yet (the spool) */
  struct spooled *unacked;
  size_t n_unacked, cap_unacked;
  /* the receipt signing key (docs/protocol/receipt.md), sent in hello */
  uint8_t sign_pk[crypto_sign_PUBLICKEYBYTES];
  uint8_t sign_sk[crypto_sign_SECRETKEYBYTES];
};

/* One job (or echo message) being measured, by id. */
struct jslot {
  uint8_t id[CORDON_ID_LEN];
  bool used;
  bool replied, acked, counted;
  unsigned jobs_seen;
  double t0;
};

struct req {
  uv_pipe_t pipe;
  uv_connect_t conn;
  uv_write_t wr;
  char *line;
  char buf[4096];
  size_t len;
  unsigned dev;
  double t0;
};

static uv_loop_t *loop;
static struct dev *devs;
static unsigned n_devs;
static char server_host[64] = "127.0.0.1";
static int server_port;
static char state_dir[1024], ids_path[1024], pkg_path[1024], jobs_log_path[1024];
static FILE *jobs_log;
static bool use_backoff;
static uint8_t server_key[NOISE_KEY_LEN];
static bool have_server_key;
static uint8_t rbuf[256 << 10];

/* the command in progress */
static char cur_cmd[32];
static double cmd_t0, mark_t0, mark_back_ms = -1;
static bool mark_on, mark_dropped; /* since the mark: a session was lost */
static unsigned mark_target;       /* the devices paired at the mark */
static unsigned connect_next, connecting_now, n_ready, reconnects;
static unsigned waitall_target;
static uv_timer_t waitall_timer, pace_timer, sweep_timer;
static unsigned long total_jobs, dup_jobs, total_results, total_acks;

/* dispatch / echo run */
static struct jslot *slots;
static size_t slot_cap;
static unsigned run_count, run_ndev, run_conc, run_started, run_inflight, run_done, run_ok,
    run_failed;
static double run_rate, run_t0, run_progress;
#define RUN_STALL_MS 30000 /* a run with no job over for this long ends */
static double *lat;
static bool run_echo;
static unsigned long echo_seq;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uv_timer_t cmd_timer; /* the next command line, after a reply */
static void on_cmd_timer(uv_timer_t *t);

static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reply(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
  cur_cmd[0] = '\0';
  uv_timer_start(&cmd_timer, on_cmd_timer, 0, 0);
}

/* ---- the measured jobs, by id ---- */

static struct jslot *slot_get(const uint8_t id[CORDON_ID_LEN], bool add) {
  if (!slots)
    return NULL;
  /* both halves of the id: a job's begins with the time it was made, the
   * echo's with a counter */
  uint64_t h, lo;
  memcpy(&h, id, sizeof(h));
  memcpy(&lo, id + sizeof(h), sizeof(lo));
  h ^= lo;
  for (size_t i = 0; i < slot_cap; i++) {
    struct jslot *s = &slots[(h + i) & (slot_cap - 1)];
    if (!s->used) {
      if (!add)
        return NULL;
      memset(s, 0, sizeof(*s));
      s->used = true;
      memcpy(s->id, id, CORDON_ID_LEN);
      return s;
    }
    if (memcmp(s->id, id, CORDON_ID_LEN) == 0)
      return s;
  }
  return NULL;
}

static void run_next(void);

/* A job is over for the dispatcher once its reply and its ack are in. */
static void slot_check(struct jslot *s) {
  if (s->counted || !s->replied || !s->acked)
    return;
  s->counted = true;
  if (!lat)
    return; /* over after its run ended */
  run_progress = now_ms();
  lat[run_ok++] = now_ms() - s->t0;
  run_done++;
  run_inflight--;
  run_next();
}

/* ---- sending records ---- */

struct wreq {
  uv_write_t req;
  uint8_t buf[];
};

static void on_written(uv_write_t *req, int status) {
  (void)status;
  free(req);
}

static void dev_close(struct dev *d);

static int send_frame(struct dev *d, const uint8_t *body, size_t len, bool encrypt) {
  size_t enc = encrypt ? len + NOISE_TAG_LEN : len;
  struct wreq *w = malloc(sizeof(*w) + FRAME_HEADER_LEN + enc);
  if (!w)
    return -ENOMEM;
  int r = frame_encode_header(enc, encrypt ? FRAME_MAX_SESSION : FRAME_MAX_HANDSHAKE, w->buf);
  size_t out;
  if (r == 0 && encrypt)
    r = noise_session_encrypt(d->ns, body, len, w->buf + FRAME_HEADER_LEN, enc, &out);
  else if (r == 0)
    memcpy(w->buf + FRAME_HEADER_LEN, body, len);
  if (r == 0) {
    uv_buf_t b = uv_buf_init((char *)w->buf, (unsigned)(FRAME_HEADER_LEN + enc));
    r = uv_write(&w->req, (uv_stream_t *)d->tcp, &b, 1, on_written);
  }
  if (r < 0) {
    free(w);
    dev_close(d);
  }
  return r;
}

static int send_msg(struct dev *d, const struct msg *m) {
  uint8_t buf[2048];
  size_t len;
  struct cordon_diag diag = {{0}};
  int r = msg_encode(m, buf, sizeof(buf), &len, &diag);
  if (r < 0) {
    fprintf(stderr, "loadgen: cannot encode %s: %s\n", msg_type_name(m->type), diag.msg);
    return r;
  }
  return send_frame(d, buf, len, true);
}

static void fill_hello(struct msg *m) {
  memset(m, 0, sizeof(*m));
  m->type = MSG_HELLO;
  m->hello.proto_min = MSG_PROTO_VERSION_MIN;
  m->hello.proto_max = MSG_PROTO_VERSION_MAX;
  m->hello.agent_version = "0.1.0-loadgen";
  m->hello.platform = "linux";
  m->hello.best_level = MSG_LEVEL_ISOLATED;
  m->hello.downgrade_reason = NULL;
  m->hello.mechanism = "bwrap+seccomp";
  m->hello.max_jobs = 1024;
}

static uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The one place a result is made: the job ran on d and exited 0 at once,
 * isolated, with no output; its receipt is signed with d's key and bound to
 * the job's ticket (as agent/dispatch.c does). */
static int result_fill(const struct dev *d, const struct spooled *j, struct msg *m) {
  memset(m, 0, sizeof(*m));
  m->type = MSG_RESULT;
  struct msg_result *r = &m->result;
  memcpy(r->job_id, j->id, CORDON_ID_LEN);
  memcpy(r->device_id, d->device_id, CORDON_ID_LEN);
  r->has_exit_code = true;
  r->exit_code = 0;
  r->wall_ms = 1;
  r->has_oom_killed = true;
  r->oom_killed = false;
  r->sandbox.requested = MSG_LEVEL_ISOLATED;
  r->sandbox.has_level = true;
  r->sandbox.level = MSG_LEVEL_ISOLATED;
  r->sandbox.mechanism = "bwrap+seccomp";
  r->sandbox.downgrade_reason = NULL;
  r->sandbox.limits =
      (struct msg_limits_used){MSG_ENFORCE_CGROUP, MSG_ENFORCE_CGROUP, MSG_ENFORCE_CGROUP,
                               MSG_ENFORCE_CGROUP, MSG_ENFORCE_TMPFS};
  r->has_started_ms = r->has_ended_ms = true;
  r->started_ms = j->started_ms;
  r->ended_ms = j->started_ms + 1;
  return receipt_sign_result(r, j->ticket, j->ticket_len, d->sign_sk);
}

static void send_result(struct dev *d, const struct spooled *j) {
  struct msg m;
  if (result_fill(d, j, &m) == 0 && send_msg(d, &m) == 0)
    total_results++;
}

/* ---- the sessions ---- */

static void schedule_reconnect(struct dev *d);
static unsigned connect_target(void);
static void connect_more(void);
static void dev_connect(struct dev *d);

static void window_leave(struct dev *d) {
  if (!d->in_window)
    return;
  d->in_window = false;
  connecting_now--;
  connect_more();
}

static void on_tcp_closed(uv_handle_t *h) {
  struct dev *d = h->data;
  free(h);
  d->tcp = NULL;
  d->state = D_IDLE;
  if (d->pairing) {
    d->pairing = false;
    window_leave(d);
    return;
  }
  if (d->in_window) { /* a failed first connect: again, a few times */
    if (++d->fails < 5 && connect_next > d->idx)
      connect_next = d->idx;
    window_leave(d);
    return;
  }
  schedule_reconnect(d);
}

static void dev_close(struct dev *d) {
  if (!d->tcp || d->state == D_CLOSING)
    return;
  if (d->state == D_READY) {
    n_ready--;
    mark_dropped = mark_dropped || mark_on;
  }
  d->state = D_CLOSING;
  noise_handshake_free(d->hs);
  d->hs = NULL;
  noise_session_free(d->ns);
  d->ns = NULL;
  frame_reader_release(&d->fr);
  uv_close((uv_handle_t *)d->tcp, on_tcp_closed);
}

static void on_retry(uv_timer_t *t) {
  struct dev *d = t->data;
  if (d->state == D_IDLE) {
    reconnects++;
    dev_connect(d);
  }
}

static void schedule_reconnect(struct dev *d) {
  if (d->echo || !d->paired)
    return;
  unsigned delay = 100; /* without --backoff: 0.1 s, not a busy loop */
  if (use_backoff) {    /* agent/session.c's schedule_connect */
    unsigned b = d->backoff_ms ? d->backoff_ms : BACKOFF_FIRST_MS;
    d->backoff_ms = b * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b * 2;
    delay = b / 2 + randombytes_uniform(b / 2 + 1);
  }
  if (!d->retry) {
    d->retry = malloc(sizeof(*d->retry));
    uv_timer_init(loop, d->retry);
    d->retry->data = d;
  }
  uv_timer_start(d->retry, on_retry, delay, 0);
}

static void resend_unacked(struct dev *d) {
  for (size_t i = 0; i < d->n_unacked; i++)
    send_result(d, &d->unacked[i]);
}

/* Spool the job (once); NULL when out of memory. */
static const struct spooled *unacked_add(struct dev *d, const struct msg_job *job) {
  for (size_t i = 0; i < d->n_unacked; i++)
    if (memcmp(d->unacked[i].id, job->job_id, CORDON_ID_LEN) == 0)
      return &d->unacked[i];
  if (d->n_unacked == d->cap_unacked) {
    size_t cap = d->cap_unacked ? d->cap_unacked * 2 : 4;
    void *p = realloc(d->unacked, cap * sizeof(*d->unacked));
    if (!p)
      return NULL;
    d->unacked = p;
    d->cap_unacked = cap;
  }
  struct spooled *j = &d->unacked[d->n_unacked++];
  memcpy(j->id, job->job_id, CORDON_ID_LEN);
  j->ticket_len = job->ticket.len <= sizeof(j->ticket) ? job->ticket.len : 0;
  if (j->ticket_len)
    memcpy(j->ticket, job->ticket.data, j->ticket_len);
  j->started_ms = wall_ms();
  return j;
}

static bool unacked_drop(struct dev *d, const uint8_t id[CORDON_ID_LEN]) {
  for (size_t i = 0; i < d->n_unacked; i++)
    if (memcmp(d->unacked[i].id, id, CORDON_ID_LEN) == 0) {
      memmove(&d->unacked[i], &d->unacked[i + 1], (d->n_unacked - i - 1) * sizeof(*d->unacked));
      d->n_unacked--;
      return true;
    }
  return false;
}

static void identities_save(void);

/* The receipt signing key, from the device's Noise key (a benchmark's
 * shortcut: the identities file keeps one key per device, and the server
 * registers the signing key at the device's first session). */
static void sign_key_derive(struct dev *d) {
  uint8_t seed[crypto_sign_SEEDBYTES];
  crypto_generichash(seed, sizeof(seed), d->priv, NOISE_KEY_LEN, (const uint8_t *)"receipt", 7);
  crypto_sign_seed_keypair(d->sign_pk, d->sign_sk, seed);
}
static void pair_more(void);

static void on_pair_record(struct dev *d, struct msg *m) {
  uint8_t h[NOISE_HASH_LEN];
  noise_session_hash(d->ns, h);
  if (m->type == MSG_WELCOME && d->pstate == 0) {
    d->pstate = 1;
  } else if (m->type == MSG_PAIR_PROOF && d->pstate == 1 && m->pair_proof.role == MSG_ROLE_SERVER) {
    if (pairing_mac_verify(d->code_key, PAIRING_ROLE_SERVER, h, m->pair_proof.mac) < 0) {
      fprintf(stderr, "loadgen: device %u: the server's pairing proof does not verify\n", d->idx);
      dev_close(d);
      return;
    }
    struct msg p = {.type = MSG_PAIR_PROOF};
    p.pair_proof.role = MSG_ROLE_AGENT;
    pairing_mac(d->code_key, PAIRING_ROLE_AGENT, h, p.pair_proof.mac);
    d->pstate = 2;
    send_msg(d, &p);
  } else if (m->type == MSG_PAIR_DONE && d->pstate == 2) {
    memcpy(d->device_id, m->pair_done.device_id, CORDON_ID_LEN);
    cordon_id_to_hex(d->device_id, d->device_hex);
    snprintf(d->user, sizeof(d->user), "%s", m->pair_done.user);
    noise_session_remote_static(d->ns, server_key);
    have_server_key = true;
    d->paired = true;
    d->pstate = 3;
  } else {
    fprintf(stderr, "loadgen: device %u: pairing refused (%s%s%s)\n", d->idx,
            msg_type_name(m->type), m->type == MSG_GOAWAY ? " " : "",
            m->type == MSG_GOAWAY ? m->goaway.code : "");
    dev_close(d);
  }
}

static void on_session_record(struct dev *d, struct msg *m) {
  if (d->state == D_HELLO) {
    if (m->type != MSG_WELCOME) {
      fprintf(stderr, "loadgen: device %u: refused: %s %s\n", d->idx, msg_type_name(m->type),
              m->type == MSG_GOAWAY ? m->goaway.code : "");
      dev_close(d);
      return;
    }
    d->state = D_READY;
    d->backoff_ms = 0;
    n_ready++;
    resend_unacked(d);
    if (mark_on && mark_dropped && mark_back_ms < 0 && n_ready >= mark_target)
      mark_back_ms = now_ms() - mark_t0; /* all back */
    window_leave(d);
    if (waitall_target && n_ready >= waitall_target) {
      waitall_target = 0;
      uv_timer_stop(&waitall_timer);
      reply("waitall ok n=%u ms=%.0f reconnects=%u", n_ready, now_ms() - mark_t0, reconnects);
    }
    return;
  }
  switch (m->type) {
  case MSG_PING: {
    struct msg p = {.type = MSG_PONG};
    p.pong.nonce = m->ping.nonce;
    send_msg(d, &p);
    break;
  }
  case MSG_JOB: {
    total_jobs++;
    struct jslot *s = slot_get(m->job.job_id, true);
    if (s && ++s->jobs_seen > 1)
      dup_jobs++;
    struct msg r = {.type = MSG_RUNNING};
    memcpy(r.running.job_id, m->job.job_id, CORDON_ID_LEN);
    send_msg(d, &r);
    const struct spooled *j = unacked_add(d, &m->job);
    if (j)
      send_result(d, j);
    break;
  }
  case MSG_ACK: {
    if (unacked_drop(d, m->ack.job_id))
      total_acks++;
    struct jslot *s = slot_get(m->ack.job_id, false);
    if (s && !s->acked) {
      s->acked = true;
      slot_check(s);
    }
    break;
  }
  case MSG_GOAWAY:
    dev_close(d);
    break;
  case MSG_ERROR:
    fprintf(stderr, "loadgen: device %u: error %s: %s\n", d->idx, m->error.code, m->error.message);
    break;
  default: /* chunk, pong, keys, cancel: nothing to do */
    break;
  }
}

static void on_record(struct dev *d, const uint8_t *data, size_t len) {
  struct msg m;
  if (msg_decode(data, len, &m, NULL) < 0) {
    dev_close(d);
    return;
  }
  if (d->pairing)
    on_pair_record(d, &m);
  else
    on_session_record(d, &m);
  msg_release(&m);
}

static int handshake_step(struct dev *d, const uint8_t *body, size_t len) {
  uint8_t payload[64];
  size_t plen;
  int r = noise_handshake_read_message(d->hs, body, len, payload, sizeof(payload), &plen);
  if (r < 0)
    return r;
  uint8_t key[NOISE_KEY_LEN];
  if ((r = noise_handshake_remote_static(d->hs, key)) < 0)
    return r;
  if (!d->pairing && have_server_key && sodium_memcmp(key, server_key, NOISE_KEY_LEN) != 0)
    return CORDON_E_UNKNOWN_KEY;
  uint8_t msg3[NOISE_MSG3_LEN(0)];
  size_t n;
  if ((r = noise_handshake_write_message(d->hs, NULL, 0, msg3, sizeof(msg3), &n)) < 0)
    return r;
  if ((r = send_frame(d, msg3, n, false)) < 0)
    return r;
  if ((r = noise_handshake_split(&d->hs, &d->ns)) < 0)
    return r;
  if ((r = frame_reader_set_max(&d->fr, FRAME_MAX_SESSION)) < 0)
    return r;
  struct msg hello;
  fill_hello(&hello);
  if (d->pairing) {
    hello.hello.pair_code = d->code_id;
    char name[32];
    snprintf(name, sizeof(name), "lg%u", d->idx);
    hello.hello.name = name;
    d->state = D_HELLO;
    return send_msg(d, &hello);
  }
  hello.hello.has_device_id = true;
  memcpy(hello.hello.device_id, d->device_id, CORDON_ID_LEN);
  hello.hello.has_sign_key = true; /* registered at the first session */
  memcpy(hello.hello.sign_key, d->sign_pk, MSG_KEY_LEN);
  d->state = D_HELLO;
  return send_msg(d, &hello);
}

/* ---- the echo baseline's connections ---- */

static void echo_in(struct dev *d, const uint8_t *p, size_t n) {
  /* messages are ECHO_MSG bytes: the first 16 are the id */
  if (!d->eacc && !(d->eacc = malloc(ECHO_MSG)))
    return;
  while (n > 0) {
    size_t take = ECHO_MSG - d->ehave < n ? ECHO_MSG - d->ehave : n;
    memcpy(d->eacc + d->ehave, p, take);
    d->ehave += take;
    p += take;
    n -= take;
    if (d->ehave == ECHO_MSG) {
      d->ehave = 0;
      if (d->state == D_HELLO) { /* the first round trip: connected */
        d->state = D_READY;
        n_ready++;
        window_leave(d);
        continue;
      }
      struct jslot *s = slot_get(d->eacc, false);
      if (s && !s->acked) {
        s->acked = s->replied = true;
        slot_check(s);
      }
    }
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  *buf = uv_buf_init((char *)rbuf, sizeof(rbuf));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  struct dev *d = st->data;
  if (nread < 0) {
    dev_close(d);
    return;
  }
  d->last_rx = uv_now(loop);
  if (d->echo) {
    echo_in(d, (const uint8_t *)buf->base, (size_t)nread);
    return;
  }
  const uint8_t *p = (const uint8_t *)buf->base;
  size_t left = (size_t)nread;
  while (left > 0 && d->tcp && d->state != D_CLOSING) {
    size_t used;
    const uint8_t *body;
    size_t blen;
    int r = frame_reader_feed(&d->fr, p, left, &used, &body, &blen);
    p += used;
    left -= used;
    if (r < 0) {
      dev_close(d);
      return;
    }
    if (r == 0)
      continue;
    if (d->state == D_HANDSHAKE) {
      r = handshake_step(d, body, blen);
    } else {
      size_t plen;
      r = noise_session_decrypt(d->ns, body, blen, (uint8_t *)body, blen, &plen);
      if (r == 0)
        on_record(d, body, plen);
    }
    if (r < 0)
      dev_close(d);
  }
}

static void on_connected(uv_connect_t *req, int status) {
  struct dev *d = req->data;
  if (d->state == D_CLOSING)
    return;
  if (status < 0) {
    dev_close(d);
    return;
  }
  uv_tcp_nodelay(d->tcp, 1);
  d->last_rx = uv_now(loop);
  if (d->echo) {
    /* one round trip first, as a session has its handshake: the window
     * then bounds the connections the server has not accepted yet */
    d->state = D_HELLO;
    uv_read_start((uv_stream_t *)d->tcp, on_alloc, on_read);
    struct wreq *w = malloc(sizeof(*w) + ECHO_MSG);
    memset(w->buf, 0, ECHO_MSG);
    uv_buf_t b = uv_buf_init((char *)w->buf, ECHO_MSG);
    if (uv_write(&w->req, (uv_stream_t *)d->tcp, &b, 1, on_written) < 0) {
      free(w);
      dev_close(d);
    }
    return;
  }
  d->state = D_HANDSHAKE;
  uint8_t mode = d->pairing ? NOISE_MODE_PAIRING : NOISE_MODE_SESSION;
  uint8_t msg1[NOISE_MSG1_LEN(1)];
  size_t n;
  if (noise_handshake_write_message(d->hs, &mode, 1, msg1, sizeof(msg1), &n) < 0 ||
      send_frame(d, msg1, n, false) < 0) {
    dev_close(d);
    return;
  }
  uv_read_start((uv_stream_t *)d->tcp, on_alloc, on_read);
}

/* Bind d's source address, then connect. */
static void dev_connect_to(struct dev *d, const char *host, int port) {
  struct sockaddr_in src, dst;
  char a[32];
  unsigned k = d->pairing ? d->idx + 1 : d->idx / PER_ADDR + 1;
  snprintf(a, sizeof(a), "127.%u.%u.%u", d->pairing ? 2 : 1, (k >> 8) & 255, k & 255);
  uv_ip4_addr(a, 0, &src);
  uv_ip4_addr(host, port, &dst);
  d->tcp = malloc(sizeof(*d->tcp));
  uv_tcp_init(loop, d->tcp);
  d->tcp->data = d;
  d->creq.data = d;
  d->state = D_CONNECTING;
  if (!d->echo) {
    uint8_t pro[NOISE_PROLOGUE_LEN];
    size_t pl;
    frame_reader_init(&d->fr, FRAME_MAX_HANDSHAKE);
    noise_prologue_build(NOISE_WIRE_VERSION, d->pairing ? NOISE_MODE_PAIRING : NOISE_MODE_SESSION,
                         pro, sizeof(pro), &pl);
    if (noise_handshake_new(NOISE_INITIATOR, d->priv, pro, pl, &d->hs) < 0) {
      dev_close(d);
      return;
    }
  }
  if (uv_tcp_bind(d->tcp, (struct sockaddr *)&src, 0) < 0 ||
      uv_tcp_connect(&d->creq, d->tcp, (struct sockaddr *)&dst, on_connected) < 0)
    dev_close(d);
}

static void dev_connect(struct dev *d) {
  dev_connect_to(d, server_host, server_port);
}

/* ---- pairing ---- */

static unsigned pair_next, pair_done_n, users_made;

static int run_cmd_line(const char *cmd, char *out, size_t cap) {
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  char *got = out ? fgets(out, (int)cap, p) : NULL;
  int st = pclose(p);
  if (out && !got)
    return -1;
  if (out)
    out[strcspn(out, "\n")] = '\0';
  return st == 0 ? 0 : -1;
}

static void pair_finish(void) {
  identities_save();
  unsigned paired = 0;
  for (unsigned i = 0; i < n_devs; i++)
    paired += devs[i].paired;
  if (paired == n_devs)
    reply("pair ok n=%u new=%u ms=%.0f", paired, pair_done_n, now_ms() - cmd_t0);
  else
    reply("pair fail paired=%u of %u", paired, n_devs);
}

/* Up to CONNECT_WINDOW pairings at once; codes are minted three at a time
 * (one user's live limit) just before they are used. */
static void pair_more(void) {
  while (connecting_now < CONNECT_WINDOW && pair_next < n_devs) {
    struct dev *d = &devs[pair_next++];
    if (d->paired)
      continue;
    unsigned u = d->idx / DEVS_PER_USER;
    char cmd[2048], code[128];
    if (u >= users_made) {
      snprintf(cmd, sizeof(cmd), "%s user add lg%u --state '%s' >/dev/null 2>&1", SERVER_BIN, u,
               state_dir);
      (void)!system(cmd);
      users_made = u + 1;
    }
    snprintf(cmd, sizeof(cmd), "%s pair-code lg%u --state '%s' 2>/dev/null", SERVER_BIN, u,
             state_dir);
    if (run_cmd_line(cmd, code, sizeof(code)) < 0 ||
        pairing_code_derive(code, d->code_id, d->code_key) < 0) {
      fprintf(stderr, "loadgen: no pairing code for user lg%u\n", u);
      continue;
    }
    uint8_t pub[NOISE_KEY_LEN];
    noise_keypair_generate(pub, d->priv);
    sign_key_derive(d);
    d->pairing = true;
    d->pstate = 0;
    d->in_window = true;
    connecting_now++;
    pair_done_n++;
    dev_connect(d);
  }
  if (connecting_now == 0 && pair_next >= n_devs && strcmp(cur_cmd, "pair") == 0)
    pair_finish();
}

/* FILE: "server <hex key>" then "<idx> <hex priv> <hex device id> <user>". */
static void identities_save(void) {
  char tmp[1100];
  snprintf(tmp, sizeof(tmp), "%s.tmp", ids_path);
  FILE *f = fopen(tmp, "w");
  if (!f)
    return;
  char hex[2 * NOISE_KEY_LEN + 1];
  sodium_bin2hex(hex, sizeof(hex), server_key, NOISE_KEY_LEN);
  fprintf(f, "server %s\n", hex);
  for (unsigned i = 0; i < n_devs; i++)
    if (devs[i].paired) {
      sodium_bin2hex(hex, sizeof(hex), devs[i].priv, NOISE_KEY_LEN);
      fprintf(f, "%u %s %s %s\n", i, hex, devs[i].device_hex, devs[i].user);
    }
  fclose(f);
  rename(tmp, ids_path);
}

static void identities_load(void) {
  FILE *f = fopen(ids_path, "r");
  if (!f)
    return;
  char line[512], a[128], b[CORDON_ID_HEX_SIZE], c[32];
  unsigned idx;
  while (fgets(line, sizeof(line), f)) {
    if (sscanf(line, "server %127s", a) == 1) {
      have_server_key =
          sodium_hex2bin(server_key, NOISE_KEY_LEN, a, strlen(a), NULL, NULL, NULL) == 0;
    } else if (sscanf(line, "%u %127s %32s %31s", &idx, a, b, c) == 4 && idx < n_devs) {
      struct dev *d = &devs[idx];
      if (sodium_hex2bin(d->priv, NOISE_KEY_LEN, a, strlen(a), NULL, NULL, NULL) == 0 &&
          cordon_id_from_hex(b, d->device_id) == 0) {
        memcpy(d->device_hex, b, sizeof(d->device_hex));
        memcpy(d->user, c, sizeof(d->user));
        sign_key_derive(d);
        d->paired = true;
      }
    }
  }
  fclose(f);
  unsigned max_user = 0;
  for (unsigned i = 0; i < n_devs; i++)
    if (devs[i].paired && i / DEVS_PER_USER + 1 > max_user)
      max_user = i / DEVS_PER_USER + 1;
  users_made = max_user;
}

/* ---- connecting everyone ---- */

static unsigned connect_target(void) {
  unsigned n = 0;
  for (unsigned i = 0; i < n_devs; i++)
    n += devs[i].paired;
  return n;
}

static void connect_more(void) {
  if (strcmp(cur_cmd, "pair") == 0) {
    pair_more();
    return;
  }
  bool echo = strcmp(cur_cmd, "echo-connect") == 0;
  if (strcmp(cur_cmd, "connect") != 0 && !echo)
    return;
  while (connecting_now < CONNECT_WINDOW && connect_next < n_devs) {
    struct dev *d = &devs[connect_next++];
    if (d->state != D_IDLE || d->fails >= 5 || (!echo && !d->paired))
      continue;
    d->in_window = true;
    connecting_now++;
    dev_connect(d);
  }
  if (connecting_now == 0 && connect_next >= n_devs) {
    double ms = now_ms() - cmd_t0;
    unsigned n = n_ready;
    reply("%s ok n=%u ms=%.0f %s=%.0f", echo ? "echo-connect" : "connect", n, ms,
          echo ? "conns_per_s" : "sessions_per_s", n / (ms / 1000.0));
  }
}

/* ---- dispatching over the admin socket ---- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void run_finish(void) {
  uv_timer_stop(&pace_timer);
  double ms = now_ms() - run_t0;
  qsort(lat, run_ok, sizeof(double), cmp_double);
  double p50 = run_ok ? lat[run_ok / 2] : 0, p99 = run_ok ? lat[(run_ok * 99) / 100] : 0;
  if (jobs_log)
    fflush(jobs_log); /* before the answer: the caller reads the log next */
  reply("%s ok n=%u ok=%u failed=%u pending=%u ms=%.0f jobs_per_s=%.1f p50_ms=%.2f "
        "p99_ms=%.2f",
        run_echo ? "echo" : "dispatch", run_count, run_ok, run_failed,
        run_count - run_ok - run_failed, ms, run_ok / (ms / 1000.0), p50, p99);
  free(lat);
  lat = NULL;
}

static void req_closed(uv_handle_t *h) {
  struct req *q = h->data;
  free(q->line);
  free(q);
}

static void req_fail(struct req *q) {
  run_progress = now_ms();
  run_failed++;
  run_done++;
  run_inflight--;
  uv_close((uv_handle_t *)&q->pipe, req_closed);
  run_next();
}

static void req_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct req *q = h->data;
  (void)suggested;
  *buf = uv_buf_init(q->buf + q->len, (unsigned)(sizeof(q->buf) - 1 - q->len));
}

static void req_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  struct req *q = st->data;
  (void)buf;
  if (nread > 0)
    q->len += (size_t)nread;
  q->buf[q->len] = '\0';
  if (nread >= 0 && !strchr(q->buf, '\n') && q->len < sizeof(q->buf) - 1)
    return;
  json_t *j = json_loads(q->buf, JSON_DISABLE_EOF_CHECK, NULL);
  const char *id = json_string_value(json_object_get(j, "job_id"));
  uint8_t raw[CORDON_ID_LEN];
  if (!json_is_true(json_object_get(j, "ok")) || !id || cordon_id_from_hex(id, raw) < 0) {
    static unsigned said;
    if (said++ < 3) /* e.g. no_eligible_device while the devices reconnect */
      fprintf(stderr, "loadgen: dispatch refused: %s%s", q->buf, strchr(q->buf, '\n') ? "" : "\n");
    json_decref(j);
    req_fail(q);
    return;
  }
  if (jobs_log)
    fprintf(jobs_log, "%s\n", id);
  json_decref(j);
  struct jslot *s = slot_get(raw, true);
  uv_close((uv_handle_t *)&q->pipe, req_closed);
  if (!s) {
    run_failed++;
    run_done++;
    run_inflight--;
    run_next();
    return;
  }
  s->t0 = q->t0;
  s->replied = true;
  slot_check(s);
}

static void req_written(uv_write_t *w, int status) {
  struct req *q = w->data;
  if (status < 0)
    req_fail(q);
}

static void req_connected(uv_connect_t *c, int status) {
  struct req *q = c->data;
  if (status < 0) {
    req_fail(q);
    return;
  }
  q->wr.data = q;
  uv_buf_t b = uv_buf_init(q->line, (unsigned)strlen(q->line));
  if (uv_write(&q->wr, (uv_stream_t *)&q->pipe, &b, 1, req_written) < 0 ||
      uv_read_start((uv_stream_t *)&q->pipe, req_alloc, req_read) < 0)
    req_fail(q);
}

static void dispatch_one(unsigned dev_idx) {
  struct dev *d = &devs[dev_idx];
  struct req *q = calloc(1, sizeof(*q));
  json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:[], s:b}", "op", "dispatch", "user", d->user,
                        "device", d->device_hex, "package", pkg_path, "args", "no_queue", 1);
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  size_t n = strlen(s);
  q->line = malloc(n + 2);
  memcpy(q->line, s, n);
  q->line[n] = '\n';
  q->line[n + 1] = '\0';
  free(s);
  q->t0 = now_ms();
  q->dev = dev_idx;
  uv_pipe_init(loop, &q->pipe, 0);
  q->pipe.data = q;
  q->conn.data = q;
  char path[1100];
  snprintf(path, sizeof(path), "%s/admin.sock", state_dir);
  uv_pipe_connect(&q->conn, &q->pipe, path, req_connected);
}

/* The baseline's message: the same rate and size class as a job's result. */
static void echo_one(unsigned dev_idx) {
  struct dev *d = &devs[dev_idx];
  uint8_t id[CORDON_ID_LEN] = {0};
  echo_seq++;
  memcpy(id, &echo_seq, sizeof(echo_seq));
  id[15] = 0xec;
  struct jslot *s = slot_get(id, true);
  if (!s || d->state != D_READY) {
    run_failed++;
    run_done++;
    run_inflight--;
    return;
  }
  s->t0 = now_ms();
  struct wreq *w = malloc(sizeof(*w) + ECHO_MSG);
  memset(w->buf, 'x', ECHO_MSG);
  memcpy(w->buf, id, CORDON_ID_LEN);
  uv_buf_t b = uv_buf_init((char *)w->buf, ECHO_MSG);
  if (uv_write(&w->req, (uv_stream_t *)d->tcp, &b, 1, on_written) < 0)
    free(w);
}

static void start_one(void) {
  unsigned dev = run_started % run_ndev;
  run_started++;
  run_inflight++;
  if (run_echo)
    echo_one(dev);
  else
    dispatch_one(dev);
}

/* Start what the concurrency (and, when paced, the clock) allow. */
static void run_next(void) {
  if (!lat)
    return;
  if (run_done >= run_count) {
    run_finish();
    return;
  }
  if (run_rate > 0) {
    double due = (now_ms() - run_t0) * run_rate / 1000.0;
    while (run_started < run_count && run_started < due && run_inflight < run_conc)
      start_one();
  } else {
    while (run_started < run_count && run_inflight < run_conc)
      start_one();
  }
}

static void on_pace(uv_timer_t *t) {
  (void)t;
  if (lat && now_ms() - run_progress > RUN_STALL_MS) {
    run_finish();
    return;
  }
  run_next();
}

static void run_start(bool echo, unsigned count, unsigned ndev, unsigned conc, double rate) {
  if (ndev == 0 || ndev > n_devs || count == 0 || conc == 0) {
    reply("%s fail bad arguments", echo ? "echo" : "dispatch");
    return;
  }
  size_t need = 1;
  while (need < (size_t)count * 4)
    need <<= 1;
  free(slots);
  slots = calloc(need, sizeof(*slots));
  slot_cap = need;
  lat = calloc(count, sizeof(double));
  run_echo = echo;
  run_count = count;
  run_ndev = ndev;
  run_conc = conc;
  run_rate = rate;
  run_started = run_inflight = run_done = run_ok = run_failed = 0;
  run_t0 = run_progress = now_ms();
  uv_timer_start(&pace_timer, on_pace, 1, rate > 0 ? 1 : 100);
  run_next();
}

/* ---- pings and the waitall deadline ---- */

static void on_sweep(uv_timer_t *t) {
  (void)t;
  uint64_t now = uv_now(loop);
  for (unsigned i = 0; i < n_devs; i++) {
    struct dev *d = &devs[i];
    if (d->state == D_READY && !d->echo && now - d->last_rx >= PING_QUIET_MS) {
      struct msg p = {.type = MSG_PING};
      p.ping.nonce = ++d->ping_nonce;
      d->last_rx = now; /* one ping per quiet period */
      send_msg(d, &p);
    }
  }
}

static void on_waitall_timeout(uv_timer_t *t) {
  (void)t;
  waitall_target = 0;
  reply("waitall fail n=%u of %u ms=%.0f reconnects=%u", n_ready, connect_target(),
        now_ms() - mark_t0, reconnects);
}

/* ---- commands ---- */

static void command(char *line) {
  char w[32] = "";
  unsigned a = 0, b = 0, c = 0;
  double rate = 0;
  char arg[256] = "";
  sscanf(line, "%31s", w);
  cmd_t0 = now_ms();
  snprintf(cur_cmd, sizeof(cur_cmd), "%s", w);
  if (strcmp(w, "pair") == 0) {
    pair_next = pair_done_n = 0;
    connecting_now = 0;
    pair_more();
  } else if (strcmp(w, "connect") == 0) {
    connect_next = connecting_now = 0;
    connect_more();
  } else if (strcmp(w, "dispatch") == 0 || strcmp(w, "echo") == 0) {
    if (sscanf(line, "%*s %u %u %u %lf", &a, &b, &c, &rate) != 4)
      reply("%s fail usage: %s COUNT NDEV CONC RATE", w, w);
    else
      run_start(strcmp(w, "echo") == 0, a, b, c, rate);
  } else if (strcmp(w, "mark") == 0) {
    mark_t0 = now_ms();
    mark_on = true;
    mark_dropped = false;
    mark_back_ms = -1;
    mark_target = connect_target();
    reconnects = 0;
    reply("mark ok");
  } else if (strcmp(w, "waitall") == 0) {
    unsigned secs = 60;
    sscanf(line, "%*s %u", &secs);
    unsigned target = connect_target();
    if (n_ready >= target) {
      reply("waitall ok n=%u ms=%.0f reconnects=%u", n_ready,
            mark_back_ms >= 0 ? mark_back_ms : now_ms() - mark_t0, reconnects);
    } else {
      waitall_target = target;
      uv_timer_start(&waitall_timer, on_waitall_timeout, secs * 1000ull, 0);
    }
  } else if (strcmp(w, "stats") == 0) {
    size_t unacked = 0;
    for (unsigned i = 0; i < n_devs; i++)
      unacked += devs[i].n_unacked;
    reply("stats ok ready=%u jobs=%lu dup_jobs=%lu results=%lu acks=%lu unacked=%zu", n_ready,
          total_jobs, dup_jobs, total_results, total_acks, unacked);
  } else if (strcmp(w, "echo-connect") == 0 && sscanf(line, "%*s %255s", arg) == 1) {
    char *colon = strrchr(arg, ':');
    if (!colon) {
      reply("echo-connect fail HOST:PORT");
      return;
    }
    *colon = '\0';
    if (snprintf(server_host, sizeof(server_host), "%s", arg) >= (int)sizeof(server_host)) {
      reply("echo-connect fail the host is too long");
      return;
    }
    server_port = atoi(colon + 1);
    n_ready = 0;
    for (unsigned i = 0; i < n_devs; i++) {
      devs[i].echo = true;
      devs[i].paired = false;
    }
    connect_next = connecting_now = 0;
    connect_more();
  } else if (strcmp(w, "quit") == 0) {
    reply("quit ok");
    exit(0);
  } else {
    reply("%s fail unknown command", w);
  }
}

static char inbuf[4096];
static size_t inlen;

static void stdin_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf) {
  (void)h;
  (void)s;
  *buf = uv_buf_init(inbuf + inlen, (unsigned)(sizeof(inbuf) - 1 - inlen));
}

static bool stdin_eof;

/* One command at a time: the next line once the last one is answered. */
static void on_cmd_timer(uv_timer_t *t) {
  (void)t;
  char *nl;
  while ((!cur_cmd[0] || inbuf[0] == '!') && (nl = strchr(inbuf, '\n'))) {
    *nl = '\0';
    char line[4096];
    snprintf(line, sizeof(line), "%s", inbuf);
    size_t rest = inlen - (size_t)(nl + 1 - inbuf);
    memmove(inbuf, nl + 1, rest + 1);
    inlen = rest;
    if (line[0] == '!') { /* "!mark": at once, even while a command runs */
      char busy[32];
      snprintf(busy, sizeof(busy), "%s", cur_cmd);
      command(line + 1);
      snprintf(cur_cmd, sizeof(cur_cmd), "%s", busy);
    } else if (line[0]) {
      command(line);
    }
  }
  if (!cur_cmd[0] && stdin_eof)
    exit(0);
}

static void stdin_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  if (nread < 0) {
    uv_read_stop(st);
    stdin_eof = true;
  } else {
    inlen += (size_t)nread;
    inbuf[inlen] = '\0';
  }
  on_cmd_timer(NULL);
}

static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rlim_t want = 1u << 20;
    struct rlimit up = {want, want};
    if (setrlimit(RLIMIT_NOFILE, &up) < 0) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
}

int main(int argc, char **argv) {
  const char *server = NULL;
  for (int i = 1; i < argc; i++) {
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--server") == 0 && next)
      server = argv[++i];
    else if (strcmp(argv[i], "--state") == 0 && next)
      snprintf(state_dir, sizeof(state_dir), "%s", argv[++i]);
    else if (strcmp(argv[i], "--devices") == 0 && next)
      n_devs = (unsigned)atoi(argv[++i]);
    else if (strcmp(argv[i], "--ids") == 0 && next)
      snprintf(ids_path, sizeof(ids_path), "%s", argv[++i]);
    else if (strcmp(argv[i], "--package") == 0 && next)
      snprintf(pkg_path, sizeof(pkg_path), "%s", argv[++i]);
    else if (strcmp(argv[i], "--jobs-log") == 0 && next)
      snprintf(jobs_log_path, sizeof(jobs_log_path), "%s", argv[++i]);
    else if (strcmp(argv[i], "--backoff") == 0)
      use_backoff = true;
    else {
      fprintf(stderr, "usage: bench_loadgen --server HOST:PORT --state DIR --devices N --ids FILE "
                      "[--package FILE.cpkg] [--jobs-log FILE] [--backoff]\n");
      return 2;
    }
  }
  if (!server || !state_dir[0] || !ids_path[0] || n_devs == 0) {
    fprintf(stderr, "bench_loadgen: --server, --state, --devices and --ids are required\n");
    return 2;
  }
  char *colon = strrchr(server, ':');
  if (!colon || (size_t)(colon - server) >= sizeof(server_host))
    return 2;
  memcpy(server_host, server, (size_t)(colon - server));
  server_host[colon - server] = '\0';
  server_port = atoi(colon + 1);
  if (sodium_init() < 0)
    return 1;
  raise_nofile();
  if (jobs_log_path[0] && !(jobs_log = fopen(jobs_log_path, "a")))
    return 1;
  devs = calloc(n_devs, sizeof(*devs));
  for (unsigned i = 0; i < n_devs; i++)
    devs[i].idx = i;
  identities_load();
  loop = uv_default_loop();
  uv_timer_init(loop, &waitall_timer);
  uv_timer_init(loop, &pace_timer);
  uv_timer_init(loop, &sweep_timer);
  uv_timer_init(loop, &cmd_timer);
  uv_timer_start(&sweep_timer, on_sweep, 1000, 1000);
  uv_pipe_t in;
  uv_pipe_init(loop, &in, 0);
  uv_pipe_open(&in, 0);
  uv_read_start((uv_stream_t *)&in, stdin_alloc, stdin_read);
  printf("loadgen ready devices=%u paired=%u\n", n_devs, connect_target());
  fflush(stdout);
  return uv_run(loop, UV_RUN_DEFAULT);
}
