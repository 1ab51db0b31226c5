/* cordon-agent exec|explain DIR|FILE.cpkg: stage a package locally, plan
 * its sandbox, and run it (exec) or show the plan (explain).
 * cordon-agent exec|explain [--net] [--ro PATH] [--rw PATH] -- CMD ARGS:
 * the same for an ad-hoc command, in a package of nothing but a default
 * manifest: entry [CMD] (found on PATH when it has no '/'), the default
 * limits, min_sandbox the owner's lowest_level, and the capabilities the
 * flags ask for, judged like any package's. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/cli.h"
#include "agent/commands.h"
#include "agent/job.h"
#include "agent/recover.h"
#include "compat/posix.h"
#include "core/error.h"
#include "core/manifest.h"
#include "platform/daemon.h"
#include "platform/paths.h"
#include "platform/sandbox.h"

/* Print the result JSON and the one-line error; return the exit status. */
static int finish_job(const struct job_result *res) {
  json_t *j = job_result_to_json(res);
  if (j) {
    agent_print_json(j);
    json_decref(j);
  }
  if (res->error) {
    agent_say_error(res->error, res->error_message);
    return 1;
  }
  if (res->timed_out) {
    fprintf(stderr, AGENT_PROG ": timed_out: the job did not finish in time\n");
    return 1;
  }
  return res->ran && res->exited && res->exit_code == 0 ? 0 : 1;
}

/* An ad-hoc command without --json: its output as its own, then its exit
 * status (128 + N for a signal), as a shell would; a refusal or a timeout
 * is the one-line error and 1. */
static int finish_adhoc(const struct job_result *res) {
  if (res->out.len)
    fwrite(res->out.data, 1, res->out.len, stdout);
  fflush(stdout);
  if (res->err.len)
    fwrite(res->err.data, 1, res->err.len, stderr);
  if (res->error) {
    agent_say_error(res->error, res->error_message);
    return 1;
  }
  if (res->timed_out) {
    fprintf(stderr, AGENT_PROG ": timed_out: the job did not finish in time\n");
    return 1;
  }
  if (!res->ran)
    return 1;
  if (!res->exited)
    return 128 + res->signal;
  return res->exit_code & 0xff;
}

static void say_limit(FILE *f, const char *name, json_t *l) {
  if (!json_is_object(l))
    return;
  json_t *v = json_object_get(l, "value");
  const char *by = json_string_value(json_object_get(l, "enforced_by"));
  char val[64];
  if (json_is_integer(v))
    snprintf(val, sizeof(val), "%lld %s", (long long)json_integer_value(v),
             json_string_value(json_object_get(l, "unit"))
                 ? json_string_value(json_object_get(l, "unit"))
                 : "");
  else
    snprintf(val, sizeof(val), "-");
  fprintf(f, "  %-10s %-22s %s\n", name, val, by ? by : "not enforced");
}

static void say_paths(FILE *f, const char *what, const char *const *v, size_t n) {
  fprintf(f, "%s", what);
  if (n == 0)
    fprintf(f, " none");
  for (size_t i = 0; i < n; i++) {
    /* a package's manifest chose these: never raw to a terminal */
    char text[1024];
    snprintf(text, sizeof(text), "%s", v[i]);
    cordon_escape_controls(text, sizeof(text));
    fprintf(f, "%s %s", i ? "," : "", text);
  }
  fputc('\n', f);
}

