/* libFuzzer target for the receipt file parser (proto/receipt.c).
 *
 * The input is a receipt file: receipt_file_parse must never crash or read
 * out of bounds, and what it accepts must rebuild to the same bytes. Its
 * parts go through the receipt and statement decoders (what they accept
 * must re-encode to the same bytes) and the whole through the offline
 * check under one fixed server key (seed 02 02 .. 02). */
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/receipt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t server_pk[32];
  static int ready;
  if (!ready) {
    uint8_t sk[64], seed[32];
    memset(seed, 2, sizeof(seed));
    if (sodium_init() < 0)
      abort();
    crypto_sign_seed_keypair(server_pk, sk, seed);
    ready = 1;
  }
  struct receipt_file f;
  struct cordon_diag diag;
  if (receipt_file_parse(data, size, &f, &diag) == 0) {
    uint8_t back[RECEIPT_FILE_MAX];
    size_t n;
    if (receipt_file_build(f.receipt, f.receipt_len, f.receipt_sig, f.statement, f.statement_len,
                           f.statement_sig, back, sizeof(back), &n) != 0 ||
        n != size || memcmp(back, data, size) != 0)
      abort();
    struct receipt r;
    if (receipt_decode(f.receipt, f.receipt_len, &r, &diag) == 0) {
      uint8_t enc[RECEIPT_MAX];
      if (receipt_encode(&r, enc, sizeof(enc), &n) != 0 || n != f.receipt_len ||
          memcmp(enc, f.receipt, n) != 0)
        abort();
    }
    struct receipt_statement s;
    if (receipt_statement_decode(f.statement, f.statement_len, &s, &diag) == 0) {
      uint8_t enc[RECEIPT_STATEMENT_MAX];
      if (receipt_statement_encode(&s, enc, sizeof(enc), &n) != 0 || n != f.statement_len ||
          memcmp(enc, f.statement, n) != 0)
        abort();
    }
  }
  (void)receipt_decode(data, size, &(struct receipt){0}, &diag);
  (void)receipt_file_verify(data, size, server_pk, NULL, NULL, &diag);
  return 0;
}
