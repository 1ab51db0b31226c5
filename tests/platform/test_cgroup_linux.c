/* The reading of /proc/self/cgroup (cgroup_parse_self, platform/linux/
 * cgroup.c): which line names the v2 unified hierarchy and which a v1
 * controller's, on v1-only, v2-only and hybrid (systemd's) hosts, and
 * which paths are refused. The text of each host kind is what its kernel
 * writes; the mechanisms themselves are tested by the sandbox tests. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* ---- a job's v2 cgroup, for real (root on a cgroup v2 host: the VM step
 * of CI, scripts/test-vm.sh; skipped on a v1 host) ---- */

static char state_dir[64];
static struct cgroup_job cg;
static pid_t kids[2];

static void v2_setup(void) {
  cgroup_job_init(&cg);
  if (geteuid() != 0)
    cr_skip_test("needs root to make cgroups");
  const char *join = cgroup_join_method();
  if (!join || strcmp(join, "tasks") == 0)
    cr_skip_test("no usable cgroup v2 here (join: %s)", join ? join : "none");
  snprintf(state_dir, sizeof(state_dir), "/tmp/cordon-cgtest-XXXXXX");
  cr_assert(mkdtemp(state_dir));
  cr_assert_eq(cgroup_job_create(&cg, state_dir, 64ull << 20, 32), 0);
  cr_assert_eq(cg.version, 2, "the job got no v2 cgroup");
}

static void v2_teardown(void) {
  for (size_t i = 0; i < sizeof(kids) / sizeof(kids[0]); i++)
    if (kids[i] > 0) {
      kill(kids[i], SIGKILL);
      waitpid(kids[i], NULL, 0);
    }
  cgroup_job_release(&cg);
  if (state_dir[0])
    rmdir(state_dir);
}

static void read_in(const char *dir, const char *name, char *buf, size_t len) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "re");
  cr_assert(f, "%s: %s", path, strerror(errno));
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = '\0';
  buf[strcspn(buf, "\n")] = '\0';
}

Test(cgroup_v2, a_job_cgroup_carries_memory_max_no_swap_and_pids_max, .init = v2_setup,
     .fini = v2_teardown) {
  char v[64];
  read_in(cg.mem_dir, "memory.max", v, sizeof(v));
  cr_expect_str_eq(v, "67108864");
  read_in(cg.mem_dir, "memory.swap.max", v, sizeof(v));
  cr_expect_str_eq(v, "0");
  read_in(cg.pids_dir, "pids.max", v, sizeof(v));
  cr_expect_str_eq(v, "32");
  cr_expect_geq(cgroup_job_cpu_usec(&cg), 0, "no CPU time from cpu.stat");
  cr_expect_eq(cgroup_job_oom_killed(&cg), 0);
}

/* A child that moves itself into dir's cgroup.procs and waits. */
static pid_t park_in(const char *dir) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1)
      _exit(126);
    for (;;)
      pause();
  }
  return pid;
}

static bool listed_in(const char *dir, pid_t pid) {
  char path[4200];
  if ((size_t)snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= sizeof(path))
    return false;
  FILE *f = fopen(path, "re");
  long p;
  bool found = false;
  while (f && !found && fscanf(f, "%ld", &p) == 1)
    found = p == (long)pid;
  if (f)
    fclose(f);
  return found;
}

/* killed by SIGKILL within ms */
static bool killed_within(pid_t pid, int ms) {
  for (int t = 0; t < ms; t += 10) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    usleep(10 * 1000);
  }
  return false;
}

Test(cgroup_v2, kill_takes_the_whole_subtree_child_cgroups_included, .init = v2_setup,
     .fini = v2_teardown, .timeout = 30) {
  char sub[4200];
  snprintf(sub, sizeof(sub), "%s/sub", cg.mem_dir);
  cr_assert_eq(mkdir(sub, 0755), 0, "%s: %s", sub, strerror(errno));
  kids[0] = park_in(cg.mem_dir);
  kids[1] = park_in(sub);
  for (int t = 0; t < 500 && !(listed_in(cg.mem_dir, kids[0]) && listed_in(sub, kids[1])); t++)
    usleep(10 * 1000);
  cr_assert(listed_in(cg.mem_dir, kids[0]) && listed_in(sub, kids[1]));
  cr_expect_geq(cgroup_job_kill(&cg), 1);
  cr_expect(killed_within(kids[0], 5000), "the process in the job's cgroup lives");
  cr_expect(killed_within(kids[1], 5000), "the process in a child cgroup of the job lives");
  kids[0] = kids[1] = 0;
  rmdir(sub);
}
