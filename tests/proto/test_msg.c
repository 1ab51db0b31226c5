#include "proto/msg.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Allocation counting: the test program replaces malloc and friends with
 * counting wrappers around glibc's own allocator (the documented way to
 * replace malloc), so a test can assert that a call allocated nothing and
 * that a failed call left nothing behind. Under AddressSanitizer, which owns
 * malloc, counting is off and LeakSanitizer checks leaks instead. */
#if defined(__SANITIZE_ADDRESS__)
#define ALLOC_COUNTING 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ALLOC_COUNTING 0
#endif
#endif
#ifndef ALLOC_COUNTING
#define ALLOC_COUNTING 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
static long alloc_calls, alloc_live;
void *malloc(size_t n) {
  void *p = __libc_malloc(n);
  if (p) {
    __atomic_add_fetch(&alloc_calls, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&alloc_live, 1, __ATOMIC_RELAXED);
  }
  return p;
}
void *calloc(size_t n, size_t size) {
  void *p = __libc_calloc(n, size);
  if (p) {
    __atomic_add_fetch(&alloc_calls, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&alloc_live, 1, __ATOMIC_RELAXED);
  }
  return p;
}
void *realloc(void *old, size_t n) {
  void *p = __libc_realloc(old, n);
  __atomic_add_fetch(&alloc_calls, 1, __ATOMIC_RELAXED);
  if (!old && p)
    __atomic_add_fetch(&alloc_live, 1, __ATOMIC_RELAXED);
  return p;
}
void free(void *p) {
  if (p)
    __atomic_sub_fetch(&alloc_live, 1, __ATOMIC_RELAXED);
  __libc_free(p);
}
#else
static long alloc_calls __attribute__((unused)), alloc_live __attribute__((unused));
#endif

/* ---- samples: one fully populated message of every type ---------------- */

static uint8_t id_job[CORDON_ID_LEN] = {0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
                                        0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f};
static uint8_t id_dev[CORDON_ID_LEN] = {0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7,
                                        0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf};
static uint8_t ticket_bytes[40] = {0x83, 0xa1, 'x', 0x01};
static uint8_t chunk_bytes[300];
static uint8_t out_bytes[] = "hello, world\n";
static uint8_t live_bytes[] = "line 1\n";
static uint8_t err_bytes[] = {0xff, 0xfe, 0x00, 'e', 'r', 'r'}; /* not UTF-8: bin is fine */
static char *sample_args[] = {"world", "", "caf\xc3\xa9", "--flag=a b"};
static uint8_t sample_pubkeys[2][MSG_KEY_LEN] = {{1, 2, 3}, {4, 5, 6}};

static const enum msg_type all_types[] = {
    MSG_HELLO,   MSG_WELCOME, MSG_PING,   MSG_PONG,   MSG_JOB,        MSG_CHUNK,
    MSG_RUNNING, MSG_RESULT,  MSG_ACK,    MSG_CANCEL, MSG_PAIR_PROOF, MSG_PAIR_DONE,
    MSG_KEYS,    MSG_UNPAIR,  MSG_GOAWAY, MSG_ERROR,  MSG_OUTPUT,
};
#define N_TYPES (sizeof(all_types) / sizeof(all_types[0]))

static struct msg sample(enum msg_type t) {
  struct msg m;
  memset(&m, 0, sizeof(m));
  m.type = t;
  switch (t) {
  case MSG_HELLO:
    m.hello.proto_min = 1;
    m.hello.proto_max = 3;
    m.hello.agent_version = "0.1.0+git.abc";
    m.hello.has_device_id = true;
    memcpy(m.hello.device_id, id_dev, CORDON_ID_LEN);
    m.hello.name = "laptop \xe2\x80\x94 alice";
    m.hello.platform = "linux";
    m.hello.best_level = MSG_LEVEL_CONTAINED;
    m.hello.downgrade_reason = "userns_denied";
    m.hello.mechanism = "cgroup+rlimit";
    m.hello.max_jobs = 4;
    break;
  case MSG_WELCOME:
    m.welcome.version = 1;
    m.welcome.time_ms = 1795000000123ull;
    memset(m.welcome.server_id, 0x5e, CORDON_ID_LEN);
    memset(m.welcome.session_id, 0x55, CORDON_ID_LEN);
    m.welcome.ping_ms = 15000;
    break;
  case MSG_PING:
    m.ping.nonce = 0x0123456789abcdefull;
    break;
  case MSG_PONG:
    m.pong.nonce = 7;
    break;
  case MSG_JOB:
    memcpy(m.job.job_id, id_job, CORDON_ID_LEN);
    m.job.ticket.data = ticket_bytes;
    m.job.ticket.len = sizeof(ticket_bytes);
    memset(m.job.ticket_sig, 0x51, MSG_SIG_LEN);
    memset(m.job.pkg_hash, 0x4a, MSG_HASH_LEN);
    m.job.pkg_size = 123456789;
    m.job.args = sample_args;
    m.job.n_args = sizeof(sample_args) / sizeof(sample_args[0]);
    break;
  case MSG_CHUNK:
    memcpy(m.chunk.job_id, id_job, CORDON_ID_LEN);
    m.chunk.offset = 65536;
    m.chunk.data.data = chunk_bytes;
    m.chunk.data.len = sizeof(chunk_bytes);
    break;
  case MSG_RUNNING:
    memcpy(m.running.job_id, id_job, CORDON_ID_LEN);
    break;
  case MSG_RESULT:
    memcpy(m.result.job_id, id_job, CORDON_ID_LEN);
    memcpy(m.result.device_id, id_dev, CORDON_ID_LEN);
    m.result.has_exit_code = true;
    m.result.exit_code = 3;
    m.result.stdout_buf.data = out_bytes;
    m.result.stdout_buf.len = sizeof(out_bytes) - 1;
    m.result.stderr_buf.data = err_bytes;
    m.result.stderr_buf.len = sizeof(err_bytes);
    m.result.stderr_truncated = true;
    m.result.wall_ms = 1234;
    m.result.has_oom_killed = true;
    m.result.oom_killed = false;
    m.result.orphans_killed = 2;
    m.result.has_kill_scope = true;
    m.result.kill_scope = 1; /* pid namespace */
    m.result.sandbox.requested = MSG_LEVEL_CONTAINED;
    m.result.sandbox.has_level = true;
    m.result.sandbox.level = MSG_LEVEL_ISOLATED;
    m.result.sandbox.mechanism = "bwrap+seccomp+cgroup";
    m.result.sandbox.limits.memory = MSG_ENFORCE_CGROUP;
    m.result.sandbox.limits.processes = MSG_ENFORCE_CGROUP;
    m.result.sandbox.limits.cpu = MSG_ENFORCE_RLIMIT;
    m.result.sandbox.limits.time = MSG_ENFORCE_PID_NAMESPACE;
    m.result.sandbox.limits.disk = MSG_ENFORCE_TMPFS;
    m.result.has_error = true;
    m.result.error.code = "cancelled";
    m.result.error.message = "the job was cancelled";
    break;
  case MSG_ACK:
    memcpy(m.ack.job_id, id_job, CORDON_ID_LEN);
    break;
  case MSG_CANCEL:
    memcpy(m.cancel.job_id, id_job, CORDON_ID_LEN);
    break;
  case MSG_PAIR_PROOF:
    m.pair_proof.role = MSG_ROLE_AGENT;
    memset(m.pair_proof.mac, 0xac, MSG_MAC_LEN);
    break;
  case MSG_PAIR_DONE:
    memcpy(m.pair_done.device_id, id_dev, CORDON_ID_LEN);
    m.pair_done.user = "alice";
    m.pair_done.name = "laptop";
    m.pair_done.platform = "linux";
    memset(m.pair_done.ticket_key, 0x7c, MSG_KEY_LEN);
    m.pair_done.publisher_keys = sample_pubkeys;
    m.pair_done.n_publisher_keys = 2;
    break;
  case MSG_KEYS:
    m.keys.serial = 2;
    memset(m.keys.ticket_key, 0x21, MSG_KEY_LEN);
    memset(m.keys.publisher_key, 0x22, MSG_KEY_LEN);
    memset(m.keys.ticket_sig, 0x23, MSG_SIG_LEN);
    memset(m.keys.publisher_sig, 0x24, MSG_SIG_LEN);
    break;
  case MSG_UNPAIR:
    break;
  case MSG_GOAWAY:
    m.goaway.code = MSG_GOAWAY_VERSION_UNSUPPORTED;
    m.goaway.message = "server speaks versions 1..1";
    m.goaway.has_retry_ms = true;
    m.goaway.retry_ms = 30000;
    break;
  case MSG_ERROR:
    m.error.code = "protocol_error";
    m.error.message = "";
    m.error.has_job_id = true;
    memcpy(m.error.job_id, id_job, CORDON_ID_LEN);
    break;
  case MSG_OUTPUT:
    memcpy(m.output.job_id, id_job, CORDON_ID_LEN);
    m.output.stream = MSG_STREAM_STDERR;
    m.output.offset = 4096;
    m.output.data.data = live_bytes;
    m.output.data.len = sizeof(live_bytes) - 1;
    break;
  }
  return m;
}

/* ---- helpers ------------------------------------------------------------ */

static void encode_ok(const struct msg *m, uint8_t **out, size_t *out_len) {
  struct cordon_diag d = {{0}};
  int rc = msg_encode_alloc(m, out, out_len, &d);
  cr_assert_eq(rc, 0, "encode %s: %d %s", msg_type_name(m->type), rc, d.msg);
}

static int decode(const uint8_t *b, size_t n) {
  struct msg m;
  int rc = msg_decode(b, n, &m, NULL);
  if (rc == 0)
    msg_release(&m);
  return rc;
}

