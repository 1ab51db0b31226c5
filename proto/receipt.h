/* Device-signed receipts (docs/protocol/receipt.md).
 *
 * A receipt is a fixed byte layout (big-endian integers, length-prefixed
 * strings) that starts with the domain string "cordon-receipt-v1" 0x00 and
 * says what one device reports about one job: the ids, the ticket it ran
 * under (user tag, package index hash, arguments hash, ticket hash), start
 * and end times, how it ended, BLAKE2b-256 of stdout and stderr as captured,
 * and the sandbox fields. The device signs the encoding with its Ed25519
 * signing key. The server binds that key to the device and its user in a
 * statement ("cordon-device-key-v1" 0x00 ...) signed with its ticket key. A
 * receipt file holds both, each with its signature, after the magic
 * "cordon-receipt-file-v1" 0x00.
 *
 * Everything here is pure: no I/O, no allocation (a parsed file points into
 * the caller's buffer). Lengths are checked against the caps below before
 * anything is read. Errors: CORDON_E_PROTOCOL for bytes that are not a
 * well-formed receipt, statement or file (CORDON_E_LIMIT for a length above
 * a cap), CORDON_E_SIGNATURE_INVALID for a signature that does not verify or
 * fields that do not agree, -EINVAL for a struct that cannot be encoded,
 * -ENOBUFS for a buffer that is too small. diag (may be NULL) names what
 * failed.
 */
#ifndef CORDON_PROTO_RECEIPT_H
#define CORDON_PROTO_RECEIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/id.h"
#include "proto/msg.h"

#define RECEIPT_DOMAIN "cordon-receipt-v1"
#define RECEIPT_STATEMENT_DOMAIN "cordon-device-key-v1"
#define RECEIPT_FILE_MAGIC "cordon-receipt-file-v1"
#define RECEIPT_VERSION 1
#define RECEIPT_HASH_LEN 32
#define RECEIPT_KEY_LEN 32
#define RECEIPT_SIG_LEN 64
#define RECEIPT_SECRET_LEN 64  /* libsodium crypto_sign secret key */
#define RECEIPT_TICKET_LEN 161 /* a version-1 ticket body (proto/ticket.h) */

/* The fixed part, then three strings of at most these many bytes. */
#define RECEIPT_FIXED_LEN 263
#define RECEIPT_MECHANISM_MAX MSG_MECHANISM_MAX
#define RECEIPT_CODE_MAX MSG_CODE_MAX
#define RECEIPT_MAX (RECEIPT_FIXED_LEN + 3 + RECEIPT_MECHANISM_MAX + 2 * RECEIPT_CODE_MAX)
#define RECEIPT_USER_MAX MSG_NAME_MAX
#define RECEIPT_STATEMENT_MAX                                                                      \
  (sizeof(RECEIPT_STATEMENT_DOMAIN) + 1 + CORDON_ID_LEN + 1 + RECEIPT_USER_MAX + RECEIPT_KEY_LEN)
#define RECEIPT_FILE_MAX                                                                           \
  (sizeof(RECEIPT_FILE_MAGIC) + 2 + RECEIPT_MAX + RECEIPT_SIG_LEN + 2 + RECEIPT_STATEMENT_MAX +    \
   RECEIPT_SIG_LEN)

enum receipt_end {
  RECEIPT_END_EXITED = 0,    /* status is the exit code */
  RECEIPT_END_SIGNALLED = 1, /* status is the signal number */
  RECEIPT_END_NOT_RUN = 2,   /* refused or lost before it started; status 0 */
};

#define RECEIPT_LEVEL_NULL 0xff

struct receipt {
  uint8_t job_id[CORDON_ID_LEN];
  uint8_t device_id[CORDON_ID_LEN];
  bool bound; /* the next four come from the job's ticket; all zero if not */
  uint8_t user_tag[CORDON_ID_LEN];
  uint8_t index_hash[RECEIPT_HASH_LEN];
  uint8_t args_hash[RECEIPT_HASH_LEN];
  uint8_t ticket_hash[RECEIPT_HASH_LEN];
  uint64_t started_ms; /* device clock, ms since the epoch; 0 = never started */
  uint64_t ended_ms;
  enum receipt_end end;
  int64_t status;
  uint8_t stdout_hash[RECEIPT_HASH_LEN];
  bool stdout_truncated;
  uint8_t stderr_hash[RECEIPT_HASH_LEN];
  bool stderr_truncated;
  bool timed_out;
  uint8_t requested; /* enum msg_level */
  uint8_t level;     /* enum msg_level, or RECEIPT_LEVEL_NULL */
  uint8_t limits[5]; /* enum msg_enforce: memory, processes, cpu, time, disk */
  char mechanism[RECEIPT_MECHANISM_MAX + 1];   /* "" = null */
  char downgrade_reason[RECEIPT_CODE_MAX + 1]; /* "" = null */
  char error_code[RECEIPT_CODE_MAX + 1];       /* "" = null (the job ran to its end) */
};

/* BLAKE2b-256 of bytes (unkeyed): output hashes and the ticket hash. */
void receipt_hash(const uint8_t *data, size_t len, uint8_t out[RECEIPT_HASH_LEN]);

