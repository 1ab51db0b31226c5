/* server/relay.c: the relayed events' text. Every kind round-trips;
 * output is split into chunks of RELAY_CHUNK_MAX bytes, each under
 * PostgreSQL's 8000-byte limit with its own offset, which put back
 * together give the bytes; the decoder refuses a payload without the
 * cluster's MAC and every malformed field, and the encoder every field the
 * format cannot carry. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/relay.h"

#define INST "00112233445566778899aabbccddeeff"
#define JOB "0123456789abcdef0123456789abcdef"
#define DEV "fedcba9876543210fedcba9876543210"

static const uint8_t KEY[RELAY_KEY_LEN] = "a relay key of thirty-two bytes";

/* body (len bytes), a space and its MAC (relay.h), as a heap string */
static char *with_mac(const char *body, size_t len) {
  char *p = malloc(len + 34);
  cr_assert(p);
  memcpy(p, body, len);
  uint8_t mac[16];
  crypto_generichash(mac, sizeof(mac), (const unsigned char *)body, len, KEY, sizeof(KEY));
  p[len] = ' ';
  sodium_bin2hex(p + len + 1, 33, mac, sizeof(mac));
  return p;
}

struct got {
  struct relay_payload p[64];
  int n;
  int fail_at; /* emit fails on this call (0: never) */
};

static int collect(void *ctx, const struct relay_payload *p) {
  struct got *g = ctx;
  if (g->fail_at && g->n + 1 == g->fail_at)
    return -ENOBUFS;
  cr_assert_lt(g->n, 64);
  g->p[g->n++] = *p;
  return 0;
}

static void decode_ok(const struct relay_payload *p, struct relay_msg *m) {
  const char *why = NULL;
  cr_assert_eq(strlen(p->text), p->len);
  cr_assert_eq(relay_decode(KEY, p->text, p->len, m, &why), 0, "%s: %s", p->text, why);
  cr_assert_str_eq(m->instance, INST);
  cr_assert_not(m->ev.remote, "remote is the receiver's to set");
}

static int str_eq_opt(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

Test(relay, every_kind_round_trips) {
  const struct event evs[] = {
      {.kind = EVENT_JOB_STATE, .job_id = JOB, .state = "sent", .device_id = DEV, .user = "alice"},
      {.kind = EVENT_JOB_STATE, .job_id = JOB, .state = "failed", .code = "device_lost"},
      {.kind = EVENT_JOB_STATE,
       .job_id = JOB,
       .state = "cancelled",
       .device_id = DEV,
       .user = "A.b-c_9",
       .code = "agent_restarted"},
      {.kind = EVENT_DEVICE_ONLINE, .device_id = DEV, .user = "alice"},
      {.kind = EVENT_DEVICE_OFFLINE, .device_id = DEV},
      {.kind = EVENT_JOB_OUTPUT,
       .job_id = JOB,
       .device_id = DEV,
       .user = "bob",
       .stream = EVENT_STDERR,
       .offset = 12345678901234ull,
       .data = (const uint8_t *)"a\0b \"'\\\n",
       .len = 8},
  };
  uint64_t seq = 41;
  for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
    struct got g = {0};
    cr_assert_eq(relay_encode(KEY, INST, &seq, &evs[i], collect, &g), 0, "event %zu", i);
    cr_assert_eq(g.n, 1);
    cr_assert_eq(seq, 42 + i, "one payload: seq advanced by one");
    struct relay_msg m;
    decode_ok(&g.p[0], &m);
    cr_expect_eq(m.seq, 41 + i);
    const struct event *a = &evs[i], *b = &m.ev;
    cr_expect_eq(a->kind, b->kind, "event %zu", i);
    cr_expect(str_eq_opt(a->job_id, b->job_id), "event %zu job", i);
    cr_expect(str_eq_opt(a->device_id, b->device_id), "event %zu device", i);
    cr_expect(str_eq_opt(a->user, b->user), "event %zu user", i);
    cr_expect(str_eq_opt(a->state, b->state), "event %zu state", i);
    cr_expect(str_eq_opt(a->code, b->code), "event %zu code", i);
    if (a->kind == EVENT_JOB_OUTPUT) {
      cr_expect_eq(b->stream, a->stream);
      cr_expect_eq(b->offset, a->offset);
      cr_assert_eq(b->len, a->len);
      cr_expect_eq(memcmp(b->data, a->data, a->len), 0);
    }
    /* printable, no quote or backslash: safe in the NOTIFY's array literal */
    for (size_t k = 0; k < g.p[0].len; k++) {
      char c = g.p[0].text[k];
      cr_expect(c >= 0x20 && c <= 0x7e && c != '"' && c != '\'' && c != '\\', "byte %zu", k);
    }
  }
}

