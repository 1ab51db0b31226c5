/* The systemd service (platform/linux/service_linux.c): the unit text for
 * content, systemd-analyze verify for validity (offline: these machines do
 * not run systemd as PID 1), and install/uninstall for what they write
 * under a --root directory, through `cordon-agent service` itself.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/cmd_service.h"
#include "agent/config.h"
#include "platform/service.h"

#define AGENT CORDON_BINARY_DIR "/cordon-agent"

static char *render(enum service_scope scope, const char *agent, const char *config_dir) {
  struct service_options o = {.scope = scope,
                              .agent_path = agent,
                              .config_dir = config_dir,
                              .home = "/home/alice",
                              .uid = 1000,
                              .job_user = "cordon-job"};
  char *t = NULL;
  int r = service_render(&o, &t);
  cr_assert_eq(r, 0, "render: %d", r);
  return t;
}

static bool has_line(const char *text, const char *line) {
  size_t n = strlen(line);
  for (const char *p = text; (p = strstr(p, line)); p += n)
    if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
      return true;
  return false;
}

/* systemd-analyze verify prints a line per problem and still exits 0 for
 * many of them: valid means no output at all. */
static void assert_verifies(const char *text, bool user) {
  if (access("/usr/bin/systemd-analyze", X_OK) != 0)
    cr_skip_test("systemd-analyze is not installed (apt-get install systemd)");
  char dir[] = "/tmp/cordon-unit-XXXXXX";
  cr_assert(mkdtemp(dir));
  char path[256], cmd[768], out[4096];
  snprintf(path, sizeof(path), "%s/cordon-agent.service", dir);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(text, f);
  fclose(f);
  snprintf(cmd, sizeof(cmd),
           "mkdir -p -m 700 %s/xdg && XDG_RUNTIME_DIR=%s/xdg SYSTEMD_LOG_COLOR=0 "
           "/usr/bin/systemd-analyze %s verify --man=no %s 2>&1",
           dir, dir, user ? "--user" : "", path);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  size_t n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)!system(cmd);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "systemd-analyze failed: %s", out);
  cr_assert_eq(n, 0, "systemd-analyze verify complained:\n%s\nunit:\n%s", out, text);
}

Test(service_linux, system_unit_runs_the_agent_with_restart_and_hardening) {
  char *t = render(SERVICE_SCOPE_SYSTEM, "/usr/bin/cordon-agent", NULL);
  cr_assert(
      has_line(t, "ExecStart=\"/usr/bin/cordon-agent\" --config \"/var/lib/cordon-agent\" run"),
      "%s", t);
  cr_assert(has_line(t, "Restart=on-failure"));
  cr_assert(has_line(t, "StateDirectory=cordon-agent"));
  cr_assert(has_line(t, "StateDirectoryMode=0711"));
  cr_assert(has_line(t, "WantedBy=multi-user.target"));
  cr_assert(has_line(t, "NoNewPrivileges=yes"));
  cr_assert(has_line(t, "ProtectSystem=strict"));
  /* bwrap needs these namespaces, and AF_NETLINK to bring up lo */
  cr_assert(has_line(t, "RestrictNamespaces=user mnt pid net ipc uts cgroup"));
  cr_assert(strstr(t, "AF_NETLINK"));
  /* these would make the kernel refuse bwrap's fresh /proc */
  cr_assert(!strstr(t, "ProtectKernelTunables=yes"));
  cr_assert(!strstr(t, "ProtectKernelLogs=yes"));
  cr_assert(!strstr(t, "ProcSubset="));
  /* a fresh procfs with hidepid: bwrap can still mount its own */
  cr_assert(has_line(t, "ProtectProc=invisible"));
  cr_assert(!strstr(t, "MemoryDenyWriteExecute=yes"));
  cr_assert(!strstr(t, "PrivateUsers=yes"), "bwrap makes its own user namespace");
  /* each hardening choice carries its reason in a comment */
  int comments = 0;
  for (const char *p = t; (p = strstr(p, "\n#")); p++)
    comments++;
  cr_assert_geq(comments, 20, "%s", t);
  free(t);
}

static long seconds_of(const char *text, const char *key) {
  const char *p = strstr(text, key);
  cr_assert(p, "no %s", key);
  return strtol(p + strlen(key), NULL, 10);
}

