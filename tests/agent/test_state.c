/* agent/state.c: the receipt signing key (docs/protocol/receipt.md §1). */
#include "agent/state.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  snprintf(dir, sizeof(dir), "/tmp/cordon-state-XXXXXX");
  cr_assert(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)!system(cmd);
}

TestSuite(state, .init = setup, .fini = teardown);

static void key_path(char *out, size_t n) {
  snprintf(out, n, "%s/%s", dir, AGENT_SIGNING_FILE);
}

Test(state, a_missing_signing_key_is_made_0600_and_then_loaded_again) {
  struct agent_pairing a = {0}, b = {0};
  cr_assert_eq(agent_signing_key_load(dir, &a, NULL), 0);
  char path[128];
  key_path(path, sizeof(path));
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600);
  cr_assert_eq(agent_signing_key_load(dir, &b, NULL), 0);
  cr_assert_eq(memcmp(a.sign_pk, b.sign_pk, 32), 0, "the same key the second time");
  /* and the pair signs and verifies */
  uint8_t sig[64];
  crypto_sign_detached(sig, NULL, (const uint8_t *)"x", 1, a.sign_sk);
  cr_assert_eq(crypto_sign_verify_detached(sig, (const uint8_t *)"x", 1, b.sign_pk), 0);
  sodium_free((void *)a.sign_sk);
  sodium_free((void *)b.sign_sk);
}

Test(state, a_signing_key_others_can_read_or_of_another_kind_is_refused) {
  struct agent_pairing a = {0};
  cr_assert_eq(agent_signing_key_load(dir, &a, NULL), 0);
  sodium_free((void *)a.sign_sk);
  char path[128];
  key_path(path, sizeof(path));
  cr_assert_eq(chmod(path, 0644), 0);
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_signing_key_load(dir, &a, &d), CORDON_E_CONFIG_INVALID);
  cr_assert(strstr(d.msg, "group or others"), "%s", d.msg);
  FILE *f = fopen(path, "w");
  fputs("cordon-noise-secret-v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n", f);
  fclose(f);
  cr_assert_eq(chmod(path, 0600), 0);
  cr_assert_eq(agent_signing_key_load(dir, &a, &d), CORDON_E_CONFIG_INVALID);
  cr_assert(strstr(d.msg, "cordon-noise-secret-v1"), "%s", d.msg);
}
