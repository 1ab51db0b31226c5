/* The job's seccomp filter, built with libseccomp (at build time, by
 * cmake/seccomp_gen.c, and embedded; at run time when cross-compiled): an
 * allowlist.
 *
 * The system calls programs need are allowed; a call the filter does not
 * know (a newer kernel's, say) fails with ENOSYS, as on a kernel without
 * it, so libc falls back. Kernel-level escapes fail with EPERM; clone3 and
 * openat2 with ENOSYS (libc falls back to clone and openat, whose
 * arguments are checked); setting an extended attribute with EOPNOTSUPP.
 * Argument checks: clone without namespace flags, ioctl without TIOCSTI or
 * TIOCLINUX, no set-user-ID or set-group-ID bit in a mode, sockets of
 * AF_INET, AF_INET6 and routing netlink only when net is allowed (EPERM
 * without), never AF_UNIX (EPERM) nor another family (EAFNOSUPPORT),
 * socketpair of connected AF_UNIX stream or seqpacket sockets only. Other
 * architectures' system calls (i386, x32 on x86_64) kill the whole
 * process. docs/SECURITY.md lists the same policy.
 */
#ifndef CORDON_PLATFORM_LINUX_SECCOMP_H
#define CORDON_PLATFORM_LINUX_SECCOMP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Write the BPF program for a job (net allowed or not) to a new sealed
 * memfd, positioned at 0, for bwrap --seccomp. Returns the fd or a negated
 * errno. */
int seccomp_job_filter_fd(bool net);

struct sock_fprog;
/* The same program as a classic BPF array for prctl(PR_SET_SECCOMP) in the
 * launcher (contained mode). Free with seccomp_job_prog_free(). */
int seccomp_job_filter_prog(bool net, struct sock_fprog **out_prog);
void seccomp_job_prog_free(struct sock_fprog *prog);

struct sock_filter;
/* The program of a variant as libseccomp builds it now from the policy
 * (what the two calls above hand out, unless the build embedded it): a new
 * malloc'd array of *out_n instructions, freed with free(). Negated errno
 * on failure (libseccomp's, -E2BIG for an empty or too long program). Used
 * by the build-time generator (cmake/seccomp_gen.c) and its test. */
int seccomp_job_build_bpf(bool net, struct sock_filter **out_insns, size_t *out_n);

/* Whether the programs handed out were generated at build time and
 * embedded in this binary (true in a native build; false when
 * cross-compiling, where each process builds them once with libseccomp). */
bool seccomp_job_program_embedded(void);

/* The policy, for explain: [{"syscall","action","when"}...], generated
 * from the same code as the filter: one entry per allowed or refused
 * system call (action "ALLOW", an errno name, or "KILL"; when null or the
 * argument condition), then "<any other>" (the default, ENOSYS) and
 * "<other architectures>". NULL when out of memory. */
json_t *seccomp_job_rules_json(bool net);

#endif
