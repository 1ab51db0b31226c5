/* Agents' sessions (server/session.h). */
#include "server/session.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "server/facts.h"
#include "server/metrics.h"

#define SESSION_TOUCH_MS 60000 /* how stale last_seen may be while a device pings */
#define INDEX_MIN_BUCKETS 64

struct sessions {
  struct server_db *db;
  const uint8_t *server_id;
  struct session_hooks hooks;
  struct session *list; /* every session, doubly linked (pprev) */
  /* the sessions sessions_find may return (active, not closing), chained
   * by hnext in n_buckets buckets (a power of two, doubled when there are
   * more sessions than buckets) */
  struct session **by_device;
  size_t n_buckets, n_indexed;
  /* failures before a session is up, by source address (core/ratelimit.h) */
  struct core_ratelimit_table log_by_addr;
  /* run --advertise: every welcome of version 3 or later lists them (borrowed) */
  const char *const *servers;
  size_t n_servers;
};

void sessions_set_servers(struct sessions *t, const char *const *servers, size_t n) {
  t->servers = servers;
  t->n_servers = n;
}

/* Whether to log a pre-authentication failure from addr ("host:port"). */
static bool log_addr_hit(struct sessions *t, const char *addr, char suppressed[24]) {
  char host[CORE_RATELIMIT_KEY_MAX];
  uint64_t n = 0;
  core_ratelimit_addr_host(addr, host, sizeof(host));
  if (!core_ratelimit_table_hit(&t->log_by_addr, host, core_mono_ms(), &n))
    return false;
  core_ratelimit_fmt(n, suppressed);
  return true;
}

static size_t device_hash(const char *device_id) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)device_id; *p; p++)
    h = (h ^ *p) * 16777619u;
  return h;
}

/* Twice the buckets; on -ENOMEM the chains just grow longer. */
static void index_grow(struct sessions *t) {
  size_t n = t->n_buckets * 2;
  struct session **b = calloc(n, sizeof(*b));
  if (!b)
    return;
  for (size_t i = 0; i < t->n_buckets; i++)
    for (struct session *s = t->by_device[i], *next; s; s = next) {
      next = s->hnext;
      struct session **head = &b[device_hash(s->device_id) & (n - 1)];
      s->hnext = *head;
      *head = s;
    }
  free(t->by_device);
  t->by_device = b;
  t->n_buckets = n;
}

static void index_add(struct sessions *t, struct session *s) {
  if (s->indexed || s->closing || s->state != SESSION_ACTIVE)
    return;
  if (t->n_indexed >= t->n_buckets)
    index_grow(t);
  struct session **head = &t->by_device[device_hash(s->device_id) & (t->n_buckets - 1)];
  s->hnext = *head;
  *head = s;
  s->indexed = true;
  t->n_indexed++;
}

static void index_remove(struct sessions *t, struct session *s) {
  if (!s->indexed)
    return;
  struct session **pp = &t->by_device[device_hash(s->device_id) & (t->n_buckets - 1)];
  while (*pp != s)
    pp = &(*pp)->hnext;
  *pp = s->hnext;
  s->hnext = NULL;
  s->indexed = false;
  t->n_indexed--;
}

int sessions_new(struct server_db *db, const uint8_t *server_id, const struct session_hooks *hooks,
                 struct sessions **out_sessions) {
  struct sessions *t = calloc(1, sizeof(*t));
  if (!t)
    return -ENOMEM;
  t->n_buckets = INDEX_MIN_BUCKETS;
  t->by_device = calloc(t->n_buckets, sizeof(*t->by_device));
  if (!t->by_device) {
    free(t);
    return -ENOMEM;
  }
  t->db = db;
  t->server_id = server_id;
  t->hooks = *hooks;
  core_ratelimit_table_init(&t->log_by_addr, CORE_RATELIMIT_ADDR_WINDOW_MS);
  *out_sessions = t;
  return 0;
}

void sessions_free(struct sessions *t) {
  if (!t)
    return;
  free(t->by_device);
  free(t);
}

