/* Jobs in the daemon (server/jobs.h): choosing a device, the queue,
 * tickets, streaming the package in chunks, results recorded exactly once,
 * cancel, expiry, and the admin requests that wait for a job. */
#include "server/jobs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/file.h"
#include "core/id.h"
#include "core/log.h"
#include "core/manifest.h"
#include "core/ratelimit.h"
#include "proto/cpkg.h"
#include "proto/receipt.h"
#include "proto/result_msg.h"
#include "proto/ticket.h"
#include "server/admin_ops.h"
#include "server/cluster.h"
#include "server/events.h"
#include "server/metrics.h"
#include "server/pkgcache.h"

#define JOB_CHUNK (60u << 10)
#define JOB_SEND_WINDOW (1u << 20) /* queued bytes before the sender waits */
#define JOB_TICKET_TTL_S 600
#define JOB_TICK_MS 1000
#define JOB_RESULT_RETRY_MS 1000 /* an ack's retry_ms: the agent backs off from it */

/* An admin connection waiting for a job to be over. */
struct waiter {
  struct admin_conn *conn;
  char id[CORDON_ID_HEX_SIZE];
  uint64_t token;          /* a follow's output subscription; 0 for a wait */
  uint64_t output_next[2]; /* a follow's: stdout's and stderr's bytes sent so far */
  struct waiter *next;
};

/* A job whose package is being streamed to its device. */
struct sending {
  struct jobs *owner;
  char id[CORDON_ID_HEX_SIZE];
  uint8_t raw_id[CORDON_ID_LEN];
  struct session *session;
  int fd;
  uint64_t size, sent;
  char queued_path[PATH_MAX]; /* "" or its copy in STATE/queue, removed with it */
  uv_timer_t pump;
  struct sending *next;
};

/* What the log and the metrics need of a sent job until it is over. */
struct flight {
  char id[CORDON_ID_HEX_SIZE];
  char user[SERVER_DB_NAME_MAX + 1];
  char package[160]; /* name@version */
  int64_t sent_ms;   /* core_mono_ms when it was sent */

  /* live output: only from the device it was sent to, at most its
   * output_kb per stream, each byte once (live_next: stdout, stderr) */
  char device_id[CORDON_ID_HEX_SIZE];
  uint64_t live_cap, live_next[2];
  /* the ticket it was sent with (stored with it in the same commit): its
   * result's receipt is checked against it without reading it back */
  uint8_t ticket[TICKET_BODY_LEN];
  struct flight *next;
};

/* A result the server could not record and asked its agent to send again
 * (ack with retry_ms): while that session lives, the agent holds the
 * result, so the job does not expire. */
struct held {
  char id[CORDON_ID_HEX_SIZE];
  struct session *session;
  struct held *next;
};

struct jobs {
  uv_loop_t *loop;
  struct server_db *db;
  bool skew_said;           /* clock_tick: the skew to the database's clock was logged, */
  int64_t skew_said_s;      /* as this */
  int64_t host_wall_off_ms; /* clock_tick: this host's wall clock minus its monotonic one */
  struct sessions *sessions;
  char queue_dir[3072]; /* short enough for QUEUE/<name> in PATH_MAX */
  const uint8_t *ticket_sk, *publisher_pk;
  const struct server_keyring *keyring;
  unsigned grace_s, queue_ttl_s;
  size_t result_max; /* bytes of a result's JSON the store takes with its output */
  struct events *events;
  uint64_t remote_token; /* the others' job states (the cluster's relay); 0: none */
  uv_timer_t tick;
  bool recovered, started, closing, draining;
  struct sending *sends;
  struct flight *flights;
  struct waiter *waiters;
  struct held *held;
  struct pkgcache *pkgs; /* verified package indexes (server/pkgcache.h); NULL: none */
  /* group commit: what waits for the group's commit, oldest first;
   * after_open is the first whose group is still open */
  uv_check_t commit_check; /* once per loop turn: commit, then run what waited */
  uv_idle_t commit_idle;   /* while something waits: the loop does not block in poll */
  bool group_on;
  struct after *after, **after_tail, *after_open;
  struct verifying *verifying; /* results whose signature is being checked */
  size_t n_verifying;
  uint64_t hold_since; /* uv_now + 1 when the commit began to wait for the pool, 0 for not */
  struct pool_batch *pool_open; /* the pool's next batch, not yet submitted */
  /* the last look at the queue found jobs in it, or one was queued since
   * (a shared database's queue is always looked at: others fill it) */
  bool queue_maybe;
};

/* ---- results held by a connected agent ---- */

static struct held **held_find(struct jobs *js, const char *id) {
  struct held **pp = &js->held;
  while (*pp && strcmp((*pp)->id, id) != 0)
    pp = &(*pp)->next;
  return pp;
}

static void held_drop(struct jobs *js, const char *id) {
  struct held **pp = held_find(js, id);
  if (*pp) {
    struct held *h = *pp;
    *pp = h->next;
    free(h);
  }
}

static bool held_by_agent(struct jobs *js, const char *id) {
  return *held_find(js, id) != NULL;
}

/* The result of job id, from session s, could not be stored (err): keep
 * the job from expiring while s lives and ask the agent to send it again
 * (docs/protocol/messages.md, "ack"). */
static void held_add(struct jobs *js, struct session *s, const uint8_t raw[CORDON_ID_LEN],
                     const char *id) {
  struct held **pp = held_find(js, id);
  if (!*pp && (*pp = calloc(1, sizeof(**pp))))
    snprintf((*pp)->id, sizeof((*pp)->id), "%s", id);
  if (*pp)
    (*pp)->session = s;
  struct msg ack = {.type = MSG_ACK};
  memcpy(ack.ack.job_id, raw, CORDON_ID_LEN);
  ack.ack.has_retry_ms = true;
  ack.ack.retry_ms = JOB_RESULT_RETRY_MS;
  session_send(s, &ack);
}
/* At the end of the file: the events of a job's state, and the end of a
 * wait or a follow. */
static void publish_state(struct jobs *js, const char *id);
static void waiter_answer(struct jobs *js, struct waiter *w, json_t *reply);

/* ---- the package ---- */

struct pkg {
  int fd;
  struct manifest *m;
  uint8_t hash[CPKG_HASH_SIZE];
  uint64_t size;
};

static void pkg_release(struct pkg *p) {
  if (p->fd >= 0)
    close(p->fd);
  p->fd = -1;
  manifest_free(p->m);
  p->m = NULL;
}

/* Read the package's signed index with the server's own publisher key. */
static int read_package(struct jobs *js, int fd, const uint8_t trust_digest[PKGCACHE_TRUST_SIZE],
                        struct manifest **out_m, uint8_t hash[CPKG_HASH_SIZE], uint64_t *out_size,
                        struct cordon_diag *diag) {
  struct cpkg_trust *trust;
  struct cpkg_stream *st = NULL;
  int r = cpkg_trust_new(&trust);
  if (r < 0)
    return r;
  if (js->keyring)
    for (size_t i = 0; r == 0 && i < js->keyring->n_publisher; i++)
      r = cpkg_trust_add(trust, js->keyring->publisher_pk[i]);
  else
    r = cpkg_trust_add(trust, js->publisher_pk);
  if (r == 0)
    r = cpkg_stream_new(trust, &st);
  uint8_t buf[65536];
  bool have_index = false;
  off_t off = 0;
  /* the cache key of the very bytes verified (pkgcache_key_of_fd's) */
  crypto_generichash_state key_h;
  crypto_generichash_init(&key_h, NULL, 0, PKGCACHE_KEY_SIZE);
  while (r == 0 && !have_index) {
    ssize_t n = pread(fd, buf, sizeof(buf), off);
    if (n <= 0) {
      r = cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "the package ends before its index");
      break;
    }
    off += n;
    size_t pos = 0;
    while (r == 0 && !have_index) {
      size_t used = 0;
      struct cpkg_event ev;
      r = cpkg_stream_next(st, buf + pos, (size_t)n - pos, &used, &ev, diag);
      if (r < 0)
        break; /* used is not set on an error */
      crypto_generichash_update(&key_h, buf + pos, used);
      pos += used;
      if (r == 0 && ev.type == CPKG_EVENT_INDEX)
        have_index = true;
      else if (r == 0 && ev.type == CPKG_EVENT_NEED_MORE)
        break;
    }
  }
  if (r == 0) {
    const struct cpkg_index *ix = cpkg_stream_index(st);
    r = manifest_parse((const char *)ix->manifest_json, ix->manifest_len, out_m, diag);
    if (r == 0) {
      cpkg_stream_index_hash(st, hash);
      *out_size = cpkg_stream_package_size(st);
      /* not cached (out of memory): verified again next time */
      uint8_t key[PKGCACHE_KEY_SIZE];
      crypto_generichash_final(&key_h, key, sizeof(key));
      if (js->pkgs)
        (void)pkgcache_put(js->pkgs, key, trust_digest, hash, *out_size,
                           (const char *)ix->manifest_json, ix->manifest_len);
    }
  }
  cpkg_stream_free(st);
  cpkg_trust_free(trust);
  return r;
}

static int pkg_open(struct jobs *js, const char *path, struct pkg *out, struct cordon_diag *diag) {
  out->fd = -1;
  out->m = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return cordon_diag_set(diag, CORDON_E_USAGE, "%s: %s", path, strerror(errno));
  /* the same signed bytes verified before with the same trusted keys:
   * the same answer, without checking the signature again */
  uint8_t key[PKGCACHE_KEY_SIZE], trust[PKGCACHE_TRUST_SIZE];
  bool keyed = js->pkgs && pkgcache_key_of_fd(fd, key) == 0;
  if (js->keyring)
    pkgcache_trust_digest((const uint8_t(*)[32])js->keyring->publisher_pk, js->keyring->n_publisher,
                          trust);
  else
    pkgcache_trust_digest((const uint8_t(*)[32])js->publisher_pk, 1, trust);
  struct pkgcache_hit hit;
  int r;
  if (keyed && pkgcache_get(js->pkgs, key, trust, &hit) == 0) {
    r = manifest_parse(hit.manifest_json, hit.manifest_len, &out->m, diag);
    memcpy(out->hash, hit.hash, CPKG_HASH_SIZE);
    out->size = hit.size;
    free(hit.manifest_json);
  } else {
    r = read_package(js, fd, trust, &out->m, out->hash, &out->size, diag);
  }
  if (r < 0) {
    close(fd);
    return r;
  }
  out->fd = fd;
  return 0;
}

static void queue_path(const struct jobs *js, const char *id, char out[PATH_MAX]) {
  snprintf(out, PATH_MAX, "%s/%s.cpkg", js->queue_dir, id);
}

static void fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

/* The package's first `size` bytes (what its device will get) into a new
 * STATE/queue/tmp-<random>, fsynced. */
