/* Pairing proofs and the short authentication string (docs/protocol/pairing.md).
 *
 * A pairing code is shown once by `cordon-server pair-code`. Both sides
 * derive from it a 32-byte proof key; the server stores only that key
 * (looked up by the code's public id). Each side proves knowledge of the key
 * bound to the Noise handshake hash h of this connection:
 *   mac = BLAKE2b-256(key = proof key, "cordon-pair-v1 " || role || h)
 * with role "server" or "agent"; the server proves first. The short
 * authentication string both sides print is derived from h alone.
 */
#ifndef CORDON_PROTO_PAIRING_H
#define CORDON_PROTO_PAIRING_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define PAIRING_KEY_LEN 32
#define PAIRING_MAC_LEN 32
#define PAIRING_SAS_LEN 16 /* "123-456-789" plus NUL fits */

enum pairing_role { PAIRING_ROLE_SERVER = 0, PAIRING_ROLE_AGENT = 1 };

/* Pairing codes: 40 characters of Crockford-like base32 (25 random bytes),
 * shown in groups of five. Typed text is normalised: dashes and spaces
 * dropped, letters lowered, i/l read as 1 and o as 0. */
#define PAIRING_CODE_CHARS 40
#define PAIRING_CODE_ID_CHARS 10 /* the public lookup part: the first 10 */
#define PAIRING_CODE_DOMAIN "cordon-pair-code-v1"

/* Normalise code text, then id = its first 10 characters and key =
 * BLAKE2b-256(PAIRING_CODE_DOMAIN || all 40 characters). -EINVAL when the
 * text is not 40 alphabet characters. */
int pairing_code_derive(const char *code, char out_id[PAIRING_CODE_ID_CHARS + 1],
                        uint8_t out_key[PAIRING_KEY_LEN]);

/* The proof MAC of role over handshake hash h (64 bytes). */
void pairing_mac(const uint8_t key[PAIRING_KEY_LEN], enum pairing_role role, const uint8_t h[64],
                 uint8_t out_mac[PAIRING_MAC_LEN]);
/* Constant-time check; 0 or CORDON_E_CRYPTO. */
int pairing_mac_verify(const uint8_t key[PAIRING_KEY_LEN], enum pairing_role role,
                       const uint8_t h[64], const uint8_t mac[PAIRING_MAC_LEN]);
/* Nine decimal digits in three groups, from h. */
void pairing_sas(const uint8_t h[64], char out_sas[PAIRING_SAS_LEN]);

#endif
