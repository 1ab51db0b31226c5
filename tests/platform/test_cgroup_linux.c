/* The reading of /proc/self/cgroup (cgroup_parse_self, platform/linux/
 * cgroup.c): which line names the v2 unified hierarchy and which a v1
 * controller's, on v1-only, v2-only and hybrid (systemd's) hosts, and
 * which paths are refused. The text of each host kind is what its kernel
 * writes; the mechanisms themselves are tested by the sandbox tests. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "platform/linux/cgroup.h"

/* cgroup v1 only (this CI machine's kind: no "0::" line) */
static const char v1_only[] = "13:misc:/\n"
                              "12:pids:/user.slice/user-1000.slice\n"
                              "11:memory:/user.slice/user-1000.slice/session-2.scope\n"
                              "4:cpu,cpuacct:/user.slice\n"
                              "3:net_cls,net_prio:/\n"
                              "1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n";

/* cgroup v2 only (every current distribution; Debian 12's own kernel) */
static const char v2_only[] = "0::/system.slice/cordon-agent.service\n";

/* hybrid: v1 controllers and a controller-less v2 hierarchy (systemd's
 * /sys/fs/cgroup/unified) */
static const char hybrid[] = "12:pids:/system.slice/cordon-agent.service\n"
                             "11:memory:/system.slice/cordon-agent.service\n"
                             "4:cpu,cpuacct:/system.slice/cordon-agent.service\n"
                             "1:name=systemd:/system.slice/cordon-agent.service\n"
                             "0::/system.slice/cordon-agent.service\n";

Test(cgroup_parse, finds_each_hierarchy_on_v1_v2_and_hybrid_hosts) {
  static const struct {
    const char *what, *text, *ctrl;
    int ret;
    const char *path;
  } cases[] = {
      {"v2 root", "0::/\n", NULL, 0, ""},
      {"v2 service", v2_only, NULL, 0, "/system.slice/cordon-agent.service"},
      {"v2: no v1 controller", v2_only, "memory", -ENOENT, NULL},
      {"v2 without the last newline", "0::/a/b", NULL, 0, "/a/b"},
      {"v2 path holding ':'", "0::/a:b/c\n", NULL, 0, "/a:b/c"},
      {"v1: no v2 line", v1_only, NULL, -ENOENT, NULL},
      {"v1 memory", v1_only, "memory", 0, "/user.slice/user-1000.slice/session-2.scope"},
      {"v1 pids", v1_only, "pids", 0, "/user.slice/user-1000.slice"},
      {"v1 cpuacct in a list", v1_only, "cpuacct", 0, "/user.slice"},
      {"v1 cpu in a list", v1_only, "cpu", 0, "/user.slice"},
      {"v1 root", v1_only, "misc", 0, ""},
      {"v1: a prefix of a name is not it", v1_only, "net", -ENOENT, NULL},
      {"v1: name= is no controller", v1_only, "systemd", -ENOENT, NULL},
      {"v1: absent controller", v1_only, "blkio", -ENOENT, NULL},
      {"hybrid v2", hybrid, NULL, 0, "/system.slice/cordon-agent.service"},
      {"hybrid memory", hybrid, "memory", 0, "/system.slice/cordon-agent.service"},
      {"empty", "", NULL, -ENOENT, NULL},
      {"no colons", "garbage\n0\n", NULL, -ENOENT, NULL},
      {"v1 line with id 0 is not v2", "0:memory:/x\n", NULL, -ENOENT, NULL},
      {"outside the cgroup namespace", "0::/../../user.slice\n", NULL, -EINVAL, NULL},
      {"a '.' component", "0::/a/./b\n", NULL, -EINVAL, NULL},
      {"a trailing '..'", "0::/a/..\n", NULL, -EINVAL, NULL},
      {"dotted names are names", "0::/a/.b/..c\n", NULL, 0, "/a/.b/..c"},
      {"removed cgroup", "0::/gone (deleted)\n", NULL, -EINVAL, NULL},
      {"relative path", "0::user.slice\n", NULL, -EINVAL, NULL},
      {"empty path", "0::\n", NULL, -EINVAL, NULL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char out[256] = "untouched";
    int r = cgroup_parse_self(cases[i].text, cases[i].ctrl, out, sizeof(out));
    cr_expect_eq(r, cases[i].ret, "%s: returned %d, not %d", cases[i].what, r, cases[i].ret);
    if (cases[i].path)
      cr_expect_str_eq(out, cases[i].path, "%s", cases[i].what);
    else
      cr_expect_str_eq(out, "untouched", "%s: out written on failure", cases[i].what);
  }
}

Test(cgroup_parse, a_path_longer_than_out_is_refused_untouched) {
  char out[8] = "keep";
  cr_expect_eq(cgroup_parse_self("0::/abcdefgh\n", NULL, out, sizeof(out)), -ENAMETOOLONG);
  cr_expect_str_eq(out, "keep");
  cr_expect_eq(cgroup_parse_self("0::/abcdef\n", NULL, out, sizeof(out)), 0);
  cr_expect_str_eq(out, "/abcdef");
}

Test(cgroup_parse, this_process_has_the_line_its_mount_implies) {
  /* the real file of the machine the test runs on: a v2 mount at
   * /sys/fs/cgroup means a "0::" line exists and parses (the bug of issue
   * 29: it never did) */
  FILE *f = fopen("/proc/self/cgroup", "re");
  cr_assert(f);
  char text[16384];
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  char out[4096];
  bool v2_line = strstr(text, "0::/") == text || strstr(text, "\n0::/");
  cr_expect_eq(cgroup_parse_self(text, NULL, out, sizeof(out)) == 0, v2_line, "%s", text);
}
