/* libFuzzer target for the relayed events' text (relay_decode,
 * server/relay.c): what any client of the cluster's PostgreSQL database
 * may send with NOTIFY cordon_events (docs/ARCHITECTURE.md, "Cluster").
 *
 * The decoder must never read past len, and must agree with the encoder:
 * an accepted payload encodes again (as the instance it names, with its
 * sequence number) to exactly one payload, byte for byte the same; a
 * refusal says why. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/relay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      abort();                                                                                     \
  } while (0)

struct again {
  const char *want;
  size_t len;
  int n;
};

static int same(void *ctx, const struct relay_payload *p) {
  struct again *a = ctx;
  a->n++;
  CHECK(p->len == a->len && memcmp(p->text, a->want, a->len) == 0);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* an exact-size copy, so that ASan sees any read past the end */
  char *text = malloc(size ? size : 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  static struct relay_msg m;
  const char *why = NULL;
  int r = relay_decode(text, size, &m, &why);
  if (r < 0) {
    CHECK(r == -EINVAL && why && why[0]);
  } else {
    CHECK(size <= RELAY_PAYLOAD_MAX);
    CHECK(relay_is_from(text, size, m.instance));
    struct again a = {.want = text, .len = size};
    uint64_t seq = m.seq;
    CHECK(relay_encode(m.instance, &seq, &m.ev, same, &a) == 0);
    CHECK(a.n == 1 && seq == m.seq + 1);
  }
  free(text);
  return 0;
}
