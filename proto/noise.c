#include "proto/noise.h"

#include "core/error.h"
#include "proto/frame.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>

_Static_assert(NOISE_MAX_RECORD == FRAME_MAX_SESSION, "a record is one session frame");
_Static_assert(sizeof(NOISE_PROTOCOL_NAME) - 1 <= NOISE_HASH_LEN, "name is padded, not hashed");

#define BLAKE2B_BLOCK_LEN 128
#define NONCE_MAX UINT64_MAX /* reserved: never used to encrypt a message */

/* sodium_malloc only aligns sizes that are multiples of the alignment. */
#define SECURE_SIZE(t) ((sizeof(t) + 63) & ~(size_t)63)

/* ---- Keys ------------------------------------------------------------- */

static int noise_sodium_ready(void) {
  return sodium_init() < 0 ? CORDON_E_CRYPTO : 0;
}

int noise_public_key(const uint8_t *priv, uint8_t out_pub[NOISE_KEY_LEN]) {
  if (!priv || !out_pub)
    return -EINVAL;
  if (noise_sodium_ready() < 0 || crypto_scalarmult_base(out_pub, priv) != 0)
    return CORDON_E_CRYPTO;
  return 0;
}

int noise_keypair_generate(uint8_t out_pub[NOISE_KEY_LEN], uint8_t *out_priv) {
  uint8_t pub[NOISE_KEY_LEN];

  if (!out_pub || !out_priv)
    return -EINVAL;
  if (noise_sodium_ready() < 0)
    return CORDON_E_CRYPTO;
  randombytes_buf(out_priv, NOISE_KEY_LEN);
  if (crypto_scalarmult_base(pub, out_priv) != 0) {
    sodium_memzero(out_priv, NOISE_KEY_LEN);
    return CORDON_E_CRYPTO;
  }
  memcpy(out_pub, pub, NOISE_KEY_LEN);
  return 0;
}

/* DH(priv, pub) into out; an all-zero result (a low-order public key) is
 * an error. */
static int noise_dh(const uint8_t *priv, const uint8_t *pub, uint8_t out[NOISE_KEY_LEN]) {
  if (crypto_scalarmult(out, priv, pub) != 0 || sodium_is_zero(out, NOISE_KEY_LEN)) {
    sodium_memzero(out, NOISE_KEY_LEN);
    return CORDON_E_CRYPTO;
  }
  return 0;
}

/* ---- Prologue --------------------------------------------------------- */

int noise_prologue_build(unsigned version, enum noise_mode mode, uint8_t *out, size_t out_cap,
                         size_t *out_len) {
  static const uint8_t name[] = {'c', 'o', 'r', 'd', 'o', 'n', 0x00};

  if (!out || !out_len || out_cap < NOISE_PROLOGUE_LEN || version > 0xffff)
    return -EINVAL;
  if (mode != NOISE_MODE_SESSION && mode != NOISE_MODE_PAIRING)
    return -EINVAL;
  memcpy(out, name, sizeof(name));
  out[7] = (uint8_t)(version >> 8);
  out[8] = (uint8_t)version;
  out[9] = (uint8_t)mode;
  *out_len = NOISE_PROLOGUE_LEN;
  return 0;
}

/* ---- HASH, HMAC-HASH, HKDF (Noise spec 4.3) --------------------------- */

/* HASH(a || b) with BLAKE2b-512. */
static int noise_hash2(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len,
                       uint8_t out[NOISE_HASH_LEN]) {
  crypto_generichash_blake2b_state st;
  int rc = 0;

  if (crypto_generichash_blake2b_init(&st, NULL, 0, NOISE_HASH_LEN) != 0 ||
      crypto_generichash_blake2b_update(&st, a, a_len) != 0 ||
      crypto_generichash_blake2b_update(&st, b, b_len) != 0 ||
      crypto_generichash_blake2b_final(&st, out, NOISE_HASH_LEN) != 0)
    rc = CORDON_E_CRYPTO;
  sodium_memzero(&st, sizeof(st));
  return rc;
}

