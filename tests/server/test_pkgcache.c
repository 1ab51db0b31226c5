/* server/pkgcache.c, the cache of verified package indexes: keyed by the
 * header and index bytes (not what follows), a hit only for the same key
 * verified with the same keys, at most its size with the least recently
 * used entry replaced; and end to end through the daemon: a package whose
 * signature or index changed after its verification was cached is
 * verified again (and refused), another package under the same name runs,
 * and a retired publisher key is not trusted through the cache. */
#include <fcntl.h>
#include <sodium.h>

#include "e2e.h"
#include "server/pkgcache.h"

static const uint8_t hash_a[CPKG_HASH_SIZE] = {1}, hash_b[CPKG_HASH_SIZE] = {2};
static const uint8_t key_a[PKGCACHE_KEY_SIZE] = {1}, key_b[PKGCACHE_KEY_SIZE] = {2};

static char unit_dir[64];

static void unit_setup(void) {
  cr_assert_eq(sodium_init() >= 0, 1);
  snprintf(unit_dir, sizeof(unit_dir), "/tmp/cordon-pkgcache-XXXXXX");
  cr_assert(mkdtemp(unit_dir));
}

static void unit_teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", unit_dir);
  (void)!system(cmd);
}

TestSuite(pkgcache, .init = unit_setup, .fini = unit_teardown, .timeout = 60);

/* A package-shaped file: a header declaring an index of index_len bytes,
 * then total bytes in all (header, index, contents); byte at[i] ^= 1 for
 * each of the n offsets. Its fd. */
static int shaped(const char *name, uint32_t index_len, size_t total, const size_t *at, size_t n) {
  static uint8_t buf[8192];
  cr_assert_leq(total, sizeof(buf));
  for (size_t i = 0; i < total; i++)
    buf[i] = (uint8_t)(i * 7);
  memcpy(buf, CPKG_MAGIC, CPKG_MAGIC_SIZE);
  buf[12] = (uint8_t)(index_len >> 24), buf[13] = (uint8_t)(index_len >> 16);
  buf[14] = (uint8_t)(index_len >> 8), buf[15] = (uint8_t)index_len;
  for (size_t i = 0; i < n; i++)
    buf[at[i]] ^= 1;
  char path[256];
  snprintf(path, sizeof(path), "%s/%s", unit_dir, name);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, buf, total), (ssize_t)total);
  return fd;
}

Test(pkgcache, the_key_covers_the_header_and_the_index_and_nothing_after) {
  uint8_t a[PKGCACHE_KEY_SIZE], b[PKGCACHE_KEY_SIZE];
  int fa = shaped("a", 1000, 4000, NULL, 0), fb = shaped("b", 1000, 4000, NULL, 0);
  cr_assert_eq(pkgcache_key_of_fd(fa, a), 0);
  cr_assert_eq(pkgcache_key_of_fd(fb, b), 0);
  cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "the same bytes in another file: the same key");
  close(fb);
  const size_t signature[] = {60}, index_end[] = {CPKG_HEADER_SIZE + 999},
               contents[] = {CPKG_HEADER_SIZE + 1000};
  fb = shaped("b", 1000, 4000, signature, 1);
  cr_assert_eq(pkgcache_key_of_fd(fb, b), 0);
  cr_assert_neq(memcmp(a, b, sizeof(a)), 0, "a signature byte");
  close(fb);
  fb = shaped("b", 1000, 4000, index_end, 1);
  cr_assert_eq(pkgcache_key_of_fd(fb, b), 0);
  cr_assert_neq(memcmp(a, b, sizeof(a)), 0, "the index's last byte");
  close(fb);
  fb = shaped("b", 1000, 4000, contents, 1);
  cr_assert_eq(pkgcache_key_of_fd(fb, b), 0);
  cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "the contents are the agent's to check");
  close(fb);
  fb = shaped("b", 1000, CPKG_HEADER_SIZE + 999, NULL, 0);
  cr_assert_eq(pkgcache_key_of_fd(fb, b), -EINVAL, "ends before its index");
  close(fb);
  const size_t magic[] = {0};
  fb = shaped("b", 1000, 4000, magic, 1);
  cr_assert_eq(pkgcache_key_of_fd(fb, b), -EINVAL, "not a package");
  close(fb);
  fb = shaped("b", CPKG_MAX_INDEX + 1, 4000, NULL, 0);
  cr_assert_eq(pkgcache_key_of_fd(fb, b), -EINVAL, "an index over the limit");
  close(fb);
  close(fa);
}