static int queue_copy(struct jobs *js, int fd, uint64_t size, char out_tmp[PATH_MAX],
                      struct cordon_diag *diag) {
  uint8_t rnd[CORDON_ID_LEN];
  char hex[CORDON_ID_HEX_SIZE];
  cordon_id_random(rnd);
  cordon_id_to_hex(rnd, hex);
  snprintf(out_tmp, PATH_MAX, "%s/tmp-%s", js->queue_dir, hex);
  int out = open(out_tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (out < 0)
    return cordon_diag_set(diag, -errno, "cannot queue the package: %s: %s", out_tmp,
                           strerror(errno));
  uint8_t buf[65536];
  uint64_t off = 0;
  int r = 0;
  while (r == 0 && off < size) {
    size_t want = size - off < sizeof(buf) ? (size_t)(size - off) : sizeof(buf);
    ssize_t n = pread(fd, buf, want, (off_t)off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      r = n < 0 ? cordon_diag_set(diag, -errno, "cannot read the package: %s", strerror(errno))
                : cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                                  "the package is shorter than its index says");
    else if ((r = core_write_all(out, buf, (size_t)n)) < 0)
      cordon_diag_set(diag, r, "cannot queue the package: %s", strerror(-r));
    else
      off += (uint64_t)n;
  }
  if (r == 0 && fsync(out) < 0)
    r = cordon_diag_set(diag, -errno, "cannot queue the package: %s", strerror(errno));
  close(out);
  if (r < 0)
    unlink(out_tmp);
  return r;
}

/* ---- waiting for a job ---- */

/* Over: final, except a job cancelled on its device, whose result (with
 * what the job printed) is still to come until its deadline. */
static bool job_is_over(const struct server_db_job *job, int64_t now) {
  if (!server_db_job_state_is_final(job->state))
    return false;
  return !(job->state == SERVER_DB_JOB_CANCELLED && !job->result_json && job->deadline != 0 &&
           now < job->deadline);
}

static json_t *job_reply(const struct server_db_job *job) {
  json_t *o = server_db_job_to_json(job);
  return o ? json_pack("{s:b, s:o}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_JOB, o)
           : admin_reply_error(-ENOMEM, "out of memory");
}

/* Answer those waiting for job id (NULL: for any job) whose job is over. */
static void answer_waiters(struct jobs *js, const char *id) {
  int64_t now = server_db_now(js->db);
  for (struct waiter **pp = &js->waiters; *pp;) {
    struct waiter *w = *pp;
    if (id && strcmp(w->id, id) != 0) {
      pp = &w->next;
      continue;
    }
    struct server_db_job job;
    int r = server_db_job_get(js->db, w->id, &job, NULL);
    if (r == 0 && !job_is_over(&job, now)) {
      server_db_job_release(&job);
      pp = &w->next;
      continue;
    }
    if (r < 0 && r != -ENOENT) { /* the database is busy: next tick */
      pp = &w->next;
      continue;
    }
    *pp = w->next;
    waiter_answer(js, w,
                  r == 0 ? job_reply(&job) : admin_reply_error(CORDON_E_USAGE, "no such job"));
    if (r == 0)
      server_db_job_release(&job);
    free(w);
  }
}

static int add_waiter(struct jobs *js, struct admin_conn *c, const char *id) {
  struct waiter *w = calloc(1, sizeof(*w));
  if (!w)
    return -ENOMEM;
  w->conn = c;
  snprintf(w->id, sizeof(w->id), "%s", id);
  w->next = js->waiters;
  js->waiters = w;
  return 0;
}

/* ---- jobs in flight (for the log and the metrics) ---- */

static struct flight *flight_find(struct jobs *js, const char *id) {
  for (struct flight *f = js->flights; f; f = f->next)
    if (strcmp(f->id, id) == 0)
      return f;
  return NULL;
}

static void flight_add(struct jobs *js, const char *id, const char *user, const char *device_id,
                       const char *package, uint64_t live_cap,
                       const uint8_t ticket[TICKET_BODY_LEN]) {
  struct flight *f = calloc(1, sizeof(*f));
  if (!f)
    return; /* only the log loses its package name, and followers its live output */
  snprintf(f->id, sizeof(f->id), "%s", id);
  snprintf(f->user, sizeof(f->user), "%s", user);
  snprintf(f->device_id, sizeof(f->device_id), "%s", device_id);
  f->live_cap = live_cap;
  snprintf(f->package, sizeof(f->package), "%s", package);
  memcpy(f->ticket, ticket, TICKET_BODY_LEN);
  f->sent_ms = core_mono_ms();
  f->next = js->flights;
  js->flights = f;
}

static void flight_drop(struct jobs *js, const char *id) {
  for (struct flight **pp = &js->flights; *pp; pp = &(*pp)->next)
    if (strcmp((*pp)->id, id) == 0) {
      struct flight *f = *pp;
      *pp = f->next;
      free(f);
      return;
    }
}

/* ---- streaming a package ---- */

static void sending_closed(uv_handle_t *h) {
  free(h->data);
}

static void sending_free(struct sending *x) {
  for (struct sending **pp = &x->owner->sends; *pp; pp = &(*pp)->next)
    if (*pp == x) {
      *pp = x->next;
      break;
    }
  if (x->fd >= 0)
    close(x->fd);
  if (x->queued_path[0])
    unlink(x->queued_path);
  uv_close((uv_handle_t *)&x->pump, sending_closed);
}

static struct sending *sending_find(struct jobs *js, const char *id) {
  for (struct sending *x = js->sends; x; x = x->next)
    if (strcmp(x->id, id) == 0)
      return x;
  return NULL;
}

/* Chunks of x while its connection's queue has room: true while more are
 * to come (the pump timer goes on), false when x is done (and freed) or
 * cannot go on (its session gone or told to go). */
static bool pump_some(struct sending *x) {
  struct session *s = x->session;
  if (!s || s->state != SESSION_ACTIVE)
    return false;
  uint8_t buf[JOB_CHUNK];
  while (x->sent < x->size && net_conn_queued(s->conn) < JOB_SEND_WINDOW) {
    size_t want = x->size - x->sent < sizeof(buf) ? (size_t)(x->size - x->sent) : sizeof(buf);
    ssize_t n = pread(x->fd, buf, want, (off_t)x->sent);
    if (n <= 0) {
      struct flight *f = flight_find(x->owner, x->id);
      core_log_kv(CORE_LOG_ERROR, "cannot read the package", "job", x->id, "device", s->device_id,
                  "package", f ? f->package : "-", "error", n < 0 ? strerror(errno) : "EOF", NULL);
      session_goaway(s, MSG_GOAWAY_PROTOCOL, "package unreadable on the server");
      return false;
    }
    struct msg m = {.type = MSG_CHUNK};
    memcpy(m.chunk.job_id, x->raw_id, CORDON_ID_LEN);
    m.chunk.offset = x->sent;
    m.chunk.data.data = buf;
    m.chunk.data.len = (size_t)n;
    if (session_send(s, &m) < 0)
      return false;
    x->sent += (uint64_t)n;
  }
  if (x->sent >= x->size) {
    sending_free(x);
    return false;
  }
  return true;
}

static void pump(uv_timer_t *t) {
  if (!pump_some(t->data))
    uv_timer_stop(t); /* after sending_free's close too: a no-op then */
}

/* ---- group commit: what waits for the database ---- */

/* What a change of the current commit group makes happen once the group
 * is durable (docs/ARCHITECTURE.md, "Durable writes"): nothing of it
 * reaches a device, an admin client or the events before. When the group
 * fails, each takes its failure path, and nothing in memory was changed
 * for it. */
enum after_kind {
  AFTER_SENT,       /* queued -> sent: the ticket and the package go */
  AFTER_DISPATCHED, /* the dispatch's reply (behind its AFTER_SENT) */
  AFTER_RESULT,     /* a result recorded (now or before): the ack */
  AFTER_CANCELLED,  /* the cancel's reply; the device is told */
  AFTER_RUNNING,    /* sent -> running: the event and the latency */
};

/* ---- libuv's thread pool, in batches ----
 *
 * What a loop turn gives the pool (results' receipt signatures to check,
 * tickets to sign) goes in requests of up to JOBS_POOL_BATCH items,
 * submitted at the turn's check (or when one is full): a pool thread is
 * woken once per batch rather than once per item. Each wake is a futex
 * call and, on another core, an interrupt: with 48 jobs in flight they
 * took a tenth of the loop's time. */
#define JOBS_POOL_BATCH 8
struct verifying;
struct signing;
struct pool_batch {
  uv_work_t work;
  size_t n;
  struct {
    struct verifying *v; /* or NULL */
    struct signing *g;   /* or NULL */
  } item[JOBS_POOL_BATCH];
};

static void verify_work(struct verifying *v);
static void verify_done(struct verifying *v, int status);
static void sign_work(struct signing *g);
static void signing_unref(struct signing *g);
static void idle_noop(uv_idle_t *h);

static void pool_work(uv_work_t *w) {
  struct pool_batch *b = w->data;
  for (size_t i = 0; i < b->n; i++) {
    if (b->item[i].v)
      verify_work(b->item[i].v);
    else
      sign_work(b->item[i].g);
  }
}

static void pool_done(uv_work_t *w, int status) {
  struct pool_batch *b = w->data;
  for (size_t i = 0; i < b->n; i++) {
    if (b->item[i].v)
      verify_done(b->item[i].v, status);
    else
      signing_unref(b->item[i].g);
  }
  free(b);
}

/* The open batch to the pool. libuv refuses work only without a work
 * callback; were it to, the batch is done here, on the loop (its items'
 * owners see them done as from the pool: each verifying is linked in
 * js->verifying before it is added). */
static void pool_submit(struct jobs *js) {
  struct pool_batch *b = js->pool_open;
  if (!b)
    return;
  js->pool_open = NULL;
  b->work.data = b;
  if (uv_queue_work(js->loop, &b->work, pool_work, pool_done) < 0) {
    pool_work(&b->work);
    pool_done(&b->work, 0);
  }
}

/* v or g into the open batch, submitted by this turn's check at the latest
 * (the loop does not block in poll meanwhile); -ENOMEM. */
static int pool_add(struct jobs *js, struct verifying *v, struct signing *g) {
  struct pool_batch *b = js->pool_open;
  if (!b) {
    b = calloc(1, sizeof(*b));
    if (!b)
      return -ENOMEM;
    js->pool_open = b;
    if (js->group_on)
      uv_idle_start(&js->commit_idle, idle_noop);
  }
  b->item[b->n].v = v;
  b->item[b->n].g = g;
  if (++b->n == JOBS_POOL_BATCH)
    pool_submit(js);
  return 0;
}

/* A ticket's signature, made on the pool while the job's group commits
 * (sent_run, on the loop, takes it when it is done, else signs itself).
 * The key is copied on the loop, the only writer of the daemon's (a SIGHUP
 * reloads it in place), and wiped once used. Two owners, both on the loop:
 * the pool's after-callback and the after; the last frees it. */
struct signing {
  int refs;
  _Atomic int done; /* the signature is in sig (set on the pool's thread) */
  uint8_t body[TICKET_BODY_LEN];
  uint8_t sk[64];
  uint8_t pk[32]; /* the key's public half: a key reloaded meanwhile is not it */
  uint8_t sig[64];
};

static void signing_unref(struct signing *g) {
  if (g && --g->refs == 0) {
    sodium_memzero(g->sk, sizeof(g->sk));
    free(g);
  }
}

static void sign_work(struct signing *g) {
  ticket_sign(g->body, g->sk, g->sig);
  sodium_memzero(g->sk, sizeof(g->sk));
  atomic_store_explicit(&g->done, 1, memory_order_release);
}

/* The signature of body on the pool, or NULL (then sent_run signs). */
static struct signing *sign_soon(struct jobs *js, const uint8_t body[TICKET_BODY_LEN]) {
  if (!js->started || js->closing)
    return NULL;
  struct signing *g = calloc(1, sizeof(*g));
  if (!g)
    return NULL;
  g->refs = 2;
  memcpy(g->body, body, TICKET_BODY_LEN);
  memcpy(g->sk, js->ticket_sk, sizeof(g->sk));
  memcpy(g->pk, js->ticket_sk + 32, sizeof(g->pk)); /* libsodium's sk: seed || pk */
  if (pool_add(js, NULL, g) < 0) {
    sodium_memzero(g->sk, sizeof(g->sk));
    free(g);
    return NULL;
  }
  return g;
}

struct after_send {
  struct sending *x;       /* ready, not linked: the fd, size, ids, queued copy */
  struct signing *signing; /* its ticket's signature under way, or NULL */
  uint8_t ticket[TICKET_BODY_LEN];
  uint8_t pkg_hash[CPKG_HASH_SIZE];
  char **argv; /* one heap block */
  size_t n_args;
  char user[SERVER_DB_NAME_MAX + 1];
  char package[160]; /* name@version */
  uint64_t live_cap;
  int64_t deadline;
};

struct after {
  enum after_kind kind;
  bool ended; /* its group is over; err: how (0 committed) */
  int err;
  char id[CORDON_ID_HEX_SIZE];
  struct session *s;       /* the device's session; NULL once it closed */
  struct admin_conn *conn; /* AFTER_DISPATCHED, AFTER_CANCELLED */
  json_t *reply;           /* AFTER_DISPATCHED */
  bool wait;
  struct after_send send;   /* AFTER_SENT */
  struct job_result result; /* AFTER_RESULT: what the log needs, no output */
  int rc;                   /* AFTER_RESULT: the record's, 0 or -EALREADY */
  bool unstorable;          /* AFTER_RESULT: recorded without its output */
  char why[sizeof(((struct cordon_diag *)0)->msg)]; /* AFTER_RESULT: and why (the sizes) */
  enum server_db_job_state state;     /* AFTER_RESULT: after it; AFTER_CANCELLED: before */
  char device_id[CORDON_ID_HEX_SIZE]; /* AFTER_CANCELLED */
  struct after *next;
};

static void idle_noop(uv_idle_t *h) {
  (void)h;
}

/* server/db.h's ended: the group is over; what waited for it learns how. */
static void group_ended(void *arg, int err) {
  struct jobs *js = arg;
  for (struct after *a = js->after_open; a; a = a->next) {
    a->ended = true;
    a->err = err;
  }
  js->after_open = NULL;
  metrics_db_group(err);
}

static int op_begin(struct jobs *js, struct cordon_diag *diag) {
  int r = server_db_group_op_begin(js->db, diag);
  if (r == 0 && js->group_on)
    uv_idle_start(&js->commit_idle, idle_noop);
  return r;
}

static struct after *after_new(enum after_kind kind, const char *id) {
  struct after *a = calloc(1, sizeof(*a));
  if (a) {
    a->kind = kind;
    snprintf(a->id, sizeof(a->id), "%s", id);
  }
  return a;
}

static void after_run_ended(struct jobs *js);

/* a (and the chain at a->next) waits for the open group, an op of which
 * just succeeded. Without the loop's handles (after jobs_close) the group
 * is committed now. */
static void after_push(struct jobs *js, struct after *a) {
  *js->after_tail = a;
  if (!js->after_open)
    js->after_open = a;
  while (a->next)
    a = a->next;
  js->after_tail = &a->next;
  if (js->group_on) {
    uv_idle_start(&js->commit_idle, idle_noop);
    return;
  }
  server_db_group_commit(js->db, NULL);
  after_run_ended(js);
}

static void after_free(struct after *a) {
  signing_unref(a->send.signing);
  if (a->send.x) {
    if (a->send.x->fd >= 0)
      close(a->send.x->fd);
    free(a->send.x);
  }
  free(a->send.argv);
  json_decref(a->reply);
  free(a);
}

/* argv as one heap block (the pointers, then the strings). */
static char **argv_copy(char **argv, size_t n) {
  size_t bytes = (n + 1) * sizeof(char *);
  for (size_t i = 0; i < n; i++)
    bytes += strlen(argv[i]) + 1;
  char **out = malloc(bytes);
  if (!out)
    return NULL;
  char *p = (char *)(out + n + 1);
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(argv[i]) + 1;
    memcpy(p, argv[i], len);
    out[i] = p;
    p += len;
  }
  out[n] = NULL;
  return out;
}

/* ---- sending a job ---- */

/* Inside an op: the job goes to s with its device, deadline and ticket in
 * the group — queued in the database, it becomes sent (add NULL); or,
 * dispatched now, it is added as sent (add: the new job, whose ticket and
 * id this fills in). *out_a: the AFTER_SENT that sends the ticket and the
 * chunks once that is durable (the caller pushes it after its op). The
 * package's fd is taken over on success (send_unprepare gives it back). */
static int send_prepare(struct jobs *js, const char *job_id, const char *user, struct session *s,
                        struct pkg *p, char **argv, size_t n_args, int64_t deadline,
                        const char *queued_path, struct server_db_job_new *add,
                        struct after **out_a, struct cordon_diag *diag) {
  struct after *a = after_new(AFTER_SENT, job_id);
  struct sending *x = a ? calloc(1, sizeof(*x)) : NULL;
  char **args = x ? argv_copy(argv, n_args) : NULL;
  if (!args) {
    free(x);
    free(a);
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  }
  struct after_send *as = &a->send;
  as->argv = args;
  as->n_args = n_args;
  /* the ticket is stored with the job: its receipt is checked against it */
  struct ticket t = {0};
  cordon_id_from_hex(job_id, t.job_id);
  cordon_id_from_hex(s->device_id, t.device_id);
  ticket_user_tag(user, t.user_tag);
  memcpy(t.session_id, s->session_id, CORDON_ID_LEN);
  memcpy(t.index_hash, p->hash, CPKG_HASH_SIZE);
  ticket_args_hash(argv, n_args, t.args_hash);
  t.issued_ms = core_wall_ms();
  t.expires_ms = t.issued_ms + JOB_TICKET_TTL_S * 1000ull;
  ticket_encode(&t, as->ticket);
  as->signing = sign_soon(js, as->ticket);
  /* the ticket and the job sent: one change of the group */
  int r;
  if (add) {
    add->id = job_id;
    add->ticket = as->ticket;
    add->ticket_len = sizeof(as->ticket);
    char got[CORDON_ID_HEX_SIZE];
    r = server_db_job_add(js->db, add, got, diag);
  } else {
    r = server_db_job_send_with_ticket(js->db, job_id, s->device_id, deadline, as->ticket,
                                       sizeof(as->ticket), diag);
  }
  if (r < 0) {
    free(x);
    after_free(a);
    return r;
  }
  x->owner = js;
  x->fd = p->fd;
  p->fd = -1;
  x->size = p->size;
  snprintf(x->id, sizeof(x->id), "%s", job_id);
  snprintf(x->queued_path, sizeof(x->queued_path), "%s", queued_path ? queued_path : "");
  cordon_id_from_hex(job_id, x->raw_id);
  as->x = x;
  memcpy(as->pkg_hash, p->hash, CPKG_HASH_SIZE);
  snprintf(as->user, sizeof(as->user), "%s", user);
  snprintf(as->package, sizeof(as->package), "%s@%s", p->m->name, p->m->version);
  as->live_cap = (uint64_t)p->m->output_kb * 1024;
  as->deadline = deadline;
  a->s = s;
  *out_a = a;
  return 0;
}

/* The op that held send_prepare's change failed: the package is the
 * caller's again, nothing waits. */
static void send_unprepare(struct after *a, struct pkg *p) {
  p->fd = a->send.x->fd;
  a->send.x->fd = -1;
  after_free(a);
}

/* The job's queued -> sent is durable: the ticket, then the chunks paced by
 * the connection's queue. Its session gone meanwhile, nothing is sent: the
 * deadline decides the job (device_lost), as for a session lost while the
 * package streams. */
static void sent_run(struct jobs *js, struct after *a) {
  struct after_send *as = &a->send;
  struct sending *x = as->x;
  if (a->err) { /* not sent after all: still queued (from the queue) or never there */
    core_log_kv(CORE_LOG_WARN, "job not sent: its commit failed", "job", a->id, "error",
                cordon_err_message(a->err), NULL);
    return;
  }
  publish_state(js, a->id);
  metrics_job_dispatched();
  struct session *s = a->s;
  if (!s || s->state != SESSION_ACTIVE || js->closing) {
    if (x->queued_path[0])
      unlink(x->queued_path); /* no longer queued */
    core_log_kv(CORE_LOG_WARN,
                "job committed as sent, but its session is gone: its deadline decides it", "job",
                a->id, "user", as->user, "package", as->package, NULL);
    return;
  }
  as->x = NULL;
  x->session = s;
  uv_timer_init(js->loop, &x->pump);
  x->pump.data = x;
  x->next = js->sends;
  js->sends = x;

  struct msg jm = {.type = MSG_JOB};
  memcpy(jm.job.job_id, x->raw_id, CORDON_ID_LEN);
  jm.job.ticket.data = as->ticket;
  jm.job.ticket.len = sizeof(as->ticket);
  struct signing *g = as->signing;
  if (g && atomic_load_explicit(&g->done, memory_order_acquire) &&
      memcmp(g->pk, js->ticket_sk + 32, sizeof(g->pk)) == 0)
    memcpy(jm.job.ticket_sig, g->sig, sizeof(jm.job.ticket_sig));
  else /* not yet (or never) made on the pool, or the key changed since */
    ticket_sign(as->ticket, js->ticket_sk, jm.job.ticket_sig);
  memcpy(jm.job.pkg_hash, as->pkg_hash, CPKG_HASH_SIZE);
  jm.job.pkg_size = x->size;
  jm.job.args = as->argv;
  jm.job.n_args = as->n_args;
  flight_add(js, a->id, as->user, s->device_id, as->package, as->live_cap, as->ticket);
  char sz[24], dl[24], na[16];
  snprintf(sz, sizeof(sz), "%llu", (unsigned long long)x->size);
  snprintf(dl, sizeof(dl), "%lld", (long long)as->deadline);
  snprintf(na, sizeof(na), "%zu", as->n_args);
  const char *from = x->queued_path[0] ? "queue" : "dispatch";
  /* the job and its first chunks in one write (x may be done and freed
   * after pump_some; its connection is closing when it failed) */
  struct net_conn *conn = s->conn;
  net_conn_cork(conn);
  session_send(s, &jm);
  bool more = pump_some(x);
  net_conn_uncork(conn);
  if (more)
    uv_timer_start(&x->pump, pump, 2, 2);
  core_log_kv(CORE_LOG_INFO, "job sent", "job", a->id, "user", as->user, "device", s->device_id,
              "package", as->package, "size", sz, "args", na, "deadline", dl, "from", from, NULL);
}

/* A queued job goes to s, in an op of its own; sent once durable. */
static int send_job(struct jobs *js, const char *job_id, const char *user, struct session *s,
                    struct pkg *p, char **argv, size_t n_args, int64_t deadline,
                    const char *queued_path, struct cordon_diag *diag) {
  int r = op_begin(js, diag);
  if (r < 0)
    return r;
  struct after *a = NULL;
  r = send_prepare(js, job_id, user, s, p, argv, n_args, deadline, queued_path, NULL, &a, diag);
  r = server_db_group_op_end(js->db, r);
  if (r < 0) {
    if (a)
      send_unprepare(a, p);
    if (!diag->msg[0])
      cordon_diag_set(diag, r, "%s", cordon_err_message(r));
    return r;
  }
  after_push(js, a);
  return 0;
}

/* ---- choosing a device ---- */

struct cand {
  const struct server_db_device *dev;
  struct session *s;
  size_t running;
  unsigned max;  /* max_jobs, at least 1 */
  bool fits;     /* active, platform, level, labels: it could take the job */
  char why[256]; /* "" when it can take it now */
};

struct choice {
  struct server_db_device_list list;
  struct cand *c;
  size_t n;
  long best;     /* index into c of the device to take, -1 for none now */
  bool any_fits; /* one would fit once online or less busy */
  bool named;    /* the device asked for is one of the user's */
};

static void choice_release(struct choice *ch) {
  free(ch->c);
  ch->c = NULL;
  server_db_device_list_release(&ch->list);
}

/* a takes the job before b: less loaded (running / max_jobs), then seen more
 * recently. */
static bool cand_better(const struct cand *a, const struct cand *b) {
  uint64_t la = (uint64_t)a->running * b->max, lb = (uint64_t)b->running * a->max;
  if (la != lb)
    return la < lb;
  return a->dev->last_seen > b->dev->last_seen;
}

/* The device named want as a list of the user's devices of that id: one,
 * or none when there is no such device or another user's. */
static int want_device(struct jobs *js, int64_t user_id, const char *want,
                       struct server_db_device_list *out) {
  memset(out, 0, sizeof(*out));
  struct server_db_device dev;
  int r = server_db_device_get(js->db, want, &dev, NULL);
  if (r == -ENOENT)
    return 0;
  if (r < 0)
    return r;
  if (user_id != 0 && dev.user_id != user_id) { /* 0: any user's, as the list */
    server_db_device_release(&dev);
    return 0;
  }
  if (!(out->items = malloc(sizeof(*out->items)))) {
    server_db_device_release(&dev);
    return -ENOMEM;
  }
  out->items[0] = dev;
  out->count = 1;
  return 0;
}

/* Evaluate the user's devices (or only want) for a job of manifest m (NULL:
 * skip the platform and level checks) whose device must have the labels of
 * where. */
static int choose(struct jobs *js, int64_t user_id, const char *want, const struct manifest *m,
                  const struct server_db_labels *where, struct choice *out) {
  memset(out, 0, sizeof(*out));
  out->best = -1;
  int r = want ? want_device(js, user_id, want, &out->list)
               : server_db_device_list(js->db, user_id, &out->list, NULL);
  if (r < 0)
    return r;
  out->c = calloc(out->list.count ? out->list.count : 1, sizeof(*out->c));
  if (!out->c) {
    server_db_device_list_release(&out->list);
    return -ENOMEM;
  }
  for (size_t i = 0; i < out->list.count; i++) {
    const struct server_db_device *dev = &out->list.items[i];
    if (want && strcmp(want, dev->id) != 0)
      continue;
    out->named = true;
    struct cand *c = &out->c[out->n++];
    c->dev = dev;
    c->s = sessions_find(js->sessions, dev->id);
    server_db_job_count_in_flight(js->db, dev->id, &c->running, NULL);
    c->max = dev->max_jobs > 0 ? (unsigned)dev->max_jobs : 1;
    const struct server_db_label *miss = NULL;
    if (dev->state != SERVER_DB_DEVICE_ACTIVE) {
      snprintf(c->why, sizeof(c->why), "%s",
               dev->state == SERVER_DB_DEVICE_PENDING ? "pending approval" : "revoked");
    } else if (m && !(m->platforms & manifest_platform_from_name(dev->platform))) {
      snprintf(c->why, sizeof(c->why), "platform not in the package's platforms");
    } else if (m && (!dev->has_level || dev->best_level < m->min_sandbox)) {
      snprintf(c->why, sizeof(c->why), "best sandbox level below min_sandbox");
    } else if (!server_db_labels_match(&dev->labels, where, &miss)) {
      const char *have = server_db_labels_get(&dev->labels, miss->key);
      snprintf(c->why, sizeof(c->why), "label %s=%s wanted, it has %s%s%s", miss->key, miss->value,
               have ? miss->key : "none", have ? "=" : "", have ? have : "");
    } else {
      c->fits = true;
      out->any_fits = true;
      if (!c->s)
        snprintf(c->why, sizeof(c->why), "offline");
      else if (c->running >= c->max)
        snprintf(c->why, sizeof(c->why), "at its concurrency limit (%zu of %u running)", c->running,
                 c->max);
    }
    if (!c->why[0] && (out->best < 0 || cand_better(c, &out->c[out->best])))
      out->best = (long)(c - out->c);
  }
  return 0;
}

/* cluster (server/cluster.h): the candidates that fit, have room and are
 * connected to another server say so; whether there is one. */
static bool mark_elsewhere(struct jobs *js, struct choice *ch) {
  bool any = false;
  for (size_t i = 0; server_db_is_shared(js->db) && i < ch->n; i++) {
    struct cand *c = &ch->c[i];
    if (c->fits && !c->s && c->running < c->max && cluster_device_leased(js->db, c->dev->id)) {
      snprintf(c->why, sizeof(c->why), "connected to another server: it sends the job");
      any = true;
    }
  }
  return any;
}

static const char *choice_decision(const struct choice *ch, bool no_queue) {
  return ch->best >= 0 ? "send" : ch->any_fits && !no_queue ? "queue" : "refuse";
}

/* Why no device can take it: {"device", "name", "reason"} each. */
static json_t *choice_reasons(const struct choice *ch, const char *want) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < ch->n; i++)
    json_array_append_new(a, json_pack("{s:s, s:s, s:s}", "device", ch->c[i].dev->id, "name",
                                       ch->c[i].dev->name, "reason", ch->c[i].why));
  if (a && want && !ch->named) /* another user's device is never named back */
    json_array_append_new(
        a, json_pack("{s:s, s:s}", "device", want, "reason", "no such device for this user"));
  return a;
}

