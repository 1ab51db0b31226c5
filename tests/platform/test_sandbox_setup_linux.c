/* When bwrap cannot build the sandbox, the package never started: the
 * result says so (not run, spawn_failed, bwrap's line, no level), and a
 * package that itself exits 1 is still a job that ran. Real bwrap: the
 * failures are real ones of bwrap's setup (the entry's execvp, a mount
 * whose destination went away between planning and the start), reached
 * through the real cordon-agent binary (agent as root and as the user
 * cordon-test) and through the sandbox API in this process (as root, jobs
 * as cordon-job), where the test changes the host between plan and run
 * and from the live output of the first start.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/manifest.h"
#include "core/result.h"
#include "platform/linux/bwrap.h"
#include "platform/sandbox.h"
#include "platform/strv.h"
#include "sbx_harness.h"

/* ---- through cordon-agent, as root and as a user ---- */

struct env {
  bool as_user;
  struct sbx_dirs d;
  char home[256];
};

static struct env E;

static void setup_env(bool as_user) {
  memset(&E, 0, sizeof(E));
  E.as_user = as_user;
  struct passwd *pw = sbx_account(as_user ? TEST_USER : JOB_USER);
  snprintf(E.home, sizeof(E.home), "%s", pw->pw_dir);
  sbx_dirs_make(&E.d, "/tmp/cordon-setup-XXXXXX", as_user ? pw->pw_uid : 0,
                as_user ? pw->pw_gid : 0);
  sbx_agent_config(&E.d, "{}");
}

static void setup_root(void) {
  setup_env(false);
}
static void setup_user(void) {
  setup_env(true);
}
static void teardown_env(void) {
  xsystem("rm -rf %s", E.d.root);
}

static struct sbx_run exec_pkg(const char *entry, const char *script) {
  char m[512];
  snprintf(m, sizeof(m), "{\"name\":\"t\",\"version\":\"1\",\"entry\":%s,\"timeout_s\":20}", entry);
  sbx_package_files(&E.d, m, script);
  struct sbx_exec x =
      sbx_exec_of(&E.d, "exec", NULL, E.as_user ? TEST_USER : NULL, E.as_user ? E.home : "/root");
  x.json = true;
  return sbx_run_agent(&x);
}

/* The result of a job that never ran (docs/protocol/messages.md 6.8). */
static void assert_not_run(json_t *res) {
  cr_assert(json_is_null(jget(res, "exit_code")), "exit_code of a job that never started");
  cr_assert(json_is_null(jget(res, "signal")));
  cr_assert(json_is_null(jget(res, "sandbox.level")), "a level for a sandbox never built");
  cr_assert(json_is_null(jget(res, "sandbox.mechanism")));
  cr_assert(json_is_null(jget(res, "oom_killed")));
  cr_assert_eq(json_integer_value(jget(res, "wall_ms")), 0);
  cr_assert_str_eq(sbx_jstr(res, "stdout"), "");
  cr_assert_str_eq(sbx_jstr(res, "stderr"), "");
  static const char *const lims[] = {"memory", "processes", "cpu", "time", "disk"};
  for (size_t i = 0; i < sizeof(lims) / sizeof(lims[0]); i++) {
    char k[64];
    snprintf(k, sizeof(k), "sandbox.limits.%s", lims[i]);
    cr_assert_str_eq(sbx_jstr(res, k), "none", "%s", k);
  }
}

SBX_BOTH(setup_root_suite, setup_user_suite, an_entry_bwrap_cannot_exec_never_started) {
  /* bwrap fails at its last step: the entry's execvp (ENOENT, tried twice) */
  struct sbx_run r = exec_pkg("[\"/usr/bin/cordon-no-such-entry\"]", "");
  sbx_assert_refused(&r, "spawn_failed");
  assert_not_run(r.res);
  cr_assert_str_eq(sbx_jstr(r.res, "error.message"),
                   "bwrap: execvp /usr/bin/cordon-no-such-entry: No such file or directory "
                   "(retried once)");
  cr_assert(strstr(r.err, "spawn_failed: bwrap: execvp"), "stderr: %s", r.err);
  json_decref(r.res);
}

