/* The harness the sandbox tests share (test_sandbox_*_linux.c and
 * test_sandbox_macos.c): a temp dir holding the agent's config dir and a
 * package, the files in them, one run of the real cordon-agent binary as
 * root or as a given user with its JSON result parsed, and the lookups and
 * assertions on that result. All functions are static inline, so a test
 * file uses what it needs and CMake needs no extra source.
 */
#ifndef CORDON_TESTS_SBX_HARNESS_H
#define CORDON_TESTS_SBX_HARNESS_H

#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <jansson.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define AGENT CORDON_BINARY_DIR "/cordon-agent"
#define TEST_USER "cordon-test"
#define JOB_USER "cordon-job"

/* exit statuses of the agent's child when it could not get going */
#define SBX_EXIT_NO_CGROUP 97 /* could not join a cgroup of sbx_exec.cgroups */
#define SBX_EXIT_NO_EXEC 98   /* execve failed */
#define SBX_EXIT_NO_USER 99   /* could not drop to sbx_exec.uid */

static inline void xsystem(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void xsystem(const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  int st = system(cmd);
  cr_assert(st == 0, "command failed (%d): %s", st, cmd);
}

static inline void write_file(const char *path, const char *content, mode_t mode) {
  FILE *f = fopen(path, "w");
  cr_assert(f, "open %s: %s", path, strerror(errno));
  fputs(content, f);
  fclose(f);
  chmod(path, mode);
}

/* An account scripts/test-setup.sh (or the test) made; fails without it. */
static inline struct passwd *sbx_account(const char *name) {
  struct passwd *pw = getpwnam(name);
  cr_assert(pw, "account %s missing: run scripts/test-setup.sh", name);
  return pw;
}

/* A throw-away account of one test (useradd; sbx_user_drop removes it):
 * PREFIX and the pid, its home /home/NAME (0755, its own), uid 3000000
 * + 4 * pid + which of the process's (up to 4) accounts it is. The shared cordon-test and
 * cordon-job clash between tests run at once (ctest -j, other checkouts on the machine):
 * RLIMIT_NPROC counts every process of the uid, so another test's processes ate a job's process
 * limit, and a file planted in a shared home went with another test's teardown. The uid is never
 * the one a test just dropped (useradd's own choice would be): a zombie of that test's jobs, which
 * counts until its new parent (PID 1 here) reaps it, would count against
 * the next one's limit. */
struct sbx_user {
  char name[32];
  char home[64];
  uid_t uid;
  gid_t gid;
};

static inline void sbx_user_make(struct sbx_user *u, const char *prefix) {
  memset(u, 0, sizeof(*u));
  static unsigned made;
  unsigned long uid = 3000000ul + 4ul * (unsigned long)getpid() + made++ % 4;
  snprintf(u->name, sizeof(u->name), "%.12s%d", prefix, (int)getpid());
  snprintf(u->home, sizeof(u->home), "/home/%s", u->name);
  /* first what a test of the same pid left when it crashed */
  xsystem("old=$(getent passwd %lu | cut -d: -f1); [ -z \"$old\" ] || userdel -f \"$old\"; "
          "userdel -f %s >/dev/null 2>&1; rm -rf %s; mkdir -p /home && "
          "useradd -K UID_MAX=2147483647 -M -u %lu -d %s -s /bin/sh -U %s && mkdir -m 0755 %s && "
          "chown %s: %s",
          uid, u->name, u->home, uid, u->home, u->name, u->home, u->name, u->home);
  struct passwd *pw = sbx_account(u->name);
  u->uid = pw->pw_uid;
  u->gid = pw->pw_gid;
}

static inline void sbx_user_drop(const struct sbx_user *u) {
  if (u->name[0])
    xsystem("userdel -f %s >/dev/null 2>&1; rm -rf %s", u->name, u->home);
}

/* The temp dir of one test: ROOT (0755), ROOT/agent (the agent's
 * --config, 0700, owned by whoever runs the agent) and ROOT/pkg. */
struct sbx_dirs {
  char root[64];
  char config[300]; /* a test may point it elsewhere */
  char pkg[96];
};

/* tmpl: a mkdtemp template such as "/tmp/cordon-sbx-XXXXXX" */
static inline void sbx_dirs_make(struct sbx_dirs *d, const char *tmpl, uid_t uid, gid_t gid) {
  snprintf(d->root, sizeof(d->root), "%s", tmpl);
  cr_assert(mkdtemp(d->root));
  chmod(d->root, 0755);
  snprintf(d->config, sizeof(d->config), "%s/agent", d->root);
  snprintf(d->pkg, sizeof(d->pkg), "%s/pkg", d->root);
  mkdir(d->config, 0700);
  mkdir(d->pkg, 0755);
  if (chown(d->config, uid, gid) < 0)
    cr_assert_fail("chown: %s", strerror(errno));
}

/* PKG/manifest.json (0644) and PKG/run.sh (0755) */
static inline void sbx_package_files(const struct sbx_dirs *d, const char *manifest,
                                     const char *script) {
  char path[512];
  snprintf(path, sizeof(path), "%s/manifest.json", d->pkg);
  write_file(path, manifest, 0644);
  snprintf(path, sizeof(path), "%s/run.sh", d->pkg);
  write_file(path, script, 0755);
}

/* CONFIG/config.json */
static inline void sbx_agent_config(const struct sbx_dirs *d, const char *json) {
  char path[512];
  snprintf(path, sizeof(path), "%s/config.json", d->config);
  write_file(path, json, 0644);
}

/* One run: `cordon-agent --config CONFIG CMD [PKG] [--json] [-- ARGS]`. */
struct sbx_exec {
  const struct sbx_dirs *dirs;
  const char *cmd;
  bool with_pkg;           /* PKG after CMD */
  bool json;               /* --json after that */
  const char *const *args; /* after "--"; NULL: no "--" */
  const char *home;        /* $HOME of the agent */
  const char *const *envs; /* more "K=V" for its environment, NULL-ended */
  bool as_user;            /* drop to uid/gid (no groups) first */
  uid_t uid;
  gid_t gid;
  /* cgroup dirs whose cgroup.procs the child joins while still root */
  const char *const *cgroups;
  size_t n_cgroups;
};

struct sbx_run {
  int status; /* exit status of cordon-agent */
  json_t *res;
  char err[4096];
};

/* `cordon-agent --config CONFIG CMD PKG [-- args]` with $HOME home, as
 * root or, when user is not NULL, as that account. */
static inline struct sbx_exec sbx_exec_of(const struct sbx_dirs *d, const char *cmd,
                                          const char *const *args, const char *user,
                                          const char *home) {
  struct sbx_exec x = {.dirs = d, .cmd = cmd, .with_pkg = true, .args = args, .home = home};
  if (user) {
    struct passwd *pw = sbx_account(user);
    x.as_user = true;
    x.uid = pw->pw_uid;
    x.gid = pw->pw_gid;
  }
  return x;
}

static inline struct sbx_run sbx_run_agent(const struct sbx_exec *x) {
  int out[2], errp[2];
  cr_assert(pipe(out) == 0 && pipe(errp) == 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(errp[1], 2);
    close(out[0]);
    close(errp[0]);
    char self[24];
    snprintf(self, sizeof(self), "%ld", (long)getpid());
    for (size_t i = 0; i < x->n_cgroups; i++) {
      char procs[2300];
      snprintf(procs, sizeof(procs), "%s/cgroup.procs", x->cgroups[i]);
      FILE *f = fopen(procs, "we");
      if (!f || fputs(self, f) < 0 || fclose(f) != 0)
        _exit(SBX_EXIT_NO_CGROUP);
    }
    /* PATH, HOME and envs (a later K= replaces an earlier one) */
    char home[600];
    snprintf(home, sizeof(home), "HOME=%s", x->home);
    const char *envp[64] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", home};
    size_t ne = 2;
    for (size_t i = 0; x->envs && x->envs[i] && ne < 63; i++) {
      size_t klen = strcspn(x->envs[i], "=") + 1, j = 0;
      while (j < ne && strncmp(envp[j], x->envs[i], klen) != 0)
        j++;
      envp[j] = x->envs[i];
      ne += j == ne;
    }
    envp[ne] = NULL;
    if (x->as_user && (setgroups(0, NULL) < 0 || setgid(x->gid) < 0 || setuid(x->uid) < 0))
      _exit(SBX_EXIT_NO_USER);
    const char *argv[64];
    int n = 0;
    argv[n++] = AGENT;
    argv[n++] = "--config";
    argv[n++] = x->dirs->config;
    argv[n++] = x->cmd;
    if (x->with_pkg)
      argv[n++] = x->dirs->pkg;
    /* status and explain print JSON only when asked to */
    if (x->json || strcmp(x->cmd, "status") == 0 || strcmp(x->cmd, "explain") == 0)
      argv[n++] = "--json";
    if (x->args) {
      argv[n++] = "--";
      for (size_t i = 0; x->args[i] && n < 62; i++)
        argv[n++] = x->args[i];
    }
    argv[n] = NULL;
    execve(AGENT, (char **)argv, (char **)envp);
    _exit(SBX_EXIT_NO_EXEC);
  }
  close(out[1]);
  close(errp[1]);
  static char buf[1 << 22];
  size_t have = 0;
  ssize_t k;
  while ((k = read(out[0], buf + have, sizeof(buf) - 1 - have)) > 0)
    have += (size_t)k;
  buf[have] = '\0';
  struct sbx_run r = {0};
  size_t eh = 0;
  while ((k = read(errp[0], r.err + eh, sizeof(r.err) - 1 - eh)) > 0)
    eh += (size_t)k;
  r.err[eh] = '\0';
  close(out[0]);
  close(errp[0]);
  int st;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st), "agent died: status %d", st);
  r.status = WEXITSTATUS(st);
  json_error_t je;
  r.res = have ? json_loads(buf, 0, &je) : NULL;
  return r;
}

