/* platform/posix/launch.c's cgroup join on Linux, with real cgroups and
 * real processes (as root): the first process and every descendant land
 * in the cgroup, by clone3(CLONE_INTO_CGROUP) on a v2 hierarchy and by the
 * child writing 0 to `tasks` on v1, and a v1 pids.max holds for the tree.
 * A hierarchy this machine lacks skips its test. And the tmpfs the child
 * mounts in a user namespace of its own (ns_tmpfs). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/magic.h>

#include "platform/posix/launch.h"

static char dir[4096];

static bool is_fs(const char *path, long magic) {
  struct statfs sf;
  return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

/* Our cgroup below a hierarchy: the v1 line naming ctrl, or v2 (NULL). */
static bool own(const char *ctrl, char *out, size_t len) {
  FILE *f = fopen("/proc/self/cgroup", "re");
  char line[4096];
  bool found = false;
  while (f && !found && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    *c1 = *c2 = '\0';
    if (!ctrl)
      found = strcmp(line, "0") == 0;
    else
      for (char *s, *t = strtok_r(c1 + 1, ",", &s); t && !found; t = strtok_r(NULL, ",", &s))
        found = strcmp(t, ctrl) == 0;
    if (found)
      snprintf(out, len, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
  }
  if (f)
    fclose(f);
  return found;
}

static void setup(void) {
  dir[0] = '\0';
}

static void teardown(void) {
  if (!dir[0])
    return;
  char procs[4200];
  snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
  for (int i = 0; i < 500; i++) {
    FILE *f = fopen(procs, "re");
    long pid;
    bool any = false;
    while (f && fscanf(f, "%ld", &pid) == 1) {
      kill((pid_t)pid, SIGKILL);
      any = true;
    }
    if (f)
      fclose(f);
    if (!any && rmdir(dir) == 0)
      return;
    usleep(2000);
  }
}

/* Launch argv with stdout+stderr to a pipe; its output and exit status. */
static int run(struct launch_spec *spec, char *out, size_t len) {
  int p[2];
  cr_assert_eq(launch_cloexec_pipe(p), 0);
  static char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  spec->path = spec->argv[0];
  spec->envp = envp;
  spec->stdout_fd = p[1];
  spec->stderr_fd = p[1];
  pid_t pid;
  int r = launch_spawn(spec, &pid);
  close(p[1]);
  cr_assert_eq(r, 0, "launch: %s", strerror(-r));
  size_t have = 0;
  ssize_t k;
  while (have < len - 1 && (k = read(p[0], out + have, len - 1 - have)) > 0)
    have += (size_t)k;
  out[have] = '\0';
  close(p[0]);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  return st;
}

static size_t count(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

/* The first process and a grandchild both report the new cgroup. */
static char *const show_cgroups[] = {
    "/bin/sh", "-c", "cat /proc/self/cgroup; sh -c 'cat /proc/self/cgroup' | sed s/^/child:/",
    NULL};

Test(launch, v2_the_tree_starts_in_its_cgroup_by_clone3, .init = setup, .fini = teardown) {
  if (geteuid() != 0)
    cr_skip_test("needs root to make a cgroup");
  const char *mnt = is_fs("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC) ? "/sys/fs/cgroup"
                    : is_fs("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC)
                        ? "/sys/fs/cgroup/unified"
                        : NULL;
  char base[2048];
  if (!mnt || !own(NULL, base, sizeof(base)))
    cr_skip_test("no cgroup v2 hierarchy here");
  if (!launch_clone3_into_cgroup_ok())
    cr_skip_test("this kernel has no clone3(CLONE_INTO_CGROUP)");
  char rel[2200];
  snprintf(rel, sizeof(rel), "%s/cordon-launch-test-%ld", base, (long)getpid());
  snprintf(dir, sizeof(dir), "%s%s", mnt, rel);
  cr_assert_eq(mkdir(dir, 0755), 0, "mkdir %s: %s", dir, strerror(errno));
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cr_assert_geq(dfd, 0);
  enum launch_join how = LAUNCH_JOIN_NONE;
  /* no cgroup.procs fd: were clone3 not used, nothing would join */
  struct launch_spec spec = {
      .argv = show_cgroups, .into_cgroup = true, .cgroup_dir_fd = dfd, .ret_join = &how};
  char out[8192], want[2300];
  int st = run(&spec, out, sizeof(out));
  close(dfd);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
  cr_assert_eq(how, LAUNCH_JOIN_CLONE3);
  snprintf(want, sizeof(want), "\n0::%s\n", rel);
  char *nl_out = out; /* the 0:: line is the last of each listing */
  cr_assert(strstr(nl_out, want), "the first process is in %s: %s", rel, out);
  snprintf(want, sizeof(want), "child:0::%s\n", rel);
  cr_assert(strstr(out, want), "its descendant too: %s", out);
}

/* A v1 cgroup's fd for `tasks` below our own cgroup of ctrl, or a skip. */
static int v1_dir(const char *ctrl, char *rel, size_t len) {
  if (geteuid() != 0)
    cr_skip_test("needs root to make a cgroup");
  char mnt[64], base[2048];
  snprintf(mnt, sizeof(mnt), "/sys/fs/cgroup/%s", ctrl);
  if (!is_fs(mnt, CGROUP_SUPER_MAGIC) || !own(ctrl, base, sizeof(base)))
    cr_skip_test("no cgroup v1 %s hierarchy here", ctrl);
  snprintf(rel, len, "%s/cordon-launch-test-%ld", base, (long)getpid());
  snprintf(dir, sizeof(dir), "%s%s", mnt, rel);
  cr_assert_eq(mkdir(dir, 0755), 0, "mkdir %s: %s", dir, strerror(errno));
  char tasks[4200];
  snprintf(tasks, sizeof(tasks), "%s/tasks", dir);
  int fd = open(tasks, O_WRONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  return fd;
}

Test(launch, v1_the_child_joins_by_writing_0_to_tasks, .init = setup, .fini = teardown) {
  char rel[2200];
  int fd = v1_dir("pids", rel, sizeof(rel));
  enum launch_join how = LAUNCH_JOIN_NONE;
  struct launch_spec spec = {
      .argv = show_cgroups, .cgroup_procs_fds = &fd, .n_cgroup = 1, .ret_join = &how};
  char out[8192], want[2300];
  int st = run(&spec, out, sizeof(out));
  close(fd);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
  cr_assert_eq(how, LAUNCH_JOIN_WRITE);
  snprintf(want, sizeof(want), ":pids:%s\n", rel);
  cr_assert_eq(count(out, want), 2, "the process and its descendant are in %s: %s", rel, out);
}

/* A fork bomb joined by the tasks write stays within pids.max. */
Test(launch, v1_pids_max_holds_for_every_descendant, .init = setup, .fini = teardown) {
  char rel[2200], max[4200];
  int fd = v1_dir("pids", rel, sizeof(rel));
  snprintf(max, sizeof(max), "%s/pids.max", dir);
  FILE *f = fopen(max, "we");
  cr_assert(f && fputs("6", f) >= 0 && fclose(f) == 0);
  /* children that each fork again: a tree, not a row */
  char *const bomb[] = {"/usr/bin/python3", "-c",
                        "import os, time\n"
                        "made = 0\n"
                        "for i in range(40):\n"
                        "  try:\n"
                        "    pid = os.fork()\n"
                        "  except OSError:\n"
                        "    continue\n"
                        "  if pid == 0:\n"
                        "    try:\n"
                        "      if os.fork() == 0: time.sleep(1)\n"
                        "    except OSError: pass\n"
                        "    time.sleep(1); os._exit(0)\n"
                        "  made += 1\n"
                        "print('made', made, flush=True)\n"
                        "os._exit(0)\n",
                        NULL};
  struct launch_spec spec = {.argv = bomb, .cgroup_procs_fds = &fd, .n_cgroup = 1};
  char out[4096];
  int st = run(&spec, out, sizeof(out));
  close(fd);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
  int made = -1;
  const char *m = strstr(out, "made ");
  cr_assert(m && sscanf(m, "made %d", &made) == 1, "%s", out);
  /* python itself is one of the 6 */
  cr_assert_leq(made, 5, "at most pids.max - 1 children: %s", out);
  cr_assert_geq(made, 1, "forking works below the limit: %s", out);
}

/* The child of a per-user agent (here a child of the test that became
 * uid 65534, dumpable as after its exec) mounts a tmpfs in a user and
 * mount namespace of its own and lands its root on the asked-for fd: the
 * program sees the bound inode count there, runs with no capability, and
 * the host's mount table never has the tmpfs. */
Test(launch, ns_tmpfs_is_mounted_in_a_namespace_of_the_childs_own, .init = setup) {
  if (geteuid() != 0)
    cr_skip_test("needs root to become another user");
  char target[] = "/tmp/cordon-launch-ns-XXXXXX";
  cr_assert(mkdtemp(target));
  cr_assert_eq(chown(target, 65534, 65534), 0);
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t agent = fork();
  cr_assert_geq(agent, 0);
  if (agent == 0) {
    close(p[0]);
    dup2(p[1], 1);
    if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0 ||
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
      _exit(90);
    int fd = open("/dev/null", O_PATH | O_CLOEXEC); /* the number the tmpfs lands on */
    char script[256];
    snprintf(script, sizeof(script),
             "stat -f -c 'inodes %%c' /proc/self/fd/%d; id -u; grep CapEff /proc/self/status; "
             "touch /proc/self/fd/%d/f && echo wrote",
             fd, fd);
    char *const argv[] = {"/bin/sh", "-c", script, NULL};
    static char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    struct launch_ns_tmpfs t = {.uid_map = "65534 65534 1",
                                .gid_map = "65534 65534 1",
                                .target = target,
                                .options = "size=1048576,nr_inodes=64,mode=0755",
                                .fd = fd};
    struct launch_spec spec = {.path = argv[0],
                               .argv = argv,
                               .envp = envp,
                               .stdout_fd = 1,
                               .stderr_fd = 1,
                               .keep_fds = &fd,
                               .n_keep = 1,
                               .no_new_privs = true,
                               .ns_tmpfs = &t};
    pid_t pid;
    int r = launch_spawn(&spec, &pid);
    if (r < 0) {
      printf("launch: %s\n", strerror(-r));
      _exit(91);
    }
    int st;
    waitpid(pid, &st, 0);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 92);
  }
  close(p[1]);
  char out[4096];
  size_t have = 0;
  ssize_t k;
  while (have < sizeof(out) - 1 && (k = read(p[0], out + have, sizeof(out) - 1 - have)) > 0)
    have += (size_t)k;
  out[have] = '\0';
  close(p[0]);
  int st;
  cr_assert_eq(waitpid(agent, &st, 0), agent);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
  cr_assert(strstr(out, "inodes 64\n"), "the bound tmpfs is on the fd: %s", out);
  cr_assert(strstr(out, "\n65534\n"), "as the user: %s", out);
  cr_assert(strstr(out, "CapEff:\t0000000000000000"), "no capability after exec: %s", out);
  cr_assert(strstr(out, "wrote"), "the user's own tmpfs: %s", out);
  FILE *f = fopen("/proc/self/mountinfo", "re");
  char line[4096];
  while (f && fgets(line, sizeof(line), f))
    cr_assert(!strstr(line, target), "in the host's mount table: %s", line);
  if (f)
    fclose(f);
  cr_assert_eq(rmdir(target), 0, "the mount point is a plain empty directory here: %s",
               strerror(errno));
}
