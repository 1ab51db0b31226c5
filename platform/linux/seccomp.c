#include "platform/linux/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/sched.h>
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

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* Denied outright with EPERM: kernel-level escapes and attack surface a
 * job has no business with. docs/SECURITY.md lists the same table. */
static const char *const denied_eperm[] = {
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "mount",
    "umount2",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "bpf",
    "userfaultfd",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "pidfd_getfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "quotactl",
    "lookup_dcookie",
    "vhangup",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "personality",
    "uselib",
    "nfsservctl",
    "kcmp",
    "fanotify_init",
    "sethostname",
    "setdomainname",
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

/* One argument comparison; written out so every field is initialised. */
static int rule_arg(scmp_filter_ctx ctx, uint32_t action, int nr, unsigned arg,
                    enum scmp_compare op, uint64_t a, uint64_t b) {
  struct scmp_arg_cmp cmp = {.arg = arg, .op = op, .datum_a = a, .datum_b = b};
  return seccomp_rule_add_array(ctx, action, nr, 1, &cmp);
}

static int build(bool net, scmp_filter_ctx *out_ctx) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx)
    return -ENOMEM;
  int r = 0;
  for (size_t i = 0; i < sizeof(denied_eperm) / sizeof(denied_eperm[0]) && r == 0; i++) {
    int nr = seccomp_syscall_resolve_name(denied_eperm[i]);
    if (nr == __NR_SCMP_ERROR)
      continue; /* not on this architecture */
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
  }
  if (r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  for (size_t i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]) && r == 0; i++)
    r = rule_arg(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 0, SCMP_CMP_MASKED_EQ,
                 ns_flags[i].flag, ns_flags[i].flag);
  if (r == 0)
    r = rule_arg(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, SCMP_CMP_MASKED_EQ, 0xffffffffu,
                 TIOCSTI);
  if (r == 0)
    r = rule_arg(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, SCMP_CMP_MASKED_EQ, 0xffffffffu,
                 TIOCLINUX);
  if (!net) {
    if (r == 0)
      r = rule_arg(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 0, SCMP_CMP_NE, AF_UNIX, 0);
    if (r == 0)
      r = rule_arg(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socketpair), 0, SCMP_CMP_NE, AF_UNIX, 0);
  }
  if (r < 0) {
    seccomp_release(ctx);
    return r;
  }
  *out_ctx = ctx;
  return 0;
}

int seccomp_job_filter_fd(bool net) {
  scmp_filter_ctx ctx;
  int r = build(net, &ctx);
  if (r < 0)
    return r;
  int fd = memfd_create("cordon-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    r = -errno;
    goto out_release;
  }
  r = seccomp_export_bpf(ctx, fd);
  if (r == 0 && lseek(fd, 0, SEEK_SET) < 0)
    r = -errno;
  if (r == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0)
    r = -errno;
  if (r < 0) {
    close(fd);
    goto out_release;
  }
  r = fd;
out_release:
  seccomp_release(ctx);
  return r;
}

int seccomp_job_filter_prog(bool net, struct sock_fprog **out_prog) {
  int fd = seccomp_job_filter_fd(net);
  if (fd < 0)
    return fd;
  int r;
  struct stat st;
  struct sock_fprog *prog = NULL;
  if (fstat(fd, &st) < 0) {
    r = -errno;
    goto out_close;
  }
  size_t n = (size_t)st.st_size / sizeof(struct sock_filter);
  if (n == 0 || n > BPF_MAXINSNS) {
    r = -E2BIG;
    goto out_close;
  }
  prog = calloc(1, sizeof(*prog));
  struct sock_filter *ins = malloc(n * sizeof(*ins));
  if (!prog || !ins) {
    free(prog);
    free(ins);
    r = -ENOMEM;
    goto out_close;
  }
  if (pread(fd, ins, n * sizeof(*ins), 0) != (ssize_t)(n * sizeof(*ins))) {
    free(prog);
    free(ins);
    r = -EIO;
    goto out_close;
  }
  prog->len = (unsigned short)n;
  prog->filter = ins;
  *out_prog = prog;
  r = 0;
out_close:
  close(fd);
  return r;
}

void seccomp_job_prog_free(struct sock_fprog *prog) {
  if (!prog)
    return;
  free(prog->filter);
  free(prog);
}

static void add_rule(json_t *a, const char *sc, const char *action, const char *when) {
  json_t *o = json_object();
  json_object_set_new(o, "syscall", json_string(sc));
  json_object_set_new(o, "action", json_string(action));
  json_object_set_new(o, "when", when ? json_string(when) : json_null());
  json_array_append_new(a, o);
}

json_t *seccomp_job_rules_json(bool net) {
  json_t *a = json_array();
  if (!a)
    return NULL;
  for (size_t i = 0; i < sizeof(denied_eperm) / sizeof(denied_eperm[0]); i++)
    add_rule(a, denied_eperm[i], "EPERM", NULL);
  add_rule(a, "clone3", "ENOSYS", NULL);
  for (size_t i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++) {
    char when[64];
    snprintf(when, sizeof(when), "flags & %s", ns_flags[i].name);
    add_rule(a, "clone", "EPERM", when);
  }
  add_rule(a, "ioctl", "EPERM", "request == TIOCSTI");
  add_rule(a, "ioctl", "EPERM", "request == TIOCLINUX");
  if (!net) {
    add_rule(a, "socket", "EPERM", "domain != AF_UNIX");
    add_rule(a, "socketpair", "EPERM", "domain != AF_UNIX");
  }
  add_rule(a, "<other architectures>", "KILL", "i386/x32 system calls on x86_64");
  return a;
}
