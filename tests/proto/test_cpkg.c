#include <criterion/criterion.h>
#include <msgpack.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/cpkg.h"

static const char manifest_json[] =
    "{\"name\":\"t\",\"version\":\"1.0.0\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

static uint8_t sk[crypto_sign_SECRETKEYBYTES], pk[crypto_sign_PUBLICKEYBYTES];
static uint8_t other_sk[crypto_sign_SECRETKEYBYTES], other_pk[crypto_sign_PUBLICKEYBYTES];
static struct cpkg_trust *trust;

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  crypto_sign_keypair(pk, sk);
  crypto_sign_keypair(other_pk, other_sk);
  cr_assert_eq(cpkg_trust_new(&trust), 0);
  cr_assert_eq(cpkg_trust_add(trust, pk), 0);
}

static void teardown(void) {
  cpkg_trust_free(trust);
}

TestSuite(cpkg, .init = setup, .fini = teardown);

/* ---- building test packages --------------------------------------------- */

struct tf {
  const char *path;
  uint32_t mode;
  const char *data;
  size_t len;
};

static int tf_cmp(const void *a, const void *b) {
  return cpkg_path_cmp(((const struct tf *)a)->path, ((const struct tf *)b)->path);
}

static uint8_t *concat3(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                        const uint8_t *c, size_t clen, size_t *out_len) {
  uint8_t *p = malloc(alen + blen + clen + 1);
  cr_assert(p);
  memcpy(p, a, alen);
  memcpy(p + alen, b, blen);
  if (clen)
    memcpy(p + alen + blen, c, clen);
  *out_len = alen + blen + clen;
  return p;
}

/* Package of the given files plus manifest.json, signed with key. */
static uint8_t *build_with(const uint8_t *key, const struct tf *in, size_t n, size_t *out_len) {
  struct tf *all = calloc(n + 1, sizeof(*all));
  memcpy(all, in, n * sizeof(*in));
  all[n] = (struct tf){CPKG_MANIFEST_PATH, 0644, manifest_json, strlen(manifest_json)};
  qsort(all, n + 1, sizeof(*all), tf_cmp);
  struct cpkg_file *f = calloc(n + 1, sizeof(*f));
  size_t total = 0;
  for (size_t i = 0; i <= n; i++) {
    f[i].path = all[i].path;
    f[i].mode = all[i].mode;
    f[i].size = all[i].len;
    crypto_generichash(f[i].hash, 32, (const uint8_t *)all[i].data, all[i].len, NULL, 0);
    total += all[i].len;
  }
  uint8_t *index = NULL;
  size_t index_len = 0;
  struct cordon_diag d = {{0}};
  cr_assert_eq(cpkg_index_encode((const uint8_t *)manifest_json, strlen(manifest_json), f, n + 1,
                                 &index, &index_len, &d),
               0, "%s", d.msg);
  uint8_t hdr[CPKG_HEADER_SIZE];
  cr_assert_eq(cpkg_header_build(index, index_len, key, hdr), 0);
  uint8_t *contents = malloc(total + 1);
  size_t off = 0;
  for (size_t i = 0; i <= n; i++) {
    memcpy(contents + off, all[i].data, all[i].len);
    off += all[i].len;
  }
  uint8_t *pkg = concat3(hdr, sizeof(hdr), index, index_len, contents, total, out_len);
  free(contents);
  free(index);
  free(f);
  free(all);
  return pkg;
}

static const struct tf small_files[] = {
    {"run.sh", 0755, "echo hi\n", 8},
    {"lib/a.txt", 0644, "alpha", 5},
    {"lib/empty", 0644, "", 0},
    {"lib/sub/b.bin", 0644, "\x00\x01\x02", 3},
};
#define N_SMALL (sizeof(small_files) / sizeof(small_files[0]))

static uint8_t *build_small(size_t *out_len) {
  return build_with(sk, small_files, N_SMALL, out_len);
}

/* Sign arbitrary index bytes and append contents. */
static uint8_t *build_raw(const uint8_t *index, size_t index_len, const uint8_t *contents,
                          size_t clen, size_t *out_len) {
  uint8_t hdr[CPKG_HEADER_SIZE];
  cr_assert_eq(cpkg_header_build(index, index_len, sk, hdr), 0);
  return concat3(hdr, sizeof(hdr), index, index_len, contents, clen, out_len);
}

/* ---- verifying ------------------------------------------------------------ */

struct seen {
  size_t begins, ends, data_bytes;
  int done;
  char last_path[256];
};

