/* cordon-server pack refuses a package that no agent could ever run, with
 * the code an agent gives: an entry[0] that is neither absolute nor a
 * file of the package (manifest_invalid), a grant of / or ~
 * (scope_too_broad, judged by core/manifest.c as every agent judges it). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SERVER CORDON_BINARY_DIR "/cordon-server"

static char tmp[64], state[128], src[128], out[160];

static int run(char *err, size_t cap, const char *const *args) {
  const char *argv[16] = {SERVER};
  size_t n = 1;
  for (; args[n - 1]; n++)
    argv[n] = args[n - 1];
  argv[n] = NULL;
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
  size_t len = 0;
  ssize_t r;
  while (len + 1 < cap && (r = read(fds[0], err + len, cap - 1 - len)) > 0)
    len += (size_t)r;
  err[len] = '\0';
  close(fds[0]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}
#define RUN(err, ...) run(err, sizeof(err), (const char *const[]){__VA_ARGS__, NULL})

static void put(const char *rel, const char *text, mode_t mode) {
  char path[300];
  snprintf(path, sizeof(path), "%s/%s", src, rel);
  FILE *f = fopen(path, "w");
  cr_assert(f, "%s", path);
  fputs(text, f);
  fclose(f);
  chmod(path, mode);
}

static void setup(void) {
  snprintf(tmp, sizeof(tmp), "/tmp/cordon-packrun-XXXXXX");
  cr_assert(mkdtemp(tmp));
  snprintf(state, sizeof(state), "%s/state", tmp);
  snprintf(src, sizeof(src), "%s/src", tmp);
  snprintf(out, sizeof(out), "%s/p.cpkg", tmp);
  cr_assert_eq(mkdir(src, 0755), 0);
  char sub[200];
  snprintf(sub, sizeof(sub), "%s/bin", src);
  cr_assert_eq(mkdir(sub, 0755), 0);
  put("run.sh", "echo hi\n", 0755);
  put("bin/tool", "#!/bin/sh\n", 0755);
  char err[1024];
  cr_assert_eq(RUN(err, "init", "--state", state), 0, "%s", err);
}

static void teardown(void) {
  char c[128];
  snprintf(c, sizeof(c), "rm -rf '%s'", tmp);
  cr_expect_eq(system(c), 0);
}

TestSuite(pack_runnable, .init = setup, .fini = teardown);

static int pack(const char *manifest, char *err, size_t cap) {
  put("manifest.json", manifest, 0644);
  unlink(out);
  return run(err, cap, (const char *const[]){"pack", src, "-o", out, "--state", state, NULL});
}

Test(pack_runnable, entries_that_can_run_are_packed) {
  const char *ok[] = {
      "{\"name\":\"a\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
      "{\"name\":\"a\",\"version\":\"1\",\"entry\":[\"run.sh\"]}",
      "{\"name\":\"a\",\"version\":\"1\",\"entry\":[\"bin/tool\",\"x\"]}",
      "{\"name\":\"a\",\"version\":\"1\",\"platforms\":[\"linux\",\"windows\"],\"entry\":{"
      "\"linux\":[\"run.sh\"],\"windows\":[\"C:\\\\"
      "Windows\\\\System32\\\\cmd.exe\"]}}",
      "{\"name\":\"a\",\"version\":\"1\",\"entry\":[\"run.sh\"],\"capabilities\":{\"fs\":["
      "{\"path\":\"~/work\",\"access\":\"rw\"},{\"path\":\"/srv/data\",\"access\":\"ro\"},"
      "{\"path\":\"$WORKSPACE\",\"access\":\"rw\"}]}}",
  };
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    char err[1024];
    cr_assert_eq(pack(ok[i], err, sizeof(err)), 0, "case %zu: %s", i, err);
    cr_assert_eq(access(out, F_OK), 0);
  }
}

Test(pack_runnable, an_entry_outside_the_package_is_manifest_invalid) {
  const char *bad[] = {
      "{\"name\":\"a\",\"version\":\"1\",\"entry\":[\"missing.sh\"]}",
      "{\"name\":\"a\",\"version\":\"1\",\"entry\":[\"bin\"]}", /* a directory */
      "{\"name\":\"a\",\"version\":\"1\",\"platforms\":[\"linux\",\"macos\"],\"entry\":{\"linux\":["
      "\"run.sh\"],\"macos\":[\"mac/"
      "tool\"]}}",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char err[1024];
    cr_assert_eq(pack(bad[i], err, sizeof(err)), 2, "case %zu: %s", i, err);
    cr_assert(strncmp(err, "cordon-server: manifest_invalid: field 'entry[0]': ", 51) == 0,
              "case %zu: %s", i, err);
    cr_assert(strstr(err, "neither an absolute path nor a file of the package"), "%s", err);
    cr_assert_neq(access(out, F_OK), 0, "nothing written");
  }
}

Test(pack_runnable, a_grant_every_agent_refuses_is_scope_too_broad) {
  const char *grants[][2] = {{"~", "rw"}, {"~", "ro"}, {"/", "ro"}, {"~/", "rw"}};
  for (size_t i = 0; i < sizeof(grants) / sizeof(grants[0]); i++) {
    char m[512], err[1024];
    snprintf(m, sizeof(m),
             "{\"name\":\"a\",\"version\":\"1\",\"entry\":[\"run.sh\"],\"capabilities\":{\"fs\":["
             "{\"path\":\"/srv\",\"access\":\"ro\"},{\"path\":\"%s\",\"access\":\"%s\"}]}}",
             grants[i][0], grants[i][1]);
    int st = pack(m, err, sizeof(err));
    cr_assert_neq(st, 0, "case %zu accepted", i);
    cr_assert(strncmp(err, "cordon-server: scope_too_broad: field 'capabilities.fs[1]'", 58) == 0,
              "case %zu: %s", i, err);
    cr_assert(strstr(err, "too broad on every agent"), "%s", err);
    cr_assert_neq(access(out, F_OK), 0, "nothing written");
  }
}
