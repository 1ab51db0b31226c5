/* Building a signed executor package from a source directory
 * (`cordon-server pack`, docs/protocol/package.md).
 *
 * The output is deterministic: files sorted in package order
 * (cpkg_path_cmp), no timestamps or owners, Ed25519 signatures are
 * deterministic. Only regular files and directories are packed; empty
 * directories are not represented. A file's mode is 0755 when any execute
 * bit is set, else 0644. The manifest is validated with manifest_load_file,
 * as `cordon-agent exec DIR` does.
 *
 * The package is written to a temporary file next to out_path, fsynced and
 * renamed over out_path; on failure nothing is left behind.
 *
 * Errors: CORDON_E_MANIFEST_INVALID (diag names the field),
 * CORDON_E_USAGE (a symlink, device, fifo or socket, named in diag; a file
 * that changed while being packed), CORDON_E_PACKAGE_CORRUPT (a path breaks
 * a rule), CORDON_E_PACKAGE_TOO_LARGE, negated errno. */
#ifndef CORDON_SERVER_PACK_H
#define CORDON_SERVER_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "proto/cpkg.h"

struct pack_summary {
  size_t n_files;
  uint64_t total; /* bytes of file contents */
  uint64_t size;  /* bytes of the package */
  uint8_t index_hash[CPKG_HASH_SIZE];
  uint8_t key_id[CORDON_ID_LEN];
};

/* secret_key: libsodium crypto_sign secret key (64 bytes). out_summary may be NULL. */
int pack_dir(const char *src_dir, const char *out_path, const uint8_t *secret_key,
             struct pack_summary *out_summary, struct cordon_diag *diag);

#endif
