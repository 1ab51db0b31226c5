/* Tests for platform/linux/user_scope.c: when a per-user agent asks the
 * user manager for a delegated scope, the socket it looks for and the
 * systemd-run command line. The test hosts run no systemd, so the scope
 * itself is not made here (docs/SECURITY.md says so): these are the pure
 * parts, and the facts of this host. */
#include "platform/linux/user_scope.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* a per-user agent on a desktop: cgroup v2, a user manager, systemd-run */
static const struct user_scope_facts desktop = {
    .unified = true, .manager = true, .systemd_run = true};

Test(user_scope, a_per_user_agent_without_a_cgroup_on_a_desktop_enters_a_scope) {
  const char *why = NULL;
  cr_assert_eq(user_scope_decide(&desktop, &why), USER_SCOPE_ENTER);
  cr_assert_str_eq(why, "a delegated systemd user scope");
}

Test(user_scope, each_missing_fact_keeps_the_rlimits_and_says_why) {
  static const struct {
    const char *name;
    struct user_scope_facts f;
    enum user_scope_choice want;
    const char *why_has;
  } rows[] = {
      {"root",
       {.agent_is_root = true, .unified = true, .manager = true, .systemd_run = true},
       USER_SCOPE_NOT_NEEDED,
       "root"},
      {"delegated unit",
       {.has_cgroup = true, .unified = true, .manager = true, .systemd_run = true},
       USER_SCOPE_NOT_NEEDED,
       "already"},
      /* re-executed once: never a loop, even when the scope gave nothing */
      {"in scope",
       {.in_scope = true, .unified = true, .manager = true, .systemd_run = true},
       USER_SCOPE_UNAVAILABLE,
       "in a user scope already"},
      /* a service's main process moved out would leave its unit empty */
      {"unit main",
       {.unit_main = true, .unified = true, .manager = true, .systemd_run = true},
       USER_SCOPE_UNAVAILABLE,
       "Delegate=yes"},
      {"cgroup v1",
       {.unified = false, .manager = true, .systemd_run = true},
       USER_SCOPE_UNAVAILABLE,
       "cgroup v2"},
      {"no manager",
       {.unified = true, .manager = false, .systemd_run = true},
       USER_SCOPE_UNAVAILABLE,
       "no systemd user manager"},
      {"no systemd-run",
       {.unified = true, .manager = true, .systemd_run = false},
       USER_SCOPE_UNAVAILABLE,
       "systemd-run is missing"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    const char *why = NULL;
    cr_expect_eq(user_scope_decide(&rows[i].f, &why), rows[i].want, "%s", rows[i].name);
    cr_expect(why && strstr(why, rows[i].why_has), "%s: %s", rows[i].name, why);
  }
}

Test(user_scope, the_manager_socket_is_the_private_one_of_the_runtime_dir) {
  char buf[128];
  cr_assert_eq(user_scope_manager_socket("/run/user/1000", buf, sizeof(buf)), 0);
  cr_assert_str_eq(buf, "/run/user/1000/systemd/private");
  char want[64];
  snprintf(want, sizeof(want), "/run/user/%u/systemd/private", (unsigned)getuid());
  cr_assert_eq(user_scope_manager_socket(NULL, buf, sizeof(buf)), 0);
  cr_assert_str_eq(buf, want, "no XDG_RUNTIME_DIR: the uid's own");
  cr_assert_eq(user_scope_manager_socket("", buf, sizeof(buf)), 0);
  cr_assert_str_eq(buf, want);
  cr_assert_eq(user_scope_manager_socket("/run/user/1000", buf, 10), -ENAMETOOLONG);
}

Test(user_scope, the_agent_runs_again_with_its_own_arguments_in_a_delegated_scope) {
  char *argv[] = {"cordon-agent", "--config", "/c", "exec", "/p", "--", "--bind", NULL};
  struct strv a;
  strv_init(&a);
  cr_assert_eq(user_scope_argv("/usr/bin/systemd-run", "/usr/bin/cordon-agent", 7, argv, &a), 0);
  static const char *const want[] = {"/usr/bin/systemd-run",
                                     "--user",
                                     "--scope",
                                     "--quiet",
                                     "--collect",
                                     "-p",
                                     "Delegate=yes",
                                     "--",
                                     "/usr/bin/cordon-agent",
                                     "--config",
                                     "/c",
                                     "exec",
                                     "/p",
                                     "--",
                                     "--bind"};
  size_t n = sizeof(want) / sizeof(want[0]);
  cr_assert_eq(a.n, n);
  for (size_t i = 0; i < n; i++)
    cr_expect_str_eq(a.v[i], want[i], "argv[%zu]", i);
  cr_assert_null(a.v[n]);
  strv_release(&a);
}

/* This host: no systemd, so no manager socket, and a manager socket of
 * another uid (a stale XDG_RUNTIME_DIR after su) is not taken for ours. */
Test(user_scope, a_runtime_dir_without_our_manager_socket_gives_no_manager) {
  char dir[] = "/tmp/cordon-us-XXXXXX";
  cr_assert(mkdtemp(dir));
  struct user_scope_facts f;
  user_scope_facts_read(dir, &f);
  cr_assert(!f.manager, "no socket");
  char cmd[256];
  snprintf(cmd, sizeof(cmd),
           "mkdir %s/systemd && python3 -c 'import socket; socket.socket(socket.AF_UNIX)"
           ".bind(\"%s/systemd/private\")' && chown -h 65534 %s/systemd/private",
           dir, dir, dir);
  cr_assert_eq(system(cmd), 0);
  user_scope_facts_read(dir, &f);
  cr_assert(!f.manager || getuid() == 65534, "another uid's socket is not our manager");
  snprintf(cmd, sizeof(cmd), "chown -h %u %s/systemd/private", (unsigned)getuid(), dir);
  cr_assert_eq(system(cmd), 0);
  user_scope_facts_read(dir, &f);
  cr_assert(f.manager, "our own socket is");
  cr_assert_eq(f.agent_is_root, geteuid() == 0);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}
