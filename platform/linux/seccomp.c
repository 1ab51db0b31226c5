#include "platform/linux/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* What a system call gets when no rule names it: the answer of a kernel
 * that does not have it, so libc and runtimes take their fallback. */
#define DEFAULT_ACTION SCMP_ACT_ERRNO(ENOSYS)

/* Allowed whatever the arguments: what programs, libc, language runtimes
 * and coreutils use, in the spirit of the container runtimes' default
 * profiles (moby, podman), without what those allow only to holders of a
 * capability a job never has. Names a system call table does not have on
 * this architecture (the 32-bit variants on x86_64) are skipped. */
static const char *const allowed[] = {
    /* processes, threads, signals, time */
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "fork",
    "vfork",
    "wait4",
    "waitid",
    "waitpid",
    "kill",
    "tkill",
    "tgkill",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo",
    "sigaltstack",
    "sigreturn",
    "sigprocmask",
    "signalfd",
    "signalfd4",
    "pause",
    "restart_syscall",
    "pidfd_open",
    "pidfd_send_signal",
    "process_mrelease",
    "set_tid_address",
    "set_robust_list",
    "get_robust_list",
    "rseq",
    "futex",
    "futex_time64",
    "futex_waitv",
    "arch_prctl",
    "get_thread_area",
    "set_thread_area",
    "prctl",
    "seccomp",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "capget",
    "capset",
    "getpid",
    "getppid",
    "gettid",
    "getpgid",
    "setpgid",
    "getpgrp",
    "getsid",
    "setsid",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "getresuid",
    "getresgid",
    "getgroups",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "setfsuid",
    "setfsgid",
    "getuid32",
    "geteuid32",
    "getgid32",
    "getegid32",
    "getresuid32",
    "getresgid32",
    "getgroups32",
    "setuid32",
    "setgid32",
    "setreuid32",
    "setregid32",
    "setresuid32",
    "setresgid32",
    "setgroups32",
    "setfsuid32",
    "setfsgid32",
    "getrlimit",
    "setrlimit",
    "prlimit64",
    "ugetrlimit",
    "getrusage",
    "times",
    "getpriority",
    "setpriority",
    "ioprio_get",
    "ioprio_set",
    "sched_yield",
    "sched_getaffinity",
    "sched_setaffinity",
    "sched_getattr",
    "sched_setattr",
    "sched_getparam",
    "sched_setparam",
    "sched_getscheduler",
    "sched_setscheduler",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_rr_get_interval",
    "sched_rr_get_interval_time64",
    "getcpu",
    "uname",
    "sysinfo",
    "umask",
    "getrandom",
    "clock_gettime",
    "clock_gettime64",
    "clock_getres",
    "clock_getres_time64",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "nanosleep",
    "gettimeofday",
    "time",
    "alarm",
    "getitimer",
    "setitimer",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_gettime64",
    "timer_settime",
    "timer_settime64",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_gettime64",
    "timerfd_settime",
    "timerfd_settime64",
    /* memory */
    "brk",
    "mmap",
    "mmap2",
    "munmap",
    "mremap",
    "mprotect",
    "madvise",
    "mincore",
    "msync",
    "mlock",
    "mlock2",
    "mlockall",
    "munlock",
    "munlockall",
    "membarrier",
    "memfd_create",
    "memfd_secret",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "remap_file_pages",
    "map_shadow_stack",
    /* file descriptors and I/O */
    "read",
    "write",
    "readv",
    "writev",
    "pread64",
    "pwrite64",
    "preadv",
    "pwritev",
    "preadv2",
    "pwritev2",
    "lseek",
    "_llseek",
    "close",
    "close_range",
    "dup",
    "dup2",
    "dup3",
    "pipe",
    "pipe2",
    "fcntl",
    "fcntl64",
    "flock",
    "fsync",
    "fdatasync",
    "sync",
    "syncfs",
    "sync_file_range",
    "fadvise64",
    "fadvise64_64",
    "readahead",
    "fallocate",
    "ftruncate",
    "ftruncate64",
    "sendfile",
    "sendfile64",
    "splice",
    "tee",
    "vmsplice",
    "copy_file_range",
    "cachestat",
    "poll",
    "ppoll",
    "ppoll_time64",
    "select",
    "_newselect",
    "pselect6",
    "pselect6_time64",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "eventfd",
    "eventfd2",
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "inotify_rm_watch",
    "fanotify_mark",
    "io_setup",
    "io_destroy",
    "io_submit",
    "io_cancel",
    "io_getevents",
    "io_pgetevents",
    "io_pgetevents_time64",
    /* paths and metadata (the ones that take a mode are below) */
    "access",
    "faccessat",
    "faccessat2",
    "stat",
    "stat64",
    "lstat",
    "lstat64",
    "fstat",
    "fstat64",
    "newfstatat",
    "fstatat64",
    "statx",
    "statfs",
    "statfs64",
    "fstatfs",
    "fstatfs64",
    "getcwd",
    "chdir",
    "fchdir",
    "getdents",
    "getdents64",
    "readlink",
    "readlinkat",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "unlink",
    "unlinkat",
    "rmdir",
    "truncate",
    "truncate64",
    "chown",
    "chown32",
    "fchown",
    "fchown32",
    "lchown",
    "lchown32",
    "fchownat",
    "utime",
    "utimes",
    "utimensat",
    "utimensat_time64",
    "futimesat",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    /* sockets: which ones may be made is decided at socket() and socketpair() */
    "bind",
    "listen",
    "accept",
    "accept4",
    "connect",
    "getsockname",
    "getpeername",
    "getsockopt",
    "setsockopt",
    "sendto",
    "sendmsg",
    "sendmmsg",
    "recvfrom",
    "recvmsg",
    "recvmmsg",
    "recvmmsg_time64",
    "shutdown",
    /* System V and POSIX IPC (a private IPC namespace under bwrap) */
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
    "semget",
    "semop",
    "semtimedop",
    "semtimedop_time64",
    "semctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedsend_time64",
    "mq_timedreceive",
    "mq_timedreceive_time64",
    "mq_notify",
    "mq_getsetattr",
    /* architecture-specific */
    "riscv_flush_icache",
    "riscv_hwprobe",
    "cacheflush",
    "set_tls",
};

