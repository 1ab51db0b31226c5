/* The server's inventory with a real daemon and real agents on loopback:
 * what a device reports in hello is kept and shown (device show), a second
 * device of the same name gets a suffix, jobs show their package, device
 * name and error, and filter. */
#include "e2e.h"

TestSuite(inventory, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

static json_t *stdout_json(const struct out *o) {
  json_error_t jerr;
  json_t *j = json_loads(o->out, 0, &jerr);
  cr_assert_not_null(j, "not JSON (%s): %s", jerr.text, o->out);
  return j;
}

Test(inventory, device_show_has_what_the_agent_reported) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  struct out *o = RUN(SERVER, "device", "show", "laptop", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *d = stdout_json(o);
  free(o);
  cr_assert_str_eq(json_string_value(json_object_get(d, "id")), a->id);
  cr_assert_str_eq(json_string_value(json_object_get(d, "name")), "laptop");
  cr_assert(json_is_true(json_object_get(d, "online")));
  cr_assert_str_eq(json_string_value(json_object_get(d, "address")), "127.0.0.1");
  cr_assert(json_is_string(json_object_get(d, "paired")));
  cr_assert(json_is_string(json_object_get(d, "best_level")));
  json_t *facts = json_object_get(d, "facts");
  cr_assert(json_is_object(facts));
  /* the agent's own version as its hello said it, not a constant of the server */
  const char *v = json_string_value(json_object_get(facts, "agent_version"));
  cr_assert(v && *v, "agent_version in the facts");
  cr_assert_str_eq(json_string_value(json_object_get(facts, "platform")), "linux");
  cr_assert(json_is_array(json_object_get(d, "running_jobs")));
  cr_assert(json_is_array(json_object_get(d, "recent_jobs")));
  json_decref(d);

  o = RUN(SERVER, "device", "show", a->id, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->out, "name:       laptop\n"), "%s", o->out);
  cr_assert(strstr(o->out, "online:     online\n"), "%s", o->out);
  cr_assert(strstr(o->out, "address:    127.0.0.1\n"), "%s", o->out);
  cr_assert(strstr(o->out, "  agent_version "), "%s", o->out);
  cr_assert(strstr(o->out, "recent jobs: none\n"), "%s", o->out);
  free(o);
}

Test(inventory, a_second_laptop_is_paired_as_laptop_2) {
  pair_agent(0, "laptop", NULL);
  /* a second agent, in a directory of its own, offering the same name */
  char dir[400], *code = mint_code("alice");
  snprintf(dir, sizeof(dir), "%s/agent-second", e2e_dir);
  struct out *p =
      RUN(AGENT, "--config", dir, "pair", "--server", e2e_addr, "--code", code, "--name", "laptop");
  cr_assert_eq(p->status, 0, "%s", p->err);
  char *at = strstr(p->err, "paired as device ");
  cr_assert(at, "%s", p->err);
  struct e2e_agent second = {0}, *b = &second;
  snprintf(b->id, sizeof(b->id), "%.32s", at + strlen("paired as device "));
  cr_assert(strstr(p->err, "laptop-2"), "the agent learns the name it got: %s", p->err);
  free(p);
  free(code);
  struct out *o = RUN(SERVER, "device", "show", "laptop-2", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *d = stdout_json(o);
  cr_assert_str_eq(json_string_value(json_object_get(d, "id")), b->id);
  json_decref(d);
  free(o);
  cr_assert(wait_in(e2e_server_log, "msg=\"device name taken, renamed\"", 3000));
  cr_assert(wait_in(e2e_server_log, "name=laptop-2", 100));
}

Test(inventory, jobs_show_package_device_name_and_error_and_filter) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *ok =
      pack("good", "{\"name\":\"good\",\"version\":\"1.2\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "exit 0\n");
  char *bad = pack("bad", "{\"name\":\"bad\",\"version\":\"3\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "exit 3\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", "--device", "laptop", ok, "--wait",
                      "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", bad, "--wait", "--state", e2e_state);
  cr_assert_eq(o->status, 1, "%s", o->err);
  free(o);

  o = RUN(SERVER, "jobs", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->out, " PACKAGE "), "%s", o->out);
  cr_assert(strstr(o->out, "good@1.2"), "%s", o->out);
  cr_assert(strstr(o->out, "bad@3"), "%s", o->out);
  cr_assert(strstr(o->out, " laptop "), "the device by name: %s", o->out);
  cr_assert(strstr(o->out, " exit 3\n"), "a failed job's error is not '-': %s", o->out);
  free(o);

  o = RUN(SERVER, "jobs", "--job-state", "failed", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *l = stdout_json(o);
  free(o);
  cr_assert_eq(json_array_size(l), 1);
  json_t *j = json_array_get(l, 0);
  cr_assert_str_eq(json_string_value(json_object_get(j, "package")), "bad@3");
  cr_assert_str_eq(json_string_value(json_object_get(j, "device_name")), "laptop");
  char id[33];
  snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(j, "id")));
  json_decref(l);

  o = RUN(SERVER, "jobs", "--device", "laptop", "--since", "1h", "--limit", "1", "--json",
          "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  l = stdout_json(o);
  cr_assert_eq(json_array_size(l), 1, "--limit 1: %s", o->out);
  json_decref(l);
  free(o);
  o = RUN(SERVER, "jobs", "--since", "2000-01-01T00:00:00Z", "--json", "--state", e2e_state);
  l = stdout_json(o);
  cr_assert_eq(json_array_size(l), 2);
  json_decref(l);
  free(o);

  /* job --json carries what the text shows */
  o = RUN(SERVER, "job", id, "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  j = stdout_json(o);
  free(o);
  static const char *const keys[] = {"id",           "user",    "device",  "device_name",
                                     "state",        "error",   "result",  "device_online",
                                     "package",      "created", "updated", "deadline",
                                     "queued_until", "where",   "args"};
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
    cr_assert_not_null(json_object_get(j, keys[i]), "job --json lacks %s", keys[i]);
  json_t *p = json_object_get(j, "package");
  cr_assert_str_eq(json_string_value(json_object_get(p, "name")), "bad");
  cr_assert_str_eq(json_string_value(json_object_get(p, "version")), "3");
  json_decref(j);
  o = RUN(SERVER, "job", id, "--state", e2e_state);
  cr_assert(strstr(o->out, "package:  bad@3 (index "), "%s", o->out);
  cr_assert(strstr(o->out, "error:    exit 3\n"), "%s", o->out);
  cr_assert(strstr(o->out, "device:   laptop ("), "%s", o->out);
  free(o);

  o = RUN(SERVER, "device", "show", "laptop", "--state", e2e_state);
  cr_assert(strstr(o->out, "bad@3"), "recent jobs: %s", o->out);
  free(o);
  free(ok);
  free(bad);
}
