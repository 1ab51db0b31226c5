/* The one table of places a job is never given, for every OS.
 *
 * Two kinds of rows: secrets (credentials, keys, the agent's own state:
 * never granted, hidden inside a read-only grant where the OS can, and a
 * grant holding one that does not exist yet is refused) and autorun places
 * (where written code later runs outside the sandbox: never inside a
 * writable grant, whether they exist or not). Rules that are structural
 * rather than a list (hidden and bin places of the home, cordon state
 * directories by their marker files) are the functions below; what stays
 * read-only inside a writable grant is a rule of platform/grants.h (every
 * hidden entry), not rows. Each row names the OSes it applies to
 * (MANIFEST_PLATFORM_* bits). Paths are written with '/'; the Windows layer
 * turns them into '\'.
 *
 * A new forbidden path is one row in forbidden.c. The rules that read the
 * table are written once, in platform/grants.c; every OS layer goes through
 * them, and no other file lists a forbidden path. The agent's state
 * directory (sandbox_policy.state_dir) is a secret on every OS as well.
 */
#ifndef CORDON_PLATFORM_FORBIDDEN_H
#define CORDON_PLATFORM_FORBIDDEN_H

#include <stdbool.h>
#include <stddef.h>

enum forbidden_kind {
  FORBIDDEN_SECRET,  /* never granted; hidden inside a read-only grant where the OS can */
  FORBIDDEN_AUTORUN, /* never inside a writable grant, existing or not */
};

enum forbidden_base {
  FORBIDDEN_HOME, /* path is relative to the job user's home */
  FORBIDDEN_ROOT, /* path is absolute ("/etc/shadow"; on Windows on the system drive) */
};

struct forbidden_row {
  enum forbidden_kind kind;
  enum forbidden_base base;
  unsigned os; /* MANIFEST_PLATFORM_* bits of the OSes the row applies to */
  /* '/'-separated; a '*' in a FORBIDDEN_ROOT secret matches within one
   * component and is expanded by the POSIX layers (existing matches only) */
  const char *path;
};

/* The next row after prev (NULL: the first) of this kind that applies to
 * the OS being built (paths_platform_bit()), in table order; NULL at the
 * end. for (const struct forbidden_row *r = NULL; (r = forbidden_next(K, r));) */
const struct forbidden_row *forbidden_next(enum forbidden_kind kind,
                                           const struct forbidden_row *prev);

/* Does a directory holding an entry of this name count as a cordon
 * server's or agent's state directory (its key files, lock, database)? */
bool forbidden_state_marker(const char *name);
/* All of those names (static storage). */
const char *const *forbidden_state_markers(size_t *out_n);

/* Is rel ('/'-separated, relative to a home) a hidden entry of the home,
 * or inside one, or ~/bin-like (bin, .local/bin)? Those are never granted
 * unless the owner's ceiling names a hidden path that contains them. */
bool forbidden_home_hidden(const char *rel);

#endif
