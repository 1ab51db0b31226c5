/* agent/spool.c with agent/bgsync.c: a result is visible in the spool as
 * soon as agent_spool_put_result returns, its fsyncs run on a side thread
 * (not in the caller's), and the job's .running is removed only after the
 * result file and the spool directory are synced, as strace sees the real
 * system calls; an ack right after the put leaves nothing behind; an empty
 * .result (what a crash of the machine leaves of an unsynced one) makes
 * the job an orphan again. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/bgsync.h"
#include "agent/spool.h"

static char tmpdir[64];
static struct agent_spool sp;

static void setup(void) {
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/cordon-test-spoold-XXXXXX");
  cr_assert_not_null(mkdtemp(tmpdir));
  cr_assert_eq(agent_spool_init(&sp, tmpdir), 0);
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    cr_log_warn("could not remove %s", tmpdir);
}

TestSuite(spool_durable, .init = setup, .fini = teardown, .timeout = 60);

static void id_of(uint8_t seed, uint8_t out[CORDON_ID_LEN]) {
  for (size_t i = 0; i < CORDON_ID_LEN; i++)
    out[i] = (uint8_t)(seed * 31 + i);
}

static void path_of(const uint8_t id[CORDON_ID_LEN], const char *ext, char *out, size_t n) {
  char hex[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(id, hex);
  snprintf(out, n, "%s/%s%s", sp.dir, hex, ext);
}

static bool spooled(const uint8_t id[CORDON_ID_LEN], const char *ext) {
  char path[4200];
  path_of(id, ext, path, sizeof(path));
  return access(path, F_OK) == 0;
}

Test(spool_durable, the_result_is_there_at_once_and_the_marker_goes_after_the_sync) {
  uint8_t id[CORDON_ID_LEN];
  id_of(1, id);
  cr_assert_eq(agent_spool_mark_running(&sp, id), 0);
  cr_assert_eq(agent_spool_put_result(&sp, id, (const uint8_t *)"encoded", 7), 0);
  cr_assert(spooled(id, ".result"), "visible when the call returns");
  uint8_t *msg;
  size_t len;
  cr_assert_eq(agent_spool_get_result(&sp, id, 64, &msg, &len), 0);
  cr_assert_eq(len, 7);
  cr_assert_eq(memcmp(msg, "encoded", 7), 0);
  free(msg);
  cr_assert(agent_bgsync_wait(10000));
  cr_assert_not(spooled(id, ".running"));
  cr_assert(spooled(id, ".result"), "kept until the ack");
}

Test(spool_durable, an_ack_before_the_sync_is_done_leaves_nothing) {
  uint8_t id[CORDON_ID_LEN];
  id_of(2, id);
  cr_assert_eq(agent_spool_mark_running(&sp, id), 0);
  cr_assert_eq(agent_spool_put_result(&sp, id, (const uint8_t *)"encoded", 7), 0);
  agent_spool_ack(&sp, id);
  cr_assert_not(spooled(id, ".result"));
  cr_assert_not(spooled(id, ".running"), "the ack drops the marker too");
  cr_assert(agent_bgsync_wait(10000));
  cr_assert_not(spooled(id, ".result"));
  cr_assert_not(spooled(id, ".running"));
}

static int orphans;
static void count_orphan(void *ctx, const uint8_t id[CORDON_ID_LEN]) {
  (void)ctx;
  (void)id;
  orphans++;
}

Test(spool_durable, an_empty_result_left_by_a_crash_makes_the_job_an_orphan) {
  uint8_t id[CORDON_ID_LEN];
  id_of(3, id);
  cr_assert_eq(agent_spool_mark_running(&sp, id), 0);
  char path[4200];
  path_of(id, ".result", path, sizeof(path));
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fclose(f);
  agent_spool_each_orphan(&sp, count_orphan, NULL);
  cr_assert_eq(orphans, 1, "a .running with an empty .result");
  f = fopen(path, "w");
  fputs("x", f);
  fclose(f);
  orphans = 0;
  agent_spool_each_orphan(&sp, count_orphan, NULL);
  cr_assert_eq(orphans, 0, "a .running with a stored result is not an orphan");
}

/* Run under strace by the next test: one put, then the wait. */
Test(spool_durable, strace_subject) {
  const char *dir = getenv("CORDON_SPOOL_DURABLE_DIR");
  if (!dir)
    cr_skip_test("run by the strace test only");
  struct agent_spool s;
  cr_assert_eq(agent_spool_init(&s, dir), 0);
  uint8_t id[CORDON_ID_LEN];
  id_of(4, id);
  cr_assert_eq(agent_spool_mark_running(&s, id), 0);
  printf("caller tid %ld\n", (long)syscall(SYS_gettid));
  fflush(stdout);
  cr_assert_eq(agent_spool_put_result(&s, id, (const uint8_t *)"encoded", 7), 0);
  cr_assert(agent_bgsync_wait(10000));
}

