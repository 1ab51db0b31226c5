/* Noise_XX_25519_ChaChaPoly_BLAKE2b on libsodium, and cordon's transport
 * sessions built on it.
 *
 * This is the Noise Protocol Framework (revision 34) handshake pattern XX:
 *
 *   -> e
 *   <- e, ee, s, es
 *   -> s, se
 *
 * with DH = X25519 (crypto_scalarmult), CIPHER = ChaCha20-Poly1305 IETF
 * (nonce = 4 zero bytes || 64-bit little-endian counter), HASH = BLAKE2b-512
 * (HMAC and HKDF built on it with a 128-byte block, as the Noise spec says).
 * In cordon the agent is the initiator and the server the responder.
 * docs/protocol/wire.md describes every byte.
 *
 * Secrets (private keys, chaining key, cipher keys) live in sodium_malloc'd
 * memory and are wiped with sodium_memzero when they are no longer needed;
 * keys are compared with sodium_memcmp.
 *
 * Errors (all negative):
 *   CORDON_E_CRYPTO    any cryptographic failure: a message that does not
 *                      authenticate, an all-zero (low-order) DH result,
 *                      failure of a libsodium primitive.
 *   CORDON_E_PROTOCOL  a malformed message (too short for its pattern, a
 *                      transport record shorter than its tag).
 *   CORDON_E_LIMIT     a message or record above its size limit, or a
 *                      64-bit nonce that would reach 2^64-1.
 *   CORDON_E_UNKNOWN_KEY  the responder's static key differs from the pinned
 *                      one (noise_handshake_pin_remote).
 *   CORDON_E_INTERNAL  a call out of order (writing when it is the peer's
 *                      turn, splitting before the end, using a failed
 *                      handshake or session).
 *   -EINVAL            bad arguments; -ENOBUFS output buffer too small;
 *                      -ENOMEM.
 * Output parameters are written only on success. -EINVAL, -ENOBUFS and a
 * too-large plaintext are checked before anything changes and leave the
 * object as it was; any other error from a handshake or session call is
 * sticky: the object wipes its keys and every later call fails with the
 * same error.
 */
#ifndef CORDON_PROTO_NOISE_H
#define CORDON_PROTO_NOISE_H

#include <stddef.h>
#include <stdint.h>

#define NOISE_PROTOCOL_NAME "Noise_XX_25519_ChaChaPoly_BLAKE2b"
#define NOISE_KEY_LEN 32         /* X25519 keys and cipher keys */
#define NOISE_HASH_LEN 64        /* BLAKE2b-512; the handshake hash */
#define NOISE_TAG_LEN 16         /* Poly1305 tag */
#define NOISE_MAX_MESSAGE 65535u /* a handshake message (Noise spec limit) */

/* Handshake message sizes for a payload of p bytes. */
#define NOISE_MSG1_LEN(p) (NOISE_KEY_LEN + (p))
#define NOISE_MSG2_LEN(p) (NOISE_KEY_LEN + NOISE_KEY_LEN + NOISE_TAG_LEN + (p) + NOISE_TAG_LEN)
#define NOISE_MSG3_LEN(p) (NOISE_KEY_LEN + NOISE_TAG_LEN + (p) + NOISE_TAG_LEN)

/* A transport record is ciphertext || tag, at most NOISE_MAX_RECORD bytes
 * (one frame body), so the plaintext is at most NOISE_MAX_PLAINTEXT. Note:
 * this is above the Noise spec's 65535-byte message limit on purpose, so
 * that a result fits one record; ChaCha20-Poly1305 is fine with it. */
#define NOISE_MAX_RECORD ((2u << 20) + (64u << 10)) /* = FRAME_MAX_SESSION */
#define NOISE_MAX_PLAINTEXT (NOISE_MAX_RECORD - NOISE_TAG_LEN)

/* Records per direction after which that direction's key is replaced with
 * REKEY(k) (Noise spec 11.3). The nonce keeps counting. */
#define NOISE_REKEY_INTERVAL ((uint64_t)1 << 20)

/* The version carried in the prologue. Peers must use the same version or
 * the handshake fails (message 2 does not authenticate). */
#define NOISE_WIRE_VERSION 1u

/* ---- Keys ------------------------------------------------------------- */

/* Generate a static X25519 key pair. out_priv must be NOISE_KEY_LEN bytes,
 * ideally sodium_malloc'd. Returns 0 or CORDON_E_CRYPTO. */
int noise_keypair_generate(uint8_t out_pub[NOISE_KEY_LEN], uint8_t *out_priv);

