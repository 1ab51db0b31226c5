#include "agent/session.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "compat/posix.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/log.h"

/* the run's link: a ping after 10 s of silence, given up after 60 s */
#define SESSION_QUIET_MS 10000
#define SESSION_IDLE_MS 60000
/* reconnecting: 0.5 s doubling, capped at 30 s */
#define BACKOFF_FIRST_MS 500
#define BACKOFF_MAX_MS 30000

static void write_connection_state(const struct agent_session *s, bool connected) {
  const char *text = connected ? "connected\n" : "disconnected\n";
  core_write_file_atomic(s->cfg->dir, "connection", text, strlen(text), 0600);
}

int agent_session_send_encoded(struct agent_session *s, const uint8_t *buf, size_t len) {
  if (!s->conn || !s->ready)
    return -ENOTCONN;
  return net_conn_send(s->conn, buf, len);
}

int agent_session_send(struct agent_session *s, const struct msg *m) {
  if (!s->conn || !s->ready)
    return -ENOTCONN;
  uint8_t *buf;
  size_t len;
  int r = msg_encode_alloc(m, &buf, &len, NULL);
  if (r < 0)
    return r;
  r = net_conn_send(s->conn, buf, len);
  free(buf);
  return r;
}

int64_t agent_session_server_now_ms(const struct agent_session *s) {
  return (int64_t)core_wall_ms() + s->clock_offset_ms;
}

static void schedule_connect(struct agent_session *s);

static int on_check_peer(struct net_conn *c, const uint8_t key[NOISE_KEY_LEN]) {
  struct agent_session *s = net_conn_data(c);
  if (sodium_memcmp(key, s->pairing->server_key, NOISE_KEY_LEN) != 0) {
    core_log("the server's key is not the one pinned at pairing: not connecting");
    return CORDON_E_UNKNOWN_KEY;
  }
  return 0;
}

static int on_ready(struct net_conn *c) {
  struct agent_session *s = net_conn_data(c);
  struct msg m;
  agent_hello_fill(s->facts, s->cfg, &m);
  m.hello.has_device_id = true;
  memcpy(m.hello.device_id, s->pairing->device_id, CORDON_ID_LEN);
  uint8_t *buf;
  size_t len;
  int r = msg_encode_alloc(&m, &buf, &len, NULL);
  if (r < 0)
    return r;
  r = net_conn_send(c, buf, len);
  free(buf);
  return r;
}

static bool goaway_is_final(const struct msg_goaway *g) {
  return strcmp(g->code, MSG_GOAWAY_REVOKED) == 0 || strcmp(g->code, MSG_GOAWAY_UNPAIRED) == 0;
}

/* Before the welcome: only a welcome of a version we speak, or a goaway. */
static void on_first_record(struct agent_session *s, struct net_conn *c, const struct msg *m) {
  if (m->type == MSG_WELCOME && m->welcome.version >= MSG_PROTO_VERSION_MIN &&
      m->welcome.version <= MSG_PROTO_VERSION_MAX) {
    s->ready = true;
    s->backoff_ms = 0;
    memcpy(s->id, m->welcome.session_id, CORDON_ID_LEN);
    s->clock_offset_ms = (int64_t)m->welcome.time_ms - (int64_t)core_wall_ms();
    write_connection_state(s, true);
    core_log("connected to %s:%d as device of %s", s->pairing->host, s->pairing->port,
             s->pairing->user);
    s->ops->on_welcome(s->ctx);
  } else if (m->type == MSG_GOAWAY) {
    core_log("the server refused the session: %s: %s", m->goaway.code,
             m->goaway.message ? m->goaway.message : "");
    if (goaway_is_final(&m->goaway))
      s->ops->on_revoked(s->ctx, "this device is no longer paired with the server; run "
                                 "`cordon-agent unpair`, then pair again");
    net_conn_close(c, 0);
  } else {
    net_conn_close(c, CORDON_E_PROTOCOL);
  }
}

static void on_session_record(struct agent_session *s, struct net_conn *c, struct msg *m) {
  switch (m->type) {
  case MSG_PING: {
    struct msg p = {.type = MSG_PONG};
    p.pong.nonce = m->ping.nonce;
    agent_session_send(s, &p);
    break;
  }
  case MSG_PONG:
    break;
  case MSG_GOAWAY:
    core_log("the server closed the session: %s: %s", m->goaway.code,
             m->goaway.message ? m->goaway.message : "");
    if (goaway_is_final(&m->goaway))
      s->ops->on_revoked(s->ctx, "this device was revoked or unpaired; run `cordon-agent "
                                 "unpair`, then pair again");
    net_conn_close(c, 0);
    break;
  default:
    s->ops->on_message(s->ctx, m);
    break;
  }
}

static void on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct agent_session *s = net_conn_data(c);
  struct msg m;
  struct cordon_diag diag = {{0}};
  if (msg_decode(data, len, &m, &diag) < 0) {
    core_log("bad message from the server: %s", diag.msg);
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
  if (s->conn == c) {
    s->conn = NULL;
    if (s->ready)
      write_connection_state(s, false);
    s->ready = false;
  }
  if (err && !s->stopping)
    core_log("connection to %s:%d lost: %s", s->pairing->host, s->pairing->port,
             cordon_err_message(err));
  s->ops->on_lost(s->ctx);
  if (!s->stopping)
    schedule_connect(s);
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
  int r = net_connect(s->loop, s->pairing->host, s->pairing->port, s->priv, NOISE_MODE_SESSION,
                      &s->limits, &session_ops, s, &s->conn);
  if (r < 0) {
    s->conn = NULL;
    schedule_connect(s);
  }
}

static void schedule_connect(struct agent_session *s) {
  /* exponential backoff with jitter: the delay is within [b/2, b] */
  unsigned b = s->backoff_ms ? s->backoff_ms : BACKOFF_FIRST_MS;
  s->backoff_ms = b * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b * 2;
  unsigned delay = b / 2 + randombytes_uniform(b / 2 + 1);
  uv_timer_start(&s->retry, do_connect, delay, 0);
}

void agent_session_init(struct agent_session *s, uv_loop_t *loop, const struct agent_config *cfg,
                        const struct agent_pairing *pairing, const struct agent_facts *facts,
                        const uint8_t *priv, const struct agent_session_ops *ops, void *ctx) {
  memset(s, 0, sizeof(*s));
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

void agent_session_close(struct agent_session *s) {
  s->stopping = true;
  uv_timer_stop(&s->retry);
  uv_close((uv_handle_t *)&s->retry, NULL);
  if (s->conn)
    net_conn_close(s->conn, 0);
}

void agent_session_release(struct agent_session *s) {
  write_connection_state(s, false);
}
