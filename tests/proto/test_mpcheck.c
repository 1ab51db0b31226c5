#include "proto/mpcheck.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

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

/* "dd ff ff ff ff" -> bytes. Returns the length. */
static size_t unhex(const char *hex, uint8_t *out, size_t cap) {
  size_t n = 0;
  while (*hex) {
    if (*hex == ' ') {
      hex++;
      continue;
    }
    unsigned v;
    cr_assert(sscanf(hex, "%2x", &v) == 1, "bad hex near %s", hex);
    cr_assert(n < cap);
    out[n++] = (uint8_t)v;
    hex += 2;
  }
  return n;
}

static int check_hex(const char *hex, const struct mpcheck_limits *lim) {
  uint8_t buf[256];
  size_t n = unhex(hex, buf, sizeof(buf));
  return mpcheck_validate(buf, n, lim, NULL);
}

/* Valid encodings of every msgpack family except ext. */
static const char *const valid_samples[] = {
    "c0",
    "c2",
    "c3",
    "00",
    "7f",
    "e0",
    "ff",
    "cc ff",
    "cd ff ff",
    "ce ff ff ff ff",
    "cf ff ff ff ff ff ff ff ff",
    "d0 80",
    "d1 80 00",
    "d2 80 00 00 00",
    "d3 80 00 00 00 00 00 00 00",
    "ca 3f 80 00 00",
    "cb 3f f0 00 00 00 00 00 00",
    "a0",
    "a3 61 62 63",
    "d9 02 68 69",
    "da 00 01 7a",
    "db 00 00 00 01 7a",
    "c4 00",
    "c4 02 00 01",
    "c5 00 01 ff",
    "c6 00 00 00 02 01 02",
    "90",
    "93 01 02 03",
    "dc 00 02 c0 c3",
    "dd 00 00 00 01 a0",
    "80",
    "81 a1 74 a5 68 65 6c 6c 6f",
    "de 00 01 01 02",
    "df 00 00 00 01 c0 c0",
    "82 a1 61 92 01 81 a1 62 c0 a1 63 c4 01 00",
};

Test(mpcheck, accepts_every_non_ext_family) {
  for (size_t i = 0; i < sizeof(valid_samples) / sizeof(valid_samples[0]); i++)
    cr_expect_eq(check_hex(valid_samples[i], NULL), 0, "sample %s", valid_samples[i]);
}

Test(mpcheck, rejects_every_truncation_of_valid_samples) {
  for (size_t i = 0; i < sizeof(valid_samples) / sizeof(valid_samples[0]); i++) {
    uint8_t buf[256];
    size_t n = unhex(valid_samples[i], buf, sizeof(buf));
    for (size_t k = 0; k < n; k++)
      cr_expect_eq(mpcheck_validate(buf, k, NULL, NULL), CORDON_E_PROTOCOL, "sample %s cut at %zu",
                   valid_samples[i], k);
  }
}

Test(mpcheck, rejects_empty_buffer) {
  cr_expect_eq(mpcheck_validate((const uint8_t *)"", 0, NULL, NULL), CORDON_E_PROTOCOL);
  cr_expect_eq(mpcheck_validate(NULL, 0, NULL, NULL), CORDON_E_PROTOCOL);
}

Test(mpcheck, rejects_trailing_bytes) {
  struct cordon_diag d = {{0}};
  uint8_t buf[] = {0x81, 0xa1, 't', 0x01, 0xc0};
  cr_expect_eq(mpcheck_validate(buf, sizeof(buf), NULL, &d), CORDON_E_PROTOCOL);
  cr_expect(strstr(d.msg, "trailing") != NULL, "diag: %s", d.msg);
  cr_expect_eq(check_hex("c0 c0", NULL), CORDON_E_PROTOCOL);
  cr_expect_eq(check_hex("90 00", NULL), CORDON_E_PROTOCOL);
}

Test(mpcheck, measure_reports_first_object_length) {
  uint8_t buf[] = {0x92, 0x01, 0xa1, 'x', 0xff, 0xc1};
  size_t used = 0;
  cr_assert_eq(mpcheck_measure(buf, sizeof(buf), NULL, &used, NULL), 0);
  cr_expect_eq(used, 4);
  used = 77;
  cr_expect_eq(mpcheck_measure(buf, 3, NULL, &used, NULL), CORDON_E_PROTOCOL);
  cr_expect_eq(used, 77, "out param untouched on failure");
}