static int feed(struct cpkg_stream *s, const uint8_t *buf, size_t len, struct seen *seen,
                struct cordon_diag *d) {
  size_t off = 0;
  for (;;) {
    size_t used = 0;
    struct cpkg_event ev;
    int err = cpkg_stream_next(s, buf ? buf + off : NULL, len - off, &used, &ev, d);
    if (err)
      return err;
    cr_assert_leq(used, len - off);
    off += used;
    const struct cpkg_index *idx = cpkg_stream_index(s);
    switch (ev.type) {
    case CPKG_EVENT_NEED_MORE:
      cr_assert_eq(off, len);
      return 0;
    case CPKG_EVENT_INDEX:
      cr_assert(idx);
      break;
    case CPKG_EVENT_FILE_BEGIN:
      cr_assert_eq(ev.file, seen->begins);
      seen->begins++;
      snprintf(seen->last_path, sizeof(seen->last_path), "%s", idx->files[ev.file].path);
      break;
    case CPKG_EVENT_FILE_DATA:
      cr_assert_eq(ev.file + 1, seen->begins);
      cr_assert(ev.len > 0);
      seen->data_bytes += ev.len;
      break;
    case CPKG_EVENT_FILE_END:
      cr_assert_eq(ev.file, seen->ends);
      seen->ends++;
      break;
    case CPKG_EVENT_DONE:
      cr_assert_eq(seen->ends, idx->n_files);
      seen->done = 1;
      break;
    }
  }
}

static int verify_chunked(const struct cpkg_trust *t, const uint8_t *pkg, size_t len, size_t chunk,
                          struct seen *out_seen, struct cordon_diag *d) {
  struct cpkg_stream *s = NULL;
  cr_assert_eq(cpkg_stream_new(t, &s), 0);
  struct seen seen = {0};
  int err = 0;
  for (size_t off = 0; off < len && !err; off += chunk)
    err = feed(s, pkg + off, off + chunk > len ? len - off : chunk, &seen, d);
  if (!err)
    err = feed(s, NULL, 0, &seen, d);
  if (!err)
    err = cpkg_stream_finish(s, d);
  if (!err)
    cr_assert(seen.done);
  cpkg_stream_free(s);
  if (out_seen)
    *out_seen = seen;
  return err;
}

static int verify(const uint8_t *pkg, size_t len, struct cordon_diag *d) {
  return verify_chunked(trust, pkg, len, len ? len : 1, NULL, d);
}

/* ---- the happy path -------------------------------------------------------- */

Test(cpkg, small_package_verifies_in_any_chunking) {
  size_t len;
  uint8_t *pkg = build_small(&len);
  static const size_t chunks[] = {1, 2, 3, 7, 64, 95, 96, 97, 4096};
  for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
    struct seen seen;
    struct cordon_diag d = {{0}};
    cr_assert_eq(verify_chunked(trust, pkg, len, chunks[i], &seen, &d), 0, "chunk %zu: %s",
                 chunks[i], d.msg);
    cr_assert_eq(seen.begins, N_SMALL + 1);
    cr_assert_eq(seen.data_bytes, 8 + 5 + 0 + 3 + strlen(manifest_json));
  }
  free(pkg);
}

Test(cpkg, index_lists_files_in_package_order_with_offsets) {
  size_t len;
  uint8_t *pkg = build_small(&len);
  uint32_t index_len = (uint32_t)pkg[12] << 24 | pkg[13] << 16 | pkg[14] << 8 | pkg[15];
  struct cpkg_index *idx = NULL;
  cr_assert_eq(cpkg_index_parse(pkg + CPKG_HEADER_SIZE, index_len, &idx, NULL), 0);
  static const char *const order[] = {"lib/a.txt", "lib/empty", "lib/sub/b.bin", "manifest.json",
                                      "run.sh"};
  cr_assert_eq(idx->n_files, 5);
  uint64_t off = 0;
  for (size_t i = 0; i < 5; i++) {
    cr_assert_str_eq(idx->files[i].path, order[i]);
    cr_assert_eq(idx->files[i].offset, off);
    off += idx->files[i].size;
  }
  cr_assert_eq(idx->total, off);
  cr_assert_eq(idx->files[4].mode, 0755);
  cr_assert_eq(idx->manifest_len, strlen(manifest_json));
  cr_assert_eq(memcmp(idx->manifest_json, manifest_json, idx->manifest_len), 0);
  cr_assert_eq(len, CPKG_HEADER_SIZE + index_len + off);
  cpkg_index_free(idx);
  free(pkg);
}

Test(cpkg, index_hash_is_blake2b_of_the_index_and_stable) {
  size_t len, len2;
  uint8_t *a = build_small(&len), *b = build_small(&len2);
  cr_assert_eq(len, len2);
  cr_assert_eq(memcmp(a, b, len), 0, "same input, different bytes");
  struct cpkg_stream *s;
  cr_assert_eq(cpkg_stream_new(trust, &s), 0);
  struct seen seen = {0};
  cr_assert_eq(feed(s, a, len, &seen, NULL), 0);
  cr_assert_eq(cpkg_stream_finish(s, NULL), 0);
  uint8_t h[32], want[32];
  cr_assert_eq(cpkg_stream_index_hash(s, h), 0);
  uint32_t index_len = (uint32_t)a[12] << 24 | a[13] << 16 | a[14] << 8 | a[15];
  crypto_generichash(want, 32, a + CPKG_HEADER_SIZE, index_len, NULL, 0);
  cr_assert_eq(memcmp(h, want, 32), 0);
  cr_assert_eq(cpkg_stream_package_size(s), len);
  cpkg_stream_free(s);
  free(a);
  free(b);
}