Test(relay, output_is_split_in_order_each_payload_under_the_limit) {
  size_t len = 3 * RELAY_CHUNK_MAX + 17;
  uint8_t *bytes = malloc(len);
  cr_assert(bytes);
  for (size_t i = 0; i < len; i++)
    bytes[i] = (uint8_t)(i * 131 + (i >> 8));
  const char user[] = "u234567890123456789012345678901234567890123456789012345678901234";
  cr_assert_eq(strlen(user), SERVER_DB_NAME_MAX);
  const struct event ev = {.kind = EVENT_JOB_OUTPUT,
                           .job_id = JOB,
                           .device_id = DEV,
                           .user = user,
                           .stream = EVENT_STDOUT,
                           .offset = 1000,
                           .data = bytes,
                           .len = len};
  struct got g = {0};
  uint64_t seq = UINT64_MAX - 10; /* the widest numbers too */
  cr_assert_eq(relay_encode(KEY, INST, &seq, &ev, collect, &g), 0);
  cr_assert_eq(g.n, 4);
  cr_expect_eq(seq, UINT64_MAX - 6);
  uint8_t *back = calloc(1, len);
  uint64_t at = ev.offset;
  for (int i = 0; i < g.n; i++) {
    cr_expect_lt(g.p[i].len, 8000, "PostgreSQL's payload limit");
    struct relay_msg m;
    decode_ok(&g.p[i], &m);
    cr_expect_eq(m.seq, UINT64_MAX - 10 + (uint64_t)i);
    cr_expect_eq(m.ev.offset, at, "chunk %d starts where the last ended", i);
    cr_expect_eq(m.ev.len, i < 3 ? RELAY_CHUNK_MAX : 17u);
    memcpy(back + (m.ev.offset - ev.offset), m.ev.data, m.ev.len);
    at += m.ev.len;
  }
  cr_expect_eq(at, ev.offset + len);
  cr_expect_eq(memcmp(back, bytes, len), 0, "the chunks put together are the bytes");
  free(back);

  /* an emit that fails stops the rest; the sequence counts what went */
  struct got h = {.fail_at = 3};
  seq = 0;
  cr_expect_eq(relay_encode(KEY, INST, &seq, &ev, collect, &h), -ENOBUFS);
  cr_expect_eq(h.n, 2);
  cr_expect_eq(seq, 2);
  /* no bytes: nothing to relay */
  struct event none = ev;
  none.len = 0;
  struct got z = {0};
  cr_expect_eq(relay_encode(KEY, INST, &seq, &none, collect, &z), 0);
  cr_expect_eq(z.n, 0);
  free(bytes);
}

Test(relay, the_encoder_refuses_fields_the_format_cannot_carry) {
  const struct event bad[] = {
      {.kind = EVENT_JOB_STATE, .job_id = "0123", .state = "done"},
      {.kind = EVENT_JOB_STATE, .job_id = JOB, .state = "bogus"},
      {.kind = EVENT_JOB_STATE, .job_id = JOB, .state = NULL},
      {.kind = EVENT_JOB_STATE, .job_id = JOB, .state = "done", .user = "al ice"},
      {.kind = EVENT_JOB_STATE, .job_id = JOB, .state = "done", .user = "-"},
      {.kind = EVENT_JOB_STATE, .job_id = JOB, .state = "done", .code = "Not_a_code"},
      {.kind = EVENT_JOB_STATE, .job_id = JOB, .state = "done", .device_id = "DEV"},
      {.kind = EVENT_DEVICE_ONLINE, .device_id = NULL},
      {.kind = EVENT_JOB_OUTPUT,
       .job_id = JOB,
       .stream = 3,
       .data = (const uint8_t *)"x",
       .len = 1},
      {.kind = (enum event_kind)9, .job_id = JOB},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct got g = {0};
    uint64_t seq = 7;
    cr_expect_eq(relay_encode(KEY, INST, &seq, &bad[i], collect, &g), -EINVAL, "event %zu", i);
    cr_expect_eq(g.n, 0, "event %zu: nothing emitted", i);
    cr_expect_eq(seq, 7);
  }
  const struct event ok = {.kind = EVENT_DEVICE_ONLINE, .device_id = DEV};
  uint64_t seq = 0;
  struct got g = {0};
  cr_expect_eq(relay_encode(KEY, "not-an-instance", &seq, &ok, collect, &g), -EINVAL);
}

