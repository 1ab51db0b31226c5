/* The job's seccomp filter (platform/linux/seccomp.c).
 *
 * First the program itself: each check loads it in a fresh child of the
 * test and makes raw system calls, so every rule is seen from the kernel's
 * side (high argument bits the kernel ignores included). Then real jobs
 * through the real cordon-agent, with the agent as root (jobs run as
 * cordon-job) and as a throw-away user of each test (sbx_user_make; jobs
 * run as that user: with the shared cordon-test, RLIMIT_NPROC, which
 * counts every process of the uid, also counted other tests' processes),
 * at both levels that use the filter (isolated under bwrap, contained
 * without it): what a job attempted must not have happened on the host,
 * and Python, sh, coreutils and git must still work. The root mode's jobs
 * plant files in cordon-job's home, so this file is named *sandbox* (one
 * test at a time). scripts/test-setup.sh creates that account.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "platform/linux/seccomp.h"
#include "sbx_harness.h"

/* ---- the filter, one system call at a time ---- */

/* Runs fn under the job filter in a new child. Returns what fn returned,
 * or -SIGNAL when the filter killed the child. */
static int under_filter(bool net, int (*fn)(const void *), const void *arg) {
  struct sock_fprog *prog = NULL;
  cr_assert_eq(seccomp_job_filter_prog(net, &prog), 0);
  int p[2];
  cr_assert(pipe(p) == 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0) < 0)
      _exit(100);
    int r = fn(arg);
    if (write(p[1], &r, sizeof(r)) != sizeof(r))
      _exit(101);
    _exit(0);
  }
  close(p[1]);
  seccomp_job_prog_free(prog);
  int r = 0;
  ssize_t n = read(p[0], &r, sizeof(r));
  close(p[0]);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  if (WIFSIGNALED(st))
    return -WTERMSIG(st);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
  cr_assert_eq(n, (ssize_t)sizeof(r));
  return r;
}

struct call {
  long nr;
  unsigned long a[6];
};