Test(cpkg, signature_is_plain_ed25519_over_the_domain_separated_hash) {
  size_t len;
  uint8_t *pkg = build_small(&len);
  uint32_t index_len = (uint32_t)pkg[12] << 24 | pkg[13] << 16 | pkg[14] << 8 | pkg[15];
  uint8_t msg[21 + 32];
  memcpy(msg, "cordon-cpkg-index-v1", 21);
  crypto_generichash(msg + 21, 32, pkg + CPKG_HEADER_SIZE, index_len, NULL, 0);
  cr_assert_eq(crypto_sign_verify_detached(pkg + 32, msg, sizeof(msg), pk), 0);
  uint8_t id[16], h[32];
  crypto_generichash(h, 32, pk, 32, NULL, 0);
  cpkg_key_id(pk, id);
  cr_assert_eq(memcmp(id, h, 16), 0);
  cr_assert_eq(memcmp(pkg + 16, id, 16), 0);
  cr_assert_eq(memcmp(pkg, "CPKG\r\n\x1a\n\x00\x01\x00\x00", 12), 0);
  free(pkg);
}

/* ---- tampering ------------------------------------------------------------- */

Test(cpkg, every_flipped_byte_is_refused) {
  size_t len;
  uint8_t *pkg = build_small(&len);
  uint32_t index_len = (uint32_t)pkg[12] << 24 | pkg[13] << 16 | pkg[14] << 8 | pkg[15];
  for (size_t i = 0; i < len; i++) {
    for (int bit = 0; bit < 8; bit += 7) {
      pkg[i] ^= (uint8_t)(1u << bit);
      struct cordon_diag d = {{0}};
      int err = verify(pkg, len, &d);
      pkg[i] ^= (uint8_t)(1u << bit);
      cr_assert_neq(err, 0, "flipping bit %d of byte %zu was accepted", bit, i);
      cr_assert(d.msg[0], "no diagnostic for byte %zu", i);
      if (i >= 16 && i < 32)
        cr_assert_eq(err, CORDON_E_UNKNOWN_KEY, "byte %zu: %s", i, d.msg);
      else if (i >= 32 && i < CPKG_HEADER_SIZE + index_len)
        cr_assert_eq(err, CORDON_E_SIGNATURE_INVALID, "byte %zu: %s", i, d.msg);
      else if (i >= CPKG_HEADER_SIZE + index_len)
        cr_assert_eq(err, CORDON_E_PACKAGE_CORRUPT, "byte %zu: %s", i, d.msg);
    }
  }
  free(pkg);
}

Test(cpkg, every_truncation_is_refused) {
  size_t len;
  uint8_t *pkg = build_small(&len);
  for (size_t cut = 0; cut < len; cut++) {
    struct cordon_diag d = {{0}};
    int err = verify_chunked(trust, pkg, cut, 5, NULL, &d);
    cr_assert_neq(err, 0, "package cut at %zu of %zu accepted", cut, len);
    cr_assert(strstr(d.msg, "truncated") || err == CORDON_E_PACKAGE_CORRUPT, "cut %zu: %s", cut,
              d.msg);
  }
  free(pkg);
}

