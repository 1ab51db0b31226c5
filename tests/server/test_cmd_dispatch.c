/* server/cmd_dispatch.c's lean path (issue 18): with the daemon running, a
 * dispatch without --device asks only the daemon (strace sees no open of
 * the database), and its answers are the ones the database gave: an
 * unknown user is not_found with the same words; --device still resolves
 * names through the database first. */
#include "e2e.h"

TestSuite(cmd_dispatch, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

static const char manifest[] =
    "{\"name\":\"d\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

/* How many times the CLI run as `argv_tail` under strace opened a file
 * whose name holds `needle`; its exit status into *out_status. */
static int opens_of(const char *needle, const char *argv_tail, int *out_status) {
  char log[400], cmd[2048];
  snprintf(log, sizeof(log), "%s/strace.log", e2e_dir);
  snprintf(cmd, sizeof(cmd),
           /* LeakSanitizer cannot run under ptrace: off for the traced CLI */
           "ASAN_OPTIONS=detect_leaks=0 /usr/bin/strace -f -qq -o %s -e trace=open,openat %s %s "
           "--state %s >/dev/null 2>&1",
           log, SERVER, argv_tail, e2e_state);
  int st = system(cmd);
  *out_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return count_in(log, needle);
}

Test(cmd_dispatch, with_the_daemon_running_a_dispatch_does_not_open_the_database) {
  if (access("/usr/bin/strace", X_OK) != 0)
    PG_TEST_SKIP("no strace");
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  start_agent(a);
  char *pkg = pack("d", manifest, "echo ok\n");
  char tail[1024];
  int status;
  snprintf(tail, sizeof(tail), "dispatch --user alice --wait %s", pkg);
  cr_assert_eq(opens_of("cordon.db", tail, &status), 0, "the database is not opened");
  cr_assert_eq(status, 0, "the job ran");
  snprintf(tail, sizeof(tail), "dispatch --user alice --detach %s", pkg);
  cr_assert_eq(opens_of("cordon.db", tail, &status), 0);
  cr_assert_eq(status, 0);
  /* a device by name is the daemon's to resolve, too */
  snprintf(tail, sizeof(tail), "dispatch --user alice --device box --wait %s", pkg);
  cr_assert_eq(opens_of("cordon.db", tail, &status), 0, "--device NAME: the daemon resolves it");
  cr_assert_eq(status, 0);
  free(pkg);
}

Test(cmd_dispatch, an_unknown_user_is_not_found_with_the_daemon_as_without) {
  char *pkg = pack("d", manifest, "echo ok\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "nobody", pkg, "--state", e2e_state);
  cr_assert_eq(o->status, 1, "%s", o->err);
  cr_assert_str_eq(o->err, "cordon-server: not_found: no user 'nobody'\n");
  free(o);
  /* a package that cannot be read: the user is still checked first */
  o = RUN(SERVER, "dispatch", "--user", "nobody", "/nonexistent.cpkg", "--state", e2e_state);
  cr_assert_eq(o->status, 1, "%s", o->err);
  cr_assert_str_eq(o->err, "cordon-server: not_found: no user 'nobody'\n");
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", "/nonexistent.cpkg", "--state", e2e_state);
  cr_assert_neq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->err, "cannot read the package"), "%s", o->err);
  free(o);

  e2e_stop(&e2e_server_pid, SIGTERM);
  o = RUN(SERVER, "dispatch", "--user", "nobody", pkg, "--state", e2e_state);
  cr_assert_eq(o->status, 1, "%s", o->err);
  cr_assert_str_eq(o->err, "cordon-server: not_found: no user 'nobody'\n", "without the daemon");
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", e2e_state);
  cr_assert(strstr(o->err, "not_running"), "%s", o->err);
  free(o);
  free(pkg);
}
