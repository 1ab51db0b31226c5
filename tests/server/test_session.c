/* Tests for server/session.c's table of sessions: the real listener
 * (net/conn.c with sessions_net_ops) on loopback, a real database, and
 * many devices connecting as agents do (Noise session, hello); the table's
 * index must answer sessions_find exactly after sessions are added,
 * replaced by a newer one of the same device, and closed. */
#include <criterion/criterion.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/id.h"
#include "core/log.h"
#include "net/conn.h"
#include "proto/msg.h"
#include "proto/noise.h"
#include "server/db.h"
#include "server/session.h"

#define N_DEV 150 /* more than the index's first 64 buckets, twice over */

static char state_dir[256];
static uv_loop_t loop;
static uv_timer_t watch;

struct dev {
  uint8_t pub[NOISE_KEY_LEN], priv[NOISE_KEY_LEN];
  char id[CORDON_ID_HEX_SIZE];
};

/* One agent connection of a device. */
struct peer {
  struct dev *dev;
  struct net_conn *c;
  bool welcomed, closed;
  uint8_t session_id[CORDON_ID_LEN]; /* from the welcome */
  char goaway[32];
};

static struct dev devs[N_DEV];
static struct peer first[N_DEV], second[N_DEV];
static int n_closed_hook, n_online_hook;
static struct sessions *table;
/* closing sessions that sessions_find still returned, or counted, when
 * their connection closed */
static int found_closing;
static size_t most_at_close;

static void on_watch(uv_timer_t *t) {
  (void)t;
}

static void setup(void) {
  signal(SIGPIPE, SIG_IGN);
  core_log_set_level(CORE_LOG_WARN); /* a line per connect and disconnect otherwise */
  cr_assert(sodium_init() >= 0);
  snprintf(state_dir, sizeof(state_dir), "/tmp/cordon-test-session-XXXXXX");
  cr_assert_not_null(mkdtemp(state_dir));
  cr_assert_eq(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &watch);
  uv_timer_start(&watch, on_watch, 1, 1);
}

static void teardown(void) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state_dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(session, .init = setup, .fini = teardown, .timeout = 120);

static uint64_t now_ms(void) {
  return uv_hrtime() / 1000000u;
}

#define RUN_UNTIL(cond, ms)                                                                        \
  ({                                                                                               \
    uint64_t dl_ = now_ms() + (ms);                                                                \
    while (!(cond) && now_ms() < dl_)                                                              \
      uv_run(&loop, UV_RUN_ONCE);                                                                  \
    (bool)(cond);                                                                                  \
  })

/* ---- the agent side ---------------------------------------------------- */

static int peer_ready(struct net_conn *c) {
  struct peer *p = net_conn_data(c);
  struct msg m = {.type = MSG_HELLO};
  m.hello.proto_min = MSG_PROTO_VERSION_MIN;
  m.hello.proto_max = MSG_PROTO_VERSION_MAX;
  m.hello.agent_version = "test";
  m.hello.has_device_id = true;
  cr_assert_eq(cordon_id_from_hex(p->dev->id, m.hello.device_id), 0);
  m.hello.platform = "linux";
  m.hello.best_level = MSG_LEVEL_ISOLATED;
  m.hello.max_jobs = 1;
  uint8_t *buf;
  size_t len;
  cr_assert_eq(msg_encode_alloc(&m, &buf, &len, NULL), 0);
  int r = net_conn_send(c, buf, len);
  free(buf);
  return r;
}

static void peer_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct peer *p = net_conn_data(c);
  struct msg m;
  cr_assert_eq(msg_decode(data, len, &m, NULL), 0);
  if (m.type == MSG_WELCOME) {
    p->welcomed = true;
    memcpy(p->session_id, m.welcome.session_id, CORDON_ID_LEN);
  } else if (m.type == MSG_GOAWAY) {
    snprintf(p->goaway, sizeof(p->goaway), "%s", m.goaway.code);
  }
  msg_release(&m);
}

static void peer_close(struct net_conn *c, int err) {
  (void)err;
  struct peer *p = net_conn_data(c);
  p->closed = true;
  p->c = NULL;
}

static const struct net_conn_ops peer_ops = {
    .on_ready = peer_ready, .on_record = peer_record, .on_close = peer_close};

static uint8_t server_pub[NOISE_KEY_LEN], server_priv[NOISE_KEY_LEN];

