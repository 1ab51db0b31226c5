#include "platform/macos/jobtree.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

void jobtree_init(struct jobtree *t, pid_t leader) {
  memset(t, 0, sizeof(*t));
  t->leader = leader;
}

void jobtree_release(struct jobtree *t) {
  if (!t)
    return;
  free(t->m);
  memset(t, 0, sizeof(*t));
}

static struct jobtree_member *find(struct jobtree *t, pid_t pid, uint64_t start) {
  for (size_t i = 0; i < t->n; i++)
    if (t->m[i].pid == pid && t->m[i].start == start)
      return &t->m[i];
  return NULL;
}

static bool known_sid(const struct jobtree *t, pid_t sid) {
  if (sid == t->leader)
    return true;
  for (size_t i = 0; i < t->n; i++)
    if (t->m[i].sid == sid && t->m[i].sid > 1)
      return true;
  return false;
}

static void remember(struct jobtree *t, const struct macos_proc *p) {
  struct jobtree_member *e = find(t, p->pid, p->start);
  if (!e) {
    if (t->n == t->cap) {
      size_t ncap = t->cap ? t->cap * 2 : 16;
      struct jobtree_member *nm = realloc(t->m, ncap * sizeof(*nm));
      if (!nm) {
        t->err = -ENOMEM;
        return;
      }
      t->m = nm;
      t->cap = ncap;
    }
    e = &t->m[t->n++];
    memset(e, 0, sizeof(*e));
    e->pid = p->pid;
    e->start = p->start;
  }
  e->pgid = p->pgid; /* a member may move between groups of its session */
  e->sid = p->sid;
  e->alive = true;
}

size_t jobtree_update(struct jobtree *t, const struct macos_proc *v, size_t n) {
  for (size_t i = 0; i < t->n; i++)
    t->m[i].alive = false;
  /* A remembered session counts only while some process still holds it
   * (an empty session's id may be handed out again) and while its id is
   * not the pid of a process that is not the job's (a recycled id). */
  for (size_t i = 0; i < t->n; i++) {
    pid_t sid = t->m[i].sid;
    bool held = false, foreign = false;
    for (size_t k = 0; k < n; k++) {
      held |= v[k].sid == sid;
      foreign |= v[k].pid == sid && !find(t, v[k].pid, v[k].start);
    }
    if (!held || foreign)
      t->m[i].sid = 0;
  }
  for (size_t i = 0; i < n && !t->leader_seen; i++)
    if (v[i].pid == t->leader) {
      t->leader_start = v[i].start;
      t->leader_seen = true;
    }
  bool *in = calloc(n ? n : 1, sizeof(bool));
  if (!in) {
    t->err = -ENOMEM;
    return 0;
  }
  bool changed = true;
  for (int round = 0; changed && round < 4096; round++) {
    changed = false;
    for (size_t i = 0; i < n; i++) {
      if (in[i] || v[i].pid <= 1)
        continue;
      const struct macos_proc *p = &v[i];
      bool member = p->pid == t->leader || p->pgid == t->leader || known_sid(t, p->sid) ||
                    find(t, p->pid, p->start) != NULL;
      for (size_t k = 0; k < n && !member; k++)
        member = in[k] && v[k].pid == p->ppid;
      if (member) {
        in[i] = true;
        changed = true;
        remember(t, p);
      }
    }
  }
  free(in);
  size_t live = 0;
  for (size_t i = 0; i < t->n; i++)
    if (t->m[i].alive && t->m[i].pid != t->leader)
      live++;
  return live;
}

size_t jobtree_adopt_orphans(struct jobtree *t, const struct macos_proc *v, size_t n) {
  size_t added = 0;
  if (!t->leader_seen)
    return 0;
  for (size_t i = 0; i < n; i++) {
    const struct macos_proc *p = &v[i];
    if (p->pid <= 1 || p->ppid != 1 || p->start < t->leader_start || find(t, p->pid, p->start))
      continue;
    remember(t, p);
    added++;
  }
  return added;
}

size_t jobtree_escaped(const struct jobtree *t) {
  size_t k = 0;
  for (size_t i = 0; i < t->n; i++)
    if (t->m[i].pid != t->leader && t->m[i].pgid != t->leader)
      k++;
  return k;
}

size_t jobtree_signal(struct jobtree *t, int sig) {
  size_t fresh = 0;
  if (t->leader > 1)
    (void)kill(-t->leader, sig);
  for (size_t i = 0; i < t->n; i++) {
    struct jobtree_member *e = &t->m[i];
    if (!e->alive || e->pid <= 1 || e->pid == t->leader)
      continue;
    if (e->pgid != t->leader)
      (void)kill(e->pid, sig);
    if (!e->signalled) {
      e->signalled = true;
      fresh++;
    }
  }
  return fresh;
}
