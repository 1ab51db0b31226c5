/* Trusted publisher keys of the agent (docs/protocol/package.md, "Key files").
 *
 * A package verifies only against a key in a struct cpkg_trust. The agent
 * fills it from:
 *   - `--trust FILE` (exec): one publisher public key file, as written by
 *     `cordon-server init` to STATE/publisher.pub;
 *   - CONFIG/trusted/: every regular file named *.pub in the agent's config
 *     directory's `trusted` subdirectory (AGENT_TRUSTED_DIR). A missing
 *     directory means no keys from there; any malformed *.pub file is an
 *     error, never silently skipped.
 * Errors: CORDON_E_CONFIG_INVALID (diag names the file), CORDON_E_LIMIT (more
 * than CPKG_MAX_TRUSTED_KEYS keys), negated errno.
 */
#ifndef CORDON_AGENT_TRUST_H
#define CORDON_AGENT_TRUST_H

#include "core/error.h"
#include "proto/cpkg.h"

#define AGENT_TRUSTED_DIR "trusted"

/* Add the key in the publisher public key file at path. */
int agent_trust_load_file(struct cpkg_trust *trust, const char *path, struct cordon_diag *diag);

/* Add the keys of every *.pub file in dir; 0 when dir does not exist. */
int agent_trust_load_dir(struct cpkg_trust *trust, const char *dir, struct cordon_diag *diag);

#endif