/* explain without --json: what a person needs from the plan. */
static void explain_summary(const struct agent_job *job, json_t *plan) {
  const char *level = json_string_value(json_object_get(plan, "level"));
  const char *why = json_string_value(json_object_get(plan, "downgrade_reason"));
  const char *req = json_string_value(json_object_get(plan, "requested"));
  const char *mech = json_string_value(json_object_get(plan, "mechanism"));
  const struct manifest *m = job->manifest;
  printf("package: %s %s\n", m->name, m->version);
  printf("level: %s%s%s (the package needs at least %s)\n", level ? level : "?",
         why ? ", downgraded: " : "", why ? why : "", req ? req : "?");
  if (mech)
    printf("mechanism: %s\n", mech);
  printf("network: %s\n", m->net ? "granted" : "none");
  const char *ro[MANIFEST_MAX_GRANTS], *rw[MANIFEST_MAX_GRANTS];
  size_t n_ro = 0, n_rw = 0;
  for (size_t i = 0; i < m->n_grants; i++) {
    if (m->grants[i].rw)
      rw[n_rw++] = m->grants[i].path;
    else
      ro[n_ro++] = m->grants[i].path;
  }
  say_paths(stdout, "read-only grants:", ro, n_ro);
  say_paths(stdout, "read-write grants:", rw, n_rw);
  json_t *fs = json_object_get(plan, "filesystem");
  if (json_is_object(fs)) {
    size_t kept = json_array_size(json_object_get(fs, "read_only"));
    size_t blind = json_array_size(json_object_get(fs, "blinded"));
    if (kept || blind)
      printf("inside the grants: %zu path(s) kept read-only, %zu blinded\n", kept, blind);
  }
  const char *user = json_string_value(json_object_get(plan, "job_user"));
  if (user)
    printf("runs as: %s\n", user);
  json_t *lim = json_object_get(plan, "limits");
  printf("limits:    %-22s enforced by\n", "value");
  const char *names[] = {"memory", "processes", "cpu", "time", "disk", "output"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    say_limit(stdout, names[i], json_object_get(lim, names[i]));
  printf("(`" AGENT_PROG " explain ... --json` prints the whole plan)\n");
  fflush(stdout);
}

/* a "/" b into out: 0, or -ENAMETOOLONG when it does not fit. */
static int join(char *out, size_t len, const char *a, const char *b) {
  int n = snprintf(out, len, "%s/%s", a, b);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* CMD as the absolute path the manifest's entry needs: with a '/', made
 * absolute against the working directory; without, the first executable
 * of that name on PATH (':'-separated: on Windows give an absolute path,
 * C:\...). */
static int resolve_command(const char *cmd, char *out, size_t len, struct cordon_diag *diag) {
  if (manifest_path_is_windows_absolute(cmd)) {
    snprintf(out, len, "%s", cmd);
    return 0;
  }
  if (strchr(cmd, '/')) {
    if (cmd[0] == '/') {
      snprintf(out, len, "%s", cmd);
      return 0;
    }
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
      return cordon_diag_set(diag, -errno, "getcwd: %s", strerror(errno));
    if (join(out, len, cwd, cmd) < 0)
      return cordon_diag_set(diag, CORDON_E_USAGE, "%s: path too long", cmd);
    return 0;
  }
  const char *path = getenv("PATH");
  if (!path || !path[0])
    path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ":");
    if (n > 0) {
      char dir[PATH_MAX];
      snprintf(dir, sizeof(dir), "%.*s", (int)(n < sizeof(dir) ? n : sizeof(dir) - 1), p);
      if (join(out, len, dir, cmd) == 0 && access(out, X_OK) == 0)
        return 0;
    }
    p += n + (p[n] == ':');
  }
  return cordon_diag_set(diag, CORDON_E_USAGE, "%s: not found on PATH", cmd);
}

/* A grant path as the manifest takes it: absolute or under ~ as given,
 * otherwise made absolute against the working directory. */
static json_t *grant_json(const char *path, bool rw) {
  char abs[PATH_MAX];
  if (path[0] == '/' || path[0] == '~' || manifest_path_is_windows_absolute(path)) {
    snprintf(abs, sizeof(abs), "%s", path);
  } else {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)) || join(abs, sizeof(abs), cwd, path) < 0)
      return NULL;
  }
  return json_pack("{s:s, s:s}", "path", abs, "access", rw ? "rw" : "ro");
}

/* Write the ad-hoc package (a directory holding manifest.json) into
 * out_dir (a new directory CONFIG/jobs/exec-RANDOM), which holds
 * AGENT_EXEC_LOCK locked while it exists: the agent's start-up sweep
 * (agent_recover_staging) removes it only once this process is gone. */
