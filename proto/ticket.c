#include "proto/ticket.h"

#include <sodium.h>
#include <string.h>

static const char domain[] = "cordon-ticket-v1"; /* with its NUL */

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8)
    p[i] = (uint8_t)v;
}

static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = (v << 8) | p[i];
  return v;
}

void ticket_user_tag(const char *user, uint8_t out_tag[CORDON_ID_LEN]) {
  static const char dom[] = "cordon-user-v1";
  crypto_generichash_state st;
  crypto_generichash_init(&st, NULL, 0, CORDON_ID_LEN);
  crypto_generichash_update(&st, (const uint8_t *)dom, sizeof(dom));
  crypto_generichash_update(&st, (const uint8_t *)user, strlen(user));
  crypto_generichash_final(&st, out_tag, CORDON_ID_LEN);
}

void ticket_args_hash(char *const *args, size_t n_args, uint8_t out_hash[32]) {
  crypto_generichash_state st;
  uint8_t n[4];
  crypto_generichash_init(&st, NULL, 0, 32);
  n[0] = (uint8_t)(n_args >> 24), n[1] = (uint8_t)(n_args >> 16), n[2] = (uint8_t)(n_args >> 8);
  n[3] = (uint8_t)n_args;
  crypto_generichash_update(&st, n, 4);
  for (size_t i = 0; i < n_args; i++) {
    size_t l = strlen(args[i]);
    n[0] = (uint8_t)(l >> 24), n[1] = (uint8_t)(l >> 16), n[2] = (uint8_t)(l >> 8);
    n[3] = (uint8_t)l;
    crypto_generichash_update(&st, n, 4);
    crypto_generichash_update(&st, (const uint8_t *)args[i], l);
  }
  crypto_generichash_final(&st, out_hash, 32);
}

void ticket_encode(const struct ticket *t, uint8_t out_body[TICKET_BODY_LEN]) {
  uint8_t *p = out_body;
  *p++ = 1;
  memcpy(p, t->job_id, 16), p += 16;
  memcpy(p, t->device_id, 16), p += 16;
  memcpy(p, t->user_tag, 16), p += 16;
  memcpy(p, t->session_id, 16), p += 16;
  memcpy(p, t->index_hash, 32), p += 32;
  memcpy(p, t->args_hash, 32), p += 32;
  put64(p, t->issued_ms), p += 8;
  put64(p, t->expires_ms), p += 8;
  /* the last 16 bytes are reserved: zero (they were left unwritten before) */
  memset(p, 0, (size_t)(out_body + TICKET_BODY_LEN - p));
}

static void signed_message(const uint8_t body[TICKET_BODY_LEN],
                           uint8_t out[sizeof(domain) + TICKET_BODY_LEN]) {
  memcpy(out, domain, sizeof(domain));
  memcpy(out + sizeof(domain), body, TICKET_BODY_LEN);
}

void ticket_sign(const uint8_t body[TICKET_BODY_LEN], const uint8_t *secret_key,
                 uint8_t out_sig[TICKET_SIG_LEN]) {
  uint8_t m[sizeof(domain) + TICKET_BODY_LEN];
  signed_message(body, m);
  crypto_sign_detached(out_sig, NULL, m, sizeof(m), secret_key);
}

int ticket_verify(const uint8_t *body, size_t len, const uint8_t sig[TICKET_SIG_LEN],
                  const uint8_t public_key[32], struct ticket *out_ticket) {
  if (len != TICKET_BODY_LEN)
    return CORDON_E_PROTOCOL;
  uint8_t m[sizeof(domain) + TICKET_BODY_LEN];
  signed_message(body, m);
  if (crypto_sign_verify_detached(sig, m, sizeof(m), public_key) != 0)
    return CORDON_E_SIGNATURE_INVALID;
  if (body[0] != 1)
    return CORDON_E_PROTOCOL;
  const uint8_t *p = body + 1;
  struct ticket t;
  memcpy(t.job_id, p, 16), p += 16;
  memcpy(t.device_id, p, 16), p += 16;
  memcpy(t.user_tag, p, 16), p += 16;
  memcpy(t.session_id, p, 16), p += 16;
  memcpy(t.index_hash, p, 32), p += 32;
  memcpy(t.args_hash, p, 32), p += 32;
  t.issued_ms = get64(p), p += 8;
  t.expires_ms = get64(p);
  *out_ticket = t;
  return 0;
}