static size_t unhex(const char *hex, uint8_t *out, size_t cap) {
  size_t n = 0;
  while (*hex) {
    if (*hex == ' ') {
      hex++;
      continue;
    }
    unsigned v;
    cr_assert(sscanf(hex, "%2x", &v) == 1);
    cr_assert(n < cap);
    out[n++] = (uint8_t)v;
    hex += 2;
  }
  return n;
}

static int decode_hex(const char *hex) {
  uint8_t buf[512];
  return decode(buf, unhex(hex, buf, sizeof(buf)));
}

enum mut_op { MUT_DEL, MUT_SET, MUT_ADD, MUT_DUP };

static bool key_eq(const msgpack_object *k, const char *name, size_t n) {
  return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
         memcmp(k->via.str.ptr, name, n) == 0;
}

/* Re-pack map o with the entry at path ("a" or "a.b") deleted, its value
 * replaced by raw bytes, a new entry path=raw added, or the entry doubled. */
static void pack_mut(msgpack_packer *pk, msgpack_sbuffer *sb, const msgpack_object *o,
                     const char *path, enum mut_op op, const uint8_t *raw, size_t raw_len,
                     int *hits) {
  cr_assert_eq(o->type, MSGPACK_OBJECT_MAP);
  const char *dot = strchr(path, '.');
  size_t klen = dot ? (size_t)(dot - path) : strlen(path);
  size_t n = o->via.map.size;
  if (!dot && op == MUT_DEL)
    n--;
  if (!dot && (op == MUT_ADD || op == MUT_DUP))
    n++;
  msgpack_pack_map(pk, n);
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object_kv *kv = &o->via.map.ptr[i];
    bool match = key_eq(&kv->key, path, klen);
    if (match && !dot)
      (*hits)++;
    if (match && !dot && op == MUT_DEL)
      continue;
    msgpack_pack_object(pk, kv->key);
    if (match && dot)
      pack_mut(pk, sb, &kv->val, dot + 1, op, raw, raw_len, hits);
    else if (match && op == MUT_SET)
      msgpack_sbuffer_write(sb, (const char *)raw, raw_len);
    else
      msgpack_pack_object(pk, kv->val);
    if (match && !dot && op == MUT_DUP) {
      msgpack_pack_object(pk, kv->key);
      msgpack_pack_object(pk, kv->val);
    }
  }
  if (!dot && op == MUT_ADD) {
    msgpack_pack_str_with_body(pk, path, klen);
    msgpack_sbuffer_write(sb, (const char *)raw, raw_len);
    (*hits)++;
  }
}

/* The sample of type t, encoded, then mutated. Caller frees *out. */
static void mutated(const struct msg *m, const char *path, enum mut_op op, const uint8_t *raw,
                    size_t raw_len, uint8_t **out, size_t *out_len) {
  uint8_t *enc;
  size_t enc_len;
  encode_ok(m, &enc, &enc_len);
  msgpack_unpacked up;
  size_t off = 0;
  msgpack_unpacked_init(&up);
  cr_assert_eq(msgpack_unpack_next(&up, (const char *)enc, enc_len, &off), MSGPACK_UNPACK_SUCCESS);
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  int hits = 0;
  pack_mut(&pk, &sb, &up.data, path, op, raw, raw_len, &hits);
  cr_assert_eq(hits, 1, "path %s matched %d times", path, hits);
  msgpack_unpacked_destroy(&up);
  free(enc);
  *out = (uint8_t *)sb.data;
  *out_len = sb.size;
}

static int decode_mut_raw(enum msg_type t, const char *path, enum mut_op op, const uint8_t *raw,
                          size_t raw_len) {
  struct msg m = sample(t);
  uint8_t *b;
  size_t n;
  mutated(&m, path, op, raw, raw_len, &b, &n);
  int rc = decode(b, n);
  free(b);
  return rc;
}

static int decode_mut(enum msg_type t, const char *path, enum mut_op op, const char *hex) {
  uint8_t raw[512];
  size_t n = hex ? unhex(hex, raw, sizeof(raw)) : 0;
  return decode_mut_raw(t, path, op, raw, n);
}

/* A msgpack str or bin header + n bytes of c. Caller frees. */
static uint8_t *raw_blob(bool bin, size_t n, uint8_t c, size_t *out_len) {
  uint8_t *b = malloc(n + 5);
  cr_assert(b);
  b[0] = bin ? 0xc6 : 0xdb;
  b[1] = (uint8_t)(n >> 24);
  b[2] = (uint8_t)(n >> 16);
  b[3] = (uint8_t)(n >> 8);
  b[4] = (uint8_t)n;
  memset(b + 5, c, n);
  *out_len = n + 5;
  return b;
}

static int decode_mut_blob(enum msg_type t, const char *path, bool bin, size_t n) {
  size_t len;
  uint8_t *raw = raw_blob(bin, n, 'a', &len);
  int rc = decode_mut_raw(t, path, MUT_SET, raw, len);
  free(raw);
  return rc;
}

/* The top-level keys of a sample's encoding, in order. */
static size_t sample_keys(enum msg_type t, char keys[][32], size_t cap) {
  struct msg m = sample(t);
  uint8_t *enc;
  size_t enc_len, n = 0, off = 0;
  encode_ok(&m, &enc, &enc_len);
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  cr_assert_eq(msgpack_unpack_next(&up, (const char *)enc, enc_len, &off), MSGPACK_UNPACK_SUCCESS);
  for (uint32_t i = 0; i < up.data.via.map.size && n < cap; i++) {
    const msgpack_object *k = &up.data.via.map.ptr[i].key;
    cr_assert(k->via.str.size < 32);
    memcpy(keys[n], k->via.str.ptr, k->via.str.size);
    keys[n][k->via.str.size] = '\0';
    n++;
  }
  msgpack_unpacked_destroy(&up);
  free(enc);
  return n;
}

/* ---- round trips --------------------------------------------------------- */

Test(msg, round_trips_every_type) {
  for (size_t i = 0; i < N_TYPES; i++) {
    struct msg m = sample(all_types[i]);
    uint8_t *a, *b;
    size_t alen, blen;
    encode_ok(&m, &a, &alen);

    struct msg d;
    struct cordon_diag diag = {{0}};
    int rc = msg_decode(a, alen, &d, &diag);
    cr_assert_eq(rc, 0, "decode %s: %d %s", msg_type_name(all_types[i]), rc, diag.msg);
    cr_expect_eq(d.type, all_types[i]);
    encode_ok(&d, &b, &blen);
    cr_expect_eq(alen, blen, "%s", msg_type_name(all_types[i]));
    cr_expect(alen == blen && memcmp(a, b, alen) == 0, "%s re-encodes differently",
              msg_type_name(all_types[i]));

    /* The caller-buffer form gives the same bytes; one byte less fails. */
    uint8_t *c = malloc(alen);
    size_t clen = 0;
    cr_assert_eq(msg_encode(&m, c, alen, &clen, NULL), 0);
    cr_expect_eq(clen, alen);
    cr_expect(memcmp(a, c, alen) == 0);
    clen = 99;
    cr_expect_eq(msg_encode(&m, c, alen - 1, &clen, NULL), -ENOBUFS);
    cr_expect_eq(clen, 99, "out_len written on failure");
    free(c);

    msg_release(&d);
    cr_expect_eq(d.type, 0, "release zeroes");
    free(a);
    free(b);
  }
}

Test(msg, decoded_fields_match_what_was_sent) {
  struct msg m = sample(MSG_HELLO), d;
  uint8_t *b;
  size_t n;
  encode_ok(&m, &b, &n);
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect_eq(d.hello.proto_min, 1);
  cr_expect_eq(d.hello.proto_max, 3);
  cr_expect_str_eq(d.hello.agent_version, "0.1.0+git.abc");
  cr_expect(d.hello.has_device_id);
  cr_expect(memcmp(d.hello.device_id, id_dev, CORDON_ID_LEN) == 0);
  cr_expect_str_eq(d.hello.name, m.hello.name);
  cr_expect_str_eq(d.hello.platform, "linux");
  cr_expect_eq(d.hello.best_level, MSG_LEVEL_CONTAINED);
  cr_expect_str_eq(d.hello.downgrade_reason, "userns_denied");
  cr_expect_str_eq(d.hello.mechanism, "cgroup+rlimit");
  cr_expect_eq(d.hello.max_jobs, 4);
  msg_release(&d);
  free(b);

  m = sample(MSG_JOB);
  encode_ok(&m, &b, &n);
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect_eq(d.job.n_args, 4);
  for (size_t i = 0; i < 4; i++)
    cr_expect_str_eq(d.job.args[i], sample_args[i]);
  cr_expect_eq(d.job.ticket.len, sizeof(ticket_bytes));
  cr_expect(memcmp(d.job.ticket.data, ticket_bytes, sizeof(ticket_bytes)) == 0);
  cr_expect(d.job.ticket.data != ticket_bytes, "decoded messages own their memory");
  cr_expect_eq(d.job.pkg_size, 123456789);
  msg_release(&d);
  free(b);

  m = sample(MSG_RESULT);
  encode_ok(&m, &b, &n);
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect(d.result.has_exit_code && d.result.exit_code == 3);
  cr_expect(!d.result.has_signal);
  cr_expect_eq(d.result.stderr_buf.len, sizeof(err_bytes));
  cr_expect(memcmp(d.result.stderr_buf.data, err_bytes, sizeof(err_bytes)) == 0);
  cr_expect(d.result.stderr_truncated && !d.result.stdout_truncated);
  cr_expect(d.result.has_oom_killed && !d.result.oom_killed);
  cr_expect(d.result.has_kill_scope && d.result.kill_scope == 1);
  cr_expect_eq(d.result.sandbox.level, MSG_LEVEL_ISOLATED);
  cr_expect_null(d.result.sandbox.downgrade_reason);
  cr_expect_eq(d.result.sandbox.limits.time, MSG_ENFORCE_PID_NAMESPACE);
  cr_expect_str_eq(d.result.error.code, "cancelled");
  msg_release(&d);
  free(b);

  m = sample(MSG_PAIR_DONE);
  encode_ok(&m, &b, &n);
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect_eq(d.pair_done.n_publisher_keys, 2);
  cr_expect(memcmp(d.pair_done.publisher_keys, sample_pubkeys, sizeof(sample_pubkeys)) == 0);
  msg_release(&d);
  free(b);
}