static int adhoc_package(const struct agent_config *cfg, const struct agent_exec_options *o,
                         char *out_dir, size_t len, struct daemon_lock **out_lock,
                         struct cordon_diag *diag) {
  if (o->n_args == 0)
    return cordon_diag_set(diag, CORDON_E_USAGE, "exec -- CMD [ARGS...]: no command");
  char cmd[PATH_MAX];
  int r = resolve_command(o->args[0], cmd, sizeof(cmd), diag);
  if (r < 0)
    return r;
  json_t *caps = json_object();
  json_object_set_new(caps, "net", json_boolean(o->net));
  json_t *fs = json_array();
  for (size_t i = 0; i < o->n_ro + o->n_rw; i++) {
    bool rw = i >= o->n_ro;
    json_t *g = grant_json(rw ? o->rw[i - o->n_ro] : o->ro[i], rw);
    if (!g) {
      json_decref(fs);
      json_decref(caps);
      return cordon_diag_set(diag, CORDON_E_USAGE, "%s: cannot make it an absolute path",
                             rw ? o->rw[i - o->n_ro] : o->ro[i]);
    }
    json_array_append_new(fs, g);
  }
  json_object_set_new(caps, "fs", fs);
  json_t *m = json_pack("{s:s, s:s, s:[s], s:[s], s:s, s:o}", "name", "exec", "version", "0",
                        "entry", cmd, "platforms", paths_platform_name(), "min_sandbox",
                        sandbox_level_name(cfg->lowest_level), "capabilities", caps);
  /* CONFIG/jobs/exec-RANDOM: the agent's own directory, on every OS */
  char jobs[PATH_MAX], name[40];
  uint8_t rnd[8];
  randombytes_buf(rnd, sizeof(rnd));
  snprintf(name, sizeof(name), "exec-");
  sodium_bin2hex(name + 5, sizeof(name) - 5, rnd, sizeof(rnd));
  if (!m) /* json_pack took caps either way */
    return -ENOMEM;
  r = agent_job_dir_prepare(cfg, jobs, sizeof(jobs), diag);
  if (r == 0 && (r = join(out_dir, len, jobs, name)) == 0 && mkdir(out_dir, 0700) < 0)
    r = cordon_diag_set(diag, -errno, "%s: %s", out_dir, strerror(errno));
  if (r < 0) {
    json_decref(m);
    return r;
  }
  if ((r = daemon_lock_take(out_dir, AGENT_EXEC_LOCK, out_lock)) < 0) {
    json_decref(m);
    rmdir(out_dir);
    return cordon_diag_set(diag, r, "%s: cannot lock: %s", out_dir, cordon_err_message(r));
  }
  char path[PATH_MAX];
  r = join(path, sizeof(path), out_dir, "manifest.json");
  if (r == 0)
    r = json_dump_file(m, path, JSON_INDENT(2)) == 0 ? 0 : -EIO;
  json_decref(m);
  if (r < 0) {
    daemon_lock_release(*out_lock);
    *out_lock = NULL;
    char lock[PATH_MAX];
    if (join(lock, sizeof(lock), out_dir, AGENT_EXEC_LOCK) == 0)
      unlink(lock);
    rmdir(out_dir);
    return cordon_diag_set(diag, r, "%s: cannot write", path);
  }
  return 0;
}

static void adhoc_remove(const char *dir, struct daemon_lock *lock) {
  char path[PATH_MAX];
  if (join(path, sizeof(path), dir, "manifest.json") == 0)
    unlink(path);
  daemon_lock_release(lock); /* before the unlink: Windows keeps an open file */
  if (join(path, sizeof(path), dir, AGENT_EXEC_LOCK) == 0)
    unlink(path);
  rmdir(dir);
}

/* SIGINT, SIGTERM, SIGHUP while the job runs: the job is ended as a
 * cancel ends it (sandbox_run's cancel_fd), its result printed, and then
 * exec ends by that signal's default action (128+N to a shell). */