/* HMAC-HASH(key, d1 || d2) per RFC 2104 with BLAKE2b-512 (block 128 bytes).
 * key is at most one block (cordon's keys are 64 bytes). out may alias
 * key or the data. */
static int noise_hmac(const uint8_t *key, size_t key_len, const uint8_t *d1, size_t d1_len,
                      const uint8_t *d2, size_t d2_len, uint8_t out[NOISE_HASH_LEN]) {
  uint8_t pad[BLAKE2B_BLOCK_LEN];
  uint8_t inner[NOISE_HASH_LEN];
  crypto_generichash_blake2b_state st;
  int rc = CORDON_E_CRYPTO;
  size_t i;

  if (key_len > BLAKE2B_BLOCK_LEN)
    return CORDON_E_INTERNAL;
  memset(pad, 0, sizeof(pad));
  memcpy(pad, key, key_len);
  for (i = 0; i < sizeof(pad); i++)
    pad[i] ^= 0x36;
  if (crypto_generichash_blake2b_init(&st, NULL, 0, NOISE_HASH_LEN) != 0 ||
      crypto_generichash_blake2b_update(&st, pad, sizeof(pad)) != 0 ||
      crypto_generichash_blake2b_update(&st, d1, d1_len) != 0 ||
      crypto_generichash_blake2b_update(&st, d2, d2_len) != 0 ||
      crypto_generichash_blake2b_final(&st, inner, sizeof(inner)) != 0)
    goto out_wipe;
  for (i = 0; i < sizeof(pad); i++)
    pad[i] ^= 0x36 ^ 0x5c;
  if (crypto_generichash_blake2b_init(&st, NULL, 0, NOISE_HASH_LEN) != 0 ||
      crypto_generichash_blake2b_update(&st, pad, sizeof(pad)) != 0 ||
      crypto_generichash_blake2b_update(&st, inner, sizeof(inner)) != 0 ||
      crypto_generichash_blake2b_final(&st, out, NOISE_HASH_LEN) != 0)
    goto out_wipe;
  rc = 0;
out_wipe:
  sodium_memzero(pad, sizeof(pad));
  sodium_memzero(inner, sizeof(inner));
  sodium_memzero(&st, sizeof(st));
  return rc;
}

/* HKDF(ck, ikm, 2): out1 = HMAC(temp, 0x01), out2 = HMAC(temp, out1 || 0x02)
 * with temp = HMAC(ck, ikm). out1 may alias ck. */
static int noise_hkdf2(const uint8_t ck[NOISE_HASH_LEN], const uint8_t *ikm, size_t ikm_len,
                       uint8_t out1[NOISE_HASH_LEN], uint8_t out2[NOISE_HASH_LEN]) {
  static const uint8_t one = 0x01, two = 0x02;
  uint8_t temp[NOISE_HASH_LEN];
  uint8_t o1[NOISE_HASH_LEN];
  int rc;

  rc = noise_hmac(ck, NOISE_HASH_LEN, ikm, ikm_len, NULL, 0, temp);
  if (rc == 0)
    rc = noise_hmac(temp, sizeof(temp), &one, 1, NULL, 0, o1);
  if (rc == 0)
    rc = noise_hmac(temp, sizeof(temp), o1, sizeof(o1), &two, 1, out2);
  if (rc == 0)
    memcpy(out1, o1, sizeof(o1));
  sodium_memzero(temp, sizeof(temp));
  sodium_memzero(o1, sizeof(o1));
  return rc;
}

/* ---- CipherState ------------------------------------------------------ */

static void noise_nonce(uint64_t n, uint8_t out[crypto_aead_chacha20poly1305_IETF_NPUBBYTES]) {
  /* 32 bits of zeros followed by the little-endian 64-bit counter. */
  memset(out, 0, 4);
  for (int i = 0; i < 8; i++)
    out[4 + i] = (uint8_t)(n >> (8 * i));
}

