#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/cpkg_stage.h"
#include "agent/trust.h"
#include "proto/keyfile.h"
#include "server/pack.h"

static const char manifest_json[] =
    "{\"name\":\"stage-test\",\"version\":\"1.0.0\",\"entry\":[\"/bin/sh\",\"run.sh\"]}\n";

static uint8_t sk[crypto_sign_SECRETKEYBYTES], pk[crypto_sign_PUBLICKEYBYTES];
static struct cpkg_trust *trust;
static char tmp[256];

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  crypto_sign_keypair(pk, sk);
  cr_assert_eq(cpkg_trust_new(&trust), 0);
  cr_assert_eq(cpkg_trust_add(trust, pk), 0);
  /* tmpfs when there is one: the 100 000-file test then measures our code,
   * not the disk's metadata speed. */
  snprintf(tmp, sizeof(tmp), "%s/cordon-test-stage-XXXXXX",
           access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  cr_assert(mkdtemp(tmp));
}

static void teardown(void) {
  cpkg_trust_free(trust);
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
  if (system(cmd) != 0)
    cr_log_warn("cleanup of %s failed", tmp);
}

TestSuite(cpkg_stage, .init = setup, .fini = teardown);

/* ---- helpers --------------------------------------------------------------- */

static void write_file(const char *root, const char *rel, const void *data, size_t len,
                       mode_t mode) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  /* parents */
  for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
    *p = '\0';
    mkdir(path, 0755);
    *p = '/';
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(write(fd, data, len), (ssize_t)len);
  cr_assert_eq(fchmod(fd, mode), 0);
  close(fd);
}

static char *path_in(const char *name) {
  char *p = NULL;
  cr_assert(asprintf(&p, "%s/%s", tmp, name) > 0);
  return p;
}

/* A small source tree: nested dirs, an executable, an empty file. */
static char *make_src(const char *name) {
  char *src = path_in(name);
  cr_assert_eq(mkdir(src, 0755), 0);
  write_file(src, "manifest.json", manifest_json, strlen(manifest_json), 0644);
  write_file(src, "run.sh", "#!/bin/sh\necho hello\n", 21, 0700);
  write_file(src, "lib/a.txt", "alpha\n", 6, 0600);
  write_file(src, "lib/empty", "", 0, 0644);
  write_file(src, "lib/deep/er/b.bin", "\x00\x01\x02\x03", 4, 0751);
  return src;
}

static char *make_pkg(const char *src, const char *name, const uint8_t *key,
                      struct pack_summary *out_sum) {
  char *out = path_in(name);
  struct cordon_diag d = {{0}};
  struct pack_summary sum;
  cr_assert_eq(pack_dir(src, out, key, &sum, &d), 0, "%s", d.msg);
  if (out_sum)
    *out_sum = sum;
  return out;
}

static uint8_t *read_all(const char *path, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "%s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)n + 1);
  cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *out_len = (size_t)n;
  return buf;
}

static void write_all_to(const char *path, const uint8_t *buf, size_t len) {
  FILE *f = fopen(path, "wb");
  cr_assert(f);
  cr_assert_eq(fwrite(buf, 1, len, f), len);
  fclose(f);
}

static int new_stage(const char *name) {
  char *p = path_in(name);
  cr_assert_eq(mkdir(p, 0700), 0, "%s: %s", p, strerror(errno));
  int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  free(p);
  return fd;
}

static size_t count_entries(int dirfd) {
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fdopendir(fd);
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
      n++;
  closedir(d);
  return n;
}

static int stage(const char *pkg, int dirfd, struct manifest **out_m, uint8_t hash[32],
                 struct cordon_diag *d) {
  struct manifest *m = NULL;
  uint8_t h[32];
  int err = agent_cpkg_stage(pkg, trust, dirfd, &m, h, d);
  if (!err) {
    if (out_m)
      *out_m = m;
    else
      manifest_free(m);
    if (hash)
      memcpy(hash, h, 32);
  }
  return err;
}

static mode_t mode_at(int dirfd, const char *rel) {
  struct stat st;
  cr_assert_eq(fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW), 0, "%s", rel);
  return st.st_mode;
}