int session_send(struct session *s, const struct msg *m) {
  /* most messages fit here, encoded once and not allocated; a larger one
   * (a chunk, a long output) is encoded again into the heap */
  uint8_t small[4096], *buf = small;
  size_t len;
  struct cordon_diag diag = {{0}};
  int r = msg_encode(m, small, sizeof(small), &len, &diag);
  if (r == -ENOBUFS) {
    diag.msg[0] = '\0';
    r = msg_encode_alloc(m, &buf, &len, &diag);
  }
  if (r < 0) {
    core_log_kv(CORE_LOG_ERROR, "cannot encode a message", "type", msg_type_name(m->type), "addr",
                s->addr, "error", diag.msg, NULL);
    return r;
  }
  r = net_conn_send(s->conn, buf, len);
  if (buf != small)
    free(buf);
  if (r == 0)
    metrics_bytes_sent(len);
  return r;
}

static void set_reason(struct session *s, const char *prefix, const char *code) {
  if (!s->close_reason[0])
    snprintf(s->close_reason, sizeof(s->close_reason), "%s%s", prefix, code);
}

void session_goaway(struct session *s, const char *code, const char *message) {
  session_goaway_retry(s, code, message, 0);
}

void session_goaway_retry(struct session *s, const char *code, const char *message,
                          uint32_t retry_ms) {
  struct msg m = {.type = MSG_GOAWAY};
  m.goaway.code = (char *)code;
  m.goaway.message = (char *)message;
  m.goaway.has_retry_ms = retry_ms > 0;
  m.goaway.retry_ms = retry_ms;
  (void)session_send(s, &m);
  set_reason(s, "goaway.", code);
  s->closing = true;
  index_remove(s->owner, s);
  net_conn_flush_close(s->conn, 0); /* the goaway must reach the agent */
}

struct session *sessions_find(struct sessions *t, const char *device_id) {
  for (struct session *s = t->by_device[device_hash(device_id) & (t->n_buckets - 1)]; s;
       s = s->hnext)
    if (strcmp(s->device_id, device_id) == 0)
      return s;
  return NULL;
}

void sessions_shutdown(struct sessions *t) {
  for (struct session *s = t->list; s; s = s->next)
    if (s->state == SESSION_ACTIVE) {
      struct msg m = {.type = MSG_GOAWAY};
      m.goaway.code = MSG_GOAWAY_SHUTDOWN;
      m.goaway.message = "the server is shutting down";
      /* a restart is the likely end: back in 1-3 s, spread so that a
       * thousand devices do not all come at once */
      m.goaway.has_retry_ms = true;
      m.goaway.retry_ms =
          SESSION_SHUTDOWN_RETRY_MS + randombytes_uniform(SESSION_SHUTDOWN_RETRY_MS * 2);
      (void)session_send(s, &m);
      set_reason(s, "goaway.", MSG_GOAWAY_SHUTDOWN);
    }
}

size_t sessions_count(const struct sessions *t) {
  return t->n_indexed;
}

void sessions_foreach(struct sessions *t, void (*fn)(struct session *s, void *data), void *data) {
  for (struct session *s = t->list, *next; s; s = next) {
    next = s->next;
    if (s->state == SESSION_ACTIVE && !s->closing)
      fn(s, data);
  }
}

static void refuse(struct session *s, const char *code, const char *message, const char *why,
                   const char *device) {
  char sup[24];
  if (log_addr_hit(s->owner, s->addr, sup))
    core_log_kv(CORE_LOG_WARN, "session refused", "addr", s->addr, "device", device, "reason", why,
                "suppressed", sup, NULL);
  session_goaway(s, code, message);
}