/* The public key of a private key. Returns 0 or CORDON_E_CRYPTO. */
int noise_public_key(const uint8_t *priv, uint8_t out_pub[NOISE_KEY_LEN]);

/* ---- Prologue --------------------------------------------------------- */

enum noise_mode {
  NOISE_MODE_SESSION = 1, /* a paired agent's normal connection */
  NOISE_MODE_PAIRING = 2, /* enrolment with a pairing code */
};

#define NOISE_PROLOGUE_LEN 10

/* Build cordon's prologue, exactly NOISE_PROLOGUE_LEN bytes:
 *   "cordon" (63 6f 72 64 6f 6e) || 00 || version (uint16 big-endian) || mode
 * e.g. version 1, session: 63 6f 72 64 6f 6e 00 00 01 01
 *      version 1, pairing: 63 6f 72 64 6f 6e 00 00 01 02
 * Returns 0, or -EINVAL for an unknown mode, a version above 65535, or
 * out_cap < NOISE_PROLOGUE_LEN. */
int noise_prologue_build(unsigned version, enum noise_mode mode, uint8_t *out, size_t out_cap,
                         size_t *out_len);

/* ---- CipherState (Noise spec 5.1) ------------------------------------- */

/* Public so that sessions can embed it; treat the fields as private. Put it
 * in sodium_malloc'd memory: it holds a key. */
struct noise_cipher {
  uint8_t k[NOISE_KEY_LEN];
  uint64_t n;
  int has_key;
};

/* InitializeKey(k); k NULL means "empty" (encrypt/decrypt pass through). */
void noise_cipher_init(struct noise_cipher *c, const uint8_t *k);
/* Wipe the key. c may be NULL. */
void noise_cipher_release(struct noise_cipher *c);
/* SetNonce(n). */
void noise_cipher_set_nonce(struct noise_cipher *c, uint64_t n);
/* EncryptWithAd: out gets ciphertext || tag (in_len + 16 bytes), or the
 * plaintext copied when there is no key. out may equal in. The nonce 2^64-1
 * is reserved: CORDON_E_LIMIT when n has reached it. */
int noise_cipher_encrypt(struct noise_cipher *c, const uint8_t *ad, size_t ad_len,
                         const uint8_t *in, size_t in_len, uint8_t *out, size_t out_cap,
                         size_t *out_len);
/* DecryptWithAd: CORDON_E_CRYPTO if it does not authenticate (n is then
 * unchanged), CORDON_E_PROTOCOL if in_len < 16, CORDON_E_LIMIT at n = 2^64-1.
 * out may equal in. */
int noise_cipher_decrypt(struct noise_cipher *c, const uint8_t *ad, size_t ad_len,
                         const uint8_t *in, size_t in_len, uint8_t *out, size_t out_cap,
                         size_t *out_len);
/* Rekey(): k = first 32 bytes of ENCRYPT(k, 2^64-1, "", 32 zero bytes).
 * n is unchanged. CORDON_E_INTERNAL without a key. */
int noise_cipher_rekey(struct noise_cipher *c);

/* ---- HandshakeState (Noise spec 5.3) ---------------------------------- */

enum noise_role {
  NOISE_INITIATOR = 1, /* the agent */
  NOISE_RESPONDER = 2, /* the server */
};

/* What the handshake expects next. */
enum noise_action {
  NOISE_ACTION_WRITE = 1, /* call noise_handshake_write_message */
  NOISE_ACTION_READ,      /* call noise_handshake_read_message */
  NOISE_ACTION_SPLIT,     /* all three messages done: noise_handshake_split */
  NOISE_ACTION_FAILED,    /* an error happened; free it */
};

struct noise_handshake; /* opaque, sodium_malloc'd */
struct noise_session;   /* opaque, sodium_malloc'd */

/* Start a handshake. static_priv (NOISE_KEY_LEN bytes) is copied. The
 * prologue (cordon uses noise_prologue_build) must be identical on both
 * sides. Returns 0, -EINVAL, -ENOMEM or CORDON_E_CRYPTO. */
int noise_handshake_new(enum noise_role role, const uint8_t *static_priv, const uint8_t *prologue,
                        size_t prologue_len, struct noise_handshake **out_hs);

/* Wipe and free. hs may be NULL. */
void noise_handshake_free(struct noise_handshake *hs);

/* Tests and test vectors only: use priv as the ephemeral key instead of a
 * random one. Must be called before this side writes its first message.
 * Returns 0 or CORDON_E_INTERNAL (too late), CORDON_E_CRYPTO. */
