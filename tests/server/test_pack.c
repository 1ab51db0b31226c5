/* cordon-server init and pack, through the built binary. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/cpkg_stage.h"
#include "agent/trust.h"
#include "proto/keyfile.h"

#define SERVER CORDON_BINARY_DIR "/cordon-server"

static const char manifest_json[] =
    "{\"name\":\"hello\",\"version\":\"1.0.0\",\"entry\":[\"/bin/sh\",\"run.sh\"]}\n";

static char tmp[256];

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  snprintf(tmp, sizeof(tmp), "/tmp/cordon-test-pack-XXXXXX");
  cr_assert(mkdtemp(tmp));
}

static void teardown(void) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
  if (system(cmd) != 0)
    cr_log_warn("cleanup failed");
}

TestSuite(pack, .init = setup, .fini = teardown);

static char *p(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *p(const char *fmt, ...) {
  char rel[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rel, sizeof(rel), fmt, ap);
  va_end(ap);
  char *out = NULL;
  cr_assert(asprintf(&out, "%s/%s", tmp, rel) > 0);
  return out;
}

/* Run the server binary; its stderr goes to err (NUL-terminated). */
static int run(char *err, size_t cap, const char *arg0, ...) {
  const char *argv[32] = {SERVER, arg0};
  int argc = 2;
  va_list ap;
  va_start(ap, arg0);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && argc < 31)
    argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    close(fds[0]);
    execv(SERVER, (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(fds[0], err + n, cap - 1 - n)) > 0)
    n += (size_t)r;
  err[n] = '\0';
  close(fds[0]);
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status));
  return WEXITSTATUS(status);
}

static void write_file(const char *root, const char *rel, const char *data, mode_t mode) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  for (char *q = path + strlen(root) + 1; (q = strchr(q, '/')) != NULL; q++) {
    *q = '\0';
    mkdir(path, 0755);
    *q = '/';
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq(fd, 0, "%s", path);
  cr_assert_eq(write(fd, data, strlen(data)), (ssize_t)strlen(data));
  fchmod(fd, mode);
  close(fd);
}

static char *make_src(const char *name) {
  char *src = p("%s", name);
  cr_assert_eq(mkdir(src, 0755), 0);
  write_file(src, "manifest.json", manifest_json, 0644);
  write_file(src, "run.sh", "#!/bin/sh\necho \"hello $1\"\n", 0755);
  write_file(src, "share/data.txt", "some data\n", 0644);
  return src;
}

static char *init_state(const char *name) {
  char *state = p("%s", name);
  char err[1024];
  cr_assert_eq(run(err, sizeof(err), "init", "--state", state, NULL), 0, "%s", err);
  return state;
}

static uint8_t *slurp(const char *path, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "%s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n + 1);
  cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *out_len = (size_t)n;
  return b;
}

static size_t count_entries(const char *dir) {
  DIR *d = opendir(dir);
  cr_assert(d);
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
      n++;
  closedir(d);
  return n;
}

static mode_t mode_of(const char *path) {
  struct stat st;
  cr_assert_eq(lstat(path, &st), 0, "%s", path);
  return st.st_mode & 07777;
}

/* ---- init ------------------------------------------------------------------ */

Test(pack, init_creates_private_state_and_keys) {
  char *state = init_state("state");
  cr_assert_eq(mode_of(state), 0700);
  static const char *const secret[] = {"ticket.key", "noise.key", "publisher.key"};
  for (size_t i = 0; i < 3; i++) {
    char *f = p("state/%s", secret[i]);
    cr_assert_eq(mode_of(f), 0600, "%s", secret[i]);
    free(f);
  }
  char *pub = p("state/publisher.pub");
  cr_assert_eq(mode_of(pub), 0644);
  size_t len;
  uint8_t *text = slurp(pub, &len);
  uint8_t key[32];
  cr_assert_eq(keyfile_parse(KEYFILE_PUBLISHER_PUBLIC, (char *)text, len, key, NULL), 0);
  free(text);
  char *sec = p("state/publisher.key");
  text = slurp(sec, &len);
  cr_assert_eq(keyfile_parse(KEYFILE_PUBLISHER_SECRET, (char *)text, len, key, NULL), 0);
  free(text);
  char *noise = p("state/noise.key");
  text = slurp(noise, &len);
  cr_assert_eq(keyfile_parse(KEYFILE_NOISE_SECRET, (char *)text, len, key, NULL), 0);
  free(text);
  free(noise);
  free(sec);
  free(pub);
  free(state);
}