/* what both units say about readiness, restarts and stopping */
static void assert_lifecycle(const char *t) {
  cr_assert(has_line(t, "Type=notify"), "%s", t);
  cr_assert(has_line(t, "NotifyAccess=main"));
  cr_assert(has_line(t, "ExecReload=/bin/kill -HUP $MAINPID"));
  /* not paired / revoked (3) and bad local setup (2) are not retried */
  cr_assert(has_line(t, "RestartPreventExitStatus=2 3"));
  cr_assert(has_line(t, "WatchdogSec=60s"));
  /* SIGTERM to the agent alone, or its jobs die before the drain */
  cr_assert(has_line(t, "KillMode=mixed"));
  cr_assert_gt(seconds_of(t, "\nTimeoutStopSec="), 30, "longer than the default drain");
  cr_assert(has_line(t, "SystemCallFilter=~@clock @cpu-emulation @debug @module @obsolete @raw-io "
                        "@reboot @swap"));
  cr_assert(has_line(t, "SystemCallErrorNumber=EPERM"));
  /* that one filter only: bwrap mounts (@mount), the agent drops to the
   * job user (@privileged) and sets rlimits (@resources) */
  int filters = 0;
  for (const char *p = t; (p = strstr(p, "\nSystemCallFilter=")); p++)
    filters++;
  cr_assert_eq(filters, 1, "%s", t);
}

Test(service_linux, both_units_wait_for_ready_and_do_not_restart_an_unpaired_agent) {
  char *t = render(SERVICE_SCOPE_SYSTEM, "/usr/bin/cordon-agent", NULL);
  assert_lifecycle(t);
  cr_assert(has_line(t, "Delegate=memory pids"));
  cr_assert(has_line(t, "PrivateMounts=yes"));
  free(t);
  t = render(SERVICE_SCOPE_USER, "/usr/bin/cordon-agent", "/home/alice/.local/state/cordon-agent");
  assert_lifecycle(t);
  cr_assert(has_line(t, "Delegate=yes"), "the user's agent makes job cgroups in its subtree");
  free(t);
}

Test(service_linux, user_unit_has_no_system_only_directives) {
  char *t =
      render(SERVICE_SCOPE_USER, "/usr/bin/cordon-agent", "/home/alice/.local/state/cordon-agent");
  cr_assert(has_line(t, "ExecStart=\"/usr/bin/cordon-agent\" --config "
                        "\"/home/alice/.local/state/cordon-agent\" run"),
            "%s", t);
  cr_assert(has_line(t, "WantedBy=default.target"));
  cr_assert(has_line(t, "Restart=on-failure"));
  cr_assert(!strstr(t, "StateDirectory="));
  cr_assert(!strstr(t, "CapabilityBoundingSet="));
  cr_assert(!strstr(t, "ProtectSystem="));
  cr_assert(!strstr(t, "network-online.target"), "the user manager has no such target");
  /* they would put the agent in a user namespace of systemd's making */
  cr_assert(!strstr(t, "PrivateMounts="));
  cr_assert(!strstr(t, "ProtectProc="));
  free(t);
}

Test(service_linux, odd_paths_are_quoted_and_taken_literally) {
  char *t = render(SERVICE_SCOPE_SYSTEM, "/opt/my tools/cordon-agent", "/srv/a%b$c\"d");
  cr_assert(
      has_line(t, "ExecStart=\"/opt/my tools/cordon-agent\" --config \"/srv/a%%b$$c\\\"d\" run"),
      "%s", t);
  cr_assert(has_line(t, "ReadWritePaths=\"/srv/a%%b$c\\\"d\""), "%s", t);
  free(t);
}

Test(service_linux, relative_or_multiline_paths_are_refused) {
  char *t = NULL;
  struct service_options o = {.scope = SERVICE_SCOPE_SYSTEM, .agent_path = "cordon-agent"};
  cr_assert_eq(service_render(&o, &t), CORDON_E_USAGE);
  o.agent_path = "/usr/bin/cordon-agent\nExecStartPre=/bin/evil";
  cr_assert_eq(service_render(&o, &t), CORDON_E_USAGE);
  o.agent_path = "/usr/bin/cordon-agent";
  o.config_dir = "state";
  cr_assert_eq(service_render(&o, &t), CORDON_E_USAGE);
  cr_assert_null(t);
}

Test(service_linux, system_unit_passes_systemd_analyze_verify) {
  char *t = render(SERVICE_SCOPE_SYSTEM, AGENT, NULL);
  assert_verifies(t, false);
  free(t);
}

Test(service_linux, user_unit_passes_systemd_analyze_verify) {
  char *t = render(SERVICE_SCOPE_USER, AGENT, "/home/alice/.local/state/cordon-agent");
  assert_verifies(t, true);
  free(t);
}

