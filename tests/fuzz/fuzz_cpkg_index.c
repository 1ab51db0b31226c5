/* libFuzzer target for the .cpkg index parser (proto/cpkg.c).
 *
 * The input is taken as index bytes (what follows the header, after the
 * signature verified): cpkg_index_parse must never crash, leak or read out of
 * bounds, and what it accepts must satisfy cpkg_files_check. The same bytes
 * also go through cpkg_path_check and, as a whole package, through the
 * streaming verifier, which trusts one fixed key (seed 01 00 .. 00) so a
 * seed can be a whole signed package. */
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/cpkg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct cpkg_trust *trust;
  if (!trust) {
    if (sodium_init() < 0 || cpkg_trust_new(&trust) != 0)
      abort();
    uint8_t pk[32], sk[64], seed[32] = {1};
    crypto_sign_seed_keypair(pk, sk, seed);
    if (cpkg_trust_add(trust, pk) != 0)
      abort();
  }

  struct cpkg_index *idx = NULL;
  struct cordon_diag diag;
  if (cpkg_index_parse(data, size, &idx, &diag) == 0) {
    uint64_t total = 0;
    for (size_t i = 0; i < idx->n_files; i++) {
      if (idx->files[i].offset != total)
        abort();
      total += idx->files[i].size;
    }
    if (total != idx->total || cpkg_files_check(idx->files, idx->n_files, idx->manifest_json,
                                                idx->manifest_len, NULL) != 0)
      abort();
    cpkg_index_free(idx);
  }

  (void)cpkg_path_check((const char *)data, size, &diag);

  struct cpkg_stream *s = NULL;
  if (cpkg_stream_new(trust, &s) != 0)
    abort();
  size_t off = 0;
  int err = 0;
  while (!err) {
    size_t used = 0;
    struct cpkg_event ev;
    size_t chunk = size - off > 97 ? 97 : size - off;
    err = cpkg_stream_next(s, data + off, chunk, &used, &ev, &diag);
    if (err)
      break;
    off += used;
    if (ev.type == CPKG_EVENT_NEED_MORE && off == size)
      break;
  }
  if (!err)
    (void)cpkg_stream_finish(s, &diag);
  cpkg_stream_free(s);
  return 0;
}