Test(pkgcache, a_hit_only_for_the_same_key_and_the_same_keys_trusted) {
  struct pkgcache *c;
  cr_assert_eq(pkgcache_new(0, &c), 0);
  uint8_t trust[PKGCACHE_TRUST_SIZE], trust2[PKGCACHE_TRUST_SIZE];
  const uint8_t keys[2][32] = {{7}, {8}};
  pkgcache_trust_digest(keys, 1, trust);
  pkgcache_trust_digest(keys, 2, trust2);
  cr_assert_neq(memcmp(trust, trust2, sizeof(trust)), 0);
  struct pkgcache_hit hit;
  cr_assert_eq(pkgcache_get(c, key_a, trust, &hit), -ENOENT);
  cr_assert_eq(pkgcache_put(c, key_a, trust, hash_a, 9, "{\"m\":1}", 7), 0);
  cr_assert_eq(pkgcache_get(c, key_a, trust, &hit), 0);
  cr_assert_eq(memcmp(hit.hash, hash_a, CPKG_HASH_SIZE), 0);
  cr_assert_eq(hit.size, 9);
  cr_assert_eq(hit.manifest_len, 7);
  cr_assert_str_eq(hit.manifest_json, "{\"m\":1}");
  free(hit.manifest_json);
  cr_assert_eq(pkgcache_get(c, key_a, trust2, &hit), -ENOENT, "verified with other keys");
  cr_assert_eq(pkgcache_get(c, key_b, trust, &hit), -ENOENT, "other bytes");

  cr_assert_eq(pkgcache_put(c, key_a, trust2, hash_b, 9, "{}", 2), 0);
  cr_assert_eq(pkgcache_count(c), 2, "one entry per key and trust");
  cr_assert_eq(pkgcache_put(c, key_a, trust2, hash_b, 9, "{}", 2), 0);
  cr_assert_eq(pkgcache_count(c), 2, "put again: replaced");
  cr_assert_eq(pkgcache_get(c, key_a, trust2, &hit), 0);
  cr_assert_eq(memcmp(hit.hash, hash_b, CPKG_HASH_SIZE), 0);
  free(hit.manifest_json);
  pkgcache_free(c);
}

Test(pkgcache, it_holds_at_most_its_size_and_drops_the_least_recently_used) {
  struct pkgcache *c;
  cr_assert_eq(pkgcache_new(PKGCACHE_MAX + 1, &c), -EINVAL);
  cr_assert_eq(pkgcache_new(3, &c), 0);
  uint8_t trust[PKGCACHE_TRUST_SIZE];
  const uint8_t keys[1][32] = {{7}};
  pkgcache_trust_digest(keys, 1, trust);
  uint8_t k[5][PKGCACHE_KEY_SIZE] = {{10}, {11}, {12}, {13}, {14}};
  struct pkgcache_hit hit;
  for (int i = 0; i < 3; i++)
    cr_assert_eq(pkgcache_put(c, k[i], trust, hash_a, 1, "{}", 2), 0);
  cr_assert_eq(pkgcache_get(c, k[0], trust, &hit), 0, "0 is used again: 1 is the oldest now");
  free(hit.manifest_json);
  cr_assert_eq(pkgcache_put(c, k[3], trust, hash_a, 1, "{}", 2), 0);
  cr_assert_eq(pkgcache_count(c), 3);
  cr_assert_eq(pkgcache_get(c, k[1], trust, &hit), -ENOENT, "the least recently used went");
  for (int i = 0; i < 4; i++) {
    if (i == 1)
      continue;
    cr_assert_eq(pkgcache_get(c, k[i], trust, &hit), 0, "entry %d kept", i);
    free(hit.manifest_json);
  }
  /* 0, 2, 3 just used in that order: 0 goes next */
  cr_assert_eq(pkgcache_put(c, k[4], trust, hash_a, 1, "{}", 2), 0);
  cr_assert_eq(pkgcache_get(c, k[0], trust, &hit), -ENOENT);
  cr_assert_eq(pkgcache_count(c), 3);
  pkgcache_free(c);
}

/* ---- through the daemon ---- */

