/* Tests for proto/noise.c: the published Noise_XX_25519_ChaChaPoly_BLAKE2b
 * vectors, tampering, pinning, low-order keys, transport record misuse and
 * rekeying. */
#include "core/error.h"
#include "proto/noise.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VECTORS_PATH CORDON_SOURCE_DIR "/tests/data/noise_xx_25519_chachapoly_blake2b.json"

/* ---- helpers ---------------------------------------------------------- */

static size_t hex_decode(const char *hex, uint8_t *out, size_t cap) {
  size_t n = strlen(hex), bin_len = 0;
  cr_assert_eq(n % 2, 0, "odd hex length");
  cr_assert_leq(n / 2, cap, "hex too long");
  cr_assert_eq(sodium_hex2bin(out, cap, hex, n, NULL, &bin_len, NULL), 0, "bad hex");
  return bin_len;
}

static const char *json_str(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  cr_assert(json_is_string(v), "vector field %s missing", key);
  return json_string_value(v);
}

struct keys {
  uint8_t i_priv[NOISE_KEY_LEN], i_pub[NOISE_KEY_LEN];
  uint8_t r_priv[NOISE_KEY_LEN], r_pub[NOISE_KEY_LEN];
};

static void keys_make(struct keys *k) {
  cr_assert_eq(noise_keypair_generate(k->i_pub, k->i_priv), 0);
  cr_assert_eq(noise_keypair_generate(k->r_pub, k->r_priv), 0);
}

static void prologue(enum noise_mode mode, uint8_t out[NOISE_PROLOGUE_LEN]) {
  size_t n = 0;
  cr_assert_eq(noise_prologue_build(NOISE_WIRE_VERSION, mode, out, NOISE_PROLOGUE_LEN, &n), 0);
  cr_assert_eq(n, NOISE_PROLOGUE_LEN);
}

static void hs_pair(const struct keys *k, struct noise_handshake **out_i,
                    struct noise_handshake **out_r) {
  uint8_t pro[NOISE_PROLOGUE_LEN];
  prologue(NOISE_MODE_SESSION, pro);
  cr_assert_eq(noise_handshake_new(NOISE_INITIATOR, k->i_priv, pro, sizeof(pro), out_i), 0);
  cr_assert_eq(noise_handshake_new(NOISE_RESPONDER, k->r_priv, pro, sizeof(pro), out_r), 0);
}

/* Write a message on `from` and return it in buf. */
static size_t hs_write(struct noise_handshake *from, const char *payload, uint8_t *buf,
                       size_t cap) {
  size_t n = 0;
  cr_assert_eq(
      noise_handshake_write_message(from, (const uint8_t *)payload, strlen(payload), buf, cap, &n),
      0);
  return n;
}

/* payload NULL: accept any payload. */
static void hs_read_ok(struct noise_handshake *to, const uint8_t *msg, size_t len,
                       const char *payload) {
  uint8_t pl[512];
  size_t n = 0;
  cr_assert_eq(noise_handshake_read_message(to, msg, len, pl, sizeof(pl), &n), 0);
  if (!payload)
    return;
  cr_assert_eq(n, strlen(payload));
  cr_assert_eq(memcmp(pl, payload, n), 0);
}

/* A complete handshake between fresh keys; returns both sessions. */
static void session_pair(struct noise_session **out_i, struct noise_session **out_r) {
  struct noise_handshake *hi, *hr;
  struct keys k;
  uint8_t buf[512];
  size_t n;

  keys_make(&k);
  hs_pair(&k, &hi, &hr);
  n = hs_write(hi, "", buf, sizeof(buf));
  hs_read_ok(hr, buf, n, "");
  n = hs_write(hr, "", buf, sizeof(buf));
  hs_read_ok(hi, buf, n, "");
  n = hs_write(hi, "", buf, sizeof(buf));
  hs_read_ok(hr, buf, n, "");
  cr_assert_eq(noise_handshake_split(&hi, out_i), 0);
  cr_assert_eq(noise_handshake_split(&hr, out_r), 0);
  noise_handshake_free(hi);
  noise_handshake_free(hr);
}

static size_t seal(struct noise_session *s, const char *pt, uint8_t *out, size_t cap) {
  size_t n = 0;
  cr_assert_eq(noise_session_encrypt(s, (const uint8_t *)pt, strlen(pt), out, cap, &n), 0);
  cr_assert_eq(n, strlen(pt) + NOISE_TAG_LEN);
  return n;
}

static void open_ok(struct noise_session *s, const uint8_t *ct, size_t len, const char *pt) {
  uint8_t out[256];
  size_t n = 0;
  cr_assert_eq(noise_session_decrypt(s, ct, len, out, sizeof(out), &n), 0);
  cr_assert_eq(n, strlen(pt));
  cr_assert_eq(memcmp(out, pt, n), 0);
}

static int open_rc(struct noise_session *s, const uint8_t *ct, size_t len) {
  uint8_t out[256];
  size_t n = 0;
  return noise_session_decrypt(s, ct, len, out, sizeof(out), &n);
}

/* Keys that make X25519 return all zeros (the low-order points and their
 * non-canonical encodings). */
static const char *const low_order_points[] = {
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0100000000000000000000000000000000000000000000000000000000000000",
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
    "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
};

static void setup(void) {
  cr_assert_geq(sodium_init(), 0);
}

TestSuite(noise, .init = setup);

/* ---- vectors ---------------------------------------------------------- */

