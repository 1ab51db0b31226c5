/* cordon-server keys rotate / retire / list, end to end with the real
 * daemon and real agents on loopback: after a rotation a package signed by
 * the new publisher key runs on an agent that was online during it (told
 * at once) and on one that was offline (told when it connects), tickets
 * signed by the new ticket key; a package of the old key keeps running
 * until that key is retired, then it is refused with unknown_key, by the
 * server and by the agent's own trust store. */
#include "e2e.h"

TestSuite(keys, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

static const char manifest[] =
    "{\"name\":\"k\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

/* dispatch pkg to the device; the job id into id, or "" when refused
 * (then the stderr is in err) */
static int dispatch_to(const struct e2e_agent *a, const char *pkg, char id[33], char *err,
                       size_t cap) {
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", "--device", a->id, pkg, "--state", e2e_state);
  int st = o->status;
  id[0] = '\0';
  if (st == 0)
    job_id_of(o, id);
  size_t n = strlen(o->err) < cap - 1 ? strlen(o->err) : cap - 1;
  memcpy(err, o->err, n);
  err[n] = '\0';
  free(o);
  return st;
}

static void runs_on(const struct e2e_agent *a, const char *pkg, const char *what) {
  char id[33], err[2048];
  cr_assert_eq(dispatch_to(a, pkg, id, err, sizeof(err)), 0, "%s on %s: %s", what, a->name, err);
  cr_assert(wait_state(id, "done", 20000), "%s on %s: state %s", what, a->name,
            job_state(id, NULL));
  json_t *job;
  job_state(id, &job);
  json_t *res = json_object_get(job, "result");
  cr_assert_str_eq(json_string_value(json_object_get(res, "stdout")), "ok\n", "%s on %s", what,
                   a->name);
  json_decref(job);
}

/* keys list --json: the id of the current key of role */
static void current_id(const char *role, char out[33]) {
  struct out *o = RUN(SERVER, "keys", "list", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *l = json_loads(o->out, 0, NULL);
  free(o);
  out[0] = '\0';
  size_t i;
  json_t *k;
  json_array_foreach(l, i, k) {
    if (strcmp(json_string_value(json_object_get(k, "role")), role) == 0 &&
        json_is_true(json_object_get(k, "current")))
      snprintf(out, 33, "%s", json_string_value(json_object_get(k, "id")));
  }
  json_decref(l);
  cr_assert_eq(strlen(out), 32, "a current %s key", role);
}

Test(keys, rotate_then_retire_with_an_online_and_an_offline_agent) {
  struct e2e_agent *on = pair_agent(0, "online", NULL);
  struct e2e_agent *off = pair_agent(1, "offline", NULL);
  start_agent(on);
  char *old_pkg = pack("old", manifest, "echo ok\n");
  runs_on(on, old_pkg, "before any rotation");
  char old_pub[33], old_ticket[33];
  current_id("publisher", old_pub);
  current_id("ticket", old_ticket);

  struct out *o = RUN(SERVER, "keys", "rotate", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->err, "the running daemon announces it"), "%s", o->err);
  free(o);
  char new_pub[33], new_ticket[33];
  current_id("publisher", new_pub);
  current_id("ticket", new_ticket);
  cr_assert_str_neq(new_pub, old_pub);
  cr_assert_str_neq(new_ticket, old_ticket);
  cr_assert(wait_in(on->log, "msg=\"server keys updated\" serial=1", 5000),
            "the online agent took the announcement");

  char *new_pkg = pack("new", manifest, "echo ok\n");
  char cmd[2048];
  snprintf(cmd, sizeof(cmd), "%s pack %s/new -o %s/new2.cpkg --state %s 2>&1 | grep -q 'key id %s'",
           SERVER, e2e_dir, e2e_dir, e2e_state, new_pub);
  cr_assert_eq(system(cmd), 0, "pack signs with the new publisher key");
  runs_on(on, new_pkg, "new key, online during the rotation");
  runs_on(on, old_pkg, "old key, not retired");

  start_agent(off); /* offline during the rotation: told on connect */
  runs_on(off, new_pkg, "new key, offline during the rotation");
  char path[1024];
  snprintf(path, sizeof(path), "%s/server-keys.json", off->dir);
  json_t *sk = json_load_file(path, 0, NULL);
  cr_assert(sk, "the offline agent stored the rotated keys");
  cr_assert_eq(json_integer_value(json_object_get(sk, "serial")), 1);
  json_decref(sk);
  runs_on(off, old_pkg, "old key on the late agent");

  /* paired after the rotation: it holds the new keys already, and takes
   * the chain without a complaint */
  struct e2e_agent *late = pair_agent(2, "paired-after", NULL);
  start_agent(late);
  runs_on(late, new_pkg, "new key, device paired after the rotation");
  cr_assert_eq(count_in(late->log, "server keys refused"), 0, "%s", late->log);
  snprintf(path, sizeof(path), "%s/server-keys.json", late->dir);
  sk = json_load_file(path, 0, NULL);
  cr_assert_eq(json_integer_value(json_object_get(sk, "serial")), 1, "announcement 1 is its keys");
  json_decref(sk);

  o = RUN(SERVER, "keys", "retire", old_pub, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  cr_assert(wait_in(on->log, "msg=\"server keys updated\" serial=2", 5000));
  char id[33], err[2048];
  cr_assert_neq(dispatch_to(on, old_pkg, id, err, sizeof(err)), 0, "the retired key's package");
  cr_assert(strstr(err, "unknown_key"), "%s", err);
  /* the agent's own store refuses it too */
  o = RUN(AGENT, "--config", on->dir, "exec", old_pkg);
  cr_assert_eq(o->status, 1, "%s", o->err);
  cr_assert(strstr(o->err, "cordon-agent: unknown_key: "), "%s", o->err);
  free(o);
  runs_on(on, new_pkg, "new key after the retirement");
  /* the late agent learns the retirement on its next connection */
  e2e_stop(&off->pid, SIGTERM);
  start_agent(off);
  cr_assert(wait_in(off->log, "msg=\"server keys updated\" serial=2", 5000), "%s",
            "the late agent took the retirement");
  o = RUN(AGENT, "--config", off->dir, "exec", old_pkg);
  cr_assert(strstr(o->err, "cordon-agent: unknown_key: "), "%s", o->err);
  free(o);
  runs_on(off, new_pkg, "new key on the late agent after the retirement");

  o = RUN(SERVER, "keys", "list", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0);
  json_t *l = json_loads(o->out, 0, NULL);
  free(o);
  size_t i, n_retired = 0;
  json_t *k;
  json_array_foreach(l, i, k) {
    bool retired = json_is_string(json_object_get(k, "retired"));
    n_retired += retired;
    if (strcmp(json_string_value(json_object_get(k, "id")), old_pub) == 0)
      cr_assert(retired, "the old publisher key is listed retired");
  }
  cr_assert_eq(json_array_size(l), 4, "two ticket and two publisher keys");
  cr_assert_eq(n_retired, 1);
  json_decref(l);
  free(old_pkg);
  free(new_pkg);
}

Test(keys, retire_refuses_what_it_cannot_retire) {
  struct out *o = RUN(SERVER, "keys", "rotate", "--ticket", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  /* a key id that is not one, and retiring the current key, are usage */
  o = RUN(SERVER, "keys", "retire", "0123abcd", "--state", e2e_state);
  cr_assert_eq(o->status, 1, "%s", o->err);
  cr_assert(strstr(o->err, "cordon-server: not_found: "), "%s", o->err);
  free(o);
  o = RUN(SERVER, "keys", "retire", "012", "--state", e2e_state);
  cr_assert_eq(o->status, 2, "too short a prefix: %s", o->err);
  free(o);
  char cur[33];
  current_id("publisher", cur);
  o = RUN(SERVER, "keys", "retire", cur, "--state", e2e_state);
  cr_assert_eq(o->status, 2, "%s", o->err);
  cr_assert(strstr(o->err, "current publisher key"), "%s", o->err);
  free(o);
  current_id("ticket", cur);
  o = RUN(SERVER, "keys", "retire", cur, "--state", e2e_state);
  cr_assert_eq(o->status, 2, "%s", o->err);
  free(o);
}
