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
 * leaf child CGROUP_AGENT_LEAF (with its children: the reaper; only when
 * no other process is there) and enables them on the parent, whose
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
 *
 * One parent per agent instance: job cgroups do not sit directly in the
 * agent's cgroup, where other agents (other users' per-user agents in a
 * shared root cgroup, other config dirs) make theirs too, but in
 * BASE/cordon-agent-<16 hex>/ in each hierarchy (the v2 one, or each of the
 * v1 memory, pids and cpuacct), the hex a 64-bit FNV-1a hash of "<uid>:"
 * and the real path of the agent's config directory (cgroup_instance_name).
 * BASE is what it was before: the agent's own cgroup (v2: its parent when
 * the agent sits in CGROUP_AGENT_LEAF).
 *
 * Below it, the agent that holds the agent lock (`cordon-agent run`, which
 * calls cgroup_instance_sweep at start) names its jobs' cgroups job-<pid>-<n>;
 * any other process of the same instance (`cordon-agent exec`, which may
 * run beside it) names them exec-<pid>-<n>. The sweep kills (cgroup.kill
 * on v2, SIGKILL by pid on v1, waiting on pidfds) and removes every job-*
 * there, and every exec-<pid>-* whose pid is gone. In another instance's
 * parent it only removes empty job directories whose pid is gone (a pool
 * a kill -9 left) and then the parent if empty; it never kills there. It
 * also removes, directly below BASE, the empty
 * cordon-<32 hex> directories earlier versions leaked, when older than a
 * minute; a non-empty one is left (only its job id, known to the spool,
 * lets cgroup_job_reap take it).
 *
 * Pool and release (the swept agent only): a worker thread keeps
 * CGROUP_POOL_SIZE empty job directories made ahead, and does the final
 * kill and rmdir of a released job after cgroup_job_release returns, so
 * that neither mkdir nor rmdir is between a job's arrival and its result.
 * A pooled directory is used once; the job's limits are written into it
 * when it is taken. At exit (atexit) the worker finishes what is queued
 * and removes the pool and the instance directories; after a kill -9 the
 * next start's sweep does. `exec` makes and releases its one directory
 * itself, and removes the instance directory when that leaves it empty.
 */
#ifndef CORDON_PLATFORM_LINUX_CGROUP_H
#define CORDON_PLATFORM_LINUX_CGROUP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CGROUP_AGENT_LEAF "cordon-agent"
#define CGROUP_INSTANCE_PREFIX "cordon-agent-"
#define CGROUP_INSTANCE_NAME_SIZE 40
#define CGROUP_JOB_PREFIX "job-"
#define CGROUP_EXEC_PREFIX "exec-"
#define CGROUP_POOL_SIZE 2

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

/* The cgroup path of the process whose /proc/PID/cgroup text is text
 * (NUL-terminated, lines "hierarchy-ID:controller-list:path"): of the v1
 * hierarchy that lists controller ctrl ("memory", "cpuacct"; a name=
 * entry never matches), or of the v2 unified hierarchy when ctrl is NULL
 * (the line "0::path", which v2-only and hybrid hosts have). out gets ""
 * for the root and "/a/b" otherwise, so that mount point + out names the
 * directory. Returns 0; -ENOENT when no line names that hierarchy;
 * -EINVAL when its path is one the mount cannot show (outside our cgroup
 * namespace, "/../..", or removed, " (deleted)"); -ENAMETOOLONG when out
 * is too small. out is written only on success. */
int cgroup_parse_self(const char *text, const char *ctrl, char *out, size_t len);

/* Which controllers a job would get here (for explain: nothing created). */
struct cgroup_avail {
  bool memory, pids, cpu;
};
void cgroup_available(struct cgroup_avail *out);

void cgroup_job_init(struct cgroup_job *cg);
/* The instance directory's name for the agent of state_dir (NULL: none)
 * running as uid (the agent's own: getuid()): "cordon-agent-<16 hex>". */
void cgroup_instance_name(const char *state_dir, uid_t uid, char out[CGROUP_INSTANCE_NAME_SIZE]);
/* Create (or take from the pool) the job's cgroups below the instance of
 * state_dir and write the limits. Never fails hard: what could not be
 * created is left NULL. Returns 0, or -ENOMEM. */
int cgroup_job_create(struct cgroup_job *cg, const char *state_dir, uint64_t mem_bytes,
                      unsigned max_pids);
/* CPU time used so far by the job's tree in microseconds, or -1. */
int64_t cgroup_job_cpu_usec(const struct cgroup_job *cg);
/* SIGKILL every process in the job's cgroups until they are empty: on v2
 * by cgroup.kill (the kernel kills the whole subtree, child cgroups and
 * processes forking meanwhile included), where the kernel has it (5.14),
 * then waiting for each listed process to leave; on v1 by pid, round by
 * round. Returns the number of processes signalled (v2: listed when it
 * began). */
unsigned cgroup_job_kill(struct cgroup_job *cg);
/* 1 if the OOM killer acted in the job's memory cgroup, 0 if not, -1 if
 * unknown. */
int cgroup_job_oom_killed(const struct cgroup_job *cg);
/* Kill what is left, remove the cgroups, close fds, free. In the swept
 * agent the kill and rmdir happen on the worker after this returns (the
 * fds are closed and cg reset at once); the caller kills what must be dead
 * before the result itself (cgroup_job_kill). */
void cgroup_job_release(struct cgroup_job *cg);

/* At the start of the agent that holds the agent lock for state_dir: kill
 * and remove what earlier processes of this instance left (see above),
 * then make this process the instance's owner and start its pool worker.
 * Returns how many processes were signalled. */
unsigned cgroup_instance_sweep(const char *state_dir);
/* The same kill and removal of the job directories of one agent process,
 * agent_pid's (job-<pid>-<n>), and nothing more: no owner, no pool (the
 * agent's reaper, sandbox_reaper_start, once that agent is gone: what a
 * new agent of the instance made is never touched). */
unsigned cgroup_instance_reap(const char *state_dir, long agent_pid);

/* Find the cgroups an earlier version's agent made for job_id (same
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