static void run_vector(json_t *v, size_t vi, size_t *msgs_checked, size_t *hashes_checked) {
  uint8_t i_static[32], r_static[32], i_eph[32], r_eph[32];
  uint8_t i_pro[256], r_pro[256];
  uint8_t payload[1024], expect[1024], buf[1024], got[1024];
  uint8_t h_i[NOISE_HASH_LEN], h_r[NOISE_HASH_LEN], h_want[NOISE_HASH_LEN];
  struct noise_handshake *hi = NULL, *hr = NULL;
  struct noise_session *si = NULL, *sr = NULL;
  size_t i_pro_len, r_pro_len;
  json_t *msgs;

  cr_assert_str_eq(json_str(v, "name"), NOISE_PROTOCOL_NAME);
  hex_decode(json_str(v, "init_static"), i_static, sizeof(i_static));
  hex_decode(json_str(v, "resp_static"), r_static, sizeof(r_static));
  hex_decode(json_str(v, "init_ephemeral"), i_eph, sizeof(i_eph));
  hex_decode(json_str(v, "resp_ephemeral"), r_eph, sizeof(r_eph));
  i_pro_len = hex_decode(json_str(v, "init_prologue"), i_pro, sizeof(i_pro));
  r_pro_len = hex_decode(json_str(v, "resp_prologue"), r_pro, sizeof(r_pro));

  cr_assert_eq(noise_handshake_new(NOISE_INITIATOR, i_static, i_pro, i_pro_len, &hi), 0);
  cr_assert_eq(noise_handshake_new(NOISE_RESPONDER, r_static, r_pro, r_pro_len, &hr), 0);
  cr_assert_eq(noise_handshake_set_ephemeral(hi, i_eph), 0);
  cr_assert_eq(noise_handshake_set_ephemeral(hr, r_eph), 0);

  msgs = json_object_get(v, "messages");
  cr_assert(json_is_array(msgs) && json_array_size(msgs) >= 3, "vector %zu: messages", vi);
  for (size_t m = 0; m < json_array_size(msgs); m++) {
    json_t *msg = json_array_get(msgs, m);
    int from_initiator = m % 2 == 0;
    size_t pl_len = hex_decode(json_str(msg, "payload"), payload, sizeof(payload));
    size_t ct_len = hex_decode(json_str(msg, "ciphertext"), expect, sizeof(expect));
    size_t n = 0, got_len = 0;

    if (m < 3) {
      struct noise_handshake *w = from_initiator ? hi : hr, *r = from_initiator ? hr : hi;
      cr_assert_eq(noise_handshake_next(w), NOISE_ACTION_WRITE);
      cr_assert_eq(noise_handshake_next(r), NOISE_ACTION_READ);
      cr_assert_eq(noise_handshake_write_message(w, payload, pl_len, buf, sizeof(buf), &n), 0,
                   "vector %zu message %zu: write", vi, m);
      cr_assert_eq(noise_handshake_read_message(r, buf, n, got, sizeof(got), &got_len), 0,
                   "vector %zu message %zu: read", vi, m);
    } else {
      struct noise_session *w = from_initiator ? si : sr, *r = from_initiator ? sr : si;
      cr_assert_eq(noise_session_encrypt(w, payload, pl_len, buf, sizeof(buf), &n), 0);
      cr_assert_eq(noise_session_decrypt(r, buf, n, got, sizeof(got), &got_len), 0,
                   "vector %zu message %zu: decrypt", vi, m);
    }
    cr_assert_eq(n, ct_len, "vector %zu message %zu: length %zu, want %zu", vi, m, n, ct_len);
    cr_assert_eq(memcmp(buf, expect, n), 0, "vector %zu message %zu: ciphertext differs", vi, m);
    cr_assert_eq(got_len, pl_len);
    cr_assert_eq(memcmp(got, payload, pl_len), 0, "vector %zu message %zu: payload", vi, m);
    (*msgs_checked)++;

    if (m == 2) {
      cr_assert_eq(noise_handshake_next(hi), NOISE_ACTION_SPLIT);
      cr_assert_eq(noise_handshake_next(hr), NOISE_ACTION_SPLIT);
      cr_assert_eq(noise_handshake_hash(hi, h_i), 0);
      cr_assert_eq(noise_handshake_hash(hr, h_r), 0);
      cr_assert_eq(memcmp(h_i, h_r, sizeof(h_i)), 0);
      if (json_object_get(v, "handshake_hash")) {
        hex_decode(json_str(v, "handshake_hash"), h_want, sizeof(h_want));
        cr_assert_eq(memcmp(h_i, h_want, sizeof(h_i)), 0, "vector %zu: handshake hash", vi);
        (*hashes_checked)++;
      }
      cr_assert_eq(noise_handshake_split(&hi, &si), 0);
      cr_assert_eq(noise_handshake_split(&hr, &sr), 0);
      noise_session_hash(si, h_r);
      cr_assert_eq(memcmp(h_i, h_r, sizeof(h_i)), 0);
    }
  }
  noise_session_free(si);
  noise_session_free(sr);
  noise_handshake_free(hi);
  noise_handshake_free(hr);
}

Test(noise, reproduces_published_vectors) {
  json_error_t jerr;
  json_t *root = json_load_file(VECTORS_PATH, 0, &jerr);
  size_t msgs = 0, hashes = 0, count;
  json_t *vectors;

  cr_assert_not_null(root, "%s: %s", VECTORS_PATH, jerr.text);
  vectors = json_object_get(root, "vectors");
  cr_assert(json_is_array(vectors));
  count = json_array_size(vectors);
  cr_assert_geq(count, 1);
  for (size_t i = 0; i < count; i++)
    run_vector(json_array_get(vectors, i), i, &msgs, &hashes);
  cr_log_info("%zu vectors, %zu messages, %zu handshake hashes reproduced", count, msgs, hashes);
  cr_assert_geq(msgs, count * 3);
  cr_assert_geq(hashes, 1);
  json_decref(root);
}

/* ---- primitives ------------------------------------------------------- */

