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

/* The quarantine walk holds one open directory per level below the grant
 * root; deeper than this, a directory is moved aside whole, unwalked. */
#define GRANTS_QUARANTINE_MAX_DEPTH 512
/* At most this many moved entries are named one by one; the rest are
 * counted. A named path is cut to GRANTS_QUARANTINE_NAME_CHARS bytes. */
#define GRANTS_QUARANTINE_MAX_NAMED 32
#define GRANTS_QUARANTINE_NAME_CHARS 400

/* What grants_quarantine_new did, bounded in size whatever the job made. */
struct grants_quarantine_report {
  size_t n_hidden;   /* new hidden entries moved aside */
  size_t n_links;    /* new outward symlinks moved aside */
  size_t n_unwalked; /* directories moved aside whole without being walked */
  size_t n_failed;   /* entries that could be neither checked nor moved aside */
  bool names_lost;   /* no memory to name some of them (they were moved) */
  struct strv named; /* the first GRANTS_QUARANTINE_MAX_NAMED, one line each
                        ("new hidden entry PATH moved aside as NAME", ...) */
};
void grants_quarantine_report_init(struct grants_quarantine_report *rep);
void grants_quarantine_report_release(struct grants_quarantine_report *rep);

/* After the whole job tree is dead: walk each writable grant again by fd
 * (openat/fdopendir/fstatat/renameat2, O_NOFOLLOW, no symlink followed,
 * no path buffer, an explicit stack of at most GRANTS_QUARANTINE_MAX_DEPTH
 * levels) and rename aside, to NAME<suffix> with the suffix
 * .cordon-quarantined-<job_id>-<random nonce> (RENAME_NOREPLACE):
 *  - every hidden entry that was not a hidden entry there before the job
 *    (by identity), as a whole, without looking inside;
 *  - every symlink that was not there before the job (identity and ctime)
 *    and points outward (grants_link_outward);
 *  - every directory the walk cannot finish (deeper than the bound, or it
 *    cannot be opened or read, or an entry in it can be neither checked
 *    nor moved), as a whole, unwalked.
 * No count of entries stops the walk. What cannot be moved is counted in
 * n_failed (the grant is then returned as it is). Returns 0, or a negated
 * errno when no grant could be walked at all (-ENOMEM, -EIO). */
int grants_quarantine_new(const struct grant_set *g, const char *job_id,
                          struct grants_quarantine_report *rep);

/* Is the symlink NAME in directory dfd (depth levels below the grant
 * root) outward? Yes if its target is empty, absolute or longer than
 * PATH_MAX; if its lexical resolution from dfd (".." counted against
 * depth) leaves the grant root or names a hidden component; or if
 * resolving it from dfd meets a symlink, another file system, or fails
 * otherwise than for a missing component (openat2 RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_XDEV, a trailing symlink included). */
bool grants_link_outward(int dfd, const char *name, size_t depth);

/* explain's "filesystem" object: the rules, what is kept read-only and
 * what is blinded for this plan. Caller owns; NULL on allocation failure. */
json_t *grants_explain_json(const struct grant_set *g);

/* Forbidden paths inside the base view that exist on this host (for the
 * bwrap host facts). Static storage, rebuilt on each call. */
void grants_base_blinds(const char *const **out_files, size_t *out_n_files,
                        const char *const **out_dirs, size_t *out_n_dirs);

#endif