/* ---- tests ----------------------------------------------------------------- */

Test(cpkg_stage, stages_files_with_masked_modes_and_contents) {
  char *src = make_src("src");
  struct pack_summary sum;
  char *pkg = make_pkg(src, "a.cpkg", sk, &sum);
  cr_assert_eq(sum.n_files, 5);
  int dirfd = new_stage("stage");
  struct manifest *m = NULL;
  uint8_t hash[32];
  struct cordon_diag d = {{0}};
  cr_assert_eq(stage(pkg, dirfd, &m, hash, &d), 0, "%s", d.msg);
  cr_assert_str_eq(m->name, "stage-test");
  cr_assert_eq(memcmp(hash, sum.index_hash, 32), 0);
  manifest_free(m);
  cr_assert_eq(mode_at(dirfd, "run.sh"), S_IFREG | 0755);
  cr_assert_eq(mode_at(dirfd, "manifest.json"), S_IFREG | 0644);
  cr_assert_eq(mode_at(dirfd, "lib"), S_IFDIR | 0755);
  cr_assert_eq(mode_at(dirfd, "lib/a.txt"), S_IFREG | 0644);
  cr_assert_eq(mode_at(dirfd, "lib/empty"), S_IFREG | 0644);
  cr_assert_eq(mode_at(dirfd, "lib/deep/er"), S_IFDIR | 0755);
  cr_assert_eq(mode_at(dirfd, "lib/deep/er/b.bin"), S_IFREG | 0755);
  char *p = path_in("stage/lib/deep/er/b.bin");
  size_t len;
  uint8_t *got = read_all(p, &len);
  cr_assert_eq(len, 4);
  cr_assert_eq(memcmp(got, "\x00\x01\x02\x03", 4), 0);
  free(got);
  free(p);
  p = path_in("stage/manifest.json");
  got = read_all(p, &len);
  cr_assert_eq(len, strlen(manifest_json));
  cr_assert_eq(memcmp(got, manifest_json, len), 0);
  free(got);
  free(p);
  close(dirfd);
  free(pkg);
  free(src);
}

Test(cpkg_stage, every_flipped_byte_is_refused_and_nothing_is_left) {
  char *src = make_src("src");
  char *pkg = make_pkg(src, "a.cpkg", sk, NULL);
  size_t len;
  uint8_t *bytes = read_all(pkg, &len);
  char *bad = path_in("bad.cpkg");
  for (size_t i = 0; i < len; i++) {
    bytes[i] ^= 0x01;
    write_all_to(bad, bytes, len);
    bytes[i] ^= 0x01;
    char name[32];
    snprintf(name, sizeof(name), "s%zu", i);
    int dirfd = new_stage(name);
    struct cordon_diag d = {{0}};
    int err = stage(bad, dirfd, NULL, NULL, &d);
    cr_assert_neq(err, 0, "byte %zu flipped and accepted", i);
    cr_assert(err == CORDON_E_PACKAGE_CORRUPT || err == CORDON_E_SIGNATURE_INVALID ||
                  err == CORDON_E_UNKNOWN_KEY || err == CORDON_E_PACKAGE_TOO_LARGE,
              "byte %zu: %s", i, cordon_err_name(err));
    cr_assert_eq(count_entries(dirfd), 0, "byte %zu left files behind", i);
    close(dirfd);
  }
  free(bytes);
  free(bad);
  free(pkg);
  free(src);
}

Test(cpkg_stage, every_truncation_is_refused_and_nothing_is_left) {
  char *src = make_src("src");
  char *pkg = make_pkg(src, "a.cpkg", sk, NULL);
  size_t len;
  uint8_t *bytes = read_all(pkg, &len);
  char *bad = path_in("cut.cpkg");
  int dirfd = new_stage("stage");
  for (size_t cut = 0; cut < len; cut++) {
    write_all_to(bad, bytes, cut);
    struct cordon_diag d = {{0}};
    cr_assert_eq(stage(bad, dirfd, NULL, NULL, &d), CORDON_E_PACKAGE_CORRUPT, "cut %zu: %s", cut,
                 d.msg);
    cr_assert_eq(count_entries(dirfd), 0, "cut %zu left files behind", cut);
  }
  /* One byte more is refused too. */
  uint8_t *longer = realloc(bytes, len + 1);
  longer[len] = 0;
  write_all_to(bad, longer, len + 1);
  cr_assert_eq(stage(bad, dirfd, NULL, NULL, NULL), CORDON_E_PACKAGE_CORRUPT);
  cr_assert_eq(count_entries(dirfd), 0);
  close(dirfd);
  free(longer);
  free(bad);
  free(pkg);
  free(src);
}