Test(noise, prologue_bytes_are_documented_layout) {
  static const uint8_t session[] = {0x63, 0x6f, 0x72, 0x64, 0x6f, 0x6e, 0x00, 0x00, 0x01, 0x01};
  static const uint8_t pairing[] = {0x63, 0x6f, 0x72, 0x64, 0x6f, 0x6e, 0x00, 0x00, 0x01, 0x02};
  uint8_t out[16];
  size_t n = 0;

  cr_assert_eq(noise_prologue_build(1, NOISE_MODE_SESSION, out, sizeof(out), &n), 0);
  cr_assert_eq(n, sizeof(session));
  cr_assert_eq(memcmp(out, session, n), 0);
  cr_assert_eq(noise_prologue_build(1, NOISE_MODE_PAIRING, out, sizeof(out), &n), 0);
  cr_assert_eq(memcmp(out, pairing, n), 0);
  cr_assert_eq(noise_prologue_build(0x1234, NOISE_MODE_SESSION, out, sizeof(out), &n), 0);
  cr_assert(out[7] == 0x12 && out[8] == 0x34);
  cr_assert_eq(noise_prologue_build(1, (enum noise_mode)3, out, sizeof(out), &n), -EINVAL);
  cr_assert_eq(noise_prologue_build(0x10000, NOISE_MODE_SESSION, out, sizeof(out), &n), -EINVAL);
  cr_assert_eq(noise_prologue_build(1, NOISE_MODE_SESSION, out, 9, &n), -EINVAL);
}

Test(noise, cipher_nonce_is_zero_prefix_and_little_endian_counter) {
  uint8_t k[32], nonce[12] = {0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1};
  uint8_t ad[3] = {1, 2, 3}, ours[64], theirs[64];
  struct noise_cipher c;
  unsigned long long tl = 0;
  size_t n = 0;

  randombytes_buf(k, sizeof(k));
  noise_cipher_init(&c, k);
  noise_cipher_set_nonce(&c, 0x0102030405060708ull);
  cr_assert_eq(
      noise_cipher_encrypt(&c, ad, sizeof(ad), (const uint8_t *)"hello", 5, ours, sizeof(ours), &n),
      0);
  crypto_aead_chacha20poly1305_ietf_encrypt(theirs, &tl, (const uint8_t *)"hello", 5, ad,
                                            sizeof(ad), NULL, nonce, k);
  cr_assert_eq(n, tl);
  cr_assert_eq(memcmp(ours, theirs, n), 0);
  cr_assert_eq(c.n, 0x0102030405060709ull);
  noise_cipher_release(&c);
}

Test(noise, rekey_follows_spec_section_11_3) {
  static const uint8_t zeros[32];
  uint8_t k[32], k2[48], maxnonce[12], nonce0[12] = {0};
  uint8_t ours[64], theirs[64];
  struct noise_cipher c;
  unsigned long long tl = 0;
  size_t n = 0;

  randombytes_buf(k, sizeof(k));
  memset(maxnonce, 0xff, sizeof(maxnonce));
  memset(maxnonce, 0, 4);
  crypto_aead_chacha20poly1305_ietf_encrypt(k2, &tl, zeros, 32, NULL, 0, NULL, maxnonce, k);
  crypto_aead_chacha20poly1305_ietf_encrypt(theirs, &tl, (const uint8_t *)"after", 5, NULL, 0, NULL,
                                            nonce0, k2 /* first 32 bytes */);

  noise_cipher_init(&c, k);
  cr_assert_eq(noise_cipher_rekey(&c), 0);
  cr_assert_eq(c.n, 0, "rekey leaves the nonce alone");
  cr_assert_eq(
      noise_cipher_encrypt(&c, NULL, 0, (const uint8_t *)"after", 5, ours, sizeof(ours), &n), 0);
  cr_assert_eq(memcmp(ours, theirs, n), 0);
  noise_cipher_release(&c);
}

Test(noise, nonce_max_is_reserved) {
  uint8_t k[32], ct[64], pt[64];
  struct noise_cipher tx, rx;
  size_t n = 0, m = 0;

  randombytes_buf(k, sizeof(k));
  noise_cipher_init(&tx, k);
  noise_cipher_init(&rx, k);
  noise_cipher_set_nonce(&tx, UINT64_MAX - 1);
  noise_cipher_set_nonce(&rx, UINT64_MAX - 1);
  cr_assert_eq(noise_cipher_encrypt(&tx, NULL, 0, (const uint8_t *)"x", 1, ct, sizeof(ct), &n), 0);
  cr_assert_eq(noise_cipher_decrypt(&rx, NULL, 0, ct, n, pt, sizeof(pt), &m), 0);
  cr_assert_eq(tx.n, UINT64_MAX);
  cr_assert_eq(noise_cipher_encrypt(&tx, NULL, 0, (const uint8_t *)"x", 1, ct, sizeof(ct), &n),
               CORDON_E_LIMIT);
  cr_assert_eq(noise_cipher_decrypt(&rx, NULL, 0, ct, n, pt, sizeof(pt), &m), CORDON_E_LIMIT);
  cr_assert_eq(tx.n, UINT64_MAX, "the reserved nonce is never used");
  noise_cipher_release(&tx);
  noise_cipher_release(&rx);
}

/* ---- handshake -------------------------------------------------------- */

