/* server/pkgcache.c, the cache of verified package indexes: a hit only for
 * the same file unchanged (identity and times) verified with the same
 * keys, nothing cached for a file changed in the last PKGCACHE_RACY_S
 * seconds, at most its size with the least recently used entry replaced;
 * and end to end through the daemon: a package file replaced, or changed
 * in place, after its verification was cached is verified again (a
 * corrupted one refused), and a retired publisher key is not trusted
 * through the cache. */
#include <fcntl.h>
#include <sodium.h>
#include <sys/time.h>

#include "e2e.h"
#include "server/pkgcache.h"

static const uint8_t hash_a[CPKG_HASH_SIZE] = {1}, hash_b[CPKG_HASH_SIZE] = {2};

/* A file in dir whose times are set 10 s back, its stat into *st; the
 * change time cannot be set back: callers wait out the racy window once. */
static void make_file(const char *dir, const char *name, const char *body, struct stat *st) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(body, f);
  fclose(f);
  cr_assert_eq(stat(path, st), 0);
}

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

Test(pkgcache, a_file_changed_just_now_is_not_cached_then_it_is) {
  struct pkgcache *c;
  cr_assert_eq(pkgcache_new(0, &c), 0);
  uint8_t trust[PKGCACHE_TRUST_SIZE];
  const uint8_t keys[1][32] = {{7}};
  pkgcache_trust_digest(keys, 1, trust);
  struct stat st;
  make_file(unit_dir, "a.cpkg", "package a", &st);
  cr_assert_eq(pkgcache_put(c, &st, trust, hash_a, 9, "{\"m\":1}", 7), -EAGAIN);
  struct pkgcache_hit hit;
  cr_assert_eq(pkgcache_get(c, &st, trust, &hit), -ENOENT);
  cr_assert_eq(pkgcache_count(c), 0);

  sleep(PKGCACHE_RACY_S + 1);
  cr_assert_eq(pkgcache_put(c, &st, trust, hash_a, 9, "{\"m\":1}", 7), 0);
  cr_assert_eq(pkgcache_get(c, &st, trust, &hit), 0);
  cr_assert_eq(memcmp(hit.hash, hash_a, CPKG_HASH_SIZE), 0);
  cr_assert_eq(hit.size, 9);
  cr_assert_eq(hit.manifest_len, 7);
  cr_assert_str_eq(hit.manifest_json, "{\"m\":1}");
  free(hit.manifest_json);
  pkgcache_free(c);
}

