/* Filesystem grants, judged once for every OS.
 *
 * The OS layer resolves paths into places (sandbox_os_place_add in
 * platform/sandbox_os.h: by identity on Linux, by real path on macOS, as
 * written on Windows); sandbox_grants_check judges each grant of a manifest
 * against the device owner's grant roots and the forbidden table
 * (platform/forbidden.h), always in this order:
 *   1. a grant of "/" or of "~" is too broad;
 *   2. the grant must resolve;
 *   3. one that resolves to "/" or to the home is too broad;
 *   4. it must lie under one of the owner's grant roots;
 *   5. a hidden or bin-like place of the home (forbidden_home_hidden) must
 *      lie under a grant root that itself names such a place;
 *   6. it must not be, or lie inside, a secret (the agent's state included);
 *   7. a writable grant must contain no secret and no autorun place; the
 *      secrets inside a read-only grant are handed to the OS layer, which
 *      hides them where it can; a grant that would hold a secret that does
 *      not exist yet is too broad (nothing could hide it if it appeared).
 * Inside a writable grant the OS layer keeps every existing hidden entry
 * read-only (Linux: grants_linux.c's bounded walk).
 * The OS layer then turns the accepted grants into its mechanism (bwrap
 * mounts, ACL grants) and may add refusals of its own.
 */
#ifndef CORDON_PLATFORM_GRANTS_H
#define CORDON_PLATFORM_GRANTS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "core/manifest.h"
#include "platform/sandbox.h"

struct sandbox_os_probe;
/* The OS layer's handle on a resolved place (Linux: an O_PATH fd and its
 * identity); NULL where places are compared by path. */
struct sandbox_os_place;

struct sandbox_place {
  char *path; /* the host path: resolved where the OS resolves it */
  struct sandbox_os_place *os;
};

/* Owned places; stable addresses (each place is its own allocation). */
struct sandbox_places {
  struct sandbox_place **v;
  size_t n;
};

/* Append a place made of path and os, taking both (freed on failure).
 * 0 or -ENOMEM. For the OS layers' sandbox_os_place_add. */
int sandbox_places_push(struct sandbox_places *l, char *path, struct sandbox_os_place *os);
void sandbox_places_release(struct sandbox_places *l);

/* Is the path inner the same as outer or below it? sep is the OS's
 * separator, fold_case compares ASCII letters case-insensitively. A root
 * ("/", "C:\") contains every path that starts with it. */
bool sandbox_path_within(const char *inner, const char *outer, char sep, bool fold_case);

struct sandbox_grant {
  const struct manifest_grant *g;
  const struct sandbox_place *place;   /* NULL for a $WORKSPACE grant */
  const struct sandbox_place **hidden; /* secrets inside this read-only grant */
  size_t n_hidden;
};

struct sandbox_grants {
  struct sandbox_grant *v; /* one per grant of the manifest, in its order */
  size_t n;
  struct sandbox_places places;  /* storage of the grants' places */
  struct sandbox_places secrets; /* storage of the hidden places */
};

/* Judge every grant of m for a job of this probe's job user (has_home:
 * the job user has a home, so that "~" means something). On refusal
 * returns CORDON_E_SCOPE_TOO_BROAD or CORDON_E_CAPABILITY_DENIED with a
 * one-line reason in diag (or a negated errno), and *out is untouched. */
int sandbox_grants_check(const struct sandbox_policy *policy, const struct sandbox_os_probe *os,
                         bool has_home, const struct manifest *m, struct sandbox_grants *out,
                         struct cordon_diag *diag);
void sandbox_grants_release(struct sandbox_grants *g);

#endif
