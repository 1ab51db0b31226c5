/* Pairing on the daemon's listener (server/pair.h). */
#include "server/pair.h"

#include <errno.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/ratelimit.h"
#include "proto/pairing.h"
#include "server/metrics.h"

#define PAIR_RATE_SLOTS 64

struct pair_rate {
  char addr[64];
  int64_t window_start; /* core_mono_ms */
  unsigned count;
};

struct pair_ctx {
  struct server_db *db;
  const uint8_t *ticket_pk, *publisher_pk;
  struct pair_rate rates[PAIR_RATE_SLOTS];
  bool require_approval;
  /* failed pairings' log lines, by source address (metrics count them all) */
  struct core_ratelimit_table log_by_addr;
};

/* One session's attempt, from its hello to its close. */
struct pair_attempt {
  char code_id[SERVER_DB_CODE_ID_SIZE];
  uint8_t code_key[SERVER_DB_CODE_KEY_SIZE]; /* SECRET unless random */
  bool code_real;    /* code_key is the code's: the code exists and was usable */
  bool code_done;    /* the device was added */
  bool proof_seen;   /* the agent sent its proof */
  bool failed_early; /* why was decided at the hello */
  enum metrics_pair_failure why;
  char code_log[SERVER_DB_CODE_ID_SIZE]; /* the code id as named, for the log; "" if none */
  char *name, *platform, *reason;
  enum sandbox_level level;
  int max_jobs;
};

int pair_new(struct server_db *db, const uint8_t *ticket_pk, const uint8_t *publisher_pk,
             struct pair_ctx **out_ctx) {
  struct pair_ctx *p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  p->db = db;
  p->ticket_pk = ticket_pk;
  p->publisher_pk = publisher_pk;
  core_ratelimit_table_init(&p->log_by_addr, CORE_RATELIMIT_ADDR_WINDOW_MS);
  *out_ctx = p;
  return 0;
}

void pair_free(struct pair_ctx *p) {
  free(p);
}

void pair_set_require_approval(struct pair_ctx *p, bool on) {
  p->require_approval = on;
}

static bool rate_ok(struct pair_ctx *p, const char *addr) {
  int64_t now = core_mono_ms();
  struct pair_rate *free_slot = NULL, *oldest = &p->rates[0];
  for (size_t i = 0; i < PAIR_RATE_SLOTS; i++) {
    struct pair_rate *r = &p->rates[i];
    if (r->addr[0] && strcmp(r->addr, addr) == 0) {
      if (now - r->window_start > SERVER_PAIR_RATE_WINDOW_MS) {
        r->window_start = now;
        r->count = 0;
      }
      return ++r->count <= SERVER_PAIR_RATE_MAX;
    }
    if (!r->addr[0] && !free_slot)
      free_slot = r;
    if (r->window_start < oldest->window_start)
      oldest = r;
  }
  struct pair_rate *r = free_slot ? free_slot : oldest;
  snprintf(r->addr, sizeof(r->addr), "%s", addr);
  r->window_start = now;
  r->count = 1;
  return true;
}

static void pairing_failed(struct session *s) {
  session_goaway(s, MSG_GOAWAY_PAIRING_FAILED, "pairing failed");
}

void pair_on_hello(struct pair_ctx *p, struct session *s, const struct msg_hello *h) {
  struct pair_attempt *a = calloc(1, sizeof(*a));
  if (!a) {
    pairing_failed(s);
    return;
  }
  s->pair = a;
  /* Every failure looks the same to the agent: a server proof under a key
   * it cannot match. The real code key is used only when the code is usable. */
  randombytes_buf(a->code_key, sizeof(a->code_key));
  /* only an id of the id's length is logged: never more of a code */
  if (h->pair_code && strlen(h->pair_code) == SERVER_DB_CODE_ID_CHARS)
    snprintf(a->code_log, sizeof(a->code_log), "%s", h->pair_code);
  a->failed_early = true;
  if (!rate_ok(p, s->addr)) {
    a->why = METRICS_PAIR_RATE_LIMITED;
  } else if (h->pair_code && strlen(h->pair_code) < sizeof(a->code_id)) {
    struct server_db_code code;
    a->why = METRICS_PAIR_UNKNOWN_CODE;
    if (server_db_code_lookup(p->db, h->pair_code, &code, NULL) == 0) {
      a->why = code.state == SERVER_DB_CODE_USED     ? METRICS_PAIR_CODE_USED
               : code.state == SERVER_DB_CODE_BURNED ? METRICS_PAIR_CODE_BURNED
               : code.attempts_left <= 0             ? METRICS_PAIR_CODE_BURNED
                                                     : METRICS_PAIR_CODE_EXPIRED;
      if (code.usable) {
        memcpy(a->code_key, code.key, sizeof(a->code_key));
        snprintf(a->code_id, sizeof(a->code_id), "%s", h->pair_code);
        a->code_real = true;
        a->failed_early = false;
      }
      server_db_code_wipe(&code);
    }
  } else {
    a->why = METRICS_PAIR_NO_CODE;
  }
  a->name = strdup(h->name ? h->name : "device");
  a->platform = strdup(h->platform);
  a->level = (enum sandbox_level)h->best_level;
  a->reason = h->downgrade_reason ? strdup(h->downgrade_reason) : NULL;
  a->max_jobs = (int)h->max_jobs;
  uint8_t hh[NOISE_HASH_LEN];
  net_conn_handshake_hash(s->conn, hh);
  struct msg m = {.type = MSG_PAIR_PROOF};
  m.pair_proof.role = MSG_ROLE_SERVER;
  pairing_mac(a->code_key, PAIRING_ROLE_SERVER, hh, m.pair_proof.mac);
  (void)session_send(s, &m);
}