Test(noise, handshake_completes_with_matching_hash_and_keys) {
  struct noise_handshake *hi, *hr;
  struct noise_session *si, *sr;
  uint8_t buf[512], hi_h[64], hr_h[64], rs[32];
  struct keys k;
  size_t n;

  keys_make(&k);
  hs_pair(&k, &hi, &hr);
  cr_assert_eq(noise_handshake_hash(hi, hi_h), CORDON_E_INTERNAL);
  cr_assert_eq(noise_handshake_remote_static(hi, rs), CORDON_E_INTERNAL);
  cr_assert_eq(noise_handshake_read_message(hi, buf, 32, NULL, 0, &n), CORDON_E_INTERNAL,
               "not the initiator's turn to read");
  n = hs_write(hi, "one", buf, sizeof(buf));
  cr_assert_eq(n, NOISE_MSG1_LEN(3));
  hs_read_ok(hr, buf, n, "one");
  cr_assert_eq(noise_handshake_split(&hr, &sr), CORDON_E_INTERNAL);
  n = hs_write(hr, "two", buf, sizeof(buf));
  cr_assert_eq(n, NOISE_MSG2_LEN(3));
  hs_read_ok(hi, buf, n, "two");
  cr_assert_eq(noise_handshake_remote_static(hi, rs), 0);
  cr_assert_eq(sodium_memcmp(rs, k.r_pub, 32), 0);
  n = hs_write(hi, "three", buf, sizeof(buf));
  cr_assert_eq(n, NOISE_MSG3_LEN(5));
  hs_read_ok(hr, buf, n, "three");
  cr_assert_eq(noise_handshake_remote_static(hr, rs), 0);
  cr_assert_eq(sodium_memcmp(rs, k.i_pub, 32), 0);
  cr_assert_eq(noise_handshake_hash(hi, hi_h), 0);
  cr_assert_eq(noise_handshake_hash(hr, hr_h), 0);
  cr_assert_eq(memcmp(hi_h, hr_h, 64), 0);

  cr_assert_eq(noise_handshake_split(&hi, &si), 0);
  cr_assert_eq(noise_handshake_split(&hr, &sr), 0);
  cr_assert_null(hi, "split consumes the handshake");
  cr_assert_null(hr);
  cr_assert_eq(noise_handshake_split(&hi, &si), -EINVAL);
  noise_session_hash(sr, hr_h);
  cr_assert_eq(memcmp(hi_h, hr_h, 64), 0);
  noise_session_remote_static(si, rs);
  cr_assert_eq(memcmp(rs, k.r_pub, 32), 0);
  noise_session_remote_static(sr, rs);
  cr_assert_eq(memcmp(rs, k.i_pub, 32), 0);

  n = seal(si, "ping", buf, sizeof(buf));
  open_ok(sr, buf, n, "ping");
  n = seal(sr, "pong", buf, sizeof(buf));
  open_ok(si, buf, n, "pong");
  noise_session_free(si);
  noise_session_free(sr);
  noise_handshake_free(hi);
  noise_handshake_free(hr);
}

Test(noise, different_sessions_have_different_hashes) {
  struct noise_session *a, *b, *c, *d;
  uint8_t ha[64], hc[64];

  session_pair(&a, &b);
  session_pair(&c, &d);
  noise_session_hash(a, ha);
  noise_session_hash(c, hc);
  cr_assert_neq(memcmp(ha, hc, 64), 0);
  noise_session_free(a);
  noise_session_free(b);
  noise_session_free(c);
  noise_session_free(d);
}

/* Flip each bit of handshake message `which` (1..3) on the wire and check
 * that the handshake fails: message 1 carries no tag, so its tampering is
 * caught when the initiator reads message 2. */
static void flip_every_bit(int which) {
  uint8_t ieph[32], reph[32];
  struct keys k;
  size_t len = 0, flips = 0;

  keys_make(&k);
  randombytes_buf(ieph, sizeof(ieph));
  randombytes_buf(reph, sizeof(reph));
  for (size_t byte = 0;; byte++) {
    for (int bit = 0; bit < 8; bit++) {
      struct noise_handshake *hi, *hr;
      uint8_t m1[256], m2[256], m3[256], pl[256];
      size_t n1, n2, n3, n = 0;
      int rc;

      hs_pair(&k, &hi, &hr);
      cr_assert_eq(noise_handshake_set_ephemeral(hi, ieph), 0);
      cr_assert_eq(noise_handshake_set_ephemeral(hr, reph), 0);
      n1 = hs_write(hi, "hello", m1, sizeof(m1));
      if (which == 1) {
        len = n1;
        m1[byte] ^= (uint8_t)(1u << bit);
      }
      hs_read_ok(hr, m1, n1, which == 1 ? NULL : "hello");
      n2 = hs_write(hr, "welcome", m2, sizeof(m2));
      if (which == 2) {
        len = n2;
        m2[byte] ^= (uint8_t)(1u << bit);
      }
      rc = noise_handshake_read_message(hi, m2, n2, pl, sizeof(pl), &n);
      if (which <= 2) {
        cr_assert_eq(rc, CORDON_E_CRYPTO, "message %d byte %zu bit %d accepted", which, byte, bit);
        cr_assert_eq(noise_handshake_next(hi), NOISE_ACTION_FAILED);
        cr_assert_lt(noise_handshake_write_message(hi, NULL, 0, m3, sizeof(m3), &n3), 0);
      } else {
        cr_assert_eq(rc, 0);
        n3 = hs_write(hi, "me", m3, sizeof(m3));
        len = n3;
        m3[byte] ^= (uint8_t)(1u << bit);
        rc = noise_handshake_read_message(hr, m3, n3, pl, sizeof(pl), &n);
        cr_assert_eq(rc, CORDON_E_CRYPTO, "message 3 byte %zu bit %d accepted", byte, bit);
        cr_assert_eq(noise_handshake_next(hr), NOISE_ACTION_FAILED);
      }
      flips++;
      noise_handshake_free(hi);
      noise_handshake_free(hr);
    }
    if (byte + 1 >= len)
      break;
  }
  cr_assert_eq(flips, len * 8);
}

Test(noise, bit_flip_in_message1_is_rejected) {
  flip_every_bit(1);
}

Test(noise, bit_flip_in_message2_is_rejected) {
  flip_every_bit(2);
}

Test(noise, bit_flip_in_message3_is_rejected) {
  flip_every_bit(3);
}

