/* The fair reference of the benchmarks (issue 18): by hand, the work
 * cordon must do to run one isolated job, with none of cordon's code.
 *
 *   - bwrap invoked the same way: the command line is the one
 *     `cordon-agent explain --json` prints for the package (the same view:
 *     read-only /usr and /etc, blinded shadow files, the sized tmpfs
 *     workspace holding /tmp, the package bound by fd, --clearenv, every
 *     namespace, capabilities dropped), with this process's own fds put in
 *     for the package and the filter;
 *   - a seccomp filter of the same shape, built here with libseccomp per
 *     launch: the unconditional rules explain lists (allowed and refused
 *     system calls, default ENOSYS, other architectures killed) and the
 *     argument checks written out by hand below;
 *   - the same cgroup setup: a fresh memory + pids + cpuacct cgroup (v1)
 *     or one v2 cgroup with memory.max and pids.max, joined by the
 *     cheapest way there is (clone3(CLONE_INTO_CGROUP) on v2, the child
 *     writing 0 to `tasks` on v1), emptied and removed after the job;
 *   - the same user: the child drops to cordon-job, sets no_new_privs and
 *     a parent-death signal, starts a new session.
 *
 * The reference is a separate process (`BENCH --fair-ref SPEC PKG`, the
 * benchmark re-executing itself) so that it pays for a process start and
 * dynamic linking as `cordon-agent exec` does. SPEC is the explain JSON in
 * a file, read per launch (cordon reads its manifest and config per job).
 */
#ifndef CORDON_BENCH_FAIR_REF_H
#define CORDON_BENCH_FAIR_REF_H

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <jansson.h>
#include <linux/magic.h>
#include <linux/sched.h>
#include <pwd.h>
#include <sched.h>
#include <seccomp.h>

/* libseccomp's SCMP_A* macros leave datum_b out for one-operand
 * comparisons: clang warns on that in its header's expansion. The
 * benchmark's reference uses them as libseccomp documents them. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/netlink.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

static int fr_write(const char *dir, const char *name, const char *val) {
  char p[4096];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  int fd = open(p, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = write(fd, val, strlen(val));
  close(fd);
  return n < 0 ? -1 : 0;
}

/* The argument checks, by hand: the same kinds of comparison as cordon's
 * (flag masks, equalities, mode bits) on the same system calls. */
static int fr_cond_rules(scmp_filter_ctx ctx, bool net) {
  static const uint64_t ns[] = {CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,    CLONE_NEWNET,
                                CLONE_NEWUTS,  CLONE_NEWIPC, CLONE_NEWCGROUP, 0x80 /* TIME */};
  uint64_t all = 0;
  int r = 0;
  for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
    all |= ns[i];
    r |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, ns[i], ns[i]));
  }
  r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                        SCMP_A0(SCMP_CMP_MASKED_EQ, all, 0));
  r |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                        SCMP_A1(SCMP_CMP_EQ, TIOCSTI));
  r |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                        SCMP_A1(SCMP_CMP_EQ, TIOCLINUX));
  /* one comparison per argument and rule: any other request as ranges */
  r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_LT, TIOCSTI));
  r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_GT, TIOCLINUX));
  for (uint64_t req = TIOCSTI + 1; req < TIOCLINUX; req++)
    r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_EQ, req));
  uint32_t inet = net ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO(EPERM);
  r |= seccomp_rule_add(ctx, inet, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_INET));
  r |= seccomp_rule_add(ctx, inet, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_INET6));
  r |= seccomp_rule_add(ctx, inet, SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
                        SCMP_A2(SCMP_CMP_EQ, NETLINK_ROUTE));
  r |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                        SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
  r |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                        SCMP_A0(SCMP_CMP_GT, AF_NETLINK));
  r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socketpair), 2, SCMP_A0(SCMP_CMP_EQ, AF_UNIX),
                        SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_STREAM));
  r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socketpair), 2, SCMP_A0(SCMP_CMP_EQ, AF_UNIX),
                        SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_SEQPACKET));
  r |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socketpair), 1,
                        SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  static const struct {
    const char *name;
    unsigned arg;
  } modes[] = {{"chmod", 1},   {"fchmod", 1}, {"fchmodat", 2}, {"fchmodat2", 2},
               {"creat", 1},   {"mkdir", 1},  {"mkdirat", 2},  {"mknod", 1},
               {"mknodat", 2}, {"open", 2},   {"openat", 3}};
  for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
    int nr = seccomp_syscall_resolve_name(modes[i].name);
    if (nr == __NR_SCMP_ERROR)
      continue;
    unsigned a = modes[i].arg;
    r |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                          SCMP_CMP64(a, SCMP_CMP_MASKED_EQ, S_ISUID, S_ISUID));
    r |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                          SCMP_CMP64(a, SCMP_CMP_MASKED_EQ, S_ISGID, S_ISGID));
    r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                          SCMP_CMP64(a, SCMP_CMP_MASKED_EQ, S_ISUID | S_ISGID, 0));
  }
  return r;
}

