#include "agent/session.h"

#include "agent/cli.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat/posix.h"
#include "core/clock.h"
#include "core/log.h"

/* the run's link: a ping after 10 s of silence, given up after 60 s */
#define SESSION_QUIET_MS 10000
#define SESSION_IDLE_MS 60000
/* an offset that moves more than this between two pings is logged */
#define SESSION_CLOCK_NOTE_MS 5000
/* reconnecting: 0.5 s doubling, capped at 30 s */
#define BACKOFF_FIRST_MS 500
#define BACKOFF_MAX_MS 30000
/* a server that said `shutdown` is likely restarting: for a minute its
 * agents try again at least every 2 s instead of backing off to 30 s */
#define RESTART_BACKOFF_MAX_MS 2000
#define RESTART_WINDOW_MS 60000

/* Every record this side sends goes through here (bytes counted). */
static int send_record(struct agent_session *s, struct net_conn *c, const uint8_t *buf,
                       size_t len) {
  int r = net_conn_send(c, buf, len);
  if (r == 0)
    s->health->bytes_sent += len;
  return r;
}

int agent_session_send_encoded(struct agent_session *s, const uint8_t *buf, size_t len) {
  if (!s->conn || !s->ready)
    return -ENOTCONN;
  return send_record(s, s->conn, buf, len);
}

int agent_session_send(struct agent_session *s, const struct msg *m) {
  if (!s->conn || !s->ready)
    return -ENOTCONN;
  uint8_t *buf;
  size_t len;
  int r = msg_encode_alloc(m, &buf, &len, NULL);
  if (r < 0)
    return r;
  r = send_record(s, s->conn, buf, len);
  free(buf);
  return r;
}

size_t agent_session_unsent(const struct agent_session *s) {
  return s->conn ? net_conn_queued(s->conn) : 0;
}

int64_t agent_session_server_now_ms(const struct agent_session *s) {
  if (!s->clock_known)
    return (int64_t)core_wall_ms();
  return s->clock_server_ms + (core_boot_ms() - s->clock_boot_ms);
}

/* The server's clock read time_ms just now (it travelled one way, a few
 * milliseconds at most on a live session). */
static void clock_sync(struct agent_session *s, uint64_t time_ms) {
  s->clock_known = true;
  s->clock_server_ms = (int64_t)time_ms;
  s->clock_boot_ms = core_boot_ms();
}

static void schedule_connect(struct agent_session *s);
static void next_attempt(struct agent_session *s);

static int on_check_peer(struct net_conn *c, const uint8_t key[NOISE_KEY_LEN]) {
  struct agent_session *s = net_conn_data(c);
  if (sodium_memcmp(key, s->pairing->server_key, NOISE_KEY_LEN) != 0) {
    core_log_kv(CORE_LOG_ERROR, "the server's key is not the one pinned at pairing: not connecting",
                "server", s->health->server, NULL);
    agent_health_error(s->health, "the server's key at %s is not the one pinned at pairing",
                       s->health->server);
    return CORDON_E_UNKNOWN_KEY;
  }
  return 0;
}

static int on_ready(struct net_conn *c) {
  struct agent_session *s = net_conn_data(c);
  struct msg m;
  struct msg_fact wire[AGENT_FACTS_MAX];
  agent_hello_fill(s->facts, s->cfg, wire, &m);
  m.hello.has_device_id = true;
  memcpy(m.hello.device_id, s->pairing->device_id, CORDON_ID_LEN);
  m.hello.has_sign_key = s->pairing->sign_sk != NULL; /* registers it (receipt.md) */
  memcpy(m.hello.sign_key, s->pairing->sign_pk, sizeof(m.hello.sign_key));
  uint8_t *buf;
  size_t len;
  int r = msg_encode_alloc(&m, &buf, &len, NULL);
  if (r < 0)
    return r;
  r = send_record(s, c, buf, len);
  free(buf);
  return r;
}

/* A goaway's retry_ms: not sooner than that (docs/protocol/messages.md).
 * A `shutdown`: the server is likely coming back soon; the backoff starts
 * again and stays short for a while. */
static void note_retry(struct agent_session *s, const struct msg_goaway *g) {
  if (g->has_retry_ms)
    s->retry_after_ms = g->retry_ms;
  if (strcmp(g->code, MSG_GOAWAY_SHUTDOWN) == 0) {
    s->backoff_ms = 0;
    s->restart_until_ms = core_mono_ms() + RESTART_WINDOW_MS;
  }
}