Test(noise, wrong_pinned_key_aborts_before_message3) {
  struct noise_handshake *hi, *hr;
  uint8_t buf[512], other_pub[32], other_priv[32], rs[32];
  struct keys k;
  size_t n = 0, m = 0;

  keys_make(&k);
  cr_assert_eq(noise_keypair_generate(other_pub, other_priv), 0);

  /* The caller inspects the key after message 2 and stops. */
  hs_pair(&k, &hi, &hr);
  n = hs_write(hi, "", buf, sizeof(buf));
  hs_read_ok(hr, buf, n, "");
  n = hs_write(hr, "", buf, sizeof(buf));
  hs_read_ok(hi, buf, n, "");
  cr_assert_eq(noise_handshake_next(hi), NOISE_ACTION_WRITE);
  cr_assert_eq(noise_handshake_remote_static(hi, rs), 0);
  cr_assert_neq(sodium_memcmp(rs, other_pub, 32), 0, "the caller sees a different key");
  noise_handshake_free(hi);
  noise_handshake_free(hr);

  /* The handshake enforces a pin itself. */
  hs_pair(&k, &hi, &hr);
  cr_assert_eq(noise_handshake_pin_remote(hi, other_pub), 0);
  cr_assert_eq(noise_handshake_pin_remote(hr, other_pub), CORDON_E_INTERNAL);
  n = hs_write(hi, "", buf, sizeof(buf));
  hs_read_ok(hr, buf, n, "");
  n = hs_write(hr, "", buf, sizeof(buf));
  cr_assert_eq(noise_handshake_read_message(hi, buf, n, NULL, 0, &m), CORDON_E_UNKNOWN_KEY);
  cr_assert_eq(noise_handshake_next(hi), NOISE_ACTION_FAILED);
  cr_assert_eq(noise_handshake_write_message(hi, NULL, 0, buf, sizeof(buf), &m),
               CORDON_E_UNKNOWN_KEY, "nothing can be written after a pin mismatch");
  cr_assert_eq(noise_handshake_remote_static(hi, rs), CORDON_E_UNKNOWN_KEY);
  noise_handshake_free(hi);
  noise_handshake_free(hr);

  /* The right pin lets it through. */
  hs_pair(&k, &hi, &hr);
  cr_assert_eq(noise_handshake_pin_remote(hi, k.r_pub), 0);
  n = hs_write(hi, "", buf, sizeof(buf));
  hs_read_ok(hr, buf, n, "");
  n = hs_write(hr, "", buf, sizeof(buf));
  hs_read_ok(hi, buf, n, "");
  cr_assert_eq(noise_handshake_next(hi), NOISE_ACTION_WRITE);
  noise_handshake_free(hi);
  noise_handshake_free(hr);
}

Test(noise, low_order_ephemeral_in_message1_is_rejected) {
  for (size_t i = 0; i < sizeof(low_order_points) / sizeof(low_order_points[0]); i++) {
    struct noise_handshake *hi, *hr;
    uint8_t msg[32], buf[256];
    struct keys k;
    size_t n = 0;

    keys_make(&k);
    hs_pair(&k, &hi, &hr);
    hex_decode(low_order_points[i], msg, sizeof(msg));
    cr_assert_eq(noise_handshake_read_message(hr, msg, sizeof(msg), NULL, 0, &n), 0);
    cr_assert_eq(noise_handshake_write_message(hr, NULL, 0, buf, sizeof(buf), &n), CORDON_E_CRYPTO,
                 "point %zu accepted", i);
    cr_assert_eq(noise_handshake_next(hr), NOISE_ACTION_FAILED);
    noise_handshake_free(hi);
    noise_handshake_free(hr);
  }
}

Test(noise, low_order_ephemeral_in_message2_is_rejected) {
  for (size_t i = 0; i < sizeof(low_order_points) / sizeof(low_order_points[0]); i++) {
    struct noise_handshake *hi, *hr;
    uint8_t buf[256], pl[64];
    struct keys k;
    size_t n = 0;

    keys_make(&k);
    hs_pair(&k, &hi, &hr);
    n = hs_write(hi, "", buf, sizeof(buf));
    hs_read_ok(hr, buf, n, "");
    n = hs_write(hr, "", buf, sizeof(buf));
    hex_decode(low_order_points[i], buf, 32); /* replace the responder's e */
    cr_assert_eq(noise_handshake_read_message(hi, buf, n, pl, sizeof(pl), &n), CORDON_E_CRYPTO,
                 "point %zu accepted", i);
    cr_assert_eq(noise_handshake_next(hi), NOISE_ACTION_FAILED);
    noise_handshake_free(hi);
    noise_handshake_free(hr);
  }
}

Test(noise, prologue_mismatch_fails_at_message2) {
  uint8_t ps[NOISE_PROLOGUE_LEN], pp[NOISE_PROLOGUE_LEN], buf[256];
  struct noise_handshake *hi, *hr;
  struct keys k;
  size_t n = 0;

  keys_make(&k);
  prologue(NOISE_MODE_SESSION, ps);
  prologue(NOISE_MODE_PAIRING, pp);
  cr_assert_eq(noise_handshake_new(NOISE_INITIATOR, k.i_priv, ps, sizeof(ps), &hi), 0);
  cr_assert_eq(noise_handshake_new(NOISE_RESPONDER, k.r_priv, pp, sizeof(pp), &hr), 0);
  n = hs_write(hi, "", buf, sizeof(buf));
  hs_read_ok(hr, buf, n, "");
  n = hs_write(hr, "", buf, sizeof(buf));
  cr_assert_eq(noise_handshake_read_message(hi, buf, n, NULL, 0, &n), CORDON_E_CRYPTO);
  noise_handshake_free(hi);
  noise_handshake_free(hr);
}