SBX_BOTH(setup_root_suite, setup_user_suite, a_package_exiting_1_with_bwraps_words_ran) {
  /* what the package prints cannot make it a job that did not run */
  struct sbx_run r = exec_pkg("[\"/bin/sh\",\"run.sh\"]",
                              "echo 'bwrap: execvp /x: No such file or directory' >&2\nexit 1\n");
  sbx_assert_ran(&r, "isolated");
  cr_assert_eq(r.status, 1);
  cr_assert(json_is_integer(jget(r.res, "exit_code")));
  cr_assert_eq(json_integer_value(jget(r.res, "exit_code")), 1);
  cr_assert_str_eq(sbx_jstr(r.res, "stderr"), "bwrap: execvp /x: No such file or directory\n");
  const char *mech = sbx_jstr(r.res, "sandbox.mechanism");
  cr_assert(mech && strncmp(mech, "bwrap+", 6) == 0, "mechanism %s", mech ? mech : "null");
  json_decref(r.res);
}

/* ---- through the sandbox API, as root ---- */

/* One job of this process: plan, a change of the host, run. */
struct api {
  char root[64];     /* temp dir: agent/ (state dir), pkg/, job/ */
  char pkg[128];     /* the package dir the job sees at /cordon/package */
  char grant[256];   /* ~cordon-job/cordon-setup-<pid>, when the job has a grant */
  char state[128];   /* the policy's state dir */
  char job_dir[128]; /* the job's private dir */
  const char *grant_roots[1];
  struct sandbox_policy policy;
  struct manifest *m;
  struct sandbox_probe *probe;
  struct sandbox_plan *plan;
  struct sandbox_job job;
  struct job_result res;
  /* the live output, and what the test does when bwrap's line arrives */
  char live_err[4096];
  size_t live_err_len;
  unsigned bwrap_lines;
  void (*on_bwrap_line)(struct api *a);
};

static struct api A;

static void api_setup(void) {
  memset(&A, 0, sizeof(A));
  snprintf(A.root, sizeof(A.root), "/tmp/cordon-setup-XXXXXX");
  cr_assert(mkdtemp(A.root));
  chmod(A.root, 0755);
  snprintf(A.pkg, sizeof(A.pkg), "%s/pkg", A.root);
  snprintf(A.state, sizeof(A.state), "%s/agent", A.root);
  snprintf(A.job_dir, sizeof(A.job_dir), "%s/job", A.root);
  /* the job dir as a root agent makes it (agent/job.c) */
  cr_assert(mkdir(A.pkg, 0755) == 0 && mkdir(A.state, 0700) == 0 && mkdir(A.job_dir, 0711) == 0);
  struct passwd *pw = sbx_account(JOB_USER);
  snprintf(A.grant, sizeof(A.grant), "%s/cordon-setup-%ld", pw->pw_dir, (long)getpid());
  A.grant_roots[0] = "~";
  A.policy = (struct sandbox_policy){.grant_roots = A.grant_roots,
                                     .n_grant_roots = 1,
                                     .lowest_level = SANDBOX_LEVEL_ISOLATED,
                                     .job_user = JOB_USER,
                                     .bwrap_path = "/usr/bin/bwrap",
                                     .state_dir = A.state};
  job_result_init(&A.res);
}

static void api_teardown(void) {
  sandbox_plan_free(A.plan);
  sandbox_probe_free(A.probe);
  manifest_free(A.m);
  if (A.job.package_dirfd > 0)
    close(A.job.package_dirfd);
  job_result_release(&A.res);
  xsystem("rm -rf %s %s", A.root, A.grant);
}

static void on_output(void *ctx, int stream, uint64_t offset, const uint8_t *data, size_t len) {
  struct api *a = ctx;
  if (stream != 1)
    return;
  cr_assert_eq(offset, a->live_err_len, "live stderr is continuous");
  cr_assert_lt(a->live_err_len + len, sizeof(a->live_err));
  memcpy(a->live_err + a->live_err_len, data, len);
  a->live_err_len += len;
  a->live_err[a->live_err_len] = '\0';
  if (strncmp((const char *)data, "bwrap: ", 7) == 0) {
    a->bwrap_lines++;
    if (a->on_bwrap_line)
      a->on_bwrap_line(a);
  }
}

static void api_plan(const char *manifest_json) {
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_parse(manifest_json, strlen(manifest_json), &A.m, &d), 0, "%s", d.msg);
  cr_assert_eq(sandbox_probe_new(&A.policy, false, &A.probe), 0);
  A.job.package_dirfd = open(A.pkg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cr_assert(A.job.package_dirfd >= 0);
  A.job.manifest = A.m;
  A.job.job_id = "0123456789abcdef0123456789abcdef";
  A.job.package_path = A.pkg;
  A.job.job_dir = A.job_dir;
  A.job.cancel_fd = -1;
  A.job.on_output = on_output;
  A.job.output_ctx = &A;
  int r = sandbox_plan_new(&A.policy, A.probe, &A.job, &A.res, &A.plan);
  cr_assert_eq(r, 0, "plan: %s", A.res.error_message);
}