TestSuite(pkgcache_daemon, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

static const char manifest[] =
    "{\"name\":\"pc\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

/* dispatch pkg: 0 and its stdout into out, or the exit status and the
 * stderr into out */
static int dispatch_out(const struct e2e_agent *a, const char *pkg, char *out, size_t cap) {
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", "--device", a->id, pkg, "--state", e2e_state);
  int st = o->status;
  if (st != 0) {
    snprintf(out, cap, "%.2000s", o->err);
    free(o);
    return st;
  }
  char id[33];
  job_id_of(o, id);
  free(o);
  cr_assert(wait_state(id, "done", 20000), "state %s", job_state(id, NULL));
  json_t *job;
  job_state(id, &job);
  snprintf(out, cap, "%s",
           json_string_value(json_object_get(json_object_get(job, "result"), "stdout")));
  json_decref(job);
  return 0;
}

Test(pkgcache_daemon, a_package_file_changed_after_it_was_verified_is_verified_again) {
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  start_agent(a);
  char *one = pack("one", manifest, "echo one\n");
  char *two = pack("two", manifest, "echo two\n");
  char out[4096];
  for (int i = 0; i < 2; i++) { /* verified and cached, then from the cache */
    cr_assert_eq(dispatch_out(a, one, out, sizeof(out)), 0, "%s", out);
    cr_assert_str_eq(out, "one\n");
  }

  /* another package renamed over it: another file, the new package runs */
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "cp %s %s.new && mv %s.new %s", two, one, one, one);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(dispatch_out(a, one, out, sizeof(out)), 0, "%s", out);
  cr_assert_str_eq(out, "two\n");

  /* cached, then its signature changed in place (the same size): refused,
   * not taken from the cache */
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(dispatch_out(a, one, out, sizeof(out)), 0, "%s", out);
    cr_assert_str_eq(out, "two\n");
  }
  struct stat before, after;
  cr_assert_eq(stat(one, &before), 0);
  int fd = open(one, O_RDWR);
  cr_assert_geq(fd, 0);
  uint8_t buf[CPKG_SIG_SIZE];
  off_t sig_at = CPKG_HEADER_SIZE - CPKG_SIG_SIZE;
  cr_assert_eq(pread(fd, buf, sizeof(buf), sig_at), (ssize_t)sizeof(buf));
  buf[10] ^= 1;
  cr_assert_eq(pwrite(fd, buf, sizeof(buf), sig_at), (ssize_t)sizeof(buf));
  close(fd);
  cr_assert_eq(stat(one, &after), 0);
  cr_assert_eq(after.st_ino, before.st_ino);
  cr_assert_eq(after.st_size, before.st_size);
  cr_assert_neq(dispatch_out(a, one, out, sizeof(out)), 0, "the corrupted package is refused");
  cr_assert(strstr(out, "signature_invalid"), "%s", out);

  /* the package left alone keeps running */
  cr_assert_eq(dispatch_out(a, two, out, sizeof(out)), 0, "%s", out);
  cr_assert_str_eq(out, "two\n");
  free(one);
  free(two);
}

Test(pkgcache_daemon, a_retired_key_is_not_trusted_through_the_cache) {
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  start_agent(a);
  char *old_pkg = pack("old", manifest, "echo ok\n");
  char out[4096];
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(dispatch_out(a, old_pkg, out, sizeof(out)), 0, "%s", out);
    cr_assert_str_eq(out, "ok\n");
  }
  struct out *o = RUN(SERVER, "keys", "list", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *l = json_loads(o->out, 0, NULL);
  free(o);
  char old_pub[33] = "";
  size_t i;
  json_t *k;
  json_array_foreach(l, i, k) {
    if (strcmp(json_string_value(json_object_get(k, "role")), "publisher") == 0)
      snprintf(old_pub, sizeof(old_pub), "%s", json_string_value(json_object_get(k, "id")));
  }
  json_decref(l);
  cr_assert_eq(strlen(old_pub), 32);
  o = RUN(SERVER, "keys", "rotate", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  cr_assert(wait_in(a->log, "msg=\"server keys updated\" serial=1", 5000));
  cr_assert_eq(dispatch_out(a, old_pkg, out, sizeof(out)), 0, "old key, not retired: %s", out);
  o = RUN(SERVER, "keys", "retire", old_pub, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  cr_assert(wait_in(a->log, "msg=\"server keys updated\" serial=2", 5000));
  cr_assert_neq(dispatch_out(a, old_pkg, out, sizeof(out)), 0, "the retired key's package");
  cr_assert(strstr(out, "unknown_key"), "%s", out);
  free(old_pkg);
}
