/* agent/trust.c: the paired server's key announcements (keys messages),
 * applied to a real config directory: a chain signed by the current keys
 * is taken, a replay is ignored, a forgery or a signature by a superseded
 * key changes nothing, a retirement removes the key from the trust store,
 * and unpair forgets it all. */
#include <criterion/criterion.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/state.h"
#include "agent/trust.h"
#include "proto/keyfile.h"
#include "proto/msg.h"

static char dir[64];

struct kp {
  uint8_t pk[32], sk[64];
};

static struct kp t0, p0, t1, p1, t2, p2, evil;

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  snprintf(dir, sizeof(dir), "/tmp/cordon-trust-XXXXXX");
  cr_assert(mkdtemp(dir));
  struct kp *all[] = {&t0, &p0, &t1, &p1, &t2, &p2, &evil};
  for (size_t i = 0; i < 7; i++)
    crypto_sign_keypair(all[i]->pk, all[i]->sk);
  char tdir[128], text[KEYFILE_MAX_BYTES];
  size_t len;
  snprintf(tdir, sizeof(tdir), "%s/trusted", dir);
  cr_assert_eq(mkdir(tdir, 0700), 0);
  cr_assert_eq(keyfile_format(KEYFILE_PUBLISHER_PUBLIC, p0.pk, "pairing", text, sizeof(text), &len),
               0);
  char path[200];
  snprintf(path, sizeof(path), "%s/server-publisher.pub", tdir);
  FILE *f = fopen(path, "w");
  fwrite(text, 1, len, f);
  fclose(f);
}

static void teardown(void) {
  char c[128];
  snprintf(c, sizeof(c), "rm -rf '%s'", dir);
  cr_expect_eq(system(c), 0);
}

static struct msg_keys announce(uint64_t serial, const struct kp *t, const struct kp *p,
                                const struct kp *by_t, const struct kp *by_p) {
  struct msg_keys k = {.serial = serial};
  memcpy(k.ticket_key, t->pk, 32);
  memcpy(k.publisher_key, p->pk, 32);
  uint8_t data[MSG_KEYS_SIGNED_LEN];
  msg_keys_signed_data(&k, data);
  crypto_sign_detached(k.ticket_sig, NULL, data, sizeof(data), by_t->sk);
  crypto_sign_detached(k.publisher_sig, NULL, data, sizeof(data), by_p->sk);
  return k;
}

static bool exists(const char *rel) {
  char path[200];
  snprintf(path, sizeof(path), "%s/%s", dir, rel);
  return access(path, F_OK) == 0;
}

static size_t trusted_keys(void) {
  struct cpkg_trust *t;
  cr_assert_eq(cpkg_trust_new(&t), 0);
  char tdir[128];
  snprintf(tdir, sizeof(tdir), "%s/trusted", dir);
  cr_assert_eq(agent_trust_load_dir(t, tdir, NULL), 0);
  size_t n = cpkg_trust_count(t);
  cpkg_trust_free(t);
  return n;
}

