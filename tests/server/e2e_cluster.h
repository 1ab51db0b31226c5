/* Two real `cordon-server run` daemons on one PostgreSQL database, for the
 * cluster tests (after e2e.h): A is e2e.h's server (e2e_state,
 * e2e_server_log, e2e_server_pid), B is made from A with `init --keys-from`
 * (cl_state_b, cl_log_b, cl_pid_b); both advertise both addresses. */
#ifndef CORDON_TESTS_SERVER_E2E_CLUSTER_H
#define CORDON_TESTS_SERVER_E2E_CLUSTER_H

static char cl_state_b[320], cl_log_b[400], cl_addr_a[64], cl_addr_b[64];
static pid_t cl_pid_b = -1;
static bool cl_a_debug; /* A logs at debug level */

E2E_FN pid_t cl_start_daemon(const char *state, const char *listen, const char *log) {
  e2e_log_restart(log);
  bool debug = cl_a_debug && log == e2e_server_log;
  const char *argv[] = {SERVER,
                        "run",
                        "--state",
                        state,
                        "--listen",
                        listen,
                        "--job-grace",
                        "5",
                        "--advertise",
                        cl_addr_a,
                        "--advertise",
                        cl_addr_b,
                        debug ? "--log-level" : NULL,
                        "debug",
                        NULL};
  pid_t pid = spawn_logged(log, argv);
  cr_assert(wait_in(log, "msg=listening", 5000), "the server on %s did not start", listen);
  return pid;
}

E2E_FN void cl_start_a(void) {
  e2e_server_pid = cl_start_daemon(e2e_state, cl_addr_a, e2e_server_log);
}

E2E_FN void cl_start_b(void) {
  cl_pid_b = cl_start_daemon(cl_state_b, cl_addr_b, cl_log_b);
}

/* In e2e_dir (e2e_dir_new): A and B on one new database, user alice, two
 * free ports; nothing runs yet. PostgreSQL only: the caller skips first. */
E2E_FN void cl_make(void) {
  snprintf(e2e_state, sizeof(e2e_state), "%s/state-a", e2e_dir);
  snprintf(cl_state_b, sizeof(cl_state_b), "%s/state-b", e2e_dir);
  snprintf(e2e_server_log, sizeof(e2e_server_log), "%s/server-a.log", e2e_dir);
  snprintf(cl_log_b, sizeof(cl_log_b), "%s/server-b.log", e2e_dir);
  const char *url = pg_test_new_db();
  struct out *o = RUN(SERVER, "init", "--state", e2e_state, "--db", url);
  cr_assert_eq(o->status, 0, "init A: %s", o->err);
  free(o);
  o = RUN(SERVER, "init", "--state", cl_state_b, "--db", url, "--keys-from", e2e_state);
  cr_assert_eq(o->status, 0, "init B: %s", o->err);
  free(o);
  o = RUN(SERVER, "user", "add", "alice", "--state", e2e_state);
  cr_assert_eq(o->status, 0);
  free(o);
  int pa = e2e_free_port(), pb = e2e_free_port();
  while (pb == pa)
    pb = e2e_free_port();
  snprintf(cl_addr_a, sizeof(cl_addr_a), "127.0.0.1:%d", pa);
  snprintf(cl_addr_b, sizeof(cl_addr_b), "127.0.0.1:%d", pb);
  snprintf(e2e_addr, sizeof(e2e_addr), "%s", cl_addr_a); /* pairing and peers go to A */
}

/* Whether needle is in log n times or more within ms. */
E2E_FN bool cl_wait_count(const char *log, const char *needle, int n, int ms) {
  for (int t = 0; t < ms; t += 20) {
    if (count_in(log, needle) >= n)
      return true;
    msleep(20);
  }
  return false;
}

#endif
