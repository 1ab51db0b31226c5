/* Job tickets (docs/DESIGN.md section 3, docs/protocol/ticket.md).
 *
 * A ticket is a fixed 161-byte body signed with the server's ticket key
 * (Ed25519) over "cordon-ticket-v1" 0x00 || body:
 *   u8     version (1)
 *   16     job id (6 bytes of the server's ms clock, 10 random; opaque)
 *   16     device id
 *   16     user tag: BLAKE2b-128(key none, "cordon-user-v1" 0x00 || user name)
 *   16     session id (from the welcome of the session it is sent in)
 *   32     package index hash (BLAKE2b-256 of the signed index)
 *   32     arguments hash: BLAKE2b-256 of u32be count, then u32be len || bytes each
 *   u64be  issued, ms since the Unix epoch (server clock)
 *   u64be  expires, ms since the Unix epoch (server clock)
 */
#ifndef CORDON_PROTO_TICKET_H
#define CORDON_PROTO_TICKET_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/id.h"

#define TICKET_BODY_LEN 161
#define TICKET_SIG_LEN 64

struct ticket {
  uint8_t job_id[CORDON_ID_LEN];
  uint8_t device_id[CORDON_ID_LEN];
  uint8_t user_tag[CORDON_ID_LEN];
  uint8_t session_id[CORDON_ID_LEN];
  uint8_t index_hash[32];
  uint8_t args_hash[32];
  uint64_t issued_ms;
  uint64_t expires_ms;
};

void ticket_user_tag(const char *user, uint8_t out_tag[CORDON_ID_LEN]);
void ticket_args_hash(char *const *args, size_t n_args, uint8_t out_hash[32]);
void ticket_encode(const struct ticket *t, uint8_t out_body[TICKET_BODY_LEN]);
/* Sign with an Ed25519 secret key (64 bytes). */
void ticket_sign(const uint8_t body[TICKET_BODY_LEN], const uint8_t *secret_key,
                 uint8_t out_sig[TICKET_SIG_LEN]);
/* Verify the signature first, then decode. CORDON_E_SIGNATURE_INVALID or
 * CORDON_E_PROTOCOL (wrong length or version). */
int ticket_verify(const uint8_t *body, size_t len, const uint8_t sig[TICKET_SIG_LEN],
                  const uint8_t public_key[32], struct ticket *out_ticket);

#endif