static bool goaway_is_final(const struct msg_goaway *g) {
  return strcmp(g->code, MSG_GOAWAY_REVOKED) == 0 || strcmp(g->code, MSG_GOAWAY_UNPAIRED) == 0;
}

/* A welcome's servers list (none: only this address) and this address,
 * which worked: stored when either changed. */
static void learn_servers(struct agent_session *s, const struct msg_welcome *w) {
  if (!agent_servers_learn(&s->servers, s->cur, w->servers, w->n_servers) && !s->servers_unsaved)
    return;
  s->cur = s->servers.last;
  char list[AGENT_SERVERS_MAX * (MSG_ADDR_MAX + 8)];
  agent_servers_text(&s->servers, list, sizeof(list));
  struct cordon_diag diag = {{0}};
  if (agent_servers_save(s->cfg->dir, &s->servers, &diag) < 0) {
    core_log_kv(CORE_LOG_WARN, "cannot store the cluster's addresses", "server", s->health->server,
                "reason", diag.msg, NULL);
    agent_health_error(s->health, "%s", diag.msg);
    s->servers_unsaved = true; /* tried again at the next welcome */
    return;
  }
  s->servers_unsaved = false;
  core_log_kv(CORE_LOG_INFO, "the cluster's addresses stored", "server", s->health->server,
              "servers", list, NULL);
}

/* Before the welcome: only a welcome of a version we speak, or a goaway. */
static void on_first_record(struct agent_session *s, struct net_conn *c, const struct msg *m) {
  if (m->type == MSG_WELCOME && m->welcome.version >= MSG_PROTO_VERSION_MIN &&
      m->welcome.version <= MSG_PROTO_VERSION_MAX) {
    s->ready = true;
    s->backoff_ms = 0;
    learn_servers(s, &m->welcome);
    memcpy(s->id, m->welcome.session_id, CORDON_ID_LEN);
    s->version = m->welcome.version;
    clock_sync(s, m->welcome.time_ms);
    s->health->connected = true;
    s->health->connected_since_ms = core_wall_ms();
    s->health->sessions++;
    char dev[CORDON_ID_HEX_SIZE];
    cordon_id_to_hex(s->pairing->device_id, dev);
    core_log_kv(CORE_LOG_INFO, "connected to the server", "server", s->health->server, "device",
                dev, "user", s->pairing->user, NULL);
    s->ops->on_welcome(s->ctx);
  } else if (m->type == MSG_GOAWAY) {
    const char *text = m->goaway.message ? m->goaway.message : "";
    core_log_kv(CORE_LOG_WARN, "the server refused the session", "server", s->health->server,
                "code", m->goaway.code, "reason", text, NULL);
    agent_health_error(s->health, "the server refused the session: %s: %s", m->goaway.code, text);
    note_retry(s, &m->goaway);
    if (goaway_is_final(&m->goaway))
      s->ops->on_revoked(s->ctx, "this device is no longer paired with the server; run "
                                 "`cordon-agent unpair`, then pair again");
    net_conn_close(c, 0);
  } else {
    net_conn_close(c, CORDON_E_PROTOCOL);
  }
}

/* The server's clock in a ping or pong, learned again: a step of the
 * server's clock inside a session is absorbed at the next one, and one of
 * this machine's wall clock changes nothing (tickets are judged on the
 * server's clock, carried on the boot-time clock). A jump against what was
 * carried is the server's clock stepping: logged. */
static void learn_clock(struct agent_session *s, const struct msg_ping *p) {
  if (!p->has_time_ms)
    return;
  int64_t moved = (int64_t)p->time_ms - agent_session_server_now_ms(s);
  if (s->clock_known && (moved > SESSION_CLOCK_NOTE_MS || moved < -SESSION_CLOCK_NOTE_MS)) {
    char ms[24];
    snprintf(ms, sizeof(ms), "%lld", (long long)moved);
    core_log_kv(CORE_LOG_WARN, "the server's clock moved against this machine's boot-time clock",
                "server", s->health->server, "moved_ms", ms, NULL);
  }
  clock_sync(s, p->time_ms);
}

