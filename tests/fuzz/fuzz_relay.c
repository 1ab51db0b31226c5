/* libFuzzer target for the relayed events' text (relay_decode,
 * server/relay.c): what any client of the cluster's PostgreSQL database
 * may send with NOTIFY cordon_events (docs/ARCHITECTURE.md, "Cluster").
 *
 * The input is a payload's body: the harness appends its MAC under a
 * fixed key (what a server of the cluster would send), so that the
 * fields are reached. The decoder must never read past len, and must
 * agree with the encoder: an accepted payload encodes again (as the
 * instance it names, with its sequence number) to exactly one payload,
 * byte for byte the same; a refusal says why. */
#include <errno.h>
#include <sodium.h>
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
  static const uint8_t key[RELAY_KEY_LEN] = "the fuzzer's relay key, 32 byte";
  if (size > RELAY_PAYLOAD_MAX)
    return 0;
  /* an exact-size copy, so that ASan sees any read past the end */
  size_t len = size + 1 + 2 * RELAY_MAC_LEN;
  char *text = malloc(len + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  uint8_t mac[RELAY_MAC_LEN];
  crypto_generichash(mac, sizeof(mac), data, size, key, sizeof(key));
  text[size] = ' ';
  sodium_bin2hex(text + size + 1, 2 * RELAY_MAC_LEN + 1, mac, sizeof(mac));
  size = len;
  static struct relay_msg m;
  const char *why = NULL;
  int r = relay_decode(key, text, size, &m, &why);
  if (r < 0) {
    CHECK(r == -EINVAL && why && why[0]);
  } else {
    CHECK(size <= RELAY_PAYLOAD_MAX);
    CHECK(relay_is_from(text, size, m.instance));
    struct again a = {.want = text, .len = size};
    uint64_t seq = m.seq;
    CHECK(relay_encode(key, m.instance, &seq, &m.ev, same, &a) == 0);
    CHECK(a.n == 1 && seq == m.seq + 1);
  }
  free(text);
  return 0;
}