Test(relay, the_decoder_refuses_every_malformed_payload) {
  static const char *const bad[] = {
      "",
      "cordon1",
      "cordon2 " INST " 1 online " DEV " alice",
      "cordon1 " INST " 1 online " DEV " alice ",
      " cordon1 " INST " 1 online " DEV " alice",
      "cordon1  " INST " 1 online " DEV " alice",
      "cordon1 00112233445566778899AABBCCDDEEFF 1 online " DEV " alice",
      "cordon1 " INST " 01 online " DEV " alice",
      "cordon1 " INST " -1 online " DEV " alice",
      "cordon1 " INST " 18446744073709551616 online " DEV " alice",
      "cordon1 " INST " 1 onlin " DEV " alice",
      "cordon1 " INST " 1 online " DEV,
      "cordon1 " INST " 1 online " DEV " alice extra",
      "cordon1 " INST " 1 online - alice",
      "cordon1 " INST " 1 online " DEV " .alice",
      "cordon1 " INST " 1 online " DEV " al\tice",
      "cordon1 " INST " 1 state " JOB " bogus - - -",
      "cordon1 " INST " 1 state - done - - -",
      "cordon1 " INST " 1 state " JOB " done - - Device_lost",
      "cordon1 " INST " 1 state " JOB " done - -",
      "cordon1 " INST " 1 output " JOB " - - 3 0 eA==",
      "cordon1 " INST " 1 output " JOB " - - 1 0 eA=",
      "cordon1 " INST " 1 output " JOB " - - 1 0 e!==",
      "cordon1 " INST " 1 output " JOB " - - 1 0 -",
      "cordon1 " INST " 1 output " JOB " - - 1 18446744073709551615 eA==",
      "cordon1 " INST " 1 output " JOB " - - 1 x eA==",
      /* found by tests/fuzz/fuzz_relay.c: libsodium decoded bytes above 0x7f */
      "cordon1 " INST " 1 output " JOB " - bob 1 77 a\370\377\377\377GVsbG8K",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct relay_msg m;
    const char *why = NULL;
    char *p = with_mac(bad[i], strlen(bad[i]));
    cr_expect_eq(relay_decode(KEY, p, strlen(p), &m, &why), -EINVAL, "payload %zu: %s", i, bad[i]);
    cr_expect(why && why[0], "payload %zu says why", i);
    free(p);
  }
  /* a NUL inside what the length covers is not a field's byte */
  const char nul[] = "cordon1 " INST " 1 online " DEV " ali\0e";
  char *p = with_mac(nul, sizeof(nul) - 1);
  struct relay_msg m;
  cr_expect_eq(relay_decode(KEY, p, sizeof(nul) - 1 + 1 + 32, &m, NULL), -EINVAL);
  free(p);
  /* the length is checked before anything: 8000 bytes are refused whatever they are */
  char *big = malloc(RELAY_PAYLOAD_MAX + 2);
  memset(big, 'a', RELAY_PAYLOAD_MAX + 1);
  big[RELAY_PAYLOAD_MAX + 1] = '\0';
  const char *why = NULL;
  cr_expect_eq(relay_decode(KEY, big, RELAY_PAYLOAD_MAX + 1, &m, &why), -EINVAL);
  cr_expect_str_eq(why, "too long");
  /* data decoding to more than a chunk: refused (the buffer holds one) */
  size_t over = RELAY_CHUNK_MAX + 3, b64 = (over + 2) / 3 * 4;
  int head = snprintf(big, RELAY_PAYLOAD_MAX + 2, "cordon1 " INST " 1 output " JOB " - - 1 0 ");
  cr_assert_lt((size_t)head + b64 + 33, RELAY_PAYLOAD_MAX);
  memset(big + head, 'A', b64);
  p = with_mac(big, (size_t)head + b64);
  cr_expect_eq(relay_decode(KEY, p, strlen(p), &m, &why), -EINVAL);
  cr_expect_str_eq(why, "bad data");
  free(p);
  /* a chunk of exactly RELAY_CHUNK_MAX bytes is read */
  b64 = (RELAY_CHUNK_MAX + 2) / 3 * 4;
  memset(big + head, 'A', b64);
  if (RELAY_CHUNK_MAX % 3 == 1)
    memcpy(big + head + b64 - 2, "==", 2);
  else if (RELAY_CHUNK_MAX % 3 == 2)
    big[head + b64 - 1] = '=';
  p = with_mac(big, (size_t)head + b64);
  cr_expect_eq(relay_decode(KEY, p, strlen(p), &m, &why), 0, "%s", why);
  cr_expect_eq(m.ev.len, RELAY_CHUNK_MAX);
  free(p);
  free(big);
}