static uint32_t fr_action(const char *a) {
  static const struct {
    const char *name;
    int err;
  } errs[] = {{"EPERM", EPERM},
              {"ENOSYS", ENOSYS},
              {"EOPNOTSUPP", EOPNOTSUPP},
              {"EAFNOSUPPORT", EAFNOSUPPORT}};
  if (strcmp(a, "ALLOW") == 0)
    return SCMP_ACT_ALLOW;
  for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
    if (strcmp(a, errs[i].name) == 0)
      return SCMP_ACT_ERRNO((uint32_t)errs[i].err);
  return SCMP_ACT_KILL_PROCESS;
}

/* The filter in a sealed memfd, or -1. out_insns: its length. */
static int fr_filter_fd(json_t *rules, bool net, long *out_insns) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(ENOSYS));
  if (!ctx)
    return -1;
  int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  size_t i;
  json_t *row;
  json_array_foreach(rules, i, row) {
    const char *name = json_string_value(json_object_get(row, "syscall"));
    const char *act = json_string_value(json_object_get(row, "action"));
    if (!name || !act || name[0] == '<' || !json_is_null(json_object_get(row, "when")))
      continue;
    int nr = seccomp_syscall_resolve_name(name);
    uint32_t action = fr_action(act);
    if (nr != __NR_SCMP_ERROR && action != SCMP_ACT_ERRNO(ENOSYS)) /* the default already */
      r |= seccomp_rule_add(ctx, action, nr, 0);
  }
  r |= fr_cond_rules(ctx, net);
  int fd = r == 0 ? memfd_create("ref-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING) : -1;
  if (fd >= 0 && seccomp_export_bpf(ctx, fd) != 0) {
    close(fd);
    fd = -1;
  }
  seccomp_release(ctx);
  if (fd < 0)
    return -1;
  struct stat st;
  if (out_insns && fstat(fd, &st) == 0)
    *out_insns = (long)(st.st_size / 8);
  (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  lseek(fd, 0, SEEK_SET);
  return fd;
}

/* Our cgroup path for a v1 controller ("memory"), or v2 (ctrl NULL). */
static int fr_own_cgroup(const char *ctrl, char *out, size_t len) {
  FILE *f = fopen("/proc/self/cgroup", "re");
  char line[4096];
  int r = -1;
  while (f && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    *c2 = '\0';
    bool match = !ctrl ? c1[1] == '\0' : false;
    for (char *save, *t = ctrl ? strtok_r(c1 + 1, ",", &save) : NULL; t;
         t = strtok_r(NULL, ",", &save))
      match = match || strcmp(t, ctrl) == 0;
    if (match) {
      snprintf(out, len, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
      r = 0;
      break;
    }
  }
  if (f)
    fclose(f);
  return r;
}

struct fr_cgroups {
  int version;
  char dirs[3][4096];
  int n;
  int join_fd[3]; /* v1: tasks; v2: the cgroup directory */
};

static int fr_cg_create(struct fr_cgroups *cg, uint64_t mem, unsigned pids) {
  char own[1024], parent[1100], v[32];
  struct statfs sf;
  memset(cg, 0, sizeof(*cg));
  char name[64];
  snprintf(name, sizeof(name), "cordon-fairref-%ld-%ld", (long)getpid(), (long)time(NULL));
  if (statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC &&
      fr_own_cgroup(NULL, own, sizeof(own)) == 0) {
    snprintf(cg->dirs[0], sizeof(cg->dirs[0]), "/sys/fs/cgroup%s/%s", own, name);
    if (mkdir(cg->dirs[0], 0700) < 0)
      return -1;
    cg->n = 1;
    cg->version = 2;
    snprintf(v, sizeof(v), "%" PRIu64, mem);
    fr_write(cg->dirs[0], "memory.max", v);
    fr_write(cg->dirs[0], "memory.swap.max", "0");
    snprintf(v, sizeof(v), "%u", pids);
    fr_write(cg->dirs[0], "pids.max", v);
    cg->join_fd[0] = open(cg->dirs[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return cg->join_fd[0] < 0 ? -1 : 0;
  }
  static const char *const ctrls[] = {"memory", "pids", "cpuacct"};
  for (int i = 0; i < 3; i++) {
    if (fr_own_cgroup(ctrls[i], own, sizeof(own)) < 0)
      continue;
    snprintf(parent, sizeof(parent), "/sys/fs/cgroup/%s%s", ctrls[i], own);
    snprintf(cg->dirs[cg->n], sizeof(cg->dirs[0]), "%s/%s", parent, name);
    if (mkdir(cg->dirs[cg->n], 0700) < 0)
      continue;
    if (i == 0) {
      snprintf(v, sizeof(v), "%" PRIu64, mem);
      fr_write(cg->dirs[cg->n], "memory.limit_in_bytes", v);
      fr_write(cg->dirs[cg->n], "memory.memsw.limit_in_bytes", v);
    } else if (i == 1) {
      snprintf(v, sizeof(v), "%u", pids);
      fr_write(cg->dirs[cg->n], "pids.max", v);
    }
    char t[4200 + 64];
    snprintf(t, sizeof(t), "%s/tasks", cg->dirs[cg->n]);
    cg->join_fd[cg->n++] = open(t, O_WRONLY | O_CLOEXEC);
  }
  cg->version = 1;
  return cg->n > 0 ? 0 : -1;
}

static void fr_cg_remove(struct fr_cgroups *cg) {
  for (int i = 0; i < cg->n; i++) {
    close(cg->join_fd[i]);
    char p[4200];
    snprintf(p, sizeof(p), "%s/cgroup.procs", cg->dirs[i]);
    for (int round = 0; round < 1000; round++) {
      FILE *f = fopen(p, "re");
      long pid;
      bool any = false;
      while (f && fscanf(f, "%ld", &pid) == 1) {
        kill((pid_t)pid, SIGKILL);
        any = true;
      }
      if (f)
        fclose(f);
      if (!any)
        break;
      usleep(200);
    }
    while (rmdir(cg->dirs[i]) < 0 && errno == EBUSY)
      usleep(200);
  }
}

/* The reference process's main: returns the exit status of the job. */
static int fair_ref_main(const char *spec_path, const char *pkg_dir) {
  json_error_t jerr;
  json_t *spec = json_load_file(spec_path, 0, &jerr);
  if (!spec)
    return 120;
  json_t *jargv = json_object_get(spec, "argv");
  bool net = json_is_true(json_object_get(spec, "net"));
  json_t *lim = json_object_get(spec, "limits");
  uint64_t mem =
      (uint64_t)json_integer_value(json_object_get(json_object_get(lim, "memory"), "value")) << 20;
  unsigned pids =
      (unsigned)json_integer_value(json_object_get(json_object_get(lim, "processes"), "value")) +
      2; /* bwrap's two, as cordon counts them */
  struct passwd *pw = getpwnam("cordon-job");
  int pkg = open(pkg_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  int sfd = fr_filter_fd(json_object_get(spec, "seccomp"), net, NULL);
  if (!jargv || !pw || pkg < 0 || sfd < 0)
    return 121;
  size_t n = json_array_size(jargv);
  char **argv = calloc(n + 1, sizeof(char *));
  char pkgs[16], sfds[16];
  snprintf(pkgs, sizeof(pkgs), "%d", pkg);
  snprintf(sfds, sizeof(sfds), "%d", sfd);
  for (size_t i = 0; i < n; i++) {
    const char *a = json_string_value(json_array_get(jargv, i));
    const char *prev = i ? argv[i - 1] : "";
    if (strcmp(prev, "--seccomp") == 0)
      a = sfds;
    else if (strcmp(prev, "--ro-bind-fd") == 0 && i + 1 < n &&
             strcmp(json_string_value(json_array_get(jargv, i + 1)), "/cordon/package") == 0)
      a = pkgs;
    argv[i] = (char *)a;
  }
  struct fr_cgroups cg;
  if (fr_cg_create(&cg, mem, pids) < 0)
    return 122;
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  pid_t parent = getpid();
  pid_t pid;
  if (cg.version == 2) {
    struct clone_args ca = {
        .flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD, .cgroup = (uint64_t)cg.join_fd[0]};
    pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
  } else {
    pid = fork();
  }
  if (pid == 0) {
    for (int i = 0; cg.version == 1 && i < cg.n; i++)
      if (write(cg.join_fd[i], "0", 1) != 1)
        _exit(123);
    gid_t g = pw->pw_gid;
    if (setsid() < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
      _exit(124);
    fcntl(pkg, F_SETFD, 0);
    fcntl(sfd, F_SETFD, 0);
    if (syscall(SYS_setgroups, 1, &g) < 0 || syscall(SYS_setresgid, g, g, g) < 0 ||
        syscall(SYS_setresuid, pw->pw_uid, pw->pw_uid, pw->pw_uid) < 0)
      _exit(125);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ||
        getppid() != parent || chdir("/") < 0)
      _exit(126);
    char *envp[] = {NULL};
    execve(argv[0], argv, envp);
    _exit(127);
  }
  int st = 0;
  if (pid > 0)
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
      ;
  fr_cg_remove(&cg);
  free(argv);
  json_decref(spec);
  return pid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The explain JSON of pkg_dir in spec_path, for the reference. 0 or -1. */
static int fair_ref_write_spec(const char *agent, const char *cfg, const char *pkg_dir,
                               const char *spec_path) {
  char cmd[8192];
  snprintf(cmd, sizeof(cmd), "%s --config %s explain %s --json > %s", agent, cfg, pkg_dir,
           spec_path);
  if (system(cmd) != 0)
    return -1;
  json_error_t e;
  json_t *s = json_load_file(spec_path, 0, &e);
  const char *level = json_string_value(json_object_get(s, "level"));
  int r = level && strcmp(level, "isolated") == 0 ? 0 : -1;
  json_decref(s);
  return r;
}

#endif
