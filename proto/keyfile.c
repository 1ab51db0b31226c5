#include "proto/keyfile.h"

#include <sodium.h>
#include <string.h>

#define KEYFILE_B64_LEN 44 /* base64 of 32 bytes, padded */

const char *keyfile_label(enum keyfile_kind kind) {
  switch (kind) {
  case KEYFILE_PUBLISHER_PUBLIC:
    return "cordon-publisher-v1";
  case KEYFILE_PUBLISHER_SECRET:
    return "cordon-publisher-secret-v1";
  case KEYFILE_TICKET_SECRET:
    return "cordon-ticket-secret-v1";
  case KEYFILE_NOISE_SECRET:
    return "cordon-noise-secret-v1";
  case KEYFILE_TICKET_PUBLIC:
    return "cordon-ticket-v1";
  case KEYFILE_DEVICE_SIGN_SECRET:
    return "cordon-device-sign-secret-v1";
  }
  return NULL;
}

static int comment_ok(const char *c, size_t len) {
  if (len > KEYFILE_MAX_COMMENT)
    return 0;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)c[i] < 0x20 || (unsigned char)c[i] > 0x7e)
      return 0;
  return 1;
}

int keyfile_format(enum keyfile_kind kind, const uint8_t key[KEYFILE_KEY_SIZE], const char *comment,
                   char *out, size_t out_cap, size_t *out_len) {
  const char *label = keyfile_label(kind);
  size_t clen = comment ? strlen(comment) : 0;
  if (!label || !comment_ok(comment ? comment : "", clen) || out_cap < KEYFILE_MAX_BYTES)
    return CORDON_E_USAGE;
  size_t n = strlen(label);
  memcpy(out, label, n);
  out[n++] = ' ';
  /* sodium_bin2base64 writes the NUL too */
  sodium_bin2base64(out + n, out_cap - n, key, KEYFILE_KEY_SIZE, sodium_base64_VARIANT_ORIGINAL);
  n += KEYFILE_B64_LEN;
  if (clen) {
    out[n++] = ' ';
    memcpy(out + n, comment, clen);
    n += clen;
  }
  out[n++] = '\n';
  out[n] = '\0';
  *out_len = n;
  return 0;
}

int keyfile_parse(enum keyfile_kind kind, const char *text, size_t len,
                  uint8_t out_key[KEYFILE_KEY_SIZE], struct cordon_diag *diag) {
  const char *label = keyfile_label(kind);
  if (!label)
    return CORDON_E_USAGE;
  if (len > KEYFILE_MAX_BYTES)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "key file is larger than %d bytes",
                           KEYFILE_MAX_BYTES);
  /* One line: drop one final LF and an optional CR before it. */
  if (len > 0 && text[len - 1] == '\n')
    len--;
  if (len > 0 && text[len - 1] == '\r')
    len--;
  if (memchr(text, '\n', len) || memchr(text, '\0', len))
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "key file must be a single line");
  size_t llen = strlen(label);
  if (len < llen + 1 || memcmp(text, label, llen) != 0 || text[llen] != ' ') {
    /* Say what it looks like when it is another kind of cordon key. */
    for (int k = KEYFILE_PUBLISHER_PUBLIC; k <= KEYFILE_DEVICE_SIGN_SECRET; k++) {
      const char *other = keyfile_label((enum keyfile_kind)k);
      size_t olen = strlen(other);
      if (len > olen && memcmp(text, other, olen) == 0 && text[olen] == ' ')
        return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                               "key file holds a %s key, expected %s", other, label);
    }
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "key file does not start with \"%s \"",
                           label);
  }
  const char *b64 = text + llen + 1;
  size_t rest = len - llen - 1;
  const char *sp = memchr(b64, ' ', rest);
  size_t b64_len = sp ? (size_t)(sp - b64) : rest;
  if (sp && !comment_ok(sp + 1, rest - b64_len - 1))
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                           "key file comment is not printable ASCII of at most %d bytes",
                           KEYFILE_MAX_COMMENT);
  uint8_t key[KEYFILE_KEY_SIZE];
  size_t bin_len = 0;
  const char *end = NULL;
  int ok = b64_len == KEYFILE_B64_LEN &&
           sodium_base642bin(key, sizeof(key), b64, b64_len, NULL, &bin_len, &end,
                             sodium_base64_VARIANT_ORIGINAL) == 0 &&
           bin_len == KEYFILE_KEY_SIZE && end == b64 + b64_len;
  if (!ok) {
    sodium_memzero(key, sizeof(key));
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                           "key file does not hold a base64 (padded) 32-byte key");
  }
  memcpy(out_key, key, sizeof(key));
  sodium_memzero(key, sizeof(key));
  return 0;
}