static void peer_connect(struct peer *p, struct dev *d, int port) {
  memset(p, 0, sizeof(*p));
  p->dev = d;
  struct net_limits l;
  net_limits_default(&l);
  cr_assert_eq(
      net_connect(&loop, "127.0.0.1", port, d->priv, NOISE_MODE_SESSION, &l, &peer_ops, p, &p->c),
      0);
}

/* ---- the server's hooks (pairing and jobs are not part of this) -------- */

static bool hook_message(void *data, struct session *s, struct msg *m) {
  (void)data, (void)s, (void)m;
  return false;
}

static void hook_closed(void *data, struct session *s) {
  (void)data;
  n_closed_hook++;
  if (s->state == SESSION_ACTIVE && s->closing) {
    found_closing += sessions_find(table, s->device_id) == s;
    if (sessions_count(table) > most_at_close)
      most_at_close = sessions_count(table);
  }
}

/* A message only the server may send: the server answers with a goaway. */
static void peer_send_welcome(struct peer *p) {
  struct msg m = {.type = MSG_WELCOME};
  m.welcome.version = MSG_PROTO_VERSION_MAX;
  m.welcome.ping_ms = 15000;
  uint8_t *buf;
  size_t len;
  cr_assert_eq(msg_encode_alloc(&m, &buf, &len, NULL), 0);
  cr_assert_eq(net_conn_send(p->c, buf, len), 0);
  free(buf);
}

static void hook_online(void *data, struct session *s) {
  (void)data, (void)s;
  n_online_hook++;
}

static void count_one(struct session *s, void *data) {
  (void)s;
  (*(size_t *)data)++;
}

static bool db_online(struct server_db *db, const char *id) {
  struct server_db_device dev;
  cr_assert_eq(server_db_device_get(db, id, &dev, NULL), 0);
  bool online = dev.online;
  server_db_device_release(&dev);
  return online;
}

static int count_welcomed(struct peer *ps, int step) {
  int n = 0;
  for (int i = 0; i < N_DEV; i += step)
    n += ps[i].welcomed;
  return n;
}

