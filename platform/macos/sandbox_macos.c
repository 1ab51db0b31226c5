/* The macOS sandbox: level `none`, declared as such. macOS gives cordon no
 * isolation it can use (docs/MACOS.md), so a job runs as the job user in
 * its own session and process group under rlimits; the timeout signals the
 * group (TERM, a grace period, KILL) and then the descendants that left it
 * (jobtree.h), reported as orphans_killed. Everything here is POSIX; the
 * two OS-specific needs are behind os.h. The policy is platform/sandbox.c's.
 *
 * What is enforced, and how, is reported per job in result.sandbox.limits:
 * cpu by RLIMIT_CPU, time by the process group, processes by RLIMIT_NPROC
 * only when the job runs as a dedicated job user (the limit counts every
 * process of that uid, so it is set to the count at start plus the job's
 * allowance), memory by RLIMIT_AS only where the kernel enforces it (the
 * build says so: XNU accepts RLIMIT_AS and ignores it, Linux enforces it),
 * disk never (RLIMIT_FSIZE caps each file, not the total).
 */
#include "platform/macos/sandbox_macos.h"

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

#include "core/clock.h"
#include "platform/macos/jobtree.h"
#include "platform/macos/os.h"
#include "platform/posix/launch.h"
#include "platform/posix/output.h"

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

struct sandbox_os_plan {
  char *workspace;
  json_t *grants; /* what the package asked for, for explain */
};

int sandbox_os_probe_new(const struct sandbox_policy *policy, bool thorough,
                         struct sandbox_os_probe **out_probe, struct sandbox_facts *out_facts) {
  struct sandbox_os_probe *p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  if (posix_job_user_probe(policy->job_user, &p->user) < 0) {
    free(p);
    return -ENOMEM;
  }
  p->dedicated_user = p->user.ok && p->user.is_root;

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
  *out_facts = (struct sandbox_facts){
      .best = SANDBOX_LEVEL_NONE,
      .reason = MACOS_REASON,
      .user_error = p->user.ok ? NULL : p->user.error,
      .user_name = p->user.u.name,
      .has_home = p->user.ok,
      .lowest_runnable = SANDBOX_LEVEL_NONE,
      .level_fixed = true, /* known before anything else: none, and why */
  };
  *out_probe = p;
  return 0;
}

void sandbox_os_probe_free(struct sandbox_os_probe *p) {
  if (!p)
    return;
  posix_job_user_release(&p->user.u);
  free(p);
}

json_t *sandbox_os_probe_json(const struct sandbox_os_probe *p) {
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
  json_object_set_new(o, "job_user", posix_job_user_json(&p->user));
  return o;
}

/* ---- planning ---- */

int sandbox_os_plan_new(struct sandbox_plan *plan, const struct sandbox_grants *grants,
                        struct job_result *result, struct sandbox_os_plan **out_os) {
  const struct sandbox_job *job = plan->job;
  const struct sandbox_os_probe *probe = plan->probe->os;
  (void)result;
  struct sandbox_os_plan *os = calloc(1, sizeof(*os));
  if (!os)
    return -ENOMEM;
  /* grants are checked, not enforced: the job sees what the job user sees */
  os->grants = json_array();
  for (size_t i = 0; os->grants && i < grants->n; i++) {
    const struct manifest_grant *g = grants->v[i].g;
    json_array_append_new(os->grants,
                          json_pack("{s:s, s:s}", "path", g->path, "access", g->rw ? "rw" : "ro"));
  }
  if (!os->grants || asprintf(&os->workspace, "%s/workspace", job->job_dir) < 0) {
    os->workspace = NULL;
    sandbox_os_plan_free(os);
    return -ENOMEM;
  }
  sandbox_direct_argv_env(job->manifest, plan->entry, job->args, job->n_args, job->package_path,
                          os->workspace, "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
                          probe->user.u.home, probe->user.u.name, &plan->argv, &plan->envp);
  *out_os = os;
  return 0;
}

void sandbox_os_plan_free(struct sandbox_os_plan *os) {
  if (!os)
    return;
  free(os->workspace);
  json_decref(os->grants);
  free(os);
}

static void set_limits(const struct sandbox_os_probe *p, struct job_result *res) {
  res->lim_memory = CORDON_WITH_RLIMIT_AS ? LIMIT_MECH_RLIMIT : LIMIT_MECH_NONE;
  res->lim_processes = p->dedicated_user ? LIMIT_MECH_RLIMIT : LIMIT_MECH_NONE;
  res->lim_cpu = LIMIT_MECH_RLIMIT;
  res->lim_time = LIMIT_MECH_PGROUP;
  res->lim_disk = LIMIT_MECH_NONE;
  snprintf(res->mechanism, sizeof(res->mechanism), "%s", MACOS_MECHANISM);
}

json_t *sandbox_os_plan_explain(const struct sandbox_plan *plan, struct job_result *limits) {
  const struct manifest *m = plan->job->manifest;
  const struct sandbox_os_probe *probe = plan->probe->os;
  set_limits(probe, limits);
  json_t *o = json_object();
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
       probe->dedicated_user
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
  json_object_set_new(o, "grants", json_incref(plan->os->grants));
  json_object_set_new(o, "job_uid", json_integer(probe->user.u.uid));
  return o;
}

/* ---- running ---- */

/* Jobs of this agent process running now, and started so far: a job whose
 * life overlapped another's cannot tell whose an orphan is. */
static atomic_uint jobs_running;
static atomic_ulong jobs_started;