Test(pack, init_refuses_an_existing_state) {
  char *state = init_state("state");
  char *pub = p("state/publisher.pub");
  size_t len1, len2;
  uint8_t *before = slurp(pub, &len1);
  char err[1024];
  cr_assert_eq(run(err, sizeof(err), "init", "--state", state, NULL), 1);
  cr_assert(strstr(err, "cordon-server: ") == err && strstr(err, "already exists"), "%s", err);
  size_t lines = 0;
  for (const char *c = err; *c; c++)
    lines += *c == '\n';
  cr_assert_eq(lines, 1, "not one line: %s", err);
  uint8_t *after = slurp(pub, &len2);
  cr_assert_eq(len1, len2);
  cr_assert_eq(memcmp(before, after, len1), 0);
  free(before);
  free(after);
  free(pub);
  free(state);
}

Test(pack, init_accepts_an_empty_existing_directory_and_makes_it_private) {
  char *state = p("empty");
  cr_assert_eq(mkdir(state, 0755), 0);
  char err[1024];
  cr_assert_eq(run(err, sizeof(err), "init", "--state", state, NULL), 0, "%s", err);
  cr_assert_eq(mode_of(state), 0700);
  free(state);
}

Test(pack, global_state_option_and_usage_errors) {
  char err[1024];
  cr_assert_eq(run(err, sizeof(err), "--state", NULL), 2);
  cr_assert_eq(run(err, sizeof(err), "no-such-command", NULL), 2);
  cr_assert(strstr(err, "usage"), "%s", err);
  cr_assert_eq(run(err, sizeof(err), "pack", "dir-only", NULL), 2);
  cr_assert(strstr(err, "usage"), "%s", err);
  cr_assert_eq(run(err, sizeof(err), "init", "extra", NULL), 2);
}

/* ---- pack ------------------------------------------------------------------ */

Test(pack, same_directory_gives_the_same_bytes) {
  char *state = init_state("state");
  char *src = make_src("src");
  char *a = p("a.cpkg"), *b = p("b.cpkg");
  char err[1024];
  cr_assert_eq(run(err, sizeof(err), "pack", src, "-o", a, "--state", state, NULL), 0, "%s", err);
  /* touch the files: times and order of creation must not matter */
  write_file(src, "share/data.txt", "some data\n", 0644);
  cr_assert_eq(run(err, sizeof(err), "--state", state, "pack", src, "-o", b, NULL), 0, "%s", err);
  size_t la, lb;
  uint8_t *ba = slurp(a, &la), *bb = slurp(b, &lb);
  cr_assert_eq(la, lb);
  cr_assert_eq(memcmp(ba, bb, la), 0, "pack is not deterministic");
  free(ba);
  free(bb);
  free(a);
  free(b);
  free(src);
  free(state);
}

Test(pack, package_verifies_with_publisher_pub_and_keeps_the_exec_bit) {
  char *state = init_state("state");
  char *src = make_src("src");
  char *out = p("hello.cpkg");
  char err[1024];
  cr_assert_eq(run(err, sizeof(err), "pack", src, "-o", out, "--state", state, NULL), 0, "%s", err);
  cr_assert_eq(mode_of(out), 0644);
  struct cpkg_trust *t;
  cr_assert_eq(cpkg_trust_new(&t), 0);
  char *pub = p("state/publisher.pub");
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_trust_load_file(t, pub, &d), 0, "%s", d.msg);
  char *stage = p("stage");
  cr_assert_eq(mkdir(stage, 0700), 0);
  int dirfd = open(stage, O_RDONLY | O_DIRECTORY);
  struct manifest *m = NULL;
  uint8_t h[32];
  cr_assert_eq(agent_cpkg_stage(out, t, dirfd, &m, h, &d), 0, "%s", d.msg);
  cr_assert_str_eq(m->name, "hello");
  manifest_free(m);
  char *run_sh = p("stage/run.sh"), *data = p("stage/share/data.txt");
  cr_assert_eq(mode_of(run_sh), 0755);
  cr_assert_eq(mode_of(data), 0644);
  close(dirfd);
  cpkg_trust_free(t);
  free(run_sh);
  free(data);
  free(stage);
  free(pub);
  free(out);
  free(src);
  free(state);
}

Test(pack, key_option_signs_with_another_publisher_key) {
  char *state = init_state("state");
  char *offline = init_state("offline");
  char *src = make_src("src");
  char *out = p("x.cpkg"), *key = p("offline/publisher.key");
  char err[1024];
  cr_assert_eq(run(err, sizeof(err), "pack", src, "-o", out, "--key", key, "--state", state, NULL),
               0, "%s", err);
  struct cpkg_trust *t;
  cr_assert_eq(cpkg_trust_new(&t), 0);
  char *pub = p("state/publisher.pub"), *opub = p("offline/publisher.pub");
  cr_assert_eq(agent_trust_load_file(t, pub, NULL), 0);
  char *stage = p("stage");
  cr_assert_eq(mkdir(stage, 0700), 0);
  int dirfd = open(stage, O_RDONLY | O_DIRECTORY);
  struct manifest *m = NULL;
  uint8_t h[32];
  cr_assert_eq(agent_cpkg_stage(out, t, dirfd, &m, h, NULL), CORDON_E_UNKNOWN_KEY);
  cr_assert_eq(agent_trust_load_file(t, opub, NULL), 0);
  cr_assert_eq(agent_cpkg_stage(out, t, dirfd, &m, h, NULL), 0);
  manifest_free(m);
  close(dirfd);
  cpkg_trust_free(t);
  free(stage);
  free(pub);
  free(opub);
  free(out);
  free(key);
  free(src);
  free(offline);
  free(state);
}

