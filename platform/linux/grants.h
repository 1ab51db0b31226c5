/* Filesystem grants for an isolated job: each grant is opened once (as the
 * job user), checked by identity (device, inode) against the grant roots
 * and the forbidden set, and that same fd is what bwrap mounts.
 */
#ifndef CORDON_PLATFORM_LINUX_GRANTS_H
#define CORDON_PLATFORM_LINUX_GRANTS_H

#include <stdbool.h>
#include <sys/types.h>

#include "platform/linux/bwrap.h"
#include "platform/sandbox.h"

struct grant_user {
  const char *home;
  bool switch_fsuid; /* open as uid/gid below (root agent) */
  uid_t uid;
  gid_t gid;
};

struct grant_set {
  struct bwrap_mount *mounts;
  size_t n_mounts;
  char **dests; /* owned strings behind mounts[].dest */
  int *fds;     /* owned fds behind mounts[].fd */
  size_t n_fds;
};

/* Resolve and check every grant of m. On refusal returns
 * CORDON_E_SCOPE_TOO_BROAD or CORDON_E_CAPABILITY_DENIED with a one-line
 * reason in diag, and nothing stays open. */
int grants_resolve(const struct sandbox_policy *policy, const struct grant_user *user,
                   const struct manifest *m, struct grant_set *out, struct cordon_diag *diag);
void grants_release(struct grant_set *g);

/* Forbidden paths inside the base view that exist on this host (for the
 * bwrap host facts). Static storage, rebuilt on each call. */
void grants_base_blinds(const char *const **out_files, size_t *out_n_files,
                        const char *const **out_dirs, size_t *out_n_dirs);

#endif