Test(service_linux, shipped_units_pass_systemd_analyze_verify) {
  /* installers/linux/: what the .deb packages install */
  const char *files[] = {"cordon-agent.service", "cordon-agent-user.service",
                         "cordon-server.service"};
  for (size_t i = 0; i < 3; i++) {
    char path[512], buf[16384];
    snprintf(path, sizeof(path), CORDON_SOURCE_DIR "/installers/linux/%s", files[i]);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s: %s", path, strerror(errno));
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* their ExecStart names /usr/bin/...: point it at something that exists */
    char *fixed = NULL;
    size_t flen = 0;
    FILE *m = open_memstream(&fixed, &flen);
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
      if (strncmp(line, "ExecStart=", 10) == 0) {
        const char *rest = strchr(line + 10, ' ');
        fprintf(m, "ExecStart=%s%s\n", AGENT, rest ? rest : "");
      } else {
        fprintf(m, "%s\n", line);
      }
    }
    fclose(m);
    assert_verifies(fixed, strstr(files[i], "-user") != NULL);
    free(fixed);
  }
}

/* The unit text is written in one place (service_linux.c): the shipped
 * files are what `cordon-agent service print --agent-path
 * /usr/bin/cordon-agent [--user --default-config]` renders. */
static void assert_shipped(const char *file, const char *rendered) {
  char path[512], buf[16384];
  snprintf(path, sizeof(path), CORDON_SOURCE_DIR "/installers/linux/%s", file);
  FILE *f = fopen(path, "r");
  cr_assert(f, "%s: %s", path, strerror(errno));
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  cr_assert_str_eq(buf, rendered, "regenerate installers/linux/%s", file);
}

Test(service_linux, the_generated_system_unit_is_the_shipped_one) {
  char *t = render(SERVICE_SCOPE_SYSTEM, "/usr/bin/cordon-agent", NULL);
  assert_shipped("cordon-agent.service", t);
  free(t);
}

Test(service_linux, the_generated_user_unit_is_the_shipped_one) {
  char *t = render(SERVICE_SCOPE_USER, "/usr/bin/cordon-agent", NULL);
  assert_shipped("cordon-agent-user.service", t);
  free(t);
}

/* ---- install and uninstall, through the command ---- */

static char R[256];

static void make_root(void) {
  snprintf(R, sizeof(R), "/tmp/cordon-svc-XXXXXX");
  cr_assert(mkdtemp(R));
  chmod(R, 0755);
}

static void remove_root(void) {
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", R);
  (void)!system(cmd);
}

