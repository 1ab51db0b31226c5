/* cordon-server init --keys-from A --db URL: a second server of A's
 * cluster gets A's identity (the Noise key, the ticket and publisher keys
 * and every rotation of them), with the same modes, and A's database; a
 * source that is missing a key, holds a link, or has a secret others can
 * read is refused with one line, and nothing is left behind. Without --db
 * (SQLite: a file per server) it is refused. The copying tests run on the
 * PostgreSQL pass (pg_test.h: every init of a test gets the test's one
 * database, so A and B share it as a cluster does). */
#include <sys/stat.h>

#include "cli_run.h"

static void setup(void) {
  cli_run_setup("cordon-keysfrom");
}

TestSuite(init_keys_from, .init = setup, .fini = cli_run_teardown, .timeout = 60);

static struct run *srv(const char *a1, const char *a2, const char *a3, const char *a4,
                       const char *a5, const char *a6) {
  static struct run r;
  char *argv[] = {"cordon-server", (char *)a1, (char *)a2, (char *)a3,
                  (char *)a4,      (char *)a5, (char *)a6, NULL};
  cli_run_exec(&r, argv);
  return &r;
}

static void path_in(char *out, size_t n, const char *state, const char *rel) {
  snprintf(out, n, "%s/%s", state, rel);
}

static bool same_file(const char *a, const char *b) {
  char ca[4096], cb[4096];
  slurp(a, ca, sizeof(ca));
  slurp(b, cb, sizeof(cb));
  return strcmp(ca, cb) == 0;
}

static mode_t mode_of(const char *p) {
  struct stat st;
  cr_assert_eq(stat(p, &st), 0, "%s", p);
  return st.st_mode & 07777;
}

Test(init_keys_from, without_a_shared_database_it_is_refused) {
  if (pg_test_base())
    cr_skip_test("the SQLite pass's refusal");
  char a[400], b[400];
  snprintf(a, sizeof(a), "%s/a", tmp_dir);
  snprintf(b, sizeof(b), "%s/b", tmp_dir);
  struct run *r = srv("init", "--state", a, NULL, NULL, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);
  r = srv("init", "--state", b, "--keys-from", a, NULL);
  cr_assert_eq(r->status, 2, "%s", r->err);
  cr_assert(strstr(r->err, "--keys-from needs --db"), "%s", r->err);
  cr_assert_eq(count_lines(r->err), 1, "%s", r->err);
  struct stat st;
  cr_assert_neq(stat(b, &st), 0, "%s was made", b);
}

Test(init_keys_from, copies_the_identity_and_its_rotations_with_their_modes) {
  if (!pg_test_base())
    cr_skip_test("a cluster needs PostgreSQL: the pg_ pass runs this");
  char a[400], b[400], pa[600], pb[600];
  snprintf(a, sizeof(a), "%s/a", tmp_dir);
  snprintf(b, sizeof(b), "%s/b", tmp_dir);
  struct run *r = srv("init", "--state", a, NULL, NULL, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);
  r = srv("keys", "rotate", "--state", a, NULL, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);
  r = srv("init", "--state", b, "--keys-from", a, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);
  cr_assert(strstr(r->err, "with the keys of"), "%s", r->err);
  const char *files[] = {"noise.key", "ticket.key", "publisher.key", "publisher.pub", "keys.json"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    path_in(pa, sizeof(pa), a, files[i]);
    path_in(pb, sizeof(pb), b, files[i]);
    cr_assert(same_file(pa, pb), "%s differs", files[i]);
    cr_assert_eq(mode_of(pb), mode_of(pa), "%s: mode %o, not %o", files[i], mode_of(pb),
                 mode_of(pa));
  }
  path_in(pb, sizeof(pb), b, "noise.key");
  cr_assert_eq(mode_of(pb), 0600);
  /* the same keys, as the keyring reads them */
  r = srv("keys", "list", "--json", "--state", a, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);
  char *la = strdup(r->out);
  r = srv("keys", "list", "--json", "--state", b, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);
  cr_assert_str_eq(r->out, la);
  size_t n_keys = 0;
  for (const char *p = la; (p = strstr(p, "\"role\"")) != NULL; p++)
    n_keys++;
  cr_assert_eq(n_keys, 4, "init's two keys and the rotation's two: %s", la);
  free(la);
  /* one database: a user A adds, B sees */
  r = srv("user", "add", "alice", "--state", a, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);
  r = srv("user", "list", "--state", b, NULL, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);
  cr_assert(strstr(r->out, "alice"), "%s", r->out);
  /* and nothing of A's state directory but the keys and the URL */
  char cmd[1024];
  snprintf(cmd, sizeof(cmd),
           "cd '%s' && [ \"$(ls -A | sort | tr '\\n' ' ')\" = "
           "'db-url keys keys.json noise.key publisher.key publisher.pub ticket.key ' ]",
           b);
  cr_assert_eq(system(cmd), 0, "B holds more than its keys and db-url");
}

/* Every refusal: one line naming what was wrong, and no B left. */
static void refused(const char *a, const char *b, const char *want) {
  struct run *r = srv("init", "--state", b, "--keys-from", a, NULL);
  cr_assert_neq(r->status, 0);
  cr_assert(strstr(r->err, want), "want '%s' in: %s", want, r->err);
  cr_assert_eq(count_lines(r->err), 1, "%s", r->err);
  struct stat st;
  cr_assert_neq(stat(b, &st), 0, "%s was left behind", b);
}

Test(init_keys_from, a_bad_source_is_refused_and_leaves_nothing) {
  if (!pg_test_base())
    cr_skip_test("a cluster needs PostgreSQL: the pg_ pass runs this");
  char a[400], b[400], p[600], q[600];
  snprintf(a, sizeof(a), "%s/a", tmp_dir);
  snprintf(b, sizeof(b), "%s/b", tmp_dir);
  refused(a, b, "/a/");
  struct run *r = srv("init", "--state", a, NULL, NULL, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);
  r = srv("keys", "rotate", "--state", a, NULL, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);

  /* a secret others can read */
  path_in(p, sizeof(p), a, "noise.key");
  cr_assert_eq(chmod(p, 0644), 0);
  refused(a, b, "noise.key");
  cr_assert_eq(chmod(p, 0600), 0);

  /* a link in place of a key the registry names: never followed */
  path_in(p, sizeof(p), a, "publisher.key");
  path_in(q, sizeof(q), a, "publisher.key.real");
  cr_assert_eq(rename(p, q), 0);
  cr_assert_eq(symlink(q, p), 0);
  refused(a, b, "publisher.key");
  cr_assert_eq(unlink(p), 0);
  cr_assert_eq(rename(q, p), 0);

  /* a rotated key missing under keys/ */
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "mv '%s'/keys/ticket-*.key '%s/'", a, tmp_dir);
  cr_assert_eq(system(cmd), 0);
  refused(a, b, "ticket-");
  snprintf(cmd, sizeof(cmd), "mv '%s'/ticket-*.key '%s/keys/'", tmp_dir, a);
  cr_assert_eq(system(cmd), 0);

  /* and with all of it back, it works */
  r = srv("init", "--state", b, "--keys-from", a, NULL);
  cr_assert_eq(r->status, 0, "%s", r->err);
}