Test(mpcheck, rejects_never_used_byte) {
  cr_expect_eq(check_hex("c1", NULL), CORDON_E_PROTOCOL);
  cr_expect_eq(check_hex("91 c1", NULL), CORDON_E_PROTOCOL);
}

Test(mpcheck, rejects_every_ext_type) {
  static const char *const ext[] = {
      "d4 01 00",
      "d5 01 00 00",
      "d6 01 00 00 00 00",
      "d7 01 00 00 00 00 00 00 00 00",
      "d8 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
      "c7 01 01 00",
      "c8 00 01 01 00",
      "c9 00 00 00 01 01 00",
      "d6 ff 00 00 00 00", /* timestamp 32 */
      "91 d4 01 00",       /* nested */
      "81 a1 74 c7 00 05", /* as a map value */
  };
  for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++)
    cr_expect_eq(check_hex(ext[i], NULL), CORDON_E_PROTOCOL, "%s", ext[i]);
}

Test(mpcheck, rejects_huge_declared_counts_without_allocating) {
  static const struct {
    const char *hex;
    int err;
  } cases[] = {
      {"dd ff ff ff ff", CORDON_E_PROTOCOL}, /* array32 of 2^32-1 */
      {"dd ff ff ff ff c0 c0 c0", CORDON_E_PROTOCOL},
      {"dc ff ff", CORDON_E_PROTOCOL},             /* array16 */
      {"df ff ff ff ff", CORDON_E_PROTOCOL},       /* map32 */
      {"de ff ff 01", CORDON_E_PROTOCOL},          /* map16 */
      {"9f 01 02", CORDON_E_PROTOCOL},             /* fixarray 15, 2 bytes left */
      {"82 01 02 03", CORDON_E_PROTOCOL},          /* map of 2 needs 4 objects */
      {"db ff ff ff ff", CORDON_E_LIMIT},          /* str32 above the cap */
      {"c6 ff ff ff ff", CORDON_E_LIMIT},          /* bin32 above the cap */
      {"91 dd 7f ff ff ff 00", CORDON_E_PROTOCOL}, /* nested */
  };
  enum { N = sizeof(cases) / sizeof(cases[0]) };
  uint8_t bufs[N][16];
  size_t lens[N];
  int rcs[N];
  for (size_t i = 0; i < N; i++)
    lens[i] = unhex(cases[i].hex, bufs[i], sizeof(bufs[i]));
  long before = alloc_calls;
  for (size_t i = 0; i < N; i++)
    rcs[i] = mpcheck_validate(bufs[i], lens[i], NULL, NULL);
  long calls = alloc_calls - before;
  for (size_t i = 0; i < N; i++)
    cr_expect_eq(rcs[i], cases[i].err, "%s", cases[i].hex);
  cr_expect_eq(calls, 0, "the validator allocated %ld times", calls);
}

Test(mpcheck, huge_str_and_bin_with_no_cap_are_still_bounded_by_the_buffer) {
  struct mpcheck_limits lim = {8, UINT32_MAX, UINT32_MAX, 16};
  cr_expect_eq(check_hex("db ff ff ff ff 61", &lim), CORDON_E_PROTOCOL);
  cr_expect_eq(check_hex("c6 ff ff ff ff 00", &lim), CORDON_E_PROTOCOL);
  cr_expect_eq(check_hex("da 00 02 61", &lim), CORDON_E_PROTOCOL);
}

Test(mpcheck, counts_that_exactly_fit_are_accepted) {
  cr_expect_eq(check_hex("93 c0 c0 c0", NULL), 0);
  cr_expect_eq(check_hex("82 c0 c0 c0 c0", NULL), 0);
  cr_expect_eq(check_hex("93 c0 c0", NULL), CORDON_E_PROTOCOL);
}

static uint8_t *nested(size_t depth, uint8_t opener, size_t *out_len) {
  /* opener 0x91: [[[...nil]]]; 0x81: {"":{"":...nil}} */
  size_t per = opener == 0x81 ? 2 : 1;
  uint8_t *b = malloc(depth * per + 1);
  cr_assert(b);
  size_t n = 0;
  for (size_t i = 0; i < depth; i++) {
    b[n++] = opener;
    if (opener == 0x81)
      b[n++] = 0xa0; /* key "" */
  }
  b[n++] = 0xc0;
  *out_len = n;
  return b;
}