Test(noise, malformed_handshake_messages) {
  struct noise_handshake *hi, *hr;
  uint8_t buf[NOISE_MAX_MESSAGE + 1], pl[64];
  struct keys k;
  size_t n = 0;

  keys_make(&k);
  /* Too short for "e". */
  hs_pair(&k, &hi, &hr);
  memset(buf, 0x42, sizeof(buf));
  cr_assert_eq(noise_handshake_read_message(hr, buf, 31, pl, sizeof(pl), &n), CORDON_E_PROTOCOL);
  cr_assert_eq(noise_handshake_read_message(hr, buf, 32, pl, sizeof(pl), &n), CORDON_E_PROTOCOL,
               "sticky");
  noise_handshake_free(hi);
  noise_handshake_free(hr);

  /* Too long. */
  hs_pair(&k, &hi, &hr);
  cr_assert_eq(noise_handshake_read_message(hr, buf, sizeof(buf), NULL, 0, &n), CORDON_E_LIMIT);
  noise_handshake_free(hr);
  cr_assert_eq(noise_handshake_write_message(hi, buf, NOISE_MAX_MESSAGE - 31, pl, sizeof(pl), &n),
               CORDON_E_LIMIT);
  noise_handshake_free(hi);

  /* Message 2 without room for the payload tag; payload buffer too small. */
  hs_pair(&k, &hi, &hr);
  n = hs_write(hi, "", buf, sizeof(buf));
  hs_read_ok(hr, buf, n, "");
  n = hs_write(hr, "a payload", buf, sizeof(buf));
  cr_assert_eq(noise_handshake_read_message(hi, buf, n, pl, 3, &n), -ENOBUFS);
  cr_assert_eq(noise_handshake_next(hi), NOISE_ACTION_READ, "-ENOBUFS changes nothing");
  cr_assert_eq(noise_handshake_read_message(hi, buf, NOISE_MSG2_LEN(0) - 1, pl, sizeof(pl), &n),
               CORDON_E_PROTOCOL);
  noise_handshake_free(hi);
  noise_handshake_free(hr);

  /* Ephemeral injection only before this side's first message. */
  hs_pair(&k, &hi, &hr);
  n = hs_write(hi, "", buf, sizeof(buf));
  cr_assert_eq(noise_handshake_set_ephemeral(hi, k.i_priv), CORDON_E_INTERNAL);
  cr_assert_eq(noise_handshake_write_message(hi, NULL, 0, buf, sizeof(buf), &n), CORDON_E_INTERNAL);
  noise_handshake_free(hi);
  noise_handshake_free(hr);
}

/* ---- transport -------------------------------------------------------- */

Test(noise, replayed_record_is_rejected_and_sticky) {
  struct noise_session *a, *b;
  uint8_t r0[64], r1[64], out[64];
  size_t n0, n1, n = 0;

  session_pair(&a, &b);
  n0 = seal(a, "first", r0, sizeof(r0));
  n1 = seal(a, "second", r1, sizeof(r1));
  open_ok(b, r0, n0, "first");
  cr_assert_eq(open_rc(b, r0, n0), CORDON_E_CRYPTO);
  cr_assert_eq(noise_session_error(b), CORDON_E_CRYPTO);
  cr_assert_eq(open_rc(b, r1, n1), CORDON_E_CRYPTO, "the session stays unusable");
  cr_assert_eq(noise_session_encrypt(b, (const uint8_t *)"x", 1, out, sizeof(out), &n),
               CORDON_E_CRYPTO);
  noise_session_free(a);
  noise_session_free(b);
}

Test(noise, reordered_record_is_rejected) {
  struct noise_session *a, *b;
  uint8_t r0[64], r1[64];
  size_t n0, n1;

  session_pair(&a, &b);
  n0 = seal(a, "first", r0, sizeof(r0));
  n1 = seal(a, "second", r1, sizeof(r1));
  cr_assert_eq(open_rc(b, r1, n1), CORDON_E_CRYPTO);
  cr_assert_eq(open_rc(b, r0, n0), CORDON_E_CRYPTO);
  noise_session_free(a);
  noise_session_free(b);
}

Test(noise, dropped_record_is_detected) {
  struct noise_session *a, *b;
  uint8_t r[3][64];
  size_t n[3];

  session_pair(&a, &b);
  for (int i = 0; i < 3; i++)
    n[i] = seal(a, "record", r[i], sizeof(r[i]));
  open_ok(b, r[0], n[0], "record");
  cr_assert_eq(open_rc(b, r[2], n[2]), CORDON_E_CRYPTO, "record 1 was dropped");
  noise_session_free(a);
  noise_session_free(b);
}

Test(noise, duplicated_record_is_rejected) {
  struct noise_session *a, *b;
  uint8_t r0[64], r1[64];
  size_t n0, n1;

  session_pair(&a, &b);
  n0 = seal(a, "first", r0, sizeof(r0));
  n1 = seal(a, "second", r1, sizeof(r1));
  open_ok(b, r0, n0, "first");
  open_ok(b, r1, n1, "second");
  cr_assert_eq(open_rc(b, r1, n1), CORDON_E_CRYPTO);
  noise_session_free(a);
  noise_session_free(b);
}

Test(noise, reflected_record_is_rejected) {
  struct noise_session *a, *b;
  uint8_t r0[64];
  size_t n0;

  session_pair(&a, &b);
  n0 = seal(a, "to b", r0, sizeof(r0));
  cr_assert_eq(open_rc(a, r0, n0), CORDON_E_CRYPTO, "a's own record sent back to a");
  /* And a responder record reflected to the responder. */
  n0 = seal(b, "to a", r0, sizeof(r0));
  cr_assert_eq(open_rc(b, r0, n0), CORDON_E_CRYPTO);
  noise_session_free(a);
  noise_session_free(b);
}

