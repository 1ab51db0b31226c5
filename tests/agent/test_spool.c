/* Tests for agent/spool.c: the result spool of `cordon-agent run`, on a
 * real directory. */
#include "agent/spool.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/bgsync.h"

static char tmpdir[64];
static struct agent_spool sp;

static void setup(void) {
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/cordon-test-spool-XXXXXX");
  cr_assert_not_null(mkdtemp(tmpdir));
  cr_assert_eq(agent_spool_init(&sp, tmpdir), 0);
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    cr_log_warn("could not remove %s", tmpdir);
}

TestSuite(spool, .init = setup, .fini = teardown);

static void id_of(uint8_t seed, uint8_t out[CORDON_ID_LEN]) {
  for (size_t i = 0; i < CORDON_ID_LEN; i++)
    out[i] = (uint8_t)(seed * 17 + i);
}

static bool spooled(const uint8_t id[CORDON_ID_LEN], const char *ext) {
  char hex[CORDON_ID_HEX_SIZE], path[4200];
  cordon_id_to_hex(id, hex);
  snprintf(path, sizeof(path), "%s/%s%s", sp.dir, hex, ext);
  return access(path, F_OK) == 0;
}

Test(spool, lives_in_a_private_directory_under_the_config) {
  char want[128];
  snprintf(want, sizeof(want), "%s/spool", tmpdir);
  cr_assert_str_eq(sp.dir, want);
  struct stat st;
  cr_assert_eq(stat(sp.dir, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700);
}

Test(spool, a_stored_result_replaces_the_running_marker) {
  uint8_t id[CORDON_ID_LEN];
  id_of(1, id);
  cr_assert_eq(agent_spool_mark_running(&sp, id), 0);
  cr_assert(spooled(id, ".running"));
  cr_assert_not(spooled(id, ".result"));
  cr_assert_eq(agent_spool_put_result(&sp, id, (const uint8_t *)"encoded", 7), 0);
  cr_assert(spooled(id, ".result"));
  /* the marker goes once the result is synced, on a side thread */
  cr_assert(agent_bgsync_wait(10000));
  cr_assert_not(spooled(id, ".running"));
  cr_assert(spooled(id, ".result"));
}

static struct {
  int n;
  uint8_t ids[8][CORDON_ID_LEN];
  char msgs[8][64];
} seen_cb;

static void record_orphan(void *ctx, const uint8_t id[CORDON_ID_LEN]) {
  cr_assert_eq(ctx, &seen_cb);
  cr_assert_lt(seen_cb.n, 8);
  memcpy(seen_cb.ids[seen_cb.n++], id, CORDON_ID_LEN);
}

static void record_result(void *ctx, const uint8_t *msg, size_t len) {
  cr_assert_eq(ctx, &seen_cb);
  cr_assert_lt(seen_cb.n, 8);
  cr_assert_lt(len, sizeof(seen_cb.msgs[0]));
  memcpy(seen_cb.msgs[seen_cb.n], msg, len);
  seen_cb.msgs[seen_cb.n++][len] = '\0';
}

Test(spool, an_orphan_is_a_running_job_without_a_result) {
  uint8_t died[CORDON_ID_LEN], finished[CORDON_ID_LEN];
  id_of(2, died);
  id_of(3, finished);
  cr_assert_eq(agent_spool_mark_running(&sp, died), 0);
  cr_assert_eq(agent_spool_mark_running(&sp, finished), 0);
  cr_assert_eq(agent_spool_put_result(&sp, finished, (const uint8_t *)"r", 1), 0);
  /* names that are not an id in lowercase hex are no job of ours */
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s.running", sp.dir, "0123456789ABCDEF0123456789ABCDEF");
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fclose(f);
  snprintf(path, sizeof(path), "%s/%s.running", sp.dir, "short");
  f = fopen(path, "w");
  cr_assert_not_null(f);
  fclose(f);
  memset(&seen_cb, 0, sizeof(seen_cb));
  agent_spool_each_orphan(&sp, record_orphan, &seen_cb);
  cr_assert_eq(seen_cb.n, 1);
  cr_assert_eq(memcmp(seen_cb.ids[0], died, CORDON_ID_LEN), 0);
}

Test(spool, every_unacked_result_is_resent_and_an_ack_forgets_it) {
  uint8_t a[CORDON_ID_LEN], b[CORDON_ID_LEN];
  id_of(4, a);
  id_of(5, b);
  cr_assert_eq(agent_spool_put_result(&sp, a, (const uint8_t *)"result-a", 8), 0);
  cr_assert_eq(agent_spool_put_result(&sp, b, (const uint8_t *)"result-b", 8), 0);
  memset(&seen_cb, 0, sizeof(seen_cb));
  agent_spool_each_result(&sp, 1024, record_result, &seen_cb);
  cr_assert_eq(seen_cb.n, 2);
  bool got_a = strcmp(seen_cb.msgs[0], "result-a") == 0 || strcmp(seen_cb.msgs[1], "result-a") == 0;
  bool got_b = strcmp(seen_cb.msgs[0], "result-b") == 0 || strcmp(seen_cb.msgs[1], "result-b") == 0;
  cr_assert(got_a && got_b);

  agent_spool_ack(&sp, a);
  cr_assert_not(spooled(a, ".result"));
  memset(&seen_cb, 0, sizeof(seen_cb));
  agent_spool_each_result(&sp, 1024, record_result, &seen_cb);
  cr_assert_eq(seen_cb.n, 1);
  cr_assert_str_eq(seen_cb.msgs[0], "result-b");
}

Test(spool, empty_and_oversized_results_are_not_sent) {
  uint8_t empty[CORDON_ID_LEN], big[CORDON_ID_LEN], ok[CORDON_ID_LEN];
  id_of(6, empty);
  id_of(7, big);
  id_of(8, ok);
  cr_assert_eq(agent_spool_put_result(&sp, empty, (const uint8_t *)"", 0), 0);
  cr_assert_eq(agent_spool_put_result(&sp, big, (const uint8_t *)"0123456789abcdefX", 17), 0);
  cr_assert_eq(agent_spool_put_result(&sp, ok, (const uint8_t *)"0123456789abcdef", 16), 0);
  memset(&seen_cb, 0, sizeof(seen_cb));
  agent_spool_each_result(&sp, 16, record_result, &seen_cb);
  cr_assert_eq(seen_cb.n, 1);
  cr_assert_str_eq(seen_cb.msgs[0], "0123456789abcdef");
}
