/* The job's seccomp filter, built with libseccomp.
 *
 * Denied system calls fail with EPERM (clone3 with ENOSYS, so libc falls
 * back to clone, whose namespace flags are filtered). Other architectures'
 * system calls (i386, x32 on x86_64) kill the process: libseccomp's
 * default bad-arch action.
 */
#ifndef CORDON_PLATFORM_LINUX_SECCOMP_H
#define CORDON_PLATFORM_LINUX_SECCOMP_H

#include <jansson.h>
#include <stdbool.h>

/* Write the BPF program for a job (net allowed or not) to a new sealed
 * memfd, positioned at 0, for bwrap --seccomp. Returns the fd or a negated
 * errno. */
int seccomp_job_filter_fd(bool net);

struct sock_fprog;
/* The same program as a classic BPF array for prctl(PR_SET_SECCOMP) in the
 * launcher (contained mode). Free with seccomp_job_prog_free(). */
int seccomp_job_filter_prog(bool net, struct sock_fprog **out_prog);
void seccomp_job_prog_free(struct sock_fprog *prog);

/* The rule list, for explain: [{"syscall","action","when"}...]. */
json_t *seccomp_job_rules_json(bool net);

#endif