Test(msg, encodes_a_known_ping_byte_for_byte) {
  struct msg m = {.type = MSG_PING, .ping = {.nonce = 1}};
  uint8_t buf[64], want[64];
  size_t n, wn = unhex("82 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 01", want, sizeof(want));
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &n, NULL), 0);
  cr_expect_eq(n, wn);
  cr_expect(memcmp(buf, want, wn) == 0);
}

Test(msg, encodes_optional_absent_as_omitted_and_nullable_as_nil) {
  struct msg m = sample(MSG_HELLO);
  m.hello.has_device_id = false;
  m.hello.name = NULL;
  m.hello.mechanism = NULL;
  m.hello.best_level = MSG_LEVEL_ISOLATED;
  m.hello.downgrade_reason = NULL;
  uint8_t *b;
  size_t n;
  encode_ok(&m, &b, &n);
  struct msg d;
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect(!d.hello.has_device_id);
  cr_expect_null(d.hello.name);
  cr_expect_null(d.hello.mechanism);
  cr_expect_null(d.hello.downgrade_reason);
  msg_release(&d);
  /* 7 keys: t, proto_min, proto_max, agent_version, platform, best_level,
   * downgrade_reason (nil), max_jobs = 8 entries */
  cr_expect_eq(b[0], 0x88);
  free(b);
}

Test(msg, accepts_any_key_order_and_non_shortest_integers) {
  /* {"nonce": uint64 1, "t": "pong"} */
  cr_expect_eq(decode_hex("82 a5 6e 6f 6e 63 65 cf 00 00 00 00 00 00 00 01 a1 74 a4 70 6f 6e 67"),
               0);
  /* a positive value in a signed format */
  cr_expect_eq(decode_hex("82 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 d3 00 00 00 00 00 00 00 05"),
               0);
}

Test(msg, a_result_for_a_refused_job_round_trips) {
  struct msg m = sample(MSG_RESULT);
  m.result.has_exit_code = false;
  m.result.stdout_buf = (struct msg_bytes){NULL, 0};
  m.result.stderr_buf = (struct msg_bytes){NULL, 0};
  m.result.has_oom_killed = false;
  m.result.sandbox.has_level = false;
  m.result.sandbox.mechanism = NULL;
  m.result.sandbox.downgrade_reason = "bwrap_unavailable";
  m.result.error.code = "sandbox_unavailable";
  uint8_t *b, *c;
  size_t n, cn;
  encode_ok(&m, &b, &n);
  struct msg d;
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect(!d.result.sandbox.has_level);
  cr_expect_null(d.result.stdout_buf.data);
  cr_expect_eq(d.result.stdout_buf.len, 0);
  encode_ok(&d, &c, &cn);
  cr_expect(n == cn && memcmp(b, c, n) == 0);
  msg_release(&d);
  free(b);
  free(c);
}

/* ---- the validator runs first -------------------------------------------- */

Test(msg, rejects_huge_declared_counts_without_allocating) {
  static const struct {
    const char *hex;
    int err;
  } cases[] = {
      {"dd ff ff ff ff", CORDON_E_PROTOCOL},
      {"df ff ff ff ff", CORDON_E_PROTOCOL},
      {"db ff ff ff ff", CORDON_E_LIMIT},
      {"c6 ff ff ff ff", CORDON_E_LIMIT},
      {"82 a1 74 a3 6a 6f 62 a4 61 72 67 73 dd ff ff ff ff", CORDON_E_PROTOCOL},
      {"82 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 df 00 01 00 00", CORDON_E_PROTOCOL},
      {"82 a1 74 a6 72 65 73 75 6c 74 a6 73 74 64 6f 75 74 c6 00 10 00 00", CORDON_E_PROTOCOL},
      {"82 a1 74 a5 65 72 72 6f 72 a7 6d 65 73 73 61 67 65 db 7f ff ff ff", CORDON_E_LIMIT},
  };
  enum { N = sizeof(cases) / sizeof(cases[0]) };
  uint8_t bufs[N][64];
  size_t lens[N];
  int rcs[N];
  for (size_t i = 0; i < N; i++)
    lens[i] = unhex(cases[i].hex, bufs[i], sizeof(bufs[i]));
  /* Nothing between the two readings but the decoder. */
  long before = alloc_calls;
  for (size_t i = 0; i < N; i++)
    rcs[i] = decode(bufs[i], lens[i]);
  long calls = alloc_calls - before;
  for (size_t i = 0; i < N; i++)
    cr_expect_eq(rcs[i], cases[i].err, "%s", cases[i].hex);
  cr_expect_eq(calls, 0, "decoding allocated %ld times", calls);
}

Test(msg, rejects_1000_deep_nesting) {
  size_t n = 0;
  uint8_t *b = malloc(2000);
  static const uint8_t head[] = {0x82, 0xa1, 't', 0xa4, 'p', 'i', 'n',
                                 'g',  0xa5, 'n', 'o',  'n', 'c', 'e'};
  memcpy(b, head, sizeof(head));
  n = sizeof(head);
  for (int i = 0; i < 1000; i++)
    b[n++] = 0x91;
  b[n++] = 0x01;
  struct cordon_diag d = {{0}};
  struct msg m;
  cr_expect_eq(msg_decode(b, n, &m, &d), CORDON_E_LIMIT);
  cr_expect(strstr(d.msg, "nesting") != NULL, "diag: %s", d.msg);
  free(b);
}

Test(msg, rejects_trailing_bytes) {
  struct msg m = sample(MSG_PING);
  uint8_t buf[64];
  size_t n;
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &n, NULL), 0);
  cr_expect_eq(decode(buf, n), 0);
  buf[n] = 0xc0;
  cr_expect_eq(decode(buf, n + 1), CORDON_E_PROTOCOL);
  cr_expect_eq(decode(buf, n - 1), CORDON_E_PROTOCOL);
}

Test(msg, rejects_ext_types) {
  cr_expect_eq(decode_mut(MSG_PING, "nonce", MUT_SET, "d3 00 00 00 00 00 00 00 01"), 0);
  cr_expect_eq(decode_mut(MSG_PING, "nonce", MUT_SET, "d7 00 00 00 00 00 00 00 00 01"),
               CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_PING, "nonce", MUT_SET, "d6 ff 00 00 00 01"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_JOB, "ticket", MUT_SET, "c7 01 05 00"), CORDON_E_PROTOCOL);
}

Test(msg, rejects_oversize_records) {
  uint8_t *b = calloc(1, MSG_ENCODED_MAX + 1);
  struct msg m;
  cr_expect_eq(msg_decode(b, MSG_ENCODED_MAX + 1, &m, NULL), CORDON_E_LIMIT);
  free(b);
}

Test(msg, rejects_empty_and_non_map_records) {
  struct msg m;
  cr_expect_eq(msg_decode((const uint8_t *)"", 0, &m, NULL), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("c0"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("92 a1 74 a4 70 69 6e 67"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("80"), CORDON_E_PROTOCOL);
}

/* ---- strict decoding ----------------------------------------------------- */

Test(msg, rejects_duplicate_keys) {
  for (size_t i = 0; i < N_TYPES; i++) {
    char keys[32][32];
    size_t n = sample_keys(all_types[i], keys, 32);
    for (size_t k = 0; k < n; k++)
      cr_expect_eq(decode_mut(all_types[i], keys[k], MUT_DUP, NULL), CORDON_E_PROTOCOL,
                   "%s.%s doubled", msg_type_name(all_types[i]), keys[k]);
  }
  cr_expect_eq(decode_mut(MSG_RESULT, "sandbox.level", MUT_DUP, NULL), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_RESULT, "sandbox.limits.disk", MUT_DUP, NULL), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_RESULT, "error.code", MUT_DUP, NULL), CORDON_E_PROTOCOL);
  /* the same key with a different value */
  cr_expect_eq(decode_hex("83 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 01 a5 6e 6f 6e 63 65 02"),
               CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("83 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 01 a1 74 a4 70 69 6e 67"),
               CORDON_E_PROTOCOL);
}