Test(pkgcache, a_changed_file_or_other_keys_miss) {
  struct pkgcache *c;
  cr_assert_eq(pkgcache_new(0, &c), 0);
  uint8_t trust[PKGCACHE_TRUST_SIZE], trust2[PKGCACHE_TRUST_SIZE];
  const uint8_t keys[2][32] = {{7}, {8}};
  pkgcache_trust_digest(keys, 1, trust);
  pkgcache_trust_digest(keys, 2, trust2);
  cr_assert_neq(memcmp(trust, trust2, sizeof(trust)), 0);
  struct stat st, other;
  make_file(unit_dir, "a.cpkg", "package a", &st);
  make_file(unit_dir, "b.cpkg", "package b", &other);
  sleep(PKGCACHE_RACY_S + 1);
  cr_assert_eq(pkgcache_put(c, &st, trust, hash_a, 9, "{}", 2), 0);
  struct pkgcache_hit hit;
  cr_assert_eq(pkgcache_get(c, &st, trust2, &hit), -ENOENT, "verified with other keys");
  cr_assert_eq(pkgcache_get(c, &other, trust, &hit), -ENOENT, "another file");

  /* each field of the identity on its own */
  struct stat x = st;
  x.st_size++;
  cr_assert_eq(pkgcache_get(c, &x, trust, &hit), -ENOENT, "size");
  x = st;
  x.st_ino++;
  cr_assert_eq(pkgcache_get(c, &x, trust, &hit), -ENOENT, "inode");
  x = st;
  x.st_mtim.tv_nsec ^= 1;
  cr_assert_eq(pkgcache_get(c, &x, trust, &hit), -ENOENT, "mtime");
  x = st;
  x.st_ctim.tv_nsec ^= 1;
  cr_assert_eq(pkgcache_get(c, &x, trust, &hit), -ENOENT, "ctime");

  /* written in place with the same size: the real file's stat misses */
  char path[512];
  snprintf(path, sizeof(path), "%s/a.cpkg", unit_dir);
  int fd = open(path, O_WRONLY);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, "PACKAGE A", 9), 9);
  close(fd);
  cr_assert_eq(stat(path, &x), 0);
  cr_assert_eq(x.st_size, st.st_size);
  cr_assert_eq(pkgcache_get(c, &x, trust, &hit), -ENOENT, "changed in place");
  cr_assert_eq(pkgcache_get(c, &st, trust, &hit), 0, "the entry itself is still there");
  free(hit.manifest_json);

  /* the same file put again with other keys replaces its entry */
  cr_assert_eq(pkgcache_put(c, &st, trust2, hash_b, 9, "{}", 2), 0);
  cr_assert_eq(pkgcache_count(c), 1);
  cr_assert_eq(pkgcache_get(c, &st, trust, &hit), -ENOENT);
  cr_assert_eq(pkgcache_get(c, &st, trust2, &hit), 0);
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
  struct stat st[5];
  for (int i = 0; i < 5; i++) {
    char name[16];
    snprintf(name, sizeof(name), "%d.cpkg", i);
    make_file(unit_dir, name, name, &st[i]);
  }
  sleep(PKGCACHE_RACY_S + 1);
  struct pkgcache_hit hit;
  for (int i = 0; i < 3; i++)
    cr_assert_eq(pkgcache_put(c, &st[i], trust, hash_a, 1, "{}", 2), 0);
  cr_assert_eq(pkgcache_get(c, &st[0], trust, &hit), 0, "0 is used again: 1 is the oldest now");
  free(hit.manifest_json);
  cr_assert_eq(pkgcache_put(c, &st[3], trust, hash_a, 1, "{}", 2), 0);
  cr_assert_eq(pkgcache_count(c), 3);
  cr_assert_eq(pkgcache_get(c, &st[1], trust, &hit), -ENOENT, "the least recently used went");
  for (int i = 0; i < 4; i++) {
    if (i == 1)
      continue;
    cr_assert_eq(pkgcache_get(c, &st[i], trust, &hit), 0, "entry %d kept", i);
    free(hit.manifest_json);
  }
  /* 0, 2, 3 just used in that order: 0 goes next */
  cr_assert_eq(pkgcache_put(c, &st[4], trust, hash_a, 1, "{}", 2), 0);
  cr_assert_eq(pkgcache_get(c, &st[0], trust, &hit), -ENOENT);
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
  sleep(PKGCACHE_RACY_S + 1); /* old enough to be cached */
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

  /* cached again once old enough, then its signature overwritten in place
   * (the same size, the same inode): refused, not taken from the cache */
  sleep(PKGCACHE_RACY_S + 1);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(dispatch_out(a, one, out, sizeof(out)), 0, "%s", out);
    cr_assert_str_eq(out, "two\n");
  }
  struct stat before, after;
  cr_assert_eq(stat(one, &before), 0);
  int fd = open(one, O_RDWR);
  cr_assert_geq(fd, 0);
  uint8_t buf[256];
  cr_assert_eq(pread(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
  for (size_t i = 16; i < sizeof(buf); i++)
    buf[i] ^= 0x5a;
  cr_assert_eq(pwrite(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
  close(fd);
  cr_assert_eq(stat(one, &after), 0);
  cr_assert_eq(after.st_ino, before.st_ino);
  cr_assert_eq(after.st_size, before.st_size);
  cr_assert_neq(dispatch_out(a, one, out, sizeof(out)), 0, "the corrupted package is refused");
  /* the key id is among the bytes changed: refused as signed by no key
   * it trusts, or as corrupt */
  cr_assert(strstr(out, "unknown_key") || strstr(out, "package_corrupt"), "%s", out);

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
  sleep(PKGCACHE_RACY_S + 1);
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
