/* The macOS sandbox: level `none`, declared as such. macOS gives cordon no
 * isolation it can use (docs/MACOS.md), so a job runs as the job user in
 * its own session and process group under rlimits; the timeout signals the
 * group (TERM, a grace period, KILL) and then the descendants that left it
 * (jobtree.h), reported as orphans_killed. Everything here is POSIX; the
 * two OS-specific needs are behind os.h.
 *
 * What is enforced, and how, is reported per job in result.sandbox.limits:
 * cpu by RLIMIT_CPU, time by the process group, processes by RLIMIT_NPROC
 * only when the job runs as a dedicated job user (the limit counts every
 * process of that uid, so it is set to the count at start plus the job's
 * allowance), memory by RLIMIT_AS only where the kernel enforces it (the
 * build says so: XNU accepts RLIMIT_AS and ignores it, Linux enforces it),
 * disk never (RLIMIT_FSIZE caps each file, not the total).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "platform/macos/jobtree.h"
#include "platform/macos/os.h"
#include "platform/macos/spawn.h"
#include "platform/sandbox.h"
#include "platform/posix/drain.h"
#include "platform/posix/job_user.h"
#include "platform/sandbox_common.h"
#include "platform/strv.h"

#ifndef CORDON_WITH_RLIMIT_AS
#define CORDON_WITH_RLIMIT_AS 0
#endif

#define MACOS_REASON "platform_has_no_isolation"
#define MACOS_MECHANISM "pgroup+rlimit"
/* between the group's SIGTERM and SIGKILL */
#define MACOS_GRACE_MS 2000
/* supervision tick: exit checks and process-table snapshots */
#define MACOS_TICK_MS 20
#define MACOS_NOFILE 256

struct sandbox_probe {
  bool is_root;
  bool thorough;
  bool user_ok;
  char user_error[160];
  uid_t uid;
  gid_t gid;
  char *user_name;
  char *home;
  bool dedicated_user; /* jobs run under another uid than the agent's */
  bool table_tried, table_works;
  char table_error[160];
};

struct sandbox_plan {
  const struct sandbox_policy *policy;
  const struct sandbox_probe *probe;
  const struct sandbox_job *job;
  struct strv argv, envp;
  char *workspace;
  json_t *grants; /* what the package asked for, for explain */
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sandbox_probe_new(const struct sandbox_policy *policy, bool thorough,
                      struct sandbox_probe **out_probe) {
  struct sandbox_probe *p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  p->thorough = thorough;
  p->is_root = geteuid() == 0;

  struct posix_job_user ju;
  int ur = posix_job_user_lookup(policy->job_user, p->is_root, &ju, p->user_error,
                                 sizeof(p->user_error));
  if (ur == -ENOMEM) {
    sandbox_probe_free(p);
    return -ENOMEM;
  }
  if (ur == 0) { /* the probe owns the strings from now on */
    p->user_ok = true;
    p->uid = ju.uid;
    p->gid = ju.gid;
    p->dedicated_user = p->is_root;
    p->user_name = ju.name;
    p->home = ju.home;
  }