static json_t *explain_reply(const struct choice *ch, const char *want, bool no_queue) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < ch->n; i++) {
    const struct cand *c = &ch->c[i];
    json_array_append_new(
        a, json_pack("{s:s, s:s, s:b, s:I, s:i, s:I, s:o, s:s?, s:b}", "device", c->dev->id, "name",
                     c->dev->name, "online", c->s != NULL, "running", (json_int_t)c->running,
                     "max_jobs", c->dev->max_jobs, "last_seen", (json_int_t)c->dev->last_seen,
                     "labels", server_db_labels_to_json(&c->dev->labels), "reason",
                     c->why[0] ? c->why : NULL, "chosen", (long)i == ch->best));
  }
  if (a && want && !ch->named)
    json_array_append_new(a, json_pack("{s:s, s:s, s:b}", "device", want, "reason",
                                       "no such device for this user", "chosen", 0));
  const char *decision = choice_decision(ch, no_queue);
  const char *dev = ch->best >= 0                                     ? ch->c[ch->best].dev->id
                    : strcmp(decision, "queue") == 0 && want && ch->n ? ch->c[0].dev->id
                                                                      : NULL;
  return json_pack("{s:b, s:s, s:s?, s:o}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_DECISION, decision,
                   ADMIN_REPLY_DEVICE, dev, ADMIN_REPLY_CANDIDATES, a ? a : json_array());
}

