#include "proto/pairing.h"

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