static int stop_pipe[2] = {-1, -1};
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) {
  int e = errno;
  if (!stop_signal)
    stop_signal = sig;
  (void)!write(stop_pipe[1], "s", 1);
  errno = e;
}

static const int stop_signals[] = {SIGINT, SIGTERM,
#ifdef SIGHUP /* not on Windows */
                                   SIGHUP
#endif
};

/* Catch the stop signals into stop_pipe: 0, or a negated errno. */
static int stop_signals_catch(void) {
  if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
    return -errno;
  for (size_t i = 0; i < sizeof(stop_signals) / sizeof(stop_signals[0]); i++)
    (void)signal(stop_signals[i], on_stop_signal);
  return 0;
}

/* After the job: the default actions back; a caught signal ends exec by
 * that signal, once its result is out. */
static void stop_signals_release(void) {
  for (size_t i = 0; i < sizeof(stop_signals) / sizeof(stop_signals[0]); i++)
    signal(stop_signals[i], SIG_DFL);
  for (int i = 0; i < 2; i++)
    if (stop_pipe[i] >= 0)
      close(stop_pipe[i]);
  stop_pipe[0] = stop_pipe[1] = -1;
}

int agent_cmd_exec(const struct agent_config *cfg, const struct agent_exec_options *o) {
  struct agent_job job;
  struct cordon_diag diag = {{0}};
  int rc;
  bool adhoc = o->source == NULL;
  char dir[PATH_MAX];
  struct daemon_lock *lock = NULL;
  const char *source = o->source;
  char *const *args = o->args;
  size_t n_args = o->n_args;
  if (adhoc) {
    int r = adhoc_package(cfg, o, dir, sizeof(dir), &lock, &diag);
    if (r < 0)
      return agent_fail(r, diag.msg);
    source = dir;
    args = o->args + 1; /* after the entry */
    n_args = o->n_args - 1;
  }
  int r = agent_job_prepare(&job, cfg, source, o->trust, &diag);
  if (adhoc)
    adhoc_remove(dir, lock);
  if (r < 0) {
    if (job.result.error) { /* a refused package: the job was attempted */
      rc = adhoc && !o->json ? finish_adhoc(&job.result) : finish_job(&job.result);
    } else {
      agent_say_error(
          r == CORDON_E_MANIFEST_INVALID || r == CORDON_E_PACKAGE_TOO_LARGE ? r : CORDON_E_USAGE,
          diag.msg);
      rc = 2;
    }
    goto out;
  }
  r = agent_job_plan(&job, args, n_args, false);
  if (r < 0 && !job.result.error)
    job_result_fail(&job.result, r, "%s", cordon_err_message(r));
  if (o->explain) {
    if (r < 0) {
      rc = o->json ? finish_job(&job.result)
                   : (agent_say_error(job.result.error, job.result.error_message), 1);
      goto out;
    }
    json_t *j = sandbox_plan_explain(job.plan);
    if (o->json)
      agent_print_json(j);
    else
      explain_summary(&job, j);
    json_decref(j);
    rc = 0;
    goto out;
  }
  if (r == 0) {
    /* a job never outlives this process, however it ends (platform/sandbox.h) */
    int rr = sandbox_reaper_start(cfg->dir);
    if (rr < 0)
      fprintf(stderr,
              AGENT_PROG ": warning: no reaper (%s): a kill -9 of exec leaves the job "
                         "running until its next start\n",
              strerror(-rr));
    if (stop_signals_catch() == 0)
      job.sjob.cancel_fd = stop_pipe[0];
    r = sandbox_run(job.plan, &job.result);
    job.sjob.cancel_fd = -1;
    if (r < 0 && !job.result.error)
      job_result_fail(&job.result, r, "%s", cordon_err_message(r));
  }
  rc = adhoc && !o->json ? finish_adhoc(&job.result) : finish_job(&job.result);
  stop_signals_release();
  if (stop_signal) {
    fflush(NULL);
    agent_job_release(&job);
    raise(stop_signal);
    return 128 + stop_signal;
  }
out:
  agent_job_release(&job);
  return rc;
}
