/* cordon-agent pair --server HOST:PORT --code CODE [--name NAME] */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/commands.h"
#include "agent/hello.h"
#include "agent/servers.h"
#include "agent/state.h"
#include "agent/trust.h"
#include "compat/posix.h"
#include "core/id.h"
#include "net/conn.h"
#include "proto/msg.h"
#include "proto/pairing.h"

struct pairing_run {
  const struct agent_config *cfg;
  struct agent_facts facts;
  char code_id[PAIRING_CODE_ID_CHARS + 1];
  uint8_t code_key[PAIRING_KEY_LEN];
  uint8_t *priv; /* sodium_malloc */
  const char *name;
  const char *host;
  int port;
  int state; /* 0 hello sent (or not yet), 1 welcome seen, 2 proof sent, 3 done */
  /* the welcome's servers list, stored once pair_done came (the server has
   * proved the code by then) */
  char servers[MSG_SERVERS_MAX][MSG_ADDR_MAX + 1];
  size_t n_servers;
  int err;
  char why[512];
};

static int send_msg(struct net_conn *c, const struct msg *m) {
  uint8_t *buf;
  size_t len;
  int r = msg_encode_alloc(m, &buf, &len, NULL);
  if (r < 0)
    return r;
  r = net_conn_send(c, buf, len);
  free(buf);
  return r;
}

static void fail(struct pairing_run *p, struct net_conn *c, int err, const char *why) {
  if (!p->err) {
    p->err = err;
    snprintf(p->why, sizeof(p->why), "%s", why);
  }
  net_conn_close(c, 0);
}

static int on_ready(struct net_conn *c) {
  struct pairing_run *p = net_conn_data(c);
  struct msg m;
  struct msg_fact wire[AGENT_FACTS_MAX];
  agent_hello_fill(&p->facts, p->cfg, wire, &m);
  m.hello.pair_code = p->code_id;
  m.hello.name = (char *)p->name;
  return send_msg(c, &m);
}

/* The cluster's addresses the pairing welcome listed, beside the pairing. */
static int save_servers(const struct pairing_run *p, const struct agent_pairing *rec,
                        struct cordon_diag *diag) {
  struct agent_servers known;
  agent_servers_init(&known, rec);
  char *list[MSG_SERVERS_MAX];
  for (size_t i = 0; i < p->n_servers; i++)
    list[i] = (char *)p->servers[i];
  if (!agent_servers_learn(&known, 0, list, p->n_servers))
    return 0;
  return agent_servers_save(p->cfg->dir, &known, diag);
}

static void on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct pairing_run *p = net_conn_data(c);
  struct msg m;
  struct cordon_diag diag = {{0}};
  if (msg_decode(data, len, &m, &diag) < 0) {
    fail(p, c, CORDON_E_PROTOCOL, diag.msg);
    return;
  }
  uint8_t h[NOISE_HASH_LEN];
  net_conn_handshake_hash(c, h);
  if (m.type == MSG_GOAWAY) {
    char why[512];
    snprintf(why, sizeof(why), "the server refused: %s%s%s", m.goaway.code,
             m.goaway.message ? ": " : "", m.goaway.message ? m.goaway.message : "");
    fail(p, c, CORDON_E_CRYPTO, why);
  } else if (p->state == 0 && m.type == MSG_WELCOME) {
    p->state = 1;
    for (size_t i = 0; i < m.welcome.n_servers && i < MSG_SERVERS_MAX; i++)
      snprintf(p->servers[p->n_servers++], sizeof(p->servers[0]), "%s", m.welcome.servers[i]);
  } else if (p->state == 1 && m.type == MSG_PAIR_PROOF && m.pair_proof.role == MSG_ROLE_SERVER) {
    if (pairing_mac_verify(p->code_key, PAIRING_ROLE_SERVER, h, m.pair_proof.mac) < 0) {
      fail(p, c, CORDON_E_CRYPTO,
           "the server could not prove it knows this code (a wrong, used or expired code, or "
           "not the server that minted it); nothing was sent");
    } else {
      struct msg proof = {.type = MSG_PAIR_PROOF};
      proof.pair_proof.role = MSG_ROLE_AGENT;
      pairing_mac(p->code_key, PAIRING_ROLE_AGENT, h, proof.pair_proof.mac);
      p->state = 2;
      if (send_msg(c, &proof) < 0)
        fail(p, c, -EPIPE, "connection lost");
    }
  } else if (p->state == 2 && m.type == MSG_PAIR_DONE) {
    struct agent_pairing rec = {0};
    snprintf(rec.host, sizeof(rec.host), "%s", p->host);
    rec.port = p->port;
    net_conn_remote_key(c, rec.server_key);
    memcpy(rec.device_id, m.pair_done.device_id, CORDON_ID_LEN);
    snprintf(rec.user, sizeof(rec.user), "%s", m.pair_done.user);
    snprintf(rec.name, sizeof(rec.name), "%s", m.pair_done.name);
    memcpy(rec.ticket_key, m.pair_done.ticket_key, 32);
    struct cordon_diag d2 = {{0}};
    int r = agent_pairing_save(p->cfg->dir, p->priv, &rec,
                               (const uint8_t(*)[32])m.pair_done.publisher_keys,
                               m.pair_done.n_publisher_keys, &d2);
    if (r == 0)
      r = save_servers(p, &rec, &d2);
    if (r < 0) {
      fail(p, c, r, d2.msg);
    } else {
      char sas[PAIRING_SAS_LEN], dev[CORDON_ID_HEX_SIZE];
      pairing_sas(h, sas);
      cordon_id_to_hex(rec.device_id, dev);
      fprintf(stderr,
              "cordon-agent: paired as device %s (%s) of user %s\n"
              "cordon-agent: authentication string %s — the server printed the same\n",
              dev, rec.name, rec.user, sas);
      p->state = 3;
      net_conn_close(c, 0);
    }
  } else {
    fail(p, c, CORDON_E_PROTOCOL, "unexpected message from the server");
  }
  msg_release(&m);
}

