/* The few calls the macOS layer needs that POSIX does not give: a listing
 * of one user's processes (with parent, group, session and start time) and
 * the running program's path. (The launcher's vfork-child steps are
 * platform/posix/launch.c's, chosen by CORDON_WITH_* switches.)
 *
 * Two implementations, chosen by the build (never by OS checks in code):
 * apple.c (CORDON_WITH_APPLE_PROC: sysctl KERN_PROC_RUID, plain setuid) on
 * macOS, procfs.c (CORDON_WITH_PROCFS: /proc, raw system calls) when the
 * macOS layer is compiled on Linux for its tests. Everything else in
 * platform/macos/ is plain POSIX.
 */
#ifndef CORDON_PLATFORM_MACOS_OS_H
#define CORDON_PLATFORM_MACOS_OS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One live (not zombie) process. (pid, start) names it across snapshots:
 * a recycled pid has another start time. Start times are ordered: a
 * process started later never has a smaller one (same clock, same host). */
struct macos_proc {
  pid_t pid, ppid, pgid, sid;
  uint64_t start; /* opaque, comparable only for equality */
};

/* The live processes whose real uid is ruid. On success *out_v (malloc'd,
 * caller frees; NULL when none) and *out_n are set and 0 is returned;
 * otherwise a negated errno. Processes that exit while the table is read
 * are simply left out. */
int macos_os_procs(uid_t ruid, struct macos_proc **out_v, size_t *out_n);

/* Where the listing comes from, for `status`: "sysctl(KERN_PROC_RUID)" or
 * "/proc". */
const char *macos_os_procs_source(void);

/* The absolute path of the running program. 0 or a negated errno. */
int macos_os_self_path(char *out, size_t len);

#endif
