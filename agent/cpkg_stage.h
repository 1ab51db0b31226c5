/* Verifying a .cpkg and unpacking it into a staging directory
 * (docs/DESIGN.md section 3, docs/protocol/package.md).
 *
 * The stager writes into stage_dirfd, which the caller created (0700) and
 * which must be empty. The package is fed in chunks (a file, or the network
 * later); its signature is checked before the index is parsed, and each file
 * is hashed while it is written: files are created with
 * openat(O_CREAT|O_EXCL|O_NOFOLLOW), mode 0600 until their hash matched, then
 * 0644 or 0755; directories with mkdirat, 0755. Memory use does not depend
 * on the size of the contents (one fixed read buffer; the index is bounded by
 * CPKG_MAX_INDEX).
 *
 * Unless finish() succeeded, free() (and any failure of agent_cpkg_stage())
 * removes everything created inside stage_dirfd, without following links,
 * leaving it empty. Nothing may run from the directory before success.
 *
 * Errors: CORDON_E_SIGNATURE_INVALID, CORDON_E_UNKNOWN_KEY,
 * CORDON_E_PACKAGE_CORRUPT (diag names the file), CORDON_E_PACKAGE_TOO_LARGE,
 * CORDON_E_MANIFEST_INVALID (diag names the field), -ENOTEMPTY (stage
 * directory not empty), other negated errno (I/O, disk full).
 */
#ifndef CORDON_AGENT_CPKG_STAGE_H
#define CORDON_AGENT_CPKG_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/manifest.h"
#include "proto/cpkg.h"

/* Bytes read from a package file at a time. */
#define AGENT_CPKG_READ_SIZE (256u * 1024)

/* Verify the package at cpkg_path against trust and unpack it into the empty
 * directory stage_dirfd. On success *out_manifest is the package's parsed
 * manifest (manifest_free it) and out_index_hash the BLAKE2b-256 of its
 * signed index (what tickets name). On failure stage_dirfd is left empty. */
int agent_cpkg_stage(const char *cpkg_path, const struct cpkg_trust *trust, int stage_dirfd,
                     struct manifest **out_manifest, uint8_t out_index_hash[CPKG_HASH_SIZE],
                     struct cordon_diag *diag);

/* The same from a file descriptor (read to its end; not closed). */
int agent_cpkg_stage_fd(int fd, const struct cpkg_trust *trust, int stage_dirfd,
                        struct manifest **out_manifest, uint8_t out_index_hash[CPKG_HASH_SIZE],
                        struct cordon_diag *diag);

/* Incremental form, for packages that arrive in chunks. trust must outlive
 * the stager; stage_dirfd stays the caller's. */
struct agent_cpkg_stager;

int agent_cpkg_stager_new(const struct cpkg_trust *trust, int stage_dirfd,
                          struct agent_cpkg_stager **out_stager, struct cordon_diag *diag);
/* Feed the next bytes. After an error the stager is failed for good; free it. */
int agent_cpkg_stager_feed(struct agent_cpkg_stager *st, const uint8_t *buf, size_t len,
                           struct cordon_diag *diag);
/* At end of input: 0 when every file verified and was written. */
int agent_cpkg_stager_finish(struct agent_cpkg_stager *st, struct manifest **out_manifest,
                             uint8_t out_index_hash[CPKG_HASH_SIZE], struct cordon_diag *diag);
/* Removes what was staged unless finish() succeeded. NULL-safe. */
void agent_cpkg_stager_free(struct agent_cpkg_stager *st);

/* Remove everything inside dirfd (not dirfd itself), never following links. */
int agent_cpkg_clear_dir(int dirfd);

#endif