Test(noise, record_from_another_session_is_rejected) {
  struct noise_session *a1, *b1, *a2, *b2;
  uint8_t r[64];
  size_t n;

  session_pair(&a1, &b1);
  session_pair(&a2, &b2);
  n = seal(a1, "for b1", r, sizeof(r));
  cr_assert_eq(open_rc(b2, r, n), CORDON_E_CRYPTO);
  open_ok(b1, r, n, "for b1");
  noise_session_free(a1);
  noise_session_free(b1);
  noise_session_free(a2);
  noise_session_free(b2);
}

Test(noise, tampered_or_short_records_are_rejected) {
  struct noise_session *a, *b;
  uint8_t r[64];
  size_t n;

  session_pair(&a, &b);
  n = seal(a, "payload", r, sizeof(r));
  for (size_t i = 0; i < n; i++) {
    struct noise_session *x, *y;
    uint8_t t[64];
    size_t m;
    session_pair(&x, &y);
    m = seal(x, "payload", t, sizeof(t));
    t[i] ^= 0x01;
    cr_assert_eq(open_rc(y, t, m), CORDON_E_CRYPTO, "flip in byte %zu accepted", i);
    noise_session_free(x);
    noise_session_free(y);
  }
  cr_assert_eq(open_rc(b, r, NOISE_TAG_LEN - 1), CORDON_E_PROTOCOL);
  cr_assert_eq(open_rc(b, r, n), CORDON_E_PROTOCOL, "sticky");
  noise_session_free(a);
  noise_session_free(b);
}

Test(noise, empty_and_largest_records_round_trip_in_place) {
  struct noise_session *a, *b;
  size_t cap = NOISE_MAX_RECORD + 1, n = 0, m = 0;
  uint8_t *buf = malloc(cap), *copy = malloc(cap);
  uint8_t r[NOISE_TAG_LEN];

  cr_assert(buf && copy);
  session_pair(&a, &b);
  cr_assert_eq(noise_session_encrypt(a, NULL, 0, r, sizeof(r), &n), 0);
  cr_assert_eq(n, NOISE_TAG_LEN);
  cr_assert_eq(noise_session_decrypt(b, r, n, NULL, 0, &m), 0);
  cr_assert_eq(m, 0);

  randombytes_buf(buf, NOISE_MAX_PLAINTEXT);
  memcpy(copy, buf, NOISE_MAX_PLAINTEXT);
  cr_assert_eq(noise_session_encrypt(a, buf, NOISE_MAX_PLAINTEXT + 1, buf, cap, &n),
               CORDON_E_LIMIT);
  cr_assert_eq(noise_session_error(a), 0, "refusing a too-large plaintext changes nothing");
  cr_assert_eq(noise_session_encrypt(a, buf, NOISE_MAX_PLAINTEXT, buf, cap, &n), 0);
  cr_assert_eq(n, NOISE_MAX_RECORD);
  cr_assert_eq(noise_session_decrypt(b, buf, n, buf, cap, &m), 0);
  cr_assert_eq(m, NOISE_MAX_PLAINTEXT);
  cr_assert_eq(memcmp(buf, copy, m), 0);
  cr_assert_eq(noise_session_decrypt(b, buf, NOISE_MAX_RECORD + 1, buf, cap, &m), CORDON_E_LIMIT);
  noise_session_free(a);
  noise_session_free(b);
  free(buf);
  free(copy);
}

/* ---- rekey ------------------------------------------------------------ */

Test(noise, rekey_interop_both_directions) {
  struct noise_session *a, *b;
  uint8_t r[64];
  char msg[32];
  size_t n;

  session_pair(&a, &b);
  cr_assert_eq(noise_session_set_rekey_interval(a, 3), 0);
  cr_assert_eq(noise_session_set_rekey_interval(b, 3), 0);
  cr_assert_eq(noise_session_set_rekey_interval(b, 0), -EINVAL);
  for (int i = 0; i < 20; i++) {
    snprintf(msg, sizeof(msg), "a->b %d", i);
    n = seal(a, msg, r, sizeof(r));
    open_ok(b, r, n, msg);
    if (i % 2 == 0) {
      snprintf(msg, sizeof(msg), "b->a %d", i);
      n = seal(b, msg, r, sizeof(r));
      open_ok(a, r, n, msg);
    }
  }
  noise_session_free(a);
  noise_session_free(b);
}

Test(noise, rekey_really_changes_the_key) {
  struct noise_session *a, *b;
  uint8_t r[64];
  size_t n;

  session_pair(&a, &b);
  cr_assert_eq(noise_session_set_rekey_interval(a, 3), 0);
  for (int i = 0; i < 3; i++) {
    n = seal(a, "x", r, sizeof(r));
    open_ok(b, r, n, "x");
  }
  n = seal(a, "x", r, sizeof(r));
  cr_assert_eq(open_rc(b, r, n), CORDON_E_CRYPTO, "b did not rekey, a did");
  noise_session_free(a);
  noise_session_free(b);
}