/* "a.b" lookups in the result */
static inline json_t *jget(json_t *o, const char *path) {
  char key[128];
  snprintf(key, sizeof(key), "%s", path);
  json_t *cur = o;
  for (char *save, *t = strtok_r(key, ".", &save); t && cur; t = strtok_r(NULL, ".", &save))
    cur = json_object_get(cur, t);
  return cur;
}

/* the string at path, NULL when there is none */
static inline const char *sbx_jstr(json_t *o, const char *path) {
  return json_string_value(jget(o, path));
}

/* the job's stdout, "" when there is none */
static inline const char *out_of(struct sbx_run *r) {
  const char *s = sbx_jstr(r->res, "stdout");
  return s ? s : "";
}

/* There is a result, the job ran at level, and no error. */
static inline void sbx_assert_ran(struct sbx_run *r, const char *level) {
  cr_assert(r->res, "no result JSON; stderr: %s", r->err);
  cr_assert_str_eq(sbx_jstr(r->res, "sandbox.level"), level, "stderr: %s", r->err);
  cr_assert(json_is_null(jget(r->res, "error")), "error: %s / %s", sbx_jstr(r->res, "error.code"),
            sbx_jstr(r->res, "error.message"));
}

/* The agent refused the job with code before running it. */
static inline void sbx_assert_refused(struct sbx_run *r, const char *code) {
  cr_assert(r->res, "no result JSON; stderr: %s", r->err);
  cr_assert_eq(r->status, 1);
  cr_assert_str_eq(sbx_jstr(r->res, "error.code"), code, "message: %s",
                   sbx_jstr(r->res, "error.message"));
  cr_assert(json_is_null(jget(r->res, "exit_code")), "a refused job must not have run");
}

/* Each behaviour is a function body_NAME run twice, in suite root_suite
 * (setup_root) and user_suite (setup_user), with teardown_env after each:
 * the test file defines those three. */
#define SBX_BOTH(root_suite, user_suite, name)                                                     \
  static void body_##name(void);                                                                   \
  Test(root_suite, name, .init = setup_root, .fini = teardown_env) {                               \
    body_##name();                                                                                 \
  }                                                                                                \
  Test(user_suite, name, .init = setup_user, .fini = teardown_env) {                               \
    body_##name();                                                                                 \
  }                                                                                                \
  static void body_##name(void)

#endif