Test(msg, rejects_unknown_and_missing_types) {
  cr_expect_eq(decode_hex("82 a1 74 a5 62 6f 67 75 73 a5 6e 6f 6e 63 65 01"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("82 a1 74 a5 50 49 4e 47 a5 6e 6f 6e 63 65 01"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("81 a5 6e 6f 6e 63 65 01"), CORDON_E_PROTOCOL);          /* no t */
  cr_expect_eq(decode_hex("82 a1 74 01 a5 6e 6f 6e 63 65 01"), CORDON_E_PROTOCOL); /* t int */
  cr_expect_eq(decode_hex("82 a1 74 c4 04 70 69 6e 67 a5 6e 6f 6e 63 65 01"),
               CORDON_E_PROTOCOL); /* t bin */
  cr_expect_eq(decode_hex("82 a1 74 a5 70 69 6e 67 00 a5 6e 6f 6e 63 65 01"),
               CORDON_E_PROTOCOL);                              /* "ping\0" */
  cr_expect_eq(decode_hex("81 a1 74 a6 75 6e 70 61 69 72"), 0); /* unpair */
}

Test(msg, rejects_unknown_keys) {
  for (size_t i = 0; i < N_TYPES; i++)
    cr_expect_eq(decode_mut(all_types[i], "extra", MUT_ADD, "c0"), CORDON_E_PROTOCOL, "%s",
                 msg_type_name(all_types[i]));
  cr_expect_eq(decode_mut(MSG_RESULT, "sandbox.extra", MUT_ADD, "01"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_RESULT, "sandbox.limits.network", MUT_ADD, "a4 6e 6f 6e 65"),
               CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_RESULT, "error.t", MUT_ADD, "a1 78"), CORDON_E_PROTOCOL);
  /* a key that is a prefix or extension of a known key */
  cr_expect_eq(decode_mut(MSG_PING, "nonc", MUT_ADD, "01"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_PING, "nonce2", MUT_ADD, "01"), CORDON_E_PROTOCOL);
  /* non-string keys */
  cr_expect_eq(decode_hex("83 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 01 01 01"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("83 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 01 c4 01 74 01"),
               CORDON_E_PROTOCOL);
}

static bool is_optional(enum msg_type t, const char *key) {
  static const struct {
    enum msg_type t;
    const char *key;
  } opt[] = {{MSG_HELLO, "device_id"}, {MSG_HELLO, "name"},        {MSG_HELLO, "mechanism"},
             {MSG_GOAWAY, "retry_ms"}, {MSG_RESULT, "kill_scope"}, {MSG_ERROR, "job_id"}};
  for (size_t i = 0; i < sizeof(opt) / sizeof(opt[0]); i++)
    if (opt[i].t == t && strcmp(opt[i].key, key) == 0)
      return true;
  return false;
}

Test(msg, rejects_missing_required_keys) {
  for (size_t i = 0; i < N_TYPES; i++) {
    char keys[32][32];
    size_t n = sample_keys(all_types[i], keys, 32);
    for (size_t k = 0; k < n; k++) {
      int want = is_optional(all_types[i], keys[k]) ? 0 : CORDON_E_PROTOCOL;
      cr_expect_eq(decode_mut(all_types[i], keys[k], MUT_DEL, NULL), want, "%s without %s",
                   msg_type_name(all_types[i]), keys[k]);
    }
  }
  static const char *const nested[] = {
      "sandbox.requested",        "sandbox.level",      "sandbox.mechanism",
      "sandbox.downgrade_reason", "sandbox.limits",     "sandbox.limits.memory",
      "sandbox.limits.processes", "sandbox.limits.cpu", "sandbox.limits.time",
      "sandbox.limits.disk",      "error.code",         "error.message",
  };
  for (size_t i = 0; i < sizeof(nested) / sizeof(nested[0]); i++)
    cr_expect_eq(decode_mut(MSG_RESULT, nested[i], MUT_DEL, NULL), CORDON_E_PROTOCOL, "%s",
                 nested[i]);
}

Test(msg, rejects_wrong_types_everywhere) {
  /* float, map, nil(-ish) and ext never fit any field; true fits only bools */
  static const char *const bad[] = {"ca 3f 80 00 00", "cb 3f f0 00 00 00 00 00 00", "80",
                                    "81 a1 61 01"};
  for (size_t i = 0; i < N_TYPES; i++) {
    char keys[32][32];
    size_t n = sample_keys(all_types[i], keys, 32);
    for (size_t k = 1; k < n; k++)
      for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++)
        cr_expect_eq(decode_mut(all_types[i], keys[k], MUT_SET, bad[b]), CORDON_E_PROTOCOL,
                     "%s.%s = %s", msg_type_name(all_types[i]), keys[k], bad[b]);
  }
  cr_expect_eq(decode_mut(MSG_PING, "nonce", MUT_SET, "a1 31"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_PING, "nonce", MUT_SET, "c3"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_HELLO, "platform", MUT_SET, "c4 05 6c 69 6e 75 78"),
               CORDON_E_PROTOCOL); /* bin where str is expected */
  cr_expect_eq(
      decode_mut(MSG_ACK, "job_id", MUT_SET, "b0 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"),
      CORDON_E_PROTOCOL); /* str where bin is expected */
  cr_expect_eq(decode_mut(MSG_RESULT, "timed_out", MUT_SET, "00"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_RESULT, "timed_out", MUT_SET, "c3"), 0);
  cr_expect_eq(decode_mut(MSG_JOB, "args", MUT_SET, "91 01"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_JOB, "args", MUT_SET, "a1 78"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_PAIR_DONE, "publisher_keys", MUT_SET, "91 a0"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_RESULT, "sandbox", MUT_SET, "90"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_RESULT, "sandbox.limits", MUT_SET, "c0"), CORDON_E_PROTOCOL);
}

Test(msg, nil_only_where_nullable) {
  for (size_t i = 0; i < N_TYPES; i++) {
    char keys[32][32];
    size_t n = sample_keys(all_types[i], keys, 32);
    for (size_t k = 1; k < n; k++) {
      const char *key = keys[k];
      bool nullable = (all_types[i] == MSG_HELLO && strcmp(key, "downgrade_reason") == 0) ||
                      (all_types[i] == MSG_RESULT &&
                       (strcmp(key, "exit_code") == 0 || strcmp(key, "signal") == 0 ||
                        strcmp(key, "oom_killed") == 0 || strcmp(key, "error") == 0));
      int rc = decode_mut(all_types[i], key, MUT_SET, "c0");
      if (!nullable)
        cr_expect_eq(rc, CORDON_E_PROTOCOL, "%s.%s = nil", msg_type_name(all_types[i]), key);
    }
  }
  cr_expect_eq(decode_mut(MSG_RESULT, "oom_killed", MUT_SET, "c0"), 0);
  cr_expect_eq(decode_mut(MSG_RESULT, "signal", MUT_SET, "c0"), 0);
  cr_expect_eq(decode_mut(MSG_RESULT, "error", MUT_SET, "c0"), 0);
  cr_expect_eq(decode_mut(MSG_RESULT, "sandbox.level", MUT_SET, "c0"), 0);
  cr_expect_eq(decode_mut(MSG_RESULT, "sandbox.mechanism", MUT_SET, "c0"), 0);
  cr_expect_eq(decode_mut(MSG_RESULT, "sandbox.requested", MUT_SET, "c0"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_RESULT, "error.message", MUT_SET, "c0"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_HELLO, "name", MUT_SET, "c0"), CORDON_E_PROTOCOL);
}

Test(msg, rejects_integers_out_of_range) {
  static const struct {
    enum msg_type t;
    const char *key;
    const char *hex;
    int err;
  } cases[] = {
      {MSG_HELLO, "max_jobs", "00", CORDON_E_PROTOCOL},
      {MSG_HELLO, "max_jobs", "cd 04 00", 0},
      {MSG_HELLO, "max_jobs", "cd 04 01", CORDON_E_PROTOCOL},
      {MSG_HELLO, "max_jobs", "ff", CORDON_E_PROTOCOL},
      {MSG_HELLO, "max_jobs", "cf 00 00 00 01 00 00 00 04", CORDON_E_PROTOCOL},
      {MSG_HELLO, "proto_min", "00", CORDON_E_PROTOCOL},
      {MSG_HELLO, "proto_max", "cd ff ff", 0},
      {MSG_HELLO, "proto_max", "ce 00 01 00 00", CORDON_E_PROTOCOL},
      {MSG_WELCOME, "version", "00", CORDON_E_PROTOCOL},
      {MSG_WELCOME, "ping_ms", "09", CORDON_E_PROTOCOL},
      {MSG_WELCOME, "ping_ms", "ce 00 36 ee 81", CORDON_E_PROTOCOL},
      {MSG_WELCOME, "time_ms", "cf ff ff ff ff ff ff ff ff", 0},
      {MSG_WELCOME, "time_ms", "d3 ff ff ff ff ff ff ff ff", CORDON_E_PROTOCOL},
      {MSG_PING, "nonce", "cf ff ff ff ff ff ff ff ff", 0},
      {MSG_PING, "nonce", "ff", CORDON_E_PROTOCOL},
      {MSG_PING, "nonce", "d3 80 00 00 00 00 00 00 00", CORDON_E_PROTOCOL},
      {MSG_JOB, "pkg_size", "00", CORDON_E_PROTOCOL},
      {MSG_KEYS, "serial", "00", CORDON_E_PROTOCOL},
      {MSG_GOAWAY, "retry_ms", "ce 05 26 5c 01", CORDON_E_PROTOCOL},
      {MSG_RESULT, "orphans_killed", "ce ff ff ff ff", 0},
      {MSG_RESULT, "orphans_killed", "cf 00 00 00 01 00 00 00 00", CORDON_E_PROTOCOL},
      {MSG_RESULT, "orphans_killed", "ff", CORDON_E_PROTOCOL},
      {MSG_RESULT, "kill_scope", "05", 0},
      {MSG_RESULT, "kill_scope", "06", CORDON_E_PROTOCOL},
      {MSG_RESULT, "kill_scope", "00", CORDON_E_PROTOCOL},
      {MSG_RESULT, "exit_code", "ce ff ff ff ff", 0},
      {MSG_RESULT, "exit_code", "cf 00 00 00 01 00 00 00 00", CORDON_E_PROTOCOL},
      {MSG_RESULT, "exit_code", "d2 80 00 00 00", 0},
      {MSG_RESULT, "exit_code", "d3 ff ff ff ff 7f ff ff ff", CORDON_E_PROTOCOL},
      {MSG_RESULT, "exit_code", "ff", 0},
      {MSG_RESULT, "wall_ms", "ff", CORDON_E_PROTOCOL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    cr_expect_eq(decode_mut(cases[i].t, cases[i].key, MUT_SET, cases[i].hex), cases[i].err,
                 "%s.%s = %s", msg_type_name(cases[i].t), cases[i].key, cases[i].hex);

  /* signal: set it and clear exit_code */
  struct msg m = sample(MSG_RESULT);
  m.result.has_exit_code = false;
  m.result.has_signal = true;
  for (int32_t sig = -1; sig <= 200; sig++) {
    m.result.signal = sig;
    uint8_t buf[1024];
    size_t n;
    int want = sig >= 1 && sig <= 127 ? 0 : CORDON_E_PROTOCOL;
    cr_expect_eq(msg_encode(&m, buf, sizeof(buf), &n, NULL), want, "signal %d", sig);
  }
}

Test(msg, rejects_nul_in_strings) {
  static const struct {
    enum msg_type t;
    const char *key;
  } cases[] = {
      {MSG_HELLO, "agent_version"},
      {MSG_HELLO, "name"},
      {MSG_HELLO, "platform"},
      {MSG_HELLO, "downgrade_reason"},
      {MSG_HELLO, "mechanism"},
      {MSG_PAIR_DONE, "user"},
      {MSG_PAIR_DONE, "name"},
      {MSG_GOAWAY, "code"},
      {MSG_GOAWAY, "message"},
      {MSG_ERROR, "code"},
      {MSG_ERROR, "message"},
      {MSG_RESULT, "error.message"},
      {MSG_RESULT, "sandbox.mechanism"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    cr_expect_eq(decode_mut(cases[i].t, cases[i].key, MUT_SET, "a3 61 00 62"), CORDON_E_PROTOCOL,
                 "%s.%s", msg_type_name(cases[i].t), cases[i].key);
    cr_expect_eq(decode_mut(cases[i].t, cases[i].key, MUT_SET, "a1 00"), CORDON_E_PROTOCOL);
  }
  cr_expect_eq(decode_mut(MSG_JOB, "args", MUT_SET, "92 a1 61 a2 62 00"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_JOB, "args", MUT_SET, "92 a1 61 a2 62 63"), 0);
  /* NUL in bin is data */
  cr_expect_eq(decode_mut(MSG_CHUNK, "data", MUT_SET, "c4 02 00 00"), 0);
}

Test(msg, rejects_malformed_text) {
  static const struct {
    enum msg_type t;
    const char *key;
    const char *hex;
    int err;
  } cases[] = {
      {MSG_GOAWAY, "message", "a2 c3 28", CORDON_E_PROTOCOL},       /* bad continuation */
      {MSG_GOAWAY, "message", "a2 c0 80", CORDON_E_PROTOCOL},       /* overlong */
      {MSG_GOAWAY, "message", "a3 ed a0 80", CORDON_E_PROTOCOL},    /* surrogate */
      {MSG_GOAWAY, "message", "a4 f4 90 80 80", CORDON_E_PROTOCOL}, /* > U+10FFFF */
      {MSG_GOAWAY, "message", "a1 e2", CORDON_E_PROTOCOL},          /* cut */
      {MSG_GOAWAY, "message", "a4 f0 9f 98 80", 0},                 /* emoji */
      {MSG_GOAWAY, "message", "a3 61 0a 62", 0},                    /* newline in text */
      {MSG_GOAWAY, "message", "a0", 0},
      {MSG_PAIR_DONE, "name", "a3 61 0a 62", CORDON_E_PROTOCOL},       /* control in a name */
      {MSG_PAIR_DONE, "name", "a3 61 1b 62", CORDON_E_PROTOCOL},       /* ESC */
      {MSG_PAIR_DONE, "name", "a3 61 7f 62", CORDON_E_PROTOCOL},       /* DEL */
      {MSG_PAIR_DONE, "name", "a2 c2 9b", CORDON_E_PROTOCOL},          /* C1 CSI */
      {MSG_PAIR_DONE, "name", "a2 c2 a0", 0},                          /* NBSP is fine */
      {MSG_PAIR_DONE, "name", "a5 61 e2 80 ae 62", CORDON_E_PROTOCOL}, /* U+202E RLO */
      {MSG_PAIR_DONE, "name", "a5 61 e2 81 a6 62", CORDON_E_PROTOCOL}, /* U+2066 LRI */
      {MSG_PAIR_DONE, "name", "a5 61 e2 80 8f 62", CORDON_E_PROTOCOL}, /* U+200F RLM */
      {MSG_PAIR_DONE, "name", "a4 61 d8 9c 62", CORDON_E_PROTOCOL},    /* U+061C ALM */
      {MSG_PAIR_DONE, "name", "a5 61 e2 80 94 62", 0},                 /* em dash */
      {MSG_GOAWAY, "message", "a5 61 e2 80 ae 62", 0},                 /* allowed in text */
      {MSG_PAIR_DONE, "name", "a0", CORDON_E_PROTOCOL},                /* empty */
      {MSG_PAIR_DONE, "user", "a3 61 20 62", 0},
      {MSG_GOAWAY, "code", "a3 41 42 43", CORDON_E_PROTOCOL}, /* upper case */
      {MSG_GOAWAY, "code", "a3 61 2d 62", CORDON_E_PROTOCOL}, /* dash */
      {MSG_GOAWAY, "code", "a0", CORDON_E_PROTOCOL},
      {MSG_GOAWAY, "code", "a5 61 5f 62 5f 39", 0},
      {MSG_HELLO, "agent_version", "a3 31 20 32", CORDON_E_PROTOCOL}, /* space */
      {MSG_HELLO, "platform", "a5 4c 69 6e 75 78", CORDON_E_PROTOCOL},
      {MSG_HELLO, "best_level", "a8 49 53 4f 4c 41 54 45 44", CORDON_E_PROTOCOL},
      {MSG_HELLO, "best_level", "a4 6e 6f 6e 65", 0},
      {MSG_HELLO, "best_level", "a5 6e 6f 6e 65 00", CORDON_E_PROTOCOL},
      {MSG_HELLO, "mechanism", "a4 6e 6f 6e 65", 0},
      {MSG_HELLO, "mechanism", "a8 62 77 72 61 70 2b 66 6f", CORDON_E_PROTOCOL}, /* bwrap+fo */
      {MSG_HELLO, "mechanism", "a6 62 77 72 61 70 2b", CORDON_E_PROTOCOL},       /* bwrap+ */
      {MSG_HELLO, "mechanism", "a0", CORDON_E_PROTOCOL},
      {MSG_PAIR_PROOF, "role", "a6 73 65 72 76 65 72", 0},
      {MSG_PAIR_PROOF, "role", "a4 75 73 65 72", CORDON_E_PROTOCOL},
      {MSG_RESULT, "sandbox.limits.time", "ad 70 69 64 2d 6e 61 6d 65 73 70 61 63 65", 0},
      {MSG_RESULT, "sandbox.limits.time", "a3 6a 6f 62", 0},
      {MSG_RESULT, "sandbox.limits.time", "a4 77 69 6e 65", CORDON_E_PROTOCOL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    cr_expect_eq(decode_mut(cases[i].t, cases[i].key, MUT_SET, cases[i].hex), cases[i].err,
                 "%s.%s = %s", msg_type_name(cases[i].t), cases[i].key, cases[i].hex);
}

Test(msg, rejects_wrong_fixed_lengths) {
  static const char *const fixed[][2] = {
      {"ack", "job_id"},         {"hello", "device_id"}, {"welcome", "server_id"},
      {"welcome", "session_id"}, {"job", "ticket_sig"},  {"job", "pkg_hash"},
      {"pair_proof", "mac"},     {"keys", "ticket_key"}, {"keys", "publisher_sig"},
  };
  static const enum msg_type ft[] = {MSG_ACK, MSG_HELLO,      MSG_WELCOME, MSG_WELCOME, MSG_JOB,
                                     MSG_JOB, MSG_PAIR_PROOF, MSG_KEYS,    MSG_KEYS};
  for (size_t i = 0; i < sizeof(ft) / sizeof(ft[0]); i++) {
    cr_expect_eq(decode_mut(ft[i], fixed[i][1], MUT_SET, "c4 00"), CORDON_E_PROTOCOL);
    cr_expect_eq(decode_mut(ft[i], fixed[i][1], MUT_SET, "c4 01 00"), CORDON_E_PROTOCOL);
    cr_expect_eq(decode_mut_blob(ft[i], fixed[i][1], true, 65), CORDON_E_PROTOCOL, "%s.%s",
                 fixed[i][0], fixed[i][1]);
  }
  cr_expect_eq(decode_mut_blob(MSG_ACK, "job_id", true, 15), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut_blob(MSG_ACK, "job_id", true, 17), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut_blob(MSG_ACK, "job_id", true, 16), 0);
  cr_expect_eq(decode_mut(MSG_PAIR_DONE, "publisher_keys", MUT_SET, "91 c4 01 00"),
               CORDON_E_PROTOCOL);
}

/* ---- caps ---------------------------------------------------------------- */

Test(msg, enforces_byte_caps_on_decode) {
  static const struct {
    enum msg_type t;
    const char *key;
    bool bin;
    size_t max;
  } caps[] = {
      {MSG_CHUNK, "data", true, MSG_CHUNK_MAX},
      {MSG_OUTPUT, "data", true, MSG_LIVE_MAX},
      {MSG_RESULT, "stdout", true, MSG_OUTPUT_MAX},
      {MSG_RESULT, "stderr", true, MSG_OUTPUT_MAX},
      {MSG_JOB, "ticket", true, MSG_TICKET_MAX},
      {MSG_PAIR_DONE, "name", false, MSG_NAME_MAX},
      {MSG_PAIR_DONE, "user", false, MSG_NAME_MAX},
      {MSG_HELLO, "name", false, MSG_NAME_MAX},
      {MSG_HELLO, "agent_version", false, MSG_VERSION_MAX},
      {MSG_HELLO, "platform", false, MSG_PLATFORM_MAX},
      {MSG_GOAWAY, "message", false, MSG_TEXT_MAX},
      {MSG_ERROR, "message", false, MSG_TEXT_MAX},
      {MSG_RESULT, "error.message", false, MSG_TEXT_MAX},
  };
  for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
    cr_expect_eq(decode_mut_blob(caps[i].t, caps[i].key, caps[i].bin, caps[i].max), 0, "%s.%s",
                 msg_type_name(caps[i].t), caps[i].key);
    cr_expect_eq(decode_mut_blob(caps[i].t, caps[i].key, caps[i].bin, caps[i].max + 1),
                 CORDON_E_LIMIT, "%s.%s", msg_type_name(caps[i].t), caps[i].key);
  }
  /* codes are tokens: use '_' to fill */
  size_t len;
  uint8_t *raw = raw_blob(false, MSG_CODE_MAX, '_', &len);
  cr_expect_eq(decode_mut_raw(MSG_GOAWAY, "code", MUT_SET, raw, len), 0);
  free(raw);
  raw = raw_blob(false, MSG_CODE_MAX + 1, '_', &len);
  cr_expect_eq(decode_mut_raw(MSG_GOAWAY, "code", MUT_SET, raw, len), CORDON_E_LIMIT);
  free(raw);
  cr_expect_eq(decode_mut(MSG_CHUNK, "data", MUT_SET, "c4 00"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_OUTPUT, "data", MUT_SET, "c4 00"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_JOB, "ticket", MUT_SET, "c4 00"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_RESULT, "stdout", MUT_SET, "c4 00"), 0);
}

/* An args array of n strings of len bytes, msgpack-encoded. */
static uint8_t *raw_args(size_t n, size_t len, size_t *out_len) {
  size_t total = 5 + n * (len + 5);
  uint8_t *b = malloc(total), *p = b;
  cr_assert(b);
  *p++ = 0xdd;
  for (int s = 24; s >= 0; s -= 8)
    *p++ = (uint8_t)(n >> s);
  for (size_t i = 0; i < n; i++) {
    *p++ = 0xdb;
    for (int s = 24; s >= 0; s -= 8)
      *p++ = (uint8_t)(len >> s);
    memset(p, 'x', len);
    p += len;
  }
  *out_len = (size_t)(p - b);
  return b;
}

Test(msg, enforces_args_caps) {
  size_t len;
  uint8_t *raw = raw_args(MSG_ARGS_MAX, 16, &len);
  cr_expect_eq(decode_mut_raw(MSG_JOB, "args", MUT_SET, raw, len), 0);
  free(raw);
  raw = raw_args(MSG_ARGS_MAX + 1, 16, &len);
  cr_expect_eq(decode_mut_raw(MSG_JOB, "args", MUT_SET, raw, len), CORDON_E_LIMIT);
  free(raw);
  raw = raw_args(3, MSG_ARG_MAX, &len);
  cr_expect_eq(decode_mut_raw(MSG_JOB, "args", MUT_SET, raw, len), 0);
  free(raw);
  raw = raw_args(3, MSG_ARG_MAX + 1, &len);
  cr_expect_eq(decode_mut_raw(MSG_JOB, "args", MUT_SET, raw, len), CORDON_E_LIMIT);
  free(raw);
  cr_expect_eq(decode_mut(MSG_JOB, "args", MUT_SET, "90"), 0);

  uint8_t keys[3 + 17 * 34];
  uint8_t *p = keys;
  *p++ = 0xdc;
  *p++ = 0;
  *p++ = 17;
  for (int i = 0; i < 17; i++) {
    *p++ = 0xc4;
    *p++ = 32;
    memset(p, i, 32);
    p += 32;
  }
  cr_expect_eq(decode_mut_raw(MSG_PAIR_DONE, "publisher_keys", MUT_SET, keys, (size_t)(p - keys)),
               CORDON_E_LIMIT);
  keys[2] = 16;
  cr_expect_eq(
      decode_mut_raw(MSG_PAIR_DONE, "publisher_keys", MUT_SET, keys, (size_t)(p - keys) - 34), 0);
  cr_expect_eq(decode_mut(MSG_PAIR_DONE, "publisher_keys", MUT_SET, "90"), CORDON_E_PROTOCOL);
}

Test(msg, encode_refuses_what_decode_would_refuse) {
  struct msg m = sample(MSG_CHUNK);
  uint8_t *big = calloc(1, MSG_OUTPUT_MAX + 1);
  uint8_t *b;
  size_t n = 5;
  struct cordon_diag d = {{0}};
  m.chunk.data.data = big;
  m.chunk.data.len = MSG_CHUNK_MAX + 1;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, &d), CORDON_E_LIMIT);
  cr_expect(strstr(d.msg, "chunk.data") != NULL, "diag: %s", d.msg);
  cr_expect_eq(n, 5);
  m.chunk.data.len = 0;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);

  m = sample(MSG_RESULT);
  m.result.stdout_buf.data = big;
  m.result.stdout_buf.len = MSG_OUTPUT_MAX + 1;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, &d), CORDON_E_LIMIT);
  m.result.stdout_buf.len = 1;
  m.result.has_signal = true; /* with exit_code */
  m.result.signal = 9;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m.result.has_signal = false;
  m.result.has_exit_code = false;
  m.result.has_error = false; /* nothing says what happened */
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m.result.has_error = true;
  m.result.sandbox.downgrade_reason = "bwrap_unavailable"; /* but level isolated */
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m.result.sandbox.level = MSG_LEVEL_CONTAINED;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), 0);
  free(b);
  m.result.sandbox.downgrade_reason = NULL; /* contained without a reason */
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m.result.sandbox.level = (enum msg_level)7;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);

  m = sample(MSG_HELLO);
  m.hello.proto_min = 4; /* above proto_max 3 */
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m = sample(MSG_HELLO);
  m.hello.best_level = MSG_LEVEL_ISOLATED; /* with a downgrade reason */
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m = sample(MSG_HELLO);
  m.hello.platform = NULL;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m = sample(MSG_HELLO);
  m.hello.name = "new\nline";
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m = sample(MSG_HELLO);
  m.hello.max_jobs = 0;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);

  m = sample(MSG_CHUNK);
  m.chunk.offset = UINT64_MAX - 10;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m.chunk.offset = UINT64_MAX - sizeof(chunk_bytes);
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), 0);
  free(b);

  m = sample(MSG_JOB);
  m.job.args = NULL;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), -EINVAL);
  m.job.n_args = 0;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), 0);
  free(b);

  m.type = (enum msg_type)0;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), -EINVAL);
  m.type = (enum msg_type)99;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), -EINVAL);
  cr_expect_eq(msg_encode_alloc(NULL, &b, &n, NULL), -EINVAL);
  free(big);
}

