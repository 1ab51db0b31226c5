/* Filesystem grants on Linux: places are O_PATH fds compared by identity
 * (device, inode; sandbox_os_place_* in grants_linux.c), each grant opened
 * once as the job user, and the same fd is what bwrap mounts. The rules
 * are platform/grants.c's; this turns the judged grants into bwrap mounts.
 */
#ifndef CORDON_PLATFORM_LINUX_GRANTS_LINUX_H
#define CORDON_PLATFORM_LINUX_GRANTS_LINUX_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "platform/grants.h"
#include "platform/linux/bwrap.h"

/* The walk of each directory grant (by fd, no symlink followed) is bounded
 * per job; above either bound the grant is refused (scope_too_broad). */
#define GRANTS_WALK_MAX_ENTRIES 50000
#define GRANTS_WALK_MAX_PROTECTED 1024

struct grant_set {
  struct bwrap_mount *mounts;
  size_t n_mounts;
  char **dests; /* owned strings behind mounts[].dest */
  int *fds;     /* owned fds behind mounts[].fd */
  size_t n_fds;
  struct strv read_only; /* where the job sees what is kept read-only (explain) */
  struct strv blinded;   /* FIFOs, sockets and state directories blinded */
  size_t *rw_grants;     /* indexes in mounts of the writable grants */
  size_t n_rw_grants;
  struct grants_known *known; /* hidden entries inside them before the job */
};

/* The bwrap mounts of judged grants, grant by grant: its fd (a duplicate)
 * on its host path, then the blinds of the secrets inside it (read-only
 * grants), then what the bounded walk of it found: inside a writable
 * grant every hidden entry (.git, .envrc, ...) and every entry that is a
 * hidden entry of the home (by identity) bound read-only over itself, the
 * directories between the grant and it bound onto themselves (renaming
 * them fails with EBUSY); in every grant FIFOs and sockets blinded with
 * /dev/null and cordon state directories with an empty tmpfs. A
 * grant that is not a directory or regular file is refused
 * (CORDON_E_CAPABILITY_DENIED, reason in diag). */
int grants_linux_mounts(const struct sandbox_grants *judged, const char *home,
                        struct grant_set *out, struct cordon_diag *diag);
void grants_release(struct grant_set *g);

/* After the whole job tree is dead: walk each writable grant again (same
 * bounds, by fd, no symlink followed) and rename every hidden entry that
 * was not there before the job to NAME.cordon-quarantined-<job_id>, so
 * that a new .git, .envrc or .venv the job made is not run by the owner's
 * tools. Appends each renamed host path to moved; *out_incomplete says a
 * grant had grown past the bound and was not checked to its end. Returns
 * how many were moved, or a negated errno. */
int grants_quarantine_new(const struct grant_set *g, const char *job_id, struct strv *moved,
                          bool *out_incomplete);

/* explain's "filesystem" object: the rules, what is kept read-only and
 * what is blinded for this plan. Caller owns; NULL on allocation failure. */
json_t *grants_explain_json(const struct grant_set *g);

/* Forbidden paths inside the base view that exist on this host (for the
 * bwrap host facts). Static storage, rebuilt on each call. */
void grants_base_blinds(const char *const **out_files, size_t *out_n_files,
                        const char *const **out_dirs, size_t *out_n_dirs);

#endif
