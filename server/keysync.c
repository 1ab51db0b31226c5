/* A cluster's key rotations through the database (server/keysync.h). */
#include "server/keysync.h"

#include <errno.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

struct keysync {
  uv_loop_t *loop;
  uv_timer_t tick;
  bool started;
  struct server_db *db;
  const char *state_dir;
  const uint8_t *noise_priv;
  const struct server_keyring *ring;
  struct keysync_hooks hooks;
  /* the last row refused, so that it is logged once, not every tick */
  uint64_t refused_serial;
  uint8_t refused_hash[16];
  bool db_failing;      /* the last read failed (logged once) */
  bool publish_failing; /* the last write of our own keys failed (logged once) */
};

int keysync_new(uv_loop_t *loop, struct server_db *db, const char *state_dir,
                const uint8_t *noise_priv, const struct server_keyring *ring,
                const struct keysync_hooks *hooks, struct keysync **out) {
  *out = NULL;
  if (!server_db_is_shared(db))
    return 0;
  struct keysync *ks = calloc(1, sizeof(*ks));
  if (!ks)
    return -ENOMEM;
  ks->loop = loop;
  ks->db = db;
  ks->state_dir = state_dir;
  ks->noise_priv = noise_priv;
  ks->ring = ring;
  ks->hooks = *hooks;
  *out = ks;
  return 0;
}

static void serial_text(uint64_t serial, char out[24]) {
  snprintf(out, 24, "%llu", (unsigned long long)serial);
}

/* This server's chain is newer than the row: write it (a rotation whose
 * own write did not reach the database, or one made before the cluster
 * synced keys). Another server may write a higher one first: fine. */
static int publish(struct keysync *ks, uint64_t row_serial) {
  uint8_t *sealed = NULL;
  size_t len = 0;
  uint64_t serial = 0;
  struct cordon_diag diag = {{0}};
  char s[24], row[24];
  int r = server_keys_bundle_seal(ks->state_dir, ks->noise_priv, &sealed, &len, &serial, &diag);
  if (r == 0)
    r = server_db_cluster_keys_put(ks->db, serial, sealed, len, &diag);
  free(sealed); /* ciphertext only */
  serial_text(ks->ring->n_chain, s);
  serial_text(row_serial, row);
  if (r == 0)
    core_log_kv(CORE_LOG_INFO, "cluster: this server's keys written to the database", "serial", s,
                "was", row, NULL);
  else if (r != -EEXIST && !ks->publish_failing)
    core_log_kv(CORE_LOG_WARN, "cluster: this server's keys were not written to the database",
                "serial", s, "error", diag.msg, NULL);
  ks->publish_failing = r < 0 && r != -EEXIST;
  return r == -EEXIST ? 0 : r;
}

static void refuse(struct keysync *ks, uint64_t serial, const uint8_t hash[16], int err,
                   const char *why) {
  if (ks->refused_serial == serial && sodium_memcmp(ks->refused_hash, hash, 16) == 0)
    return;
  ks->refused_serial = serial;
  memcpy(ks->refused_hash, hash, 16);
  char s[24], own[24];
  serial_text(serial, s);
  serial_text(ks->ring->n_chain, own);
  core_log_kv(CORE_LOG_ERROR,
              "cluster: the keys in the database were refused; this server keeps its own", "serial",
              s, "own_serial", own, "error", why[0] ? why : cordon_err_message(err), NULL);
}

int keysync_check(struct keysync *ks) {
  if (!ks)
    return 0;
  struct cordon_diag diag = {{0}};
  uint64_t serial = 0, own = ks->ring->n_chain;
  int r = server_db_cluster_keys_serial(ks->db, &serial, &diag);
  if (r < 0 && r != -ENOENT) {
    if (!ks->db_failing)
      core_log_kv(CORE_LOG_WARN, "cluster: cannot read the cluster's keys", "error", diag.msg,
                  NULL);
    ks->db_failing = true;
    return r;
  }
  ks->db_failing = false;
  if (r == -ENOENT)
    serial = 0;
  if (serial < own)
    return publish(ks, serial);
  if (serial == own)
    return 0;
  uint8_t *sealed = NULL, *plain = NULL, hash[16] = {0};
  size_t len = 0, plain_len = 0;
  r = server_db_cluster_keys_get(ks->db, &serial, &sealed, &len, &diag);
  if (r == -ENOENT || (r == 0 && serial <= own)) { /* changed since the first read */
    free(sealed);
    return 0;
  }
  if (r == 0)
    crypto_generichash(hash, sizeof(hash), sealed, len, NULL, 0);
  else if (r != CORDON_E_LIMIT)
    goto out;
  if (r == 0 && ks->refused_serial == serial &&
      sodium_memcmp(ks->refused_hash, hash, sizeof(hash)) == 0) {
    r = CORDON_E_CRYPTO; /* refused already, logged then */
    goto out;
  }
  if (r == 0)
    r = server_keys_bundle_open(ks->noise_priv, serial, sealed, len, &plain, &plain_len, &diag);
  if (r == 0)
    r = server_keys_bundle_install(ks->state_dir, plain, plain_len, serial, ks->ring, &diag);
  sodium_free(plain);   /* wipes */
  if (r == -EALREADY) { /* this state's own rotation is on disk: load it */
    ks->hooks.installed(ks->hooks.data, serial);
    r = 0;
    goto out;
  }
  if (r < 0) {
    refuse(ks, serial, hash, r, diag.msg);
    goto out;
  }
  char s[24];
  serial_text(serial, s);
  core_log_kv(CORE_LOG_INFO, "cluster: keys of another server installed from the database",
              "serial", s, NULL);
  ks->hooks.installed(ks->hooks.data, serial);
  r = 1;
out:
  free(sealed);
  return r;
}

static void on_tick(uv_timer_t *t) {
  (void)keysync_check(t->data);
}

void keysync_start(struct keysync *ks) {
  if (!ks)
    return;
  uv_timer_init(ks->loop, &ks->tick);
  ks->tick.data = ks;
  uv_timer_start(&ks->tick, on_tick, KEYSYNC_POLL_MS, KEYSYNC_POLL_MS);
  ks->started = true;
}

void keysync_close(struct keysync *ks) {
  if (ks && ks->started && !uv_is_closing((uv_handle_t *)&ks->tick))
    uv_close((uv_handle_t *)&ks->tick, NULL);
}

void keysync_free(struct keysync *ks) {
  free(ks);
}
