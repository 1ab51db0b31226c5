#include "proto/pairing.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

void pairing_mac(const uint8_t key[PAIRING_KEY_LEN], enum pairing_role role, const uint8_t h[64],
                 uint8_t out_mac[PAIRING_MAC_LEN]) {
  static const char dom[] = "cordon-pair-v1 ";
  const char *r = role == PAIRING_ROLE_SERVER ? "server" : "agent";
  crypto_generichash_state st;
  crypto_generichash_init(&st, key, PAIRING_KEY_LEN, PAIRING_MAC_LEN);
  crypto_generichash_update(&st, (const uint8_t *)dom, sizeof(dom) - 1);
  crypto_generichash_update(&st, (const uint8_t *)r, strlen(r));
  crypto_generichash_update(&st, h, 64);
  crypto_generichash_final(&st, out_mac, PAIRING_MAC_LEN);
}

int pairing_mac_verify(const uint8_t key[PAIRING_KEY_LEN], enum pairing_role role,
                       const uint8_t h[64], const uint8_t mac[PAIRING_MAC_LEN]) {
  uint8_t want[PAIRING_MAC_LEN];
  pairing_mac(key, role, h, want);
  int r = sodium_memcmp(want, mac, PAIRING_MAC_LEN) == 0 ? 0 : CORDON_E_CRYPTO;
  sodium_memzero(want, sizeof(want));
  return r;
}

void pairing_sas(const uint8_t h[64], char out_sas[PAIRING_SAS_LEN]) {
  static const char dom[] = "cordon-sas-v1";
  uint8_t d[8];
  crypto_generichash(d, sizeof(d), h, 64, (const uint8_t *)dom, sizeof(dom) - 1);
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = (v << 8) | d[i];
  v %= 1000000000ull;
  snprintf(out_sas, PAIRING_SAS_LEN, "%03u-%03u-%03u", (unsigned)(v / 1000000),
           (unsigned)(v / 1000 % 1000), (unsigned)(v % 1000));
}

static const char code_alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";

static int code_normalise(const char *text, char out[PAIRING_CODE_CHARS + 1]) {
  size_t n = 0;
  if (!text)
    return -EINVAL;
  for (const char *p = text; *p; p++) {
    char c = *p;
    if (c == '-' || c == ' ')
      continue;
    if (c >= 'A' && c <= 'Z')
      c = (char)(c - 'A' + 'a');
    if (c == 'i' || c == 'l')
      c = '1';
    else if (c == 'o')
      c = '0';
    if (!memchr(code_alphabet, c, sizeof(code_alphabet) - 1) || n == PAIRING_CODE_CHARS)
      return -EINVAL;
    out[n++] = c;
  }
  if (n != PAIRING_CODE_CHARS)
    return -EINVAL;
  out[n] = '\0';
  return 0;
}

int pairing_code_derive(const char *code, char out_id[PAIRING_CODE_ID_CHARS + 1],
                        uint8_t out_key[PAIRING_KEY_LEN]) {
  char norm[PAIRING_CODE_CHARS + 1];
  int r = code_normalise(code, norm);
  if (r == 0) {
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, PAIRING_KEY_LEN);
    crypto_generichash_update(&h, (const uint8_t *)PAIRING_CODE_DOMAIN,
                              strlen(PAIRING_CODE_DOMAIN));
    crypto_generichash_update(&h, (const uint8_t *)norm, PAIRING_CODE_CHARS);
    crypto_generichash_final(&h, out_key, PAIRING_KEY_LEN);
    sodium_memzero(&h, sizeof(h));
    memcpy(out_id, norm, PAIRING_CODE_ID_CHARS);
    out_id[PAIRING_CODE_ID_CHARS] = '\0';
  }
  sodium_memzero(norm, sizeof(norm));
  return r;
}