Test(cpkg_stage, untrusted_key_is_unknown_key) {
  uint8_t other_pk[32], other_sk[64];
  crypto_sign_keypair(other_pk, other_sk);
  char *src = make_src("src");
  char *pkg = make_pkg(src, "a.cpkg", other_sk, NULL);
  int dirfd = new_stage("stage");
  struct cordon_diag d = {{0}};
  cr_assert_eq(stage(pkg, dirfd, NULL, NULL, &d), CORDON_E_UNKNOWN_KEY, "%s", d.msg);
  cr_assert_eq(count_entries(dirfd), 0);
  close(dirfd);
  free(pkg);
  free(src);
}

Test(cpkg_stage, index_of_a_with_files_of_b_names_the_file) {
  char *src = make_src("src");
  char *a = make_pkg(src, "a.cpkg", sk, NULL);
  write_file(src, "lib/a.txt", "ALPHA\n", 6, 0600); /* same size, other bytes */
  char *b = make_pkg(src, "b.cpkg", sk, NULL);
  size_t alen, blen;
  uint8_t *ab = read_all(a, &alen), *bb = read_all(b, &blen);
  cr_assert_eq(alen, blen);
  size_t contents = CPKG_HEADER_SIZE + ((size_t)ab[12] << 24 | ab[13] << 16 | ab[14] << 8 | ab[15]);
  memcpy(ab + contents, bb + contents, alen - contents);
  char *mixed = path_in("mixed.cpkg");
  write_all_to(mixed, ab, alen);
  int dirfd = new_stage("stage");
  struct cordon_diag d = {{0}};
  cr_assert_eq(stage(mixed, dirfd, NULL, NULL, &d), CORDON_E_PACKAGE_CORRUPT);
  cr_assert(strstr(d.msg, "'lib/a.txt'"), "%s", d.msg);
  cr_assert_eq(count_entries(dirfd), 0);
  close(dirfd);
  free(ab);
  free(bb);
  free(mixed);
  free(a);
  free(b);
  free(src);
}

Test(cpkg_stage, refuses_a_stage_directory_that_is_not_empty) {
  char *src = make_src("src");
  char *pkg = make_pkg(src, "a.cpkg", sk, NULL);
  int dirfd = new_stage("stage");
  int fd = openat(dirfd, "keep", O_WRONLY | O_CREAT | O_EXCL, 0600);
  close(fd);
  struct cordon_diag d = {{0}};
  cr_assert_eq(stage(pkg, dirfd, NULL, NULL, &d), -ENOTEMPTY);
  cr_assert(strstr(d.msg, "not empty"), "%s", d.msg);
  cr_assert_eq(count_entries(dirfd), 1); /* the caller's file is untouched */
  close(dirfd);
  free(pkg);
  free(src);
}

Test(cpkg_stage, missing_package_is_an_errno) {
  int dirfd = new_stage("stage");
  struct cordon_diag d = {{0}};
  cr_assert_eq(stage("/nonexistent/x.cpkg", dirfd, NULL, NULL, &d), -ENOENT);
  close(dirfd);
}