void noise_cipher_init(struct noise_cipher *c, const uint8_t *k) {
  if (!c)
    return;
  sodium_memzero(c, sizeof(*c));
  if (k) {
    memcpy(c->k, k, NOISE_KEY_LEN);
    c->has_key = 1;
  }
}

void noise_cipher_release(struct noise_cipher *c) {
  if (c)
    sodium_memzero(c, sizeof(*c));
}

void noise_cipher_set_nonce(struct noise_cipher *c, uint64_t n) {
  if (c)
    c->n = n;
}

int noise_cipher_encrypt(struct noise_cipher *c, const uint8_t *ad, size_t ad_len,
                         const uint8_t *in, size_t in_len, uint8_t *out, size_t out_cap,
                         size_t *out_len) {
  uint8_t nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
  unsigned long long clen = 0;

  if (!c || !out || !out_len || (!in && in_len > 0) || (!ad && ad_len > 0))
    return -EINVAL;
  if (!c->has_key) {
    if (out_cap < in_len)
      return -ENOBUFS;
    if (in_len > 0)
      memmove(out, in, in_len);
    *out_len = in_len;
    return 0;
  }
  if (in_len > SIZE_MAX - NOISE_TAG_LEN || out_cap < in_len + NOISE_TAG_LEN)
    return -ENOBUFS;
  if (c->n == NONCE_MAX)
    return CORDON_E_LIMIT;
  noise_nonce(c->n, nonce);
  if (crypto_aead_chacha20poly1305_ietf_encrypt(out, &clen, in, in_len, ad, ad_len, NULL, nonce,
                                                c->k) != 0)
    return CORDON_E_CRYPTO;
  c->n++;
  *out_len = (size_t)clen;
  return 0;
}

int noise_cipher_decrypt(struct noise_cipher *c, const uint8_t *ad, size_t ad_len,
                         const uint8_t *in, size_t in_len, uint8_t *out, size_t out_cap,
                         size_t *out_len) {
  uint8_t nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
  unsigned long long mlen = 0;

  if (!c || !out_len || (!in && in_len > 0) || (!ad && ad_len > 0) || (!out && out_cap > 0))
    return -EINVAL;
  if (!c->has_key) {
    if (out_cap < in_len)
      return -ENOBUFS;
    if (in_len > 0)
      memmove(out, in, in_len);
    *out_len = in_len;
    return 0;
  }
  if (in_len < NOISE_TAG_LEN)
    return CORDON_E_PROTOCOL;
  if (out_cap < in_len - NOISE_TAG_LEN)
    return -ENOBUFS;
  if (c->n == NONCE_MAX)
    return CORDON_E_LIMIT;
  noise_nonce(c->n, nonce);
  /* libsodium needs a non-NULL m even for an empty plaintext. */
  if (crypto_aead_chacha20poly1305_ietf_decrypt(out ? out : nonce, &mlen, NULL, in, in_len, ad,
                                                ad_len, nonce, c->k) != 0)
    return CORDON_E_CRYPTO;
  c->n++;
  *out_len = (size_t)mlen;
  return 0;
}

int noise_cipher_rekey(struct noise_cipher *c) {
  static const uint8_t zeros[NOISE_KEY_LEN];
  uint8_t nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
  uint8_t buf[NOISE_KEY_LEN + NOISE_TAG_LEN];
  unsigned long long clen = 0;
  int rc = 0;

  if (!c || !c->has_key)
    return CORDON_E_INTERNAL;
  noise_nonce(NONCE_MAX, nonce);
  if (crypto_aead_chacha20poly1305_ietf_encrypt(buf, &clen, zeros, sizeof(zeros), NULL, 0, NULL,
                                                nonce, c->k) != 0)
    rc = CORDON_E_CRYPTO;
  else
    memcpy(c->k, buf, NOISE_KEY_LEN);
  sodium_memzero(buf, sizeof(buf));
  return rc;
}

/* ---- SymmetricState --------------------------------------------------- */

