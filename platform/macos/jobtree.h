/* Which processes belong to a job, without a subreaper or a cgroup.
 *
 * A job's first process (the leader) starts its own session and process
 * group. Its processes are: those in that group or session; those seen as
 * members in an earlier snapshot (same pid and start time); those in the
 * session of any member (a child that called setsid() starts one); and the
 * children of members. The supervisor feeds snapshots of the job user's
 * processes while the job runs, so a descendant that leaves the group is
 * remembered before its parent exits and it is re-parented to launchd.
 *
 * Limit (docs/MACOS.md): a process that calls setsid() and whose parent
 * exits between two snapshots is not seen, unless the job user is the
 * job's alone (jobtree_adopt_orphans). jobtree_update is pure; the tests
 * feed it tables.
 */
#ifndef CORDON_PLATFORM_MACOS_JOBTREE_H
#define CORDON_PLATFORM_MACOS_JOBTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "platform/macos/os.h"

struct jobtree_member {
  pid_t pid, pgid, sid;
  uint64_t start;
  bool alive;     /* present in the last snapshot */
  bool signalled; /* counted by jobtree_signal */
};

struct jobtree {
  pid_t leader; /* pid, process group and session of the job */
  uint64_t leader_start;
  bool leader_seen; /* leader_start is known */
  struct jobtree_member *m;
  size_t n, cap;
  int err; /* sticky -ENOMEM: members may then be missing */
};

void jobtree_init(struct jobtree *t, pid_t leader);
void jobtree_release(struct jobtree *t);

/* Fold one snapshot in (see above). Returns how many members besides the
 * leader are alive in it. */
size_t jobtree_update(struct jobtree *t, const struct macos_proc *v, size_t n);

/* For a job user that only this job uses: take as members the processes
 * of the snapshot (all of that user's) that were re-parented to init
 * (ppid 1) and started no earlier than the leader. That catches a setsid
 * escapee whose parent exited between two snapshots. Returns how many were
 * added. */
size_t jobtree_adopt_orphans(struct jobtree *t, const struct macos_proc *v, size_t n);

/* Members (alive or not, the leader excluded) that are outside the
 * leader's process group: the ones a group signal misses. */
size_t jobtree_escaped(const struct jobtree *t);

/* Send sig to the leader's group and to every live member outside it
 * (never to pid <= 1). Returns how many members besides the leader were
 * signalled for the first time: the job's leftovers, reported as
 * orphans_killed. */
size_t jobtree_signal(struct jobtree *t, int sig);

#endif