/* Refused whatever the arguments. docs/SECURITY.md lists the same table. */
static const struct {
  const char *name;
  int err;
} refused[] = {
    /* kernel-level escapes and attack surface a job has no business with */
    {"ptrace", EPERM},
    {"process_vm_readv", EPERM},
    {"process_vm_writev", EPERM},
    {"kexec_load", EPERM},
    {"kexec_file_load", EPERM},
    {"init_module", EPERM},
    {"finit_module", EPERM},
    {"delete_module", EPERM},
    {"mount", EPERM},
    {"umount2", EPERM},
    {"fsopen", EPERM},
    {"fsconfig", EPERM},
    {"fsmount", EPERM},
    {"fspick", EPERM},
    {"move_mount", EPERM},
    {"open_tree", EPERM},
    {"mount_setattr", EPERM},
    {"pivot_root", EPERM},
    {"chroot", EPERM},
    {"unshare", EPERM},
    {"setns", EPERM},
    {"bpf", EPERM},
    {"userfaultfd", EPERM},
    {"perf_event_open", EPERM},
    {"keyctl", EPERM},
    {"add_key", EPERM},
    {"request_key", EPERM},
    {"io_uring_setup", EPERM},
    {"io_uring_enter", EPERM},
    {"io_uring_register", EPERM},
    {"pidfd_getfd", EPERM},
    {"open_by_handle_at", EPERM},
    {"name_to_handle_at", EPERM},
    {"acct", EPERM},
    {"swapon", EPERM},
    {"swapoff", EPERM},
    {"reboot", EPERM},
    {"syslog", EPERM},
    {"quotactl", EPERM},
    {"lookup_dcookie", EPERM},
    {"vhangup", EPERM},
    {"iopl", EPERM},
    {"ioperm", EPERM},
    {"settimeofday", EPERM},
    {"clock_settime", EPERM},
    {"clock_adjtime", EPERM},
    {"adjtimex", EPERM},
    {"personality", EPERM},
    {"uselib", EPERM},
    {"nfsservctl", EPERM},
    {"kcmp", EPERM},
    {"fanotify_init", EPERM},
    {"sethostname", EPERM},
    {"setdomainname", EPERM},
    /* libc falls back to a call whose arguments are checked below: clone3
     * to clone (a struct argument cannot be read by seccomp), openat2 to
     * openat (the same, for the mode) */
    {"clone3", ENOSYS},
    {"openat2", ENOSYS},
    /* an attribute's name is behind a pointer, so security.capability (a
     * file capability) cannot be told from the others: the job sees a file
     * system without extended attributes, which cp -a and tar accept */
    {"setxattr", EOPNOTSUPP},
    {"lsetxattr", EOPNOTSUPP},
    {"fsetxattr", EOPNOTSUPP},
    {"setxattrat", EOPNOTSUPP},
};