Test(mpcheck, accepts_depth_eight) {
  size_t n;
  uint8_t *a = nested(8, 0x91, &n);
  cr_expect_eq(mpcheck_validate(a, n, NULL, NULL), 0);
  free(a);
  a = nested(8, 0x81, &n);
  cr_expect_eq(mpcheck_validate(a, n, NULL, NULL), 0);
  free(a);
  cr_expect_eq(check_hex("91 91 91 91 91 91 91 90", NULL), 0); /* empty innermost */
}

Test(mpcheck, rejects_depth_nine) {
  size_t n;
  uint8_t *a = nested(9, 0x91, &n);
  cr_expect_eq(mpcheck_validate(a, n, NULL, NULL), CORDON_E_LIMIT);
  free(a);
  a = nested(9, 0x81, &n);
  cr_expect_eq(mpcheck_validate(a, n, NULL, NULL), CORDON_E_LIMIT);
  free(a);
  cr_expect_eq(check_hex("91 91 91 91 91 91 91 91 90", NULL), CORDON_E_LIMIT);
}

Test(mpcheck, rejects_1000_deep_nesting) {
  size_t n;
  uint8_t *a = nested(1000, 0x91, &n);
  cr_expect_eq(mpcheck_validate(a, n, NULL, NULL), CORDON_E_LIMIT);
  free(a);
  a = nested(1000, 0x81, &n);
  cr_expect_eq(mpcheck_validate(a, n, NULL, NULL), CORDON_E_LIMIT);
  free(a);
}

Test(mpcheck, rejects_a_million_deep_nesting_without_recursion) {
  size_t n;
  uint8_t *a = nested(1000000, 0x91, &n);
  cr_expect_eq(mpcheck_validate(a, n, NULL, NULL), CORDON_E_LIMIT);
  a[n - 1] = 0x90; /* also when the innermost is truncated away */
  cr_expect_eq(mpcheck_validate(a, n - 1, NULL, NULL), CORDON_E_LIMIT);
  free(a);
}

Test(mpcheck, depth_counts_siblings_correctly) {
  /* [[1],[2],[[3]]]: depth 3, twice back to depth 1 in between */
  struct mpcheck_limits lim = {3, 16, 16, 100};
  cr_expect_eq(check_hex("93 91 01 91 02 91 91 03", &lim), 0);
  lim.max_depth = 2;
  cr_expect_eq(check_hex("93 91 01 91 02 91 91 03", &lim), CORDON_E_LIMIT);
  cr_expect_eq(check_hex("93 91 01 91 02 91 02", &lim), 0);
  lim.max_depth = 0;
  cr_expect_eq(check_hex("01", &lim), 0);
  cr_expect_eq(check_hex("90", &lim), CORDON_E_LIMIT);
}

Test(mpcheck, str_and_bin_caps_are_inclusive) {
  struct mpcheck_limits lim = {8, 3, 2, 100};
  cr_expect_eq(check_hex("a3 61 62 63", &lim), 0);
  cr_expect_eq(check_hex("a4 61 62 63 64", &lim), CORDON_E_LIMIT);
  cr_expect_eq(check_hex("d9 04 61 62 63 64", &lim), CORDON_E_LIMIT);
  cr_expect_eq(check_hex("c4 02 00 00", &lim), 0);
  cr_expect_eq(check_hex("c4 03 00 00 00", &lim), CORDON_E_LIMIT);
  cr_expect_eq(check_hex("92 a1 61 c4 03 00 00 00", &lim), CORDON_E_LIMIT);
}

Test(mpcheck, item_cap_counts_keys_values_and_containers) {
  struct mpcheck_limits lim = {8, 16, 16, 5};
  cr_expect_eq(check_hex("82 01 02 03 04", &lim), 0); /* 1 map + 4 */
  cr_expect_eq(check_hex("94 01 02 03 04", &lim), 0);
  cr_expect_eq(check_hex("95 01 02 03 04 05", &lim), CORDON_E_LIMIT);
}