static void on_close(struct net_conn *c, int err) {
  struct pairing_run *p = net_conn_data(c);
  if (p->state != 3 && !p->err) {
    p->err = err ? agent_connect_error(err, p->state > 0) : -ECONNRESET;
    snprintf(p->why, sizeof(p->why), "connection to %s:%d closed: %s", p->host, p->port,
             !err            ? "by the server"
             : p->err != err ? "the peer does not speak the cordon protocol"
                             : cordon_err_message(err));
  }
}

static const struct net_conn_ops pair_ops = {
    .on_ready = on_ready, .on_record = on_record, .on_close = on_close};

int agent_parse_host_port(const char *s, char *host, size_t host_len, int *out_port) {
  const char *colon = strrchr(s, ':');
  if (!colon || colon == s || (size_t)(colon - s) >= host_len || !colon[1])
    return -1;
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port < 1 || port > 65535)
    return -1;
  memcpy(host, s, (size_t)(colon - s));
  host[colon - s] = '\0';
  *out_port = (int)port;
  return 0;
}

int agent_cmd_pair(const struct agent_config *cfg, const char *server, const char *code_arg,
                   const char *name) {
  char code[256];
  if (!server)
    return agent_usage("pair --server HOST:PORT --code CODE [--name NAME] (or the code on stdin)");
  if (!code_arg) { /* from stdin: keeps it out of ps */
    if (!fgets(code, sizeof(code), stdin))
      return agent_usage("pair: no --code and nothing on stdin");
    code[strcspn(code, "\r\n")] = '\0';
  } else {
    snprintf(code, sizeof(code), "%s", code_arg);
  }
  struct pairing_run p = {.cfg = cfg, .name = name};
  char host[256];
  if (agent_parse_host_port(server, host, sizeof(host), &p.port) < 0)
    return agent_usage("--server: expected HOST:PORT");
  p.host = host;
  if (pairing_code_derive(code, p.code_id, p.code_key) < 0) {
    sodium_memzero(code, sizeof(code));
    return agent_fail(CORDON_E_USAGE, "--code: not a pairing code (40 characters, as printed by "
                                      "`cordon-server pair-code`)");
  }
  sodium_memzero(code, sizeof(code));
  char hostname[128];
  if (!p.name) {
    if (gethostname(hostname, sizeof(hostname)) < 0)
      snprintf(hostname, sizeof(hostname), "device");
    hostname[sizeof(hostname) - 1] = '\0';
    p.name = hostname;
  }
  struct agent_pairing existing;
  if (agent_pairing_load(cfg->dir, &existing, NULL) == 0)
    return agent_fail(-EEXIST, "already paired; run `cordon-agent unpair` first");
  int r = agent_facts_probe(cfg, &p.facts);
  if (r < 0)
    return agent_fail(r, "probing the sandbox failed");
  uint8_t pub[32];
  p.priv = sodium_malloc(32);
  if (!p.priv)
    return agent_fail(-ENOMEM, NULL);
  noise_keypair_generate(pub, p.priv);
  uv_loop_t loop;
  uv_loop_init(&loop);
  struct net_limits lim;
  net_limits_default(&lim);
  struct net_conn *c;
  r = net_connect(&loop, host, p.port, p.priv, NOISE_MODE_PAIRING, &lim, &pair_ops, &p, &c);
  if (r < 0) {
    p.err = r;
    snprintf(p.why, sizeof(p.why), "cannot connect to %s", server);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  sodium_free(p.priv);
  sodium_memzero(p.code_key, sizeof(p.code_key));
  if (p.state == 3)
    return 0;
  return agent_fail(p.err ? p.err : CORDON_E_INTERNAL, p.why);
}

/* unpair: tell the server over a normal session, then wipe the keys. */
struct unpair_run {
  const struct agent_config *cfg;
  struct agent_pairing pairing;
  struct agent_facts facts;
  bool told;
};

static int unpair_check(struct net_conn *c, const uint8_t key[NOISE_KEY_LEN]) {
  struct unpair_run *u = net_conn_data(c);
  return sodium_memcmp(key, u->pairing.server_key, NOISE_KEY_LEN) == 0 ? 0 : CORDON_E_UNKNOWN_KEY;
}

static int unpair_ready(struct net_conn *c) {
  struct unpair_run *u = net_conn_data(c);
  struct msg m;
  struct msg_fact wire[AGENT_FACTS_MAX];
  agent_hello_fill(&u->facts, u->cfg, wire, &m);
  m.hello.has_device_id = true;
  memcpy(m.hello.device_id, u->pairing.device_id, CORDON_ID_LEN);
  return send_msg(c, &m);
}

static void unpair_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct unpair_run *u = net_conn_data(c);
  struct msg m;
  if (msg_decode(data, len, &m, NULL) < 0) {
    net_conn_close(c, CORDON_E_PROTOCOL);
    return;
  }
  if (m.type == MSG_WELCOME) {
    struct msg un = {.type = MSG_UNPAIR};
    send_msg(c, &un);
  } else if (m.type == MSG_GOAWAY) {
    /* "unpaired" answers our request; "revoked" means it already was */
    u->told = strcmp(m.goaway.code, MSG_GOAWAY_UNPAIRED) == 0 ||
              strcmp(m.goaway.code, MSG_GOAWAY_REVOKED) == 0;
    net_conn_close(c, 0);
  }
  msg_release(&m);
}

