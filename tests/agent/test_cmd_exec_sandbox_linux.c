/* cordon-agent exec|explain -- CMD: an ad-hoc command under the real
 * sandbox (bwrap + seccomp, as root with a throw-away job user of each
 * test, sbx_user_make: cordon-job's home is where other tests running at
 * once plant and remove their .ssh), in a default manifest whose
 * capabilities are --net, --ro and --rw; and the summaries `status` and
 * `explain` print without --json. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../platform/sbx_harness.h"

#define CANARY "CANARY-adhoc-7f3a"

struct out {
  int status;
  char out[1 << 16];
  char err[1 << 13];
};

static char tmp[64], cfg[128], var[64], jhome[256];
static struct sbx_user ju; /* the job user */

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...) {
  char c[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c, sizeof(c), fmt, ap);
  va_end(ap);
  cr_assert_eq(system(c), 0, "%s", c);
}

static void setup(void) {
  if (geteuid() != 0 || access("/usr/bin/bwrap", X_OK) != 0)
    cr_skip_test("needs root and bwrap");
  sbx_user_make(&ju, "cdnadx");
  snprintf(jhome, sizeof(jhome), "%s", ju.home);
  snprintf(tmp, sizeof(tmp), "/tmp/cordon-adx-XXXXXX");
  cr_assert(mkdtemp(tmp));
  chmod(tmp, 0755);
  snprintf(cfg, sizeof(cfg), "%s/agent", tmp);
  cr_assert_eq(mkdir(cfg, 0700), 0);
  /* grants below /tmp cannot be mounted (the job's /tmp is its own) */
  snprintf(var, sizeof(var), "/var/tmp/cordon-adx-XXXXXX");
  cr_assert(mkdtemp(var));
  chmod(var, 0755);
  sh("mkdir -m 0755 %s/data && echo hello-" CANARY " > %s/data/f.txt && chmod 0644 %s/data/f.txt",
     var, var, var);
  char path[256], json[512];
  snprintf(path, sizeof(path), "%s/config.json", cfg);
  snprintf(json, sizeof(json), "{\"job_user\": \"%s\", \"grant_roots\": [\"~\", \"%s\"]}", ju.name,
           var);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(json, f);
  fclose(f);
}

static void teardown(void) {
  if (tmp[0])
    sh("rm -rf %s %s", tmp, var);
  sbx_user_drop(&ju);
}

static void slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = '\0';
  if (f)
    fclose(f);
}

