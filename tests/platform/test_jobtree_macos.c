/* The macOS layer's job membership (platform/macos/jobtree.c), fed
 * hand-made process tables: no processes are run here. */
#include <criterion/criterion.h>
#include <string.h>

#include "platform/macos/jobtree.h"

#define LEADER 100

static struct macos_proc P(pid_t pid, pid_t ppid, pid_t pgid, pid_t sid, uint64_t start) {
  return (struct macos_proc){.pid = pid, .ppid = ppid, .pgid = pgid, .sid = sid, .start = start};
}

/* user's unrelated processes: a login shell and its children */
static const struct macos_proc other[] = {
    {.pid = 50, .ppid = 1, .pgid = 50, .sid = 50, .start = 1},
    {.pid = 60, .ppid = 50, .pgid = 60, .sid = 50, .start = 2},
};

static bool has(const struct jobtree *t, pid_t pid) {
  for (size_t i = 0; i < t->n; i++)
    if (t->m[i].pid == pid && t->m[i].alive)
      return true;
  return false;
}

Test(jobtree, group_and_session_members_and_children_belong) {
  struct jobtree t;
  jobtree_init(&t, LEADER);
  struct macos_proc v[] = {
      other[0],
      other[1],
      P(LEADER, 60, LEADER, LEADER, 10),
      P(101, LEADER, LEADER, LEADER, 11), /* in the group */
      P(102, LEADER, 102, LEADER, 12),    /* own group, same session */
      P(103, 101, 103, 103, 13),          /* setsid'd child of a member */
      P(104, 103, 103, 103, 14),          /* its child */
  };
  size_t live = jobtree_update(&t, v, sizeof(v) / sizeof(v[0]));
  cr_assert_eq(live, 4);
  cr_assert(has(&t, LEADER) && has(&t, 101) && has(&t, 102) && has(&t, 103) && has(&t, 104));
  cr_assert(!has(&t, 50) && !has(&t, 60), "the user's other processes are not the job's");
  cr_assert_eq(jobtree_escaped(&t), 3, "102, 103 and 104 are outside the leader's group");
  cr_assert_eq(t.err, 0);
  jobtree_release(&t);
}

Test(jobtree, an_escapee_is_remembered_after_its_parent_exits) {
  struct jobtree t;
  jobtree_init(&t, LEADER);
  struct macos_proc before[] = {
      P(LEADER, 60, LEADER, LEADER, 10), P(101, LEADER, LEADER, LEADER, 11),
      P(103, 101, 103, 103, 13), /* setsid, still a child of 101 */
  };
  jobtree_update(&t, before, 3);
  /* 101 exited: 103 was re-parented to launchd (pid 1) and forked 105 */
  struct macos_proc after[] = {
      other[0], P(LEADER, 60, LEADER, LEADER, 10), P(103, 1, 103, 103, 13),
      P(105, 1, 105, 103, 15), /* in 103's session, parent gone too */
  };
  size_t live = jobtree_update(&t, after, 4);
  cr_assert_eq(live, 2);
  cr_assert(has(&t, 103) && has(&t, 105));
  cr_assert(!has(&t, 101));
  jobtree_release(&t);
}

Test(jobtree, a_recycled_pid_is_not_a_member) {
  struct jobtree t;
  jobtree_init(&t, LEADER);
  struct macos_proc before[] = {P(LEADER, 60, LEADER, LEADER, 10), P(103, LEADER, 103, 103, 13)};
  jobtree_update(&t, before, 2);
  /* 103 died; its pid went to an unrelated process with another start time
   * that made its own session: not the job's */
  struct macos_proc after[] = {P(LEADER, 60, LEADER, LEADER, 10), P(103, 50, 103, 103, 99)};
  size_t live = jobtree_update(&t, after, 2);
  cr_assert_eq(live, 0);
  jobtree_release(&t);
}