  if (thorough) {
    /* the orphan sweep depends on reading the process table: try it */
    struct macos_proc *v = NULL;
    size_t n = 0;
    int r = macos_os_procs(getuid(), &v, &n);
    p->table_tried = true;
    for (size_t i = 0; r == 0 && i < n && !p->table_works; i++)
      p->table_works = v[i].pid == getpid() && v[i].sid == getsid(0);
    if (r < 0)
      snprintf(p->table_error, sizeof(p->table_error), "%s", strerror(-r));
    else if (!p->table_works)
      snprintf(p->table_error, sizeof(p->table_error), "the agent is missing from its own table");
    free(v);
  }
  *out_probe = p;
  return 0;
}

void sandbox_probe_free(struct sandbox_probe *p) {
  if (!p)
    return;
  free(p->user_name);
  free(p->home);
  free(p);
}

enum sandbox_level sandbox_probe_best(const struct sandbox_probe *p, const char **out_reason) {
  (void)p;
  if (out_reason)
    *out_reason = MACOS_REASON;
  return SANDBOX_LEVEL_NONE;
}

json_t *sandbox_probe_json(const struct sandbox_probe *p) {
  json_t *o = json_object();
  json_t *iso = json_object();
  json_object_set_new(iso, "available", json_false());
  json_object_set_new(iso, "detail",
                      json_string("no filesystem or network isolation is applied on macOS; "
                                  "jobs run at level none (see docs/MACOS.md)"));
  json_object_set_new(o, "isolation", iso);
  json_t *sup = json_object();
  json_object_set_new(sup, "mechanism", json_string(MACOS_MECHANISM));
  json_object_set_new(sup, "process_table", json_string(macos_os_procs_source()));
  json_object_set_new(sup, "trial", p->table_tried ? json_boolean(p->table_works) : json_null());
  json_object_set_new(sup, "error", p->table_error[0] ? json_string(p->table_error) : json_null());
  json_object_set_new(sup, "grace_ms", json_integer(MACOS_GRACE_MS));
  json_object_set_new(o, "supervision", sup);
  json_t *rl = json_object();
  json_object_set_new(rl, "cpu", json_true());
  json_object_set_new(rl, "file_size", json_true());
  json_object_set_new(rl, "open_files", json_true());
  json_object_set_new(rl, "address_space", json_boolean(CORDON_WITH_RLIMIT_AS));
  json_object_set_new(rl, "processes", json_boolean(p->dedicated_user));
  json_object_set_new(o, "rlimits", rl);
  json_t *ju = json_object();
  json_object_set_new(ju, "agent_is_root", json_boolean(p->is_root));
  json_object_set_new(ju, "name", p->user_name ? json_string(p->user_name) : json_null());
  json_object_set_new(ju, "uid", p->user_ok ? json_integer(p->uid) : json_null());
  json_object_set_new(ju, "home", p->home ? json_string(p->home) : json_null());
  json_object_set_new(ju, "error", p->user_error[0] ? json_string(p->user_error) : json_null());
  json_object_set_new(o, "job_user", ju);
  return o;
}

/* ---- planning ---- */

/* Credentials under the job user's home and system secrets. At level none
 * nothing is hidden from the job; these only bound what may be granted. */
static const char *const forbidden_home[] = {
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".config/gh",
    ".netrc",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    ".password-store",
    "Library/Keychains",
    "Library/Cookies",
    "Library/Application Support/Google/Chrome",
    "Library/Application Support/Firefox",
    "Library/Safari",
    "Library/Application Support/cordon",
};
static const char *const forbidden_abs[] = {
    "/etc/master.passwd",
    "/private/etc/master.passwd",
    "/var/db/dslocal",
    "/etc/shadow",
    "/etc/ssh",
    "/private/etc/ssh",
    "/Library/Keychains",
    "/Library/Application Support/cordon",
    "/var/lib/cordon-agent",
    "/var/root",
    "/root",
};

/* Places where written code later runs outside any sandbox: a writable
 * grant that contains one (existing or not) is too broad. */
static const char *const write_forbidden_home[] = {
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".config/fish",
    ".local/bin",
    "Library/LaunchAgents",
    "Library/Application Support/com.apple.backgroundtaskmanagementagent",
};

/* Is path equal to or below dir? Both absolute, without trailing slash
 * (dir "/" is below nothing but itself here). */
static bool path_within(const char *path, const char *dir) {
  size_t n = strlen(dir);
  if (strcmp(dir, "/") == 0)
    return true;
  return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static int join_home(char *out, size_t len, const char *home, const char *rel) {
  int n = rel && rel[0] ? snprintf(out, len, "%s/%s", home, rel) : snprintf(out, len, "%s", home);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Grants are not enforced at level none (the job sees what the job user
 * sees), but a package asking beyond the owner's ceiling is refused on
 * every OS, and so is a grant that is too broad. Checked on resolved
 * paths (symlinks followed once, by realpath). */
static int check_grants(const struct sandbox_policy *policy, const struct sandbox_probe *probe,
                        const struct manifest *m, struct job_result *res, json_t *out) {
  char home[PATH_MAX];
  if (!realpath(probe->home, home))
    snprintf(home, sizeof(home), "%s", probe->home);
  for (size_t i = 0; i < m->n_grants; i++) {
    const struct manifest_grant *g = &m->grants[i];
    json_t *row = json_object();
    json_object_set_new(row, "path", json_string(g->path));
    json_object_set_new(row, "access", json_string(g->rw ? "rw" : "ro"));
    json_array_append_new(out, row);
    if (g->base == MANIFEST_GRANT_WORKSPACE)
      continue; /* always writable: the job's own directory */
    char want[PATH_MAX], real[PATH_MAX];
    int r = g->base == MANIFEST_GRANT_HOME ? join_home(want, sizeof(want), home, g->rel)
                                           : join_home(want, sizeof(want), g->path, NULL);
    if (r < 0)
      return job_result_fail(res, CORDON_E_CAPABILITY_DENIED, "grant %s: path too long", g->path);
    if (!realpath(want, real))
      return job_result_fail(res, CORDON_E_CAPABILITY_DENIED, "grant %s: %s", g->path,
                             strerror(errno));
    if (strcmp(real, "/") == 0 || (g->rw && strcmp(real, home) == 0))
      return job_result_fail(res, CORDON_E_SCOPE_TOO_BROAD, "grant %s: %s of %s is too broad",
                             g->path, g->rw ? "write access" : "access", real);
    char fb[PATH_MAX];
    size_t nh = sizeof(forbidden_home) / sizeof(forbidden_home[0]);
    size_t na = sizeof(forbidden_abs) / sizeof(forbidden_abs[0]);
    for (size_t k = 0; k < nh + na + 1; k++) {
      const char *f;
      if (k < nh) {
        if (join_home(fb, sizeof(fb), home, forbidden_home[k]) < 0)
          continue;
        f = fb;
      } else if (k < nh + na) {
        f = forbidden_abs[k - nh];
      } else {
        if (!policy->state_dir)
          continue;
        f = policy->state_dir;
      }
      if (path_within(real, f))
        return job_result_fail(res, CORDON_E_CAPABILITY_DENIED, "grant %s: %s is never granted",
                               g->path, f);
      if (g->rw && path_within(f, real))
        return job_result_fail(res, CORDON_E_SCOPE_TOO_BROAD,
                               "grant %s: write access would include %s", g->path, f);
    }
    for (size_t k = 0; g->rw && k < sizeof(write_forbidden_home) / sizeof(write_forbidden_home[0]);
         k++) {
      if (join_home(fb, sizeof(fb), home, write_forbidden_home[k]) == 0 && path_within(fb, real))
        return job_result_fail(res, CORDON_E_SCOPE_TOO_BROAD,
                               "grant %s: write access would include %s", g->path, fb);
    }
    bool under_root = false;
    for (size_t k = 0; k < policy->n_grant_roots && !under_root; k++) {
      const char *root = policy->grant_roots[k];
      char rw[PATH_MAX], rr[PATH_MAX];
      if (root[0] == '~') {
        if (join_home(rw, sizeof(rw), home, root[1] == '/' ? root + 2 : NULL) < 0)
          continue;
      } else if (join_home(rw, sizeof(rw), root, NULL) < 0) {
        continue;
      }
      under_root = realpath(rw, rr) && path_within(real, rr);
    }
    if (!under_root)
      return job_result_fail(res, CORDON_E_CAPABILITY_DENIED,
                             "grant %s: %s is outside the device owner's grant roots", g->path,
                             real);
  }
  return 0;
}

int sandbox_plan_new(const struct sandbox_policy *policy, const struct sandbox_probe *probe,
                     const struct sandbox_job *job, struct job_result *result,
                     struct sandbox_plan **out_plan) {
  const struct manifest *m = job->manifest;
  result->requested = m->min_sandbox;
  const struct manifest_argv *entry = manifest_entry_for(m, MANIFEST_PLATFORM_MACOS);
  if (!entry)
    return job_result_fail(result, CORDON_E_PLATFORM_MISMATCH, "the package does not run on macos");
  /* The level is known before anything else: none, and why. */
  result->level = SANDBOX_LEVEL_NONE;
  result->level_known = true;
  result->downgrade_reason = MACOS_REASON;
  if (SANDBOX_LEVEL_NONE < m->min_sandbox || SANDBOX_LEVEL_NONE < policy->lowest_level) {
    bool pkg = SANDBOX_LEVEL_NONE < m->min_sandbox;
    return job_result_fail(result, CORDON_E_SANDBOX_UNAVAILABLE,
                           "this device can give 'none' (" MACOS_REASON "); the %s requires '%s'",
                           pkg ? "package" : "device owner",
                           sandbox_level_name(pkg ? m->min_sandbox : policy->lowest_level));
  }
  if (!probe->user_ok)
    return job_result_fail(result, CORDON_E_JOB_USER_MISSING, "%s", probe->user_error);
  if (m->net && !policy->net_allowed)
    return job_result_fail(result, CORDON_E_CAPABILITY_DENIED,
                           "the package asks for the network; the device owner does not allow it");

  struct sandbox_plan *plan = calloc(1, sizeof(*plan));
  if (!plan)
    return -ENOMEM;
  plan->policy = policy;
  plan->probe = probe;
  plan->job = job;
  strv_init(&plan->argv);
  strv_init(&plan->envp);
  int r = -ENOMEM;
  plan->grants = json_array();
  if (!plan->grants)
    goto out_fail;
  r = check_grants(policy, probe, m, result, plan->grants);
  if (r < 0)
    goto out_fail;

  if (asprintf(&plan->workspace, "%s/workspace", job->job_dir) < 0) {
    plan->workspace = NULL;
    r = -ENOMEM;
    goto out_fail;
  }
  sandbox_direct_argv_env(m, entry, job->args, job->n_args, job->package_path, plan->workspace,
                          "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", probe->home,
                          probe->user_name, &plan->argv, &plan->envp);
  r = plan->argv.err ? plan->argv.err : plan->envp.err;
  if (r < 0)
    goto out_fail;
  *out_plan = plan;
  return 0;
out_fail:
  sandbox_plan_free(plan);
  return r;
}

void sandbox_plan_free(struct sandbox_plan *plan) {
  if (!plan)
    return;
  strv_release(&plan->argv);
  strv_release(&plan->envp);
  free(plan->workspace);
  json_decref(plan->grants);
  free(plan);
}

static void set_limits(const struct sandbox_probe *p, struct job_result *res) {
  res->lim_memory = CORDON_WITH_RLIMIT_AS ? LIMIT_MECH_RLIMIT : LIMIT_MECH_NONE;
  res->lim_processes = p->dedicated_user ? LIMIT_MECH_RLIMIT : LIMIT_MECH_NONE;
  res->lim_cpu = LIMIT_MECH_RLIMIT;
  res->lim_time = LIMIT_MECH_PGROUP;
  res->lim_disk = LIMIT_MECH_NONE;
  snprintf(res->mechanism, sizeof(res->mechanism), "%s", MACOS_MECHANISM);
}

json_t *sandbox_plan_explain(const struct sandbox_plan *plan) {
  const struct manifest *m = plan->job->manifest;
  struct job_result tmp;
  job_result_init(&tmp);
  set_limits(plan->probe, &tmp);
  json_t *o = json_object();
  json_object_set_new(o, "level", json_string("none"));
  json_object_set_new(o, "downgrade_reason", json_string(MACOS_REASON));
  json_object_set_new(o, "requested", json_string(sandbox_level_name(m->min_sandbox)));
  json_object_set_new(o, "mechanism", json_string(tmp.mechanism));
  json_t *argv = json_array();
  for (size_t i = 0; i < plan->argv.n; i++)
    json_array_append_new(argv, json_string(plan->argv.v[i]));
  json_object_set_new(o, "argv", argv);
  json_t *env = json_array();
  for (size_t i = 0; i < plan->envp.n; i++)
    json_array_append_new(env, json_string(plan->envp.v[i]));
  json_object_set_new(o, "env", env);
  json_object_set_new(o, "seccomp", json_null());
  json_object_set_new(o, "net", json_boolean(m->net && plan->policy->net_allowed));
  json_t *lim = json_object();
  struct {
    const char *name;
    uint64_t value;
    const char *unit;
    const char *how;
  } rows[] = {
      {"memory", m->memory_mb, "MiB",
       CORDON_WITH_RLIMIT_AS ? "rlimit (RLIMIT_AS, address space)"
                             : "none (RLIMIT_AS is not enforced by this kernel)"},
      {"processes", m->processes, "processes",
       plan->probe->dedicated_user
           ? "rlimit (RLIMIT_NPROC of the job user: its process count at start plus this)"
           : "none (RLIMIT_NPROC would count all of the user's processes)"},
      {"cpu", m->cpu_s, "s", "rlimit (RLIMIT_CPU)"},
      {"time", m->timeout_s, "s",
       "pgroup (TERM, 2 s grace, KILL to the group, then to descendants that left it)"},
      {"disk", m->disk_mb, "MiB", "none (RLIMIT_FSIZE caps each file at this size, not the total)"},
      {"output", m->output_kb, "KiB per stream",
       "agent (reads at most this much, discards the rest)"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    json_t *row = json_object();
    json_object_set_new(row, "value", json_integer((json_int_t)rows[i].value));
    json_object_set_new(row, "unit", json_string(rows[i].unit));
    json_object_set_new(row, "enforced_by", json_string(rows[i].how));
    json_object_set_new(lim, rows[i].name, row);
  }
  json_object_set_new(o, "limits", lim);
  json_t *not = json_array();
  json_array_append_new(not, json_string("filesystem: the job reads and writes whatever the job "
                                         "user can; grants are checked, not enforced"));
  json_array_append_new(not, json_string("network: not restricted"));
  json_array_append_new(not, json_string("privilege: setuid programs keep working (no "
                                         "no_new_privs on macOS)"));
  json_array_append_new(not, json_string("agent death: the job is not killed with the agent"));
  json_object_set_new(o, "not_enforced", not );
  json_object_set_new(o, "grants", json_incref(plan->grants));
  json_object_set_new(o, "job_user", json_string(plan->probe->user_name));
  json_object_set_new(o, "job_uid", json_integer(plan->probe->uid));
  return o;
}

/* ---- running ---- */


/* Jobs of this agent process running now, and started so far: a job whose
 * life overlapped another's cannot tell whose an orphan is. */
static atomic_uint jobs_running;
static atomic_ulong jobs_started;

struct supervisor {
  const struct sandbox_plan *plan;
  struct job_result *res;
  size_t cap;
  int out_fd, err_fd;
  bool out_open, err_open;
  pid_t leader;
  bool leader_done; /* exited (a zombie until reaped at the end) */
  struct jobtree tree;
  int64_t last_snapshot;
  bool adopt_orphans; /* the job user is this job's alone */
};

/* Has the leader exited? It is left unreaped so its pid, which is the
 * job's group and session id, cannot be handed to another process. */
static bool leader_exited(struct supervisor *s) {
  if (s->leader_done)
    return true;
  siginfo_t si;
  memset(&si, 0, sizeof(si));
  if (waitid(P_PID, (id_t)s->leader, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
      si.si_pid == s->leader)
    s->leader_done = true;
  return s->leader_done;
}

static size_t snapshot(struct supervisor *s) {
  struct macos_proc *v = NULL;
  size_t n = 0;
  s->last_snapshot = now_ms();
  if (macos_os_procs(s->plan->probe->uid, &v, &n) < 0)
    return 0;
  size_t live = jobtree_update(&s->tree, v, n);
  if (s->adopt_orphans)
    live += jobtree_adopt_orphans(&s->tree, v, n);
  free(v);
  return live;
}

/* Wait up to ms, reading output; snapshots on the tick. */
static void pump(struct supervisor *s, int ms) {
  struct pollfd pf[2];
  int n = 0, i_out = -1, i_err = -1;
  if (s->out_open) {
    pf[n] = (struct pollfd){s->out_fd, POLLIN, 0};
    i_out = n++;
  }
  if (s->err_open) {
    pf[n] = (struct pollfd){s->err_fd, POLLIN, 0};
    i_err = n++;
  }
  if (n == 0) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return;
  }
  if (poll(pf, (nfds_t)n, ms) <= 0)
    return;
  if (i_out >= 0 && (pf[i_out].revents & (POLLIN | POLLHUP | POLLERR)))
    s->out_open = posix_drain_fd(s->out_fd, &s->res->out, s->cap);
  if (i_err >= 0 && (pf[i_err].revents & (POLLIN | POLLHUP | POLLERR)))
    s->err_open = posix_drain_fd(s->err_fd, &s->res->err, s->cap);
}

/* Kill what is left of the job: TERM first when graceful, then KILL until
 * nothing of it is seen. Returns how many processes besides the leader
 * were signalled. */
static size_t kill_job(struct supervisor *s, bool graceful, bool adopt_orphans) {
  size_t killed = 0;
  s->adopt_orphans = adopt_orphans;
  snapshot(s);
  if (graceful) {
    killed += jobtree_signal(&s->tree, SIGTERM);
    jobtree_signal(&s->tree, SIGCONT); /* a stopped process gets to handle TERM */
    int64_t until = now_ms() + MACOS_GRACE_MS;
    while (now_ms() < until) {
      pump(s, MACOS_TICK_MS);
      size_t live = snapshot(s);
      killed += jobtree_signal(&s->tree, SIGTERM);
      if (live == 0 && leader_exited(s))
        break;
    }
  }
  for (int round = 0; round < 100; round++) {
    killed += jobtree_signal(&s->tree, SIGKILL);
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
    size_t live = snapshot(s);
    if (live == 0 && leader_exited(s))
      break;
  }
  return killed;
}

int sandbox_run(struct sandbox_plan *plan, struct job_result *res) {
  const struct manifest *m = plan->job->manifest;
  const struct sandbox_probe *probe = plan->probe;
  size_t cap = (size_t)m->output_kb * 1024;
  int r;
  int out_p[2] = {-1, -1}, err_p[2] = {-1, -1};

  res->level = SANDBOX_LEVEL_NONE;
  res->level_known = true;
  res->downgrade_reason = MACOS_REASON;
  res->requested = m->min_sandbox;
  res->oom_killed = -1; /* no mechanism here can tell */
  set_limits(probe, res);
  res->out.data = malloc(cap ? cap : 1);
  res->err.data = malloc(cap ? cap : 1);
  if (!res->out.data || !res->err.data)
    return -ENOMEM;

  if (mkdir(plan->workspace, 0700) < 0 && errno != EEXIST)
    return job_result_fail(res, CORDON_E_SPAWN_FAILED, "workspace: %s", strerror(errno));
  if (probe->is_root && chown(plan->workspace, probe->uid, probe->gid) < 0)
    return job_result_fail(res, CORDON_E_SPAWN_FAILED, "workspace: %s", strerror(errno));

  struct spawn_rlimit rl[6];
  size_t nrl = 0;
  rl[nrl++] = (struct spawn_rlimit){RLIMIT_CPU, {m->cpu_s, (rlim_t)m->cpu_s + 1}};
  rl[nrl++] = (struct spawn_rlimit){RLIMIT_CORE, {0, 0}};
  rl[nrl++] = (struct spawn_rlimit){RLIMIT_NOFILE, {MACOS_NOFILE, MACOS_NOFILE}};
  rl[nrl++] =
      (struct spawn_rlimit){RLIMIT_FSIZE, {(rlim_t)m->disk_mb << 20, (rlim_t)m->disk_mb << 20}};
  if (CORDON_WITH_RLIMIT_AS)
    rl[nrl++] =
        (struct spawn_rlimit){RLIMIT_AS, {(rlim_t)m->memory_mb << 20, (rlim_t)m->memory_mb << 20}};
  if (probe->dedicated_user) {
    /* RLIMIT_NPROC counts every process of the job user, other jobs' too:
     * the job gets its allowance on top of what that user runs now */
    struct macos_proc *v = NULL;
    size_t now = 0;
    if (macos_os_procs(probe->uid, &v, &now) < 0)
      now = 0;
    free(v);
    rlim_t np = (rlim_t)now + m->processes;
    rl[nrl++] = (struct spawn_rlimit){RLIMIT_NPROC, {np, np}};
  }

  if (pipe(out_p) < 0 || pipe(err_p) < 0) {
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "pipe: %s", strerror(errno));
    goto out;
  }
  for (int i = 0; i < 2; i++) {
    fcntl(out_p[i], F_SETFD, FD_CLOEXEC);
    fcntl(err_p[i], F_SETFD, FD_CLOEXEC);
  }
  fcntl(out_p[0], F_SETFL, O_NONBLOCK);
  fcntl(err_p[0], F_SETFL, O_NONBLOCK);

  struct spawn_spec spec = {
      .path = plan->argv.v[0],
      .argv = plan->argv.v,
      .envp = plan->envp.v,
      .stdout_fd = out_p[1],
      .stderr_fd = err_p[1],
      .rlimits = rl,
      .n_rlimits = nrl,
      .drop_ids = probe->is_root,
      .uid = probe->uid,
      .gid = probe->gid,
      .cwd = plan->job->package_path,
  };
  int64_t start = now_ms();
  pid_t pid;
  r = spawn_job(&spec, &pid);
  close(out_p[1]);
  close(err_p[1]);
  out_p[1] = err_p[1] = -1;
  if (r < 0) {
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "cannot start %s: %s", spec.path, strerror(-r));
    goto out;
  }
  res->ran = true;

  struct supervisor s = {
      .plan = plan,
      .res = res,
      .cap = cap,
      .out_fd = out_p[0],
      .err_fd = err_p[0],
      .out_open = true,
      .err_open = true,
      .leader = pid,
  };
  jobtree_init(&s.tree, pid);
  unsigned long started_as = atomic_fetch_add(&jobs_started, 1) + 1;
  bool alone = atomic_fetch_add(&jobs_running, 1) == 0;
  snapshot(&s);

  int64_t deadline = start + (int64_t)m->timeout_s * 1000;
  bool cancelled = false;
  int cancel_fd = plan->job->cancel_fd;
  while (!leader_exited(&s)) {
    int64_t t = now_ms();
    if (t >= deadline) {
      res->timed_out = true;
      break;
    }
    if (cancel_fd >= 0) {
      struct pollfd cp = {cancel_fd, POLLIN, 0};
      if (poll(&cp, 1, 0) > 0 && (cp.revents & (POLLIN | POLLHUP))) {
        cancelled = true;
        break;
      }
    }
    /* remember descendants before their parents can exit */
    if (t - s.last_snapshot >= MACOS_TICK_MS)
      snapshot(&s);
    int64_t left = deadline - t;
    pump(&s, left < MACOS_TICK_MS ? (int)left : MACOS_TICK_MS);
  }

  /* timeout or cancel: the group gets TERM and a grace period; after a
   * normal exit whatever the job left behind is killed at once */
  bool graceful = res->timed_out || cancelled;
  /* only a dedicated job user's orphans can be this job's; and only when
   * no other job of this agent ran meanwhile */
  alone = alone && probe->dedicated_user && atomic_load(&jobs_started) == started_as;
  size_t killed = kill_job(&s, graceful, alone);
  atomic_fetch_sub(&jobs_running, 1);
  res->orphans_killed = (unsigned)killed;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  jobtree_release(&s.tree);
  if (cancelled)
    job_result_fail(res, CORDON_E_CANCELLED, "the job was cancelled");
  res->wall_ms = (uint64_t)(now_ms() - start);

  /* the rest of the output: the writers are dead, so EOF comes quickly */
  int64_t drain_deadline = now_ms() + 2000;
  while ((s.out_open || s.err_open) && now_ms() < drain_deadline)
    pump(&s, 100);

  if (WIFEXITED(status)) {
    res->exited = true;
    res->exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    res->exited = false;
    res->signal = WTERMSIG(status);
  }
  r = 0;
out:
  for (int i = 0; i < 2; i++) {
    if (out_p[i] >= 0)
      close(out_p[i]);
    if (err_p[i] >= 0)
      close(err_p[i]);
  }
  return r;
}

int sandbox_reap_leftovers(const char *job_id) {
  /* Nothing outlives the agent's own sweep here that a later process could
   * find again: there is no per-job kernel object on macOS. */
  (void)job_id;
  return 0;
}
