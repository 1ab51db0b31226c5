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

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "proto/keyfile.h"
#include "proto/msg.h"

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

/* ---- rotation (docs/protocol/messages.md 6.13, docs/OPERATIONS.md) ----
 *
 * `keys rotate` makes new ticket and/or publisher keys and records, in
 * STATE/keys.json (0600), every key (id: cpkg_key_id of its public half,
 * role, created, retired) and the chain of announcements: announcement n
 * (serial n) names the keys current after rotation n, signed by the keys
 * current before it (serial 0: the keys of `init`). Every key's secret is
 * STATE/keys/<role>-<id>.key (0600; a publisher key also .pub, 0644);
 * STATE/ticket.key, publisher.key and publisher.pub are kept as copies of
 * the current keys, which is all a state without keys.json has (the
 * layout `init` writes). keys.json is written last: it is the commit
 * point of a rotation. `keys retire ID` marks an older publisher key
 * retired and adds an announcement of the same keys whose `retired` lists
 * every retired publisher key. */
#define SERVER_KEYS_FILE "keys.json"
#define SERVER_KEYS_DIR "keys"
#define SERVER_KEYS_CHAIN_MAX 256 /* rotations and retirements, in all */

/* What the daemon signs and trusts with. */
struct server_keyring {
  uint8_t *ticket_sk; /* sodium_malloc'ed, crypto_sign secret key of the current ticket key */
  uint8_t ticket_pk[32];
  /* the publisher keys packages may be signed with: [0] the current one,
   * then the older ones not retired */
  uint8_t publisher_pk[MSG_PUBLISHER_KEYS_MAX][32];
  size_t n_publisher;
  struct msg_keys *chain; /* announcements, serial 1..n_chain; `retired` malloc'ed */
  size_t n_chain;
};

/* Load the keyring of state_dir into *out (zeroed first). Errors as
 * keys_read_file, CORDON_E_CONFIG_INVALID for a malformed keys.json. */
int server_keyring_load(const char *state_dir, struct server_keyring *out,
                        struct cordon_diag *diag);
/* Load again into k, in place: k->ticket_sk keeps its address (its
 * contents change), so borrowers of k see the new keys. On failure k is
 * unchanged. */
int server_keyring_reload(const char *state_dir, struct server_keyring *k,
                          struct cordon_diag *diag);
void server_keyring_release(struct server_keyring *k);

/* The current publisher secret key file's path (STATE/keys/... or
 * STATE/publisher.key) into out. */
int server_keys_publisher_path(const char *state_dir, char *out, size_t len,
                               struct cordon_diag *diag);

/* Rotate the ticket and/or publisher key (at least one). *out_serial: the
 * new announcement's serial. The ids of the new keys into new_ticket_id /
 * new_publisher_id (33 bytes each, "" for a role not rotated). */
int server_keys_rotate(const char *state_dir, bool ticket, bool publisher, uint64_t *out_serial,
                       char new_ticket_id[33], char new_publisher_id[33], struct cordon_diag *diag);
/* Retire the publisher key whose id starts with id_prefix (unique, at
 * least 4 hex digits): CORDON_E_NOT_FOUND for no such key; CORDON_E_USAGE
 * for the current key of either role, a ticket key, a retired key, a
 * prefix that is ambiguous or shorter than 4. */
int server_keys_retire(const char *state_dir, const char *id_prefix, uint64_t *out_serial,
                       char out_id[33], struct cordon_diag *diag);
/* Every key, oldest first: [{"id","role","created","retired","current"}]. */
int server_keys_list(const char *state_dir, json_t **out_list, struct cordon_diag *diag);

/* ---- a cluster's one identity (docs/SECURITY.md, "Several servers") ----
 *
 * Copy the key files of from_state into the directory to_state (which init
 * has just created, empty): ticket.key, noise.key, publisher.key,
 * publisher.pub, keys.json and STATE/keys/ when a rotation made them; each
 * with its mode (secrets 0600), regular files only, never through a link.
 * The source is loaded and checked first (a keyring and a Noise key that
 * read), the copy is loaded again afterwards and must name the same keys.
 * On failure what was copied is removed (the caller removes to_state).
 * Nothing else is copied: no database, no lock, no log. */
int server_keys_copy(const char *from_state, const char *to_state, struct cordon_diag *diag);
/* The key files server_keys_copy writes at the top of a state directory,
 * for the caller's clean-up; NULL-terminated. */
extern const char *const server_keys_top_files[];

/* ---- a cluster's rotations, through the database (docs/SECURITY.md,
 * "Several servers, one identity": "Rotations reach every server") ----
 *
 * A bundle is the key files a rotation changes: keys.json, every file it
 * names under STATE/keys/ (and a publisher key's .pub), ticket.key,
 * publisher.key and publisher.pub; never noise.key. It is sealed with
 * XChaCha20-Poly1305 under a key derived (crypto_kdf, context
 * SERVER_KEYS_SEAL_CONTEXT) from the Noise static secret every server of
 * a cluster holds and the database never sees; the associated data binds
 * the serial (keys.json's) and the Noise public key. Sealed: a 24-byte
 * random nonce, then the ciphertext and its tag. */
#define SERVER_KEYS_SEAL_CONTEXT "cordonks" /* crypto_kdf_CONTEXTBYTES */
#define SERVER_KEYS_BUNDLE_MAX (4u << 20)   /* bytes of a sealed bundle, at most */
#define SERVER_KEYS_BUNDLE_FILES_MAX (4 * SERVER_KEYS_CHAIN_MAX + 16) /* files in one */

/* The bundle of state_dir (which must have keys.json: a rotation made it)
 * sealed under noise_priv: *out_sealed (malloc'ed, free()) and the serial
 * of its keys.json. CORDON_E_CONFIG_INVALID for a malformed state;
 * CORDON_E_LIMIT above SERVER_KEYS_BUNDLE_MAX. */
int server_keys_bundle_seal(const char *state_dir, const uint8_t noise_priv[32],
                            uint8_t **out_sealed, size_t *out_len, uint64_t *out_serial,
                            struct cordon_diag *diag);
/* Open a sealed bundle that claims serial: the plaintext into *out_plain
 * (sodium_malloc'ed, sodium_free() wipes it). CORDON_E_CRYPTO for a wrong
 * key, a wrong serial, a bundle altered or cut short; CORDON_E_LIMIT above
 * SERVER_KEYS_BUNDLE_MAX. */
int server_keys_bundle_open(const uint8_t noise_priv[32], uint64_t serial, const uint8_t *sealed,
                            size_t len, uint8_t **out_plain, size_t *out_plain_len,
                            struct cordon_diag *diag);
/* Install an opened bundle of serial into state_dir, the way a rotation
 * writes: unpacked into a scratch directory STATE/.keysync-XXXXXX (0700)
 * and loaded there first; only when its keyring's chain has exactly
 * serial announcements and extends own's (the same announcements 1..n of
 * own, then more) are the files written into state_dir (STATE/keys/
 * first, then the top copies, keys.json last: the commit point; 0600,
 * 0644 for .pub; never through a link). The scratch directory goes in
 * every case. CORDON_E_CONFIG_INVALID for a malformed bundle or one whose
 * chain does not extend own's; -EALREADY when state_dir's keys.json on
 * disk is at serial or later already (own is older than the disk: a
 * rotation of this state was committed, its SIGHUP may be on its way);
 * nothing written then. */
int server_keys_bundle_install(const char *state_dir, const uint8_t *plain, size_t plain_len,
                               uint64_t serial, const struct server_keyring *own,
                               struct cordon_diag *diag);

#endif