Test(agent_trust, a_chain_of_announcements, .init = setup, .fini = teardown) {
  struct agent_pairing p = {0};
  memcpy(p.ticket_key, t0.pk, 32);
  struct cordon_diag d = {{0}};

  struct msg_keys k1 = announce(1, &t1, &p1, &t0, &p0);
  cr_assert_eq(agent_trust_apply_keys(dir, &p, &k1, &d), 1, "%s", d.msg);
  cr_assert_eq(memcmp(p.ticket_key, t1.pk, 32), 0, "the new ticket key is in use");
  cr_assert(exists("trusted/server-publisher-1.pub"));
  cr_assert_eq(trusted_keys(), 2, "old and new publisher keys");
  struct agent_pairing again = {0};
  memcpy(again.ticket_key, t0.pk, 32);
  cr_assert_eq(agent_trust_server_keys_load(dir, &again, NULL), 0);
  cr_assert_eq(memcmp(again.ticket_key, t1.pk, 32), 0, "a restart keeps it");

  cr_assert_eq(agent_trust_apply_keys(dir, &p, &k1, &d), 0, "a replay is ignored");

  struct msg_keys forged = announce(2, &t2, &p2, &evil, &evil);
  cr_assert_eq(agent_trust_apply_keys(dir, &p, &forged, &d), CORDON_E_SIGNATURE_INVALID);
  struct msg_keys stale = announce(2, &t2, &p2, &t0, &p0); /* by the superseded ticket key */
  cr_assert_eq(agent_trust_apply_keys(dir, &p, &stale, &d), CORDON_E_SIGNATURE_INVALID);
  struct msg_keys half = announce(2, &t2, &p2, &t1, &evil); /* the publisher half forged */
  cr_assert_eq(agent_trust_apply_keys(dir, &p, &half, &d), CORDON_E_SIGNATURE_INVALID);
  cr_assert_eq(memcmp(p.ticket_key, t1.pk, 32), 0, "nothing changed");
  cr_assert(!exists("trusted/server-publisher-2.pub"));

  /* retire p0: the same keys, signed by them, with the retired list */
  struct msg_keys r3 = announce(3, &t1, &p1, &t1, &p1);
  uint8_t retired[1][32];
  memcpy(retired[0], p0.pk, 32);
  r3.retired = retired;
  r3.n_retired = 1;
  cr_assert_eq(agent_trust_apply_keys(dir, &p, &r3, &d), 1, "%s", d.msg);
  cr_assert(!exists("trusted/server-publisher.pub"), "the retired key is gone");
  cr_assert(exists("trusted/server-publisher-1.pub"));
  cr_assert_eq(trusted_keys(), 1);

  /* a later rotation, serials need not be consecutive */
  struct msg_keys k5 = announce(5, &t2, &p2, &t1, &p1);
  cr_assert_eq(agent_trust_apply_keys(dir, &p, &k5, &d), 1, "%s", d.msg);
  cr_assert_eq(memcmp(p.ticket_key, t2.pk, 32), 0);
  cr_assert_eq(trusted_keys(), 2);

  agent_trust_server_keys_remove(dir);
  cr_assert(!exists("server-keys.json"));
  cr_assert(!exists("trusted/server-publisher-1.pub"));
  cr_assert(!exists("trusted/server-publisher-5.pub"));
}

/* json keeps a signed 64-bit integer: a serial past INT64_MAX (no signature
 * needed when it names the keys already trusted) must not be written as a
 * negative number that the next start refuses as a broken config. */
Test(agent_trust, a_serial_past_int64_is_refused_and_the_config_stays_readable, .init = setup,
     .fini = teardown) {
  struct agent_pairing p = {0};
  memcpy(p.ticket_key, t0.pk, 32);
  struct cordon_diag d = {{0}};
  struct msg_keys huge = announce((uint64_t)INT64_MAX + 1, &t0, &p0, &t0, &p0);
  cr_assert_lt(agent_trust_apply_keys(dir, &p, &huge, &d), 0, "a serial json cannot hold");
  struct agent_pairing again = {0};
  cr_assert_eq(agent_trust_server_keys_load(dir, &again, &d), 0, "%s", d.msg);
  struct msg_keys k1 = announce(1, &t1, &p1, &t0, &p0);
  cr_assert_eq(agent_trust_apply_keys(dir, &p, &k1, &d), 1, "the chain still moves: %s", d.msg);
}

/* The server's chain holds up to 256 rotations: an agent that took more
 * than 64 publisher keys still verifies with, and retires, every one. */
Test(agent_trust, more_than_64_rotated_publisher_keys_are_all_seen, .init = setup,
     .fini = teardown) {
  enum { N = 80 };
  static struct kp pub[N + 1];
  pub[0] = p0;
  struct agent_pairing p = {0};
  memcpy(p.ticket_key, t0.pk, 32);
  struct cordon_diag d = {{0}};
  uint64_t serial = 0;
  for (size_t i = 1; i <= N; i++) {
    crypto_sign_keypair(pub[i].pk, pub[i].sk);
    struct msg_keys k = announce(++serial, &t0, &pub[i], &t0, &pub[i - 1]);
    cr_assert_eq(agent_trust_apply_keys(dir, &p, &k, &d), 1, "rotation %zu: %s", i, d.msg);
  }
  cr_assert_eq(trusted_keys(), N + 1);
  /* retire all but the newest, 16 at a time (the message's cap) */
  for (size_t from = 0; from < N; from += 16) {
    uint8_t retired[16][32];
    size_t n = 0;
    for (size_t i = from; i < N && n < 16; i++)
      memcpy(retired[n++], pub[i].pk, 32);
    struct msg_keys k = announce(++serial, &t0, &pub[N], &t0, &pub[N]);
    k.retired = retired;
    k.n_retired = n;
    cr_assert_eq(agent_trust_apply_keys(dir, &p, &k, &d), 1, "%s", d.msg);
  }
  cr_assert_eq(trusted_keys(), 1, "every retired key is gone");
}
