/* Agents' sessions (server/session.h). */
#include "server/session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"

struct sessions {
  struct server_db *db;
  const uint8_t *server_id;
  struct session_hooks hooks;
  struct session *list;
};

int sessions_new(struct server_db *db, const uint8_t *server_id, const struct session_hooks *hooks,
                 struct sessions **out_sessions) {
  struct sessions *t = calloc(1, sizeof(*t));
  if (!t)
    return -ENOMEM;
  t->db = db;
  t->server_id = server_id;
  t->hooks = *hooks;
  *out_sessions = t;
  return 0;
}

void sessions_free(struct sessions *t) {
  free(t);
}

int session_send(struct session *s, const struct msg *m) {
  uint8_t *buf;
  size_t len;
  struct cordon_diag diag = {{0}};
  int r = msg_encode_alloc(m, &buf, &len, &diag);
  if (r < 0) {
    core_log("cannot encode %s: %s", msg_type_name(m->type), diag.msg);
    return r;
  }
  r = net_conn_send(s->conn, buf, len);
  free(buf);
  return r;
}

void session_goaway(struct session *s, const char *code, const char *message) {
  struct msg m = {.type = MSG_GOAWAY};
  m.goaway.code = (char *)code;
  m.goaway.message = (char *)message;
  (void)session_send(s, &m);
  s->closing = true;
  net_conn_flush_close(s->conn, 0); /* the goaway must reach the agent */
}

struct session *sessions_find(struct sessions *t, const char *device_id) {
  for (struct session *s = t->list; s; s = s->next)
    if (s->state == SESSION_ACTIVE && !s->closing && strcmp(s->device_id, device_id) == 0)
      return s;
  return NULL;
}

void sessions_shutdown(struct sessions *t) {
  for (struct session *s = t->list; s; s = s->next)
    if (s->state == SESSION_ACTIVE) {
      struct msg m = {.type = MSG_GOAWAY};
      m.goaway.code = MSG_GOAWAY_SHUTDOWN;
      m.goaway.message = "the server is shutting down";
      (void)session_send(s, &m);
    }
}

/* A session-mode hello: the welcome goes out only once the device is known. */
static void device_hello(struct session *s, const struct msg_hello *h,
                         const struct msg_welcome *welcome) {
  struct sessions *t = s->owner;
  uint8_t key[NOISE_KEY_LEN];
  net_conn_remote_key(s->conn, key);
  struct server_db_device dev;
  if (server_db_device_get_by_key(t->db, key, &dev, NULL) < 0) {
    session_goaway(s, MSG_GOAWAY_UNPAIRED, "this device is not paired with this server");
    return;
  }
  char hex[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(h->device_id, hex);
  if (!h->has_device_id || strcmp(hex, dev.id) != 0) {
    server_db_device_release(&dev);
    session_goaway(s, MSG_GOAWAY_PROTOCOL, "device_id does not match the session key");
    return;
  }
  if (dev.state == SERVER_DB_DEVICE_REVOKED) {
    server_db_device_release(&dev);
    session_goaway(s, MSG_GOAWAY_REVOKED, "this device was revoked");
    return;
  }
  struct session *old = sessions_find(t, dev.id);
  if (old)
    session_goaway(old, MSG_GOAWAY_REPLACED, "a newer session of this device took over");
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
  };
  server_db_device_update_info(t->db, dev.id, &info, NULL);
  server_db_device_set_online(t->db, dev.id, true, NULL);
  server_db_device_release(&dev);
  s->state = SESSION_ACTIVE;
  struct msg w = {.type = MSG_WELCOME};
  w.welcome = *welcome;
  (void)session_send(s, &w);
  core_log("device %s (%s) connected from %s", s->device_id, s->user, net_conn_peer(s->conn));
  if (t->hooks.online)
    t->hooks.online(t->hooks.data, s);
}

static void on_hello(struct session *s, const struct msg_hello *h) {
  struct sessions *t = s->owner;
  uint16_t v;
  if (msg_version_choose(h->proto_min, h->proto_max, MSG_PROTO_VERSION_MIN, MSG_PROTO_VERSION_MAX,
                         &v) < 0) {
    char why[96];
    snprintf(why, sizeof(why), "server speaks protocol versions %d..%d", MSG_PROTO_VERSION_MIN,
             MSG_PROTO_VERSION_MAX);
    session_goaway(s, MSG_GOAWAY_VERSION_UNSUPPORTED, why);
    return;
  }
  struct msg w = {.type = MSG_WELCOME};
  w.welcome.version = v;
  w.welcome.time_ms = core_wall_ms();
  memcpy(w.welcome.server_id, t->server_id, CORDON_ID_LEN);
  memcpy(w.welcome.session_id, s->session_id, CORDON_ID_LEN);
  w.welcome.ping_ms = SERVER_PING_MS;
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
    server_db_device_revoke(t->db, s->device_id, NULL);
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
    (void)session_send(s, &p);
    if (s->state == SESSION_ACTIVE)
      server_db_device_touch(t->db, s->device_id, NULL);
    return;
  }
  if (m->type == MSG_PONG || m->type == MSG_GOAWAY || m->type == MSG_ERROR) {
    if (m->type == MSG_GOAWAY)
      net_conn_close(s->conn, 0);
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
    core_log("%s: %s", net_conn_peer(c), diag.msg[0] ? diag.msg : cordon_err_message(r));
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
  cordon_id_random(s->session_id);
  s->next = t->list;
  t->list = s;
  net_conn_set_data(c, s);
  return 0;
}

/* Silent for 2 * SERVER_PING_MS: ask (the pong is traffic). */
static void on_quiet(struct net_conn *c) {
  struct session *s = net_conn_data(c);
  if (!s || s->state == SESSION_HELLO)
    return;
  struct msg p = {.type = MSG_PING};
  p.ping.nonce = core_wall_ms();
  (void)session_send(s, &p);
}

static void on_close(struct net_conn *c, int err) {
  struct session *s = net_conn_data(c);
  if (!s)
    return;
  struct sessions *t = s->owner;
  if (s->state == SESSION_ACTIVE) {
    /* offline only if no newer session took over */
    bool other = false;
    for (struct session *o = t->list; o; o = o->next)
      if (o != s && o->state == SESSION_ACTIVE && !o->closing &&
          strcmp(o->device_id, s->device_id) == 0)
        other = true;
    if (!other)
      server_db_device_set_online(t->db, s->device_id, false, NULL);
    core_log("device %s disconnected%s%s", s->device_id, err ? ": " : "",
             err ? cordon_err_message(err) : "");
  }
  t->hooks.closed(t->hooks.data, s);
  for (struct session **pp = &t->list; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  free(s);
}

const struct net_conn_ops sessions_net_ops = {
    .on_ready = on_ready,
    .on_record = on_record,
    .on_quiet = on_quiet,
    .on_close = on_close,
};