static void unpair_close(struct net_conn *c, int err) {
  (void)c;
  (void)err;
}

static const struct net_conn_ops unpair_ops = {.check_peer = unpair_check,
                                               .on_ready = unpair_ready,
                                               .on_record = unpair_record,
                                               .on_close = unpair_close};

int agent_cmd_unpair(const struct agent_config *cfg) {
  struct unpair_run u = {.cfg = cfg};
  struct cordon_diag diag = {{0}};
  uint8_t *priv = NULL;
  int r = agent_pairing_load(cfg->dir, &u.pairing, &diag);
  if (r < 0)
    return agent_fail(r, diag.msg);
  if (agent_identity_load(cfg->dir, &priv, &diag) == 0 && agent_facts_probe(cfg, &u.facts) == 0) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct net_limits lim;
    net_limits_default(&lim);
    lim.handshake_ms = 5000;
    lim.idle_ms = 5000;
    struct net_conn *c;
    if (net_connect(&loop, u.pairing.host, u.pairing.port, priv, NOISE_MODE_SESSION, &lim,
                    &unpair_ops, &u, &c) == 0)
      uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
  }
  if (priv)
    sodium_free(priv);
  r = agent_pairing_remove(cfg->dir, &diag);
  agent_trust_server_keys_remove(cfg->dir);
  if (r < 0)
    return agent_fail(r, diag.msg);
  if (u.told)
    fprintf(stderr, "cordon-agent: unpaired: the server revoked this device and the local keys "
                    "are wiped\n");
  else
    fprintf(stderr,
            "cordon-agent: the local keys are wiped, but the server at %s:%d could not "
            "be told; revoke the device there\n",
            u.pairing.host, u.pairing.port);
  return 0;
}
