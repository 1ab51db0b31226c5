/* Server key files in the state directory (docs/protocol/package.md, "Key
 * files"; the text format is proto/keyfile.h).
 *
 *   STATE/ticket.key     ticket signing key, Ed25519 seed      0600
 *   STATE/noise.key      Noise static key, X25519 private key  0600
 *   STATE/publisher.key  first publisher key, Ed25519 seed     0600
 *   STATE/publisher.pub  its public half, for agents' --trust  0644
 *
 * Secrets are returned in sodium_malloc memory; free them with
 * sodium_free(). Errors: negated errno, CORDON_E_CONFIG_INVALID (malformed
 * key file, or a secret key file that group or others can access). */
#ifndef CORDON_SERVER_KEYS_H
#define CORDON_SERVER_KEYS_H

#include <stdint.h>
#include <sys/types.h>

#include "core/error.h"
#include "proto/keyfile.h"

#define SERVER_TICKET_KEY_FILE "ticket.key"
#define SERVER_NOISE_KEY_FILE "noise.key"
#define SERVER_PUBLISHER_KEY_FILE "publisher.key"
#define SERVER_PUBLISHER_PUB_FILE "publisher.pub"

/* Create dirfd/name (O_CREAT|O_EXCL|O_NOFOLLOW) with exactly `mode`, write
 * the key file line, fsync. Never overwrites; on failure nothing is left. */
int keys_write_file(int dirfd, const char *name, enum keyfile_kind kind,
                    const uint8_t key[KEYFILE_KEY_SIZE], mode_t mode, const char *comment,
                    struct cordon_diag *diag);

/* Read a key file of `kind` into a new sodium_malloc'ed 32-byte buffer. For
 * secret kinds the file must not be accessible by group or others. */
int keys_read_file(const char *path, enum keyfile_kind kind, uint8_t **out_key,
                   struct cordon_diag *diag);

/* Load a publisher secret key file as a libsodium crypto_sign secret key
 * (64 bytes, sodium_malloc'ed). */
int keys_load_publisher_secret(const char *path, uint8_t **out_secret_key,
                               struct cordon_diag *diag);

#endif