struct noise_symmetric {
  struct noise_cipher cs;
  uint8_t ck[NOISE_HASH_LEN];
  uint8_t h[NOISE_HASH_LEN];
};

static void noise_symmetric_init(struct noise_symmetric *ss) {
  const char *name = NOISE_PROTOCOL_NAME;

  /* The name is at most HASHLEN bytes: h = name padded with zeros. */
  memset(ss->h, 0, sizeof(ss->h));
  memcpy(ss->h, name, strlen(name));
  memcpy(ss->ck, ss->h, sizeof(ss->ck));
  noise_cipher_init(&ss->cs, NULL);
}

static int noise_mix_hash(struct noise_symmetric *ss, const uint8_t *data, size_t len) {
  return noise_hash2(ss->h, sizeof(ss->h), data, len, ss->h);
}

static int noise_mix_key(struct noise_symmetric *ss, const uint8_t *ikm, size_t ikm_len) {
  uint8_t temp_k[NOISE_HASH_LEN];
  int rc;

  rc = noise_hkdf2(ss->ck, ikm, ikm_len, ss->ck, temp_k);
  if (rc == 0)
    noise_cipher_init(&ss->cs, temp_k); /* truncated to 32 bytes */
  sodium_memzero(temp_k, sizeof(temp_k));
  return rc;
}

/* DH, then MixKey with the result. */
static int noise_mix_dh(struct noise_symmetric *ss, const uint8_t *priv, const uint8_t *pub) {
  uint8_t dh[NOISE_KEY_LEN];
  int rc;

  rc = noise_dh(priv, pub, dh);
  if (rc == 0)
    rc = noise_mix_key(ss, dh, sizeof(dh));
  sodium_memzero(dh, sizeof(dh));
  return rc;
}

static int noise_encrypt_and_hash(struct noise_symmetric *ss, const uint8_t *pt, size_t pt_len,
                                  uint8_t *out, size_t out_cap, size_t *out_len) {
  size_t n = 0;
  int rc;

  rc = noise_cipher_encrypt(&ss->cs, ss->h, sizeof(ss->h), pt, pt_len, out, out_cap, &n);
  if (rc == 0)
    rc = noise_mix_hash(ss, out, n);
  if (rc == 0)
    *out_len = n;
  return rc;
}

/* The new h is computed before decrypting, so out may equal ct. */
static int noise_decrypt_and_hash(struct noise_symmetric *ss, const uint8_t *ct, size_t ct_len,
                                  uint8_t *out, size_t out_cap, size_t *out_len) {
  uint8_t next_h[NOISE_HASH_LEN];
  size_t n = 0;
  int rc;

  rc = noise_hash2(ss->h, sizeof(ss->h), ct, ct_len, next_h);
  if (rc == 0)
    rc = noise_cipher_decrypt(&ss->cs, ss->h, sizeof(ss->h), ct, ct_len, out, out_cap, &n);
  if (rc == 0) {
    memcpy(ss->h, next_h, sizeof(next_h));
    *out_len = n;
  }
  return rc;
}

/* ---- HandshakeState --------------------------------------------------- */

struct noise_session {
  struct noise_cipher send;
  struct noise_cipher recv;
  uint8_t h[NOISE_HASH_LEN];
  uint8_t rs[NOISE_KEY_LEN];
  uint64_t rekey_interval;
  int err; /* sticky */
};

struct noise_handshake {
  struct noise_symmetric ss;
  uint8_t s_priv[NOISE_KEY_LEN];
  uint8_t s_pub[NOISE_KEY_LEN];
  uint8_t e_priv[NOISE_KEY_LEN];
  uint8_t e_pub[NOISE_KEY_LEN];
  uint8_t rs[NOISE_KEY_LEN];
  uint8_t re[NOISE_KEY_LEN];
  uint8_t pinned[NOISE_KEY_LEN];
  enum noise_role role;
  int step; /* messages done, 0..3 */
  int has_e;
  int has_rs;
  int has_pin;
  int err; /* sticky */
};