/* A session-mode hello: the welcome goes out only once the device is known. */
static void device_hello(struct session *s, const struct msg_hello *h,
                         const struct msg_welcome *welcome) {
  struct sessions *t = s->owner;
  uint8_t key[NOISE_KEY_LEN];
  net_conn_remote_key(s->conn, key);
  struct server_db_device dev;
  char hex[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(h->device_id, hex);
  struct cordon_diag dd = {{0}};
  int gr = server_db_device_get_by_key(t->db, key, &dev, &dd);
  if (gr == -ENOENT) {
    refuse(s, MSG_GOAWAY_UNPAIRED, "this device is not paired with this server", "unknown_key",
           h->has_device_id ? hex : "-");
    return;
  }
  if (gr < 0) {
    /* the database failed (busy, its connection lost): never "unpaired",
     * which an agent takes as final; it comes back after retry_ms, spread
     * so that a fleet refused at once does not return at once */
    char sup[24];
    if (log_addr_hit(s->owner, s->addr, sup))
      core_log_kv(CORE_LOG_ERROR, "session refused: the database failed", "addr", s->addr, "device",
                  h->has_device_id ? hex : "-", "reason", "database_unavailable", "detail", dd.msg,
                  "suppressed", sup, NULL);
    session_goaway_retry(s, MSG_GOAWAY_UNAVAILABLE, "the server cannot reach its database",
                         SESSION_UNAVAILABLE_RETRY_MS +
                             randombytes_uniform(SESSION_UNAVAILABLE_RETRY_MS));
    return;
  }
  if (!h->has_device_id || strcmp(hex, dev.id) != 0) {
    refuse(s, MSG_GOAWAY_PROTOCOL, "device_id does not match the session key", "device_id_mismatch",
           dev.id);
    server_db_device_release(&dev);
    return;
  }
  if (dev.state == SERVER_DB_DEVICE_REVOKED) {
    refuse(s, MSG_GOAWAY_REVOKED, "this device was revoked", "revoked", dev.id);
    server_db_device_release(&dev);
    return;
  }
  struct session *old = sessions_find(t, dev.id);
  if (old) {
    core_log_kv(CORE_LOG_INFO, "session replaced", "device", dev.id, "addr", old->addr, "new_addr",
                s->addr, NULL);
    session_goaway(old, MSG_GOAWAY_REPLACED, "a newer session of this device took over");
  }
  snprintf(s->device_id, sizeof(s->device_id), "%s", dev.id);
  s->user_id = dev.user_id;
  snprintf(s->user, sizeof(s->user), "%s", dev.owner);
  s->max_jobs = h->max_jobs;
  struct server_db_device_info info = {
      .platform = h->platform,
      .has_level = true,
      .best_level = (enum sandbox_level)h->best_level,
      .downgrade_reason = h->downgrade_reason,
      .max_jobs = (int)h->max_jobs,
      .address = s->addr,
  };
  char *facts = server_facts_from_hello(h); /* server/facts.h */
  info.facts_json = facts;
  server_db_device_update_info(t->db, dev.id, &info, NULL);
  free(facts);
  if (h->has_sign_key) { /* registered once: at the first session after pairing */
    struct cordon_diag kd = {{0}};
    int kr = server_db_device_register_sign_key(t->db, dev.id, h->sign_key, &kd);
    if (kr == 0)
      core_log_kv(CORE_LOG_INFO, "device signing key registered", "device", dev.id, NULL);
    else if (kr == -EEXIST)
      core_log_kv(CORE_LOG_WARN,
                  "the device offers another signing key than the registered one, which stays:"
                  " its results will be refused",
                  "device", dev.id, NULL);
    else if (kr != -EALREADY)
      core_log_kv(CORE_LOG_WARN, "cannot register the device signing key", "device", dev.id,
                  "reason", kd.msg, NULL);
  }
  server_db_device_set_online(t->db, dev.id, true, NULL);
  s->state = SESSION_ACTIVE;
  index_add(t, s);
  s->since = (int64_t)(core_wall_ms() / 1000);
  s->touched_ms = core_mono_ms(); /* set_online wrote last_seen */
  struct msg w = {.type = MSG_WELCOME};
  w.welcome = *welcome;
  (void)session_send(s, &w);
  char sid[CORDON_ID_HEX_SIZE], jobs[16];
  cordon_id_to_hex(s->session_id, sid);
  snprintf(jobs, sizeof(jobs), "%u", s->max_jobs);
  const char *level = sandbox_level_name((enum sandbox_level)h->best_level);
  core_log_kv(CORE_LOG_INFO, "device connected", "device", s->device_id, "user", s->user, "name",
              dev.name, "addr", s->addr, "session", sid, "platform",
              h->platform ? h->platform : "-", "level", level ? level : "-", "max_jobs", jobs,
              NULL);
  server_db_device_release(&dev);
  if (t->hooks.online)
    t->hooks.online(t->hooks.data, s);
}

static void on_hello(struct session *s, const struct msg_hello *h) {
  struct sessions *t = s->owner;
  uint16_t v;
  if (msg_version_choose(h->proto_min, h->proto_max, MSG_PROTO_VERSION_MIN, MSG_PROTO_VERSION_MAX,
                         &v) < 0) {
    char why[96], theirs[32];
    snprintf(why, sizeof(why), "server speaks protocol versions %d..%d", MSG_PROTO_VERSION_MIN,
             MSG_PROTO_VERSION_MAX);
    snprintf(theirs, sizeof(theirs), "%u..%u", h->proto_min, h->proto_max);
    char sup[24];
    if (log_addr_hit(s->owner, s->addr, sup))
      core_log_kv(CORE_LOG_WARN, "session refused", "addr", s->addr, "reason",
                  "version_unsupported", "versions", theirs, "suppressed", sup, NULL);
    session_goaway(s, MSG_GOAWAY_VERSION_UNSUPPORTED, why);
    return;
  }
  struct msg w = {.type = MSG_WELCOME};
  w.welcome.version = v;
  w.welcome.time_ms = core_wall_ms();
  memcpy(w.welcome.server_id, t->server_id, CORDON_ID_LEN);
  memcpy(w.welcome.session_id, s->session_id, CORDON_ID_LEN);
  w.welcome.ping_ms = SERVER_PING_MS;
  if (t->n_servers > 0 && v >= MSG_PROTO_VERSION_SERVERS) {
    w.welcome.servers = (char **)t->servers;
    w.welcome.n_servers = t->n_servers;
  }
  if (net_conn_mode(s->conn) != NOISE_MODE_PAIRING) {
    device_hello(s, h, &w.welcome);
    return;
  }
  (void)session_send(s, &w);
  s->state = SESSION_PAIR_PROOF;
  t->hooks.pair_hello(t->hooks.data, s, h);
}

/* The messages of an active session that are the session's own concern. */
static bool on_active_message(struct session *s, struct msg *m) {
  struct sessions *t = s->owner;
  if (m->type == MSG_UNPAIR) {
    struct cordon_diag diag = {{0}};
    int r = server_db_device_revoke(t->db, s->device_id, &diag);
    if (r < 0 && r != -EALREADY)
      core_log_kv(CORE_LOG_ERROR, "device unpair not recorded", "device", s->device_id, "user",
                  s->user, "addr", s->addr, "error", diag.msg, NULL);
    else
      core_log_kv(CORE_LOG_INFO, "device unpaired", "device", s->device_id, "user", s->user, "addr",
                  s->addr, "by", "agent", NULL);
    session_goaway(s, MSG_GOAWAY_UNPAIRED, "unpaired");
    return true;
  }
  return t->hooks.message(t->hooks.data, s, m);
}

static void on_message(struct session *s, struct msg *m) {
  struct sessions *t = s->owner;
  if (!(msg_type_senders(m->type) & MSG_FROM_AGENT)) {
    session_goaway(s, MSG_GOAWAY_PROTOCOL, "unexpected message");
    return;
  }
  if (s->state == SESSION_HELLO) {
    if (m->type != MSG_HELLO)
      session_goaway(s, MSG_GOAWAY_PROTOCOL, "expected hello");
    else
      on_hello(s, &m->hello);
    return;
  }
  if (m->type == MSG_PING) {
    struct msg p = {.type = MSG_PONG};
    p.pong.nonce = m->ping.nonce;
    p.pong.has_time_ms = true; /* the agent re-learns its clock offset */
    p.pong.time_ms = core_wall_ms();
    (void)session_send(s, &p);
    /* last_seen at most once a minute: a commit per ping was 1,000 fsyncs
     * a second with 10,000 devices (bench/scale) */
    if (s->state == SESSION_ACTIVE && core_mono_ms() - s->touched_ms >= SESSION_TOUCH_MS) {
      s->touched_ms = core_mono_ms();
      server_db_device_touch(t->db, s->device_id, NULL);
    }
    return;
  }
  if (m->type == MSG_PONG || m->type == MSG_GOAWAY || m->type == MSG_ERROR) {
    if (m->type == MSG_GOAWAY) {
      set_reason(s, "agent.goaway.", m->goaway.code);
      net_conn_close(s->conn, 0);
    }
    return;
  }
  if (s->state == SESSION_PAIR_PROOF && m->type == MSG_PAIR_PROOF) {
    if (t->hooks.pair_proof(t->hooks.data, s, &m->pair_proof) == 0) {
      s->state = SESSION_DONE; /* docs/protocol/pairing.md: pair_done, then close */
      net_conn_flush_close(s->conn, 0);
    }
    return;
  }
  if (s->state == SESSION_ACTIVE && on_active_message(s, m))
    return;
  session_goaway(s, MSG_GOAWAY_PROTOCOL, "unexpected message");
}

static void on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct session *s = net_conn_data(c);
  struct msg m;
  struct cordon_diag diag = {{0}};
  int r = msg_decode(data, len, &m, &diag);
  if (r < 0) {
    char sup[24];
    if (log_addr_hit(s->owner, s->addr, sup))
      core_log_kv(CORE_LOG_WARN, "malformed message", "addr", s->addr, "device",
                  s->state == SESSION_ACTIVE ? s->device_id : "-", "error",
                  diag.msg[0] ? diag.msg : cordon_err_message(r), "suppressed", sup, NULL);
    session_goaway(s, MSG_GOAWAY_PROTOCOL, "malformed message");
    return;
  }
  on_message(s, &m);
  msg_release(&m);
}