Test(msg, largest_messages_fit_the_record_cap) {
  /* A job with a maximal ticket and 256 arguments of 4096 bytes. */
  static char argbuf[MSG_ARGS_MAX][MSG_ARG_MAX + 1];
  static char *args[MSG_ARGS_MAX];
  for (size_t i = 0; i < MSG_ARGS_MAX; i++) {
    memset(argbuf[i], 'a' + (int)(i % 26), MSG_ARG_MAX);
    argbuf[i][MSG_ARG_MAX] = '\0';
    args[i] = argbuf[i];
  }
  uint8_t *ticket = calloc(1, MSG_TICKET_MAX);
  struct msg m = sample(MSG_JOB);
  m.job.ticket.data = ticket;
  m.job.ticket.len = MSG_TICKET_MAX;
  m.job.args = args;
  m.job.n_args = MSG_ARGS_MAX;
  uint8_t *b, *c;
  size_t n, cn;
  encode_ok(&m, &b, &n);
  cr_expect_leq(n, MSG_ENCODED_MAX);
  struct msg d;
  struct cordon_diag diag = {{0}};
  cr_assert_eq(msg_decode(b, n, &d, &diag), 0, "%s", diag.msg);
  cr_expect_eq(d.job.n_args, MSG_ARGS_MAX);
  encode_ok(&d, &c, &cn);
  cr_expect(n == cn && memcmp(b, c, n) == 0);
  msg_release(&d);
  free(b);
  free(c);

  /* A result with both outputs full and every text field at its cap. */
  static char text[MSG_TEXT_MAX + 1];
  static char mech[MSG_MECHANISM_MAX + 1];
  memset(text, 'm', MSG_TEXT_MAX);
  strcpy(mech, "bwrap+seccomp+landlock+cgroup+rlimit+appcontainer+job+pgroup+none");
  uint8_t *out = calloc(1, MSG_OUTPUT_MAX);
  m = sample(MSG_RESULT);
  m.result.stdout_buf = (struct msg_bytes){out, MSG_OUTPUT_MAX};
  m.result.stderr_buf = (struct msg_bytes){out, MSG_OUTPUT_MAX};
  m.result.error.message = text;
  m.result.sandbox.mechanism = mech;
  encode_ok(&m, &b, &n);
  cr_expect_leq(n, MSG_ENCODED_MAX);
  cr_expect_eq(decode(b, n), 0);
  free(b);
  free(out);
  free(ticket);
}