/* One secure allocation serves a connection side: it holds the handshake,
 * and Split() turns it into the session in place (sodium_malloc is costly:
 * guard pages, mprotect and mlock). */
union noise_secure {
  struct noise_handshake hs;
  struct noise_session s;
};

int noise_handshake_new(enum noise_role role, const uint8_t *static_priv, const uint8_t *prologue,
                        size_t prologue_len, struct noise_handshake **out_hs) {
  struct noise_handshake *hs;
  int rc;

  if (!static_priv || !out_hs || (!prologue && prologue_len > 0))
    return -EINVAL;
  if (role != NOISE_INITIATOR && role != NOISE_RESPONDER)
    return -EINVAL;
  if (noise_sodium_ready() < 0)
    return CORDON_E_CRYPTO;
  hs = sodium_malloc(SECURE_SIZE(union noise_secure));
  if (!hs)
    return -ENOMEM;
  memset(hs, 0, sizeof(union noise_secure));
  hs->role = role;
  memcpy(hs->s_priv, static_priv, NOISE_KEY_LEN);
  rc = noise_public_key(hs->s_priv, hs->s_pub);
  if (rc < 0)
    goto out_free_hs;
  noise_symmetric_init(&hs->ss);
  rc = noise_mix_hash(&hs->ss, prologue ? prologue : hs->s_pub, prologue_len);
  if (rc < 0)
    goto out_free_hs;
  *out_hs = hs;
  return 0;

out_free_hs:
  noise_handshake_free(hs);
  return rc;
}

void noise_handshake_free(struct noise_handshake *hs) {
  if (!hs)
    return;
  sodium_memzero(hs, sizeof(union noise_secure));
  sodium_free(hs);
}

/* Record a sticky error and wipe every secret; keep nothing usable. */
static int noise_handshake_fail(struct noise_handshake *hs, int err) {
  enum noise_role role = hs->role;

  sodium_memzero(hs, sizeof(*hs));
  hs->role = role;
  hs->err = err;
  return err;
}

static int noise_handshake_our_turn(const struct noise_handshake *hs) {
  /* The initiator writes messages 1 and 3, the responder message 2. */
  return hs->step < 3 && (hs->step % 2 == 0) == (hs->role == NOISE_INITIATOR);
}

enum noise_action noise_handshake_next(const struct noise_handshake *hs) {
  if (!hs || hs->err)
    return NOISE_ACTION_FAILED;
  if (hs->step >= 3)
    return NOISE_ACTION_SPLIT;
  return noise_handshake_our_turn(hs) ? NOISE_ACTION_WRITE : NOISE_ACTION_READ;
}

int noise_handshake_set_ephemeral(struct noise_handshake *hs, const uint8_t *priv) {
  if (!hs || !priv)
    return -EINVAL;
  if (hs->err)
    return hs->err;
  if (hs->has_e || hs->step >= 2 || (hs->role == NOISE_INITIATOR && hs->step > 0))
    return CORDON_E_INTERNAL;
  memcpy(hs->e_priv, priv, NOISE_KEY_LEN);
  if (crypto_scalarmult_base(hs->e_pub, hs->e_priv) != 0)
    return noise_handshake_fail(hs, CORDON_E_CRYPTO);
  hs->has_e = 1;
  return 0;
}

int noise_handshake_pin_remote(struct noise_handshake *hs, const uint8_t pinned[NOISE_KEY_LEN]) {
  if (!hs || !pinned)
    return -EINVAL;
  if (hs->err)
    return hs->err;
  if (hs->role != NOISE_INITIATOR || hs->step > 1)
    return CORDON_E_INTERNAL;
  memcpy(hs->pinned, pinned, NOISE_KEY_LEN);
  hs->has_pin = 1;
  return 0;
}