static const struct {
  unsigned long flag;
  const char *name;
} ns_flags[] = {
    {CLONE_NEWUSER, "CLONE_NEWUSER"},     {CLONE_NEWNS, "CLONE_NEWNS"},
    {CLONE_NEWPID, "CLONE_NEWPID"},       {CLONE_NEWNET, "CLONE_NEWNET"},
    {CLONE_NEWUTS, "CLONE_NEWUTS"},       {CLONE_NEWIPC, "CLONE_NEWIPC"},
    {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"}, {CLONE_NEWTIME, "CLONE_NEWTIME"},
};

/* The system calls that take a file mode, and where it is: a set-user-ID
 * or set-group-ID bit in it is refused. */
static const struct {
  const char *name;
  unsigned mode_arg;
} mode_calls[] = {
    {"chmod", 1}, {"fchmod", 1},  {"fchmodat", 2}, {"fchmodat2", 2}, {"creat", 1},
    {"mkdir", 1}, {"mkdirat", 2}, {"mknod", 1},    {"mknodat", 2},
};

/* open and openat use the mode only when they create (O_CREAT, O_TMPFILE) */
static const struct {
  const char *name;
  unsigned flags_arg, mode_arg;
} open_calls[] = {{"open", 1, 2}, {"openat", 2, 3}};

#define SETID_BITS ((uint32_t)(S_ISUID | S_ISGID))
#define TMPFILE_BIT ((uint32_t)(O_TMPFILE & ~O_DIRECTORY))

/* The policy is written once and either compiled (ctx) or described
 * (rules), so explain cannot drift from the filter. */
struct policy {
  scmp_filter_ctx ctx;
  json_t *rules;
  int err; /* the first failure, a negated errno */
};

/* A condition on one argument: (arg & mask) == value. Every argument
 * checked here is an int or a mode, of which the kernel reads the low 32
 * bits only; the masks have no high bits, so the high half (which a job
 * may fill with anything) is ignored here as it is there. */
struct cond {
  unsigned arg;
  uint32_t mask, value;
};

static const char *action_name(uint32_t action) {
  if (action == SCMP_ACT_ALLOW)
    return "ALLOW";
  switch ((int)(action & 0xffff)) {
  case EPERM:
    return "EPERM";
  case ENOSYS:
    return "ENOSYS";
  case EAFNOSUPPORT:
    return "EAFNOSUPPORT";
  case EOPNOTSUPP:
    return "EOPNOTSUPP";
  }
  return "ERRNO";
}

/* The number of a system call on this architecture, or -1 when it has
 * none (libseccomp gives other architectures' calls negative numbers). */
static int syscall_nr(const char *name) {
  int nr = seccomp_syscall_resolve_name(name);
  return nr == __NR_SCMP_ERROR || nr < 0 ? -1 : nr;
}

static void describe(struct policy *p, const char *sc, const char *action, const char *when) {
  if (!p->rules || p->err)
    return;
  json_t *o = json_object();
  if (!o || json_object_set_new(o, "syscall", json_string(sc)) < 0 ||
      json_object_set_new(o, "action", json_string(action)) < 0 ||
      json_object_set_new(o, "when", when ? json_string(when) : json_null()) < 0 ||
      json_array_append_new(p->rules, o) < 0)
    p->err = -ENOMEM;
}

static void compile(struct policy *p, int nr, uint32_t action, const struct cond *c, unsigned n) {
  if (!p->ctx || p->err)
    return;
  struct scmp_arg_cmp cmp[4];
  for (unsigned i = 0; i < n; i++)
    cmp[i] = (struct scmp_arg_cmp){
        .arg = c[i].arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = c[i].mask, .datum_b = c[i].value};
  int r = seccomp_rule_add_array(p->ctx, action, nr, n, cmp);
  if (r < 0)
    p->err = r;
}

/* One rule: in the filter, and in the description when `when` says what
 * it covers (NULL: a part of the rule described just before). */
static void rule(struct policy *p, const char *sc, uint32_t action, const char *when,
                 const struct cond *c, unsigned n) {
  int nr = syscall_nr(sc);
  if (nr < 0)
    return;
  if (when || n == 0)
    describe(p, sc, action_name(action), n == 0 ? NULL : when);
  if (n == 0 && action == DEFAULT_ACTION)
    return; /* the default says so already (libseccomp refuses the rule) */
  compile(p, nr, action, c, n);
}

/* `action` when argument `arg`, under `mask`, is none of vals[] (and the
 * `nfixed` other conditions hold). libseccomp compares each argument once
 * per rule and leaves overlapping rules of different actions undefined, so
 * the complement is cut into disjoint prefixes of the value, highest bit
 * first: a prefix no excluded value starts with is one rule. */
static void not_in_split(struct policy *p, int nr, uint32_t action, const struct cond *fixed,
                         unsigned nfixed, unsigned arg, uint32_t rest, uint32_t m, uint32_t v,
                         const uint32_t *vals, size_t nvals) {
  bool excluded = false;
  for (size_t i = 0; i < nvals; i++)
    excluded |= (vals[i] & m) == v;
  if (!excluded) {
    struct cond c[4];
    if (nfixed)
      memcpy(c, fixed, nfixed * sizeof(*c)); /* fixed may be NULL when nfixed is 0 */
    c[nfixed] = (struct cond){.arg = arg, .mask = m, .value = v};
    compile(p, nr, action, c, nfixed + 1);
    return;
  }
  if (rest == 0)
    return; /* an excluded value itself */
  uint32_t bit = 1u << (31 - __builtin_clz(rest));
  not_in_split(p, nr, action, fixed, nfixed, arg, rest & ~bit, m | bit, v, vals, nvals);
  not_in_split(p, nr, action, fixed, nfixed, arg, rest & ~bit, m | bit, v | bit, vals, nvals);
}

static void rule_not_in(struct policy *p, const char *sc, uint32_t action, const char *when,
                        const struct cond *fixed, unsigned nfixed, unsigned arg, uint32_t mask,
                        const uint32_t *vals, size_t nvals) {
  int nr = syscall_nr(sc);
  if (nr < 0)
    return;
  describe(p, sc, action_name(action), when);
  not_in_split(p, nr, action, fixed, nfixed, arg, mask, 0, 0, vals, nvals);
}

#define COND(a, m, v) ((struct cond){.arg = (a), .mask = (m), .value = (v)})
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static void clone_rules(struct policy *p) {
  uint32_t all = 0;
  for (size_t i = 0; i < ARRAY_LEN(ns_flags); i++) {
    char when[64];
    snprintf(when, sizeof(when), "flags & %s", ns_flags[i].name);
    struct cond c = COND(0, (uint32_t)ns_flags[i].flag, (uint32_t)ns_flags[i].flag);
    rule(p, "clone", SCMP_ACT_ERRNO(EPERM), when, &c, 1);
    all |= (uint32_t)ns_flags[i].flag;
  }
  struct cond none = COND(0, all, 0);
  rule(p, "clone", SCMP_ACT_ALLOW, "flags & CLONE_NEW* == 0", &none, 1);
}

static void ioctl_rules(struct policy *p) {
  static const uint32_t denied[] = {TIOCSTI, TIOCLINUX};
  struct cond sti = COND(1, 0xffffffffu, TIOCSTI), linux_ = COND(1, 0xffffffffu, TIOCLINUX);
  rule(p, "ioctl", SCMP_ACT_ERRNO(EPERM), "request == TIOCSTI", &sti, 1);
  rule(p, "ioctl", SCMP_ACT_ERRNO(EPERM), "request == TIOCLINUX", &linux_, 1);
  rule_not_in(p, "ioctl", SCMP_ACT_ALLOW, "any other request", NULL, 0, 1, 0xffffffffu, denied,
              ARRAY_LEN(denied));
}

/* Networking needs IPv4, IPv6 and the routing netlink (getaddrinfo's
 * address-family check, if_nameindex, getifaddrs); a unix socket could
 * connect() to a host socket through any grant, so only a connected pair
 * of them is allowed (socketpair: Python's multiprocessing, subprocess). */
static void socket_rules(struct policy *p, bool net) {
  static const uint32_t families[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
  static const uint32_t route[] = {NETLINK_ROUTE};
  uint32_t net_action = net ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO(EPERM);
  struct cond inet = COND(0, 0xffffffffu, AF_INET), inet6 = COND(0, 0xffffffffu, AF_INET6);
  struct cond nl[2] = {COND(0, 0xffffffffu, AF_NETLINK), COND(2, 0xffffffffu, NETLINK_ROUTE)};
  struct cond unix_ = COND(0, 0xffffffffu, AF_UNIX);
  rule(p, "socket", net_action, "domain == AF_INET", &inet, 1);
  rule(p, "socket", net_action, "domain == AF_INET6", &inet6, 1);
  rule(p, "socket", net_action, "domain == AF_NETLINK && protocol == NETLINK_ROUTE", nl, 2);
  rule(p, "socket", SCMP_ACT_ERRNO(EPERM), "domain == AF_UNIX", &unix_, 1);
  rule_not_in(p, "socket", SCMP_ACT_ERRNO(EAFNOSUPPORT),
              "domain == AF_NETLINK && protocol != NETLINK_ROUTE", nl, 1, 2, 0xffffffffu, route,
              ARRAY_LEN(route));
  rule_not_in(p, "socket", SCMP_ACT_ERRNO(EAFNOSUPPORT), "any other domain", NULL, 0, 0,
              0xffffffffu, families, ARRAY_LEN(families));

  /* a datagram pair could still sendto() or connect() to a host socket's
   * path; a stream or seqpacket pair is connected for good */
  static const uint32_t pair_types[] = {SOCK_STREAM, SOCK_SEQPACKET};
  static const uint32_t unix_only[] = {AF_UNIX};
  struct cond stream[2] = {unix_, COND(1, 0xf, SOCK_STREAM)};
  struct cond seqpacket[2] = {unix_, COND(1, 0xf, SOCK_SEQPACKET)};
  rule(p, "socketpair", SCMP_ACT_ALLOW, "domain == AF_UNIX && type == SOCK_STREAM", stream, 2);
  rule(p, "socketpair", SCMP_ACT_ALLOW, "domain == AF_UNIX && type == SOCK_SEQPACKET", seqpacket,
       2);
  rule_not_in(p, "socketpair", SCMP_ACT_ERRNO(EPERM), "domain == AF_UNIX && any other type", &unix_,
              1, 1, 0xf, pair_types, ARRAY_LEN(pair_types));
  rule_not_in(p, "socketpair", SCMP_ACT_ERRNO(EAFNOSUPPORT), "any other domain", NULL, 0, 0,
              0xffffffffu, unix_only, ARRAY_LEN(unix_only));
}

/* No set-user-ID or set-group-ID file is made from inside a job: a
 * writable grant would carry it to the host (owned by the owner, or by the
 * job user whose uid owns every job's user namespace). */
static void mode_rules(struct policy *p) {
  for (size_t i = 0; i < ARRAY_LEN(mode_calls); i++) {
    const char *sc = mode_calls[i].name;
    unsigned a = mode_calls[i].mode_arg;
    struct cond suid = COND(a, S_ISUID, S_ISUID), sgid = COND(a, SETID_BITS, S_ISGID);
    struct cond clean = COND(a, SETID_BITS, 0);
    rule(p, sc, SCMP_ACT_ERRNO(EPERM), "mode & (S_ISUID|S_ISGID)", &suid, 1);
    rule(p, sc, SCMP_ACT_ERRNO(EPERM), NULL, &sgid, 1);
    rule(p, sc, SCMP_ACT_ALLOW, "otherwise", &clean, 1);
  }
  for (size_t i = 0; i < ARRAY_LEN(open_calls); i++) {
    const char *sc = open_calls[i].name;
    unsigned f = open_calls[i].flags_arg, a = open_calls[i].mode_arg;
    /* creating: O_CREAT, or O_TMPFILE without it (disjoint) */
    struct cond creat = COND(f, O_CREAT, O_CREAT);
    struct cond tmpfile = COND(f, O_CREAT | TMPFILE_BIT, TMPFILE_BIT);
    struct cond not_creating = COND(f, O_CREAT | TMPFILE_BIT, 0);
    struct cond suid = COND(a, S_ISUID, S_ISUID), sgid = COND(a, SETID_BITS, S_ISGID);
    struct cond clean = COND(a, SETID_BITS, 0);
    rule(p, sc, SCMP_ACT_ERRNO(EPERM), "flags & (O_CREAT|O_TMPFILE) && mode & (S_ISUID|S_ISGID)",
         (struct cond[]){creat, suid}, 2);
    rule(p, sc, SCMP_ACT_ERRNO(EPERM), NULL, (struct cond[]){creat, sgid}, 2);
    rule(p, sc, SCMP_ACT_ERRNO(EPERM), NULL, (struct cond[]){tmpfile, suid}, 2);
    rule(p, sc, SCMP_ACT_ERRNO(EPERM), NULL, (struct cond[]){tmpfile, sgid}, 2);
    rule(p, sc, SCMP_ACT_ALLOW, "otherwise", &not_creating, 1);
    rule(p, sc, SCMP_ACT_ALLOW, NULL, (struct cond[]){creat, clean}, 2);
    rule(p, sc, SCMP_ACT_ALLOW, NULL, (struct cond[]){tmpfile, clean}, 2);
  }
}

static void job_policy(struct policy *p, bool net) {
  for (size_t i = 0; i < ARRAY_LEN(allowed); i++)
    rule(p, allowed[i], SCMP_ACT_ALLOW, NULL, NULL, 0);
  for (size_t i = 0; i < ARRAY_LEN(refused); i++)
    rule(p, refused[i].name, SCMP_ACT_ERRNO((uint32_t)refused[i].err), NULL, NULL, 0);
  clone_rules(p);
  ioctl_rules(p);
  socket_rules(p, net);
  mode_rules(p);
  describe(p, "<any other>", action_name(DEFAULT_ACTION), "not listed above");
  describe(p, "<other architectures>", "KILL", "i386 and x32 system calls on x86_64");
}

static int build(bool net, scmp_filter_ctx *out_ctx) {
  struct policy p = {.ctx = seccomp_init(DEFAULT_ACTION)};
  if (!p.ctx)
    return -ENOMEM;
  /* a call of another ABI kills the whole job, not one thread of it */
  p.err = seccomp_attr_set(p.ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  /* a binary search over the system call numbers, not a chain of 300 */
  if (p.err == 0)
    p.err = seccomp_attr_set(p.ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  job_policy(&p, net);
  if (p.err < 0) {
    seccomp_release(p.ctx);
    return p.err;
  }
  *out_ctx = p.ctx;
  return 0;
}

int seccomp_job_build_bpf(bool net, struct sock_filter **out_insns, size_t *out_n) {
  scmp_filter_ctx ctx = NULL;
  int r = build(net, &ctx);
  if (r < 0)
    return r;
  struct sock_filter *ins = NULL;
  size_t n = 0;
  struct stat st;
  int fd = memfd_create("cordon-seccomp", MFD_CLOEXEC);
  if (fd < 0) {
    r = -errno;
    goto out_release;
  }
  r = seccomp_export_bpf(ctx, fd);
  if (r < 0)
    goto out_close;
  if (fstat(fd, &st) < 0) {
    r = -errno;
    goto out_close;
  }
  n = (size_t)st.st_size / sizeof(struct sock_filter);
  if (n == 0 || n > BPF_MAXINSNS) {
    r = -E2BIG;
    goto out_close;
  }
  ins = malloc(n * sizeof(*ins));
  if (!ins) {
    r = -ENOMEM;
    goto out_close;
  }
  if (pread(fd, ins, n * sizeof(*ins), 0) != (ssize_t)(n * sizeof(*ins))) {
    free(ins);
    r = -EIO;
    goto out_close;
  }
  *out_insns = ins;
  *out_n = n;
out_close:
  close(fd);
out_release:
  seccomp_release(ctx);
  return r;
}

#if CORDON_SECCOMP_EMBEDDED
/* The programs built at build time by cmake/seccomp_gen.c from this same
 * policy (seccomp_prog.inc, in the build directory): no libseccomp build
 * per process. tests/platform/test_seccomp_embedded_linux.c checks that
 * they equal what libseccomp builds here at run time. */
#include "seccomp_prog.inc"

bool seccomp_job_program_embedded(void) {
  return true;
}

static int compiled_program(bool net, const struct sock_filter **out_insns, size_t *out_n) {
  *out_insns = net ? seccomp_prog_net : seccomp_prog_nonet;
  *out_n = net ? ARRAY_LEN(seccomp_prog_net) : ARRAY_LEN(seccomp_prog_nonet);
  return 0;
}
#else
/* The compiled program of each variant, built once per process: it is a
 * pure function of `net` and of this binary (no configuration, no host
 * fact enters it), so nothing can make a cached copy stale. */
static struct {
  pthread_mutex_t lock;
  struct sock_filter *insns[2];
  size_t n[2];
} compiled = {.lock = PTHREAD_MUTEX_INITIALIZER};

bool seccomp_job_program_embedded(void) {
  return false;
}

/* The variant's instructions (owned by the cache) and their count. */
static int compiled_program(bool net, const struct sock_filter **out_insns, size_t *out_n) {
  int v = net ? 1 : 0, r = 0;
  pthread_mutex_lock(&compiled.lock);
  if (!compiled.insns[v])
    r = seccomp_job_build_bpf(net, &compiled.insns[v], &compiled.n[v]);
  if (r == 0) {
    *out_insns = compiled.insns[v];
    *out_n = compiled.n[v];
  }
  pthread_mutex_unlock(&compiled.lock);
  return r;
}
#endif

int seccomp_job_filter_fd(bool net) {
  const struct sock_filter *ins = NULL;
  size_t n = 0;
  int r = compiled_program(net, &ins, &n);
  if (r < 0)
    return r;
  /* a memfd of its own per job: bwrap reads it from its offset */
  int fd = memfd_create("cordon-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return -errno;
  r = core_write_all(fd, ins, n * sizeof(*ins));
  if (r == 0 &&
      (lseek(fd, 0, SEEK_SET) < 0 ||
       fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0))
    r = -errno;
  if (r < 0) {
    close(fd);
    return r;
  }
  return fd;
}

int seccomp_job_filter_prog(bool net, struct sock_fprog **out_prog) {
  const struct sock_filter *ins = NULL;
  size_t n = 0;
  int r = compiled_program(net, &ins, &n);
  if (r < 0)
    return r;
  struct sock_fprog *prog = calloc(1, sizeof(*prog));
  struct sock_filter *copy = malloc(n * sizeof(*copy));
  if (!prog || !copy) {
    free(prog);
    free(copy);
    return -ENOMEM;
  }
  memcpy(copy, ins, n * sizeof(*copy));
  prog->len = (unsigned short)n;
  prog->filter = copy;
  *out_prog = prog;
  return 0;
}

void seccomp_job_prog_free(struct sock_fprog *prog) {
  if (!prog)
    return;
  free(prog->filter);
  free(prog);
}

json_t *seccomp_job_rules_json(bool net) {
  struct policy p = {.rules = json_array()};
  if (!p.rules)
    return NULL;
  job_policy(&p, net);
  if (p.err < 0) {
    json_decref(p.rules);
    return NULL;
  }
  return p.rules;
}
