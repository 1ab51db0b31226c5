/* Enrolment with a real daemon and real agents on loopback: approval
 * (per user, and run --require-approval), pairing codes listed, revoked
 * and their failures told apart, users removed. */
#include "e2e.h"

TestSuite(enrolment, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

static json_t *device_show(const char *device) {
  struct out *o = RUN(SERVER, "device", "show", device, "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *j = json_loads(o->out, 0, NULL);
  cr_assert_not_null(j, "%s", o->out);
  free(o);
  return j;
}

static void assert_device_state(const char *device, const char *want) {
  json_t *d = device_show(device);
  cr_assert_str_eq(json_string_value(json_object_get(d, "state")), want, "%s", device);
  json_decref(d);
}

/* a pending device connects, gets no job until approved */
static void pending_until_approved(struct e2e_agent *a, const char *pkg) {
  assert_device_state(a->name, "pending");
  cr_assert(wait_in(e2e_server_log, " state=pending", 1000), "the pairing line says it");
  start_agent(a); /* it connects: start_agent waits until it is online */
  struct out *o = RUN(SERVER, "devices", "--state", e2e_state);
  cr_assert(strstr(o->out, " pending "), "devices shows it: %s", o->out);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", "--no-queue", pkg, "--state", e2e_state);
  cr_assert_eq(o->status, 1, "no job for a pending device: %s", o->err);
  cr_assert(strstr(o->err, "pending approval"), "%s", o->err);
  free(o);
  o = RUN(SERVER, "device", "approve", a->name, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  assert_device_state(a->name, "active");
  o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "approved, it runs: %s", o->err);
  free(o);
}

Test(enrolment, a_user_that_requires_approval_gets_pending_devices) {
  struct out *o =
      RUN(SERVER, "user", "set", "alice", "--require-approval", "yes", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  char *pkg = pack("ok", "{\"name\":\"ok\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "exit 0\n");
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  pending_until_approved(a, pkg);
  /* reject: a pending device is revoked for good */
  struct e2e_agent *b = pair_agent(1, "desk", NULL);
  assert_device_state("desk", "pending");
  o = RUN(SERVER, "device", "reject", "desk", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  assert_device_state(b->id, "revoked");
  o = RUN(SERVER, "device", "approve", "laptop", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "approving an active device is no error: %s", o->err);
  free(o);
  free(pkg);
}

Test(enrolment, run_require_approval_makes_every_new_device_pending) {
  e2e_stop(&e2e_server_pid, SIGTERM);
  e2e_log_restart(e2e_server_log);
  const char *argv[] = {SERVER,     "run",         "--state", e2e_state, "--require-approval",
                        "--listen", "127.0.0.1:0", NULL};
  e2e_server_pid = spawn_logged(e2e_server_log, argv);
  cr_assert(wait_in(e2e_server_log, "msg=listening listen=127.0.0.1:", 5000));
  char line[2048];
  FILE *f = fopen(e2e_server_log, "r");
  while (fgets(line, sizeof(line), f)) {
    char *p = strstr(line, "msg=listening listen=");
    if (p)
      snprintf(e2e_addr, sizeof(e2e_addr), "%.*s", (int)strcspn(p + 21, " \n"), p + 21);
  }
  fclose(f);
  char *pkg = pack("ok", "{\"name\":\"ok\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "exit 0\n");
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  pending_until_approved(a, pkg);
  free(pkg);
}

Test(enrolment, codes_are_listed_revoked_and_their_failures_told_apart) {
  char *used = mint_code("alice");
  struct out *o;
  pair_agent(0, "laptop", NULL); /* mints and uses a code of its own */
  char *live = mint_code("alice");
  o = RUN(SERVER, "pair-code", "list", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *l = json_loads(o->out, 0, NULL);
  free(o);
  cr_assert_eq(json_array_size(l), 3, "three codes");
  size_t n_used = 0, n_live = 0, i;
  json_t *c;
  json_array_foreach(l, i, c) {
    const char *st = json_string_value(json_object_get(c, "state"));
    n_used += strcmp(st, "used") == 0;
    n_live += strcmp(st, "live") == 0;
    cr_assert_str_eq(json_string_value(json_object_get(c, "user")), "alice");
    cr_assert_eq(strlen(json_string_value(json_object_get(c, "id"))), 10, "the id, never more");
  }
  cr_assert_eq(n_used, 1);
  cr_assert_eq(n_live, 2);
  json_decref(l);
  o = RUN(SERVER, "pair-code", "list", "--state", e2e_state);
  cr_assert(!strstr(o->out, live + 12), "never a code's secret: %s", o->out);
  free(o);

  /* the used code again: the agent fails as always; the server knows why */
  char dir[400];
  snprintf(dir, sizeof(dir), "%s/agent-again", e2e_dir);
  /* revoke the first live one, then try it */
  char id[11];
  snprintf(id, sizeof(id), "%.5s%.5s", used, used + 6);
  o = RUN(SERVER, "pair-code", "revoke", id, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  o = RUN(AGENT, "--config", dir, "pair", "--server", e2e_addr, "--code", used, "--name", "x");
  cr_assert_eq(o->status, 1, "%s", o->err);
  free(o);
  cr_assert(
      wait_in(e2e_server_log, "msg=\"pairing failed\" addr=127.0.0.1 reason=code_burned", 3000));
  /* pair with the live one, then once more with it: code_used */
  o = RUN(AGENT, "--config", dir, "pair", "--server", e2e_addr, "--code", live, "--name", "y");
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  char dir2[400];
  snprintf(dir2, sizeof(dir2), "%s/agent-third", e2e_dir);
  o = RUN(AGENT, "--config", dir2, "pair", "--server", e2e_addr, "--code", live, "--name", "z");
  cr_assert_eq(o->status, 1, "%s", o->err);
  free(o);
  cr_assert(
      wait_in(e2e_server_log, "msg=\"pairing failed\" addr=127.0.0.1 reason=code_used", 3000));
  o = RUN(SERVER, "pair-code", "list", "--user", "alice", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->out, " code_burned at "), "the code's row keeps why: %s", o->out);
  cr_assert(strstr(o->out, " code_used at "), "%s", o->out);
  free(o);
  free(used);
  free(live);
}

Test(enrolment, user_remove_revokes_its_devices_and_keeps_its_jobs) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *pkg = pack("ok", "{\"name\":\"ok\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "exit 0\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  char *code = mint_code("alice");
  o = RUN(SERVER, "user", "remove", "alice", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->err, "1 device(s) revoked"), "%s", o->err);
  free(o);
  assert_device_state(a->id, "revoked");
  /* the agent is told at once: revoked, it stops with status 3 */
  int st = 0;
  for (int i = 0; i < 250 && waitpid(a->pid, &st, WNOHANG) == 0; i++)
    msleep(20);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3, "agent status %d", st);
  a->pid = -1;
  o = RUN(SERVER, "jobs", "--user", "alice", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "the history stays: %s", o->err);
  json_t *l = json_loads(o->out, 0, NULL);
  cr_assert_eq(json_array_size(l), 1);
  json_decref(l);
  free(o);
  o = RUN(SERVER, "pair-code", "alice", "--state", e2e_state);
  cr_assert_eq(o->status, 1, "no codes for a removed user: %s", o->err);
  cr_assert(strstr(o->err, "not_found"), "%s", o->err);
  free(o);
  o = RUN(SERVER, "pair-code", "list", "--json", "--state", e2e_state);
  cr_assert(!strstr(o->out, "\"live\""), "its codes burned: %s", o->out);
  free(o);
  o = RUN(SERVER, "user", "list", "--json", "--state", e2e_state);
  cr_assert(strstr(o->out, "\"removed\": true"), "%s", o->out);
  free(o);
  free(code);
  free(pkg);
}