Test(cpkg_stage, invalid_manifest_in_a_signed_package_is_manifest_invalid) {
  /* pack refuses a bad manifest, so build this one by hand. */
  static const char bad[] = "{\"name\":\"x\",\"version\":\"1\",\"entry\":[\"run\"],\"bogus\":1}";
  struct cpkg_file f = {.path = "manifest.json", .mode = 0644, .size = strlen(bad)};
  crypto_generichash(f.hash, 32, (const uint8_t *)bad, strlen(bad), NULL, 0);
  uint8_t *index = NULL, hdr[CPKG_HEADER_SIZE];
  size_t ilen;
  cr_assert_eq(cpkg_index_encode((const uint8_t *)bad, strlen(bad), &f, 1, &index, &ilen, NULL), 0);
  cr_assert_eq(cpkg_header_build(index, ilen, sk, hdr), 0);
  char *pkg = path_in("m.cpkg");
  FILE *fp = fopen(pkg, "wb");
  fwrite(hdr, 1, sizeof(hdr), fp);
  fwrite(index, 1, ilen, fp);
  fwrite(bad, 1, strlen(bad), fp);
  fclose(fp);
  int dirfd = new_stage("stage");
  struct cordon_diag d = {{0}};
  cr_assert_eq(stage(pkg, dirfd, NULL, NULL, &d), CORDON_E_MANIFEST_INVALID);
  cr_assert(strstr(d.msg, "bogus"), "%s", d.msg);
  cr_assert_eq(count_entries(dirfd), 0);
  close(dirfd);
  free(index);
  free(pkg);
}

Test(cpkg_stage, stager_accepts_one_byte_chunks) {
  char *src = make_src("src");
  char *pkg = make_pkg(src, "a.cpkg", sk, NULL);
  size_t len;
  uint8_t *bytes = read_all(pkg, &len);
  int dirfd = new_stage("stage");
  struct agent_cpkg_stager *st = NULL;
  cr_assert_eq(agent_cpkg_stager_new(trust, dirfd, &st, NULL), 0);
  for (size_t i = 0; i < len; i++)
    cr_assert_eq(agent_cpkg_stager_feed(st, bytes + i, 1, NULL), 0, "byte %zu", i);
  struct manifest *m = NULL;
  uint8_t h[32];
  cr_assert_eq(agent_cpkg_stager_finish(st, &m, h, NULL), 0);
  agent_cpkg_stager_free(st);
  manifest_free(m);
  cr_assert_eq(count_entries(dirfd), 3); /* manifest.json, run.sh, lib */
  close(dirfd);
  free(bytes);
  free(pkg);
  free(src);
}

Test(cpkg_stage, freeing_an_unfinished_stager_removes_what_it_wrote) {
  char *src = make_src("src");
  char *pkg = make_pkg(src, "a.cpkg", sk, NULL);
  size_t len;
  uint8_t *bytes = read_all(pkg, &len);
  int dirfd = new_stage("stage");
  struct agent_cpkg_stager *st = NULL;
  cr_assert_eq(agent_cpkg_stager_new(trust, dirfd, &st, NULL), 0);
  cr_assert_eq(agent_cpkg_stager_feed(st, bytes, len - 3, NULL), 0);
  cr_assert_gt(count_entries(dirfd), 0);
  agent_cpkg_stager_free(st);
  cr_assert_eq(count_entries(dirfd), 0);
  close(dirfd);
  free(bytes);
  free(pkg);
  free(src);
}

Test(cpkg_stage, hundred_thousand_tiny_files, .timeout = 300) {
  char *src = path_in("many");
  cr_assert_eq(mkdir(src, 0755), 0);
  write_file(src, "manifest.json", manifest_json, strlen(manifest_json), 0644);
  char rel[64];
  for (unsigned i = 0; i < CPKG_MAX_FILES - 1; i++) {
    if (i % 1000 == 0) {
      snprintf(rel, sizeof(rel), "%s/d%03u", src, i / 1000);
      cr_assert_eq(mkdir(rel, 0755), 0);
    }
    snprintf(rel, sizeof(rel), "%s/d%03u/f%03u", src, i / 1000, i % 1000);
    int fd = open(rel, O_WRONLY | O_CREAT | O_EXCL, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, &i, 1), 1);
    close(fd);
  }
  struct timespec t0, t1, t2;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  struct pack_summary sum;
  char *pkg = make_pkg(src, "many.cpkg", sk, &sum);
  cr_assert_eq(sum.n_files, CPKG_MAX_FILES);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  int dirfd = new_stage("stage");
  struct cordon_diag d = {{0}};
  cr_assert_eq(stage(pkg, dirfd, NULL, NULL, &d), 0, "%s", d.msg);
  clock_gettime(CLOCK_MONOTONIC, &t2);
  double pack_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  double stage_s = (double)(t2.tv_sec - t1.tv_sec) + (double)(t2.tv_nsec - t1.tv_nsec) / 1e9;
  cr_log_info("100000 files: pack %.2fs, verify+stage %.2fs", pack_s, stage_s);
  cr_assert_lt(pack_s, 60.0);
  cr_assert_lt(stage_s, 60.0);
  cr_assert_eq(count_entries(dirfd), 101); /* manifest.json + d000..d099 */
  close(dirfd);
  /* One file more is too many for pack. */
  snprintf(rel, sizeof(rel), "%s/one-more", src);
  write_file(src, "one-more", "x", 1, 0644);
  char *out = path_in("toomany.cpkg");
  cr_assert_eq(pack_dir(src, out, sk, NULL, &d), CORDON_E_PACKAGE_TOO_LARGE);
  cr_assert_eq(access(out, F_OK), -1);
  free(out);
  free(pkg);
  free(src);
}

