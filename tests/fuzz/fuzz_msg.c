/* libFuzzer target for the session message decoder.
 *
 * Arbitrary bytes go to msg_decode(). Whatever decodes must re-encode (both
 * encoders, identical bytes, never longer than the input, since encoding is
 * canonical and shortest), decode again, and re-encode to the same bytes:
 * decode -> encode is a fixed point after one step. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct msg m, m2;
  uint8_t *a, *b, *c;
  size_t alen, blen, clen;

  int rc = msg_decode(data, size, &m, NULL);
  if (rc != 0) {
    if (rc != CORDON_E_PROTOCOL && rc != CORDON_E_LIMIT)
      abort();
    return 0;
  }
  if (!msg_type_name(m.type))
    abort();
  if (msg_encode_alloc(&m, &a, &alen, NULL) != 0)
    abort();
  if (alen > size)
    abort();
  c = malloc(alen);
  if (!c || msg_encode(&m, c, alen, &clen, NULL) != 0 || clen != alen || memcmp(a, c, alen))
    abort();
  if (alen > 0 && msg_encode(&m, c, alen - 1, &clen, NULL) != -ENOBUFS)
    abort();
  if (msg_decode(a, alen, &m2, NULL) != 0)
    abort();
  if (m2.type != m.type)
    abort();
  if (msg_encode_alloc(&m2, &b, &blen, NULL) != 0)
    abort();
  if (blen != alen || memcmp(a, b, alen) != 0)
    abort();
  msg_release(&m);
  msg_release(&m2);
  free(a);
  free(b);
  free(c);
  return 0;
}