/* Token "e" on the writing side: generate (unless injected), send, hash. */
static int noise_write_e(struct noise_handshake *hs, uint8_t *out) {
  int rc;

  if (!hs->has_e) {
    rc = noise_keypair_generate(hs->e_pub, hs->e_priv);
    if (rc < 0)
      return rc;
    hs->has_e = 1;
  }
  memcpy(out, hs->e_pub, NOISE_KEY_LEN);
  return noise_mix_hash(&hs->ss, hs->e_pub, NOISE_KEY_LEN);
}

int noise_handshake_write_message(struct noise_handshake *hs, const uint8_t *payload,
                                  size_t payload_len, uint8_t *out, size_t out_cap,
                                  size_t *out_len) {
  size_t total, pos = 0, n = 0;
  int rc;

  if (!hs || !out || !out_len || (!payload && payload_len > 0))
    return -EINVAL;
  if (hs->err)
    return hs->err;
  if (!noise_handshake_our_turn(hs))
    return CORDON_E_INTERNAL;
  if (payload_len > NOISE_MAX_MESSAGE)
    return CORDON_E_LIMIT;
  total = hs->step == 0   ? NOISE_MSG1_LEN(payload_len)
          : hs->step == 1 ? NOISE_MSG2_LEN(payload_len)
                          : NOISE_MSG3_LEN(payload_len);
  if (total > NOISE_MAX_MESSAGE)
    return CORDON_E_LIMIT;
  if (out_cap < total)
    return -ENOBUFS;

  switch (hs->step) {
  case 0: /* -> e */
    rc = noise_write_e(hs, out);
    pos = NOISE_KEY_LEN;
    break;
  case 1: /* <- e, ee, s, es */
    rc = noise_write_e(hs, out);
    pos = NOISE_KEY_LEN;
    if (rc == 0)
      rc = noise_mix_dh(&hs->ss, hs->e_priv, hs->re);
    if (rc == 0)
      rc = noise_encrypt_and_hash(&hs->ss, hs->s_pub, NOISE_KEY_LEN, out + pos, out_cap - pos, &n);
    pos += n;
    if (rc == 0)
      rc = noise_mix_dh(&hs->ss, hs->s_priv, hs->re);
    break;
  default: /* -> s, se */
    rc = noise_encrypt_and_hash(&hs->ss, hs->s_pub, NOISE_KEY_LEN, out, out_cap, &n);
    pos = n;
    if (rc == 0)
      rc = noise_mix_dh(&hs->ss, hs->s_priv, hs->re);
    break;
  }
  if (rc == 0)
    rc = noise_encrypt_and_hash(&hs->ss, payload, payload_len, out + pos, out_cap - pos, &n);
  if (rc < 0) {
    sodium_memzero(out, total);
    return noise_handshake_fail(hs, rc);
  }
  hs->step++;
  *out_len = pos + n;
  return 0;
}