int noise_handshake_set_ephemeral(struct noise_handshake *hs, const uint8_t *priv);

/* The initiator may pin the responder's static key before the handshake:
 * reading message 2 then fails with CORDON_E_UNKNOWN_KEY (sticky, nothing
 * more can be written) when the key differs. Responder: CORDON_E_INTERNAL. */
int noise_handshake_pin_remote(struct noise_handshake *hs, const uint8_t pinned[NOISE_KEY_LEN]);

enum noise_action noise_handshake_next(const struct noise_handshake *hs);

/* Write the next message with payload (may be empty; NULL when
 * payload_len is 0) into out. Sizes: NOISE_MSG1_LEN etc.; a message above
 * NOISE_MAX_MESSAGE is CORDON_E_LIMIT. out may not overlap payload. The
 * payload of message 1 is sent in clear (there is no key yet). */
int noise_handshake_write_message(struct noise_handshake *hs, const uint8_t *payload,
                                  size_t payload_len, uint8_t *out, size_t out_cap,
                                  size_t *out_len);

/* Read the peer's next message; its payload goes to out_payload (out_cap
 * bytes, may be NULL when 0; must not overlap msg). A message shorter than its pattern is
 * CORDON_E_PROTOCOL, one above NOISE_MAX_MESSAGE CORDON_E_LIMIT, one that
 * does not authenticate or gives an all-zero DH CORDON_E_CRYPTO. */
int noise_handshake_read_message(struct noise_handshake *hs, const uint8_t *msg, size_t msg_len,
                                 uint8_t *out_payload, size_t out_cap, size_t *out_len);

/* The peer's static public key, once known: for the initiator after reading
 * message 2 (compare it with the pinned key and free the handshake, without
 * writing message 3, if it differs), for the responder after message 3.
 * CORDON_E_INTERNAL before that. */
int noise_handshake_remote_static(const struct noise_handshake *hs, uint8_t out_key[NOISE_KEY_LEN]);

/* The handshake hash h. Only once all three messages are done (the value
 * both sides share); CORDON_E_INTERNAL before. */
int noise_handshake_hash(const struct noise_handshake *hs, uint8_t out_h[NOISE_HASH_LEN]);

/* Split(): once noise_handshake_next says NOISE_ACTION_SPLIT, turn the
 * handshake into the transport session (initiator sends with the first key,
 * responder with the second). The handshake is consumed: on success *hs is
 * set to NULL and its (secure) memory now belongs to the session, which
 * keeps the handshake hash and the remote static key; free the session
 * only. On failure *hs is left for the caller to free. Returns 0,
 * CORDON_E_INTERNAL (not finished) or CORDON_E_CRYPTO. */
int noise_handshake_split(struct noise_handshake **hs, struct noise_session **out_session);

/* ---- Transport sessions ----------------------------------------------- */

/* Wipe and free (sodium_free). s may be NULL. */
void noise_session_free(struct noise_session *s);

/* Encrypt one record (empty associated data): out gets pt_len + 16 bytes,
 * the body of one frame. pt_len may be 0; at most NOISE_MAX_PLAINTEXT
 * (CORDON_E_LIMIT). out may equal pt. After every NOISE_REKEY_INTERVAL
 * records the send key is rekeyed. */
int noise_session_encrypt(struct noise_session *s, const uint8_t *pt, size_t pt_len, uint8_t *out,
                          size_t out_cap, size_t *out_len);

/* Decrypt the next record from the peer: out gets ct_len - 16 bytes. Records
 * must arrive exactly in order, each once; anything else (a replayed,
 * reordered, dropped, duplicated, reflected or foreign record) fails with
 * CORDON_E_CRYPTO and the session becomes unusable for good — close the
 * connection. out may equal ct. Rekeys the receive key like the sender. */
int noise_session_decrypt(struct noise_session *s, const uint8_t *ct, size_t ct_len, uint8_t *out,
                          size_t out_cap, size_t *out_len);

/* The handshake hash, for binding pairing proofs and tickets to the
 * session. */
void noise_session_hash(const struct noise_session *s, uint8_t out_h[NOISE_HASH_LEN]);

/* The peer's static public key. */
void noise_session_remote_static(const struct noise_session *s, uint8_t out_key[NOISE_KEY_LEN]);

/* The sticky error, 0 while the session is usable. */
int noise_session_error(const struct noise_session *s);

/* Tests only: change the rekey interval (>= 1; both sides must agree). */
int noise_session_set_rekey_interval(struct noise_session *s, uint64_t interval);

#endif