static struct out *run_argv(const char *const *args) {
  static struct out o;
  memset(&o, 0, sizeof(o));
  char outp[128], errp[128];
  snprintf(outp, sizeof(outp), "%s/out", tmp);
  snprintf(errp, sizeof(errp), "%s/err", tmp);
  const char *argv[64] = {AGENT, "--config", cfg};
  size_t n = 3;
  for (size_t i = 0; args[i]; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    FILE *fo = fopen(outp, "w"), *fe = fopen(errp, "w");
    dup2(fileno(fo), 1);
    dup2(fileno(fe), 2);
    execv(argv[0], (char **)argv);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  slurp(outp, o.out, sizeof(o.out));
  slurp(errp, o.err, sizeof(o.err));
  return &o;
}
#define RUN(...) run_argv((const char *const[]){__VA_ARGS__, NULL})

Test(cmd_exec, an_adhoc_command_cannot_read_the_homes_secrets, .init = setup, .fini = teardown) {
  char dir[300], key[320];
  snprintf(dir, sizeof(dir), "%s/.ssh", jhome);
  snprintf(key, sizeof(key), "%s/id_ed25519", dir);
  sh("mkdir -m 0700 %s && echo " CANARY " > %s && chown -R %s: %s", dir, key, ju.name, dir);
  /* no grant: the home is not there */
  struct out *o = RUN("exec", "--", "cat", key);
  cr_assert_eq(o->status, 1, "cat's own status: %d %s", o->status, o->err);
  cr_assert_null(strstr(o->out, CANARY), "%s", o->out);
  cr_assert(strstr(o->err, "No such file or directory"), "%s", o->err);
  /* asking for it: refused before anything runs */
  const char *asks[] = {"~/.ssh", dir, "~"};
  for (size_t i = 0; i < 3; i++) {
    o = RUN("exec", "--ro", asks[i], "--", "cat", key);
    cr_assert_eq(o->status, 1, "%s: %d %s", asks[i], o->status, o->err);
    cr_assert_null(strstr(o->out, CANARY), "%s", o->out);
    cr_assert(strstr(o->err, "cordon-agent: capability_denied: ") ||
                  strstr(o->err, "cordon-agent: scope_too_broad: "),
              "%s: %s", asks[i], o->err);
  }
}

Test(cmd_exec, ro_grants_a_directory_and_rw_lets_it_be_written, .init = setup, .fini = teardown) {
  char data[128], file[160], made[160];
  snprintf(data, sizeof(data), "%s/data", var);
  snprintf(file, sizeof(file), "%s/f.txt", data);
  snprintf(made, sizeof(made), "%s/made.txt", data);
  struct out *o = RUN("exec", "--", "cat", file);
  cr_assert_eq(o->status, 1, "not granted: %s", o->err);
  cr_assert_null(strstr(o->out, CANARY));
  o = RUN("exec", "--ro", data, "--", "cat", file);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert_str_eq(o->out, "hello-" CANARY "\n", "the command's own stdout");
  char script[400];
  snprintf(script, sizeof(script), "echo new > %s", made);
  o = RUN("exec", "--ro", data, "--", "/bin/sh", "-c", script);
  cr_assert_neq(o->status, 0);
  cr_assert(strstr(o->err, "Read-only file system"), "%s", o->err);
  cr_assert_neq(access(made, F_OK), 0);
  sh("chmod 0777 %s", data); /* only the sandbox may stop the job user now */
  o = RUN("exec", "--ro", data, "--", "/bin/sh", "-c", script);
  cr_assert(strstr(o->err, "Read-only file system"), "%s", o->err);
  o = RUN("exec", "--rw", data, "--", "/bin/sh", "-c", script);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert_eq(access(made, F_OK), 0, "written on the host");
}

Test(cmd_exec, the_exit_status_is_the_commands_and_json_gives_the_result, .init = setup,
     .fini = teardown) {
  struct out *o = RUN("exec", "--", "sh", "-c", "echo out; echo err >&2; exit 3");
  cr_assert_eq(o->status, 3, "%s", o->err);
  cr_assert_str_eq(o->out, "out\n");
  cr_assert(strstr(o->err, "err\n"), "%s", o->err);
  o = RUN("exec", "--json", "--", "sh", "-c", "echo out; exit 3");
  cr_assert_eq(o->status, 1);
  json_t *j = json_loads(o->out, 0, NULL);
  cr_assert(j, "%s", o->out);
  cr_assert_eq(json_integer_value(json_object_get(j, "exit_code")), 3);
  cr_assert_str_eq(json_string_value(json_object_get(j, "stdout")), "out\n");
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "sandbox"), "level")),
                   "isolated");
  json_decref(j);
  o = RUN("exec", "--", "sh", "-c", "kill -TERM $$");
  cr_assert_eq(o->status, 128 + 15);
}

Test(cmd_exec, net_maps_to_the_capability, .init = setup, .fini = teardown) {
  struct out *o = RUN("explain", "--json", "--", "/bin/true");
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *j = json_loads(o->out, 0, NULL);
  cr_assert(json_is_false(json_object_get(j, "net")), "%s", o->out);
  json_decref(j);
  o = RUN("explain", "--json", "--net", "--", "/bin/true");
  cr_assert_eq(o->status, 0, "%s", o->err);
  j = json_loads(o->out, 0, NULL);
  cr_assert(json_is_true(json_object_get(j, "net")), "%s", o->out);
  json_decref(j);
}