int noise_handshake_read_message(struct noise_handshake *hs, const uint8_t *msg, size_t msg_len,
                                 uint8_t *out_payload, size_t out_cap, size_t *out_len) {
  uint8_t rs[NOISE_KEY_LEN];
  size_t fixed, payload_ct_len, want, n = 0;
  const uint8_t *p = msg;
  int rc;

  if (!hs || !out_len || (!msg && msg_len > 0) || (!out_payload && out_cap > 0))
    return -EINVAL;
  if (hs->err)
    return hs->err;
  if (hs->step >= 3 || noise_handshake_our_turn(hs))
    return CORDON_E_INTERNAL;
  if (msg_len > NOISE_MAX_MESSAGE)
    return noise_handshake_fail(hs, CORDON_E_LIMIT);
  fixed = hs->step == 0 ? NOISE_MSG1_LEN(0) : hs->step == 1 ? NOISE_MSG2_LEN(0) : NOISE_MSG3_LEN(0);
  if (msg_len < fixed)
    return noise_handshake_fail(hs, CORDON_E_PROTOCOL);
  want = msg_len - fixed;
  if (out_cap < want)
    return -ENOBUFS;

  switch (hs->step) {
  case 0: /* -> e */
    memcpy(hs->re, p, NOISE_KEY_LEN);
    p += NOISE_KEY_LEN;
    rc = noise_mix_hash(&hs->ss, hs->re, NOISE_KEY_LEN);
    break;
  case 1: /* <- e, ee, s, es */
    memcpy(hs->re, p, NOISE_KEY_LEN);
    p += NOISE_KEY_LEN;
    rc = noise_mix_hash(&hs->ss, hs->re, NOISE_KEY_LEN);
    if (rc == 0)
      rc = noise_mix_dh(&hs->ss, hs->e_priv, hs->re);
    if (rc == 0)
      rc = noise_decrypt_and_hash(&hs->ss, p, NOISE_KEY_LEN + NOISE_TAG_LEN, rs, sizeof(rs), &n);
    p += NOISE_KEY_LEN + NOISE_TAG_LEN;
    if (rc == 0)
      rc = noise_mix_dh(&hs->ss, hs->e_priv, rs);
    break;
  default: /* -> s, se */
    rc = noise_decrypt_and_hash(&hs->ss, p, NOISE_KEY_LEN + NOISE_TAG_LEN, rs, sizeof(rs), &n);
    p += NOISE_KEY_LEN + NOISE_TAG_LEN;
    if (rc == 0)
      rc = noise_mix_dh(&hs->ss, hs->e_priv, rs);
    break;
  }
  payload_ct_len = msg_len - (size_t)(p - msg);
  if (rc == 0)
    rc = noise_decrypt_and_hash(&hs->ss, p, payload_ct_len, out_payload, out_cap, &n);
  if (rc == 0 && hs->step >= 1) {
    memcpy(hs->rs, rs, NOISE_KEY_LEN);
    hs->has_rs = 1;
    /* Check the pin before anything more is written (message 3 would
     * reveal our identity to the wrong server). */
    if (hs->has_pin && sodium_memcmp(hs->rs, hs->pinned, NOISE_KEY_LEN) != 0)
      rc = CORDON_E_UNKNOWN_KEY;
  }
  sodium_memzero(rs, sizeof(rs));
  if (rc < 0) {
    if (out_payload)
      sodium_memzero(out_payload, want);
    return noise_handshake_fail(hs, rc);
  }
  hs->step++;
  *out_len = n;
  return 0;
}

int noise_handshake_remote_static(const struct noise_handshake *hs,
                                  uint8_t out_key[NOISE_KEY_LEN]) {
  if (!hs || !out_key)
    return -EINVAL;
  if (hs->err)
    return hs->err;
  if (!hs->has_rs)
    return CORDON_E_INTERNAL;
  memcpy(out_key, hs->rs, NOISE_KEY_LEN);
  return 0;
}

int noise_handshake_hash(const struct noise_handshake *hs, uint8_t out_h[NOISE_HASH_LEN]) {
  if (!hs || !out_h)
    return -EINVAL;
  if (hs->err)
    return hs->err;
  if (hs->step < 3)
    return CORDON_E_INTERNAL;
  memcpy(out_h, hs->ss.h, NOISE_HASH_LEN);
  return 0;
}

/* ---- Transport sessions ----------------------------------------------- */

int noise_handshake_split(struct noise_handshake **hsp, struct noise_session **out_session) {
  uint8_t k1[NOISE_HASH_LEN], k2[NOISE_HASH_LEN], h[NOISE_HASH_LEN], rs[NOISE_KEY_LEN];
  struct noise_handshake *hs;
  struct noise_session *s;
  int initiator, rc;

  if (!hsp || !*hsp || !out_session)
    return -EINVAL;
  hs = *hsp;
  if (hs->err)
    return hs->err;
  if (hs->step < 3)
    return CORDON_E_INTERNAL;
  rc = noise_hkdf2(hs->ss.ck, NULL, 0, k1, k2);
  if (rc < 0)
    goto out_wipe;
  initiator = hs->role == NOISE_INITIATOR;
  memcpy(h, hs->ss.h, sizeof(h));
  memcpy(rs, hs->rs, sizeof(rs));

  /* Reuse the allocation: wipe every handshake secret, then lay the
   * session out in the same memory. */
  sodium_memzero(hs, sizeof(union noise_secure));
  s = (struct noise_session *)(void *)hs;
  /* The first key encrypts initiator -> responder. */
  noise_cipher_init(&s->send, initiator ? k1 : k2);
  noise_cipher_init(&s->recv, initiator ? k2 : k1);
  memcpy(s->h, h, sizeof(h));
  memcpy(s->rs, rs, sizeof(rs));
  s->rekey_interval = NOISE_REKEY_INTERVAL;
  *hsp = NULL;
  *out_session = s;

out_wipe:
  sodium_memzero(k1, sizeof(k1));
  sodium_memzero(k2, sizeof(k2));
  if (rc < 0)
    return noise_handshake_fail(*hsp, rc);
  return 0;
}

