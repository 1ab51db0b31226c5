/* The launchd LaunchAgent (platform/macos/service_macos.c): the plist for
 * content, parsed back with an XML plist parser (python3 plistlib) and
 * checked with xmllint, and install/uninstall for what they write under a
 * --root directory. launchctl itself is never run here (no macOS).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/cmd_service.h"
#include "agent/config.h"
#include "platform/service.h"

static char *render(const char *agent, const char *config_dir, const char *home) {
  struct service_options o = {.scope = SERVICE_SCOPE_USER,
                              .agent_path = agent,
                              .config_dir = config_dir,
                              .home = home,
                              .uid = 501};
  char *t = NULL;
  int r = service_render(&o, &t);
  cr_assert_eq(r, 0, "render: %d", r);
  return t;
}

static char D[256];

static void make_dir(void) {
  snprintf(D, sizeof(D), "/tmp/cordon-plist-XXXXXX");
  cr_assert(mkdtemp(D));
  chmod(D, 0755);
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", D);
  (void)!system(cmd);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f, "%s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
}

/* Run a shell command; its output in out. Returns the exit status. */
static int sh(char *out, size_t len, const char *cmd) {
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  size_t n = fread(out, 1, len - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* plistlib parses the file and prints the values we check as JSON. */
static const char *py_dump = "import plistlib,json,sys\n"
                             "d=plistlib.load(open(sys.argv[1],'rb'))\n"
                             "print(json.dumps(d,sort_keys=True))\n";

static json_t *parse_plist(const char *text) {
  if (access("/usr/bin/python3", X_OK) != 0)
    cr_skip_test("python3 is needed to parse the plist");
  char path[300], py[300], cmd[1024], out[16384];
  snprintf(path, sizeof(path), "%s/agent.plist", D);
  snprintf(py, sizeof(py), "%s/dump.py", D);
  write_text(path, text);
  write_text(py, py_dump);
  snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s %s 2>&1", py, path);
  int st = sh(out, sizeof(out), cmd);
  cr_assert_eq(st, 0, "plistlib refused the plist: %s\n%s", out, text);
  json_error_t je;
  json_t *j = json_loads(out, 0, &je);
  cr_assert(j, "%s", out);
  return j;
}

static json_t *get(json_t *o, const char *k) {
  return json_object_get(o, k);
}

Test(service_macos, plist_has_label_program_run_at_load_keep_alive_and_logs, .init = make_dir,
     .fini = remove_dir) {
  char *t = render("/usr/local/bin/cordon-agent", "/Users/al/Library/Application Support/cordon",
                   "/Users/al");
  json_t *d = parse_plist(t);
  cr_assert_str_eq(json_string_value(get(d, "Label")), "org.cordon.agent");
  json_t *args = get(d, "ProgramArguments");
  cr_assert_eq(json_array_size(args), 4);
  cr_assert_str_eq(json_string_value(json_array_get(args, 0)), "/usr/local/bin/cordon-agent");
  cr_assert_str_eq(json_string_value(json_array_get(args, 1)), "--config");
  cr_assert_str_eq(json_string_value(json_array_get(args, 2)),
                   "/Users/al/Library/Application Support/cordon");
  cr_assert_str_eq(json_string_value(json_array_get(args, 3)), "run");
  cr_assert(json_is_true(get(d, "RunAtLoad")));
  /* restart on failure only: SuccessfulExit false, Crashed true */
  json_t *ka = get(d, "KeepAlive");
  cr_assert(json_is_object(ka));
  cr_assert(json_is_false(get(ka, "SuccessfulExit")));
  cr_assert(json_is_true(get(ka, "Crashed")));
  cr_assert_str_eq(json_string_value(get(d, "StandardOutPath")),
                   "/Users/al/Library/Logs/cordon/agent.out.log");
  cr_assert_str_eq(json_string_value(get(d, "StandardErrorPath")),
                   "/Users/al/Library/Logs/cordon/agent.err.log");
  cr_assert_eq(json_integer_value(get(d, "ThrottleInterval")), 10);
  json_decref(d);
  free(t);
}

Test(service_macos, plist_is_well_formed_xml_for_xmllint, .init = make_dir, .fini = remove_dir) {
  if (access("/usr/bin/xmllint", X_OK) != 0)
    cr_skip_test("xmllint is not installed (libxml2-utils)");
  char *t = render("/usr/local/bin/cordon-agent", NULL, "/Users/al");
  char path[300], cmd[600], out[4096];
  snprintf(path, sizeof(path), "%s/agent.plist", D);
  write_text(path, t);
  /* --nonet: the DOCTYPE is not fetched; well-formedness and the root */
  snprintf(cmd, sizeof(cmd), "/usr/bin/xmllint --nonet --noout %s 2>&1", path);
  int st = sh(out, sizeof(out), cmd);
  cr_assert_eq(st, 0, "xmllint: %s", out);
  snprintf(cmd, sizeof(cmd), "/usr/bin/xmllint --nonet --xpath 'name(/*)' %s 2>&1", path);
  sh(out, sizeof(out), cmd);
  out[strcspn(out, "\n")] = '\0';
  cr_assert_str_eq(out, "plist");
  free(t);
}

Test(service_macos, special_characters_are_escaped_and_round_trip, .init = make_dir,
     .fini = remove_dir) {
  const char *odd = "/Users/a&b/<cordon> \"x\" 'y'";
  char *t = render("/Applications/Cordon & Co.app/Contents/MacOS/cordon-agent", odd, "/Users/a&b");
  cr_assert(!strstr(t, "a&b/"), "raw & in XML: %s", t);
  json_t *d = parse_plist(t);
  json_t *args = get(d, "ProgramArguments");
  cr_assert_str_eq(json_string_value(json_array_get(args, 0)),
                   "/Applications/Cordon & Co.app/Contents/MacOS/cordon-agent");
  cr_assert_str_eq(json_string_value(json_array_get(args, 2)), odd);
  cr_assert_str_eq(json_string_value(get(d, "StandardOutPath")),
                   "/Users/a&b/Library/Logs/cordon/agent.out.log");
  json_decref(d);
  free(t);
}

Test(service_macos, without_a_config_dir_the_agent_uses_its_default) {
  char *t = render("/usr/local/bin/cordon-agent", NULL, "/Users/al");
  cr_assert(!strstr(t, "--config"));
  free(t);
}

Test(service_macos, bad_inputs_are_refused) {
  char *t = NULL;
  struct service_options o = {
      .scope = SERVICE_SCOPE_USER, .agent_path = "cordon-agent", .home = "/Users/al"};
  cr_assert_eq(service_render(&o, &t), CORDON_E_USAGE, "relative program");
  o.agent_path = "/usr/local/bin/cordon-agent";
  o.home = "Users/al";
  cr_assert_eq(service_render(&o, &t), CORDON_E_USAGE, "relative home");
  o.home = "/Users/al";
  o.config_dir = "/tmp/a\001b";
  cr_assert_eq(service_render(&o, &t), CORDON_E_USAGE, "control character");
  o.config_dir = NULL;
  o.scope = SERVICE_SCOPE_SYSTEM;
  cr_assert_eq(service_render(&o, &t), CORDON_E_USAGE, "no system LaunchDaemon");
  cr_assert_null(t);
}

Test(service_macos, the_shipped_example_is_what_install_writes) {
  char *t = render("/usr/local/bin/cordon-agent", NULL, "/Users/you");
  char buf[8192];
  FILE *f = fopen(CORDON_SOURCE_DIR "/installers/macos/org.cordon.agent.plist", "r");
  cr_assert(f);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  cr_assert_str_eq(buf, t, "regenerate installers/macos/org.cordon.agent.plist");
  free(t);
}

/* ---- install and uninstall, through the command ---- */

static int cmd(const char *const *words) {
  struct agent_config *cfg;
  struct cordon_diag d = {{0}};
  char cfgdir[400];
  snprintf(cfgdir, sizeof(cfgdir), "/Users/al/Library/Application Support/cordon");
  cr_assert_eq(agent_config_load(cfgdir, &cfg, &d), 0, "%s", d.msg);
  char *argv[16];
  int n = 0;
  for (; words[n]; n++)
    argv[n] = (char *)words[n];
  argv[n] = NULL;
  int rc = agent_cmd_service(n, argv, cfg);
  agent_config_free(cfg);
  return rc;
}

Test(service_macos, install_writes_the_launch_agent_and_log_dir_uninstall_removes_it,
     .init = make_dir, .fini = remove_dir) {
  setenv("HOME", "/Users/al", 1);
  const char *install[] = {
      "service", "install", "--root", D, "--agent-path", "/usr/local/bin/cordon-agent", NULL};
  cr_assert_eq(cmd(install), 0);
  char plist[512], logs[512], cfg[512];
  snprintf(plist, sizeof(plist), "%s/Users/al/Library/LaunchAgents/org.cordon.agent.plist", D);
  snprintf(logs, sizeof(logs), "%s/Users/al/Library/Logs/cordon", D);
  snprintf(cfg, sizeof(cfg), "%s/Users/al/Library/Application Support/cordon", D);
  struct stat st;
  cr_assert_eq(stat(plist, &st), 0, "no plist at %s", plist);
  cr_assert_eq(st.st_mode & 07777, 0644);
  cr_assert_eq(stat(logs, &st), 0);
  cr_assert_eq(st.st_mode & 07777, 0700);
  cr_assert_eq(stat(cfg, &st), 0);
  cr_assert_eq(st.st_mode & 07777, 0700);
  /* what is on disk parses and names the right program and config */
  char *text = calloc(1, 16384);
  FILE *f = fopen(plist, "r");
  cr_assert(f);
  size_t n = fread(text, 1, 16383, f);
  fclose(f);
  text[n] = '\0';
  json_t *d = parse_plist(text);
  json_t *args = get(d, "ProgramArguments");
  cr_assert_str_eq(json_string_value(json_array_get(args, 2)),
                   "/Users/al/Library/Application Support/cordon");
  json_decref(d);
  free(text);
  cr_assert_eq(cmd(install), 0, "idempotent");
  const char *status[] = {"service", "status", "--root", D, "--json", NULL};
  cr_assert_eq(cmd(status), 0);
  const char *uninstall[] = {"service", "uninstall", "--root", D, NULL};
  cr_assert_eq(cmd(uninstall), 0);
  cr_assert(stat(plist, &st) < 0 && errno == ENOENT);
  cr_assert_eq(cmd(uninstall), 0, "removing what is not there is fine");
}

Test(service_macos, system_scope_is_refused_as_usage) {
  const char *a[] = {"service", "install", "--system", "--root", "/tmp", NULL};
  cr_assert_eq(cmd(a), 2);
}

Test(service_macos, status_without_install_says_not_installed, .init = make_dir,
     .fini = remove_dir) {
  struct service_options o = {.scope = SERVICE_SCOPE_USER,
                              .agent_path = "/usr/local/bin/cordon-agent",
                              .home = "/Users/al",
                              .uid = 501,
                              .root = D};
  json_t *j;
  cr_assert_eq(service_status(&o, &j), 0);
  cr_assert(json_is_false(json_object_get(j, "installed")));
  cr_assert_str_eq(json_string_value(json_object_get(j, "manager")), "launchd");
  json_decref(j);
}

Test(service_macos, run_as_a_service_is_for_the_windows_scm_only) {
  cr_assert(service_has_scopes(), "LaunchAgents live in the user scope");
  cr_assert_eq(service_run(&(struct service_options){0}, NULL, NULL, NULL), -ENOTSUP,
               "launchd starts a plain run: nothing to answer, nothing called");
  const char *a[] = {"service", "install", "--user", "--root", "relative", NULL};
  cr_assert_eq(cmd(a), 2, "--root needs an absolute path");
}
