/* Two real `cordon-server run` daemons of one identity (the second's state
 * directory a copy of the first's: the same keys, server id and devices)
 * that advertise both addresses, and a real agent paired with the first:
 * the pairing stores the list, the agent moves to the second when the first
 * is killed, and prefers it after a restart although the first is back;
 * a session of version 3 is welcomed with the list, one of version 2
 * without it; `run --advertise` refuses junk with a one-line error. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "../server/e2e.h"
#include "../server/peer.h"

static char state_b[320], log_b[400], addr_b[64], adv_a[80], adv_b[80];
static pid_t pid_b = -1;

static pid_t start_daemon(const char *state, const char *listen, const char *log) {
  e2e_log_restart(log);
  const char *argv[] = {SERVER,        "run", "--state",     state, "--listen", listen,
                        "--advertise", adv_a, "--advertise", adv_b, NULL};
  pid_t pid = spawn_logged(log, argv);
  cr_assert(wait_in(log, "msg=listening", 5000), "the server on %s did not start", listen);
  return pid;
}

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  e2e_dir_new("cordon-cluster");
  snprintf(e2e_state, sizeof(e2e_state), "%s/state-a", e2e_dir);
  snprintf(state_b, sizeof(state_b), "%s/state-b", e2e_dir);
  snprintf(e2e_server_log, sizeof(e2e_server_log), "%s/server-a.log", e2e_dir);
  snprintf(log_b, sizeof(log_b), "%s/server-b.log", e2e_dir);
  struct out *o = RUN(SERVER, "init", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "init: %s", o->err);
  free(o);
  o = RUN(SERVER, "user", "add", "alice", "--state", e2e_state);
  cr_assert_eq(o->status, 0);
  free(o);
  int pa = e2e_free_port(), pb = e2e_free_port();
  while (pb == pa)
    pb = e2e_free_port();
  snprintf(e2e_addr, sizeof(e2e_addr), "127.0.0.1:%d", pa);
  snprintf(addr_b, sizeof(addr_b), "127.0.0.1:%d", pb);
  snprintf(adv_a, sizeof(adv_a), "%s", e2e_addr);
  snprintf(adv_b, sizeof(adv_b), "%s", addr_b);
}

static void teardown(void) {
  e2e_stop(&pid_b, SIGKILL);
  e2e_teardown();
}

static int connected_in(const char *log) {
  return count_in(log, "msg=\"device connected\"");
}

static json_t *stored_servers(const char *dir) {
  char path[400];
  snprintf(path, sizeof(path), "%s/servers.json", dir);
  return json_load_file(path, 0, NULL);
}

Test(cluster, an_agent_moves_to_the_other_server_and_prefers_it_after_a_restart, .init = setup,
     .fini = teardown, .timeout = 120) {
  e2e_server_pid = start_daemon(e2e_state, e2e_addr, e2e_server_log);
  struct e2e_agent *a = pair_agent(0, "node", NULL);
  /* the pairing's welcome listed both: stored beside the pairing */
  json_t *j = stored_servers(a->dir);
  cr_assert(j, "the pairing stored the cluster's addresses");
  cr_assert_eq(json_array_size(json_object_get(j, "servers")), 1, "the pairing address once");
  cr_expect_str_eq(json_string_value(json_array_get(json_object_get(j, "servers"), 0)), addr_b);
  json_decref(j);

  /* the second server: a copy of the first's state, made with the first stopped */
  e2e_stop(&e2e_server_pid, SIGTERM);
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "cp -a %s %s && rm -f %s/admin.sock", e2e_state, state_b, state_b);
  cr_assert_eq(system(cmd), 0);
  e2e_server_pid = start_daemon(e2e_state, e2e_addr, e2e_server_log);
  pid_b = start_daemon(state_b, addr_b, log_b);

  start_agent(a);
  cr_assert(wait_in(e2e_server_log, "msg=\"device connected\"", 5000), "on the pairing address");
  cr_expect_eq(connected_in(log_b), 0);

  /* the first server dies: the agent is on the second within its backoff */
  e2e_stop(&e2e_server_pid, SIGKILL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  cr_assert(wait_in(log_b, "msg=\"device connected\"", 10000), "the agent reached the second");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
  cr_expect_lt(ms, 3000, "it took %ld ms", ms);
  for (int i = 0; i < 100; i++) {
    j = stored_servers(a->dir);
    const char *last = json_string_value(json_object_get(j, "last"));
    bool on_b = last && strcmp(last, addr_b) == 0;
    json_decref(j);
    if (on_b)
      break;
    msleep(20);
  }
  j = stored_servers(a->dir);
  cr_expect_str_eq(json_string_value(json_object_get(j, "last")), addr_b);
  json_decref(j);

  /* status names both and the current one */
  struct out *o = RUN(AGENT, "--config", a->dir, "status");
  cr_assert_eq(o->status, 0, "%s", o->err);
  char want[300];
  snprintf(want, sizeof(want), "servers: %s (paired), %s; last worked: %s; current: %s", e2e_addr,
           addr_b, addr_b, addr_b);
  cr_expect(strstr(o->out, want), "status says:\n%s", o->out);
  free(o);

  /* a restart with both up: the last that worked first */
  e2e_stop(&a->pid, SIGKILL);
  e2e_server_pid = start_daemon(e2e_state, e2e_addr, e2e_server_log);
  const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
  a->pid = spawn_logged(a->log, argv);
  for (int i = 0; i < 500 && connected_in(log_b) < 2; i++)
    msleep(20);
  cr_expect_eq(connected_in(log_b), 2, "the agent went back to the second server");
  cr_expect_eq(connected_in(e2e_server_log), 0, "not to the pairing address");
}