/* ---- ownership ----------------------------------------------------------- */

Test(msg, decode_leaves_out_untouched_on_failure) {
  struct msg m;
  memset(&m, 0xa5, sizeof(m));
  struct msg before = m;
  cr_expect_eq(decode_mut(MSG_JOB, "args", MUT_SET, "92 a1 61 a2 62 00"), CORDON_E_PROTOCOL);
  uint8_t junk[] = {0x81, 0xa1, 't', 0xa3, 'j', 'o', 'b'};
  cr_expect_eq(msg_decode(junk, sizeof(junk), &m, NULL), CORDON_E_PROTOCOL);
  cr_expect(memcmp(&m, &before, sizeof(m)) == 0);
}

Test(msg, failed_decodes_free_what_they_copied) {
  /* Each of these fails after strings/buffers were copied; ASan's leak
   * checker and the heap counter catch anything left behind. */
  int rc[5];
  long before = alloc_live;
  rc[0] = decode_mut(MSG_JOB, "args", MUT_SET, "93 a1 61 a1 62 a2 63 00");
  rc[1] = decode_mut(MSG_PAIR_DONE, "extra", MUT_ADD, "01");
  rc[2] = decode_mut(MSG_RESULT, "sandbox.limits.disk", MUT_SET, "a1 78");
  rc[3] = decode_mut(MSG_RESULT, "error.message", MUT_SET, "a1 00");
  /* isolated with a reason: fails in the cross-field rules, after copying */
  rc[4] = decode_mut(MSG_HELLO, "best_level", MUT_SET, "a8 69 73 6f 6c 61 74 65 64");
  long live = alloc_live - before;
  for (int i = 0; i < 5; i++)
    cr_expect_eq(rc[i], CORDON_E_PROTOCOL, "case %d", i);
  cr_expect_eq(live, 0, "%ld allocations left behind", live);
}