/* The receipt of a result message: ids, times, end, output hashes and
 * sandbox from m (m->started_ms, m->ended_ms; 0 when absent); bound to the
 * ticket when ticket is a version-1 ticket body (RECEIPT_TICKET_LEN bytes,
 * first byte 1): user tag, index hash and arguments hash are read from it
 * (not verified here) and the ticket hash is receipt_hash(ticket). ticket
 * NULL or of another shape: unbound. Errors: -EINVAL for a string field
 * longer than its cap. */
int receipt_from_result(const struct msg_result *m, const uint8_t *ticket, size_t ticket_len,
                        struct receipt *out_receipt);

/* Encode r into out (cap >= RECEIPT_MAX is always enough). -EINVAL when a
 * field is out of range (enum, string cap or charset, an unbound receipt
 * with non-zero ticket fields, a NOT_RUN end with a status). */
int receipt_encode(const struct receipt *r, uint8_t *out, size_t cap, size_t *out_len);
/* Strict decode: exactly the bytes receipt_encode would give for the
 * result, nothing after them. */
int receipt_decode(const uint8_t *buf, size_t len, struct receipt *out_receipt,
                   struct cordon_diag *diag);

/* Sign an encoded receipt with the device's secret key (64 bytes). */
void receipt_sign(const uint8_t *buf, size_t len, const uint8_t secret_key[RECEIPT_SECRET_LEN],
                  uint8_t out_sig[RECEIPT_SIG_LEN]);
/* Encode and sign the receipt of m into m->receipt_sig (has_receipt_sig). */
int receipt_sign_result(struct msg_result *m, const uint8_t *ticket, size_t ticket_len,
                        const uint8_t secret_key[RECEIPT_SECRET_LEN]);
/* Check m->receipt_sig against the receipt of m (with the ticket the
 * server issued, or NULL when m carries no ticket_hash) under the device's
 * public key. On success out_buf (cap >= RECEIPT_MAX) holds the encoded
 * receipt. CORDON_E_SIGNATURE_INVALID when there is no signature, it does
 * not verify, or m's ticket_hash is not the issued ticket's. */
int receipt_verify_result(const struct msg_result *m, const uint8_t *ticket, size_t ticket_len,
                          const uint8_t public_key[RECEIPT_KEY_LEN], uint8_t *out_buf, size_t cap,
                          size_t *out_len, struct cordon_diag *diag);
/* receipt_verify_result in two steps, so that the signature (the costly
 * part) can be checked elsewhere: every check but the signature, with the
 * encoded receipt in out_buf; then the signature over it. */
int receipt_of_result(const struct msg_result *m, const uint8_t *ticket, size_t ticket_len,
                      uint8_t *out_buf, size_t cap, size_t *out_len, struct cordon_diag *diag);
int receipt_check_sig(const uint8_t *buf, size_t len, const uint8_t sig[RECEIPT_SIG_LEN],
                      const uint8_t public_key[RECEIPT_KEY_LEN], struct cordon_diag *diag);

/* The server's statement binding a device signing key to a device and its
 * user (by name). */
struct receipt_statement {
  uint8_t device_id[CORDON_ID_LEN];
  char user[RECEIPT_USER_MAX + 1];
  uint8_t device_key[RECEIPT_KEY_LEN];
};

int receipt_statement_encode(const struct receipt_statement *s, uint8_t *out, size_t cap,
                             size_t *out_len);
int receipt_statement_decode(const uint8_t *buf, size_t len, struct receipt_statement *out,
                             struct cordon_diag *diag);

/* A receipt file: the parts point into the parsed buffer. */
struct receipt_file {
  const uint8_t *receipt;
  size_t receipt_len;
  const uint8_t *receipt_sig;
  const uint8_t *statement;
  size_t statement_len;
  const uint8_t *statement_sig;
};

/* Assemble a file: receipt and its signature, statement and its signature.
 * cap >= RECEIPT_FILE_MAX is always enough. */
int receipt_file_build(const uint8_t *receipt, size_t receipt_len,
                       const uint8_t receipt_sig[RECEIPT_SIG_LEN], const uint8_t *statement,
                       size_t statement_len, const uint8_t statement_sig[RECEIPT_SIG_LEN],
                       uint8_t *out, size_t cap, size_t *out_len);
/* Split a file into its parts (structure only; nothing is verified). */
int receipt_file_parse(const uint8_t *buf, size_t len, struct receipt_file *out_file,
                       struct cordon_diag *diag);

/* The offline check of docs/protocol/receipt.md: parse; the statement's
 * signature under server_key (the server's ticket public key); decode it;
 * the receipt's signature under the statement's device key; decode it; the
 * receipt's device id is the statement's, and a bound receipt's user tag is
 * that of the statement's user. On success the decoded parts are written
 * (either may be NULL). diag names the step that failed. */
int receipt_file_verify(const uint8_t *buf, size_t len, const uint8_t server_key[RECEIPT_KEY_LEN],
                        struct receipt *out_receipt, struct receipt_statement *out_statement,
                        struct cordon_diag *diag);

#endif