/* The line number (1-based) of the first line of log from after `from`
 * holding all of a, b (b may be NULL), and its pid into *out_pid. 0: none. */
static int find_line(char **lines, int n, int from, const char *a, const char *b, long *out_pid) {
  for (int i = from; i < n; i++)
    if (strstr(lines[i], a) && (!b || strstr(lines[i], b))) {
      if (out_pid)
        *out_pid = atol(lines[i]);
      return i + 1;
    }
  return 0;
}

Test(spool_durable, the_marker_is_removed_only_after_both_fsyncs_on_another_thread) {
  if (access("/usr/bin/strace", X_OK) != 0)
    cr_skip_test("no strace");
  char log[128], sub[128], cmd[1024];
  snprintf(log, sizeof(log), "%s/strace.log", tmpdir);
  snprintf(sub, sizeof(sub), "%s/sub", tmpdir);
  cr_assert_eq(mkdir(sub, 0700), 0);
  snprintf(cmd, sizeof(cmd),
           "env -i ASAN_OPTIONS=detect_leaks=0 CORDON_SPOOL_DURABLE_DIR=%s /usr/bin/strace -f -y "
           "-qq -o %s "
           "-e trace=fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat "
           "/proc/%d/exe --filter 'spool_durable/strace_subject' --jobs 1 > %s/out 2>&1",
           sub, log, getpid(), tmpdir);
  int rc = system(cmd);
  if (rc != 0) {
    snprintf(cmd, sizeof(cmd), "cat %s/out >&2", tmpdir);
    (void)!system(cmd);
  }
  cr_assert_eq(rc, 0, "the subject ran under strace");
  FILE *f = fopen(log, "r");
  cr_assert(f);
  static char buf[1 << 20];
  size_t len = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[len] = '\0';
  char *lines[4096];
  int n = 0;
  for (char *save, *l = strtok_r(buf, "\n", &save); l && n < 4096; l = strtok_r(NULL, "\n", &save))
    lines[n++] = l;

  uint8_t id[CORDON_ID_LEN];
  id_of(4, id);
  char hex[CORDON_ID_HEX_SIZE], result[64], running[64], spooldir[256];
  cordon_id_to_hex(id, hex);
  snprintf(result, sizeof(result), "%s.result", hex);
  snprintf(running, sizeof(running), "%s.running\"", hex);
  snprintf(spooldir, sizeof(spooldir), "<%s/spool>", sub);
  long put_pid = 0, sync_pid = 0, dir_pid = 0, unlink_pid = 0;
  int renamed = find_line(lines, n, 0, "rename", result, &put_pid);
  cr_assert(renamed, "the result is renamed into place");
  int synced = find_line(lines, n, renamed, "fsync(", result, &sync_pid);
  cr_assert(synced, "then the result file is synced");
  int dir_synced = find_line(lines, n, synced, "fsync(", spooldir, &dir_pid);
  cr_assert(dir_synced, "then the spool directory");
  int removed = find_line(lines, n, 0, "unlink", running, &unlink_pid);
  cr_assert(removed, "the marker is removed");
  cr_assert_gt(removed, dir_synced, "only after both syncs (lines %d, %d, %d)", synced, dir_synced,
               removed);
  cr_assert_neq(sync_pid, put_pid, "the fsyncs are not in the caller's thread");
  cr_assert_eq(dir_pid, sync_pid);
  cr_assert_eq(unlink_pid, sync_pid);
}