Test(session, find_is_exact_after_add_replace_and_close) {
  struct server_db *db = NULL;
  cr_assert_eq(server_db_open(state_dir, SERVER_DB_CREATE, &db, NULL), 0);
  int64_t user = 0;
  cr_assert_eq(server_db_user_add(db, "alice", &user, NULL), 0);
  const struct server_db_device_info info = {.name = "d", .platform = "linux", .max_jobs = 1};
  for (int i = 0; i < N_DEV; i++) {
    cr_assert_eq(noise_keypair_generate(devs[i].pub, devs[i].priv), 0);
    cr_assert_eq(server_db_device_add(db, user, devs[i].pub, &info, devs[i].id, NULL), 0);
  }
  uint8_t server_id[CORDON_ID_LEN];
  cordon_id_random(server_id);
  struct session_hooks hooks = {
      .message = hook_message, .closed = hook_closed, .online = hook_online};
  struct sessions *t = NULL;
  cr_assert_eq(sessions_new(db, server_id, &hooks, &t), 0);
  table = t;
  cr_assert_eq(noise_keypair_generate(server_pub, server_priv), 0);
  struct net_limits l;
  net_limits_default(&l);
  l.max_per_addr = 1000; /* every device connects from 127.0.0.1 at once */
  struct net_server *srv = NULL;
  cr_assert_eq(net_server_new(&loop, "127.0.0.1", 0, server_priv, 1u << NOISE_MODE_SESSION, &l,
                              &sessions_net_ops, t, &srv),
               0);
  int port = net_server_port(srv);

  /* added: each device's session is found, and nothing else */
  for (int i = 0; i < N_DEV; i++)
    peer_connect(&first[i], &devs[i], port);
  cr_assert(RUN_UNTIL(count_welcomed(first, 1) == N_DEV, 30000), "%d welcomed",
            count_welcomed(first, 1));
  cr_assert_eq(sessions_count(t), N_DEV);
  cr_assert_eq(n_online_hook, N_DEV);
  for (int i = 0; i < N_DEV; i++) {
    struct session *s = sessions_find(t, devs[i].id);
    cr_assert_not_null(s, "device %d not found", i);
    cr_assert_str_eq(s->device_id, devs[i].id);
    cr_assert_eq(memcmp(s->session_id, first[i].session_id, CORDON_ID_LEN), 0);
  }
  char unknown[CORDON_ID_HEX_SIZE];
  uint8_t raw[CORDON_ID_LEN];
  cordon_id_random(raw);
  cordon_id_to_hex(raw, unknown);
  cr_assert_null(sessions_find(t, unknown));

  /* replaced: every third device connects again; the newer session is the
   * one found, the older is told and closed */
  for (int i = 0; i < N_DEV; i += 3)
    peer_connect(&second[i], &devs[i], port);
  int n_second = (N_DEV + 2) / 3;
  cr_assert(RUN_UNTIL(({
                        int done = 0;
                        for (int i = 0; i < N_DEV; i += 3)
                          done += second[i].welcomed && first[i].closed;
                        done == n_second;
                      }),
                      30000));
  cr_assert_eq(sessions_count(t), N_DEV);
  for (int i = 0; i < N_DEV; i++) {
    struct session *s = sessions_find(t, devs[i].id);
    struct peer *now = i % 3 == 0 ? &second[i] : &first[i];
    cr_assert_not_null(s, "device %d not found", i);
    cr_assert_eq(memcmp(s->session_id, now->session_id, CORDON_ID_LEN), 0,
                 "device %d: not its newest session", i);
    if (i % 3 == 0)
      cr_assert_str_eq(first[i].goaway, MSG_GOAWAY_REPLACED);
    /* the older session's close left the device online */
    cr_assert(db_online(db, devs[i].id), "device %d offline", i);
  }
  /* an older session was no longer found nor counted once replaced */
  cr_assert_eq(found_closing, 0);
  cr_assert_leq(most_at_close, N_DEV);

  /* closed: every second device leaves (the newest session, whichever);
   * it is no longer found and is offline, the others are untouched */
  int closed_before = n_closed_hook, n_left = 0;
  for (int i = 0; i < N_DEV; i += 2) {
    struct peer *now = i % 3 == 0 ? &second[i] : &first[i];
    net_conn_close(now->c, 0);
    n_left++;
  }
  cr_assert(RUN_UNTIL(n_closed_hook == closed_before + n_left, 10000));
  cr_assert_eq(sessions_count(t), (size_t)(N_DEV - n_left));
  size_t visited = 0;
  sessions_foreach(t, count_one, &visited);
  cr_assert_eq(visited, (size_t)(N_DEV - n_left));
  for (int i = 0; i < N_DEV; i++) {
    struct session *s = sessions_find(t, devs[i].id);
    if (i % 2 == 0) {
      cr_assert_null(s, "device %d still found", i);
      cr_assert_not(db_online(db, devs[i].id), "device %d online", i);
    } else {
      struct peer *now = i % 3 == 0 ? &second[i] : &first[i];
      cr_assert_not_null(s, "device %d not found", i);
      cr_assert_eq(memcmp(s->session_id, now->session_id, CORDON_ID_LEN), 0);
    }
  }

  /* sent away: a session the server closes for a protocol error is no
   * longer found from the goaway on */
  int sent_away[] = {1, 7, 13};
  closed_before = n_closed_hook;
  for (size_t k = 0; k < 3; k++)
    peer_send_welcome(&first[sent_away[k]]);
  cr_assert(RUN_UNTIL(n_closed_hook == closed_before + 3 && first[1].closed && first[7].closed &&
                          first[13].closed,
                      10000));
  n_left += 3;
  cr_assert_eq(found_closing, 0);
  cr_assert_eq(sessions_count(t), (size_t)(N_DEV - n_left));
  for (size_t k = 0; k < 3; k++) {
    int i = sent_away[k];
    cr_assert_null(sessions_find(t, devs[i].id), "device %d still found", i);
    cr_assert_str_eq(first[i].goaway, MSG_GOAWAY_PROTOCOL);
    cr_assert_not(db_online(db, devs[i].id), "device %d online", i);
  }

  /* and back: a device that left connects again and is found */
  struct peer again;
  peer_connect(&again, &devs[0], port);
  cr_assert(RUN_UNTIL(again.welcomed, 10000));
  struct session *s = sessions_find(t, devs[0].id);
  cr_assert_not_null(s);
  cr_assert_eq(memcmp(s->session_id, again.session_id, CORDON_ID_LEN), 0);
  cr_assert_eq(sessions_count(t), (size_t)(N_DEV - n_left + 1));

  net_server_close(srv);
  uv_close((uv_handle_t *)&watch, NULL);
  cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
  cr_assert_eq(uv_loop_close(&loop), 0);
  cr_assert_eq(sessions_count(t), 0);
  sessions_free(t);
  server_db_close(db);
}