/* What a role that may connect to the database but holds no key of the
 * cluster can send: refused before any field is read. */
Test(relay, a_payload_without_the_clusters_mac_is_refused) {
  const struct event ev = {.kind = EVENT_DEVICE_ONLINE, .device_id = DEV, .user = "alice"};
  struct got g = {0};
  uint64_t seq = 1;
  cr_assert_eq(relay_encode(KEY, INST, &seq, &ev, collect, &g), 0);
  struct relay_msg m;
  const char *why = NULL;
  char *text = g.p[0].text;
  size_t len = g.p[0].len;
  cr_assert_eq(relay_decode(KEY, text, len, &m, &why), 0, "%s", why);
  /* the MAC is what relay.h says: keyed BLAKE2b-128 of the body, in hex */
  char *again = with_mac(text, len - 33);
  cr_expect_str_eq(again, text);
  free(again);
  /* another key */
  uint8_t other[RELAY_KEY_LEN];
  const uint8_t secret[32] = {9};
  cr_assert_eq(relay_key_derive(secret, sizeof(secret), other), 0);
  cr_expect_eq(relay_decode(other, text, len, &m, &why), -EINVAL);
  cr_expect_str_eq(why, "bad MAC (not this cluster's)");
  /* one byte of the body changed (alice -> alicf) */
  char *forged = strdup(text);
  char *u = strstr(forged, "alice");
  u[4] = 'f';
  cr_expect_eq(relay_decode(KEY, forged, len, &m, &why), -EINVAL);
  cr_expect_str_eq(why, "bad MAC (not this cluster's)");
  /* no MAC at all */
  cr_expect_eq(relay_decode(KEY, text, len - 33, &m, &why), -EINVAL);
  cr_expect_eq(relay_decode(KEY, "x", 1, &m, &why), -EINVAL);
  cr_expect_str_eq(why, "no MAC");
  free(forged);
  /* the key: from a secret of 16 to 64 bytes, the same for the same secret */
  uint8_t k1[RELAY_KEY_LEN], k2[RELAY_KEY_LEN];
  cr_expect_eq(relay_key_derive(secret, 8, k1), -EINVAL);
  cr_expect_eq(relay_key_derive(secret, 65, k1), -EINVAL);
  cr_expect_eq(relay_key_derive(secret, 32, k1), 0);
  cr_expect_eq(relay_key_derive(secret, 32, k2), 0);
  cr_expect_eq(memcmp(k1, k2, sizeof(k1)), 0);
  cr_expect_neq(memcmp(k1, KEY, sizeof(k1)), 0);
}

Test(relay, a_payload_is_known_as_its_senders_by_its_head) {
  const char p[] = "cordon1 " INST " 5 online " DEV " alice";
  cr_expect(relay_is_from(p, strlen(p), INST));
  cr_expect_not(relay_is_from(p, strlen(p), DEV));
  cr_expect_not(relay_is_from(p, 40, INST), "cut before the instance's end");
  cr_expect_not(relay_is_from("hello", 5, INST));
}