static void on_session_record(struct agent_session *s, struct net_conn *c, struct msg *m) {
  switch (m->type) {
  case MSG_PING: {
    learn_clock(s, &m->ping);
    struct msg p = {.type = MSG_PONG};
    p.pong.nonce = m->ping.nonce;
    agent_session_send(s, &p);
    break;
  }
  case MSG_PONG:
    learn_clock(s, &m->pong);
    break;
  case MSG_GOAWAY: {
    const char *text = m->goaway.message ? m->goaway.message : "";
    bool final = goaway_is_final(&m->goaway);
    core_log_kv(final ? CORE_LOG_ERROR : CORE_LOG_WARN, "the server closed the session", "server",
                s->health->server, "code", m->goaway.code, "reason", text, NULL);
    agent_health_error(s->health, "the server closed the session: %s: %s", m->goaway.code, text);
    note_retry(s, &m->goaway);
    if (final)
      s->ops->on_revoked(s->ctx, "this device was revoked or unpaired; run `cordon-agent "
                                 "unpair`, then pair again");
    net_conn_close(c, 0);
    break;
  }
  default:
    s->ops->on_message(s->ctx, m);
    break;
  }
}

static void on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct agent_session *s = net_conn_data(c);
  s->health->bytes_received += len;
  struct msg m;
  struct cordon_diag diag = {{0}};
  if (msg_decode(data, len, &m, &diag) < 0) {
    core_log_kv(CORE_LOG_WARN, "bad message from the server", "server", s->health->server, "reason",
                diag.msg, NULL);
    agent_health_error(s->health, "bad message from the server: %s", diag.msg);
    net_conn_close(c, CORDON_E_PROTOCOL);
    return;
  }
  if (!(msg_type_senders(m.type) & MSG_FROM_SERVER))
    net_conn_close(c, CORDON_E_PROTOCOL);
  else if (!s->ready)
    on_first_record(s, c, &m);
  else
    on_session_record(s, c, &m);
  msg_release(&m);
}

static void on_quiet(struct net_conn *c) {
  struct agent_session *s = net_conn_data(c);
  struct msg p = {.type = MSG_PING};
  p.ping.nonce = ++s->ping_nonce;
  agent_session_send(s, &p);
}

static void on_close(struct net_conn *c, int err) {
  struct agent_session *s = net_conn_data(c);
  bool was_ready = false;
  if (s->conn == c) {
    s->conn = NULL;
    was_ready = s->ready;
    s->ready = false;
  }
  if (was_ready) {
    s->health->connected = false;
    s->health->disconnected_ms = core_wall_ms();
  }
  err = agent_connect_error(err, was_ready);
  const char *reason = err ? cordon_err_message(err) : s->stopping ? "stopping" : "closed";
  if (was_ready || (err && !s->stopping))
    core_log_kv(err && !s->stopping ? CORE_LOG_WARN : CORE_LOG_INFO,
                was_ready ? "session ended" : "connection failed", "server", s->health->server,
                "reason", reason, NULL);
  if (err && !s->stopping)
    agent_health_error(s->health, "connection to %s %s: %s", s->health->server,
                       was_ready ? "lost" : "failed", reason);
  s->ops->on_lost(s->ctx);
  if (s->stopping)
    return;
  if (was_ready)
    schedule_connect(s); /* a new round, after the backoff */
  else
    next_attempt(s);
}

static const struct net_conn_ops session_ops = {
    .check_peer = on_check_peer,
    .on_ready = on_ready,
    .on_record = on_record,
    .on_quiet = on_quiet,
    .on_close = on_close,
};

static void do_connect(uv_timer_t *t) {
  struct agent_session *s = t->data;
  if (s->stopping || s->conn)
    return;
  s->health->connects++;
  const struct agent_server *a = &s->servers.list[s->cur];
  snprintf(s->health->server, sizeof(s->health->server), "%s", a->text);
  s->tried++;
  core_log_kv(CORE_LOG_DEBUG, "connecting", "server", s->health->server, NULL);
  int r = net_connect(s->loop, a->host, a->port, s->priv, NOISE_MODE_SESSION, &s->limits,
                      &session_ops, s, &s->conn);
  if (r < 0) {
    s->conn = NULL;
    const char *why = cordon_err_message(r);
    core_log_kv(CORE_LOG_WARN, "connection failed", "server", s->health->server, "reason", why,
                NULL);
    agent_health_error(s->health, "connection to %s failed: %s", s->health->server, why);
    next_attempt(s);
  }
  if (s->ops->on_attempt)
    s->ops->on_attempt(s->ctx);
}