Test(jobtree, an_emptied_session_id_is_forgotten) {
  struct jobtree t;
  jobtree_init(&t, LEADER);
  struct macos_proc a[] = {P(LEADER, 60, LEADER, LEADER, 10), P(103, LEADER, 103, 103, 13)};
  jobtree_update(&t, a, 2);
  struct macos_proc b[] = {P(LEADER, 60, LEADER, LEADER, 10)}; /* session 103 is empty */
  jobtree_update(&t, b, 1);
  /* later an unrelated process gets pid 103 as a session id */
  struct macos_proc c[] = {P(LEADER, 60, LEADER, LEADER, 10), P(103, 50, 103, 103, 70),
                           P(110, 103, 103, 103, 71)};
  cr_assert_eq(jobtree_update(&t, c, 3), 0);
  jobtree_release(&t);
}

Test(jobtree, members_of_the_group_are_found_after_the_leader_exited) {
  struct jobtree t;
  jobtree_init(&t, LEADER);
  /* the leader is a zombie (not listed); its background child lives on */
  struct macos_proc v[] = {other[0], P(101, 1, LEADER, LEADER, 11)};
  cr_assert_eq(jobtree_update(&t, v, 2), 1);
  cr_assert(has(&t, 101));
  cr_assert_eq(jobtree_escaped(&t), 0);
  jobtree_release(&t);
}

Test(jobtree, pid_one_and_zero_are_never_members) {
  struct jobtree t;
  jobtree_init(&t, LEADER);
  struct macos_proc v[] = {P(1, 0, 1, 1, 0), P(LEADER, 1, LEADER, LEADER, 10),
                           P(0, 0, LEADER, LEADER, 0)};
  cr_assert_eq(jobtree_update(&t, v, 3), 0);
  cr_assert(!has(&t, 1) && !has(&t, 0));
  jobtree_release(&t);
}

Test(jobtree, a_deep_chain_is_found_whatever_the_table_order) {
  struct jobtree t;
  jobtree_init(&t, LEADER);
  struct macos_proc v[64];
  size_t n = 0;
  /* children listed before their parents, each in its own session */
  for (int i = 40; i >= 1; i--)
    v[n++] = P(LEADER + i, LEADER + i - 1, LEADER + i, LEADER + i, (uint64_t)(20 + i));
  v[n++] = P(LEADER, 60, LEADER, LEADER, 10);
  cr_assert_eq(jobtree_update(&t, v, n), 40);
  jobtree_release(&t);
}

Test(jobtree, signal_counts_each_leftover_once) {
  struct jobtree t;
  jobtree_init(&t, 0x7ffffff0); /* no such group: kill() fails harmlessly */
  /* members with pids that cannot exist either */
  struct macos_proc v[] = {P(0x7ffffff1, 0x7ffffff0, 0x7ffffff0, 0x7ffffff0, 1),
                           P(0x7ffffff2, 0x7ffffff1, 0x7ffffff2, 0x7ffffff2, 2)};
  jobtree_update(&t, v, 2);
  cr_assert_eq(jobtree_signal(&t, 0), 2);
  cr_assert_eq(jobtree_signal(&t, 0), 0, "already counted");
  jobtree_release(&t);
}

Test(jobtree, orphans_started_after_the_leader_are_adopted_on_request) {
  struct jobtree t;
  jobtree_init(&t, LEADER);
  struct macos_proc v[] = {
      P(40, 1, 40, 40, 5), /* an older orphan of the same user: not ours */
      P(LEADER, 60, LEADER, LEADER, 10),
      P(120, 1, 120, 120, 12),   /* re-parented to init after the leader started */
      P(121, 120, 120, 120, 13), /* its child */
      P(130, 77, 130, 130, 14),  /* a parent that is not init: not an orphan */
  };
  cr_assert_eq(jobtree_update(&t, v, 5), 0, "no snapshot saw 120 while it was attached");
  cr_assert_eq(jobtree_adopt_orphans(&t, v, 5), 1);
  cr_assert(has(&t, 120) && !has(&t, 40) && !has(&t, 130));
  /* the next snapshot takes the adopted one's session and children */
  cr_assert_eq(jobtree_update(&t, v, 5), 2);
  cr_assert(has(&t, 121));
  cr_assert_eq(jobtree_adopt_orphans(&t, v, 5), 0, "already members");
  jobtree_release(&t);
}