/* ---- trust ------------------------------------------------------------------ */

static void write_pub(const char *path, const uint8_t *key) {
  char line[KEYFILE_MAX_BYTES];
  size_t len;
  cr_assert_eq(keyfile_format(KEYFILE_PUBLISHER_PUBLIC, key, "test", line, sizeof(line), &len), 0);
  write_all_to(path, (const uint8_t *)line, len);
}

Test(cpkg_stage, trust_file_and_directory) {
  uint8_t k1[32], k2[32], s[64];
  crypto_sign_keypair(k1, s);
  crypto_sign_keypair(k2, s);
  char *dir = path_in("trusted");
  cr_assert_eq(mkdir(dir, 0700), 0);
  char *p1 = path_in("trusted/one.pub"), *p2 = path_in("trusted/two.pub"),
       *other = path_in("trusted/README");
  write_pub(p1, k1);
  write_pub(p2, k2);
  write_all_to(other, (const uint8_t *)"not a key", 9);
  struct cpkg_trust *t;
  cr_assert_eq(cpkg_trust_new(&t), 0);
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_trust_load_dir(t, dir, &d), 0, "%s", d.msg);
  cr_assert_eq(cpkg_trust_count(t), 2);
  cr_assert_eq(agent_trust_load_file(t, p1, &d), 0);
  cr_assert_eq(cpkg_trust_count(t), 2);
  uint8_t id[16];
  cpkg_key_id(k2, id);
  cr_assert_not_null(cpkg_trust_find(t, id));
  char *missing = path_in("no-such-dir");
  cr_assert_eq(agent_trust_load_dir(t, missing, &d), 0);
  cr_assert_eq(agent_trust_load_file(t, missing, &d), -ENOENT);
  /* A malformed .pub is an error naming it, never skipped. */
  char *bad = path_in("trusted/bad.pub");
  write_all_to(bad, (const uint8_t *)"cordon-publisher-v1 nope\n", 25);
  cr_assert_eq(agent_trust_load_dir(t, dir, &d), CORDON_E_CONFIG_INVALID);
  cr_assert(strstr(d.msg, "bad.pub"), "%s", d.msg);
  cr_assert_eq(agent_trust_load_file(t, bad, &d), CORDON_E_CONFIG_INVALID);
  unlink(bad);
  /* A symlinked .pub in the directory is not followed. */
  char *link = path_in("trusted/link.pub");
  cr_assert_eq(symlink(p1, link), 0);
  cr_assert_eq(agent_trust_load_dir(t, dir, &d), CORDON_E_CONFIG_INVALID);
  cpkg_trust_free(t);
  free(dir);
  free(p1);
  free(p2);
  free(other);
  free(missing);
  free(bad);
  free(link);
}

