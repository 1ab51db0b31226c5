/* Pieces every platform layer shares (OS-neutral). */
#ifndef CORDON_PLATFORM_SANDBOX_COMMON_H
#define CORDON_PLATFORM_SANDBOX_COMMON_H

#include <jansson.h>

#include "platform/strv.h"
#include "core/manifest.h"
#include "core/result.h"

/* explain's "limits" object: each limit's value, unit and what enforces it
 * (mechs gives the lim_* fields). NULL on allocation failure. */
json_t *sandbox_limits_json(const struct manifest *m, const struct job_result *mechs);

/* argv and environment for a job started directly (no bwrap): the entry
 * (a relative entry[0] is a file of the package), the dispatch arguments,
 * and PATH, HOME, USER, LOGNAME, PACKAGE, WORKSPACE, TMPDIR, the manifest's
 * env and LANG=C.UTF-8 unless the manifest sets LANG. Errors land in the
 * strv's sticky err. */
void sandbox_direct_argv_env(const struct manifest *m, const struct manifest_argv *entry,
                             char *const *args, size_t n_args, const char *package_path,
                             const char *workspace, const char *path_env, const char *home,
                             const char *user, struct strv *argv, struct strv *envp);

#endif