/* the FIFO of the grant, blinded at planning: put back */
static void fifo_back(struct api *a) {
  char fifo[300];
  snprintf(fifo, sizeof(fifo), "%s/fifo", a->grant);
  cr_assert(mkfifo(fifo, 0666) == 0, "mkfifo: %s", strerror(errno));
}

Test(setup_api, a_mount_bwrap_cannot_make_never_started, .init = api_setup, .fini = api_teardown) {
  /* a FIFO of a read-only grant is blinded with /dev/null; gone by the
   * start, bwrap cannot make its mount point in the read-only grant */
  xsystem("mkdir -p %s && mkfifo -m 0666 %s/fifo && chown -R " JOB_USER ": %s", A.grant, A.grant,
          A.grant);
  char mj[1024];
  snprintf(mj, sizeof(mj),
           "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/true\"],\"timeout_s\":20,"
           "\"capabilities\":{\"fs\":[{\"path\":\"%s\",\"access\":\"ro\"}]}}",
           A.grant);
  api_plan(mj);
  xsystem("rm %s/fifo", A.grant);
  /* EROFS is not a race: no second start, though one would now succeed */
  A.on_bwrap_line = fifo_back;
  int r = sandbox_run(A.plan, &A.res);
  cr_assert_eq(r, CORDON_E_SPAWN_FAILED);
  cr_assert_eq(A.res.error, CORDON_E_SPAWN_FAILED);
  cr_assert_not(A.res.ran, "a job whose sandbox was never built did not run");
  cr_assert_not(A.res.level_known, "no level for a sandbox never built");
  cr_assert_eq(A.res.err.len, 0);
  char want[512];
  snprintf(want, sizeof(want), "bwrap: Can't create file at %s/fifo: Read-only file system",
           A.grant);
  cr_assert_str_eq(A.res.error_message, want);
  cr_assert_eq(A.bwrap_lines, 1, "one start: %s", A.live_err);
  json_t *j = job_result_to_json(&A.res);
  assert_not_run(j);
  cr_assert_str_eq(sbx_jstr(j, "error.code"), "spawn_failed");
  json_decref(j);
}

/* the entry the first start did not find: written now */
static void entry_back(struct api *a) {
  char path[256];
  snprintf(path, sizeof(path), "%s/run.sh", a->pkg);
  write_file(path, "#!/bin/sh\necho second start; exit 3\n", 0755);
}

Test(setup_api, a_transient_setup_failure_is_tried_once_more, .init = api_setup,
     .fini = api_teardown) {
  /* the first start fails with ENOENT before the entry started (its
   * execvp); by the second the file is there */
  api_plan("{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"run.sh\"],\"timeout_s\":20}");
  A.on_bwrap_line = entry_back;
  int r = sandbox_run(A.plan, &A.res);
  cr_assert_eq(r, 0, "%s", A.res.error_message);
  cr_assert_eq(A.res.error, 0, "%s", A.res.error_message);
  cr_assert(A.res.ran && A.res.exited);
  cr_assert_eq(A.res.exit_code, 3);
  cr_assert(A.res.level_known);
  cr_assert_eq(A.res.level, SANDBOX_LEVEL_ISOLATED);
  cr_assert_eq(A.res.out.len, strlen("second start\n"));
  cr_assert(memcmp(A.res.out.data, "second start\n", A.res.out.len) == 0);
  /* the first start's line and cordon's note, on stderr and live alike */
  const char *want = "bwrap: execvp /cordon/package/run.sh: No such file or directory\n"
                     "cordon: bwrap could not build the sandbox, the package had not started; "
                     "building it again\n";
  cr_assert_eq(A.res.err.len, strlen(want));
  cr_assert(memcmp(A.res.err.data, want, A.res.err.len) == 0, "stderr: %.*s", (int)A.res.err.len,
            (const char *)A.res.err.data);
  cr_assert_str_eq(A.live_err, want);
  cr_assert_eq(A.bwrap_lines, 1);
}