Test(cpkg, trailing_bytes_are_refused) {
  size_t len;
  uint8_t *pkg = build_small(&len);
  uint8_t *longer = concat3(pkg, len, (const uint8_t *)"x", 1, NULL, 0, &len);
  struct cordon_diag d = {{0}};
  cr_assert_eq(verify(longer, len, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_assert(strstr(d.msg, "trailing"), "%s", d.msg);
  free(pkg);
  free(longer);
}

Test(cpkg, valid_signature_by_untrusted_key_is_unknown_key) {
  size_t len;
  uint8_t *pkg = build_with(other_sk, small_files, N_SMALL, &len);
  struct cordon_diag d = {{0}};
  cr_assert_eq(verify(pkg, len, &d), CORDON_E_UNKNOWN_KEY);
  cr_assert(strstr(d.msg, "key id"), "%s", d.msg);
  /* ... and with no trusted key at all */
  struct cpkg_trust *empty;
  cr_assert_eq(cpkg_trust_new(&empty), 0);
  cr_assert_eq(verify_chunked(empty, pkg, len, len, NULL, NULL), CORDON_E_UNKNOWN_KEY);
  /* ... and accepted once trusted */
  cr_assert_eq(cpkg_trust_add(empty, other_pk), 0);
  cr_assert_eq(cpkg_trust_add(empty, other_pk), 0);
  cr_assert_eq(cpkg_trust_count(empty), 1);
  cr_assert_eq(verify_chunked(empty, pkg, len, len, NULL, NULL), 0);
  cpkg_trust_free(empty);
  free(pkg);
}

Test(cpkg, key_id_of_trusted_key_with_signature_of_another_is_invalid) {
  size_t len;
  uint8_t *pkg = build_with(other_sk, small_files, N_SMALL, &len);
  cpkg_key_id(pk, pkg + 16); /* claim the trusted key */
  struct cordon_diag d = {{0}};
  cr_assert_eq(verify(pkg, len, &d), CORDON_E_SIGNATURE_INVALID);
  free(pkg);
}

static size_t index_len_of(const uint8_t *pkg) {
  return (size_t)pkg[12] << 24 | (size_t)pkg[13] << 16 | (size_t)pkg[14] << 8 | pkg[15];
}

Test(cpkg, index_of_one_package_with_files_of_another_names_the_file) {
  static const struct tf b_files[] = {
      {"run.sh", 0755, "echo HI\n", 8},
      {"lib/a.txt", 0644, "alpha", 5},
      {"lib/empty", 0644, "", 0},
      {"lib/sub/b.bin", 0644, "\x00\x01\x02", 3},
  };
  size_t alen, blen;
  uint8_t *a = build_small(&alen), *b = build_with(sk, b_files, 4, &blen);
  size_t ai = CPKG_HEADER_SIZE + index_len_of(a), bi = CPKG_HEADER_SIZE + index_len_of(b);
  size_t mixed_len;
  uint8_t *mixed = concat3(a, ai, b + bi, blen - bi, NULL, 0, &mixed_len);
  struct cordon_diag d = {{0}};
  cr_assert_eq(verify(mixed, mixed_len, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_assert(strstr(d.msg, "'run.sh'"), "%s", d.msg);
  free(a);
  free(b);
  free(mixed);
}

/* An index written by hand, for what cpkg_index_encode refuses to write. */
struct raw_entry {
  const char *path;
  uint64_t mode, size;
  const uint8_t *hash;
};

static uint8_t *raw_index(const struct raw_entry *e, size_t n, uint64_t total, size_t *out_len) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer p;
  msgpack_packer_init(&p, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&p, 4);
  msgpack_pack_str_with_body(&p, "v", 1);
  msgpack_pack_uint64(&p, 1);
  msgpack_pack_str_with_body(&p, "manifest", 8);
  msgpack_pack_bin_with_body(&p, manifest_json, strlen(manifest_json));
  msgpack_pack_str_with_body(&p, "files", 5);
  msgpack_pack_array(&p, n);
  for (size_t i = 0; i < n; i++) {
    msgpack_pack_array(&p, 4);
    msgpack_pack_str_with_body(&p, e[i].path, strlen(e[i].path));
    msgpack_pack_uint64(&p, e[i].mode);
    msgpack_pack_uint64(&p, e[i].size);
    msgpack_pack_bin_with_body(&p, e[i].hash, 32);
  }
  msgpack_pack_str_with_body(&p, "total", 5);
  msgpack_pack_uint64(&p, total);
  *out_len = sb.size;
  return (uint8_t *)msgpack_sbuffer_release(&sb);
}

static uint8_t manifest_hash[32];

static void hash_manifest(void) {
  crypto_generichash(manifest_hash, 32, (const uint8_t *)manifest_json, strlen(manifest_json), NULL,
                     0);
}

Test(cpkg, file_longer_or_shorter_than_declared_is_refused) {
  hash_manifest();
  uint8_t h[32];
  crypto_generichash(h, 32, (const uint8_t *)"abcd", 4, NULL, 0);
  size_t mlen = strlen(manifest_json);
  /* A file declared 4 bytes with the hash of "abcd"; 3 or 5 bytes follow.
   * First before manifest.json, then as the last file. */
  static const struct {
    const char *name;
    int delta;
    const char *expect;
  } cases[] = {
      {"data", -1, "'data'"},          /* takes a byte of manifest.json */
      {"data", +1, "'manifest.json'"}, /* its extra byte shifts the next file */
      {"zdata", -1, "truncated in file 'zdata'"},
      {"zdata", +1, "trailing data"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int last = cases[i].name[0] == 'z';
    struct raw_entry m = {"manifest.json", 0644, mlen, manifest_hash};
    struct raw_entry x = {cases[i].name, 0644, 4, h};
    struct raw_entry e[2];
    e[last ? 1 : 0] = x;
    e[last ? 0 : 1] = m;
    size_t ilen, plen;
    uint8_t *index = raw_index(e, 2, 4 + mlen, &ilen);
    char contents[128];
    size_t clen = 0, xlen = (size_t)(4 + cases[i].delta);
    if (!last) {
      memcpy(contents, "abcde", xlen);
      clen = xlen;
    }
    memcpy(contents + clen, manifest_json, mlen);
    clen += mlen;
    if (last) {
      memcpy(contents + clen, "abcde", xlen);
      clen += xlen;
    }
    uint8_t *pkg = build_raw(index, ilen, (const uint8_t *)contents, clen, &plen);
    struct cordon_diag d = {{0}};
    cr_expect_eq(verify(pkg, plen, &d), CORDON_E_PACKAGE_CORRUPT, "case %zu", i);
    cr_expect(strstr(d.msg, cases[i].expect), "case %zu: %s", i, d.msg);
    free(index);
    free(pkg);
  }
}

Test(cpkg, declared_size_of_2_pow_63_is_too_large) {
  hash_manifest();
  size_t mlen = strlen(manifest_json);
  uint8_t zero[32] = {0};
  struct raw_entry e[] = {{"big", 0644, 1ull << 63, zero},
                          {"manifest.json", 0644, mlen, manifest_hash}};
  size_t ilen, plen;
  uint8_t *index = raw_index(e, 2, (1ull << 63) + mlen, &ilen);
  uint8_t *pkg = build_raw(index, ilen, (const uint8_t *)"x", 1, &plen);
  struct cordon_diag d = {{0}};
  cr_assert_eq(verify(pkg, plen, &d), CORDON_E_PACKAGE_TOO_LARGE);
  cr_assert(strstr(d.msg, "'big'"), "%s", d.msg);
  /* The writer refuses it too. */
  struct cpkg_file f[] = {{.path = "big", .mode = 0644, .size = 1ull << 63},
                          {.path = "manifest.json", .mode = 0644, .size = mlen}};
  memcpy(f[1].hash, manifest_hash, 32);
  uint8_t *out = NULL;
  size_t olen;
  cr_assert_eq(cpkg_index_encode((const uint8_t *)manifest_json, mlen, f, 2, &out, &olen, NULL),
               CORDON_E_PACKAGE_TOO_LARGE);
  free(index);
  free(pkg);
}

Test(cpkg, sizes_summing_past_the_limit_are_too_large) {
  hash_manifest();
  size_t mlen = strlen(manifest_json);
  uint8_t zero[32] = {0};
  struct raw_entry e[] = {{"a", 0644, CPKG_MAX_TOTAL, zero},
                          {"b", 0644, UINT64_MAX - CPKG_MAX_TOTAL + 2, zero},
                          {"manifest.json", 0644, mlen, manifest_hash}};
  size_t ilen;
  uint8_t *index = raw_index(e, 3, mlen + 1, &ilen);
  struct cpkg_index *idx = NULL;
  cr_assert_eq(cpkg_index_parse(index, ilen, &idx, NULL), CORDON_E_PACKAGE_TOO_LARGE);
  free(index);
}

Test(cpkg, wrong_total_is_corrupt) {
  hash_manifest();
  size_t mlen = strlen(manifest_json);
  struct raw_entry e[] = {{"manifest.json", 0644, mlen, manifest_hash}};
  size_t ilen;
  uint8_t *index = raw_index(e, 1, mlen + 1, &ilen);
  struct cpkg_index *idx = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(cpkg_index_parse(index, ilen, &idx, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_assert(strstr(d.msg, "total"), "%s", d.msg);
  free(index);
}

Test(cpkg, manifest_must_match_manifest_json) {
  hash_manifest();
  size_t mlen = strlen(manifest_json);
  uint8_t zero[32] = {0};
  struct raw_entry e[] = {{"manifest.json", 0644, mlen, zero}};
  size_t ilen;
  uint8_t *index = raw_index(e, 1, mlen, &ilen);
  struct cpkg_index *idx = NULL;
  cr_assert_eq(cpkg_index_parse(index, ilen, &idx, NULL), CORDON_E_MANIFEST_INVALID);
  free(index);
  struct raw_entry none[] = {{"other", 0644, mlen, manifest_hash}};
  index = raw_index(none, 1, mlen, &ilen);
  cr_assert_eq(cpkg_index_parse(index, ilen, &idx, NULL), CORDON_E_MANIFEST_INVALID);
  free(index);
}

Test(cpkg, modes_other_than_0644_and_0755_are_refused) {
  hash_manifest();
  size_t mlen = strlen(manifest_json);
  static const uint64_t modes[] = {0600, 0777, 04755, 0100644, 1ull << 40};
  for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
    struct raw_entry e[] = {{"manifest.json", modes[i], mlen, manifest_hash}};
    size_t ilen;
    uint8_t *index = raw_index(e, 1, mlen, &ilen);
    struct cpkg_index *idx = NULL;
    cr_expect_eq(cpkg_index_parse(index, ilen, &idx, NULL), CORDON_E_PACKAGE_CORRUPT, "mode 0%llo",
                 (unsigned long long)modes[i]);
    free(index);
  }
}

/* ---- header ------------------------------------------------------------------ */

Test(cpkg, header_fields_are_checked_before_the_index_is_read) {
  size_t len;
  uint8_t *pkg = build_small(&len);
  struct {
    size_t at;
    uint8_t val;
    int err;
  } cases[] = {
      {0, 'X', CORDON_E_PACKAGE_CORRUPT},     /* magic */
      {9, 2, CORDON_E_PACKAGE_CORRUPT},       /* version 2 */
      {11, 1, CORDON_E_PACKAGE_CORRUPT},      /* flags */
      {12, 0x7f, CORDON_E_PACKAGE_TOO_LARGE}, /* index length 2 GiB */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    uint8_t old = pkg[cases[i].at];
    pkg[cases[i].at] = cases[i].val;
    /* Only the header is fed: the verdict needs no more. */
    struct cpkg_stream *s;
    cr_assert_eq(cpkg_stream_new(trust, &s), 0);
    size_t used;
    struct cpkg_event ev;
    struct cordon_diag d = {{0}};
    cr_expect_eq(cpkg_stream_next(s, pkg, CPKG_HEADER_SIZE, &used, &ev, &d), cases[i].err,
                 "case %zu: %s", i, d.msg);
    /* A failed stream stays failed. */
    cr_expect_eq(cpkg_stream_next(s, pkg, 1, &used, &ev, NULL), cases[i].err);
    cr_expect_eq(cpkg_stream_finish(s, NULL), cases[i].err);
    cpkg_stream_free(s);
    pkg[cases[i].at] = old;
  }
  memset(pkg + 12, 0, 4);
  cr_assert_eq(verify(pkg, len, NULL), CORDON_E_PACKAGE_CORRUPT); /* empty index */
  free(pkg);
}

/* ---- index parser ---------------------------------------------------------- */

Test(cpkg, index_parser_refuses_malformed_msgpack_without_allocating) {
  static const struct {
    const char *bytes;
    size_t len;
    int err;
  } cases[] = {
      {"\xc0", 1, CORDON_E_PACKAGE_CORRUPT},                 /* nil */
      {"\x80", 1, CORDON_E_PACKAGE_CORRUPT},                 /* empty map */
      {"\xdd\xff\xff\xff\xff", 5, CORDON_E_PACKAGE_CORRUPT}, /* array of 2^32-1, no data */
      {"\xdf\x7f\xff\xff\xff", 5, CORDON_E_PACKAGE_CORRUPT}, /* huge map */
      {"\xc6\xff\xff\xff\xff", 5, CORDON_E_PACKAGE_CORRUPT}, /* bin longer than input */
      {"\xd4\x01\x02", 3, CORDON_E_PACKAGE_CORRUPT},         /* ext */
      {"\xc1", 1, CORDON_E_PACKAGE_CORRUPT},                 /* never used */
      {"\x91\x91\x91\x91\x90", 5, CORDON_E_PACKAGE_CORRUPT}, /* too deep */
      {"\xc0\xc0", 2, CORDON_E_PACKAGE_CORRUPT},             /* extra bytes */
      {"\x84\xa1v\x01\xa1v\x01\xa1v\x01\xa1v\x01", 13, CORDON_E_PACKAGE_CORRUPT}, /* repeated key */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct cpkg_index *idx = NULL;
    struct cordon_diag d = {{0}};
    cr_expect_eq(cpkg_index_parse((const uint8_t *)cases[i].bytes, cases[i].len, &idx, &d),
                 cases[i].err, "case %zu: %s", i, d.msg);
    cr_expect_null(idx);
  }
  struct cpkg_index *idx = NULL;
  cr_assert_eq(cpkg_index_parse((const uint8_t *)"", 0, &idx, NULL), CORDON_E_PACKAGE_CORRUPT);
}

Test(cpkg, index_parser_bounds_element_count) {
  /* A flat array with more elements than any allowed index could hold. */
  size_t n = 5 * CPKG_MAX_FILES + 100;
  uint8_t *buf = malloc(5 + n);
  buf[0] = 0xdd;
  buf[1] = (uint8_t)(n >> 24);
  buf[2] = (uint8_t)(n >> 16);
  buf[3] = (uint8_t)(n >> 8);
  buf[4] = (uint8_t)n;
  memset(buf + 5, 0xc0, n);
  struct cpkg_index *idx = NULL;
  cr_assert_eq(cpkg_index_parse(buf, 5 + n, &idx, NULL), CORDON_E_PACKAGE_TOO_LARGE);
  free(buf);
}

Test(cpkg, too_many_files_are_too_large) {
  hash_manifest();
  size_t n = CPKG_MAX_FILES + 1;
  struct cpkg_file *f = calloc(n, sizeof(*f));
  char *names = malloc(n * 16);
  for (size_t i = 0; i < n; i++) {
    snprintf(names + 16 * i, 16, "f%07zu", i);
    f[i].path = names + 16 * i;
    f[i].mode = 0644;
  }
  uint8_t *out = NULL;
  size_t olen;
  struct cordon_diag d = {{0}};
  cr_assert_eq(cpkg_index_encode((const uint8_t *)manifest_json, strlen(manifest_json), f, n, &out,
                                 &olen, &d),
               CORDON_E_PACKAGE_TOO_LARGE, "%s", d.msg);
  free(f);
  free(names);
}

/* ---- paths ----------------------------------------------------------------- */

Test(cpkg, path_rules) {
  static const char *const good[] = {
      "a",        "run.sh", "dir/file",  "a/b/c/d", ".hidden",
      "..x",      "x..y",   "a b",       " lead",   "console",
      "cons.d/x", "com10",  "lpt",       "COMx",    "auxiliary.txt",
      "nul_",     "x.aux",  "a-b_c+d=e", "$dollar", "{}[]()!@#%^&~`,;'",
  };
  static const char *const bad[] = {
      "/abs",          "a//b",       "a/",      "./a",     "a/./b",    "..",       "../a",
      "a/../b",        "a/..",       "CON",     "con",     "Con.txt",  "aux.txt",  "AUX",
      "nul",           "NUL.tar.gz", "prn",     "com1",    "COM9.log", "lpt1",     "Lpt9.x",
      "com0",          "conin$",     "CONOUT$", "dir/aux", "aux/file", "nul .txt", "trailing.",
      "trailing ",     "dir./x",     "dir /x",  "a:b",     "a\\b",     "a*b",      "a?b",
      "a\"b",          "a<b",        "a>b",     "a|b",     "tab\tx",   "nl\nx",    "del\x7f",
      "utf8-\xc3\xa9",
  };
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    struct cordon_diag d = {{0}};
    cr_expect_eq(cpkg_path_check(good[i], strlen(good[i]), &d), 0, "'%s' refused: %s", good[i],
                 d.msg);
  }
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct cordon_diag d = {{0}};
    cr_expect_eq(cpkg_path_check(bad[i], strlen(bad[i]), &d), CORDON_E_PACKAGE_CORRUPT,
                 "path %zu accepted", i);
    cr_expect(d.msg[0]);
  }
  cr_assert_eq(cpkg_path_check("", 0, NULL), CORDON_E_PACKAGE_CORRUPT);
  cr_assert_eq(cpkg_path_check("a\0b", 3, NULL), CORDON_E_PACKAGE_CORRUPT);
}

Test(cpkg, path_length_limits) {
  char buf[2 * CPKG_MAX_PATH];
  memset(buf, 'a', sizeof(buf));
  cr_assert_eq(cpkg_path_check(buf, CPKG_MAX_NAME, NULL), 0);
  cr_assert_eq(cpkg_path_check(buf, CPKG_MAX_NAME + 1, NULL), CORDON_E_PACKAGE_TOO_LARGE);
  for (size_t i = 100; i < sizeof(buf); i += 101)
    buf[i] = '/';
  cr_assert_eq(cpkg_path_check(buf, CPKG_MAX_PATH, NULL), 0);
  cr_assert_eq(cpkg_path_check(buf, CPKG_MAX_PATH + 1, NULL), CORDON_E_PACKAGE_TOO_LARGE);
  /* depth */
  char deep[2 * CPKG_MAX_DEPTH + 2];
  for (size_t i = 0; i < sizeof(deep); i += 2) {
    deep[i] = 'd';
    deep[i + 1] = '/';
  }
  cr_assert_eq(cpkg_path_check(deep, 2 * CPKG_MAX_DEPTH - 1, NULL), 0);
  cr_assert_eq(cpkg_path_check(deep, 2 * CPKG_MAX_DEPTH + 1, NULL), CORDON_E_PACKAGE_TOO_LARGE);
}

Test(cpkg, diagnostics_escape_control_bytes) {
  struct cordon_diag d = {{0}};
  cr_assert_eq(cpkg_path_check("bad\nname\x1b[31m", 13, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_assert_null(strchr(d.msg, '\n'));
  cr_assert_null(strchr(d.msg, '\x1b'));
  cr_assert(strstr(d.msg, "\\x0a"), "%s", d.msg);
}

Test(cpkg, path_order_puts_directory_contents_together) {
  cr_assert_lt(cpkg_path_cmp("a", "a/b"), 0);
  cr_assert_lt(cpkg_path_cmp("a/b", "a-x"), 0);
  cr_assert_lt(cpkg_path_cmp("a/z", "a b"), 0);
  cr_assert_lt(cpkg_path_cmp("B", "a"), 0); /* bytewise: upper case first */
  cr_assert_eq(cpkg_path_cmp("x/y", "x/y"), 0);
  cr_assert_gt(cpkg_path_cmp("ab", "a"), 0);
}

static int check_names(const char *const *names, size_t n, struct cordon_diag *d) {
  hash_manifest();
  struct cpkg_file *f = calloc(n + 1, sizeof(*f));
  for (size_t i = 0; i < n; i++) {
    f[i].path = names[i];
    f[i].mode = 0644;
  }
  f[n].path = "manifest.json";
  f[n].mode = 0644;
  f[n].size = strlen(manifest_json);
  memcpy(f[n].hash, manifest_hash, 32);
  /* sort in package order */
  for (size_t i = 1; i <= n; i++)
    for (size_t j = i; j > 0 && cpkg_path_cmp(f[j - 1].path, f[j].path) > 0; j--) {
      struct cpkg_file t = f[j];
      f[j] = f[j - 1];
      f[j - 1] = t;
    }
  int err = cpkg_files_check(f, n + 1, (const uint8_t *)manifest_json, strlen(manifest_json), d);
  free(f);
  return err;
}

Test(cpkg, table_rules_duplicates_case_and_file_directory_clashes) {
  static const char *const dup[] = {"a", "a"};
  static const char *const casedup[] = {"README", "readme"};
  static const char *const casedir[] = {"Lib/x", "lib/y"};
  static const char *const casedir2[] = {"Lib/x", "lib-2", "lib/y"};
  static const char *const filedir[] = {"a", "a/b"};
  static const char *const filedir2[] = {"a", "a b", "a/b"};
  static const char *const filedir_case[] = {"A", "a/b"};
  static const char *const casemanifest[] = {"Manifest.json"};
  static const char *const ok[] = {"a/b", "a/c", "a b/c", "a-b", "b/a/b"};
  struct cordon_diag d = {{0}};
  cr_expect_eq(check_names(dup, 2, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_expect_eq(check_names(casedup, 2, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_expect(strstr(d.msg, "case"), "%s", d.msg);
  cr_expect_eq(check_names(casedir, 2, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_expect_eq(check_names(casedir2, 3, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_expect_eq(check_names(filedir, 2, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_expect(strstr(d.msg, "directory"), "%s", d.msg);
  cr_expect_eq(check_names(filedir2, 3, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_expect_eq(check_names(filedir_case, 2, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_expect_eq(check_names(casemanifest, 1, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_expect_eq(check_names(ok, 5, &d), 0, "%s", d.msg);
}

Test(cpkg, table_must_be_in_package_order) {
  hash_manifest();
  struct cpkg_file f[2] = {{.path = "manifest.json", .mode = 0644, .size = strlen(manifest_json)},
                           {.path = "a", .mode = 0644}};
  memcpy(f[0].hash, manifest_hash, 32);
  struct cordon_diag d = {{0}};
  cr_assert_eq(cpkg_files_check(f, 2, (const uint8_t *)manifest_json, strlen(manifest_json), &d),
               CORDON_E_PACKAGE_CORRUPT);
  cr_assert(strstr(d.msg, "order"), "%s", d.msg);
}

Test(cpkg, signed_index_with_a_bad_path_is_refused_after_the_signature) {
  hash_manifest();
  size_t mlen = strlen(manifest_json);
  uint8_t h[32];
  crypto_generichash(h, 32, NULL, 0, NULL, 0);
  static const char *const paths[] = {"../escape", "/etc/passwd", "aux.txt", "a\\b", "x."};
  for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
    struct raw_entry e[] = {{paths[i], 0644, 0, h}, {"manifest.json", 0644, mlen, manifest_hash}};
    if (cpkg_path_cmp(e[0].path, e[1].path) > 0) {
      struct raw_entry t = e[0];
      e[0] = e[1];
      e[1] = t;
    }
    size_t ilen, plen;
    uint8_t *index = raw_index(e, 2, mlen, &ilen);
    uint8_t *pkg = build_raw(index, ilen, (const uint8_t *)manifest_json, mlen, &plen);
    struct cordon_diag d = {{0}};
    cr_expect_eq(verify(pkg, plen, &d), CORDON_E_PACKAGE_CORRUPT, "'%s': %s", paths[i], d.msg);
    free(index);
    free(pkg);
  }
}

Test(cpkg, hundred_thousand_files_verify_quickly) {
  hash_manifest();
  size_t n = CPKG_MAX_FILES;
  struct cpkg_file *f = calloc(n, sizeof(*f));
  char *names = malloc(n * 24);
  uint8_t h[32];
  crypto_generichash(h, 32, (const uint8_t *)"x", 1, NULL, 0);
  size_t k = 0;
  for (size_t i = 0; k < n - 1; i++) {
    snprintf(names + 24 * k, 24, "d%03zu/f%05zu", i / 1000, i % 1000);
    f[k].path = names + 24 * k;
    f[k].mode = 0644;
    f[k].size = 1;
    memcpy(f[k].hash, h, 32);
    k++;
  }
  f[k] = (struct cpkg_file){.path = "manifest.json", .mode = 0644, .size = strlen(manifest_json)};
  memcpy(f[k].hash, manifest_hash, 32);
  uint8_t *index = NULL;
  size_t ilen;
  struct cordon_diag d = {{0}};
  clock_t t0 = clock();
  cr_assert_eq(cpkg_index_encode((const uint8_t *)manifest_json, strlen(manifest_json), f, n,
                                 &index, &ilen, &d),
               0, "%s", d.msg);
  cr_assert_leq(ilen, CPKG_MAX_INDEX);
  size_t clen = n - 1 + strlen(manifest_json);
  uint8_t *contents = malloc(clen);
  memset(contents, 'x', n - 1);
  memcpy(contents + n - 1, manifest_json, strlen(manifest_json));
  size_t plen;
  uint8_t *pkg = build_raw(index, ilen, contents, clen, &plen);
  struct seen seen;
  cr_assert_eq(verify_chunked(trust, pkg, plen, 65536, &seen, &d), 0, "%s", d.msg);
  cr_assert_eq(seen.ends, n);
  double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  cr_assert_lt(secs, 20.0, "took %.1fs", secs);
  free(index);
  free(contents);
  free(pkg);
  free(f);
  free(names);
}