Test(pack, refuses_a_secret_key_others_can_read) {
  char *state = init_state("state");
  char *src = make_src("src");
  char *key = p("state/publisher.key"), *out = p("x.cpkg");
  cr_assert_eq(chmod(key, 0644), 0);
  char err[1024];
  cr_assert_eq(run(err, sizeof(err), "pack", src, "-o", out, "--state", state, NULL), 2);
  cr_assert(strstr(err, "config_invalid") && strstr(err, "publisher.key"), "%s", err);
  cr_assert_eq(access(out, F_OK), -1);
  free(key);
  free(out);
  free(src);
  free(state);
}

/* Each bad source tree: exit 2, stderr names the culprit, no output and no
 * temporary file left. */
static void expect_refused(const char *state, const char *src, const char *what, const char *code) {
  char *outdir = p("out-%s", code);
  mkdir(outdir, 0755);
  char *out = p("out-%s/x.cpkg", code);
  char err[1024];
  cr_assert_eq(run(err, sizeof(err), "pack", src, "-o", out, "--state", state, NULL), 2,
               "%s accepted: %s", what, err);
  cr_assert(strstr(err, what), "stderr does not name %s: %s", what, err);
  cr_assert(strstr(err, code), "stderr lacks %s: %s", code, err);
  cr_assert_eq(count_entries(outdir), 0, "output left behind");
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", outdir);
  cr_assert_eq(system(cmd), 0);
  free(out);
  free(outdir);
}

Test(pack, refuses_symlinks_fifos_and_sockets) {
  char *state = init_state("state");
  char *src = make_src("src");
  char *link = p("src/share/link");
  cr_assert_eq(symlink("/etc/passwd", link), 0);
  expect_refused(state, src, "share/link", "usage");
  cr_assert_eq(unlink(link), 0);
  char *fifo = p("src/fifo");
  cr_assert_eq(mkfifo(fifo, 0644), 0);
  expect_refused(state, src, "fifo", "usage");
  cr_assert_eq(unlink(fifo), 0);
  char *dlink = p("src/dirlink");
  cr_assert_eq(symlink("/etc", dlink), 0);
  expect_refused(state, src, "dirlink", "usage");
  free(dlink);
  free(fifo);
  free(link);
  free(src);
  free(state);
}

Test(pack, refuses_an_invalid_manifest_naming_the_field) {
  char *state = init_state("state");
  char *src = make_src("src");
  write_file(src, "manifest.json",
             "{\"name\":\"x\",\"version\":\"1\",\"entry\":[\"/bin/true\"],\"timeout_s\":0}", 0644);
  expect_refused(state, src, "timeout_s", "manifest_invalid");
  char *m = p("src/manifest.json");
  unlink(m);
  expect_refused(state, src, "manifest", "manifest_invalid");
  free(m);
  free(src);
  free(state);
}

Test(pack, refuses_paths_unsafe_elsewhere) {
  char *state = init_state("state");
  static const char *const names[] = {"aux.txt", "COM1",        "dots.", "space ",
                                      "a:b",     "back\\slash", "nul/x"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    char sname[32];
    snprintf(sname, sizeof(sname), "src%zu", i);
    char *src = make_src(sname);
    write_file(src, names[i], "x", 0644);
    expect_refused(state, src, names[i][0] == 'b' ? "back" : names[i], "package_corrupt");
    free(src);
  }
  char *src = make_src("srccase");
  write_file(src, "README", "x", 0644);
  write_file(src, "readme", "y", 0644);
  expect_refused(state, src, "differ only in case", "package_corrupt");
  free(src);
  free(state);
}

Test(pack, empty_directories_are_not_packed_and_output_is_replaced_atomically) {
  char *state = init_state("state");
  char *src = make_src("src");
  char *empty = p("src/empty-dir");
  cr_assert_eq(mkdir(empty, 0755), 0);
  char *out = p("x.cpkg");
  write_file(tmp, "x.cpkg", "old contents", 0644);
  char err[1024];
  cr_assert_eq(run(err, sizeof(err), "pack", src, "-o", out, "--state", state, NULL), 0, "%s", err);
  size_t len;
  uint8_t *b = slurp(out, &len);
  cr_assert_eq(memcmp(b, "CPKG", 4), 0);
  free(b);
  cr_assert(strstr(err, "packed 3 files"), "%s", err);
  free(empty);
  free(out);
  free(src);
  free(state);
}
