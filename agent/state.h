/* What the agent keeps once paired (docs/DESIGN.md section 7), in its config dir:
 *   identity.key   the agent's Noise static key (X25519), 0600
 *   pairing.json   server address, the server's pinned Noise key, device
 *                  id, user, device name, the server's ticket key; 0600
 *   trusted/server-publisher.pub   the server's publisher key (--trust format)
 *   signing.key    the device's receipt signing key (Ed25519 seed), 0600,
 *                  made at pairing (or at the first `run` of a device paired
 *                  before receipts); its public half goes in every hello
 * Files are written to a temporary name, fsynced and renamed. */
#ifndef CORDON_AGENT_STATE_H
#define CORDON_AGENT_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "core/id.h"

#define AGENT_IDENTITY_FILE "identity.key"
#define AGENT_PAIRING_FILE "pairing.json"
#define AGENT_SERVER_PUBLISHER_FILE "server-publisher.pub"
#define AGENT_SIGNING_FILE "signing.key"

struct agent_pairing {
  char host[256];
  int port;
  uint8_t server_key[32];
  uint8_t device_id[CORDON_ID_LEN];
  char user[129];
  char name[129];
  uint8_t ticket_key[32];
  /* the receipt signing key, once agent_signing_key_load filled it */
  const uint8_t *sign_sk; /* 64 bytes (libsodium form), sodium_malloc'ed */
  uint8_t sign_pk[32];
};

/* -ENOENT when the agent is not paired. */
int agent_pairing_load(const char *dir, struct agent_pairing *out_pairing,
                       struct cordon_diag *diag);
/* The identity key, sodium_malloc'ed (sodium_free it). */
int agent_identity_load(const char *dir, uint8_t **out_priv, struct cordon_diag *diag);
/* Store a completed pairing: identity, pairing record, publisher keys.
 * Refuses when already paired (-EEXIST). */
int agent_pairing_save(const char *dir, const uint8_t *identity_priv, const struct agent_pairing *p,
                       const uint8_t (*publisher_keys)[32], size_t n_publisher_keys,
                       struct cordon_diag *diag);
/* Load dir/signing.key into p->sign_sk (sodium_malloc'ed, 64 bytes; the
 * caller sodium_free()s it) and p->sign_pk; when the file is missing, make
 * a new key and write it (0600) first. */
int agent_signing_key_load(const char *dir, struct agent_pairing *p, struct cordon_diag *diag);

/* Forget the pairing (identity, record, the server's publisher keys, the
 * cluster's addresses: agent/servers.h). */
int agent_pairing_remove(const char *dir, struct cordon_diag *diag);

#endif