Test(msg, release_accepts_null_and_zeroed) {
  msg_release(NULL);
  struct msg m;
  memset(&m, 0, sizeof(m));
  msg_release(&m);
  m.type = MSG_RESULT;
  msg_release(&m);
  cr_expect_eq(m.type, 0);
}

Test(msg, decode_rejects_bad_arguments) {
  struct msg m;
  uint8_t b = 0x80;
  cr_expect_eq(msg_decode(NULL, 1, &m, NULL), -EINVAL);
  cr_expect_eq(msg_decode(&b, 1, NULL, NULL), -EINVAL);
}

/* ---- helpers ------------------------------------------------------------- */

Test(msg, names_and_senders) {
  cr_expect_str_eq(msg_type_name(MSG_PAIR_PROOF), "pair_proof");
  cr_expect_null(msg_type_name((enum msg_type)0));
  cr_expect_null(msg_type_name((enum msg_type)100));
  cr_expect_eq(msg_type_senders(MSG_HELLO), MSG_FROM_AGENT);
  cr_expect_eq(msg_type_senders(MSG_JOB), MSG_FROM_SERVER);
  cr_expect_eq(msg_type_senders(MSG_GOAWAY), MSG_FROM_AGENT | MSG_FROM_SERVER);
  cr_expect_eq(msg_type_senders((enum msg_type)100), 0);
  for (size_t i = 0; i < N_TYPES; i++) {
    cr_expect_not_null(msg_type_name(all_types[i]));
    cr_expect_neq(msg_type_senders(all_types[i]), 0);
  }
  cr_expect_str_eq(msg_level_name(MSG_LEVEL_CONTAINED), "contained");
  cr_expect_null(msg_level_name((enum msg_level)3));
  cr_expect_str_eq(msg_enforce_name(MSG_ENFORCE_PID_NAMESPACE), "pid-namespace");
  cr_expect_null(msg_enforce_name((enum msg_enforce)7));
  cr_expect_str_eq(msg_role_name(MSG_ROLE_SERVER), "server");
  cr_expect_null(msg_role_name((enum msg_role)2));
  cr_expect_str_eq(msg_type_name(MSG_OUTPUT), "output");
  cr_expect_eq(msg_type_senders(MSG_OUTPUT), MSG_FROM_AGENT);
  cr_expect_str_eq(msg_stream_name(MSG_STREAM_STDOUT), "stdout");
  cr_expect_str_eq(msg_stream_name(MSG_STREAM_STDERR), "stderr");
  cr_expect_null(msg_stream_name((enum msg_stream)2));
}

/* ---- output (live job output) ------------------------------------------- */

Test(msg, output_round_trips_with_its_fields) {
  struct msg m = sample(MSG_OUTPUT), d;
  uint8_t *b;
  size_t n;
  encode_ok(&m, &b, &n);
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect_eq(d.type, MSG_OUTPUT);
  cr_expect(memcmp(d.output.job_id, id_job, CORDON_ID_LEN) == 0);
  cr_expect_eq(d.output.stream, MSG_STREAM_STDERR);
  cr_expect_eq(d.output.offset, 4096);
  cr_expect_eq(d.output.data.len, sizeof(live_bytes) - 1);
  cr_expect(memcmp(d.output.data.data, live_bytes, d.output.data.len) == 0);
  msg_release(&d);
  free(b);
}

Test(msg, output_refuses_bad_streams_sizes_and_offsets) {
  /* the stream is one of two names */
  cr_expect_eq(decode_mut(MSG_OUTPUT, "stream", MUT_SET, "a6 73 74 64 6f 75 74"), 0);
  cr_expect_eq(decode_mut(MSG_OUTPUT, "stream", MUT_SET, "a5 73 74 64 69 6e"), /* "stdin" */
               CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_OUTPUT, "stream", MUT_SET, "01"), CORDON_E_PROTOCOL);
  /* an unknown key, a missing one */
  cr_expect_eq(decode_mut(MSG_OUTPUT, "exit", MUT_ADD, "01"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_OUTPUT, "offset", MUT_DEL, NULL), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_OUTPUT, "offset", MUT_SET, "ff"), CORDON_E_PROTOCOL);
  /* offset + length must not overflow: 7 bytes at 2^64 - 1 */
  cr_expect_eq(decode_mut(MSG_OUTPUT, "offset", MUT_SET, "cf ff ff ff ff ff ff ff f8"), 0);
  cr_expect_eq(decode_mut(MSG_OUTPUT, "offset", MUT_SET, "cf ff ff ff ff ff ff ff f9"),
               CORDON_E_PROTOCOL);
  /* the encoder refuses the same */
  struct msg m = sample(MSG_OUTPUT);
  uint8_t big[MSG_LIVE_MAX + 1] = {0};
  uint8_t *b = NULL;
  size_t n;
  m.output.data.data = big;
  m.output.data.len = MSG_LIVE_MAX;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), 0);
  free(b);
  m.output.data.len = MSG_LIVE_MAX + 1;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_LIMIT);
  m.output.data.len = 0;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m = sample(MSG_OUTPUT);
  m.output.offset = UINT64_MAX;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m = sample(MSG_OUTPUT);
  m.output.stream = (enum msg_stream)2;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
}

Test(msg, output_is_the_version_2_addition) {
  cr_expect_eq(MSG_PROTO_VERSION_OUTPUT, 2);
  cr_expect_geq(MSG_PROTO_VERSION_MAX, MSG_PROTO_VERSION_OUTPUT);
  /* version 1 is retired: a peer of 1..1 does not meet this build */
  cr_expect_eq(MSG_PROTO_VERSION_MIN, 2);
  uint16_t v = 0;
  cr_expect_neq(msg_version_choose(MSG_PROTO_VERSION_MIN, MSG_PROTO_VERSION_MAX, 1, 1, &v), 0);
  cr_expect_neq(msg_version_choose(1, 1, MSG_PROTO_VERSION_MIN, MSG_PROTO_VERSION_MAX, &v), 0);
}

Test(msg, version_negotiation_picks_the_highest_common) {
  uint16_t v = 0;
  cr_expect_eq(msg_version_choose(1, 1, 1, 1, &v), 0);
  cr_expect_eq(v, 1);
  cr_expect_eq(msg_version_choose(1, 5, 2, 3, &v), 0);
  cr_expect_eq(v, 3);
  cr_expect_eq(msg_version_choose(3, 9, 1, 4, &v), 0);
  cr_expect_eq(v, 4);
  v = 77;
  cr_expect_eq(msg_version_choose(5, 9, 1, 4, &v), CORDON_E_PROTOCOL);
  cr_expect_eq(msg_version_choose(1, 1, 2, 2, &v), CORDON_E_PROTOCOL);
  cr_expect_eq(msg_version_choose(0, 1, 1, 1, &v), CORDON_E_PROTOCOL);
  cr_expect_eq(msg_version_choose(3, 2, 1, 4, &v), CORDON_E_PROTOCOL);
  cr_expect_eq(v, 77);
  cr_expect_eq(msg_version_choose(1, 1, 1, 1, NULL), -EINVAL);
}