Test(setup_api, a_second_failure_is_not_tried_again, .init = api_setup, .fini = api_teardown) {
  api_plan("{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"run.sh\"],\"timeout_s\":20}");
  int r = sandbox_run(A.plan, &A.res);
  cr_assert_eq(r, CORDON_E_SPAWN_FAILED);
  cr_assert_not(A.res.ran);
  cr_assert_eq(A.bwrap_lines, 2, "two starts: %s", A.live_err);
  cr_assert_str_eq(A.res.error_message,
                   "bwrap: execvp /cordon/package/run.sh: No such file or directory "
                   "(retried once)");
}

/* ---- reading bwrap's reports (platform/linux/bwrap.h) ---- */

Test(bwrap_status, the_entry_started_only_with_an_exit_code_object) {
  static const struct {
    const char *text;
    bool started;
  } rows[] = {
      {"", false},
      {"{ \"child-pid\": 12, \"cgroup-namespace\": 4026531835 }\n", false},
      {"{ \"child-pid\": 12 }\n{ \"exit-code\": 1 }\n", true},
      {"{ \"child-pid\": 12 }\n{ \"exit-code\": 0 }", true},
      {"{ \"exit-code\": \"1\" }\n", false},
      {"{ \"child-pid\": 12 }\n{ \"exit-co", false},
      {"garbage\n[1]\n{ \"exit-code\": 7, \"new-member\": true }\n", true},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    cr_expect_eq(bwrap_status_entry_started(rows[i].text, strlen(rows[i].text)), rows[i].started,
                 "row %zu", i);
}

Test(bwrap_status, the_init_is_the_child_pid_of_a_whole_line) {
  static const struct {
    const char *text;
    int pid;
  } rows[] = {
      {"", 0},
      {"{ \"child-pid\": 16608, \"pid-namespace\": 4026532176 }\n", 16608},
      {"{ \"child-pid\": 16608", 0}, /* the line is not complete yet */
      {"garbage\n{ \"child-pid\": 77 }\n{ \"exit-code\": 0 }\n", 77},
      {"{ \"child-pid\": \"77\" }\n", 0},
      {"{ \"child-pid\": 1 }\n", 0},
      {"{ \"child-pid\": -5 }\n", 0},
      {"{ \"child-pid\": 99999999999 }\n", 0},
      {"{ \"exit-code\": 0 }\n", 0},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    cr_expect_eq(bwrap_status_child_pid(rows[i].text, strlen(rows[i].text)), rows[i].pid, "row %zu",
                 i);
}

Test(bwrap_status, only_enoent_and_ebusy_of_bwrap_are_transient) {
  static const struct {
    const char *line;
    bool transient;
  } rows[] = {
      {"bwrap: Can't bind mount /oldroot/dev/null on /newroot/etc/shadow: Unable to mount source "
       "on destination: No such file or directory",
       true},
      {"bwrap: Can't remount readonly on /newroot/x: Device or resource busy", true},
      {"bwrap: execvp /cordon/package/run.sh: No such file or directory", true},
      {"bwrap: Can't bind mount /oldroot/dev/null on /newroot/h/g/fifo: Unable to find "
       "\"/newroot/h/g/fifo\" in mount table",
       true},
      {"bwrap: Can't bind mount /oldroot/dev/null on /newroot/etc/gshadow: Unable to remount "
       "destination \"/newroot/etc/gshadow\" with correct flags: Invalid argument",
       true},
      {"bwrap: Can't mkdir /x: Permission denied", false},
      {"bwrap: Can't create file at /x/fifo: Read-only file system", false},
      {"bwrap: Can't create signalfd: Too many open files", false},
      {"cordon: No such file or directory", false},
      {"No such file or directory", false},
      {"", false},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    cr_expect_eq(bwrap_setup_error_transient(rows[i].line), rows[i].transient, "row %zu", i);
}

Test(bwrap_status, the_status_fd_goes_right_after_bwrap) {
  struct strv a, out;
  strv_init(&a);
  strv_init(&out);
  strv_addv(&a, "/usr/bin/bwrap", "--unshare-user", "--", "/bin/true", NULL);
  cr_assert_eq(bwrap_argv_with_status_fd(&a, 17, &out), 0);
  static const char *const want[] = {
      "/usr/bin/bwrap", "--json-status-fd", "17", "--unshare-user", "--", "/bin/true"};
  cr_assert_eq(out.n, 6);
  for (size_t i = 0; i < 6; i++)
    cr_expect_str_eq(out.v[i], want[i]);
  cr_assert_null(out.v[6]);
  strv_release(&a);
  strv_release(&out);
}
