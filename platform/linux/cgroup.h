/* A cgroup per job: memory, pids and CPU for the whole tree, whole-tree
 * kill, OOM report.
 *
 * Uses cgroup v2 when the agent's own cgroup may delegate the memory and
 * pids controllers to children, otherwise the v1 hierarchies of memory,
 * pids and cpuacct. A controller is used when the agent's uid may create a
 * child cgroup there: root, or a subtree delegated to the agent's user
 * (systemd Delegate=yes, or a v1 directory chowned to it). The caller
 * falls back to rlimits for what is missing and reports which mechanism
 * enforced each limit.
 *
 * cgroup v2 forbids a cgroup with processes in it to enable controllers for
 * its children ("no internal processes"): when the agent's own cgroup has
 * the controllers but cannot enable them, the agent moves itself into a
 * leaf child CGROUP_AGENT_LEAF and enables them on the parent, whose
 * children the job cgroups then are.
 *
 * Joining without a grace period: writing a pid to `cgroup.procs` takes
 * the cgroup thread-group lock for writing, which waits for an RCU grace
 * period (milliseconds). On v2 the launcher starts the job's first process
 * in its cgroup with clone3(CLONE_INTO_CGROUP) (v2_dir_fd); on v1 the
 * single-threaded child writes "0" (itself, one thread) to each `tasks`
 * file, which needs no thread-group lock. Every descendant is forked
 * inside, so the limits hold for the whole tree either way. Where clone3
 * cannot, the launcher falls back to writing "0" to v2's `cgroup.procs`.
 */
#ifndef CORDON_PLATFORM_LINUX_CGROUP_H
#define CORDON_PLATFORM_LINUX_CGROUP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define CGROUP_AGENT_LEAF "cordon-agent"

struct cgroup_job {
  int version;    /* 0 none, 1, 2 */
  char *mem_dir;  /* NULL when memory is not limited by a cgroup */
  char *pids_dir; /* NULL when pids are not limited by a cgroup */
  char *cpu_dir;  /* NULL when the tree's CPU time cannot be read */
  /* what the child writes "0" to, O_WRONLY|O_CLOEXEC, or -1: v1 `tasks` of
   * each distinct dir, v2 `cgroup.procs` (the fallback of v2_dir_fd) */
  int procs_fd[3];
  int v2_dir_fd; /* v2: the job's cgroup directory for clone3, or -1 */
};

/* Which controllers a job would get here (for explain: nothing created). */
struct cgroup_avail {
  bool memory, pids, cpu;
};
void cgroup_available(struct cgroup_avail *out);

void cgroup_job_init(struct cgroup_job *cg);
/* Create the job's cgroups with the limits. Never fails hard: what could not
 * be created is left NULL. Returns 0, or -ENOMEM. */
int cgroup_job_create(struct cgroup_job *cg, const char *job_id, uint64_t mem_bytes,
                      unsigned max_pids);
/* CPU time used so far by the job's tree in microseconds, or -1. */
int64_t cgroup_job_cpu_usec(const struct cgroup_job *cg);
/* SIGKILL every process in the job's cgroups until they are empty. Returns
 * the number of processes signalled. */
unsigned cgroup_job_kill(struct cgroup_job *cg);
/* 1 if the OOM killer acted in the job's memory cgroup, 0 if not, -1 if
 * unknown. */
int cgroup_job_oom_killed(const struct cgroup_job *cg);
/* Kill what is left, remove the cgroups, close fds, free. */
void cgroup_job_release(struct cgroup_job *cg);

/* Find the cgroups a previous agent process made for job_id (same
 * hierarchy rules as create), kill what is in them and remove them.
 * Returns how many processes were signalled. */
unsigned cgroup_job_reap(const char *job_id);

/* How a job's first process joins its cgroups here, for status and
 * explain: "clone3(CLONE_INTO_CGROUP)" (v2), "cgroup.procs" (v2 where
 * clone3 cannot: the slow migration), "tasks" (v1, the child writes 0), or
 * NULL when no cgroup would be made. */
const char *cgroup_join_method(void);

/* Probe findings for `status`. */
json_t *cgroup_probe_json(void);

#endif