void noise_session_free(struct noise_session *s) {
  if (!s)
    return;
  sodium_memzero(s, sizeof(union noise_secure));
  sodium_free(s);
}

static int noise_session_fail(struct noise_session *s, int err) {
  noise_cipher_release(&s->send);
  noise_cipher_release(&s->recv);
  s->err = err;
  return err;
}

int noise_session_encrypt(struct noise_session *s, const uint8_t *pt, size_t pt_len, uint8_t *out,
                          size_t out_cap, size_t *out_len) {
  size_t n = 0;
  int rc;

  if (!s || !out || !out_len || (!pt && pt_len > 0))
    return -EINVAL;
  if (s->err)
    return s->err;
  if (pt_len > NOISE_MAX_PLAINTEXT)
    return CORDON_E_LIMIT;
  if (out_cap < pt_len + NOISE_TAG_LEN)
    return -ENOBUFS;
  rc = noise_cipher_encrypt(&s->send, NULL, 0, pt, pt_len, out, out_cap, &n);
  if (rc == 0 && s->send.n % s->rekey_interval == 0)
    rc = noise_cipher_rekey(&s->send);
  if (rc < 0) {
    sodium_memzero(out, pt_len + NOISE_TAG_LEN);
    return noise_session_fail(s, rc);
  }
  *out_len = n;
  return 0;
}

int noise_session_decrypt(struct noise_session *s, const uint8_t *ct, size_t ct_len, uint8_t *out,
                          size_t out_cap, size_t *out_len) {
  size_t n = 0;
  int rc;

  if (!s || !out_len || (!ct && ct_len > 0) || (!out && out_cap > 0))
    return -EINVAL;
  if (s->err)
    return s->err;
  if (ct_len >= NOISE_TAG_LEN && out_cap < ct_len - NOISE_TAG_LEN)
    return -ENOBUFS;
  if (ct_len < NOISE_TAG_LEN)
    rc = CORDON_E_PROTOCOL;
  else if (ct_len > NOISE_MAX_RECORD)
    rc = CORDON_E_LIMIT;
  else
    rc = noise_cipher_decrypt(&s->recv, NULL, 0, ct, ct_len, out, out_cap, &n);
  if (rc == 0 && s->recv.n % s->rekey_interval == 0)
    rc = noise_cipher_rekey(&s->recv);
  if (rc < 0)
    return noise_session_fail(s, rc);
  *out_len = n;
  return 0;
}

void noise_session_hash(const struct noise_session *s, uint8_t out_h[NOISE_HASH_LEN]) {
  if (s && out_h)
    memcpy(out_h, s->h, NOISE_HASH_LEN);
}

void noise_session_remote_static(const struct noise_session *s, uint8_t out_key[NOISE_KEY_LEN]) {
  if (s && out_key)
    memcpy(out_key, s->rs, NOISE_KEY_LEN);
}

int noise_session_error(const struct noise_session *s) {
  return s ? s->err : -EINVAL;
}

int noise_session_set_rekey_interval(struct noise_session *s, uint64_t interval) {
  if (!s || interval == 0)
    return -EINVAL;
  s->rekey_interval = interval;
  return 0;
}