Test(noise, default_rekey_happens_after_2_pow_20_records) {
  struct noise_session *a, *b, *c;
  uint8_t r[NOISE_TAG_LEN];
  size_t n = 0, m = 0;

  /* b uses the default interval; c is b's twin that never rekeys in time. */
  session_pair(&a, &b);
  cr_assert_eq(NOISE_REKEY_INTERVAL, (uint64_t)1 << 20);
  for (uint64_t i = 0; i < NOISE_REKEY_INTERVAL; i++) {
    cr_assert_eq(noise_session_encrypt(a, NULL, 0, r, sizeof(r), &n), 0);
    if (noise_session_decrypt(b, r, n, NULL, 0, &m) != 0)
      cr_assert_fail("record %llu", (unsigned long long)i);
  }
  /* Record 2^20 is sent under REKEY(k). */
  cr_assert_eq(noise_session_encrypt(a, NULL, 0, r, sizeof(r), &n), 0);
  cr_assert_eq(noise_session_decrypt(b, r, n, NULL, 0, &m), 0);
  noise_session_free(a);
  noise_session_free(b);

  session_pair(&a, &c);
  cr_assert_eq(noise_session_set_rekey_interval(c, (uint64_t)1 << 21), 0);
  for (uint64_t i = 0; i < NOISE_REKEY_INTERVAL; i++) {
    cr_assert_eq(noise_session_encrypt(a, NULL, 0, r, sizeof(r), &n), 0);
    if (noise_session_decrypt(c, r, n, NULL, 0, &m) != 0)
      cr_assert_fail("record %llu", (unsigned long long)i);
  }
  cr_assert_eq(noise_session_encrypt(a, NULL, 0, r, sizeof(r), &n), 0);
  cr_assert_eq(noise_session_decrypt(c, r, n, NULL, 0, &m), CORDON_E_CRYPTO);
  noise_session_free(a);
  noise_session_free(c);
}

/* ---- the example in docs/protocol/wire.md section 7 ------------------- */

static void expect_hex(const uint8_t *got, size_t len, const char *hex, const char *what) {
  uint8_t want[256];
  size_t n = hex_decode(hex, want, sizeof(want));
  cr_assert_eq(len, n, "%s: length %zu, want %zu", what, len, n);
  cr_assert_eq(memcmp(got, want, n), 0, "%s differs from docs/protocol/wire.md", what);
}

Test(noise, documented_example_transcript) {
  uint8_t is[32], rs[32], ie[32], re[32], pro[NOISE_PROLOGUE_LEN], pub[32];
  uint8_t buf[256], pl[64], h[64];
  struct noise_handshake *hi, *hr;
  struct noise_session *si, *sr;
  size_t n = 0, m = 0;

  hex_decode("e61ef9919cde45dd5f82166404bd08e38bceb5dfdfded0a34c8df7ed542214d1", is, 32);
  hex_decode("4a3acbfdb163dec651dfa3194dece676d437029c62a408b4c5ea9114246e4893", rs, 32);
  hex_decode("893e28b9dc6ca8d611ab664754b8ceb7bac5117349a4439a6b0569da977c464a", ie, 32);
  hex_decode("bbdb4cdbd309f1a1f2e1456967fe288cadd6f712d65dc7b7793d5e63da6b375b", re, 32);
  prologue(NOISE_MODE_SESSION, pro);
  expect_hex(pro, sizeof(pro), "636f72646f6e00000101", "prologue");
  cr_assert_eq(noise_public_key(is, pub), 0);
  expect_hex(pub, 32, "6bc3822a2aa7f4e6981d6538692b3cdf3e6df9eea6ed269eb41d93c22757b75a",
             "initiator static public");
  cr_assert_eq(noise_public_key(rs, pub), 0);
  expect_hex(pub, 32, "31e0303fd6418d2f8c0e78b91f22e8caed0fbe48656dcf4767e4834f701b8f62",
             "responder static public");

  cr_assert_eq(noise_handshake_new(NOISE_INITIATOR, is, pro, sizeof(pro), &hi), 0);
  cr_assert_eq(noise_handshake_new(NOISE_RESPONDER, rs, pro, sizeof(pro), &hr), 0);
  cr_assert_eq(noise_handshake_set_ephemeral(hi, ie), 0);
  cr_assert_eq(noise_handshake_set_ephemeral(hr, re), 0);
  n = hs_write(hi, "", buf, sizeof(buf));
  expect_hex(buf, n, "ca35def5ae56cec33dc2036731ab14896bc4c75dbb07a61f879f8e3afa4c7944",
             "message 1");
  hs_read_ok(hr, buf, n, "");
  n = hs_write(hr, "", buf, sizeof(buf));
  expect_hex(buf, n,
             "95ebc60d2b1fa672c1f46a8aa265ef51bfe38e7ccb39ec5be34069f144808843"
             "0505b6745ce64a5f33f0e8e3b83f11ce8802bca507f4f2d8b564dbe277e19661"
             "fed44a3b9204ed5278be33f4fb7f9115623f984e501b7efbbbbf6870c0cad821",
             "message 2");
  hs_read_ok(hi, buf, n, "");
  n = hs_write(hi, "", buf, sizeof(buf));
  expect_hex(buf, n,
             "99579e1c1ee15e422a57ddd6b16d37087b17558e8369c18991b4b2ca3a824abf"
             "92228b6b29a654487a02e12b3a8871892318aad6c4abbb3b26183a3d00d76309",
             "message 3");
  hs_read_ok(hr, buf, n, "");
  cr_assert_eq(noise_handshake_hash(hr, h), 0);
  expect_hex(h, 64,
             "8e30db8a51acf9f3dd4871d53df0c902849dcdbe8a714e2229a009787b2c79ca"
             "d191db99d41d1726e731d8d138981e518f6c7fcd1c6a036812e3eed119b25a63",
             "handshake hash");
  cr_assert_eq(noise_handshake_split(&hi, &si), 0);
  cr_assert_eq(noise_handshake_split(&hr, &sr), 0);
  n = seal(si, "ping", buf, sizeof(buf));
  expect_hex(buf, n, "813dc6d3da1445305e3c9484d49a6e97e47ca64b", "agent record");
  cr_assert_eq(noise_session_decrypt(sr, buf, n, pl, sizeof(pl), &m), 0);
  n = seal(sr, "pong", buf, sizeof(buf));
  expect_hex(buf, n, "cf58f2a90aff2009760ef040d71173963a536a80", "server record");
  cr_assert_eq(noise_session_decrypt(si, buf, n, pl, sizeof(pl), &m), 0);
  noise_session_free(si);
  noise_session_free(sr);
  noise_handshake_free(hi);
  noise_handshake_free(hr);
}
