/* agent/recover.c with real files: what a crash can leave in the config
 * directory is finished or removed, and the jobs it interrupted become
 * orphans that agent_dispatch_recover reports agent_restarted. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/recover.h"

static char dir[64];
static struct agent_spool sp;
static struct agent_seen seen;

static void setup(void) {
  snprintf(dir, sizeof(dir), "/tmp/cordon-recover-XXXXXX");
  cr_assert(mkdtemp(dir));
  cr_assert_eq(agent_spool_init(&sp, dir), 0);
  cr_assert_eq(agent_seen_init(&seen, dir), 0);
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)!system(cmd);
}

TestSuite(recover, .init = setup, .fini = teardown);

static void touch(const char *sub, const char *name) {
  char path[256];
  snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
  FILE *f = fopen(path, "w");
  cr_assert(f, "%s: %s", path, strerror(errno));
  fputs("x", f);
  fclose(f);
}

static bool exists(const char *sub, const char *name) {
  char path[256];
  snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
  return access(path, F_OK) == 0;
}

static void id_of(int k, uint8_t id[CORDON_ID_LEN], char hex[CORDON_ID_HEX_SIZE]) {
  memset(id, 0, CORDON_ID_LEN);
  id[0] = (uint8_t)k;
  id[15] = 0xa5;
  cordon_id_to_hex(id, hex);
}

static int n_orphans;
static uint8_t orphans[8][CORDON_ID_LEN];
static void record_orphan(void *ctx, const uint8_t id[CORDON_ID_LEN]) {
  (void)ctx;
  memcpy(orphans[n_orphans++], id, CORDON_ID_LEN);
}

static bool is_orphan(const uint8_t id[CORDON_ID_LEN]) {
  for (int i = 0; i < n_orphans; i++)
    if (memcmp(orphans[i], id, CORDON_ID_LEN) == 0)
      return true;
  return false;
}

Test(recover, temps_become_orphans_or_go_and_nothing_else_is_touched) {
  uint8_t a[16], b[16], c[16], d[16], e[16];
  char ha[33], hb[33], hc[33], hd[33], he[33], name[64];
  id_of(1, a, ha), id_of(2, b, hb), id_of(3, c, hc), id_of(4, d, hd), id_of(5, e, he);
  /* a: accepted, the seen entry half-written */
  snprintf(name, sizeof(name), ".%s.tmp", ha);
  touch("seen", name);
  /* b: accepted and journaled, the running marker half-written */
  touch("seen", hb);
  snprintf(name, sizeof(name), ".%s.running.tmp", hb);
  touch("spool", name);
  /* c: ran, its result half-written (its .running is still there) */
  cr_assert_eq(agent_spool_mark_running(&sp, c), 0);
  snprintf(name, sizeof(name), ".%s.result.tmp", hc);
  touch("spool", name);
  /* d: done, its result stored; a stray temp of the marker is not a job */
  cr_assert_eq(agent_spool_put_result(&sp, d, (const uint8_t *)"r", 1), 0);
  snprintf(name, sizeof(name), ".%s.running.tmp", hd);
  touch("spool", name);
  /* e: a seen entry of an old job stays */
  touch("seen", he);
  touch("spool", ".junk.tmp");

  int n = agent_recover_temps(&sp, &seen);
  cr_assert_eq(n, 1 + 4, "one seen temp, four spool temps: %d", n);
  agent_spool_each_orphan(&sp, record_orphan, NULL);
  cr_assert_eq(n_orphans, 3);
  cr_assert(is_orphan(a) && is_orphan(b) && is_orphan(c), "each interrupted job is reported");
  cr_assert(!is_orphan(d), "a job with a result is not");
  snprintf(name, sizeof(name), "%s.running", hd);
  cr_assert(!exists("spool", name), "no marker is made for a job that has its result");
  cr_assert(exists("seen", hb) && exists("seen", he), "complete entries stay");
  cr_assert(agent_spool_has_result(&sp, d));
  cr_assert_eq(agent_recover_temps(&sp, &seen), 0, "nothing left the second time");
}

Test(recover, staging_dirs_go_when_empty_or_their_job_is_over) {
  char jobs[128], p[256];
  snprintf(jobs, sizeof(jobs), "%s/jobs", dir);
  cr_assert_eq(mkdir(jobs, 0700), 0);
  uint8_t a[16], b[16], c[16], d[16];
  char ha[33], hb[33], hc[33], hd[33];
  id_of(1, a, ha), id_of(2, b, hb), id_of(3, c, hc), id_of(4, d, hd);
  snprintf(p, sizeof(p), "%s/%s", jobs, ha); /* empty */
  cr_assert_eq(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "%s/%s", jobs, hb); /* an empty package directory */
  cr_assert_eq(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "%s/%s/package", jobs, hb);
  cr_assert_eq(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "%s/%s", jobs, hc); /* files, and its result spooled */
  cr_assert_eq(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "%s/%s/package", jobs, hc);
  cr_assert_eq(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "jobs/%s/package", hc);
  touch(p, "run.sh");
  cr_assert_eq(agent_spool_put_result(&sp, c, (const uint8_t *)"r", 1), 0);
  snprintf(p, sizeof(p), "%s/%s", jobs, hd); /* files, no result: not the run's */
  cr_assert_eq(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "jobs/%s", hd);
  touch(p, "f");
  touch("jobs", "not-an-id");

  cr_assert_eq(agent_recover_staging(dir, &sp), 3);
  cr_assert(!exists("jobs", ha) && !exists("jobs", hb) && !exists("jobs", hc));
  cr_assert(exists("jobs", hd), "a directory with files and no result is left alone");
  cr_assert(exists("jobs", "not-an-id"));
}
