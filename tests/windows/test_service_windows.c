/* The Windows service (platform/service.h on the SCM): the command line
 * the SCM runs, the refusal of LocalSystem, and install/start/stop/
 * uninstall through the SCM (Wine's services.exe here) with
 * wintest_helper.exe as the service program. */
#include <windows.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "platform/service.h"
#include "platform/windows/service_windows.h"
#include "tests/windows/wintest.h"

static char *render(const struct service_options *o, int want) {
  char *t = NULL;
  WT_EQ_INT(service_render(o, &t), want);
  return t;
}

WT_TEST(service, command_line_quotes_the_program) {
  struct service_options o = {
      .agent_path = "C:\\Program Files\\cordon\\cordon-agent.exe",
      .config_dir = "C:\\ProgramData\\cordon",
  };
  char *cl = render(&o, 0);
  WT_EQ_STR(cl, "\"C:\\Program Files\\cordon\\cordon-agent.exe\" --config "
                "C:\\ProgramData\\cordon run --service\n");
  free(cl);
  o.config_dir = "C:\\Program Data\\x";
  cl = render(&o, 0);
  WT_CHECK(strstr(cl, "--config \"C:\\Program Data\\x\" run --service\n") != NULL, "%s", cl);
  free(cl);
}

WT_TEST(service, run_args_are_separate_words) {
  struct service_options o = {.agent_path = "C:\\cordon\\cordon-agent.exe",
                              .run_args = "run  --service"};
  char *cl = render(&o, 0);
  WT_EQ_STR(cl, "\"C:\\cordon\\cordon-agent.exe\" run --service\n");
  free(cl);
  o.run_args = "a b c d e";
  render(&o, -EINVAL);
}

WT_TEST(service, the_scm_has_no_scopes_and_names_the_service) {
  WT_CHECK(!service_has_scopes(), "the SCM has scopes");
  WT_EQ_STR(service_manager_name(), "scm");
  WT_EQ_INT(service_default_scope(), SERVICE_SCOPE_SYSTEM);
  char name[64];
  struct service_options o = {0};
  WT_EQ_INT(service_definition_path(&o, name, sizeof(name)), 0);
  WT_EQ_STR(name, "cordon-agent");
  o.name = "cordon-wintest";
  WT_EQ_INT(service_definition_path(&o, name, sizeof(name)), 0);
  WT_EQ_STR(name, "cordon-wintest");
  char self[SERVICE_PATH_MAX];
  WT_EQ_INT(service_self_path(self, sizeof(self)), 0);
  WT_CHECK(strstr(self, "test_service_windows.exe") != NULL && self[1] == ':', "%s", self);
}

WT_TEST(service, run_outside_the_scm_is_refused_without_running) {
  struct service_options o = {.name = "cordon-wintest-never"};
  WT_EQ_INT(service_run(&o, NULL, NULL, NULL), CORDON_E_USAGE);
}

WT_TEST(service, virtual_account_sid_is_derived_from_the_name) {
  char sid[128];
  /* a SID Windows documents: NT SERVICE\TrustedInstaller */
  WT_EQ_INT(service_windows_sid("TrustedInstaller", sid, sizeof(sid)), 0);
  WT_EQ_STR(sid, "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464");
  char lower[128];
  WT_EQ_INT(service_windows_sid("trustedinstaller", lower, sizeof(lower)), 0);
  WT_EQ_STR(lower, sid);
}

WT_TEST(service, relative_agent_path_is_refused) {
  struct service_options o = {.agent_path = "cordon-agent.exe"};
  render(&o, CORDON_E_USAGE);
  o.agent_path = NULL;
  render(&o, CORDON_E_USAGE);
}

WT_TEST(service, local_system_is_refused) {
  struct service_options o = {.name = "cordon-wintest-never",
                              .agent_path = "C:\\x\\cordon-agent.exe",
                              .account = "LocalSystem"};
  struct cordon_diag diag = {{0}};
  WT_EQ_INT(service_install(&o, &diag), CORDON_E_USAGE);
  json_t *st = NULL;
  WT_EQ_INT(service_status(&o, &st), 0);
  WT_CHECK(json_is_false(json_object_get(st, "installed")), "installed anyway");
  json_decref(st);
}

static const char *state_of(const struct service_options *o) {
  static char buf[32];
  json_t *st = NULL;
  WT_EQ_INT(service_status(o, &st), 0);
  json_t *s = json_object_get(st, "state");
  snprintf(buf, sizeof(buf), "%s", json_is_string(s) ? json_string_value(s) : "null");
  json_decref(st);
  return buf;
}

WT_TEST(service, install_start_stop_uninstall) {
  char helper[MAX_PATH];
  GetModuleFileNameA(NULL, helper, sizeof(helper));
  char *slash = strrchr(helper, '\\');
  snprintf(slash + 1, sizeof(helper) - (size_t)(slash + 1 - helper), "wintest_helper.exe");
  const char *cfg = wt_tmpdir();
  struct service_options o = {
      .name = "cordon-wintest",
      .agent_path = helper,
      .config_dir = cfg,
      .run_args = "service",
  };
  struct cordon_diag diag = {{0}};
  WT_EQ_INT(service_uninstall(&o, &diag), 0); /* a leftover of an earlier run */
  int r = service_install(&o, &diag);
  WT_CHECK(r == 0, "install: %d %s", r, diag.msg);
  json_t *st = NULL;
  WT_EQ_INT(service_status(&o, &st), 0);
  WT_CHECK(json_is_true(json_object_get(st, "installed")), "not installed");
  WT_EQ_STR(json_string_value(json_object_get(st, "start")), "auto");
  WT_EQ_STR(json_string_value(json_object_get(st, "state")), "stopped");
  const char *cl = json_string_value(json_object_get(st, "command_line"));
  WT_CHECK(cl && strstr(cl, "wintest_helper.exe\" --config ") && strstr(cl, " service"), "%s",
           cl ? cl : "(null)");
  json_decref(st);
  r = service_start(&o, &diag);
  WT_CHECK(r == 0, "start: %d %s", r, diag.msg);
  WT_EQ_STR(state_of(&o), "running");
  r = service_stop(&o, &diag);
  WT_CHECK(r == 0, "stop: %d %s", r, diag.msg);
  WT_EQ_STR(state_of(&o), "stopped");
  WT_EQ_INT(service_uninstall(&o, &diag), 0);
  WT_EQ_INT(service_status(&o, &st), 0);
  WT_CHECK(json_is_false(json_object_get(st, "installed")), "still installed");
  json_decref(st);
  /* removing what is not installed is not an error */
  WT_EQ_INT(service_uninstall(&o, &diag), 0);
}
