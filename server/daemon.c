#include "server/daemon.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/msg.h"
#include "proto/pairing.h"
#include "server/daemon_internal.h"
#include "server/db.h"
#include "server/keys.h"

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("cordon-server: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void daemon_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("cordon-server: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

uint64_t daemon_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int session_send(struct session *s, const struct msg *m) {
  uint8_t *buf;
  size_t len;
  struct cordon_diag diag = {{0}};
  int r = msg_encode_alloc(m, &buf, &len, &diag);
  if (r < 0) {
    daemon_log("cannot encode %s: %s", msg_type_name(m->type), diag.msg);
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

struct session *daemon_find_session(struct daemon *d, const char *device_id) {
  for (struct session *s = d->sessions; s; s = s->next)
    if (s->state == SESSION_ACTIVE && !s->closing && strcmp(s->device_id, device_id) == 0)
      return s;
  return NULL;
}

/* ---- pairing ---- */

static bool pair_rate_ok(struct daemon *d, const char *addr) {
  uint64_t now = daemon_now_ms();
  struct pair_rate *free_slot = NULL, *oldest = &d->pair_rates[0];
  for (size_t i = 0; i < DAEMON_PAIR_RATE_SLOTS; i++) {
    struct pair_rate *p = &d->pair_rates[i];
    if (p->addr[0] && strcmp(p->addr, addr) == 0) {
      if (now - p->window_start > SERVER_PAIR_RATE_WINDOW_MS) {
        p->window_start = now;
        p->count = 0;
      }
      return ++p->count <= SERVER_PAIR_RATE_MAX;
    }
    if (!p->addr[0] && !free_slot)
      free_slot = p;
    if (p->window_start < oldest->window_start)
      oldest = p;
  }
  struct pair_rate *p = free_slot ? free_slot : oldest;
  snprintf(p->addr, sizeof(p->addr), "%s", addr);
  p->window_start = now;
  p->count = 1;
  return true;
}

static void pairing_failed(struct session *s) {
  session_goaway(s, MSG_GOAWAY_PAIRING_FAILED, "pairing failed");
}

static void handle_pair_hello(struct session *s, struct msg_hello *h) {
  struct daemon *d = s->d;
  /* Every failure looks the same to the agent: a server proof under a key
   * it cannot match. The real code key is used only when the code is usable. */
  randombytes_buf(s->code_key, sizeof(s->code_key));
  s->code_real = false;
  if (!pair_rate_ok(d, net_conn_peer(s->conn))) {
    daemon_log("pairing from %s: rate limited", net_conn_peer(s->conn));
  } else if (h->pair_code && strlen(h->pair_code) < sizeof(s->code_id)) {
    struct server_db_code code;
    if (server_db_code_lookup(d->db, h->pair_code, &code, NULL) == 0) {
      if (code.usable) {
        memcpy(s->code_key, code.key, sizeof(s->code_key));
        snprintf(s->code_id, sizeof(s->code_id), "%s", h->pair_code);
        s->code_real = true;
      }
      server_db_code_wipe(&code);
    }
  }
  s->pair_name = strdup(h->name ? h->name : "device");
  s->pair_platform = strdup(h->platform);
  s->pair_level = (enum sandbox_level)h->best_level;
  s->pair_reason = h->downgrade_reason ? strdup(h->downgrade_reason) : NULL;
  s->pair_max_jobs = (int)h->max_jobs;
  uint8_t hh[NOISE_HASH_LEN];
  net_conn_handshake_hash(s->conn, hh);
  struct msg m = {.type = MSG_PAIR_PROOF};
  m.pair_proof.role = MSG_ROLE_SERVER;
  pairing_mac(s->code_key, PAIRING_ROLE_SERVER, hh, m.pair_proof.mac);
  s->state = SESSION_PAIR_PROOF;
  (void)session_send(s, &m);
}

static void handle_pair_proof(struct session *s, struct msg_pair_proof *p) {
  struct daemon *d = s->d;
  uint8_t hh[NOISE_HASH_LEN];
  net_conn_handshake_hash(s->conn, hh);
  if (p->role != MSG_ROLE_AGENT || !s->code_real ||
      pairing_mac_verify(s->code_key, PAIRING_ROLE_AGENT, hh, p->mac) < 0) {
    pairing_failed(s); /* the attempt is counted when the session closes */
    return;
  }
  uint8_t key[NOISE_KEY_LEN];
  net_conn_remote_key(s->conn, key);
  struct server_db_device_info info = {
      .name = s->pair_name,
      .platform = s->pair_platform,
      .has_level = true,
      .best_level = s->pair_level,
      .downgrade_reason = s->pair_reason,
      .max_jobs = s->pair_max_jobs,
  };
  char device_id[CORDON_ID_HEX_SIZE];
  int64_t user_id;
  struct cordon_diag diag = {{0}};
  int r = server_db_pair_complete(d->db, s->code_id, key, &info, device_id, &user_id, &diag);
  if (r < 0) {
    daemon_log("pairing from %s: %s", net_conn_peer(s->conn), diag.msg);
    pairing_failed(s);
    return;
  }
  s->code_done = true;
  struct server_db_user user;
  if (server_db_user_get(d->db, user_id, &user, NULL) < 0)
    snprintf(user.name, sizeof(user.name), "?");
  struct msg m = {.type = MSG_PAIR_DONE};
  sodium_hex2bin(m.pair_done.device_id, CORDON_ID_LEN, device_id, strlen(device_id), NULL, NULL, NULL);
  m.pair_done.user = user.name;
  m.pair_done.name = s->pair_name;
  m.pair_done.platform = s->pair_platform;
  memcpy(m.pair_done.ticket_key, d->ticket_pk, MSG_KEY_LEN);
  m.pair_done.publisher_keys = &d->publisher_pk;
  m.pair_done.n_publisher_keys = 1;
  char sas[PAIRING_SAS_LEN];
  pairing_sas(hh, sas);
  daemon_log("paired device %s (%s) for user %s; authentication string %s", device_id, s->pair_name,
             user.name, sas);
  (void)session_send(s, &m);
  s->state = SESSION_DONE;
}

/* ---- sessions ---- */

static void handle_session_hello(struct session *s, struct msg_hello *h) {
  struct daemon *d = s->d;
  uint8_t key[NOISE_KEY_LEN];
  net_conn_remote_key(s->conn, key);
  struct server_db_device dev;
  if (server_db_device_get_by_key(d->db, key, &dev, NULL) < 0) {
    session_goaway(s, MSG_GOAWAY_UNPAIRED, "this device is not paired with this server");
    return;
  }
  char hex[CORDON_ID_HEX_SIZE];
  sodium_bin2hex(hex, sizeof(hex), h->device_id, CORDON_ID_LEN);
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
  struct session *old = daemon_find_session(d, dev.id);
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
  server_db_device_update_info(d->db, dev.id, &info, NULL);
  server_db_device_set_online(d->db, dev.id, true, NULL);
  server_db_device_release(&dev);
  s->state = SESSION_ACTIVE;
  struct msg w = {.type = MSG_WELCOME};
  w.welcome = s->welcome;
  (void)session_send(s, &w);
  daemon_log("device %s (%s) connected from %s", s->device_id, s->user, net_conn_peer(s->conn));
}

static void on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct session *s = net_conn_data(c);
  struct msg m;
  struct cordon_diag diag = {{0}};
  int r = msg_decode(data, len, &m, &diag);
  if (r < 0) {
    daemon_log("%s: %s", net_conn_peer(c), diag.msg[0] ? diag.msg : cordon_err_message(r));
    session_goaway(s, MSG_GOAWAY_PROTOCOL, "malformed message");
    return;
  }
  if (!(msg_type_senders(m.type) & MSG_FROM_AGENT)) {
    session_goaway(s, MSG_GOAWAY_PROTOCOL, "unexpected message");
    goto out;
  }
  if (s->state == SESSION_HELLO) {
    if (m.type != MSG_HELLO) {
      session_goaway(s, MSG_GOAWAY_PROTOCOL, "expected hello");
      goto out;
    }
    uint16_t v;
    if (msg_version_choose(m.hello.proto_min, m.hello.proto_max, MSG_PROTO_VERSION_MIN,
                           MSG_PROTO_VERSION_MAX, &v) < 0) {
      char why[96];
      snprintf(why, sizeof(why), "server speaks protocol versions %d..%d", MSG_PROTO_VERSION_MIN,
               MSG_PROTO_VERSION_MAX);
      session_goaway(s, MSG_GOAWAY_VERSION_UNSUPPORTED, why);
      goto out;
    }
    struct msg w = {.type = MSG_WELCOME};
    w.welcome.version = v;
    w.welcome.time_ms = daemon_now_ms();
    memcpy(w.welcome.server_id, s->d->server_id, CORDON_ID_LEN);
    memcpy(w.welcome.session_id, s->session_id, CORDON_ID_LEN);
    w.welcome.ping_ms = SERVER_PING_MS;
    bool pairing = net_conn_mode(c) == NOISE_MODE_PAIRING;
    if (!pairing) {
      /* welcome only once the device is known: handle_session_hello */
      s->welcome = w.welcome;
      handle_session_hello(s, &m.hello);
    } else {
      (void)session_send(s, &w);
      handle_pair_hello(s, &m.hello);
    }
    goto out;
  }
  if (m.type == MSG_PING) {
    struct msg p = {.type = MSG_PONG};
    p.pong.nonce = m.ping.nonce;
    (void)session_send(s, &p);
    if (s->state == SESSION_ACTIVE)
      server_db_device_touch(s->d->db, s->device_id, NULL);
    goto out;
  }
  if (m.type == MSG_PONG || m.type == MSG_GOAWAY || m.type == MSG_ERROR) {
    if (m.type == MSG_GOAWAY)
      net_conn_close(c, 0);
    goto out;
  }
  if (s->state == SESSION_PAIR_PROOF && m.type == MSG_PAIR_PROOF) {
    handle_pair_proof(s, &m.pair_proof);
    goto out;
  }
  if (s->state == SESSION_ACTIVE) {
    daemon_session_message(s, &m);
    goto out;
  }
  session_goaway(s, MSG_GOAWAY_PROTOCOL, "unexpected message");
out:
  msg_release(&m);
}

static int on_ready(struct net_conn *c) {
  struct daemon *d = net_server_data(net_conn_server(c));
  struct session *s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  s->d = d;
  s->conn = c;
  s->state = SESSION_HELLO;
  randombytes_buf(s->session_id, sizeof(s->session_id));
  s->next = d->sessions;
  d->sessions = s;
  net_conn_set_data(c, s);
  return 0;
}

static void on_close(struct net_conn *c, int err) {
  struct session *s = net_conn_data(c);
  if (!s)
    return;
  struct daemon *d = s->d;
  if (s->state == SESSION_ACTIVE) {
    daemon_session_closed(s);
    /* only if no newer session took over */
    bool other = false;
    for (struct session *o = d->sessions; o; o = o->next)
      if (o != s && o->state == SESSION_ACTIVE && !o->closing &&
          strcmp(o->device_id, s->device_id) == 0)
        other = true;
    if (!other)
      server_db_device_set_online(d->db, s->device_id, false, NULL);
    daemon_log("device %s disconnected%s%s", s->device_id, err ? ": " : "",
               err ? cordon_err_message(err) : "");
  }
  if (s->code_real && !s->code_done) /* a pairing attempt that did not succeed */
    server_db_code_fail(d->db, s->code_id, NULL, NULL);
  sodium_memzero(s->code_key, sizeof(s->code_key));
  for (struct session **pp = &d->sessions; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  free(s->pair_name);
  free(s->pair_platform);
  free(s->pair_reason);
  free(s);
}

static const struct net_conn_ops server_ops = {
    .on_ready = on_ready,
    .on_record = on_record,
    .on_close = on_close,
};

/* ---- admin socket ---- */

struct admin_client {
  uv_pipe_t pipe;
  struct daemon *d;
  char buf[8192];
  size_t len;
  bool responded;
};

static void admin_closed(uv_handle_t *h) {
  free(h->data);
}

static void admin_write_done(uv_write_t *req, int status) {
  (void)status;
  struct admin_client *a = req->data;
  free(req);
  uv_close((uv_handle_t *)&a->pipe, admin_closed);
}

void admin_reply(struct admin_client *a, json_t *resp) {
  char *text = json_dumps(resp, JSON_COMPACT);
  json_decref(resp);
  size_t n = text ? strlen(text) : 0;
  uv_write_t *req = malloc(sizeof(*req) + n + 1);
  if (!text || !req) {
    free(text);
    free(req);
    uv_close((uv_handle_t *)&a->pipe, admin_closed);
    return;
  }
  char *copy = (char *)(req + 1);
  memcpy(copy, text, n);
  copy[n] = '\n';
  free(text);
  req->data = a;
  a->responded = true;
  uv_buf_t b = uv_buf_init(copy, (unsigned)n + 1);
  if (uv_write(req, (uv_stream_t *)&a->pipe, &b, 1, admin_write_done) < 0) {
    free(req);
    uv_close((uv_handle_t *)&a->pipe, admin_closed);
  }
}

json_t *admin_error(int err, const char *message) {
  return json_pack("{s:b, s:s, s:s}", "ok", 0, "code", cordon_err_name(err), "message", message);
}

static void admin_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct admin_client *a = h->data;
  (void)suggested;
  buf->base = a->buf + a->len;
  buf->len = sizeof(a->buf) - 1 - a->len;
}

static void admin_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  struct admin_client *a = st->data;
  (void)buf;
  if (nread < 0 || a->responded) {
    if (!a->responded) {
      uv_close((uv_handle_t *)&a->pipe, admin_closed);
    }
    return;
  }
  a->len += (size_t)nread;
  a->buf[a->len] = '\0';
  char *nl = memchr(a->buf, '\n', a->len);
  if (!nl) {
    if (a->len >= sizeof(a->buf) - 1)
      admin_reply(a, admin_error(CORDON_E_LIMIT, "request too long"));
    return;
  }
  *nl = '\0';
  uv_read_stop(st);
  json_error_t je;
  json_t *req = json_loads(a->buf, JSON_REJECT_DUPLICATES, &je);
  if (!req || !json_is_object(req)) {
    json_decref(req);
    admin_reply(a, admin_error(CORDON_E_USAGE, "request is not a JSON object"));
    return;
  }
  daemon_admin_request(a->d, a, req);
  json_decref(req);
}

static void admin_connection(uv_stream_t *server, int status) {
  struct daemon *d = server->data;
  if (status < 0)
    return;
  struct admin_client *a = calloc(1, sizeof(*a));
  if (!a)
    return;
  a->d = d;
  uv_pipe_init(d->loop, &a->pipe, 0);
  a->pipe.data = a;
  if (uv_accept(server, (uv_stream_t *)&a->pipe) < 0) {
    uv_close((uv_handle_t *)&a->pipe, admin_closed);
    return;
  }
  /* only the daemon's own user may talk to it */
  uv_os_fd_t fd;
  struct ucred cred;
  socklen_t cl = sizeof(cred);
  if (uv_fileno((uv_handle_t *)&a->pipe, &fd) < 0 ||
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.uid != geteuid()) {
    uv_close((uv_handle_t *)&a->pipe, admin_closed);
    return;
  }
  uv_read_start((uv_stream_t *)&a->pipe, admin_alloc, admin_read);
}

/* ---- lifecycle ---- */

static void on_signal(uv_signal_t *sig, int signum) {
  struct daemon *d = sig->data;
  daemon_log("signal %d: shutting down", signum);
  daemon_shutdown(d);
}

void daemon_shutdown(struct daemon *d) {
  if (d->stopping)
    return;
  d->stopping = true;
  for (struct session *s = d->sessions; s; s = s->next)
    if (s->state == SESSION_ACTIVE) {
      struct msg m = {.type = MSG_GOAWAY};
      m.goaway.code = MSG_GOAWAY_SHUTDOWN;
      m.goaway.message = "the server is shutting down";
      (void)session_send(s, &m);
    }
  net_server_close(d->srv);
  uv_close((uv_handle_t *)&d->admin, NULL);
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
  daemon_jobs_shutdown(d);
}

static int load_keys(struct daemon *d, struct cordon_diag *diag) {
  char path[4096];
  uint8_t *seed = NULL;
  snprintf(path, sizeof(path), "%s/%s", d->state_dir, SERVER_NOISE_KEY_FILE);
  int r = keys_read_file(path, KEYFILE_NOISE_SECRET, &d->noise_priv, diag);
  if (r < 0)
    return r;
  snprintf(path, sizeof(path), "%s/%s", d->state_dir, SERVER_TICKET_KEY_FILE);
  r = keys_read_file(path, KEYFILE_TICKET_SECRET, &seed, diag);
  if (r < 0)
    return r;
  d->ticket_sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
  if (!d->ticket_sk) {
    sodium_free(seed);
    return -ENOMEM;
  }
  crypto_sign_seed_keypair(d->ticket_pk, d->ticket_sk, seed);
  sodium_free(seed);
  snprintf(path, sizeof(path), "%s/%s", d->state_dir, SERVER_PUBLISHER_PUB_FILE);
  uint8_t *pub = NULL;
  r = keys_read_file(path, KEYFILE_PUBLISHER_PUBLIC, &pub, diag);
  if (r < 0)
    return r;
  memcpy(d->publisher_pk, pub, 32);
  sodium_free(pub);
  /* the server id: stable, derived from its Noise public key */
  uint8_t npub[NOISE_KEY_LEN];
  noise_public_key(d->noise_priv, npub);
  crypto_generichash(d->server_id, sizeof(d->server_id), npub, sizeof(npub), NULL, 0);
  return 0;
}

int daemon_run(const struct daemon_options *opt, struct cordon_diag *diag) {
  struct daemon *d = calloc(1, sizeof(*d));
  if (!d)
    return -ENOMEM;
  d->state_dir = opt->state_dir;
  d->job_grace_s = opt->job_grace_s ? opt->job_grace_s : 120;
  if (opt->limits)
    d->limits = *opt->limits;
  else
    net_limits_default(&d->limits);
  d->limits.quiet_ms = SERVER_PING_MS * 2;
  d->limits.idle_ms = SERVER_PING_MS * 4;
  int r = load_keys(d, diag);
  if (r == 0)
    r = server_db_open(d->state_dir, 0, &d->db, diag);
  if (r == 0)
    r = server_db_device_set_all_offline(d->db, diag);
  if (r < 0)
    goto out_free;
  d->loop = malloc(sizeof(*d->loop));
  if (!d->loop || uv_loop_init(d->loop) < 0) {
    free(d->loop);
    d->loop = NULL;
    r = -ENOMEM;
    goto out_free;
  }
  r = net_server_new(d->loop, opt->host, opt->port, d->noise_priv,
                     (1u << NOISE_MODE_SESSION) | (1u << NOISE_MODE_PAIRING), &d->limits,
                     &server_ops, d, &d->srv);
  if (r < 0) {
    cordon_diag_set(diag, r, "cannot listen on %s:%d: %s", opt->host, opt->port, strerror(-r));
    goto out_loop;
  }
  char sock[4096];
  snprintf(sock, sizeof(sock), "%s/%s", d->state_dir, SERVER_ADMIN_SOCKET);
  unlink(sock);
  uv_pipe_init(d->loop, &d->admin, 0);
  d->admin.data = d;
  mode_t old = umask(0177);
  r = uv_pipe_bind(&d->admin, sock);
  umask(old);
  if (r == 0)
    r = uv_listen((uv_stream_t *)&d->admin, 16, admin_connection);
  if (r < 0) {
    cordon_diag_set(diag, -EIO, "cannot bind the admin socket %s: %s", sock, uv_strerror(r));
    d->stopping = true;
    net_server_close(d->srv);
    uv_close((uv_handle_t *)&d->admin, NULL);
    uv_run(d->loop, UV_RUN_DEFAULT);
    r = -EIO;
    goto out_loop;
  }
  uv_signal_init(d->loop, &d->sigterm);
  uv_signal_init(d->loop, &d->sigint);
  d->sigterm.data = d->sigint.data = d;
  uv_signal_start(&d->sigterm, on_signal, SIGTERM);
  uv_signal_start(&d->sigint, on_signal, SIGINT);
  signal(SIGPIPE, SIG_IGN);
  daemon_jobs_start(d);
  log_line("listening on %s:%d (state %s)", opt->host, net_server_port(d->srv), d->state_dir);
  uv_run(d->loop, UV_RUN_DEFAULT);
  unlink(sock);
  r = uv_loop_close(d->loop);
  if (r != 0) {
    cordon_diag_set(diag, CORDON_E_INTERNAL, "event loop did not close cleanly: %s",
                    uv_strerror(r));
    r = CORDON_E_INTERNAL;
  }
out_loop:
  if (r != CORDON_E_INTERNAL)
    free(d->loop);
out_free:
  server_db_close(d->db);
  sodium_free(d->noise_priv);
  sodium_free(d->ticket_sk);
  free(d);
  return r;
}