Test(cluster, the_welcome_lists_the_advertised_addresses_from_version_3_on, .init = setup,
     .fini = teardown, .timeout = 60) {
  e2e_server_pid = start_daemon(e2e_state, e2e_addr, e2e_server_log);
  struct e2e_agent *a = pair_agent(0, "node", NULL);
  struct peer p;
  struct msg *w = peer_session_as(&p, a, MSG_PROTO_VERSION_MIN, MSG_PROTO_VERSION_MAX, "peer");
  cr_assert_eq(w->welcome.version, MSG_PROTO_VERSION_SERVERS);
  cr_assert_eq(w->welcome.n_servers, 2);
  cr_expect_str_eq(w->welcome.servers[0], e2e_addr, "in the order of --advertise");
  cr_expect_str_eq(w->welcome.servers[1], addr_b);
  peer_release(&p);
  w = peer_session_as(&p, a, 2, 2, "peer-v2");
  cr_assert_eq(w->welcome.version, 2, "a version-2 agent is still welcomed");
  cr_expect_null(w->welcome.servers, "and gets no key it does not know");
  peer_release(&p);
}

/* `run` with these arguments: its exit status, its stderr in err. */
static int run_with(const char *const *extra, char *err, size_t len) {
  const char *argv[48] = {SERVER, "run", "--state", e2e_state, "--listen", "127.0.0.1:0"};
  size_t n = 6;
  for (size_t i = 0; extra[i] && n < 47; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  struct out *o = run(argv);
  int st = o->status;
  size_t k = strnlen(o->err, len - 1);
  memcpy(err, o->err, k);
  err[k] = '\0';
  free(o);
  return st;
}

Test(cluster, run_advertise_refuses_junk_with_one_line, .init = setup, .fini = teardown,
     .timeout = 60) {
  char long_name[300];
  memset(long_name, 'a', 250);
  snprintf(long_name + 250, sizeof(long_name) - 250, ".b:7443"); /* 257 bytes */
  const char *const junk[] = {
      "junk",     "a.example",        "a.example:0",           "a.example:65536",
      "::1:7443", "a.example:7443/x", "http://a.example:7443", "a_b.example:7443",
      "",         long_name};
  for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
    char err[2048];
    int st = run_with(
        (const char *const[]){"--advertise", "b.example:7443", "--advertise", junk[i], NULL}, err,
        sizeof(err));
    cr_expect_eq(st, 2, "'%s': status %d", junk[i], st);
    cr_expect(strstr(err, "--advertise: expected HOST:PORT"), "'%s': %s", junk[i], err);
    char *nl = strchr(err, '\n');
    cr_expect(nl && nl[1] == '\0', "one line: %s", err);
  }
  const char *many[40] = {0};
  char names[17][32];
  for (int i = 0; i < 17; i++) {
    snprintf(names[i], sizeof(names[i]), "s%d.example:7443", i);
    many[2 * i] = "--advertise";
    many[2 * i + 1] = names[i];
  }
  char err[2048];
  cr_expect_eq(run_with(many, err, sizeof(err)), 2);
  cr_expect(strstr(err, "--advertise: at most 16 addresses"), "%s", err);
  cr_expect_eq(run_with((const char *const[]){"--advertise", "a.example:1", "--advertise",
                                              "a.example:1", NULL},
                        err, sizeof(err)),
               2);
  cr_expect(strstr(err, "is given twice"), "%s", err);
}