Test(mpcheck, rejects_bad_arguments) {
  uint8_t b = 0xc0;
  size_t used;
  struct mpcheck_limits lim = {MPCHECK_DEPTH_MAX + 1, 1, 1, 1};
  cr_expect_eq(mpcheck_validate(NULL, 1, NULL, NULL), -EINVAL);
  cr_expect_eq(mpcheck_validate(&b, 1, &lim, NULL), -EINVAL);
  lim = (struct mpcheck_limits){1, 1, 1, 0};
  cr_expect_eq(mpcheck_validate(&b, 1, &lim, NULL), -EINVAL);
  cr_expect_eq(mpcheck_measure(&b, 1, NULL, NULL, NULL), -EINVAL);
  cr_expect_eq(mpcheck_measure(&b, 1, NULL, &used, NULL), 0);
}

Test(mpcheck, diag_names_the_offset) {
  struct cordon_diag d = {{0}};
  uint8_t buf[] = {0x92, 0x01, 0xd4, 0x00, 0x00};
  cr_expect_eq(mpcheck_validate(buf, sizeof(buf), NULL, &d), CORDON_E_PROTOCOL);
  cr_expect(strstr(d.msg, "ext") && strstr(d.msg, "offset 2"), "diag: %s", d.msg);
}

/* What msgpack-c itself packs is accepted, and what the validator accepts
 * msgpack-c parses completely. */
Test(mpcheck, agrees_with_msgpack_c) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 3);
  msgpack_pack_str_with_body(&pk, "t", 1);
  msgpack_pack_str_with_body(&pk, "hello", 5);
  msgpack_pack_str_with_body(&pk, "list", 4);
  msgpack_pack_array(&pk, 300);
  for (int i = 0; i < 300; i++)
    msgpack_pack_int64(&pk, (int64_t)i * -1000003);
  msgpack_pack_str_with_body(&pk, "blob", 4);
  uint8_t blob[70000] = {0};
  msgpack_pack_bin_with_body(&pk, blob, sizeof(blob));

  cr_expect_eq(mpcheck_validate((uint8_t *)sb.data, sb.size, NULL, NULL), 0);
  msgpack_unpacked up;
  size_t off = 0;
  msgpack_unpacked_init(&up);
  cr_expect_eq(msgpack_unpack_next(&up, sb.data, sb.size, &off), MSGPACK_UNPACK_SUCCESS);
  cr_expect_eq(off, sb.size);
  msgpack_unpacked_destroy(&up);
  msgpack_sbuffer_destroy(&sb);
}

Test(mpcheck, random_inputs_it_accepts_parse_fully_in_msgpack_c) {
  uint8_t buf[64];
  unsigned seed = 12345;
  unsigned accepted = 0;
  for (int iter = 0; iter < 200000; iter++) {
    size_t n = 1 + (size_t)(rand_r(&seed) % sizeof(buf));
    for (size_t i = 0; i < n; i++) {
      /* Bias towards small lengths and container headers. */
      unsigned r = (unsigned)rand_r(&seed);
      buf[i] = (r & 3) == 0 ? (uint8_t)(0x90 + (r >> 8) % 4) : (uint8_t)(r >> 4);
    }
    if (mpcheck_validate(buf, n, NULL, NULL) != 0)
      continue;
    accepted++;
    msgpack_unpacked up;
    size_t off = 0;
    msgpack_unpacked_init(&up);
    cr_assert_eq(msgpack_unpack_next(&up, (const char *)buf, n, &off), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(off, n);
    msgpack_unpacked_destroy(&up);
  }
  cr_expect_gt(accepted, 100, "the generator should produce some valid inputs");
}

Test(mpcheck, never_allocates) {
  uint8_t buf[256];
  unsigned seed = 99;
  long before = alloc_calls;
  for (int iter = 0; iter < 100000; iter++) {
    size_t n = (size_t)(rand_r(&seed) % sizeof(buf));
    for (size_t i = 0; i < n; i++)
      buf[i] = (uint8_t)rand_r(&seed);
    struct cordon_diag d;
    (void)mpcheck_validate(buf, n, NULL, &d);
  }
  long calls = alloc_calls - before;
  cr_expect_eq(calls, 0, "%ld allocations (counting %s)", calls, ALLOC_COUNTING ? "on" : "off");
}