static int on_ready(struct net_conn *c) {
  struct sessions *t = net_server_data(net_conn_server(c));
  struct session *s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  s->owner = t;
  s->conn = c;
  s->state = SESSION_HELLO;
  s->opened_ms = core_mono_ms();
  snprintf(s->addr, sizeof(s->addr), "%s", net_conn_peer(c));
  cordon_id_random(s->session_id);
  metrics_connection_accepted();
  core_log_kv(CORE_LOG_DEBUG, "connection", "addr", s->addr, "mode",
              net_conn_mode(c) == NOISE_MODE_PAIRING ? "pairing" : "session", NULL);
  s->next = t->list;
  if (t->list)
    t->list->pprev = &s->next;
  s->pprev = &t->list;
  t->list = s;
  net_conn_set_data(c, s);
  return 0;
}

void session_ping_clock(struct session *s) {
  if (!s || s->state == SESSION_HELLO)
    return;
  struct msg p = {.type = MSG_PING};
  p.ping.nonce = core_wall_ms();
  p.ping.has_time_ms = true;
  p.ping.time_ms = core_wall_ms();
  (void)session_send(s, &p);
}

/* Silent for 2 * SERVER_PING_MS: ask (the pong is traffic). */
static void on_quiet(struct net_conn *c) {
  session_ping_clock(net_conn_data(c));
}