static int cmd(const char *const *words) {
  struct agent_config *cfg;
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_config_load("/var/lib/cordon-agent", &cfg, &d), 0, "%s", d.msg);
  char *argv[16];
  int n = 0;
  for (; words[n]; n++)
    argv[n] = (char *)words[n];
  argv[n] = NULL;
  int rc = agent_cmd_service(n, argv, cfg);
  agent_config_free(cfg);
  return rc;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  char *buf = calloc(1, 65536);
  size_t n = fread(buf, 1, 65535, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

Test(service_linux, install_writes_the_unit_and_state_dir_uninstall_removes_the_unit,
     .init = make_root, .fini = remove_root) {
  const char *install[] = {
      "service", "install", "--root", R, "--agent-path", "/usr/bin/cordon-agent", NULL};
  cr_assert_eq(cmd(install), 0);
  char unit[512], state[512];
  snprintf(unit, sizeof(unit), "%s/etc/systemd/system/cordon-agent.service", R);
  snprintf(state, sizeof(state), "%s/var/lib/cordon-agent", R);
  struct stat st;
  cr_assert_eq(stat(unit, &st), 0);
  cr_assert_eq(st.st_mode & 07777, 0644);
  cr_assert_eq(stat(state, &st), 0);
  cr_assert(S_ISDIR(st.st_mode));
  cr_assert_eq(st.st_mode & 07777, 0711);
  char *got = slurp(unit);
  char *want = render(SERVICE_SCOPE_SYSTEM, "/usr/bin/cordon-agent", "/var/lib/cordon-agent");
  cr_assert_str_eq(got, want);
  free(got);
  free(want);
  /* idempotent */
  cr_assert_eq(cmd(install), 0);
  const char *uninstall[] = {"service", "uninstall", "--root", R, NULL};
  cr_assert_eq(cmd(uninstall), 0);
  cr_assert(stat(unit, &st) < 0 && errno == ENOENT);
  cr_assert_eq(stat(state, &st), 0, "the state directory is kept");
  cr_assert_eq(cmd(uninstall), 0, "removing what is not there is fine");
  /* no temporary files left behind */
  char ls[600];
  snprintf(ls, sizeof(ls), "test -z \"$(ls -A %s/etc/systemd/system)\"", R);
  cr_assert_eq(system(ls), 0);
}

Test(service_linux, a_config_dir_after_the_action_is_the_services, .init = make_root,
     .fini = remove_root) {
  const char *install[] = {"service",  "install",           "--root",       R,
                           "--config", "/srv/cordon state", "--agent-path", "/usr/bin/cordon-agent",
                           NULL};
  cr_assert_eq(cmd(install), 0);
  char unit[512], state[512];
  snprintf(unit, sizeof(unit), "%s/etc/systemd/system/cordon-agent.service", R);
  snprintf(state, sizeof(state), "%s/srv/cordon state", R);
  char *got = slurp(unit);
  cr_assert(got);
  cr_assert(has_line(got, "ExecStart=\"/usr/bin/cordon-agent\" --config \"/srv/cordon state\" run"),
            "%s", got);
  cr_assert(has_line(got, "ReadWritePaths=\"/srv/cordon state\""), "%s", got);
  free(got);
  struct stat st;
  cr_assert_eq(stat(state, &st), 0);
  cr_assert_eq(st.st_mode & 07777, 0711);
  const char *bad[] = {"service", "install", "--root", R, "--config", "relative", NULL};
  cr_assert_eq(cmd(bad), 2, "a relative config dir cannot go into a unit");
}

Test(service_linux, user_install_goes_under_the_users_config, .init = make_root,
     .fini = remove_root) {
  setenv("HOME", "/home/alice", 1);
  unsetenv("XDG_CONFIG_HOME");
  const char *install[] = {
      "service", "install", "--user", "--root", R, "--agent-path", "/usr/bin/cordon-agent", NULL};
  cr_assert_eq(cmd(install), 0);
  char unit[512];
  snprintf(unit, sizeof(unit), "%s/home/alice/.config/systemd/user/cordon-agent.service", R);
  char *got = slurp(unit);
  cr_assert(got, "no unit at %s", unit);
  cr_assert(has_line(got, "WantedBy=default.target"));
  free(got);
  const char *status[] = {"service", "status", "--user", "--root", R, "--json", NULL};
  cr_assert_eq(cmd(status), 0);
  const char *uninstall[] = {"service", "uninstall", "--user", "--root", R, NULL};
  cr_assert_eq(cmd(uninstall), 0);
  struct stat st;
  cr_assert(stat(unit, &st) < 0);
}

Test(service_linux, status_reports_installed_and_unknown_activity_without_systemd,
     .init = make_root, .fini = remove_root) {
  struct service_options o = {
      .scope = SERVICE_SCOPE_SYSTEM, .agent_path = "/usr/bin/cordon-agent", .root = R};
  json_t *j;
  cr_assert_eq(service_status(&o, &j), 0);
  cr_assert(json_is_false(json_object_get(j, "installed")));
  cr_assert(json_is_null(json_object_get(j, "active")));
  cr_assert_str_eq(json_string_value(json_object_get(j, "manager")), "systemd");
  json_decref(j);
  struct cordon_diag d = {{0}};
  cr_assert_eq(service_install(&o, &d), 0, "%s", d.msg);
  cr_assert_eq(service_status(&o, &j), 0);
  cr_assert(json_is_true(json_object_get(j, "installed")));
  json_decref(j);
}

Test(service_linux, bad_usage_exits_2) {
  const char *a[] = {"service", NULL};
  cr_assert_eq(cmd(a), 2);
  const char *b[] = {"service", "reinstall", NULL};
  cr_assert_eq(cmd(b), 2);
  const char *c[] = {"service", "install", "--user", "--system", NULL};
  cr_assert_eq(cmd(c), 2);
  const char *d[] = {"service", "install", "--root", "relative", NULL};
  cr_assert_eq(cmd(d), 2);
  const char *e[] = {"service", "install", "--bogus", NULL};
  cr_assert_eq(cmd(e), 2);
}

Test(service_linux, a_system_install_needs_root) {
  struct passwd *pw = getpwnam("cordon-test");
  if (!pw || geteuid() != 0)
    cr_skip_test("needs root and the cordon-test account (scripts/test-setup.sh)");
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
      _exit(99);
    const char *a[] = {"service", "install", "--agent-path", "/usr/bin/cordon-agent", NULL};
    struct agent_config *cfg;
    struct cordon_diag d = {{0}};
    if (agent_config_load("/tmp", &cfg, &d) < 0)
      _exit(98);
    _exit(agent_cmd_service(4, (char **)a, cfg));
  }
  int st;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st));
  cr_assert_eq(WEXITSTATUS(st), 2, "refused as bad usage, nothing written");
}

Test(service_linux, run_as_a_service_is_for_the_windows_scm_only, .init = make_root,
     .fini = remove_root) {
  cr_assert(service_has_scopes(), "systemd units live in scopes");
  cr_assert_eq(service_run(&(struct service_options){0}, NULL, NULL, NULL), -ENOTSUP,
               "systemd starts a plain run: nothing to answer, nothing called");
  char c[600], out[1024];
  snprintf(c, sizeof(c), "'%s' --config '%s' run --service 2>&1", AGENT, R);
  FILE *p = popen(c, "r");
  cr_assert(p);
  size_t n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit %d: %s", st, out);
  cr_assert_str_eq(out, "cordon-agent: usage: --service is for the Windows Service Control "
                        "Manager only\n");
}
