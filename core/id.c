#include "core/id.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>

void cordon_id_to_hex(const uint8_t id[CORDON_ID_LEN], char out[CORDON_ID_HEX_SIZE]) {
  sodium_bin2hex(out, CORDON_ID_HEX_SIZE, id, CORDON_ID_LEN);
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

int cordon_id_from_hex(const char *s, uint8_t out[CORDON_ID_LEN]) {
  if (!s || strlen(s) != CORDON_ID_HEX_LEN)
    return -EINVAL;
  uint8_t tmp[CORDON_ID_LEN];
  for (size_t i = 0; i < CORDON_ID_LEN; i++) {
    int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return -EINVAL;
    tmp[i] = (uint8_t)(hi << 4 | lo);
  }
  memcpy(out, tmp, CORDON_ID_LEN);
  return 0;
}

bool cordon_id_hex_valid(const char *s) {
  if (!s || strlen(s) != CORDON_ID_HEX_LEN)
    return false;
  for (size_t i = 0; i < CORDON_ID_HEX_LEN; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return true;
}

void cordon_id_random(uint8_t out[CORDON_ID_LEN]) {
  randombytes_buf(out, CORDON_ID_LEN);
}

void cordon_id_ordered(uint8_t out[CORDON_ID_LEN], uint64_t ms) {
  for (int i = 0; i < CORDON_ID_TIME_LEN; i++)
    out[i] = (uint8_t)(ms >> (8 * (CORDON_ID_TIME_LEN - 1 - i)));
  randombytes_buf(out + CORDON_ID_TIME_LEN, CORDON_ID_LEN - CORDON_ID_TIME_LEN);
}