/* 0 when the call succeeded, else its errno */
static int raw_call(const void *arg) {
  const struct call *c = arg;
  long r = syscall(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
  return r < 0 ? errno : 0;
}

static int filtered(bool net, struct call c) {
  return under_filter(net, raw_call, &c);
}

/* The same call with no filter, in a child (to show a refusal is the
 * filter's, not the kernel's). */
static int unfiltered(struct call c) {
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0)
    _exit(raw_call(&c));
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define CALL(nr, ...) ((struct call){(nr), {__VA_ARGS__}})
#define HIGH (1ul << 32) /* bits the kernel drops from an int argument */

#define NR_OPEN_TREE_ATTR 467 /* Linux 6.15, newer than this libseccomp */
#define NR_LISTMOUNT 458      /* Linux 6.8 */
#define NR_FCHMODAT2 452      /* Linux 6.6 */

Test(seccomp_filter, unknown_and_newer_system_calls_fail_with_enosys) {
#if defined(__x86_64__)
  cr_assert_eq(filtered(false, CALL(1000, 0)), ENOSYS);
  cr_assert_eq(filtered(true, CALL(1000, 0)), ENOSYS);
  cr_assert_eq(filtered(false, CALL(NR_OPEN_TREE_ATTR, (unsigned long)-1, 0, 0, 0)), ENOSYS);
  cr_assert_eq(filtered(false, CALL(NR_LISTMOUNT, 0, 0, 0, 0)), ENOSYS);
  /* on a kernel that has them, the kernel would have answered otherwise */
  cr_log_info("unfiltered open_tree_attr: errno %d",
              unfiltered(CALL(NR_OPEN_TREE_ATTR, (unsigned long)-1, 0, 0, 0)));
#else
  cr_skip_test("system call numbers are x86_64's");
#endif
  /* libc falls back from these to calls whose arguments are checked */
  cr_assert_eq(filtered(false, CALL(SYS_clone3, 0, 0)), ENOSYS);
  cr_assert_eq(filtered(false, CALL(SYS_openat2, AT_FDCWD, (unsigned long)"/", 0, 0)), ENOSYS);
  cr_assert_neq(unfiltered(CALL(SYS_openat2, AT_FDCWD, (unsigned long)"/", 0, 0)), ENOSYS);
}

Test(seccomp_filter, the_refused_list_is_refused_with_its_errno) {
  /* every unconditional refusal explain lists, called for real */
  json_t *rules = seccomp_job_rules_json(false);
  cr_assert(rules);
  size_t i, checked = 0;
  json_t *r;
  json_array_foreach(rules, i, r) {
    const char *sc = json_string_value(json_object_get(r, "syscall"));
    const char *action = json_string_value(json_object_get(r, "action"));
    if (!json_is_null(json_object_get(r, "when")) || sc[0] == '<' || !strcmp(action, "ALLOW"))
      continue;
    int want = !strcmp(action, "EPERM")          ? EPERM
               : !strcmp(action, "ENOSYS")       ? ENOSYS
               : !strcmp(action, "EOPNOTSUPP")   ? EOPNOTSUPP
               : !strcmp(action, "EAFNOSUPPORT") ? EAFNOSUPPORT
                                                 : -1;
    int nr = seccomp_syscall_resolve_name(sc);
    cr_assert_geq(nr, 0, "%s is listed but has no number here", sc);
    cr_assert_eq(filtered(false, CALL(nr, 0, 0, 0, 0)), want, "%s", sc);
    checked++;
  }
  cr_assert_geq(checked, 50);
  json_decref(rules);
}

static int int80_getpid(const void *arg) {
  (void)arg;
#if defined(__x86_64__)
  long r = 20; /* i386 getpid */
  __asm__ volatile("int $0x80" : "+a"(r) : : "memory");
  return (int)r;
#else
  return 0;
#endif
}

static void *int80_thread(void *arg) {
  int80_getpid(arg);
  return NULL;
}

static int int80_in_a_thread(const void *arg) {
  pthread_t t;
  if (pthread_create(&t, NULL, int80_thread, (void *)arg) != 0)
    return -1000;
  pthread_join(t, NULL);
  return 0; /* reached only if the thread alone died */
}

/* A classic BPF interpreter for the filter's own program, run over a
 * seccomp_data the kernel would build: it lets the architecture rule be
 * checked on a kernel that has no i386 entry to make one. Every
 * instruction class the kernel's seccomp checker accepts; anything else
 * fails the test. */
static uint32_t bpf_run(const struct sock_fprog *prog, const struct seccomp_data *d) {
  uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {0};
  for (size_t pc = 0; pc < prog->len; pc++) {
    const struct sock_filter *f = &prog->filter[pc];
    uint32_t k = f->k;
    uint32_t src = BPF_SRC(f->code) == BPF_X ? x : k;
    switch (BPF_CLASS(f->code)) {
    case BPF_LD:
      if (BPF_MODE(f->code) == BPF_ABS) {
        cr_assert(BPF_SIZE(f->code) == BPF_W && k % 4 == 0 && k + 4 <= sizeof(*d), "ld %u", k);
        memcpy(&a, (const char *)d + k, 4);
      } else if (BPF_MODE(f->code) == BPF_IMM) {
        a = k;
      } else if (BPF_MODE(f->code) == BPF_MEM) {
        cr_assert(k < BPF_MEMWORDS);
        a = mem[k];
      } else {
        a = sizeof(*d); /* BPF_LEN */
      }
      break;
    case BPF_LDX:
      if (BPF_MODE(f->code) == BPF_MEM) {
        cr_assert(k < BPF_MEMWORDS);
        x = mem[k];
      } else {
        x = BPF_MODE(f->code) == BPF_LEN ? sizeof(*d) : k;
      }
      break;
    case BPF_ST:
      cr_assert(k < BPF_MEMWORDS);
      mem[k] = a;
      break;
    case BPF_STX:
      cr_assert(k < BPF_MEMWORDS);
      mem[k] = x;
      break;
    case BPF_ALU:
      switch (BPF_OP(f->code)) {
      case BPF_ADD:
        a += src;
        break;
      case BPF_SUB:
        a -= src;
        break;
      case BPF_MUL:
        a *= src;
        break;
      case BPF_DIV:
        cr_assert(src);
        a /= src;
        break;
      case BPF_MOD:
        cr_assert(src);
        a %= src;
        break;
      case BPF_AND:
        a &= src;
        break;
      case BPF_OR:
        a |= src;
        break;
      case BPF_XOR:
        a ^= src;
        break;
      case BPF_LSH:
        a = src < 32 ? a << src : 0;
        break;
      case BPF_RSH:
        a = src < 32 ? a >> src : 0;
        break;
      case BPF_NEG:
        a = -a;
        break;
      default:
        cr_assert_fail("alu op %#x", f->code);
      }
      break;
    case BPF_JMP: {
      bool t;
      switch (BPF_OP(f->code)) {
      case BPF_JA:
        pc += k;
        continue;
      case BPF_JEQ:
        t = a == src;
        break;
      case BPF_JGT:
        t = a > src;
        break;
      case BPF_JGE:
        t = a >= src;
        break;
      case BPF_JSET:
        t = (a & src) != 0;
        break;
      default:
        cr_assert_fail("jmp op %#x", f->code);
        return 0;
      }
      pc += t ? f->jt : f->jf;
      break;
    }
    case BPF_RET:
      return BPF_RVAL(f->code) == BPF_A ? a : k;
    case BPF_MISC:
      if (BPF_MISCOP(f->code) == BPF_TAX)
        x = a;
      else
        a = x;
      break;
    }
  }
  cr_assert_fail("the program ran off its end");
  return 0;
}

#ifndef AUDIT_ARCH_I386
#define AUDIT_ARCH_I386 0x40000003u
#endif
#ifndef AUDIT_ARCH_X86_64
#define AUDIT_ARCH_X86_64 0xc000003eu
#endif

static uint32_t verdict(bool net, uint32_t arch, int nr) {
  struct sock_fprog *prog = NULL;
  cr_assert_eq(seccomp_job_filter_prog(net, &prog), 0);
  struct seccomp_data d = {.nr = nr, .arch = arch};
  uint32_t v = bpf_run(prog, &d);
  seccomp_job_prog_free(prog);
  return v;
}

/* Whether this kernel has the i386 entry (IA32 emulation): int $0x80
 * without any filter returns getpid's answer, or the kernel kills the
 * caller with SIGSEGV before a filter could run. */
static bool kernel_has_i386_entry(void) {
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0)
    _exit(int80_getpid(NULL) == (int)getpid() ? 0 : 1);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_log_info("int $0x80 without a filter: %s %d", WIFSIGNALED(st) ? "signal" : "exit",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

Test(seccomp_filter, other_abis_kill_the_whole_process) {
#if defined(__x86_64__)
  cr_assert_eq(filtered(false, CALL(0x40000000 | SYS_getpid, 0)), -SIGSYS, "x32");
  /* the filter's own program says so for i386, whatever this kernel has:
   * checked over the same seccomp_data the kernel builds (the interpreter
   * agrees with the kernel on the calls above and below) */
  for (int net = 0; net < 2; net++) {
    cr_assert_eq(verdict(net, AUDIT_ARCH_I386, 20 /* i386 getpid */), SECCOMP_RET_KILL_PROCESS);
    cr_assert_eq(verdict(net, AUDIT_ARCH_I386, SYS_getpid), SECCOMP_RET_KILL_PROCESS);
    cr_assert_eq(verdict(net, AUDIT_ARCH_X86_64, 0x40000000 | SYS_getpid), SECCOMP_RET_KILL_PROCESS,
                 "x32 as the kernel answered it");
    cr_assert_eq(verdict(net, AUDIT_ARCH_X86_64, SYS_getpid), SECCOMP_RET_ALLOW);
    cr_assert_eq(verdict(net, AUDIT_ARCH_X86_64, 1000) & SECCOMP_RET_ACTION_FULL, SECCOMP_RET_ERRNO,
                 "an unknown call: ENOSYS, as the kernel answered above");
    cr_assert_eq(verdict(net, AUDIT_ARCH_X86_64, 1000) & SECCOMP_RET_DATA, ENOSYS);
  }
  if (!kernel_has_i386_entry()) {
    /* nothing to run: the kernel has no IA32 emulation, so no job can
     * make an i386 call at all; the program's rule was checked above */
    cr_log_warn("this kernel has no i386 entry (no IA32 emulation): int $0x80 under the "
                "filter not run; the filter's architecture rule was checked by interpreting "
                "its program");
    return;
  }
  cr_assert_eq(under_filter(false, int80_getpid, NULL), -SIGSYS, "i386");
  cr_assert_eq(under_filter(true, int80_in_a_thread, NULL), -SIGSYS, "a thread's call");
#else
  cr_skip_test("x86_64 ABIs");
#endif
}

Test(seccomp_filter, tiocsti_and_tioclinux_are_refused_whatever_the_high_bits) {
  cr_assert_eq(filtered(false, CALL(SYS_ioctl, 0, TIOCSTI, (unsigned long)"x")), EPERM);
  cr_assert_eq(filtered(false, CALL(SYS_ioctl, 0, HIGH | TIOCSTI, (unsigned long)"x")), EPERM);
  cr_assert_eq(filtered(true, CALL(SYS_ioctl, 0, TIOCLINUX, (unsigned long)"x")), EPERM);
  cr_assert_eq(filtered(true, CALL(SYS_ioctl, 0, HIGH | TIOCLINUX, (unsigned long)"x")), EPERM);
  /* every other request reaches the kernel */
  cr_assert_eq(filtered(false, CALL(SYS_ioctl, 1, FIOCLEX)), 0);
  static const unsigned long near[] = {TIOCSTI - 1,   TIOCSTI + 1,           TIOCLINUX - 1,
                                       TIOCLINUX + 1, TIOCSTI | 0x80000000u, TIOCSTI ^ TIOCLINUX};
  for (size_t i = 0; i < sizeof(near) / sizeof(near[0]); i++) {
    int e = filtered(false, CALL(SYS_ioctl, 1000, near[i], 0));
    cr_assert_eq(e, EBADF, "request %#lx: errno %d", near[i], e);
  }
}

Test(seccomp_filter, clone_with_a_namespace_flag_is_refused) {
  static const unsigned long flags[] = {CLONE_NEWUSER, CLONE_NEWNS,     CLONE_NEWPID, CLONE_NEWNET,
                                        CLONE_NEWUTS,  CLONE_NEWCGROUP, CLONE_NEWIPC, 0x80};
  for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
    cr_assert_eq(filtered(false, CALL(SYS_clone, flags[i] | SIGCHLD, 0, 0, 0)), EPERM, "%#lx",
                 flags[i]);
}

static int sock_errno(bool net, unsigned long domain, unsigned long type, unsigned long proto) {
  return filtered(net, CALL(SYS_socket, domain, type, proto));
}

Test(seccomp_filter, sockets_only_of_the_families_networking_needs) {
  for (int n = 0; n < 2; n++) {
    bool net = n == 1;
    int net_ok = net ? 0 : EPERM;
    cr_assert_eq(sock_errno(net, AF_UNIX, SOCK_STREAM, 0), EPERM);
    cr_assert_eq(sock_errno(net, HIGH | AF_UNIX, SOCK_DGRAM, 0), EPERM);
    cr_assert_eq(sock_errno(net, AF_INET, SOCK_STREAM, 0), net_ok);
    cr_assert_eq(sock_errno(net, HIGH | AF_INET, SOCK_DGRAM, 0), net_ok);
    cr_assert_eq(sock_errno(net, AF_INET6, SOCK_STREAM, 0), net_ok);
    cr_assert_eq(sock_errno(net, AF_NETLINK, SOCK_RAW, NETLINK_ROUTE), net_ok);
    cr_assert_eq(sock_errno(net, AF_NETLINK, SOCK_DGRAM, HIGH | NETLINK_ROUTE), net_ok);
    static const unsigned long other_netlink[] = {
        NETLINK_AUDIT, NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC, NETLINK_SOCK_DIAG, 31, 32};
    for (size_t i = 0; i < sizeof(other_netlink) / sizeof(other_netlink[0]); i++)
      cr_assert_eq(sock_errno(net, AF_NETLINK, SOCK_RAW, other_netlink[i]), EAFNOSUPPORT,
                   "netlink %lu", other_netlink[i]);
    for (unsigned long f = 0; f < 64; f++) {
      if (f == AF_UNIX || f == AF_INET || f == AF_INET6 || f == AF_NETLINK)
        continue;
      cr_assert_eq(sock_errno(net, f, SOCK_STREAM, 0), EAFNOSUPPORT, "family %lu", f);
    }
    cr_assert_eq(sock_errno(net, HIGH | AF_VSOCK, SOCK_STREAM, 0), EAFNOSUPPORT);
    cr_assert_eq(sock_errno(net, 0x10000 | AF_INET, SOCK_STREAM, 0), EAFNOSUPPORT);
  }
  /* the refusals are the filter's: this kernel has them */
  cr_assert_eq(unfiltered(CALL(SYS_socket, AF_PACKET, SOCK_RAW, 0)), 0);
  cr_assert_eq(unfiltered(CALL(SYS_socket, AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT)), 0);
  cr_log_info("unfiltered AF_VSOCK: errno %d", unfiltered(CALL(SYS_socket, AF_VSOCK, SOCK_STREAM)));
}

static int pair[2];

Test(seccomp_filter, socketpair_is_a_connected_unix_pair_only) {
  unsigned long sv = (unsigned long)pair;
  for (int n = 0; n < 2; n++) {
    bool net = n == 1;
    cr_assert_eq(filtered(net, CALL(SYS_socketpair, AF_UNIX, SOCK_STREAM, 0, sv)), 0);
    cr_assert_eq(filtered(net, CALL(SYS_socketpair, AF_UNIX, SOCK_SEQPACKET, 0, sv)), 0);
    cr_assert_eq(filtered(net, CALL(SYS_socketpair, AF_UNIX,
                                    SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv)),
                 0);
    /* a datagram end could sendto() a host socket's path */
    cr_assert_eq(filtered(net, CALL(SYS_socketpair, AF_UNIX, SOCK_DGRAM, 0, sv)), EPERM);
    cr_assert_eq(filtered(net, CALL(SYS_socketpair, AF_UNIX, SOCK_RAW, 0, sv)), EPERM);
    cr_assert_eq(filtered(net, CALL(SYS_socketpair, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv)),
                 EPERM);
    cr_assert_eq(filtered(net, CALL(SYS_socketpair, AF_INET, SOCK_STREAM, 0, sv)), EAFNOSUPPORT);
    cr_assert_eq(filtered(net, CALL(SYS_socketpair, AF_VSOCK, SOCK_STREAM, 0, sv)), EAFNOSUPPORT);
  }
}

/* ---- set-user-ID and set-group-ID bits, file capabilities ---- */

static char tdir[64];

static void tdir_setup(void) {
  snprintf(tdir, sizeof(tdir), "/tmp/cordon-scmode-XXXXXX");
  cr_assert(mkdtemp(tdir));
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

static void tdir_teardown(void) {
  nftw(tdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int setid_found;
static int count_setid(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)flag, (void)ftw;
  if (st->st_mode & (S_ISUID | S_ISGID)) {
    cr_log_error("set-id bit on %s (%o)", p, st->st_mode);
    setid_found++;
  }
  return 0;
}

static int setid_files(const char *dir) {
  setid_found = 0;
  nftw(dir, count_setid, 16, FTW_PHYS);
  return setid_found;
}

static char tpath_buf[8][128];
static unsigned long tpath(int i, const char *name) {
  snprintf(tpath_buf[i], sizeof(tpath_buf[i]), "%s/%s", tdir, name);
  return (unsigned long)tpath_buf[i];
}

static mode_t mode_of(const char *p) {
  struct stat st;
  cr_assert(lstat(p, &st) == 0, "%s: %s", p, strerror(errno));
  return st.st_mode & 07777;
}

Test(seccomp_filter, no_set_id_bit_through_any_call_that_takes_a_mode, .init = tdir_setup,
     .fini = tdir_teardown) {
  unsigned long f = tpath(0, "f");
  int fd = open((char *)f, O_CREAT | O_RDWR, 0644);
  cr_assert(fd >= 0);
  /* the test runs as root: without the filter, this works */
  cr_assert_eq(unfiltered(CALL(SYS_chmod, f, 04755)), 0);
  cr_assert_eq(mode_of((char *)f), 04755);
  chmod((char *)f, 0644);

  static const unsigned long setid[] = {04755, 02755,        06755,         04000,
                                        02000, HIGH | 04700, 0xf000 | 02644};
  for (size_t i = 0; i < sizeof(setid) / sizeof(setid[0]); i++) {
    unsigned long m = setid[i];
    cr_assert_eq(filtered(false, CALL(SYS_chmod, f, m)), EPERM, "chmod %lo", m);
    cr_assert_eq(filtered(true, CALL(SYS_fchmod, (unsigned long)fd, m)), EPERM, "fchmod %lo", m);
    cr_assert_eq(filtered(false, CALL(SYS_fchmodat, AT_FDCWD, f, m, 0)), EPERM, "fchmodat");
    cr_assert_eq(filtered(false, CALL(NR_FCHMODAT2, AT_FDCWD, f, m, 0)), EPERM, "fchmodat2");
    cr_assert_eq(filtered(false, CALL(SYS_creat, tpath(1, "c"), m)), EPERM, "creat %lo", m);
    cr_assert_eq(filtered(false, CALL(SYS_open, tpath(1, "c"), O_CREAT | O_WRONLY, m)), EPERM);
    cr_assert_eq(filtered(false, CALL(SYS_openat, AT_FDCWD, tpath(1, "c"), O_CREAT | O_EXCL, m)),
                 EPERM);
    cr_assert_eq(
        filtered(false, CALL(SYS_openat, AT_FDCWD, (unsigned long)tdir, O_TMPFILE | O_RDWR, m)),
        EPERM, "O_TMPFILE");
    cr_assert_eq(filtered(false, CALL(SYS_mknod, tpath(1, "c"), S_IFREG | m, 0)), EPERM);
    cr_assert_eq(filtered(false, CALL(SYS_mknodat, AT_FDCWD, tpath(1, "c"), S_IFREG | m, 0)),
                 EPERM);
    cr_assert_eq(filtered(false, CALL(SYS_mkdir, tpath(1, "c"), m)), EPERM);
    cr_assert_eq(filtered(false, CALL(SYS_mkdirat, AT_FDCWD, tpath(1, "c"), m)), EPERM);
    cr_assert(access(tpath_buf[1], F_OK) != 0, "refused calls create nothing");
  }
  cr_assert_eq(mode_of((char *)f), 0644);

  /* the same calls without the bits work */
  cr_assert_eq(filtered(false, CALL(SYS_chmod, f, 01777)), 0);
  cr_assert_eq(mode_of((char *)f), 01777);
  cr_assert_eq(filtered(false, CALL(SYS_fchmod, (unsigned long)fd, 0700)), 0);
  cr_assert_eq(mode_of((char *)f), 0700);
  cr_assert_eq(filtered(false, CALL(SYS_fchmodat, AT_FDCWD, f, 0640, 0)), 0);
  cr_assert_eq(mode_of((char *)f), 0640);
  cr_assert_eq(filtered(false, CALL(SYS_creat, tpath(2, "creat"), 0755)), 0);
  cr_assert_eq(filtered(false, CALL(SYS_open, tpath(3, "open"), O_CREAT | O_WRONLY, 0600)), 0);
  cr_assert_eq(filtered(false, CALL(SYS_openat, AT_FDCWD, f, O_RDONLY, 04755)), 0,
               "the mode is not looked at when nothing is created");
  cr_assert_eq(
      filtered(false, CALL(SYS_openat, AT_FDCWD, (unsigned long)tdir, O_TMPFILE | O_RDWR, 0600)),
      0);
  cr_assert_eq(filtered(false, CALL(SYS_mknod, tpath(4, "fifo"), S_IFIFO | 0644, 0)), 0);
  cr_assert_eq(filtered(false, CALL(SYS_mkdirat, AT_FDCWD, tpath(5, "dir"), 01755)), 0);
  cr_assert_eq(mode_of(tpath_buf[5]), 01755);
  cr_assert_eq(setid_files(tdir), 0);
  close(fd);
}

Test(seccomp_filter, extended_attributes_cannot_be_set, .init = tdir_setup, .fini = tdir_teardown) {
  unsigned long f = tpath(0, "f");
  int fd = open((char *)f, O_CREAT | O_RDWR, 0755);
  cr_assert(fd >= 0);
  /* a version-2 file capability: cap_setuid in the permitted set */
  static const unsigned char cap[20] = {0, 0, 0, 2, 0x80, 0, 0, 0};
  unsigned long v = (unsigned long)cap, n = sizeof(cap);
  unsigned long sec = (unsigned long)"security.capability", user = (unsigned long)"user.cordon";
  cr_assert_eq(filtered(false, CALL(SYS_setxattr, f, sec, v, n)), EOPNOTSUPP);
  cr_assert_eq(filtered(true, CALL(SYS_lsetxattr, f, sec, v, n)), EOPNOTSUPP);
  cr_assert_eq(filtered(false, CALL(SYS_fsetxattr, (unsigned long)fd, sec, v, n)), EOPNOTSUPP);
  cr_assert_eq(filtered(false, CALL(SYS_setxattr, f, user, v, 1)), EOPNOTSUPP);
  cr_assert(getxattr((char *)f, "security.capability", NULL, 0) < 0 && errno == ENODATA);
  /* reading and removing reach the file system */
  cr_assert_eq(unfiltered(CALL(SYS_setxattr, f, user, v, 1)), 0);
  char buf[8];
  cr_assert_eq(filtered(false, CALL(SYS_getxattr, f, user, (unsigned long)buf, sizeof(buf))), 0);
  cr_assert_eq(filtered(false, CALL(SYS_removexattr, f, user)), 0);
  cr_assert(getxattr((char *)f, "user.cordon", NULL, 0) < 0 && errno == ENODATA);
  close(fd);
}

Test(seccomp_filter, io_uring_and_the_mount_api_are_refused) {
  static const long nrs[] = {SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
                             SYS_fsopen,         SYS_open_tree,      SYS_mount_setattr,
                             SYS_move_mount,     SYS_mount};
  for (size_t i = 0; i < sizeof(nrs) / sizeof(nrs[0]); i++)
    cr_assert_eq(filtered(true, CALL(nrs[i], 0, 0, 0, 0)), EPERM, "nr %ld", nrs[i]);
  /* not the kernel's doing: io_uring answers here */
  cr_assert_neq(unfiltered(CALL(SYS_io_uring_setup, 0, 0)), ENOSYS);
}

static bool has_rule(json_t *rules, const char *sc, const char *action, const char *when) {
  size_t i;
  json_t *r;
  json_array_foreach(rules, i, r) {
    const char *w = json_string_value(json_object_get(r, "when"));
    if (!strcmp(json_string_value(json_object_get(r, "syscall")), sc) &&
        !strcmp(json_string_value(json_object_get(r, "action")), action) &&
        (when ? w && !strcmp(w, when) : !w))
      return true;
  }
  return false;
}

Test(seccomp_filter, explain_describes_the_allowlist_and_its_default) {
  for (int n = 0; n < 2; n++) {
    bool net = n == 1;
    json_t *rules = seccomp_job_rules_json(net);
    cr_assert(json_array_size(rules) > 300);
    cr_assert(has_rule(rules, "read", "ALLOW", NULL));
    cr_assert(has_rule(rules, "ptrace", "EPERM", NULL));
    cr_assert(has_rule(rules, "openat2", "ENOSYS", NULL));
    cr_assert(has_rule(rules, "fsetxattr", "EOPNOTSUPP", NULL));
    cr_assert(has_rule(rules, "<any other>", "ENOSYS", "not listed above"));
    cr_assert(has_rule(rules, "socket", net ? "ALLOW" : "EPERM", "domain == AF_INET"));
    cr_assert(has_rule(rules, "socket", net ? "ALLOW" : "EPERM", "domain == AF_INET6"));
    cr_assert(has_rule(rules, "socket", "EPERM", "domain == AF_UNIX"));
    cr_assert(has_rule(rules, "socket", "EAFNOSUPPORT", "any other domain"));
    cr_assert(has_rule(rules, "socketpair", "ALLOW", "domain == AF_UNIX && type == SOCK_STREAM"));
    cr_assert(has_rule(rules, "chmod", "EPERM", "mode & (S_ISUID|S_ISGID)"));
    cr_assert(has_rule(rules, "openat", "EPERM",
                       "flags & (O_CREAT|O_TMPFILE) && mode & (S_ISUID|S_ISGID)"));
    cr_assert(!has_rule(rules, "setxattr", "ALLOW", NULL));
    cr_assert(!has_rule(rules, "io_uring_setup", "ALLOW", NULL));
    /* the last word is the architecture rule */
    json_t *last = json_array_get(rules, json_array_size(rules) - 1);
    cr_assert_str_eq(json_string_value(json_object_get(last, "action")), "KILL");
    json_decref(rules);
  }
}

/* ---- real jobs, agent as root and as a user ---- */

struct env {
  bool as_user;
  struct sbx_dirs d; /* temp dir, agent --config, package source dir */
  char home[128];    /* home of whoever runs the job */
  char grant[192];   /* a directory of this test in that home */
  char tilde[64];    /* the same, as ~/... for a manifest */
  const char *user;  /* who runs the job */
  struct sbx_user u; /* the agent and its jobs, as_user */
};

static struct env E;

static void setup_env(bool as_user) {
  memset(&E, 0, sizeof(E));
  E.as_user = as_user;
  if (as_user)
    sbx_user_make(&E.u, "cdnsc");
  E.user = as_user ? E.u.name : JOB_USER;
  struct passwd *pw = sbx_account(E.user);
  snprintf(E.home, sizeof(E.home), "%s", pw->pw_dir);
  sbx_dirs_make(&E.d, "/tmp/cordon-sc-XXXXXX", E.u.uid, E.u.gid);
  /* a name no other test uses: other sandbox tests may share these homes */
  snprintf(E.tilde, sizeof(E.tilde), "~/cordon-sc-%d", (int)getpid());
  snprintf(E.grant, sizeof(E.grant), "%s/cordon-sc-%d", E.home, (int)getpid());
  xsystem("mkdir -p %s/rw %s/ro && chown -R %s: %s", E.grant, E.grant, E.user, E.grant);
}

static void teardown_env(void) {
  xsystem("rm -rf %s %s", E.d.root, E.grant);
  sbx_user_drop(&E.u);
}

static void setup_root(void) {
  setup_env(false);
}
static void setup_user(void) {
  setup_env(true);
}

static void agent_config(const char *json) {
  sbx_agent_config(&E.d, json);
}

/* contained: no bwrap, so the filter is all there is between the job and
 * the job user's authority */
static void contained(void) {
  agent_config("{\"bwrap_path\": \"/nonexistent/bwrap\", \"lowest_level\": \"contained\"}");
}

/* The package: extra manifest keys (a JSON fragment, may be NULL), the
 * shell entry and, optionally, a Python file t.py beside it. */
static void package(const char *extra, const char *script, const char *python) {
  char path[160], m[4096];
  snprintf(m, sizeof(m),
           "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
           "\"timeout_s\":30,\"limits\":{\"processes\":64,\"memory_mb\":512}%s%s}",
           extra ? "," : "", extra ? extra : "");
  sbx_package_files(&E.d, m, script);
  if (python) {
    snprintf(path, sizeof(path), "%s/t.py", E.d.pkg);
    write_file(path, python, 0644);
  }
}

/* `cordon-agent --config C exec PKG [-- args]` as root or E.u */
static struct sbx_run exec_pkg(const char *const *args) {
  struct sbx_exec x =
      sbx_exec_of(&E.d, "exec", args, E.as_user ? E.u.name : NULL, E.as_user ? E.home : "/root");
  struct sbx_run r = sbx_run_agent(&x);
  cr_assert(r.res, "no result JSON; stderr: %s", r.err);
  return r;
}

static const char *jstr(json_t *o, const char *a, const char *b) {
  json_t *v = json_object_get(o, a);
  return json_string_value(b ? json_object_get(v, b) : v);
}

/* The job ran at `level` (and did not fail to start); returns its stdout. */
static const char *ran(struct sbx_run *r, const char *level) {
  cr_assert(json_is_null(json_object_get(r->res, "error")), "error: %s / %s",
            jstr(r->res, "error", "code"), jstr(r->res, "error", "message"));
  cr_assert_str_eq(jstr(r->res, "sandbox", "level"), level);
  const char *o = jstr(r->res, "stdout", NULL);
  cr_log_info("stdout: %s\nstderr: %s", o, jstr(r->res, "stderr", NULL));
  return o ? o : "";
}

static void expect(const char *out, const char *want) {
  cr_assert(strstr(out, want), "missing \"%s\" in:\n%s", want, out);
}

/* Each behaviour runs with the agent as root and as a user. */
#define BOTH(name) SBX_BOTH(seccomp_root, seccomp_user, name)

/* -- ordinary programs still work -- */

static const char *py_runtime =
    "import multiprocessing as mp, os, socket, subprocess, sys\n"
    "def sq(x):\n"
    "  return x * x\n"
    "if __name__ == '__main__':\n"
    "  with mp.Pool(2) as p:\n"
    "    print('pool', sum(p.map(sq, range(10))))\n"
    "  with mp.get_context('spawn').Pool(1) as p:\n"
    "    print('spawn', p.apply(sq, (7,)))\n"
    "  q = mp.Queue()\n"
    "  w = mp.Process(target=q.put, args=(5,))\n"
    "  w.start(); print('queue', q.get()); w.join()\n"
    "  a, b = mp.Pipe()\n"
    "  a.send('x'); print('pipe', b.recv())\n"
    "  print('sub', subprocess.run(['echo', 'hi'], capture_output=True, "
    "text=True).stdout.strip())\n"
    "  print('shell', subprocess.run('echo $((6*7))', shell=True, capture_output=True,"
    " text=True).stdout.strip())\n"
    "  hosts = {a[4][0] for a in socket.getaddrinfo('localhost', 80)}\n"
    "  print('gai', '127.0.0.1' in hosts)\n"
    "  s1, s2 = socket.socketpair(); s1.send(b'y'); print('pair', s2.recv(1))\n"
    "  import pwd; print('pwd', pwd.getpwuid(os.getuid()).pw_uid == os.getuid())\n";

static const char *sh_tools =
    "set -e\n"
    "cd \"$WORKSPACE\"\n"
    "python3 \"$PACKAGE/t.py\"\n"
    "mkdir -p src/d && echo a > src/d/f && ln -s f src/d/l && chmod 640 src/d/f\n"
    "cp -a src dst && test -L dst/d/l && echo cp-a $(stat -c %a dst/d/f)\n"
    "cp -a \"$1/ro/attr\" . && echo cp-a-xattr $(cat attr)\n"
    "tar cf t.tar src && mkdir x && tar xpf t.tar -C x && echo tar $(cat x/src/d/f)\n"
    "echo find $(find . -name f | sort)\n"
    "echo sort $(printf 'b\\na\\n' | sort)\n"
    "t=$(mktemp) && test -f \"$t\" && d=$(mktemp -d) && test -d \"$d\" && echo mktemp ok\n"
    "echo ls $(ls -la dst/d | wc -l)\n"
    "git init -q repo && cd repo && echo x > f && git add f\n"
    "git -c user.name=t -c user.email=t@example.com commit -qm first\n"
    "echo git $(git log --oneline | wc -l) $(git status --porcelain | wc -l)\n";

static void runtime_and_tools(const char *level) {
  /* a file with an extended attribute for cp -a to try to copy */
  char attr[256];
  snprintf(attr, sizeof(attr), "%s/ro/attr", E.grant);
  write_file(attr, "kept\n", 0644);
  cr_assert(setxattr(attr, "user.cordon", "1", 1, 0) == 0, "%s", strerror(errno));
  char extra[256];
  snprintf(extra, sizeof(extra),
           "\"min_sandbox\":\"%s\",\"capabilities\":{\"fs\":[{\"path\":\"%s/ro\",\"access\":"
           "\"ro\"}]}",
           level, E.tilde);
  package(extra, sh_tools, py_runtime);
  const char *args[] = {E.grant, NULL};
  struct sbx_run r = exec_pkg(args);
  const char *o = ran(&r, level);
  cr_assert_eq(json_integer_value(json_object_get(r.res, "exit_code")), 0, "stderr: %s",
               jstr(r.res, "stderr", NULL));
  expect(o, "pool 285\n");
  expect(o, "spawn 49\n");
  expect(o, "queue 5\n");
  expect(o, "pipe x\n");
  expect(o, "sub hi\n");
  expect(o, "shell 42\n");
  expect(o, "gai True\n");
  expect(o, "pair b'y'\n");
  expect(o, "pwd True\n");
  expect(o, "cp-a 640\n");
  expect(o, "cp-a-xattr kept\n");
  expect(o, "tar a\n");
  expect(o, "find ./dst/d/f ./src/d/f ./x/src/d/f\n");
  expect(o, "sort a b\n");
  expect(o, "mktemp ok\n");
  expect(o, "ls 5\n");
  expect(o, "git 1 0\n");
  json_decref(r.res);
}

BOTH(python_sh_coreutils_and_git_run_isolated) {
  runtime_and_tools("isolated");
}

BOTH(python_sh_coreutils_and_git_run_contained) {
  contained();
  runtime_and_tools("contained");
}

BOTH(the_example_packages_run) {
  const char *args[] = {"world", NULL};
  snprintf(E.d.pkg, sizeof(E.d.pkg), "%s/examples/hello", CORDON_SOURCE_DIR);
  struct sbx_run r = exec_pkg(args);
  const char *o = ran(&r, "isolated");
  expect(o, "hello, world! (uid ");
  cr_assert_eq(r.status, 0);
  json_decref(r.res);
}

/* -- no set-id file, no file capability -- */

static const char *sh_setid =
    "for d in \"$1/rw\" \"$WORKSPACE\"; do\n"
    "  cp /bin/true \"$d/t1\" && chmod 755 \"$d/t1\" && echo chmod-755 ok\n"
    "  chmod 4755 \"$d/t1\" 2>/dev/null || echo chmod-4755 refused\n"
    "  chmod u+s,g+s \"$d/t1\" 2>/dev/null || echo chmod-ug+s refused\n"
    "  install -m 4755 /bin/true \"$d/t2\" 2>/dev/null || echo install refused\n"
    "  for b in /usr/bin/passwd /usr/bin/su /bin/su /usr/bin/mount; do\n"
    "    [ -u \"$b\" ] && cp -p \"$b\" \"$d/t3\" 2>/dev/null; echo cp-p $b\n"
    "  done\n"
    "  python3 \"$PACKAGE/t.py\" \"$d\"\n"
    "  find \"$d\" -perm /6000 | sed 's/^/SETID /'\n"
    "done\n";

static const char *py_setid =
    "import os, stat, sys\n"
    "d = sys.argv[1]\n"
    "def t(name, f):\n"
    "  try:\n"
    "    f(); print(name, 'DONE')\n"
    "  except OSError as e:\n"
    "    print(name, e.errno)\n"
    "open(d + '/p', 'w').close()\n"
    "t('os.chmod', lambda: os.chmod(d + '/p', 0o6755))\n"
    "t('os.open', lambda: os.open(d + '/o', os.O_CREAT | os.O_WRONLY, 0o4755))\n"
    "t('os.mknod', lambda: os.mknod(d + '/n', stat.S_IFREG | 0o2755))\n"
    "t('os.mkdir', lambda: os.mkdir(d + '/m', 0o2755))\n"
    "t('setxattr', lambda: os.setxattr(d + '/p', 'security.capability',"
    " bytes([0, 0, 0, 2, 0x80] + [0] * 15)))\n";

static void no_setid(const char *level) {
  char extra[256];
  snprintf(extra, sizeof(extra),
           "\"min_sandbox\":\"%s\",\"capabilities\":{\"fs\":[{\"path\":\"%s/rw\",\"access\":"
           "\"rw\"}]}",
           level, E.tilde);
  package(extra, sh_setid, py_setid);
  const char *args[] = {E.grant, NULL};
  struct sbx_run r = exec_pkg(args);
  const char *o = ran(&r, level);
  cr_assert(!strstr(o, "SETID") && !strstr(o, "DONE"), "a set-id bit was set:\n%s", o);
  expect(o, "chmod-755 ok\nchmod-4755 refused\nchmod-ug+s refused\ninstall refused\n");
  expect(o, "os.chmod 1\nos.open 1\nos.mknod 1\nos.mkdir 1\nsetxattr 95\n");
  /* what the host sees in the writable grant */
  char rw[256];
  snprintf(rw, sizeof(rw), "%s/rw", E.grant);
  cr_assert_eq(setid_files(rw), 0);
  char t1[300];
  snprintf(t1, sizeof(t1), "%s/t1", rw);
  cr_assert_eq(mode_of(t1), 0755, "the writable grant was written");
  cr_assert(getxattr(t1, "security.capability", NULL, 0) < 0 && errno == ENODATA);
  snprintf(t1, sizeof(t1), "%s/p", rw);
  cr_assert(getxattr(t1, "security.capability", NULL, 0) < 0 && errno == ENODATA);
  json_decref(r.res);
}

BOTH(no_set_id_file_or_capability_reaches_a_writable_grant_isolated) {
  no_setid("isolated");
}

BOTH(no_set_id_file_or_capability_reaches_a_writable_grant_contained) {
  contained();
  no_setid("contained");
}

/* -- no host unix socket, whatever `net` says -- */

struct host_sockets {
  int stream, dgram, abstract;
  char stream_path[256], dgram_path[256], abstract_name[64];
};

static int unix_listener(int type, const char *path, size_t len) {
  int s = socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  cr_assert(s >= 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  memcpy(a.sun_path, path, len);
  cr_assert(bind(s, (struct sockaddr *)&a,
                 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) == 0,
            "bind: %s", strerror(errno));
  if (type == SOCK_STREAM)
    cr_assert(listen(s, 8) == 0);
  return s;
}

/* Sockets in the read-only grant, open to everyone: a read-only bind does
 * not stop connect() or sendto() on a socket file. */
static void host_sockets_open(struct host_sockets *h) {
  snprintf(h->stream_path, sizeof(h->stream_path), "%s/ro/s.sock", E.grant);
  snprintf(h->dgram_path, sizeof(h->dgram_path), "%s/ro/d.sock", E.grant);
  snprintf(h->abstract_name, sizeof(h->abstract_name), "%ccordon-sc-%d", 0, (int)getpid());
  h->stream = unix_listener(SOCK_STREAM, h->stream_path, strlen(h->stream_path) + 1);
  h->dgram = unix_listener(SOCK_DGRAM, h->dgram_path, strlen(h->dgram_path) + 1);
  h->abstract = unix_listener(SOCK_STREAM, h->abstract_name, 1 + strlen(h->abstract_name + 1));
  chmod(h->stream_path, 0777);
  chmod(h->dgram_path, 0777);
}

/* Nothing connected to or was sent to any of them. */
static void host_sockets_untouched(struct host_sockets *h) {
  cr_assert(accept4(h->stream, NULL, NULL, SOCK_CLOEXEC) < 0 && errno == EAGAIN,
            "a job connected to the host socket");
  cr_assert(accept4(h->abstract, NULL, NULL, SOCK_CLOEXEC) < 0 && errno == EAGAIN,
            "a job connected to the abstract socket");
  char b[8];
  cr_assert(recv(h->dgram, b, sizeof(b), 0) < 0 && errno == EAGAIN,
            "a job sent to the host datagram socket");
  close(h->stream);
  close(h->dgram);
  close(h->abstract);
}

static const char *py_unix =
    "import socket, sys\n"
    "stream, dgram, abstract = sys.argv[1], sys.argv[2], '\\0' + sys.argv[3]\n"
    "def t(name, f):\n"
    "  try:\n"
    "    f(); print(name, 'REACHED')\n"
    "  except OSError as e:\n"
    "    print(name, e.errno)\n"
    "def connect(addr, typ):\n"
    "  socket.socket(socket.AF_UNIX, typ).connect(addr)\n"
    "t('stream', lambda: connect(stream, socket.SOCK_STREAM))\n"
    "t('dgram', lambda: connect(dgram, socket.SOCK_DGRAM))\n"
    "t('abstract', lambda: connect(abstract, socket.SOCK_STREAM))\n"
    "t('pair-dgram', lambda: socket.socketpair(socket.AF_UNIX,"
    " socket.SOCK_DGRAM)[0].sendto(b'x', dgram))\n"
    "a, b = socket.socketpair()\n"
    "t('pair-sendto', lambda: a.sendto(b'x', dgram))\n"
    "t('pair-connect', lambda: a.connect(stream))\n"
    "a.send(b'z'); print('pair', b.recv(1))\n";

static void no_host_unix_socket(const char *level, bool net) {
  struct host_sockets h;
  host_sockets_open(&h);
  char extra[320];
  snprintf(extra, sizeof(extra),
           "\"min_sandbox\":\"%s\",\"capabilities\":{\"net\":%s,\"fs\":[{\"path\":\"%s/ro\","
           "\"access\":\"ro\"}]}",
           level, net ? "true" : "false", E.tilde);
  package(extra, "exec python3 \"$PACKAGE/t.py\" \"$@\"\n", py_unix);
  const char *args[] = {h.stream_path, h.dgram_path, h.abstract_name + 1, NULL};
  struct sbx_run r = exec_pkg(args);
  const char *o = ran(&r, level);
  cr_assert(!strstr(o, "REACHED"), "got:\n%s", o);
  expect(o, "stream 1\ndgram 1\nabstract 1\npair-dgram 1\n");
  /* EISCONN: a pair stays a pair; the host socket itself is blinded by
   * /dev/null (test_sandbox_grants_linux.c), so connect may be refused first */
  cr_assert(strstr(o, "pair-sendto 106\npair-connect 106\n") ||
                strstr(o, "pair-sendto 106\npair-connect 111\n"),
            "got:\n%s", o);
  expect(o, "pair b'z'\n");
  host_sockets_untouched(&h);
  json_decref(r.res);
}

BOTH(no_connect_to_a_host_unix_socket_in_a_read_only_grant_without_net) {
  no_host_unix_socket("isolated", false);
}

BOTH(no_connect_to_a_host_unix_socket_in_a_read_only_grant_with_net) {
  no_host_unix_socket("isolated", true);
}

BOTH(no_connect_to_a_host_unix_socket_contained) {
  contained();
  no_host_unix_socket("contained", true);
}

/* -- only the families networking needs -- */

static const char *py_families = "import socket\n"
                                 "def t(name, *a):\n"
                                 "  try:\n"
                                 "    socket.socket(*a).close(); print(name, 'OPEN')\n"
                                 "  except OSError as e:\n"
                                 "    print(name, e.errno)\n"
                                 "t('inet', socket.AF_INET, socket.SOCK_STREAM)\n"
                                 "t('inet6', socket.AF_INET6, socket.SOCK_DGRAM)\n"
                                 "t('route', socket.AF_NETLINK, socket.SOCK_RAW, 0)\n"
                                 "t('vsock', socket.AF_VSOCK, socket.SOCK_STREAM)\n"
                                 "t('packet', socket.AF_PACKET, socket.SOCK_DGRAM)\n"
                                 "t('uevent', socket.AF_NETLINK, socket.SOCK_RAW, 15)\n"
                                 "t('audit', socket.AF_NETLINK, socket.SOCK_RAW, 9)\n"
                                 "t('xdp', 44, socket.SOCK_RAW)\n"
                                 "print('ifaces', len(socket.if_nameindex()) > 0)\n";

static void families(const char *level) {
  char extra[128];
  snprintf(extra, sizeof(extra), "\"min_sandbox\":\"%s\",\"capabilities\":{\"net\":true}", level);
  package(extra, "exec python3 \"$PACKAGE/t.py\"\n", py_families);
  struct sbx_run r = exec_pkg(NULL);
  const char *o = ran(&r, level);
  expect(o, "inet OPEN\ninet6 OPEN\nroute OPEN\n");
  expect(o, "vsock 97\npacket 97\nuevent 97\naudit 97\nxdp 97\n");
  expect(o, "ifaces True\n");
  json_decref(r.res);
}

BOTH(with_net_vsock_packet_and_netlink_beyond_route_are_refused_isolated) {
  families("isolated");
}

BOTH(with_net_vsock_packet_and_netlink_beyond_route_are_refused_contained) {
  contained();
  families("contained");
}

/* -- the default: what the filter does not know -- */

static const char *py_unknown =
    "import ctypes, socket\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "for nr in (1000, 467, 458):\n"
    "  libc.syscall(nr, -1, 0, 0, 0); print(nr, ctypes.get_errno())\n"
    "a, b = socket.socketpair(); a.send(b'ok'); print(b.recv(2).decode())\n";

BOTH(an_unknown_system_call_returns_enosys_in_a_job) {
  package(NULL, "exec python3 \"$PACKAGE/t.py\"\n", py_unknown);
  struct sbx_run r = exec_pkg(NULL);
  const char *o = ran(&r, "isolated");
  cr_assert_str_eq(o, "1000 38\n467 38\n458 38\nok\n");
  json_decref(r.res);
}