/* ---- dispatch ---- */

/* The args of a request or of a stored job: strings (borrowed from args). */
static int args_to_argv(const json_t *args, char ***out_argv, size_t *out_n,
                        struct cordon_diag *diag) {
  size_t n = args ? json_array_size(args) : 0;
  if (n > MSG_ARGS_MAX)
    return cordon_diag_set(diag, CORDON_E_USAGE, "too many arguments");
  char **argv = calloc(n + 1, sizeof(char *));
  if (!argv)
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    const char *s = json_string_value(json_array_get(args, i));
    if (!s || strlen(s) > MSG_ARG_MAX) {
      free(argv);
      return cordon_diag_set(diag, CORDON_E_USAGE,
                             "arguments must be strings of at most 4096 bytes");
    }
    argv[i] = (char *)s;
  }
  *out_argv = argv;
  *out_n = n;
  return 0;
}

static int where_parse(const json_t *where, struct server_db_labels *out,
                       struct cordon_diag *diag) {
  memset(out, 0, sizeof(*out));
  size_t i;
  json_t *v;
  json_array_foreach(where, i, v) {
    struct server_db_label l;
    const char *text = json_string_value(v);
    if (!text)
      return cordon_diag_set(diag, CORDON_E_USAGE, "where: labels are KEY=VALUE strings");
    int r = server_db_label_parse(text, &l, diag);
    if (r < 0)
      return cordon_diag_set(diag, CORDON_E_USAGE, "%s", diag->msg);
    if (server_db_labels_get(out, l.key))
      return cordon_diag_set(diag, CORDON_E_USAGE, "where: label %s given twice", l.key);
    if ((r = server_db_labels_put(out, &l, diag)) < 0)
      return cordon_diag_set(diag, CORDON_E_USAGE, "%s", diag->msg);
  }
  return 0;
}

/* Reply now, or register the waiter of a dispatch --wait. */
static void dispatch_answer(struct jobs *js, struct admin_conn *c, bool wait, const char *job_id,
                            json_t *reply) {
  if (wait && add_waiter(js, c, job_id) == 0) {
    json_decref(reply);
    answer_waiters(js, job_id);
    return;
  }
  admin_conn_reply(c, reply);
}

struct dispatch_req {
  const char *key;
  const char *user;
  int64_t user_id;
  char **argv;
  size_t n_args;
  const json_t *args;
  struct server_db_labels where;
  bool wait;
  long long ttl;
};

/* The job added and sent in one op of the group; the ticket and the reply
 * (with its id) wait for the group's commit. */
static void dispatch_now(struct jobs *js, struct admin_conn *c, const struct dispatch_req *d,
                         struct pkg *p, struct cand *to) {
  char *args_json = d->args ? json_dumps(d->args, JSON_COMPACT) : strdup("[]");
  int64_t deadline = server_db_now(js->db) + p->m->timeout_s + js->grace_s;
  struct server_db_job_new nj = {
      .user_id = d->user_id,
      .device_id = to->dev->id,
      .package_hash = p->hash,
      .package_name = p->m->name,
      .package_version = p->m->version,
      .args_json = args_json,
      .deadline = deadline,
      .where = &d->where,
      .key = d->key,
  };
  /* drawn here: the ticket names the job, which is added already sent */
  char job_id[CORDON_ID_HEX_SIZE];
  uint8_t raw[CORDON_ID_LEN];
  cordon_id_ordered(raw, core_wall_ms());
  cordon_id_to_hex(raw, job_id);
  struct cordon_diag diag = {{0}};
  struct after *sent = NULL, *answer = NULL;
  int r = op_begin(js, &diag);
  if (r == 0) {
    r = send_prepare(js, job_id, d->user, to->s, p, d->argv, d->n_args, deadline, NULL, &nj, &sent,
                     &diag);
    if (r == 0 && !(answer = after_new(AFTER_DISPATCHED, job_id)))
      r = cordon_diag_set(&diag, -ENOMEM, "out of memory");
    r = server_db_group_op_end(js->db, r); /* on failure neither the job nor its send is there */
  }
  free(args_json);
  if (r < 0) {
    if (sent)
      send_unprepare(sent, p);
    free(answer);
    admin_conn_reply(c, admin_reply_error(r, diag.msg[0] ? diag.msg : cordon_err_message(r)));
    return;
  }
  answer->conn = c;
  answer->wait = d->wait;
  answer->reply = json_pack("{s:b, s:s, s:s, s:s}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_JOB_ID, job_id,
                            ADMIN_REPLY_DEVICE, to->dev->id, ADMIN_REPLY_STATE, "sent");
  sent->next = answer; /* the ticket, then the reply */
  after_push(js, sent);
}

/* The dispatch's job is durable: its id goes to the client (or its wait
 * begins); else the error, and there is no job. */
static void dispatched_run(struct jobs *js, struct after *a) {
  if (a->err) {
    char msg[160];
    snprintf(msg, sizeof(msg), "the job could not be committed: %s", cordon_err_message(a->err));
    admin_conn_reply(a->conn, admin_reply_error(a->err, msg));
    return;
  }
  json_t *reply = a->reply;
  a->reply = NULL;
  dispatch_answer(js, a->conn, a->wait, a->id, reply);
}

/* No device now, but one would fit: the job waits in the database, its
 * package in STATE/queue. */
static void dispatch_queue(struct jobs *js, struct admin_conn *c, const struct dispatch_req *d,
                           struct pkg *p, const char *device) {
  struct cordon_diag diag = {{0}};
  char tmp[PATH_MAX], path[PATH_MAX];
  int r = queue_copy(js, p->fd, p->size, tmp, &diag);
  if (r < 0) {
    core_log_kv(CORE_LOG_ERROR, "cannot queue a job", "user", d->user, "error", diag.msg, NULL);
    admin_conn_reply(c, admin_reply_error(r, diag.msg));
    return;
  }
  char *args_json = d->args ? json_dumps(d->args, JSON_COMPACT) : strdup("[]");
  int64_t expires = server_db_now(js->db) + d->ttl;
  struct server_db_job_new nj = {
      .user_id = d->user_id,
      .device_id = device,
      .package_hash = p->hash,
      .package_name = p->m->name,
      .package_version = p->m->version,
      .args_json = args_json,
      .queue_expires = expires,
      .where = &d->where,
      .key = d->key,
  };
  char job_id[CORDON_ID_HEX_SIZE];
  r = server_db_job_add(js->db, &nj, job_id, &diag);
  free(args_json);
  if (r < 0) {
    unlink(tmp);
    admin_conn_reply(c, admin_reply_error(r, diag.msg));
    return;
  }
  queue_path(js, job_id, path);
  if (rename(tmp, path) < 0) {
    int e = errno;
    unlink(tmp);
    server_db_job_transition(js->db, job_id, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_FAILED,
                             "internal_error", NULL);
    publish_state(js, job_id);
    snprintf(diag.msg, sizeof(diag.msg), "cannot queue the package: %s", strerror(e));
    admin_conn_reply(c, admin_reply_error(-e, diag.msg));
    return;
  }
  fsync_dir(js->queue_dir);
  js->queue_maybe = true;
  cluster_job_queued(js->db, job_id, path); /* cluster: any instance may send it */
  publish_state(js, job_id);
  char ttl[24], pkg[160];
  snprintf(ttl, sizeof(ttl), "%lld", (long long)d->ttl);
  snprintf(pkg, sizeof(pkg), "%s@%s", p->m->name, p->m->version);
  core_log_kv(CORE_LOG_INFO, "job queued", "job", job_id, "user", d->user, "device",
              device ? device : "-", "package", pkg, "queue_ttl_s", ttl, NULL);
  dispatch_answer(js, c, d->wait, job_id,
                  json_pack("{s:b, s:s, s:s?, s:s, s:I}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_JOB_ID,
                            job_id, ADMIN_REPLY_DEVICE, device, ADMIN_REPLY_STATE, "queued",
                            ADMIN_REPLY_QUEUE_EXPIRES, (json_int_t)expires));
}

/* A dispatch with a key the user gave before: answer with that job (and
 * wait for it with wait) and return true; false when there is none (or no
 * key). hash: the package's, checked against the job's when not NULL. */
static bool dispatch_known(struct jobs *js, struct admin_conn *c, const json_t *req,
                           int64_t user_id, const uint8_t *hash) {
  const char *key = admin_request_string(req, ADMIN_ARG_KEY);
  struct server_db_job job;
  int r = key ? server_db_job_get_by_key(js->db, user_id, key, &job, NULL) : -ENOENT;
  if (r == 0 && server_db_group_pending(js->db)) {
    /* it may be of the open group: answered only once durable */
    server_db_job_release(&job);
    server_db_group_commit(js->db, NULL);
    r = server_db_job_get_by_key(js->db, user_id, key, &job, NULL);
  }
  if (r == -ENOENT)
    return false;
  if (r < 0) {
    admin_conn_reply(c, admin_reply_error(r, "cannot look the key up"));
    return true;
  }
  if (hash && memcmp(hash, job.package_hash, SERVER_DB_HASH_SIZE) != 0) {
    char msg[300];
    snprintf(msg, sizeof(msg), "key %s was given to job %s, of another package", key, job.id);
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, msg));
    server_db_job_release(&job);
    return true;
  }
  core_log_kv(CORE_LOG_INFO, "dispatch: the key names a job already", "job", job.id, "user",
              job.user, "state", server_db_job_state_name(job.state), NULL);
  json_t *reply =
      json_pack("{s:b, s:s, s:s?, s:s, s:b}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_JOB_ID, job.id,
                ADMIN_REPLY_DEVICE, job.device_id[0] ? job.device_id : NULL, ADMIN_REPLY_STATE,
                server_db_job_state_name(job.state), ADMIN_REPLY_EXISTING, 1);
  dispatch_answer(js, c, admin_request_flag(req, ADMIN_ARG_WAIT), job.id, reply);
  server_db_job_release(&job);
  return true;
}

bool jobs_op_dispatch_known(struct jobs *js, struct admin_conn *c, const json_t *req) {
  const char *key = admin_request_string(req, ADMIN_ARG_KEY);
  struct server_db_user u;
  if (!key ||
      server_db_user_get_by_name(js->db, admin_request_string(req, ADMIN_ARG_USER), &u, NULL) < 0)
    return false;
  return dispatch_known(js, c, req, u.id, NULL);
}

void jobs_op_dispatch(struct jobs *js, struct admin_conn *c, const json_t *req) {
  const char *device = admin_request_string(req, ADMIN_ARG_DEVICE);
  const char *path = admin_request_string(req, ADMIN_ARG_PACKAGE);
  bool no_queue = admin_request_flag(req, ADMIN_ARG_NO_QUEUE);
  bool explain = admin_request_flag(req, ADMIN_ARG_EXPLAIN);
  struct dispatch_req d = {
      .key = admin_request_string(req, ADMIN_ARG_KEY),
      .user = admin_request_string(req, ADMIN_ARG_USER),
      .args = admin_request_get(req, ADMIN_ARG_ARGS),
      .wait = admin_request_flag(req, ADMIN_ARG_WAIT),
      .ttl = admin_request_int(req, ADMIN_ARG_QUEUE_TTL, js->queue_ttl_s),
  };
  struct cordon_diag diag = {{0}};
  struct pkg p = {.fd = -1};
  struct choice ch = {0};
  char msgbuf[600];
  if (d.key && !server_db_job_key_valid(d.key)) {
    admin_conn_reply(
        c, admin_reply_error(CORDON_E_USAGE, "key: 1 to 128 printable ASCII characters, no space"));
    return;
  }
  if (d.ttl < 1 || d.ttl > SERVER_DB_QUEUE_TTL_MAX) {
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "queue_ttl: 1 second to 30 days"));
    return;
  }
  int r = where_parse(admin_request_get(req, ADMIN_ARG_WHERE), &d.where, &diag);
  if (r == 0)
    r = args_to_argv(d.args, &d.argv, &d.n_args, &diag);
  if (r < 0) {
    admin_conn_reply(c, admin_reply_error(r, diag.msg));
    return;
  }
  struct server_db_user u;
  struct cordon_diag ud = {{0}};
  int uerr = server_db_user_get_by_name(js->db, d.user, &u, &ud);
  if (uerr < 0) { /* the database failed: its error, never "no user" */
    snprintf(msgbuf, sizeof(msgbuf), "no user '%s'", d.user);
    admin_conn_reply(c, uerr == -ENOENT ? admin_reply_error(CORDON_E_USAGE, msgbuf)
                                        : admin_reply_error(uerr, ud.msg));
    goto out;
  }
  d.user_id = u.id;
  if ((r = pkg_open(js, path, &p, &diag)) < 0) {
    admin_conn_reply(c, admin_reply_error(r, diag.msg[0] ? diag.msg : cordon_err_message(r)));
    goto out;
  }
  if (!explain && dispatch_known(js, c, req, u.id, p.hash))
    goto out; /* the same key: the same job, never a second one */
  if ((r = choose(js, u.id, device, p.m, &d.where, &ch)) < 0) {
    admin_conn_reply(c, admin_reply_error(r, "cannot read the devices"));
    goto out;
  }
  /* cluster: a device on another server takes the job through the queue,
   * --no-queue or not (it could run it now) */
  if (ch.best < 0 && mark_elsewhere(js, &ch))
    no_queue = false;
  if (explain) {
    admin_conn_reply(c, explain_reply(&ch, device, no_queue));
  } else if (ch.best >= 0) {
    dispatch_now(js, c, &d, &p, &ch.c[ch.best]);
  } else if (ch.any_fits && !no_queue) {
    dispatch_queue(js, c, &d, &p, device ? ch.c[0].dev->id : NULL);
  } else {
    core_log_kv(CORE_LOG_INFO, "dispatch refused", "user", d.user, "device", device ? device : "-",
                "package", p.m->name, "version", p.m->version, "reason", "no_eligible_device",
                NULL);
    json_t *e = admin_reply_error(CORDON_E_NO_ELIGIBLE_DEVICE,
                                  ch.any_fits ? "no device can run this job now (no queueing)"
                                              : "no device can run this job");
    json_object_set_new(e, ADMIN_REPLY_CANDIDATES, choice_reasons(&ch, device));
    admin_conn_reply(c, e);
  }