/* A goaway's retry_ms holds back the next attempt, to whichever address. */
static uint64_t not_sooner(struct agent_session *s, uint64_t delay) {
  if (s->retry_after_ms > delay) { /* the server said when: not sooner */
    delay = s->retry_after_ms;
    char ms[16];
    snprintf(ms, sizeof(ms), "%u", (unsigned)delay);
    core_log_kv(CORE_LOG_INFO, "reconnecting when the server asked", "server", s->health->server,
                "retry_ms", ms, NULL);
  }
  s->retry_after_ms = 0;
  return delay;
}

/* A new round, from the address that worked last, after the backoff. */
static void schedule_connect(struct agent_session *s) {
  /* exponential backoff with jitter: the delay is within [b/2, b] */
  unsigned max = core_mono_ms() < s->restart_until_ms ? RESTART_BACKOFF_MAX_MS : BACKOFF_MAX_MS;
  unsigned b = s->backoff_ms ? s->backoff_ms : BACKOFF_FIRST_MS;
  if (b > max)
    b = max;
  s->backoff_ms = b * 2 > max ? max : b * 2;
  uint64_t delay = not_sooner(s, b / 2 + randombytes_uniform(b / 2 + 1));
  s->cur = s->servers.last;
  s->tried = 0;
  uv_timer_start(&s->retry, do_connect, delay, 0);
}

/* An attempt failed: the next address of the round at once; when each
 * was tried, a new round. */
static void next_attempt(struct agent_session *s) {
  if (s->tried >= s->servers.n) {
    schedule_connect(s);
    return;
  }
  s->cur = (s->cur + 1) % s->servers.n;
  uv_timer_start(&s->retry, do_connect, not_sooner(s, 0), 0);
}

void agent_session_init(struct agent_session *s, uv_loop_t *loop, const struct agent_config *cfg,
                        const struct agent_pairing *pairing, const struct agent_facts *facts,
                        const uint8_t *priv, struct agent_health *health,
                        const struct agent_session_ops *ops, void *ctx) {
  memset(s, 0, sizeof(*s));
  s->health = health;
  agent_servers_init(&s->servers, pairing);
  struct cordon_diag diag = {{0}};
  if (agent_servers_load(cfg->dir, &s->servers, &diag) < 0) {
    core_log_kv(CORE_LOG_WARN, "the cluster's addresses are unreadable: using the pairing address",
                "reason", diag.msg, NULL);
    agent_health_error(health, "%s", diag.msg);
  }
  s->cur = s->servers.last;
  snprintf(health->server, sizeof(health->server), "%s", s->servers.list[s->cur].text);
  s->loop = loop;
  s->cfg = cfg;
  s->pairing = pairing;
  s->facts = facts;
  s->priv = priv;
  s->ops = ops;
  s->ctx = ctx;
  net_limits_default(&s->limits);
  s->limits.quiet_ms = SESSION_QUIET_MS;
  s->limits.idle_ms = SESSION_IDLE_MS;
  uv_timer_init(loop, &s->retry);
  s->retry.data = s;
}

void agent_session_start(struct agent_session *s) {
  uv_timer_start(&s->retry, do_connect, 0, 0);
}

/* No more connecting: the retry timer goes (once). */
static void stop_connecting(struct agent_session *s) {
  if (s->stopping)
    return;
  s->stopping = true;
  uv_timer_stop(&s->retry);
  uv_close((uv_handle_t *)&s->retry, NULL);
}

void agent_session_close(struct agent_session *s) {
  stop_connecting(s);
  if (s->conn && !s->flushing) /* a flushing goaway closes by itself */
    net_conn_close(s->conn, 0);
}

void agent_session_shutdown(struct agent_session *s, const char *why) {
  if (s->conn && s->ready) {
    struct msg m = {.type = MSG_GOAWAY};
    m.goaway.code = MSG_GOAWAY_SHUTDOWN;
    m.goaway.message = (char *)why;
    if (agent_session_send(s, &m) == 0)
      core_log_kv(CORE_LOG_INFO, "told the server: goaway shutdown", "server", s->health->server,
                  NULL);
    stop_connecting(s);
    s->flushing = true;
    net_conn_flush_close(s->conn, 0); /* the goaway must reach the server */
    return;
  }
  agent_session_close(s);
}
