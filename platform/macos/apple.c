/* The Apple-only calls of the macOS layer (see os.h). Compiled to nothing
 * unless the build sets CORDON_WITH_APPLE_PROC (CMake does on Apple). Not
 * compiled or run on these Linux machines: docs/MACOS.md says so. */
#if CORDON_WITH_APPLE_PROC
#include "platform/macos/os.h"

#include <errno.h>
#include <limits.h>
#include <mach-o/dyld.h>
#include <stdlib.h>
#include <string.h>
#include <sys/param.h>
#include <sys/proc.h>
#include <sys/sysctl.h>
#include <unistd.h>

int macos_os_procs(uid_t ruid, struct macos_proc **out_v, size_t *out_n) {
  int mib[4] = {CTL_KERN, KERN_PROC, KERN_PROC_RUID, (int)ruid};
  struct kinfo_proc *kp = NULL;
  size_t len = 0;
  int r = -EAGAIN;
  /* the table may grow between the size query and the read: retry */
  for (int attempt = 0; attempt < 4; attempt++) {
    if (sysctl(mib, 4, NULL, &len, NULL, 0) < 0)
      return -errno;
    len += len / 4 + 16 * sizeof(struct kinfo_proc);
    struct kinfo_proc *nkp = realloc(kp, len);
    if (!nkp) {
      free(kp);
      return -ENOMEM;
    }
    kp = nkp;
    if (sysctl(mib, 4, kp, &len, NULL, 0) == 0) {
      r = 0;
      break;
    }
    if (errno != ENOMEM) {
      r = -errno;
      break;
    }
  }
  if (r < 0) {
    free(kp);
    return r;
  }
  size_t n = len / sizeof(struct kinfo_proc), k = 0;
  struct macos_proc *v = n ? calloc(n, sizeof(*v)) : NULL;
  if (n && !v) {
    free(kp);
    return -ENOMEM;
  }
  for (size_t i = 0; i < n; i++) {
    if (kp[i].kp_proc.p_stat == SZOMB)
      continue;
    pid_t pid = kp[i].kp_proc.p_pid;
    pid_t sid = getsid(pid);
    if (sid < 0)
      continue; /* gone since the table was read */
    v[k].pid = pid;
    v[k].ppid = kp[i].kp_eproc.e_ppid;
    v[k].pgid = kp[i].kp_eproc.e_pgid;
    v[k].sid = sid;
    v[k].start = (uint64_t)kp[i].kp_proc.p_starttime.tv_sec * 1000000u +
                 (uint64_t)kp[i].kp_proc.p_starttime.tv_usec;
    k++;
  }
  free(kp);
  *out_v = v;
  *out_n = k;
  return 0;
}

const char *macos_os_procs_source(void) {
  return "sysctl(KERN_PROC_RUID)";
}

int macos_os_self_path(char *out, size_t len) {
  char raw[PATH_MAX];
  uint32_t size = sizeof(raw);
  if (_NSGetExecutablePath(raw, &size) != 0)
    return -ENAMETOOLONG;
  char real[PATH_MAX];
  if (!realpath(raw, real))
    return -errno;
  if (strlen(real) >= len)
    return -ENAMETOOLONG;
  memcpy(out, real, strlen(real) + 1);
  return 0;
}
#endif