out:
  choice_release(&ch);
  pkg_release(&p);
  free(d.argv);
}

/* ---- the queue ---- */

static void fail_queued(struct jobs *js, const char *id, const char *path, int err,
                        const char *why) {
  core_log_kv(CORE_LOG_ERROR, "queued job failed: its package cannot be sent", "job", id, "error",
              why, NULL);
  if (server_db_job_transition(js->db, id, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_FAILED,
                               cordon_err_name(err), NULL) == 0) {
    unlink(path);
    metrics_job_finished(SERVER_DB_JOB_FAILED, -1);
    publish_state(js, id);
  }
  answer_waiters(js, id);
}

/* Send one queued job to the best device available now, if there is one. */
static void drain_one(struct jobs *js, const struct server_db_job *job) {
  char path[PATH_MAX];
  queue_path(js, job->id, path);
  const char *want = job->device_id[0] ? job->device_id : NULL;
  struct pkg p = {.fd = -1};
  struct choice ch = {0};
  json_t *args = NULL;
  char **argv = NULL;
  size_t n_args = 0;
  struct cordon_diag diag = {{0}};
  /* cluster: a job another instance queued has its package in the database
   * (not there yet while that instance stores it: a later scan) */
  if (server_db_is_shared(js->db) && access(path, F_OK) < 0 &&
      cluster_package_fetch(js->db, job->id, path) < 0)
    return;
  int r = pkg_open(js, path, &p, &diag);
  if (r == 0 && memcmp(p.hash, job->package_hash, CPKG_HASH_SIZE) != 0)
    r = cordon_diag_set(&diag, CORDON_E_PACKAGE_CORRUPT,
                        "the queued package is not the one dispatched");
  if (r == 0 && !(args = json_loads(job->args_json, 0, NULL)))
    r = cordon_diag_set(&diag, CORDON_E_INTERNAL, "the job's arguments are unreadable");
  if (r == 0)
    r = args_to_argv(args, &argv, &n_args, &diag);
  if (r < 0) {
    fail_queued(js, job->id, path, r, diag.msg);
    goto out;
  }
  if (choose(js, job->user_id, want, p.m, &job->where, &ch) < 0 || ch.best < 0)
    goto out; /* still waiting: eligibility is the package's as well */
  int64_t deadline = server_db_now(js->db) + p.m->timeout_s + js->grace_s;
  r = send_job(js, job->id, job->user, ch.c[ch.best].s, &p, argv, n_args, deadline, path, &diag);
  if (r < 0)
    core_log_kv(CORE_LOG_WARN, "queued job not sent", "job", job->id, "error", diag.msg, NULL);
out:
  choice_release(&ch);
  pkg_release(&p);
  free(argv);
  json_decref(args);
}

/* Queued jobs, oldest first, each to the best device available now. */
static void drain(struct jobs *js) {
  if (js->closing || js->draining)
    return;
  struct server_db_job_list list;
  if (server_db_job_list_queued(js->db, &list, NULL) < 0)
    return;
  js->queue_maybe = list.count > 0;
  int64_t now = server_db_now(js->db);
  for (size_t i = 0; i < list.count; i++) {
    const struct server_db_job *job = &list.items[i];
    if (job->queue_expires <= now)
      continue; /* the tick expires it */
    /* first without reading the package: is there anyone to take it? */
    struct choice ch;
    if (choose(js, job->user_id, job->device_id[0] ? job->device_id : NULL, NULL, &job->where,
               &ch) < 0)
      continue;
    bool someone = ch.best >= 0;
    choice_release(&ch);
    if (someone)
      drain_one(js, job);
  }
  server_db_job_list_release(&list);
}

void jobs_on_device_online(struct jobs *js, struct session *s) {
  (void)s;
  drain(js);
}

void jobs_scan_queue(struct jobs *js) { /* server/cluster.h: another server queued a job */
  drain(js);
}

/* ---- cancel, wait ---- */

void jobs_op_cancel(struct jobs *js, struct admin_conn *c, const struct server_db_job *job) {
  const char *id = job->id;
  enum server_db_job_state st = job->state;
  /* recorded first (in an op of the group); the device is told and the
   * client answered once that is durable. The device's late result is
   * still stored, the state stays. */
  struct after *a = after_new(AFTER_CANCELLED, id);
  int r = a ? op_begin(js, NULL) : -ENOMEM;
  if (r == 0)
    r = server_db_group_op_end(
        js->db,
        server_db_job_transition(js->db, id, st, SERVER_DB_JOB_CANCELLED, "cancelled", NULL));
  if (r < 0) {
    free(a);
    admin_conn_reply(c, admin_reply_error(r, r == -ESTALE
                                                 ? "the job changed state meanwhile; try again"
                                                 : cordon_err_message(r)));
    return;
  }
  a->conn = c;
  a->state = st;
  snprintf(a->device_id, sizeof(a->device_id), "%s", job->device_id);
  after_push(js, a);
}

static void cancelled_run(struct jobs *js, struct after *a) {
  const char *id = a->id, *dev = a->device_id;
  enum server_db_job_state st = a->state;
  if (a->err) {
    char msg[160];
    snprintf(msg, sizeof(msg), "the cancel could not be committed: %s", cordon_err_message(a->err));
    admin_conn_reply(a->conn, admin_reply_error(a->err, msg));
    return;
  }
  /* a queued job was never sent: nobody to tell */
  struct session *s =
      dev[0] && st != SERVER_DB_JOB_QUEUED ? sessions_find(js->sessions, dev) : NULL;
  if (st == SERVER_DB_JOB_QUEUED) {
    char path[PATH_MAX];
    queue_path(js, id, path);
    unlink(path);
  }
  struct sending *x = sending_find(js, id);
  if (x) /* no more chunks for it */
    sending_free(x);
  if (s) {
    struct msg m = {.type = MSG_CANCEL};
    cordon_id_from_hex(id, m.cancel.job_id);
    session_send(s, &m);
  }
  metrics_job_finished(SERVER_DB_JOB_CANCELLED, -1);
  publish_state(js, id);
  core_log_kv(CORE_LOG_INFO, "job cancelled", "job", id, "device", dev[0] ? dev : "-", "was",
              server_db_job_state_name(st), "device_told", s ? "yes" : "no", NULL);
  flight_drop(js, id);
  admin_conn_reply(a->conn,
                   json_pack("{s:b, s:s}", ADMIN_REPLY_OK, 1, ADMIN_REPLY_STATE, "cancelled"));
  answer_waiters(js, id);
}

void jobs_op_wait(struct jobs *js, struct admin_conn *c, const struct server_db_job *job) {
  if (add_waiter(js, c, job->id) < 0) {
    admin_conn_reply(c, admin_reply_error(-ENOMEM, "out of memory"));
    return;
  }
  answer_waiters(js, job->id);
}

/* ---- from the agent ---- */

/* A result the server will never record (another device's, or for a job
 * this device was not sent): say why, then ack it so the agent's spool
 * lets it go (docs/protocol/messages.md, "Jobs"). Nothing is stored. */
static void refuse_result_with(struct session *s, const uint8_t job_id[CORDON_ID_LEN],
                               const char *id, enum metrics_result_refusal why_code,
                               const char *label, int code, const char *why) {
  metrics_result_refused(why_code);
  uint64_t n;
  char sup[24];
  if (core_ratelimit_hit(&s->log_refused, core_mono_ms(), &n))
    core_log_kv(CORE_LOG_WARN, "result refused", "job", id, "device", s->device_id, "code", label,
                "detail", why, "suppressed", core_ratelimit_fmt(n, sup), NULL);
  struct msg e = {.type = MSG_ERROR};
  e.error.code = (char *)cordon_err_name(code);
  e.error.message = (char *)why;
  e.error.has_job_id = true;
  memcpy(e.error.job_id, job_id, CORDON_ID_LEN);
  session_send(s, &e);
  struct msg ack = {.type = MSG_ACK};
  memcpy(ack.ack.job_id, job_id, CORDON_ID_LEN);
  session_send(s, &ack);
}

static void refuse_result(struct session *s, const uint8_t job_id[CORDON_ID_LEN], const char *id,
                          bool never_sent, const char *why) {
  refuse_result_with(s, job_id, id,
                     never_sent ? METRICS_REFUSAL_NOT_SENT : METRICS_REFUSAL_NOT_THIS_DEVICE,
                     never_sent ? "not_sent" : "not_this_device", CORDON_E_WRONG_DEVICE, why);
}

/* The receipt of a result for a job sent to this session's device: signed
 * by the device's registered key over the ticket the job was sent with
 * (docs/protocol/receipt.md). 0 with the blob to store (key || signature ||
 * receipt) in out (SERVER_DB_RECEIPT_MAX), its signature still to check
 * (receipt_sig_ok), 1 when the job is not this device's sent job (the
 * caller's usual refusal applies), or a negative code with why filled
 * when the receipt is not well made. */
static int check_receipt(struct jobs *js, struct session *s, const char *id,
                         const struct msg_result *mr, uint8_t *out, size_t *out_len,
                         struct cordon_diag *why) {
  /* a job in flight: its device and its ticket are the ones committed when
   * it was sent (neither changes after), kept in memory since */
  const struct flight *f = flight_find(js, id);
  if (f && strcmp(f->device_id, s->device_id) != 0)
    return 1;
  if (!f) {
    struct server_db_job job;
    if (server_db_job_get(js->db, id, &job, NULL) < 0)
      return 1;
    bool mine = strcmp(job.device_id, s->device_id) == 0 && job.state != SERVER_DB_JOB_QUEUED;
    server_db_job_release(&job);
    if (!mine)
      return 1;
  }
  uint8_t key[SERVER_DB_SIGN_KEY_SIZE], ticket[SERVER_DB_TICKET_MAX];
  size_t ticket_len = 0, len;
  int r = 0;
  /* registered once, a device's key never changes: read once per session */
  if (!s->sign_key_known && (r = server_db_device_sign_key(js->db, s->device_id, key, why)) == 0) {
    memcpy(s->sign_key, key, sizeof(key));
    s->sign_key_known = true;
  }
  if (r == -ENODATA)
    return cordon_diag_set(why, CORDON_E_SIGNATURE_INVALID,
                           "the device registered no receipt signing key");
  if (r < 0)
    return r;
  memcpy(key, s->sign_key, sizeof(key));
  _Static_assert(SERVER_DB_TICKET_MAX >= TICKET_BODY_LEN, "a ticket fits its column");
  if (f) {
    memcpy(ticket, f->ticket, TICKET_BODY_LEN);
    ticket_len = TICKET_BODY_LEN;
  } else {
    r = server_db_job_ticket(js->db, id, ticket, sizeof(ticket), &ticket_len, why);
    if (r < 0 && r != -ENODATA) /* a job sent before receipts has none: unbound only */
      return r;
  }
  /* only a job the agent lost in its restart may come without its ticket */
  if (r == 0 && !mr->has_ticket_hash &&
      !(mr->has_error && strcmp(mr->error.code, cordon_err_name(CORDON_E_AGENT_RESTARTED)) == 0))
    return cordon_diag_set(why, CORDON_E_SIGNATURE_INVALID,
                           "the receipt is not bound to the job's ticket");
  _Static_assert(SERVER_DB_RECEIPT_MAX >= RECEIPT_KEY_LEN + RECEIPT_SIG_LEN + RECEIPT_MAX,
                 "a receipt fits its column");
  r = receipt_of_result(mr, r == 0 ? ticket : NULL, r == 0 ? ticket_len : 0,
                        out + RECEIPT_KEY_LEN + RECEIPT_SIG_LEN,
                        SERVER_DB_RECEIPT_MAX - RECEIPT_KEY_LEN - RECEIPT_SIG_LEN, &len, why);
  if (r < 0)
    return r;
  memcpy(out, key, RECEIPT_KEY_LEN);
  memcpy(out + RECEIPT_KEY_LEN, mr->receipt_sig, RECEIPT_SIG_LEN);
  *out_len = RECEIPT_KEY_LEN + RECEIPT_SIG_LEN + len;
  return 0;
}

