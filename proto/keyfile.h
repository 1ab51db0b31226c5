/* Key files: one line of text per key (docs/protocol/package.md, "Key files").
 *
 *   <label> SP <base64 of 32 bytes> [SP <comment>] [LF]
 *
 * The label names the kind and version of the key, so a file can never be
 * used as a key of another kind:
 *
 *   cordon-publisher-v1         publisher public key (Ed25519), for --trust
 *   cordon-publisher-secret-v1  publisher secret key (Ed25519 seed)
 *   cordon-ticket-secret-v1     server ticket key (Ed25519 seed)
 *   cordon-noise-secret-v1      server Noise static key (X25519 private key)
 *   cordon-ticket-v1            server ticket public key (Ed25519), to verify
 *                               receipts offline (docs/protocol/receipt.md)
 *   cordon-device-sign-secret-v1  a device's receipt signing key (Ed25519 seed)
 *
 * base64 is the standard alphabet with padding (44 characters). The comment is
 * printable ASCII, at most KEYFILE_MAX_COMMENT bytes, and is ignored.
 *
 * Pure text functions: reading and writing the files is the caller's job
 * (server/keys.c, agent/trust.c). Secret material passes through caller
 * buffers only; the caller keeps them in sodium_malloc memory and wipes them.
 */
#ifndef CORDON_PROTO_KEYFILE_H
#define CORDON_PROTO_KEYFILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define KEYFILE_KEY_SIZE 32
#define KEYFILE_MAX_COMMENT 200
/* Upper bound of a well-formed key file, newline included. */
#define KEYFILE_MAX_BYTES 512

enum keyfile_kind {
  KEYFILE_PUBLISHER_PUBLIC,
  KEYFILE_PUBLISHER_SECRET,
  KEYFILE_TICKET_SECRET,
  KEYFILE_NOISE_SECRET,
  KEYFILE_TICKET_PUBLIC,
  KEYFILE_DEVICE_SIGN_SECRET,
};

/* The label for kind ("cordon-publisher-v1", ...), NULL for an invalid kind. */
const char *keyfile_label(enum keyfile_kind kind);

/* Format one key file line (with a trailing newline) into out, which must hold
 * KEYFILE_MAX_BYTES. comment may be NULL. The output is NUL-terminated;
 * *out_len excludes the NUL. Errors: CORDON_E_USAGE for a bad kind or a
 * comment that is too long or not printable ASCII. */
int keyfile_format(enum keyfile_kind kind, const uint8_t key[KEYFILE_KEY_SIZE], const char *comment,
                   char *out, size_t out_cap, size_t *out_len);

/* Parse a key file of the given kind. Exactly one line; a final LF (or CRLF)
 * is optional. Errors: CORDON_E_CONFIG_INVALID with diag saying what is wrong
 * (never quoting key material). */
int keyfile_parse(enum keyfile_kind kind, const char *text, size_t len,
                  uint8_t out_key[KEYFILE_KEY_SIZE], struct cordon_diag *diag);

#endif