Test(cpkg_stage, clear_dir_does_not_follow_links) {
  char *outside = path_in("outside");
  cr_assert_eq(mkdir(outside, 0755), 0);
  write_file(outside, "precious", "x", 1, 0644);
  int dirfd = new_stage("stage");
  char *link = path_in("stage/link");
  cr_assert_eq(symlink(outside, link), 0);
  cr_assert_eq(mkdirat(dirfd, "sub", 0755), 0);
  char *link2 = path_in("stage/sub/link2");
  cr_assert_eq(symlink(outside, link2), 0);
  cr_assert_eq(agent_cpkg_clear_dir(dirfd), 0);
  cr_assert_eq(count_entries(dirfd), 0);
  char *precious = path_in("outside/precious");
  cr_assert_eq(access(precious, F_OK), 0);
  close(dirfd);
  free(outside);
  free(link);
  free(link2);
  free(precious);
}

/* ---- through cordon-agent exec ---------------------------------------------- */

#define AGENT CORDON_BINARY_DIR "/cordon-agent"

/* Run `cordon-agent --config CFG exec PKG --trust PUB`; stdout into out. */
static int agent_exec(const char *cfg, const char *pkg, const char *pub, char *out, size_t cap) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    close(fds[0]);
    execl(AGENT, AGENT, "--config", cfg, "exec", pkg, "--trust", pub, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(fds[0], out + n, cap - 1 - n)) > 0)
    n += (size_t)r;
  out[n] = '\0';
  close(fds[0]);
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status));
  return WEXITSTATUS(status);
}

Test(cpkg_stage, agent_exec_never_runs_a_tampered_package, .timeout = 300) {
  if (access(AGENT, X_OK) != 0)
    cr_skip_test("no cordon-agent built");
  char *src = path_in("src");
  cr_assert_eq(mkdir(src, 0755), 0);
  static const char m[] = "{\"name\":\"marker\",\"version\":\"1.0.0\",\"entry\":[\"/bin/sh\","
                          "\"run.sh\"],\"min_sandbox\":\"none\"}\n";
  write_file(src, "manifest.json", m, strlen(m), 0644);
  write_file(src, "run.sh", "echo RAN-MARKER\n", 16, 0755);
  write_file(src, "lib/data", "0123456789abcdef", 16, 0644);
  char *pkg = make_pkg(src, "m.cpkg", sk, NULL);
  char *pub = path_in("publisher.pub");
  char line[KEYFILE_MAX_BYTES];
  size_t line_len;
  cr_assert_eq(keyfile_format(KEYFILE_PUBLISHER_PUBLIC, pk, NULL, line, sizeof(line), &line_len),
               0);
  write_all_to(pub, (const uint8_t *)line, line_len);
  /* The job user must be able to reach the agent's job directories. */
  cr_assert_eq(chmod(tmp, 0711), 0);
  char *cfg = path_in("config");
  cr_assert_eq(mkdir(cfg, 0700), 0);
  static char out[65536];

  /* The control: the untouched package runs. */
  cr_assert_eq(agent_exec(cfg, pkg, pub, out, sizeof(out)), 0, "%s", out);
  cr_assert(strstr(out, "RAN-MARKER"), "%s", out);

  size_t len;
  uint8_t *bytes = read_all(pkg, &len);
  char *bad = path_in("bad.cpkg");
  /* Bytes spread over header, key id, signature, index and contents, and
   * every cut at a stride. */
  for (size_t i = 0; i < len; i += (i < 96 ? 5 : 11)) {
    bytes[i] ^= 0x20;
    write_all_to(bad, bytes, len);
    bytes[i] ^= 0x20;
    cr_assert_eq(agent_exec(cfg, bad, pub, out, sizeof(out)), 1, "byte %zu: %s", i, out);
    cr_assert_null(strstr(out, "RAN-MARKER"), "byte %zu ran", i);
    cr_assert(strstr(out, "\"error\"") && strstr(out, "\"code\""), "byte %zu: %s", i, out);
  }
  for (size_t cut = 0; cut < len; cut += 37) {
    write_all_to(bad, bytes, cut);
    cr_assert_eq(agent_exec(cfg, bad, pub, out, sizeof(out)), 1, "cut %zu: %s", cut, out);
    cr_assert_null(strstr(out, "RAN-MARKER"), "cut %zu ran", cut);
  }
  free(bytes);
  free(bad);
  free(cfg);
  free(pub);
  free(pkg);
  free(src);
}