/* The signature of check_receipt's blob. */
static int receipt_sig_ok(const uint8_t *blob, size_t len, struct cordon_diag *why) {
  return receipt_check_sig(blob + RECEIPT_KEY_LEN + RECEIPT_SIG_LEN,
                           len - RECEIPT_KEY_LEN - RECEIPT_SIG_LEN, blob + RECEIPT_KEY_LEN, blob,
                           why);
}

/* One line per result the server could read, saying what became of it
 * (and the metrics); refused ones are logged by refuse_result. */
static void log_result(struct jobs *js, struct session *s, const char *device_id, const char *id,
                       const struct job_result *r, bool readable, int rc,
                       enum server_db_job_state after, const struct cordon_diag *diag) {
  char user[SERVER_DB_NAME_MAX + 1] = "-", code[16] = "-", sig[16] = "-", secs[24];
  const struct flight *f = flight_find(js, id);
  struct server_db_job job;
  if (f)
    snprintf(user, sizeof(user), "%s", f->user);
  else if (server_db_job_get(js->db, id, &job, NULL) == 0) {
    snprintf(user, sizeof(user), "%s", job.user);
    server_db_job_release(&job);
  }
  if (r->ran && r->exited)
    snprintf(code, sizeof(code), "%d", r->exit_code);
  else if (r->ran)
    snprintf(sig, sizeof(sig), "%d", r->signal);
  snprintf(secs, sizeof(secs), "%.3f", (double)r->wall_ms / 1000.0);
  const char *level = r->level_known ? sandbox_level_name(r->level) : NULL;
  const char *pkg = f ? f->package : "-";
  const char *err = r->error ? cordon_err_name(r->error) : "-";
  if (rc == 0 && after != SERVER_DB_JOB_EXPIRED) {
    /* a cancelled job was counted when it was cancelled */
    metrics_job_finished(after == SERVER_DB_JOB_CANCELLED ? -1 : (int)after, (int64_t)r->wall_ms);
    core_log_kv(CORE_LOG_INFO, "job finished", "job", id, "user", user, "device", device_id,
                "package", pkg, "outcome", server_db_job_state_name(after), "exit_code", code,
                "signal", sig, "error", err, "timed_out", r->timed_out ? "yes" : "no", "level",
                level ? level : "-", "mechanism", r->mechanism[0] ? r->mechanism : "-",
                "duration_s", secs, NULL);
    return;
  }
  enum metrics_result_refusal why;
  const char *what;
  enum core_log_level lvl = CORE_LOG_WARN;
  if (rc == 0) { /* kept with the job, whose state stays expired */
    why = METRICS_REFUSAL_LATE;
    what = "the job had expired: the result is kept, the state stays expired";
  } else if (rc == -EALREADY) {
    why = METRICS_REFUSAL_ALREADY_RECORDED;
    what = "a result was recorded before: acknowledged again, nothing changed";
    lvl = CORE_LOG_INFO;
  } else if (!readable) {
    why = METRICS_REFUSAL_MALFORMED;
    what = "the result could not be read: not stored";
  } else {
    why = METRICS_REFUSAL_STORE_FAILED;
    what = diag->msg[0] ? diag->msg : cordon_err_message(rc);
    lvl = CORE_LOG_ERROR;
  }
  static const char *const codes[] = {
#define REFUSAL_NAME_(id, label) [METRICS_REFUSAL_##id] = label,
      METRICS_RESULT_REFUSALS(REFUSAL_NAME_)
#undef REFUSAL_NAME_
  };
  metrics_result_refused(why);
  uint64_t n = 0;
  char sup[24];
  if (!s || core_ratelimit_hit(&s->log_refused, core_mono_ms(), &n))
    core_log_kv(lvl, why == METRICS_REFUSAL_LATE ? "late result" : "result refused", "job", id,
                "user", user, "device", device_id, "package", pkg, "code", codes[why], "detail",
                what, "exit_code", code, "signal", sig, "level", level ? level : "-", "duration_s",
                secs, "suppressed", core_ratelimit_fmt(n, sup), NULL);
}

/* A result whose receipt is well made waits here while its signature is
 * checked on libuv's thread pool (the costliest step of a result for the
 * loop: an Ed25519 verification); then result_store, on the loop. At most
 * JOBS_VERIFYING_MAX wait: beyond that (a device sending results faster
 * than the pool checks them) the signature is checked on the loop, which
 * then reads no faster than it checks, as before. */
#define JOBS_VERIFYING_MAX 256
#define JOBS_HOLD_FOR_POOL_MS 1
struct verifying {
  struct jobs *js;
  struct session *s; /* NULL once it closed: the agent sends the result again */
  struct verifying *next;
  uint8_t job_id[CORDON_ID_LEN];
  char id[CORDON_ID_HEX_SIZE];
  struct job_result r;
  json_t *j;
  uint8_t receipt[SERVER_DB_RECEIPT_MAX];
  size_t receipt_len;
  int err; /* the signature's check */
  struct cordon_diag why;
};

static void result_store(struct jobs *js, struct session *s, const uint8_t job_id[CORDON_ID_LEN],
                         const char *id, bool signed_ok, const uint8_t *receipt, size_t receipt_len,
                         struct job_result *r, json_t *j, bool readable);

static void verify_work(struct verifying *v) {
  v->err = receipt_sig_ok(v->receipt, v->receipt_len, &v->why);
}

static void verifying_free(struct verifying *v) {
  json_decref(v->j);
  job_result_release(&v->r);
  free(v);
}

static void verify_done(struct verifying *v, int status) {
  struct jobs *js = v->js;
  for (struct verifying **pp = &js->verifying; *pp; pp = &(*pp)->next)
    if (*pp == v) {
      *pp = v->next;
      js->n_verifying--;
      break;
    }
  struct session *s = v->s;
  if (status == 0 && s && !js->closing) {
    if (v->err < 0) {
      refuse_result_with(s, v->job_id, v->id, METRICS_REFUSAL_BAD_RECEIPT, "bad_receipt",
                         CORDON_E_SIGNATURE_INVALID, v->why.msg);
    } else {
      result_store(js, s, v->job_id, v->id, true, v->receipt, v->receipt_len, &v->r, v->j, true);
      v->j = NULL; /* result_store's now, and r */
      job_result_init(&v->r);
    }
  }
  verifying_free(v);
}

