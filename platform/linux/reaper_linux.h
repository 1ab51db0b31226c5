/* The agent's side of its reaper (platform/sandbox.h, sandbox_reaper_start). */
#ifndef CORDON_PLATFORM_LINUX_REAPER_LINUX_H
#define CORDON_PLATFORM_LINUX_REAPER_LINUX_H

#include <sys/types.h>

/* Hand the reaper a copy of pidfd (a job's pid-namespace init): when the
 * agent is gone, the reaper SIGKILLs it, which ends the job's namespace.
 * It drops the copy once that process has exited. Nothing without a
 * reaper (sandbox_reaper_start not called, or failed). Thread-safe. */
void reaper_linux_watch(int pidfd);

/* The reaper's pid (a child of the agent, which a sweep of the agent's
 * descendants must spare), or 0 when there is none. */
pid_t reaper_linux_pid(void);

#endif