Test(cmd_exec, usage_errors, .init = setup, .fini = teardown) {
  const char *const cases[][6] = {
      {"exec", "--net", "/nonexistent-pkg", NULL},
      {"status", "--ro", "/x", NULL},
      {"exec", "--trust", "/k.pub", "--", "/bin/true", NULL},
      {"exec", "--", "no-such-command-cordon", NULL},
      {"exec", "--ro", NULL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char *const *a = cases[i];
    const char *args[8] = {0};
    for (size_t k = 0; a[k]; k++)
      args[k] = a[k];
    struct out *o = run_argv(args);
    cr_assert_eq(o->status, 2, "case %zu: %d %s", i, o->status, o->err);
    cr_assert(strncmp(o->err, "cordon-agent: usage: ", 21) == 0, "case %zu: %s", i, o->err);
  }
}

Test(cmd_exec, status_and_explain_print_a_summary_without_json, .init = setup, .fini = teardown) {
  struct out *o = RUN("status");
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strncmp(o->out, "level: ", 7) == 0, "%s", o->out);
  cr_assert(strstr(o->out, "\n  bwrap_version        bubblewrap "), "%s", o->out);
  cr_assert(strstr(o->out, "\npaired: no"), "%s", o->out);
  cr_assert(strstr(o->out, "\nagent: not running\n"), "%s", o->out);
  cr_assert_null(strchr(o->out, '{'), "no JSON: %s", o->out);
  o = RUN("status", "--json");
  json_t *j = json_loads(o->out, 0, NULL);
  cr_assert(json_is_string(json_object_get(j, "best_level")), "%s", o->out);
  json_decref(j);
  char data[128];
  snprintf(data, sizeof(data), "%s/data", var);
  o = RUN("explain", "--ro", data, "--", "/bin/cat");
  cr_assert_eq(o->status, 0, "%s", o->err);
  char want[200];
  snprintf(want, sizeof(want), "\nread-only grants: %s\n", data);
  cr_assert(strstr(o->out, "package: exec 0\nlevel: isolated"), "%s", o->out);
  cr_assert(strstr(o->out, want), "%s", o->out);
  cr_assert(strstr(o->out, "\nnetwork: none\n"), "%s", o->out);
  cr_assert(strstr(o->out, "\n  memory     "), "%s", o->out);
  cr_assert(strstr(o->out, "\n  time       "), "%s", o->out);
  cr_assert_lt(strlen(o->out), 2000, "a summary, not the plan: %s", o->out);
  cr_assert_null(strstr(o->out, "--unshare-user"), "no bwrap argv without --json");
}

/* A package's manifest names its grants: a path with ESC and C1 bytes in it
 * (a directory of that name exists under a grant root) is printed by
 * explain's summary escaped, never raw to the owner's terminal. */
Test(cmd_exec, explain_prints_a_packages_grant_paths_escaped, .init = setup, .fini = teardown) {
  sh("mkdir -m 0755 '%s/d'\"$(printf '\\033]0;x\\007\\302\\233')\"'end' %s/pkg", var, tmp);
  char path[256];
  snprintf(path, sizeof(path), "%s/pkg/manifest.json", tmp);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fprintf(f,
          "{\"name\": \"evil\", \"version\": \"1\", \"entry\": [\"/bin/true\"], \"platforms\": "
          "[\"linux\"], \"min_sandbox\": \"isolated\", \"capabilities\": {\"net\": false, \"fs\": "
          "[{\"path\": \"%s/d\\u001b]0;x\\u0007\\u009bend\", \"access\": \"ro\"}]}}",
          var);
  fclose(f);
  char pkg[128];
  snprintf(pkg, sizeof(pkg), "%s/pkg", tmp);
  struct out *o = RUN("explain", pkg);
  cr_assert_eq(o->status, 0, "%s", o->err);
  char want[256];
  snprintf(want, sizeof(want), "\nread-only grants: %s/d\\x1b]0;x\\x07\\x9bend\n", var);
  cr_assert(strstr(o->out, want), "%s", o->out);
  cr_assert_null(strchr(o->out, '\x1b'), "a raw ESC: %s", o->out);
}