static void on_result(struct jobs *js, struct session *s, struct msg_result *mr) {
  char id[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(mr->job_id, id);
  uint8_t own[CORDON_ID_LEN];
  if (cordon_id_from_hex(s->device_id, own) < 0 || memcmp(own, mr->device_id, CORDON_ID_LEN) != 0) {
    refuse_result(s, mr->job_id, id, false, "the result's device_id is not this session's device");
    return;
  }
  struct verifying *v = calloc(1, sizeof(*v));
  if (!v)
    return; /* not recorded, not acked: the agent sends it again on its next session */
  job_result_init(&v->r);
  int vr = check_receipt(js, s, id, mr, v->receipt, &v->receipt_len, &v->why);
  if (vr == CORDON_E_SIGNATURE_INVALID) {
    /* never recordable as it is: refused and acked, so the spool lets it go */
    refuse_result_with(s, mr->job_id, id, METRICS_REFUSAL_BAD_RECEIPT, "bad_receipt",
                       CORDON_E_SIGNATURE_INVALID, v->why.msg);
    verifying_free(v);
    return;
  }
  if (vr < 0) {
    /* the database failed (busy, its connection lost): not recorded; as
     * for a store that failed, the agent is asked to send it again on this
     * session (without the ack it would wait for its next session, and
     * the job would stay running until then) */
    uint64_t n;
    char sup[24];
    if (core_ratelimit_hit(&s->log_refused, core_mono_ms(), &n))
      core_log_kv(CORE_LOG_ERROR, "cannot check a result's receipt: asking the agent again", "job",
                  id, "device", s->device_id, "detail", v->why.msg, "suppressed",
                  core_ratelimit_fmt(n, sup), NULL);
    held_add(js, s, mr->job_id, id);
    verifying_free(v);
    return;
  }
  int rc = result_from_msg(mr, &v->r);
  bool readable = rc == 0;
  v->j = rc == 0 ? job_result_to_json(&v->r) : NULL;
  if (vr == 0 && v->j && js->started && !js->closing && js->n_verifying < JOBS_VERIFYING_MAX) {
    /* the signature off the loop; the result waits in v (mr does not last) */
    v->js = js;
    v->s = s;
    memcpy(v->job_id, mr->job_id, CORDON_ID_LEN);
    snprintf(v->id, sizeof(v->id), "%s", id);
    /* linked first: a full batch is submitted inside pool_add */
    v->next = js->verifying;
    js->verifying = v;
    js->n_verifying++;
    if (pool_add(js, v, NULL) == 0)
      return;
    js->verifying = v->next;
    js->n_verifying--;
  }
  if (vr == 0 && receipt_sig_ok(v->receipt, v->receipt_len, &v->why) < 0) {
    refuse_result_with(s, mr->job_id, id, METRICS_REFUSAL_BAD_RECEIPT, "bad_receipt",
                       CORDON_E_SIGNATURE_INVALID, v->why.msg);
    verifying_free(v);
    return;
  }
  result_store(js, s, mr->job_id, id, vr == 0, v->receipt, v->receipt_len, &v->r, v->j, readable);
  v->j = NULL;
  job_result_init(&v->r);
  verifying_free(v);
}

/* The record of a result whose JSON the store cannot take (docs/DESIGN.md
 * section 5.2): the device's result without its output, its error that of
 * the server (the device's own kept as device_error). NULL on allocation
 * failure. */
static json_t *unstorable_record(const json_t *j, const char *why) {
  json_t *k = json_copy((json_t *)j); /* shallow: the output strings are dropped, not copied */
  if (!k)
    return NULL;
  int e = 0;
  json_t *dev_err = json_object_get(k, "error");
  if (json_is_object(dev_err))
    e |= json_object_set(k, "device_error", dev_err);
  e |= json_object_set_new(k, "stdout", json_null());
  e |= json_object_set_new(k, "stderr", json_null());
  json_object_del(k, "stdout_base64");
  json_object_del(k, "stderr_base64");
  e |= json_object_set_new(
      k, "error",
      json_pack("{s:s, s:s}", "code", cordon_err_name(CORDON_E_RESULT_UNSTORABLE), "message", why));
  if (e) {
    json_decref(k);
    return NULL;
  }
  return k;
}

/* Record a result whose receipt (when signed_ok) verified: in an op of the
 * group, acked once durable. One whose JSON is above the store's cap
 * (js->result_max) is recorded without its output, the job failed with
 * result_unstorable, and acked all the same: the agent's spool lets it go
 * (sending it again would fail again). Takes r and j. */
static void result_store(struct jobs *js, struct session *s, const uint8_t job_id[CORDON_ID_LEN],
                         const char *id, bool signed_ok, const uint8_t *receipt, size_t receipt_len,
                         struct job_result *rp, json_t *j, bool readable) {
  struct job_result r = *rp;
  if (rp->downgrade_reason == rp->reason_store)
    r.downgrade_reason = r.reason_store; /* it points into the struct */
  bool ok = r.ran && r.exited && r.exit_code == 0 && !r.error;
  enum server_db_job_state after = SERVER_DB_JOB_QUEUED;
  struct cordon_diag diag = {{0}};
  bool unstorable = false;
  char why[sizeof(diag.msg)] = "";
  int rc;
  /* recorded in an op of the group: the ack waits for its commit */
  struct after *a = j ? after_new(AFTER_RESULT, id) : NULL;
  rc = a ? op_begin(js, &diag) : -ENOMEM;
  if (rc == 0) {
    /* stored as the object's own text: nothing to parse again */
    rc = server_db_job_record_signed_result_obj(
        js->db, id, s->device_id, ok ? SERVER_DB_JOB_DONE : SERVER_DB_JOB_FAILED,
        r.error ? cordon_err_name(r.error) : NULL, j, js->result_max, signed_ok ? receipt : NULL,
        receipt_len, &after, &diag);
    if (rc == -E2BIG) { /* nothing written: the verdict goes in without the output */
      unstorable = true;
      snprintf(why, sizeof(why), "%s", diag.msg);
      json_t *k = unstorable_record(j, why);
      rc = k ? server_db_job_record_signed_result_obj(
                   js->db, id, s->device_id, SERVER_DB_JOB_FAILED,
                   cordon_err_name(CORDON_E_RESULT_UNSTORABLE), k, 0, signed_ok ? receipt : NULL,
                   receipt_len, &after, &diag)
             : cordon_diag_set(&diag, -ENOMEM, "out of memory");
      json_decref(k);
    }
    int e = server_db_group_op_end(js->db, rc == -EALREADY ? 0 : rc);
    if (e < 0 && (rc == 0 || rc == -EALREADY))
      rc = e;
  }
  json_decref(j);
  if (rc == 0 || rc == -EALREADY) {
    a->s = s;
    snprintf(a->device_id, sizeof(a->device_id), "%s", s->device_id);
    a->rc = rc;
    a->state = after;
    a->result = r; /* the scalars the log needs; the output stays with r */
    memset(&a->result.out, 0, sizeof(a->result.out));
    memset(&a->result.err, 0, sizeof(a->result.err));
    a->result.downgrade_reason = NULL;
    a->unstorable = unstorable && rc == 0;
    snprintf(a->why, sizeof(a->why), "%s", why);
    if (a->unstorable)
      a->result.error = CORDON_E_RESULT_UNSTORABLE;
    job_result_release(&r);
    after_push(js, a);
    return;
  }
  free(a);
  bool never = readable && (rc == -EINVAL || rc == -E2BIG); /* the same bytes fail again */
  if (rc != -ENOENT && rc != -ESTALE && !never)
    log_result(js, s, s->device_id, id, &r, readable, rc, after, &diag);
  job_result_release(&r);
  if (rc == -ENOENT || rc == -ESTALE) {
    /* unknown, another device's, or still queued: never sent to this one */
    refuse_result(s, job_id, id, rc == -ESTALE, "no job with this id was sent to this device");
    return;
  }
  if (never) {
    /* not even without its output (no result can be so today): a final
     * no, so that the agent's spool lets it go (the job ends at its
     * deadline) */
    refuse_result_with(s, job_id, id, METRICS_REFUSAL_UNSTORABLE, "unstorable",
                       CORDON_E_RESULT_UNSTORABLE, diag.msg);
    return;
  }
  if (readable) {
    /* the store failed for a reason that passes (disk full, busy): the
     * agent keeps it and sends it again on this session */
    held_add(js, s, job_id, id);
  }
  /* else not recorded, not acked: the agent sends it again on its next session */
}

/* The result is durable (recorded now or before): the ack lets the agent
 * forget it. The group failed: not recorded after all, the agent is asked
 * to send it again (as for a store that failed at once). */
static void result_run(struct jobs *js, struct after *a) {
  struct session *s = a->s;
  uint8_t raw[CORDON_ID_LEN];
  cordon_id_from_hex(a->id, raw);
  if (a->err) {
    struct cordon_diag diag;
    cordon_diag_set(&diag, a->err, "the result's commit failed: %s", cordon_err_message(a->err));
    log_result(js, s, a->device_id, a->id, &a->result, true, a->err, a->state, &diag);
    if (s)
      held_add(js, s, raw, a->id);
    return;
  }
  log_result(js, s, a->device_id, a->id, &a->result, true, a->rc, a->state, NULL);
  if (a->unstorable) {
    metrics_result_refused(METRICS_REFUSAL_UNSTORABLE);
    core_log_kv(CORE_LOG_WARN, "result recorded without its output", "job", a->id, "device",
                a->device_id, "code", cordon_err_name(CORDON_E_RESULT_UNSTORABLE), "detail", a->why,
                NULL);
  }
  if (a->rc == 0)
    publish_state(js, a->id); /* a cancelled or expired job's state stays, with its result now */
  held_drop(js, a->id);
  if (s && a->unstorable) { /* why, then the ack that ends the agent's resending */
    struct msg e = {.type = MSG_ERROR};
    e.error.code = (char *)cordon_err_name(CORDON_E_RESULT_UNSTORABLE);
    e.error.message = a->why;
    e.error.has_job_id = true;
    memcpy(e.error.job_id, raw, CORDON_ID_LEN);
    session_send(s, &e);
  }
  if (s) {
    struct msg ack = {.type = MSG_ACK};
    memcpy(ack.ack.job_id, raw, CORDON_ID_LEN);
    session_send(s, &ack);
  }
  flight_drop(js, a->id);
  struct sending *x = sending_find(js, a->id);
  if (x) /* refused before its package arrived: no more chunks */
    sending_free(x);
  answer_waiters(js, a->id);
  if (js->queue_maybe || server_db_is_shared(js->db))
    drain(js); /* the device has room again */
}

/* Live output (docs/protocol/messages.md, `output`): published on the bus
 * only from the device the job was sent to while it is in flight, only
 * below its output cap and past what was relayed before; the rest is
 * ignored (logged at debug, as often as core/ratelimit.h lets a session). */
static void on_output(struct jobs *js, struct session *s, const struct msg_output *o) {
  char id[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(o->job_id, id);
  struct flight *f = flight_find(js, id);
  int st = o->stream == MSG_STREAM_STDERR;
  uint64_t from = o->offset, to = o->offset + o->data.len;
  const char *why = NULL;
  if (!f)
    why = "not a job in flight";
  else if (strcmp(f->device_id, s->device_id) != 0)
    why = "another device's job";
  if (f && !why) {
    from = from > f->live_next[st] ? from : f->live_next[st];
    to = to < f->live_cap ? to : f->live_cap;
    if (from >= to)
      why = "past the cap or relayed already";
  }
  if (why) {
    uint64_t n;
    char sup[24];
    if (core_ratelimit_hit(&s->log_output, core_mono_ms(), &n))
      core_log_kv(CORE_LOG_DEBUG, "job output ignored", "job", id, "device", s->device_id, "reason",
                  why, "suppressed", core_ratelimit_fmt(n, sup), NULL);
    return;
  }
  if (f->live_next[0] == 0 && f->live_next[1] == 0)
    core_log_kv(CORE_LOG_DEBUG, "job output relayed", "job", id, "device", s->device_id, NULL);
  f->live_next[st] = to;
  struct event ev = {.kind = EVENT_JOB_OUTPUT,
                     .job_id = id,
                     .device_id = s->device_id,
                     .user = f->user,
                     .stream = st ? EVENT_STDERR : EVENT_STDOUT,
                     .offset = from,
                     .data = o->data.data + (from - o->offset),
                     .len = (size_t)(to - from)};
  events_publish(js->events, &ev);
}

bool jobs_on_message(struct jobs *js, struct session *s, struct msg *m) {
  char id[CORDON_ID_HEX_SIZE];
  switch (m->type) {
  case MSG_RUNNING: {
    cordon_id_to_hex(m->running.job_id, id);
    /* in flight: the device it was sent to is known without reading it */
    const struct flight *sent = flight_find(js, id);
    struct server_db_job job;
    if (sent || server_db_job_get(js->db, id, &job, NULL) == 0) {
      /* only its own device's word */
      bool own = strcmp(sent ? sent->device_id : job.device_id, s->device_id) == 0;
      if (!sent)
        server_db_job_release(&job);
      struct after *a = own ? after_new(AFTER_RUNNING, id) : NULL;
      int r = a ? op_begin(js, NULL) : -EPERM;
      if (r == 0)
        r = server_db_group_op_end(js->db,
                                   server_db_job_transition(js->db, id, SERVER_DB_JOB_SENT,
                                                            SERVER_DB_JOB_RUNNING, NULL, NULL));
      if (r == 0) {
        a->s = s;
        snprintf(a->device_id, sizeof(a->device_id), "%s", s->device_id);
        after_push(js, a);
        return true;
      }
      free(a);
      struct flight *f = flight_find(js, id);
      uint64_t n = 0; /* a stray `running` is the peer's to repeat: limited */
      char sup[24];
      if (core_ratelimit_hit(&s->log_refused, core_mono_ms(), &n))
        core_log_kv(CORE_LOG_DEBUG, "job running", "job", id, "user", f ? f->user : "-", "device",
                    s->device_id, "package", f ? f->package : "-", "latency_s", "-", "recorded",
                    "no", "suppressed", core_ratelimit_fmt(n, sup), NULL);
    }
    return true;
  }
  case MSG_RESULT:
    on_result(js, s, &m->result);
    return true;
  case MSG_OUTPUT:
    on_output(js, s, &m->output);
    return true;
  default:
    return false;
  }
}

void jobs_on_session_closed(struct jobs *js, struct session *s) {
  for (struct after *a = js->after; a; a = a->next)
    if (a->s == s)
      a->s = NULL;
  for (struct verifying *v = js->verifying; v; v = v->next)
    if (v->s == s)
      v->s = NULL;
  for (struct held **pp = &js->held; *pp;) {
    struct held *h = *pp;
    if (h->session == s) {
      *pp = h->next;
      free(h);
    } else {
      pp = &h->next;
    }
  }
  for (struct sending *x = js->sends, *n; x; x = n) {
    n = x->next;
    if (x->session == s) {
      uv_timer_stop(&x->pump);
      sending_free(x);
    }
  }
}

/* sent -> running is in the group: its event and latency once durable. */
static void running_run(struct jobs *js, struct after *a) {
  if (a->err)
    return; /* the job is `sent` still, decided as a running one */
  publish_state(js, a->id);
  struct flight *f = flight_find(js, a->id);
  char ms[24] = "-";
  if (f) {
    int64_t lat = core_mono_ms() - f->sent_ms;
    metrics_dispatch_latency((uint64_t)(lat > 0 ? lat : 0));
    snprintf(ms, sizeof(ms), "%.3f", (double)lat / 1000.0);
  }
  core_log_kv(CORE_LOG_INFO, "job running", "job", a->id, "user", f ? f->user : "-", "device",
              a->device_id, "package", f ? f->package : "-", "latency_s", ms, "recorded", "yes",
              "suppressed", "0", NULL);
}

/* ---- the group's commit, once per loop turn ---- */

/* Run, oldest first, what waited for groups that are over. What they start
 * (a queued job sent to a device with room) joins the next group. */
static void after_run_ended(struct jobs *js) {
  while (js->after && js->after->ended) {
    struct after *a = js->after;
    js->after = a->next;
    if (!js->after)
      js->after_tail = &js->after;
    switch (a->kind) {
    case AFTER_SENT:
      sent_run(js, a);
      break;
    case AFTER_DISPATCHED:
      dispatched_run(js, a);
      break;
    case AFTER_RESULT:
      result_run(js, a);
      break;
    case AFTER_CANCELLED:
      cancelled_run(js, a);
      break;
    case AFTER_RUNNING:
      running_run(js, a);
      break;
    }
    after_free(a);
  }
}

static void group_flush(struct jobs *js) {
  struct cordon_diag diag = {{0}};
  server_db_group_settle(js->db); /* a commit that lost its answer: asked again */
  if (server_db_group_pending(js->db) && server_db_group_commit(js->db, &diag) < 0)
    core_log_kv(CORE_LOG_ERROR,
                server_db_group_in_doubt(js->db)
                    ? "a commit of the jobs' changes lost its answer: they wait until the "
                      "database says whether it was committed"
                    : "cannot commit the jobs' changes: each takes its failure path",
                "error", diag.msg, NULL);
  after_run_ended(js);
}

/* After the loop's poll: what this turn changed is committed with one sync,
 * then acted on. */
static void on_commit_check(uv_check_t *h) {
  struct jobs *js = h->data;
  pool_submit(js); /* what this turn gave the pool */
  /* results whose signature the pool is checking join this group rather
   * than the next (their check ends within tens of µs and wakes the loop),
   * for at most a millisecond of the loop's time */
  uint64_t now = uv_now(js->loop);
  if (js->n_verifying > 0 && server_db_group_pending(js->db)) {
    if (!js->hold_since)
      js->hold_since = now + 1;
    if (now + 1 - js->hold_since < JOBS_HOLD_FOR_POOL_MS) {
      after_run_ended(js); /* what an earlier group's end (an op_begin's) let go */
      pool_submit(js);     /* what that gave the pool: no batch waits while poll blocks */
      uv_idle_stop(&js->commit_idle);
      return;
    }
  }
  js->hold_since = 0;
  group_flush(js);
  pool_submit(js); /* what the acts after the commit gave the pool */
  /* what waits for a group in doubt waits for the database, not the loop:
   * the tick asks again */
  if ((!js->after || server_db_group_in_doubt(js->db)) && !server_db_group_pending(js->db))
    uv_idle_stop(&js->commit_idle);
}

/* ---- every second ---- */

/* Sent jobs past their deadline expire with device_lost. */
static void expire_overdue(struct jobs *js) {
  struct server_db_job_list list;
  if (server_db_job_list_overdue(js->db, &list, NULL) < 0)
    return;
  for (size_t i = 0; i < list.count; i++) {
    struct server_db_job *job = &list.items[i];
    if (held_by_agent(js, job->id))
      continue; /* its agent is connected and holds its result */
    if (server_db_job_transition(js->db, job->id, job->state, SERVER_DB_JOB_EXPIRED, "device_lost",
                                 NULL) == 0) {
      metrics_job_finished(SERVER_DB_JOB_EXPIRED, -1);
      publish_state(js, job->id);
      core_log_kv(CORE_LOG_WARN, "job expired", "job", job->id, "user", job->user, "device",
                  job->device_id[0] ? job->device_id : "-", "was",
                  server_db_job_state_name(job->state), "error", "device_lost", NULL);
      flight_drop(js, job->id);
      struct sending *x = sending_find(js, job->id);
      if (x)
        sending_free(x);
      answer_waiters(js, job->id);
    }
  }
  server_db_job_list_release(&list);
}

/* Queued jobs past their queue_expires end with queue_expired. */
static void expire_queue(struct jobs *js) {
  struct server_db_job_list list;
  if (server_db_job_list_queue_expired(js->db, &list, NULL) < 0)
    return;
  for (size_t i = 0; i < list.count; i++) {
    struct server_db_job *job = &list.items[i];
    if (server_db_job_transition(js->db, job->id, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_EXPIRED,
                                 cordon_err_name(CORDON_E_QUEUE_EXPIRED), NULL) == 0) {
      char path[PATH_MAX];
      queue_path(js, job->id, path);
      unlink(path);
      metrics_job_finished(SERVER_DB_JOB_EXPIRED, -1);
      publish_state(js, job->id);
      core_log_kv(CORE_LOG_WARN, "job expired", "job", job->id, "user", job->user, "device",
                  job->device_id[0] ? job->device_id : "-", "was", "queued", "error",
                  "queue_expired", NULL);
      answer_waiters(js, job->id);
    }
  }
  server_db_job_list_release(&list);
}

static void ping_clock(struct session *s, void *data) {
  (void)data;
  session_ping_clock(s);
}

/* Tickets and pings carry this host's wall clock; when it steps, every
 * agent is told at once (a ping with the new time), not at its session's
 * next quiet ping, so a ticket minted after the step is judged on the
 * clock that minted it (docs/protocol/messages.md). */
static void host_clock_tick(struct jobs *js) {
  int64_t off = (int64_t)core_wall_ms() - core_mono_ms();
  int64_t moved = off - js->host_wall_off_ms;
  js->host_wall_off_ms = off;
  if (moved >= SERVER_DB_CLOCK_STEP_MS || moved <= -SERVER_DB_CLOCK_STEP_MS)
    sessions_foreach(js->sessions, ping_clock, NULL);
}

/* The host's clock stepped (server/db.h, server_db_clock_tick): the
 * deadlines moved with it. PostgreSQL: the database's clock; a host clock
 * off it by a step or more is said, and again when that changes by a step. */
static void clock_tick(struct jobs *js) {
  int64_t step = 0;
  host_clock_tick(js);
  struct cordon_diag diag = {{0}};
  char buf[24];
  if (server_db_clock_tick(js->db, &step, &diag) < 0) {
    core_log_kv(CORE_LOG_DEBUG, "cannot read the clock: it goes on from the last reading", "error",
                diag.msg, NULL);
    return;
  }
  if (step) {
    snprintf(buf, sizeof(buf), "%lld", (long long)(step / 1000));
    core_log_kv(CORE_LOG_WARN,
                "the system clock stepped: live deadlines, queue deadlines and pairing codes "
                "moved with it",
                "step_s", buf, NULL);
  }
  int64_t skew_s = server_db_clock_skew_ms(js->db) / 1000, lim = SERVER_DB_CLOCK_STEP_MS / 1000;
  if (!server_db_is_shared(js->db) || (skew_s < lim && skew_s > -lim) ||
      (js->skew_said && llabs(skew_s - js->skew_said_s) < lim))
    return;
  snprintf(buf, sizeof(buf), "%lld", (long long)skew_s);
  core_log_kv(CORE_LOG_WARN,
              "this host's clock is off the database's: the cluster's times follow the "
              "database's",
              "skew_s", buf, NULL);
  js->skew_said = true;
  js->skew_said_s = skew_s;
}

static void tick(uv_timer_t *t) {
  struct jobs *js = t->data;
  clock_tick(js);
  expire_overdue(js);
  expire_queue(js);
  drain(js);
  group_flush(js);          /* what answer_waiters reads is durable */
  answer_waiters(js, NULL); /* e.g. a cancelled job whose deadline passed */
}

/* At start: STATE/queue holds only the packages of jobs still queued. */
static void queue_sweep(struct jobs *js) {
  DIR *dir = opendir(js->queue_dir);
  if (!dir)
    return;
  struct dirent *de;
  while ((de = readdir(dir))) {
    char id[CORDON_ID_HEX_SIZE], path[PATH_MAX];
    bool keep = false;
    if (de->d_name[0] == '.')
      continue;
    if (strlen(de->d_name) == CORDON_ID_HEX_LEN + 5 &&
        strcmp(de->d_name + CORDON_ID_HEX_LEN, ".cpkg") == 0) {
      snprintf(id, sizeof(id), "%.*s", CORDON_ID_HEX_LEN, de->d_name);
      struct server_db_job job;
      if (server_db_job_get(js->db, id, &job, NULL) == 0) {
        keep = job.state == SERVER_DB_JOB_QUEUED && job.queue_expires != 0;
        server_db_job_release(&job);
      }
    }
    if (!keep) {
      snprintf(path, sizeof(path), "%s/%s", js->queue_dir, de->d_name);
      unlink(path);
    }
  }
  closedir(dir);
}

/* ---- lifecycle ---- */

/* A waiter whose job is not over when the daemon stops: the job id and its
 * state, not an error about the job (it goes on; its result is recorded
 * when the agent delivers it to the next daemon, and a queued job stays
 * queued for the next daemon to send). */
static json_t *reply_stopped(struct jobs *js, const char *id) {
  struct server_db_job job;
  const char *state = "unknown";
  char dev[CORDON_ID_HEX_SIZE] = "";
  if (server_db_job_get(js->db, id, &job, NULL) == 0) {
    state = server_db_job_state_name(job.state);
    snprintf(dev, sizeof(dev), "%s", job.device_id);
    server_db_job_release(&job);
  }
  char msg[400];
  if (dev[0])
    snprintf(msg, sizeof(msg),
             "the server stopped before job %s finished (it is %s on device %s); `cordon-server "
             "job %s --wait` waits for its result, which the agent delivers to the next daemon",
             id, state, dev, id);
  else
    snprintf(msg, sizeof(msg),
             "the server stopped before job %s finished (it is %s); `cordon-server job %s --wait` "
             "waits for its result once a device has run it",
             id, state, id);
  json_t *e = admin_reply_error(-ESHUTDOWN, msg);
  json_object_set_new(e, ADMIN_REPLY_JOB_ID, json_string(id));
  json_object_set_new(e, ADMIN_REPLY_STATE, json_string(state));
  return e;
}

int jobs_new(const struct jobs_config *cfg, struct jobs **out_jobs) {
  struct jobs *js = calloc(1, sizeof(*js));
  if (!js)
    return -ENOMEM;
  js->loop = cfg->loop;
  js->db = cfg->db;
  js->sessions = cfg->sessions;
  js->ticket_sk = cfg->ticket_sk;
  js->publisher_pk = cfg->publisher_pk;
  js->keyring = cfg->keyring;
  js->events = cfg->events;
  js->grace_s = cfg->grace_s ? cfg->grace_s : JOBS_DEFAULT_GRACE_S;
  js->queue_ttl_s = cfg->queue_ttl_s ? cfg->queue_ttl_s : JOBS_DEFAULT_QUEUE_TTL_S;
  js->result_max = cfg->result_max && cfg->result_max < SERVER_DB_RESULT_MAX ? cfg->result_max
                                                                             : SERVER_DB_RESULT_MAX;
  snprintf(js->queue_dir, sizeof(js->queue_dir), "%s/%s", cfg->state_dir ? cfg->state_dir : ".",
           JOBS_QUEUE_DIR);
  js->after_tail = &js->after;
  js->queue_maybe = true; /* the database's queue is not known yet */
  server_db_group_enable(js->db, group_ended, js);
  /* without it (out of memory) every dispatch verifies its package */
  (void)pkgcache_new(PKGCACHE_MAX, &js->pkgs);
  *out_jobs = js;
  return 0;
}

void jobs_sweep_queue(struct jobs *js) { /* server/cluster.h: now and then */
  queue_sweep(js);
}

void jobs_recover(struct jobs *js) {
  if (mkdir(js->queue_dir, 0700) < 0 && errno != EEXIST)
    core_log_kv(CORE_LOG_ERROR, "cannot make the queue directory: jobs cannot be queued", "path",
                js->queue_dir, "error", strerror(errno), NULL);
  /* what the last daemon left past its deadline ends now, not a tick after
   * the first connection */
  expire_overdue(js);
  expire_queue(js);
  queue_sweep(js);
  js->recovered = true;
}

static void on_remote_state(void *ctx, const struct event *ev);

void jobs_start(struct jobs *js) {
  if (!js->recovered)
    jobs_recover(js);
  uv_timer_init(js->loop, &js->tick);
  js->tick.data = js;
  js->host_wall_off_ms = (int64_t)core_wall_ms() - core_mono_ms(); /* host_clock_tick's base */
  uv_timer_start(&js->tick, tick, JOB_TICK_MS, JOB_TICK_MS);
  uv_check_init(js->loop, &js->commit_check);
  js->commit_check.data = js;
  uv_check_start(&js->commit_check, on_commit_check);
  uv_idle_init(js->loop, &js->commit_idle);
  js->group_on = true;
  js->started = true;
  if (js->events && server_db_is_shared(js->db)) /* a cluster's relay: PostgreSQL only */
    (void)events_subscribe(js->events, NULL, on_remote_state, js, &js->remote_token);
}

void jobs_close(struct jobs *js) {
  js->closing = true;
  events_unsubscribe(js->events, js->remote_token);
  pool_submit(js); /* its results are dropped when they come back (closing) */
  /* what waits is committed and acted on now (no job is sent any more);
   * from here each op commits at once */
  group_flush(js);
  if (js->group_on) {
    js->group_on = false;
    uv_close((uv_handle_t *)&js->commit_check, NULL);
    uv_close((uv_handle_t *)&js->commit_idle, NULL);
  }
  if (js->started && !uv_is_closing((uv_handle_t *)&js->tick))
    uv_close((uv_handle_t *)&js->tick, NULL);
  while (js->sends)
    sending_free(js->sends);
  for (struct waiter *w = js->waiters, *n; w; w = n) {
    n = w->next;
    waiter_answer(js, w, reply_stopped(js, w->id));
    free(w);
  }
  js->waiters = NULL;
  while (js->flights)
    flight_drop(js, js->flights->id);
  while (js->held)
    held_drop(js, js->held->id);
}

void jobs_drain(struct jobs *js) {
  js->draining = true;
}

void jobs_free(struct jobs *js) {
  if (js) {
    server_db_group_commit(js->db, NULL);
    server_db_group_enable(js->db, NULL, NULL);
    js->after_open = NULL;
    for (struct after *a = js->after, *n; a; a = n) {
      n = a->next;
      after_free(a);
    }
    pkgcache_free(js->pkgs);
  }
  free(js);
}

/* ---- events and follow ---- */

static void publish_state(struct jobs *js, const char *id) {
  struct server_db_job job;
  /* nobody listening (events_count): nothing to read the job for */
  if (!js->events || events_count(js->events) == 0 || server_db_job_get(js->db, id, &job, NULL) < 0)
    return;
  const struct event ev = {
      .kind = EVENT_JOB_STATE,
      .job_id = job.id,
      .device_id = job.device_id[0] ? job.device_id : NULL,
      .user = job.user,
      .state = server_db_job_state_name(job.state),
      .code = job.error[0] ? job.error : NULL,
  };
  events_publish(js->events, &ev);
  server_db_job_release(&job);
}

/* A wait gets its reply; a follow its last line, the same reply with
 * "event": "end". */
static void waiter_answer(struct jobs *js, struct waiter *w, json_t *reply) {
  if (!w->token) {
    admin_conn_reply(w->conn, reply);
    return;
  }
  events_unsubscribe(js->events, w->token);
  if (reply)
    json_object_set_new(reply, ADMIN_REPLY_EVENT, json_string("end"));
  admin_conn_stream_end(w->conn, reply);
}

/* A job's end heard from another server (the cluster's relay): its
 * waiters here are answered now, not at the next tick. */
static void on_remote_state(void *ctx, const struct event *ev) {
  struct jobs *js = ctx;
  if (!ev->remote || ev->kind != EVENT_JOB_STATE || !ev->state || strcmp(ev->state, "sent") == 0 ||
      strcmp(ev->state, "running") == 0 || strcmp(ev->state, "queued") == 0)
    return;
  for (struct waiter *w = js->waiters; w; w = w->next)
    if (strcmp(w->id, ev->job_id) == 0) {
      core_log_kv(CORE_LOG_DEBUG, "job end heard from another server", "job", ev->job_id, "state",
                  ev->state, NULL);
      answer_waiters(js, ev->job_id);
      return;
    }
}

/* A follower's connection went: its waiter goes too. */
static void follow_gone(void *ctx, struct admin_conn *c) {
  struct jobs *js = ctx;
  for (struct waiter **pp = &js->waiters; *pp; pp = &(*pp)->next)
    if ((*pp)->conn == c) {
      struct waiter *w = *pp;
      *pp = w->next;
      events_unsubscribe(js->events, w->token);
      free(w);
      return;
    }
}

static void follow_output(void *ctx, const struct event *ev) {
  struct waiter *w = ctx;
  if (ev->kind != EVENT_JOB_OUTPUT)
    return;
  /* only bytes past those sent: output relayed from another server
   * (server/cluster.c) twice is printed once */
  uint64_t *next = &w->output_next[ev->stream == EVENT_STDERR];
  if (ev->offset + ev->len <= *next)
    return;
  size_t skip = *next > ev->offset ? (size_t)(*next - ev->offset) : 0;
  *next = ev->offset + ev->len;
  size_t b64 = sodium_base64_ENCODED_LEN(ev->len - skip, sodium_base64_VARIANT_ORIGINAL);
  char *data = malloc(b64);
  if (!data)
    return;
  sodium_bin2base64(data, b64, ev->data + skip, ev->len - skip, sodium_base64_VARIANT_ORIGINAL);
  json_t *line = json_pack("{s:s, s:s, s:I, s:s}", ADMIN_REPLY_EVENT, "output", "stream",
                           ev->stream == EVENT_STDERR ? "stderr" : "stdout", "offset",
                           (json_int_t)(ev->offset + skip), "data", data);
  free(data);
  (void)admin_conn_stream_send(w->conn, line); /* -ENOBUFS: w is gone */
}

void jobs_op_follow(struct jobs *js, struct admin_conn *c, const struct server_db_job *job) {
  if (add_waiter(js, c, job->id) < 0) {
    admin_conn_reply(c, admin_reply_error(-ENOMEM, "out of memory"));
    return;
  }
  struct waiter *w = js->waiters; /* add_waiter puts it first */
  if (!js->events || events_subscribe(js->events, job->id, follow_output, w, &w->token) < 0) {
    js->waiters = w->next;
    free(w);
    admin_conn_reply(c, admin_reply_error(-ENOMEM, "out of memory"));
    return;
  }
  if (admin_conn_stream_start(c, follow_gone, js) < 0) {
    follow_gone(js, c);
    return;
  }
  answer_waiters(js, job->id); /* a job already over: its end at once */
}