Test(msg, keys_signed_data_layout) {
  struct msg m = sample(MSG_KEYS);
  m.keys.serial = 0x0102030405060708ull;
  uint8_t out[MSG_KEYS_SIGNED_LEN];
  msg_keys_signed_data(&m.keys, out);
  cr_expect_eq(MSG_KEYS_SIGNED_LEN, 15 + 8 + 64);
  cr_expect(memcmp(out, "cordon keys v1\0", 15) == 0);
  static const uint8_t serial[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  cr_expect(memcmp(out + 15, serial, 8) == 0);
  cr_expect(memcmp(out + 23, m.keys.ticket_key, 32) == 0);
  cr_expect(memcmp(out + 55, m.keys.publisher_key, 32) == 0);
}

/* CORDON_WRITE_CORPUS=DIR writes every sample's encoding to DIR/<type>.bin
 * (how tests/fuzz/corpus/msg/ was made). */
Test(msg, write_seed_corpus) {
  const char *dir = getenv("CORDON_WRITE_CORPUS");
  if (!dir)
    return;
  for (size_t i = 0; i < N_TYPES; i++) {
    struct msg m = sample(all_types[i]);
    uint8_t *b;
    size_t n;
    encode_ok(&m, &b, &n);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.bin", dir, msg_type_name(all_types[i]));
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
  }
  /* Variants: optional keys absent, nulls, the other branches of rules. */
  struct msg v[5];
  const char *names[5] = {"hello_min", "result_refused", "result_signal", "goaway_min",
                          "error_min"};
  v[0] = sample(MSG_HELLO);
  v[0].hello.has_device_id = false;
  v[0].hello.name = v[0].hello.mechanism = v[0].hello.downgrade_reason = NULL;
  v[0].hello.best_level = MSG_LEVEL_ISOLATED;
  v[1] = sample(MSG_RESULT);
  v[1].result.has_exit_code = v[1].result.has_oom_killed = false;
  v[1].result.sandbox.has_level = false;
  v[1].result.sandbox.mechanism = NULL;
  v[1].result.error.code = "job_user_missing";
  v[2] = sample(MSG_RESULT);
  v[2].result.has_exit_code = v[2].result.has_error = false;
  v[2].result.has_signal = true;
  v[2].result.signal = 9;
  v[2].result.timed_out = true;
  v[3] = sample(MSG_GOAWAY);
  v[3].goaway.has_retry_ms = false;
  v[4] = sample(MSG_ERROR);
  v[4].error.has_job_id = false;
  for (size_t i = 0; i < 5; i++) {
    uint8_t *b;
    size_t n;
    encode_ok(&v[i], &b, &n);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.bin", dir, names[i]);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
  }
}

Test(msg, allocation_counting_sees_decoder_allocations) {
  if (!ALLOC_COUNTING)
    cr_skip_test("allocation counting is off under AddressSanitizer");
  struct msg m = sample(MSG_JOB), d;
  uint8_t *b;
  size_t n;
  encode_ok(&m, &b, &n);
  long calls = alloc_calls, live = alloc_live;
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect_gt(alloc_calls - calls, 4, "decoding a job copies its ticket and args");
  msg_release(&d);
  cr_expect_eq(alloc_live, live, "msg_release frees everything");
  free(b);
}

/* The examples of docs/protocol/messages.md §8, byte for byte. */
Test(msg, documented_examples_hold) {
  struct msg m;
  uint8_t buf[256], want[256];
  size_t n, wn;

  memset(&m, 0, sizeof(m));
  m.type = MSG_ACK;
  memcpy(m.ack.job_id, id_job, CORDON_ID_LEN);
  wn = unhex("82 a1 74 a3 61 63 6b a6 6a 6f 62 5f 69 64 c4 10 10 11 12 13 14 15 16 17 18 19 1a 1b "
             "1c 1d 1e 1f",
             want, sizeof(want));
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &n, NULL), 0);
  cr_expect(n == wn && memcmp(buf, want, n) == 0, "ack");

  memset(&m, 0, sizeof(m));
  m.type = MSG_WELCOME;
  m.welcome.version = 1;
  m.welcome.time_ms = 1795000000123ull;
  memset(m.welcome.server_id, 0x5e, CORDON_ID_LEN);
  memset(m.welcome.session_id, 0x55, CORDON_ID_LEN);
  m.welcome.ping_ms = 15000;
  wn = unhex("86 a1 74 a7 77 65 6c 63 6f 6d 65 a7 76 65 72 73 69 6f 6e 01 a7 74 69 6d 65 5f 6d 73 "
             "cf 00 00 01 a1 ee 56 5e 7b a9 73 65 72 76 65 72 5f 69 64 "
             "c4 10 5e 5e 5e 5e 5e 5e 5e 5e 5e 5e 5e 5e 5e 5e 5e 5e "
             "aa 73 65 73 73 69 6f 6e 5f 69 64 "
             "c4 10 55 55 55 55 55 55 55 55 55 55 55 55 55 55 55 55 "
             "a7 70 69 6e 67 5f 6d 73 cd 3a 98",
             want, sizeof(want));
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &n, NULL), 0);
  cr_expect(n == wn && memcmp(buf, want, n) == 0, "welcome");

  memset(&m, 0, sizeof(m));
  m.type = MSG_UNPAIR;
  wn = unhex("81 a1 74 a6 75 6e 70 61 69 72", want, sizeof(want));
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &n, NULL), 0);
  cr_expect(n == wn && memcmp(buf, want, n) == 0, "unpair");

  cr_expect_eq(decode_hex("dd ff ff ff ff"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("db ff ff ff ff"), CORDON_E_LIMIT);
  cr_expect_eq(decode_hex("91 91 91 91 91 91 91 91 91 01"), CORDON_E_LIMIT);
  cr_expect_eq(decode_hex("82 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 01 c0"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("82 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 d4 00 00"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("83 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 01 a5 6e 6f 6e 63 65 02"),
               CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("82 a1 74 a5 62 6f 67 75 73 a5 6e 6f 6e 63 65 01"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_hex("83 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 01 a1 78 01"),
               CORDON_E_PROTOCOL);
}

Test(msg, pairing_hello_carries_only_the_code_id) {
  struct msg m = sample(MSG_HELLO), d;
  m.hello.has_device_id = false;
  m.hello.pair_code = "k7m2q9xa0c";
  uint8_t *b;
  size_t n;
  encode_ok(&m, &b, &n);
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect_str_eq(d.hello.pair_code, "k7m2q9xa0c");
  cr_expect(!d.hello.has_device_id);
  msg_release(&d);
  free(b);

  /* a whole code (40 base32 characters) does not fit */
  m.hello.pair_code = "k7m2q9xa0cabcdefghjkmnpqrstvwxyz01234567";
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_LIMIT);
  m.hello.pair_code = "k7m2q-9xa0c";
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  m.hello.pair_code = "";
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  /* never together with a device id */
  m.hello.pair_code = "k7m2q9xa0c";
  m.hello.has_device_id = true;
  cr_expect_eq(msg_encode_alloc(&m, &b, &n, NULL), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_HELLO, "pair_code", MUT_ADD, "a5 61 62 63 64 65"), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_mut(MSG_HELLO, "device_id", MUT_DEL, NULL), 0);
}

Test(msg, the_receipt_fields_round_trip_and_are_optional) {
  struct msg m = sample(MSG_HELLO), d;
  uint8_t *b;
  size_t n;
  m.hello.has_sign_key = true;
  memset(m.hello.sign_key, 0x5a, MSG_KEY_LEN);
  encode_ok(&m, &b, &n);
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect(d.hello.has_sign_key);
  cr_expect(memcmp(d.hello.sign_key, m.hello.sign_key, MSG_KEY_LEN) == 0);
  msg_release(&d);
  free(b);
  m.hello.has_sign_key = false;
  encode_ok(&m, &b, &n);
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect(!d.hello.has_sign_key, "absent stays absent");
  msg_release(&d);
  free(b);

  m = sample(MSG_RESULT);
  m.result.has_started_ms = m.result.has_ended_ms = true;
  m.result.started_ms = 1767225601000ull;
  m.result.ended_ms = 1767225602500ull;
  m.result.has_ticket_hash = true;
  memset(m.result.ticket_hash, 0x7e, MSG_HASH_LEN);
  m.result.has_receipt_sig = true;
  memset(m.result.receipt_sig, 0x51, MSG_SIG_LEN);
  encode_ok(&m, &b, &n);
  cr_assert_eq(msg_decode(b, n, &d, NULL), 0);
  cr_expect(d.result.has_started_ms && d.result.started_ms == 1767225601000ull);
  cr_expect(d.result.has_ended_ms && d.result.ended_ms == 1767225602500ull);
  cr_expect(d.result.has_ticket_hash &&
            memcmp(d.result.ticket_hash, m.result.ticket_hash, MSG_HASH_LEN) == 0);
  cr_expect(d.result.has_receipt_sig &&
            memcmp(d.result.receipt_sig, m.result.receipt_sig, MSG_SIG_LEN) == 0);
  msg_release(&d);
  /* a signature of the wrong size is refused */
  uint8_t *at = memmem(b, n, "receipt_sig", 11);
  cr_assert(at && at[11] == 0xc4 && at[12] == MSG_SIG_LEN, "bin 8 of 64 bytes");
  at[12] = MSG_SIG_LEN - 1;
  cr_expect_neq(msg_decode(b, n - 1, &d, NULL), 0);
  free(b);
}

Test(msg, an_ack_asking_to_retry_carries_retry_ms_and_a_plain_ack_does_not) {
  struct msg m, d;
  uint8_t buf[256];
  size_t n;
  memset(&m, 0, sizeof(m));
  m.type = MSG_ACK;
  memcpy(m.ack.job_id, id_job, CORDON_ID_LEN);
  m.ack.has_retry_ms = true;
  m.ack.retry_ms = 1000;
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &n, NULL), 0);
  cr_assert_eq(msg_decode(buf, n, &d, NULL), 0);
  cr_assert(d.ack.has_retry_ms && d.ack.retry_ms == 1000);
  msg_release(&d);
  m.ack.has_retry_ms = false;
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &n, NULL), 0);
  cr_assert_eq(msg_decode(buf, n, &d, NULL), 0);
  cr_assert(!d.ack.has_retry_ms, "a plain ack: recorded");
  msg_release(&d);
  m.ack.has_retry_ms = true;
  m.ack.retry_ms = 0;
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &n, NULL), CORDON_E_PROTOCOL, "1..86400000");
}
