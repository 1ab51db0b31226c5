/* Tests for agent/seen.c: the journal that refuses replayed job ids, on a
 * real directory. */
#include "agent/seen.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

static char tmpdir[64];

static void setup(void) {
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/cordon-test-seen-XXXXXX");
  cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    cr_log_warn("could not remove %s", tmpdir);
}

TestSuite(seen, .init = setup, .fini = teardown);

static void id_of(uint8_t seed, uint8_t out[CORDON_ID_LEN]) {
  for (size_t i = 0; i < CORDON_ID_LEN; i++)
    out[i] = (uint8_t)(seed + i * 3);
}

Test(seen, an_id_accepted_once_is_a_replay_even_after_a_restart) {
  struct agent_seen s;
  cr_assert_eq(agent_seen_init(&s, tmpdir), 0);
  struct stat st;
  cr_assert_eq(stat(s.dir, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700);
  uint8_t id[CORDON_ID_LEN], other[CORDON_ID_LEN];
  id_of(1, id);
  id_of(2, other);
  cr_assert_eq(agent_seen_check_and_add(&s, id, 5000), 0);
  cr_assert_eq(agent_seen_check_and_add(&s, id, 5000), CORDON_E_TICKET_REPLAYED);
  cr_assert_eq(agent_seen_check_and_add(&s, other, 5000), 0);
  /* a new process: the journal is on disk */
  struct agent_seen again;
  cr_assert_eq(agent_seen_init(&again, tmpdir), 0);
  cr_assert_eq(agent_seen_check_and_add(&again, id, 5000), CORDON_E_TICKET_REPLAYED);
}

Test(seen, an_entry_holds_its_ticket_expiry) {
  struct agent_seen s;
  cr_assert_eq(agent_seen_init(&s, tmpdir), 0);
  uint8_t id[CORDON_ID_LEN];
  id_of(3, id);
  cr_assert_eq(agent_seen_check_and_add(&s, id, UINT64_C(1700000000123)), 0);
  char hex[CORDON_ID_HEX_SIZE], path[4200], text[64] = "";
  cordon_id_to_hex(id, hex);
  snprintf(path, sizeof(path), "%s/%s", s.dir, hex);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  cr_assert_not_null(fgets(text, sizeof(text), f));
  fclose(f);
  cr_assert_str_eq(text, "1700000000123\n");
}

Test(seen, an_id_is_kept_until_a_minute_past_its_expiry) {
  struct agent_seen s;
  cr_assert_eq(agent_seen_init(&s, tmpdir), 0);
  uint8_t id[CORDON_ID_LEN];
  id_of(4, id);
  const int64_t expires = 1000000;
  cr_assert_eq(agent_seen_check_and_add(&s, id, (uint64_t)expires), 0);
  agent_seen_prune(&s, expires + AGENT_SEEN_GRACE_MS);
  cr_assert_eq(agent_seen_check_and_add(&s, id, (uint64_t)expires), CORDON_E_TICKET_REPLAYED,
               "pruned before the grace ran out");
  agent_seen_prune(&s, expires + AGENT_SEEN_GRACE_MS + 1);
  cr_assert_eq(agent_seen_check_and_add(&s, id, (uint64_t)expires), 0, "not pruned");
}

Test(seen, an_unreadable_entry_is_never_pruned) {
  struct agent_seen s;
  cr_assert_eq(agent_seen_init(&s, tmpdir), 0);
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s", s.dir, "00000000000000000000000000000000");
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("not a number\n", f);
  fclose(f);
  agent_seen_prune(&s, INT64_MAX / 2);
  cr_assert_eq(access(path, F_OK), 0);
}