/* Why a connection ended, for the log: what this side said, what the
 * agent said, or what happened to the connection. */
static const char *close_reason(const struct session *s, int err) {
  if (s && s->close_reason[0])
    return s->close_reason;
  switch (err) {
  case 0:
    return "closed";
  case -ETIMEDOUT:
    return "timeout";
  case -ECONNRESET:
    return "reset";
  case -EPIPE:
    return "broken_pipe";
  default:
    return err > CORDON_E_BASE_ && err < 0 ? "io_error" : cordon_err_name(err);
  }
}

static void on_close(struct net_conn *c, int err) {
  struct session *s = net_conn_data(c);
  if (!s) { /* the handshake never finished */
    char sup[24];
    if (log_addr_hit(net_server_data(net_conn_server(c)), net_conn_peer(c), sup))
      core_log_kv(CORE_LOG_INFO, "handshake failed", "addr", net_conn_peer(c), "reason",
                  close_reason(NULL, err), "error", err ? cordon_err_message(err) : "-",
                  "suppressed", sup, NULL);
    return;
  }
  struct sessions *t = s->owner;
  char secs[24];
  snprintf(secs, sizeof(secs), "%.3f", (double)(core_mono_ms() - s->opened_ms) / 1000.0);
  if (s->state == SESSION_ACTIVE) {
    /* offline only if no newer session took over */
    struct session *o = sessions_find(t, s->device_id);
    if (!o || o == s)
      server_db_device_set_online(t->db, s->device_id, false, NULL);
    core_log_kv(CORE_LOG_INFO, "device disconnected", "device", s->device_id, "user", s->user,
                "addr", s->addr, "reason", close_reason(s, err), "error",
                err ? cordon_err_message(err) : "-", "duration_s", secs, NULL);
  } else {
    core_log_kv(CORE_LOG_DEBUG, "connection closed", "addr", s->addr, "reason",
                close_reason(s, err), "duration_s", secs, NULL);
  }
  t->hooks.closed(t->hooks.data, s);
  index_remove(t, s);
  if (s->next)
    s->next->pprev = s->pprev;
  *s->pprev = s->next;
  free(s);
}

const struct net_conn_ops sessions_net_ops = {
    .on_ready = on_ready,
    .on_record = on_record,
    .on_quiet = on_quiet,
    .on_close = on_close,
};