struct supervisor {
  const struct sandbox_plan *plan;
  struct posix_output *out;
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
  s->last_snapshot = core_mono_ms();
  if (macos_os_procs(s->plan->probe->os->user.u.uid, &v, &n) < 0)
    return 0;
  size_t live = jobtree_update(&s->tree, v, n);
  if (s->adopt_orphans)
    live += jobtree_adopt_orphans(&s->tree, v, n);
  free(v);
  return live;
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
    int64_t until = core_mono_ms() + MACOS_GRACE_MS;
    while (core_mono_ms() < until) {
      posix_output_poll(s->out, NULL, 0, MACOS_TICK_MS);
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

int sandbox_os_run(struct sandbox_plan *plan, struct job_result *res) {
  const struct manifest *m = plan->job->manifest;
  const struct sandbox_os_probe *probe = plan->probe->os;
  const char *workspace = plan->os->workspace;
  int r;

  res->oom_killed = -1; /* no mechanism here can tell */
  set_limits(probe, res);
  if (mkdir(workspace, 0700) < 0 && errno != EEXIST)
    return job_result_fail(res, CORDON_E_SPAWN_FAILED, "workspace: %s", strerror(errno));
  if (probe->user.is_root && chown(workspace, probe->user.u.uid, probe->user.u.gid) < 0)
    return job_result_fail(res, CORDON_E_SPAWN_FAILED, "workspace: %s", strerror(errno));

  struct launch_rlimit rl[6];
  size_t nrl = 0;
  rl[nrl++] = (struct launch_rlimit){RLIMIT_CPU, {m->cpu_s, (rlim_t)m->cpu_s + 1}};
  rl[nrl++] = (struct launch_rlimit){RLIMIT_CORE, {0, 0}};
  rl[nrl++] = (struct launch_rlimit){RLIMIT_NOFILE, {MACOS_NOFILE, MACOS_NOFILE}};
  rl[nrl++] =
      (struct launch_rlimit){RLIMIT_FSIZE, {(rlim_t)m->disk_mb << 20, (rlim_t)m->disk_mb << 20}};
  if (CORDON_WITH_RLIMIT_AS)
    rl[nrl++] =
        (struct launch_rlimit){RLIMIT_AS, {(rlim_t)m->memory_mb << 20, (rlim_t)m->memory_mb << 20}};
  if (probe->dedicated_user) {
    /* RLIMIT_NPROC counts every process of the job user, other jobs' too:
     * the job gets its allowance on top of what that user runs now */
    struct macos_proc *v = NULL;
    size_t now = 0;
    if (macos_os_procs(probe->user.u.uid, &v, &now) < 0)
      now = 0;
    free(v);
    rlim_t np = (rlim_t)now + m->processes;
    rl[nrl++] = (struct launch_rlimit){RLIMIT_NPROC, {np, np}};
  }

  struct posix_output out;
  r = posix_output_open(&out, res, (size_t)m->output_kb * 1024, plan->job);
  if (r < 0)
    return job_result_fail(res, CORDON_E_SPAWN_FAILED, "pipe: %s", strerror(-r));

  /* no no_new_privs and no parent-death signal exist on macOS */
  struct launch_spec spec = {
      .path = plan->argv.v[0],
      .argv = plan->argv.v,
      .envp = plan->envp.v,
      .stdout_fd = out.wr[0],
      .stderr_fd = out.wr[1],
      .rlimits = rl,
      .n_rlimits = nrl,
      .drop_uid = probe->user.is_root,
      .uid = probe->user.u.uid,
      .gid = probe->user.u.gid,
      .cwd = plan->job->package_path,
  };
  int64_t start = core_mono_ms();
  pid_t pid;
  r = launch_spawn(&spec, &pid);
  posix_output_close_writers(&out);
  if (r < 0) {
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "cannot start %s: %s", spec.path, strerror(-r));
    goto out;
  }
  res->ran = true;

  struct supervisor s = {.plan = plan, .out = &out, .leader = pid};
  jobtree_init(&s.tree, pid);
  unsigned long started_as = atomic_fetch_add(&jobs_started, 1) + 1;
  bool alone = atomic_fetch_add(&jobs_running, 1) == 0;
  snapshot(&s);

  int64_t deadline = start + (int64_t)m->timeout_s * 1000;
  bool cancelled = false;
  int cancel_fd = plan->job->cancel_fd;
  while (!leader_exited(&s)) {
    int64_t t = core_mono_ms();
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
    posix_output_poll(&out, NULL, 0, left < MACOS_TICK_MS ? (int)left : MACOS_TICK_MS);
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
  if (killed > 0 || graceful)
    res->kill_scope = KILL_SCOPE_PGROUP;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  jobtree_release(&s.tree);
  if (cancelled)
    job_result_fail(res, CORDON_E_CANCELLED, "the job was cancelled");
  res->wall_ms = (uint64_t)(core_mono_ms() - start);
  posix_output_finish(&out);
  posix_exit_status(status, false, res);
  r = 0;
out:
  posix_output_release(&out);
  return r;
}

int sandbox_os_sweep_leftovers(const char *state_dir) {
  (void)state_dir; /* no per-job kernel object outlives the agent here */
  return 0;
}

int sandbox_os_reaper_start(const char *state_dir) {
  (void)state_dir; /* as above: nothing to reap */
  return 0;
}

int sandbox_os_enter_user_cgroup(int argc, char *const *argv, const char **out_why) {
  (void)argc;
  (void)argv;
  *out_why = "macOS has no cgroups";
  return 0;
}

int sandbox_os_reap_leftovers(const char *job_id) {
  /* Nothing outlives the agent's own sweep here that a later process could
   * find again: there is no per-job kernel object on macOS. */
  (void)job_id;
  return 0;
}