int pair_on_proof(struct pair_ctx *p, struct session *s, const struct msg_pair_proof *proof) {
  struct pair_attempt *a = s->pair;
  uint8_t hh[NOISE_HASH_LEN];
  net_conn_handshake_hash(s->conn, hh);
  if (a)
    a->proof_seen = true;
  if (!a || proof->role != MSG_ROLE_AGENT || !a->code_real ||
      pairing_mac_verify(a->code_key, PAIRING_ROLE_AGENT, hh, proof->mac) < 0) {
    if (a && !a->failed_early)
      a->why = METRICS_PAIR_BAD_PROOF;
    pairing_failed(s); /* the attempt is counted and logged when the session closes */
    return -EACCES;
  }
  uint8_t key[NOISE_KEY_LEN];
  net_conn_remote_key(s->conn, key);
  struct server_db_device_info info = {
      .name = a->name,
      .platform = a->platform,
      .has_level = true,
      .best_level = a->level,
      .downgrade_reason = a->reason,
      .max_jobs = a->max_jobs,
      .pending = p->require_approval,
  };
  char device_id[CORDON_ID_HEX_SIZE];
  int64_t user_id;
  struct cordon_diag diag = {{0}};
  int r = server_db_pair_complete(p->db, a->code_id, key, &info, device_id, &user_id, &diag);
  if (r < 0) {
    a->why = METRICS_PAIR_STORE_FAILED;
    a->failed_early = true;
    core_log_kv(CORE_LOG_ERROR, "pairing not recorded", "addr", s->addr, "code", a->code_log,
                "error", diag.msg, NULL);
    pairing_failed(s);
    return r;
  }
  a->code_done = true;
  struct server_db_device added;
  bool pending = info.pending;
  if (server_db_device_get(p->db, device_id, &added, NULL) == 0) {
    pending = added.state == SERVER_DB_DEVICE_PENDING; /* also by its user's setting */
    if (strcmp(added.name, a->name) != 0) {            /* the name was taken: it got a suffix */
      core_log_kv(CORE_LOG_INFO, "device name taken, renamed", "device", device_id, "asked",
                  a->name, "name", added.name, NULL);
      char *renamed = strdup(added.name);
      if (renamed) {
        free(a->name);
        a->name = renamed;
      }
    }
    server_db_device_release(&added);
  }
  struct server_db_user user;
  if (server_db_user_get(p->db, user_id, &user, NULL) < 0)
    snprintf(user.name, sizeof(user.name), "?");
  struct msg m = {.type = MSG_PAIR_DONE};
  cordon_id_from_hex(device_id, m.pair_done.device_id);
  m.pair_done.user = user.name;
  m.pair_done.name = a->name;
  m.pair_done.platform = a->platform;
  memcpy(m.pair_done.ticket_key, p->ticket_pk, MSG_KEY_LEN);
  m.pair_done.publisher_keys = (uint8_t(*)[MSG_KEY_LEN])p->publisher_pk;
  m.pair_done.n_publisher_keys = 1;
  char sas[PAIRING_SAS_LEN];
  pairing_sas(hh, sas);
  metrics_pairing_succeeded();
  const char *level = sandbox_level_name(a->level);
  core_log_kv(CORE_LOG_INFO, "device paired", "device", device_id, "user", user.name, "name",
              a->name, "addr", s->addr, "code", a->code_log, "platform", a->platform, "level",
              level ? level : "-", "authentication_string", sas, "state",
              pending ? "pending" : "active", NULL);
  (void)session_send(s, &m);
  return 0;
}

void pair_on_closed(struct pair_ctx *p, struct session *s) {
  struct pair_attempt *a = s->pair;
  if (!a)
    return;
  if (!a->code_done) { /* a pairing attempt that did not succeed */
    int left = -1;
    if (a->code_real && server_db_code_fail(p->db, a->code_id, &left, NULL) < 0)
      left = -1;
    enum metrics_pair_failure why = a->why;
    if (!a->failed_early && !a->proof_seen && a->why != METRICS_PAIR_BAD_PROOF)
      why = METRICS_PAIR_NO_PROOF; /* the agent did not accept our proof, or went away */
    static const char *const names[] = {
#define PAIR_NAME_(id, label) [METRICS_PAIR_##id] = label,
        METRICS_PAIR_FAILURES(PAIR_NAME_)
#undef PAIR_NAME_
    };
    char attempts[16];
    snprintf(attempts, sizeof(attempts), "%d", left);
    metrics_pairing_failed(why);
    if (a->code_log[0]) /* the code's row keeps the reason (pair-code list) */
      (void)server_db_code_note_failure(p->db, a->code_log, names[why], NULL);
    char host[CORE_RATELIMIT_KEY_MAX], sup[24];
    uint64_t n;
    core_ratelimit_addr_host(s->addr, host, sizeof(host));
    if (core_ratelimit_table_hit(&p->log_by_addr, host, core_mono_ms(), &n))
      core_log_kv(CORE_LOG_WARN, "pairing failed", "addr", s->addr, "reason", names[why], "code",
                  a->code_log[0] ? a->code_log : "-", "attempts_left", left >= 0 ? attempts : "-",
                  "name", a->name ? a->name : "-", "suppressed", core_ratelimit_fmt(n, sup), NULL);
  }
  free(a->name);
  free(a->platform);
  free(a->reason);
  sodium_memzero(a, sizeof(*a));
  free(a);
  s->pair = NULL;
}
