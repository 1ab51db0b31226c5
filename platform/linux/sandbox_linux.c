/* The Linux sandbox mechanism: bwrap + seccomp (isolated), or
 * cgroup/rlimits + seccomp + tree kill (contained), always as a non-root
 * job user. The policy is platform/sandbox.c's. */
#include "platform/linux/sandbox_linux.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "platform/linux/bwrap.h"
#include "platform/linux/cgroup.h"
#include "platform/linux/grants_linux.h"
#include "platform/linux/pidfd.h"
#include "platform/linux/procs.h"
#include "platform/linux/reaper_linux.h"
#include "platform/linux/seccomp.h"
#include "platform/linux/user_scope.h"
#include "platform/posix/launch.h"
#include "platform/posix/output.h"

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif

struct sandbox_os_plan {
  int seccomp_fd;
  struct sock_fprog *prog;
  struct grant_set grants;
  char *workspace; /* contained mode: host path */
  /* isolated: the fd bwrap gets with --bind-fd for the workspace; an
   * O_PATH fd of /dev/null (which bwrap cannot bind on a directory) in
   * the agent but during a root agent's run, when it is the root of the
   * job's tmpfs (workspace_mount_enter); -1 otherwise */
  int workspace_fd;
  /* isolated, not probe->mounts_workspace: the launcher's child mounts
   * the tmpfs in a user and mount namespace of its own and lands its root
   * on workspace_fd, and bwrap runs in them (launch.h); target NULL else */
  struct launch_ns_tmpfs ns_tmpfs;
  char ns_uid_map[32], ns_gid_map[32], ns_options[160];
  char *ns_target;
  struct cgroup_avail expect_cgroup;
};

static long read_long(const char *path, long dflt) {
  FILE *f = fopen(path, "re");
  if (!f)
    return dflt;
  long v;
  if (fscanf(f, "%ld", &v) != 1)
    v = dflt;
  fclose(f);
  return v;
}

/* Run argv as the job user, capture up to len-1 bytes of stdout+stderr,
 * wait at most timeout_ms. Returns the wait status or a negated errno. */
static int run_capture(const struct sandbox_os_probe *p, char *const *argv, char *out, size_t len,
                       int timeout_ms) {
  int pfd[2];
  int r = launch_cloexec_pipe(pfd);
  if (r < 0)
    return r;
  char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
  struct launch_spec spec = {
      .path = argv[0],
      .argv = argv,
      .envp = envp,
      .stdout_fd = pfd[1],
      .stderr_fd = pfd[1],
      .drop_uid = p->user.is_root,
      .uid = p->user.u.uid,
      .gid = p->user.u.gid,
      .no_new_privs = true,
      .parent_death_signal = SIGKILL,
      .cwd = "/",
  };
  pid_t pid;
  r = launch_spawn(&spec, &pid);
  close(pfd[1]);
  if (r < 0) {
    close(pfd[0]);
    return r;
  }
  size_t have = 0;
  int64_t deadline = core_mono_ms() + timeout_ms;
  for (;;) {
    struct pollfd pf = {pfd[0], POLLIN, 0};
    int64_t left = deadline - core_mono_ms();
    if (left <= 0 || poll(&pf, 1, (int)left) <= 0)
      break;
    ssize_t n = read(pfd[0], out + have, len - 1 - have);
    if (n <= 0)
      break;
    have += (size_t)n;
    if (have == len - 1)
      break;
  }
  out[have] = '\0';
  close(pfd[0]);
  kill(pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  return st;
}

/* A real trial sandbox (for `status`): bwrap with every namespace. */
static void try_bwrap(struct sandbox_os_probe *p) {
  char *ver[] = {p->bwrap_path, "--version", NULL};
  char out[256];
  if (run_capture(p, ver, out, sizeof(out), 5000) == 0) {
    out[strcspn(out, "\n")] = '\0';
    snprintf(p->bwrap_version, sizeof(p->bwrap_version), "%.60s", out);
  }
  char *trial[] = {p->bwrap_path,
                   "--unshare-user",
                   "--unshare-ipc",
                   "--unshare-pid",
                   "--unshare-net",
                   "--unshare-uts",
                   "--unshare-cgroup",
                   "--disable-userns",
                   "--die-with-parent",
                   "--new-session",
                   "--cap-drop",
                   "ALL",
                   "--ro-bind",
                   "/usr",
                   "/usr",
                   "--symlink",
                   "usr/bin",
                   "/bin",
                   "--symlink",
                   "usr/lib",
                   "/lib",
                   "--symlink",
                   "usr/lib64",
                   "/lib64",
                   "--proc",
                   "/proc",
                   "--dev",
                   "/dev",
                   "--",
                   "/usr/bin/true",
                   NULL};
  char err[256];
  int wst = run_capture(p, trial, err, sizeof(err), 10000);
  p->bwrap_tried = true;
  p->bwrap_works = wst == 0;
  if (!p->bwrap_works) {
    err[strcspn(err, "\n")] = '\0';
    snprintf(p->bwrap_error, sizeof(p->bwrap_error), "trial sandbox failed: %.200s",
             err[0] ? err : "no output");
  }
}

/* Does this process hold CAP_SYS_ADMIN, so that it may mount a tmpfs? */
static bool may_mount(void) {
  FILE *f = fopen("/proc/self/status", "re");
  if (!f)
    return false;
  char line[256];
  unsigned long long eff = 0;
  bool found = false;
  while (!found && fgets(line, sizeof(line), f))
    found = sscanf(line, "CapEff: %llx", &eff) == 1;
  fclose(f);
  return found && (eff >> 21 & 1); /* CAP_SYS_ADMIN */
}

int sandbox_os_probe_new(const struct sandbox_policy *policy, bool thorough,
                         struct sandbox_os_probe **out_probe, struct sandbox_facts *out_facts) {
  struct sandbox_os_probe *p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  p->bwrap_path = strdup(policy->bwrap_path ? policy->bwrap_path : "/usr/bin/bwrap");
  if (!p->bwrap_path || posix_job_user_probe(policy->job_user, &p->user) < 0) {
    sandbox_os_probe_free(p);
    return -ENOMEM;
  }

  struct stat st;
  p->bwrap_exists = p->bwrap_path[0] == '/' && stat(p->bwrap_path, &st) == 0 &&
                    S_ISREG(st.st_mode) && (st.st_mode & 0111);
  if (!p->bwrap_exists)
    snprintf(p->bwrap_error, sizeof(p->bwrap_error), "%s is missing or not executable",
             p->bwrap_path);

  long maxns = read_long("/proc/sys/user/max_user_namespaces", -1);
  long unpriv = read_long("/proc/sys/kernel/unprivileged_userns_clone", 1);
  long aa = read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", 0);
  p->userns_ok = maxns != 0 && unpriv != 0 && aa == 0;
  snprintf(p->userns_detail, sizeof(p->userns_detail),
           "max_user_namespaces=%ld unprivileged_userns_clone=%ld "
           "apparmor_restrict_unprivileged_userns=%ld",
           maxns, unpriv, aa);

  char avail[256] = "";
  FILE *f = fopen("/proc/sys/kernel/seccomp/actions_avail", "re");
  if (f) {
    if (!fgets(avail, sizeof(avail), f))
      avail[0] = '\0';
    fclose(f);
  }
  p->seccomp_ok = strstr(avail, "errno") != NULL;
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1UL /* VERSION */);
  p->landlock_abi = abi > 0 ? (int)abi : 0;

  p->mounts_workspace = p->user.is_root && may_mount();

  if (thorough && p->bwrap_exists && p->user.ok)
    try_bwrap(p);

  struct sandbox_facts fa = {
      .best = SANDBOX_LEVEL_CONTAINED,
      .user_error = p->user.ok ? NULL : p->user.error,
      .user_name = p->user.u.name,
      .has_home = p->user.ok,
      .lowest_runnable = SANDBOX_LEVEL_NONE,
  };
  if (!p->bwrap_exists)
    fa.reason = "bwrap_unavailable";
  else if (!p->userns_ok)
    fa.reason = "userns_denied";
  else if (!p->seccomp_ok)
    fa.reason = "seccomp_unavailable";
  else if (p->bwrap_tried && !p->bwrap_works)
    fa.reason = "bwrap_unavailable";
  else
    fa.best = SANDBOX_LEVEL_ISOLATED;
  *out_facts = fa;
  *out_probe = p;
  return 0;
}

void sandbox_os_probe_free(struct sandbox_os_probe *p) {
  if (!p)
    return;
  posix_job_user_release(&p->user.u);
  free(p->bwrap_path);
  free(p);
}

json_t *sandbox_os_probe_json(const struct sandbox_os_probe *p) {
  json_t *o = json_object();
  json_t *b = json_object();
  json_object_set_new(b, "path", json_string(p->bwrap_path));
  json_object_set_new(b, "present", json_boolean(p->bwrap_exists));
  json_object_set_new(b, "version",
                      p->bwrap_version[0] ? json_string(p->bwrap_version) : json_null());
  json_object_set_new(b, "trial", p->bwrap_tried ? json_boolean(p->bwrap_works) : json_null());
  json_object_set_new(b, "error", p->bwrap_error[0] ? json_string(p->bwrap_error) : json_null());
  json_object_set_new(o, "bwrap", b);
  json_object_set_new(o, "userns",
                      json_pack("{s:b, s:s}", "allowed", p->userns_ok, "detail", p->userns_detail));
  json_object_set_new(o, "seccomp", json_pack("{s:b}", "available", p->seccomp_ok));
  json_object_set_new(o, "landlock",
                      json_pack("{s:i, s:b}", "abi", p->landlock_abi, "used", false));
  json_object_set_new(o, "workspace_tmpfs",
                      json_pack("{s:s, s:b}", "mounted_by",
                                p->mounts_workspace ? "agent"
                                : !p->user.is_root  ? "agent-userns"
                                                    : "bwrap",
                                "nr_inodes", p->mounts_workspace || !p->user.is_root));
  struct user_scope_facts us;
  user_scope_facts_read(getenv("XDG_RUNTIME_DIR"), &us);
  const char *why;
  enum user_scope_choice uc = user_scope_decide(&us, &why);
  json_object_set_new(o, "user_scope",
                      json_pack("{s:s, s:s, s:b}", "decision",
                                uc == USER_SCOPE_ENTER        ? "enter"
                                : uc == USER_SCOPE_NOT_NEEDED ? "not_needed"
                                                              : "unavailable",
                                "why", why, "in_scope", us.in_scope));
  json_object_set_new(o, "cgroups", cgroup_probe_json());
  json_object_set_new(o, "job_user", posix_job_user_json(&p->user));
  return o;
}

/* ---- planning ---- */

static const struct bwrap_base *host_base(size_t *out_n) {
  static struct bwrap_base base[8];
  static char targets[8][64];
  static const char *const dirs[] = {"/usr",   "/bin",   "/sbin",   "/lib",
                                     "/lib32", "/lib64", "/libx32", "/etc"};
  size_t n = 0;
  for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
    struct stat st;
    if (lstat(dirs[i], &st) < 0)
      continue;
    if (S_ISLNK(st.st_mode)) {
      ssize_t k = readlink(dirs[i], targets[n], sizeof(targets[n]) - 1);
      if (k <= 0)
        continue;
      targets[n][k] = '\0';
      base[n].path = dirs[i];
      base[n].link_target = targets[n];
    } else if (S_ISDIR(st.st_mode)) {
      base[n].path = dirs[i];
      base[n].link_target = NULL;
    } else {
      continue;
    }
    n++;
  }
  *out_n = n;
  return base;
}

static int plan_isolated(struct sandbox_plan *plan, struct sandbox_os_plan *os,
                         struct job_result *result) {
  const struct sandbox_os_probe *probe = plan->probe->os;
  const struct sandbox_job *job = plan->job;
  os->seccomp_fd = seccomp_job_filter_fd(plan->net);
  if (os->seccomp_fd < 0)
    return job_result_fail(result, CORDON_E_SPAWN_FAILED, "seccomp filter: %s",
                           strerror(-os->seccomp_fd));
  /* a root agent that may not mount (no CAP_SYS_ADMIN) leaves it to
   * bwrap's --size: bytes only, and the limits say so */
  if ((probe->mounts_workspace || !probe->user.is_root) &&
      (os->workspace_fd = open("/dev/null", O_PATH | O_CLOEXEC)) < 0)
    return job_result_fail(result, CORDON_E_SPAWN_FAILED, "workspace: %s", strerror(errno));
  if (!probe->mounts_workspace && !probe->user.is_root) {
    /* the agent's own uid and gid (the job's), mapped to themselves */
    uid_t uid = getuid();
    gid_t gid = getgid();
    snprintf(os->ns_uid_map, sizeof(os->ns_uid_map), "%u %u 1", (unsigned)uid, (unsigned)uid);
    snprintf(os->ns_gid_map, sizeof(os->ns_gid_map), "%u %u 1", (unsigned)gid, (unsigned)gid);
    int r = bwrap_workspace_tmpfs_options(job->manifest->disk_mb, uid, gid, os->ns_options,
                                          sizeof(os->ns_options));
    if (r < 0 || asprintf(&os->ns_target, "%s/workspace", job->job_dir) < 0) {
      os->ns_target = NULL;
      return -ENOMEM;
    }
    os->ns_tmpfs = (struct launch_ns_tmpfs){.uid_map = os->ns_uid_map,
                                            .gid_map = os->ns_gid_map,
                                            .target = os->ns_target,
                                            .options = os->ns_options,
                                            .fd = os->workspace_fd};
  }
  struct bwrap_host host = {.bwrap_path = probe->bwrap_path};
  host.base = host_base(&host.n_base);
  grants_base_blinds(&host.blind_files, &host.n_blind_files, &host.blind_dirs, &host.n_blind_dirs);
  struct bwrap_input in = {
      .m = job->manifest,
      .entry = plan->entry,
      .args = job->args,
      .n_args = job->n_args,
      .home = probe->user.u.home,
      .user = probe->user.u.name,
      .package_fd = job->package_dirfd,
      .seccomp_fd = os->seccomp_fd,
      .workspace_mounted = os->workspace_fd >= 0,
      .workspace_fd = os->workspace_fd,
      .mounts = os->grants.mounts,
      .n_mounts = os->grants.n_mounts,
  };
  return bwrap_argv_build(&host, &in, &plan->argv);
}

/* contained: the real paths; network cut by seccomp when not allowed */
static int plan_contained(struct sandbox_plan *plan, struct sandbox_os_plan *os,
                          struct job_result *result) {
  const struct sandbox_os_probe *probe = plan->probe->os;
  const struct sandbox_job *job = plan->job;
  int r = seccomp_job_filter_prog(plan->net, &os->prog);
  if (r < 0)
    return job_result_fail(result, CORDON_E_SPAWN_FAILED, "seccomp filter: %s", strerror(-r));
  if (asprintf(&os->workspace, "%s/workspace", job->job_dir) < 0) {
    os->workspace = NULL;
    return -ENOMEM;
  }
  sandbox_direct_argv_env(job->manifest, plan->entry, job->args, job->n_args, job->package_path,
                          os->workspace,
                          "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                          probe->user.u.home, probe->user.u.name, &plan->argv, &plan->envp);
  return 0;
}

int sandbox_os_plan_new(struct sandbox_plan *plan, const struct sandbox_grants *grants,
                        struct job_result *result, struct sandbox_os_plan **out_os) {
  const struct sandbox_os_probe *probe = plan->probe->os;
  struct sandbox_os_plan *os = calloc(1, sizeof(*os));
  if (!os)
    return -ENOMEM;
  os->seccomp_fd = -1;
  os->workspace_fd = -1;
  /* what the agent's uid may create now; run() reports reality */
  cgroup_available(&os->expect_cgroup);
  struct cordon_diag diag = {{0}};
  int r = grants_linux_mounts(grants, probe->user.u.home, &os->grants, &diag);
  if (r < 0) {
    job_result_fail(result, r, "%s", diag.msg[0] ? diag.msg : cordon_err_message(r));
    goto out_fail;
  }
  r = plan->level == SANDBOX_LEVEL_ISOLATED ? plan_isolated(plan, os, result)
                                            : plan_contained(plan, os, result);
  if (r < 0)
    goto out_fail;
  *out_os = os;
  return 0;
out_fail:
  sandbox_os_plan_free(os);
  return r;
}

void sandbox_os_plan_free(struct sandbox_os_plan *os) {
  if (!os)
    return;
  if (os->seccomp_fd >= 0)
    close(os->seccomp_fd);
  if (os->workspace_fd >= 0)
    close(os->workspace_fd);
  free(os->ns_target);
  seccomp_job_prog_free(os->prog);
  grants_release(&os->grants);
  free(os->workspace);
  free(os);
}

/* What bounds the inodes of the workspace tmpfs: its nr_inodes where the
 * agent or its launcher mounts it; nothing where bwrap's --size makes it
 * (a root agent without CAP_SYS_ADMIN), which leaves the count at the
 * kernel's default, half the RAM's pages. */
static enum limit_mech workspace_inodes(const struct sandbox_plan *plan) {
  return plan->level == SANDBOX_LEVEL_ISOLATED && plan->os->workspace_fd >= 0 ? LIMIT_MECH_TMPFS
                                                                              : LIMIT_MECH_NONE;
}

/* disk_mb holds for the tree when the workspace tmpfs is the only
 * writable place and its inodes are bounded too; a writable grant is
 * bounded per file (RLIMIT_FSIZE) only, as is everything at contained. */
static bool disk_holds(const struct sandbox_plan *plan) {
  return workspace_inodes(plan) != LIMIT_MECH_NONE && plan->os->grants.n_rw_grants == 0;
}

/* Which mechanism enforces each limit, given which cgroups exist. */
static void set_limits(const struct sandbox_plan *plan, const struct cgroup_avail *cg,
                       struct job_result *res) {
  bool iso = plan->level == SANDBOX_LEVEL_ISOLATED;
  res->lim_memory = cg->memory ? LIMIT_MECH_CGROUP : LIMIT_MECH_RLIMIT;
  res->lim_processes = cg->pids ? LIMIT_MECH_CGROUP : LIMIT_MECH_RLIMIT;
  res->lim_cpu = cg->cpu ? LIMIT_MECH_CGROUP : LIMIT_MECH_RLIMIT;
  res->lim_time = iso ? LIMIT_MECH_PID_NAMESPACE : cg->pids ? LIMIT_MECH_CGROUP : LIMIT_MECH_PGROUP;
  res->lim_disk = disk_holds(plan) ? LIMIT_MECH_TMPFS : LIMIT_MECH_NONE;
  bool any = cg->memory || cg->pids || cg->cpu;
  snprintf(res->mechanism, sizeof(res->mechanism), "%sseccomp%s+rlimit%s", iso ? "bwrap+" : "",
           any ? "+cgroup" : "", (!iso && !cg->pids) ? "+pgroup" : "");
}

/* Which limits hold for the job's whole tree (true) rather than per
 * process or per file (false). RLIMIT_NPROC counts every process of the
 * uid, so it bounds the tree too. */
static json_t *tree_json(const struct sandbox_plan *plan, const struct cgroup_avail *cg) {
  return json_pack("{s:b, s:b, s:b, s:b, s:b, s:b}", "memory", cg->memory, "processes", true, "cpu",
                   cg->cpu, "time", true, "disk", disk_holds(plan), "inodes",
                   workspace_inodes(plan) != LIMIT_MECH_NONE);
}

/* What bounds each writable place of the job, in the result's words:
 * the workspace tmpfs's bytes and inodes, and the writable grants. */
static json_t *disk_json(const struct sandbox_plan *plan) {
  bool iso = plan->level == SANDBOX_LEVEL_ISOLATED;
  enum limit_mech inodes = workspace_inodes(plan);
  json_t *bound =
      inodes == LIMIT_MECH_TMPFS
          ? json_integer((json_int_t)plan->job->manifest->disk_mb * BWRAP_WORKSPACE_INODES_PER_MB)
          : json_null();
  size_t rw = plan->os->grants.n_rw_grants;
  return json_pack("{s:s, s:s, s:s, s:o, s:i, s:s}", "workspace_bytes",
                   limit_mech_name(iso ? LIMIT_MECH_TMPFS : LIMIT_MECH_NONE), "workspace_inodes",
                   limit_mech_name(inodes), "workspace_mounted_by",
                   !iso                          ? "none"
                   : plan->os->ns_target         ? "agent-userns"
                   : plan->os->workspace_fd >= 0 ? "agent"
                                                 : "bwrap",
                   "inode_bound", bound, "writable_grants", (int)rw, "writable_grants_bytes",
                   rw ? limit_mech_name(LIMIT_MECH_RLIMIT) : "none");
}

json_t *sandbox_os_plan_explain(const struct sandbox_plan *plan, struct job_result *limits) {
  const struct sandbox_os_plan *os = plan->os;
  set_limits(plan, &os->expect_cgroup, limits);
  json_t *o = json_object();
  json_object_set_new(o, "seccomp", seccomp_job_rules_json(plan->net));
  json_object_set_new(o, "limits_for_tree", tree_json(plan, &os->expect_cgroup));
  json_object_set_new(o, "disk_for_tree", disk_json(plan));
  json_object_set_new(
      o, "limits_note",
      json_string("cgroup where the agent's uid may create one at run time (root, or a "
                  "subtree delegated to it), per-process rlimit otherwise; the result "
                  "says which was used. disk holds for the tree only when the workspace "
                  "tmpfs (bounded in bytes and in inodes) is the only writable place; a "
                  "writable grant is bounded per file (RLIMIT_FSIZE) only"));
  json_object_set_new(o, "job_uid", json_integer(plan->probe->os->user.u.uid));
  const char *join = cgroup_join_method();
  json_object_set_new(o, "cgroup_join", join ? json_string(join) : json_null());
  json_object_set_new(o, "filesystem", grants_explain_json(&os->grants));
  return o;
}

/* Top-level pids of the jobs this process runs now (jobs run on several
 * threads): the orphan reaper must not take another job's child. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t live_pids[256];
static size_t n_live;

static void live_remove(pid_t pid) {
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < n_live; i++)
    if (live_pids[i] == pid) {
      live_pids[i] = live_pids[--n_live];
      break;
    }
  pthread_mutex_unlock(&live_lock);
}

/* Wait (at most a second) until each of pids has exited, reaping those
 * that are our children by then. */
static void wait_gone(pid_t *pids, size_t n) {
  for (int round = 0; round < 500; round++) {
    bool any = false;
    for (size_t i = 0; i < n; i++) {
      if (pids[i] <= 0)
        continue;
      if (waitpid(pids[i], NULL, WNOHANG) == pids[i] || kill(pids[i], 0) < 0)
        pids[i] = 0;
      else
        any = true;
    }
    if (!any)
      return;
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* Reap the zombies re-parented to us (we are a subreaper) that are no
 * job's own child: bwrap's inits orphaned by a kill, a contained job's
 * daemons. Under a PID 1 that does not reap they would pile up. */
static void reap_orphans(void) {
  pid_t z[256];
  size_t n = procs_zombie_children(getpid(), z, sizeof(z) / sizeof(z[0]));
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < n && i < sizeof(z) / sizeof(z[0]); i++) {
    bool live = false;
    for (size_t k = 0; k < n_live && !live; k++)
      live = live_pids[k] == z[i];
    if (!live)
      (void)waitpid(z[i], NULL, WNOHANG);
  }
  pthread_mutex_unlock(&live_lock);
}

/* ---- running ---- */

/* New hidden entries and outward symlinks the job left in writable grants
 * are moved aside; the first ones are named on the job's stderr, the rest
 * counted, so the note stays bounded (docs/SECURITY.md, "New hidden
 * entries"). */
static void report_quarantine(const struct grant_set *g, const char *job_id, struct job_result *res,
                              size_t cap) {
  struct grants_quarantine_report rep;
  grants_quarantine_report_init(&rep);
  int r = grants_quarantine_new(g, job_id, &rep);
  char line[GRANTS_QUARANTINE_NAME_CHARS + 4 * NAME_MAX];
  if (r < 0) {
    int n = snprintf(line, sizeof(line),
                     "cordon: the quarantine could not run (%s): writable grants are returned as "
                     "they are; check them before running tools there\n",
                     strerror(-r));
    if (n > 0)
      result_buf_append(&res->err, (const uint8_t *)line, (size_t)n, cap);
  }
  for (size_t i = 0; i < rep.named.n; i++) {
    int n = snprintf(line, sizeof(line), "cordon: %s\n", rep.named.v[i]);
    if (n >= (int)sizeof(line)) { /* cut, still one line */
      n = (int)sizeof(line) - 1;
      line[n - 1] = '\n';
    }
    if (n > 0)
      result_buf_append(&res->err, (const uint8_t *)line, (size_t)n, cap);
  }
  size_t all = rep.n_hidden + rep.n_links + rep.n_unwalked;
  if (all > rep.named.n || rep.names_lost) {
    int n = snprintf(line, sizeof(line),
                     "cordon: in all %zu new hidden entries, %zu new outward symlinks and %zu "
                     "unwalked directories moved aside (.cordon-quarantined-<job id>-<nonce>)\n",
                     rep.n_hidden, rep.n_links, rep.n_unwalked);
    if (n > 0)
      result_buf_append(&res->err, (const uint8_t *)line, (size_t)n, cap);
  }
  if (rep.n_failed > 0) {
    int n = snprintf(line, sizeof(line),
                     "cordon: %zu places in writable grants could be neither checked nor moved "
                     "aside: the grant is returned as it is; check it before running tools there\n",
                     rep.n_failed);
    if (n > 0)
      result_buf_append(&res->err, (const uint8_t *)line, (size_t)n, cap);
  }
  grants_quarantine_report_release(&rep);
}

/* How one start of the job's first process ended. */
struct start_end {
  int status;       /* its wait status */
  bool cpu_out;     /* killed for the tree's CPU time */
  bool not_started; /* isolated: bwrap ended by itself and the entry never started */
  size_t err_from;  /* where this start's stderr begins in res->err */
};

/* How long the end of a job waits for its pid namespace to be empty
 * after the init's SIGKILL: the kernel takes every process down before
 * the init reports its exit; a process stuck in the kernel (a hung
 * mount) can hold that up. */
#define INIT_EXIT_WAIT_MS 5000

/* The init of an isolated job's pid namespace (bwrap's pid 1, which runs
 * as the job's uid), held by a pidfd from the moment bwrap says which
 * process it is: its SIGKILL ends the whole namespace, whatever the job
 * did to the init (docs/SECURITY.md, "The job's init"). */
struct job_init {
  int fd;            /* its pidfd, or -1 */
  pid_t pid;         /* from bwrap's report; 0 until then, -1 none usable */
  char status[4096]; /* what bwrap wrote on its --json-status-fd so far */
  size_t len;
  bool ended; /* the pipe reached its end (or the buffer is full) */
};

/* Take what bwrap has written on its status pipe (non-blocking) so far. */
static void status_take(struct job_init *ji, int status_fd) {
  while (status_fd >= 0 && ji->len < sizeof(ji->status)) {
    ssize_t n = read(status_fd, ji->status + ji->len, sizeof(ji->status) - ji->len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0)
      ji->ended = true;
    if (n <= 0)
      break;
    ji->len += (size_t)n;
  }
  if (ji->len == sizeof(ji->status))
    ji->ended = true;
}

/* Is pid, now, the init of a pid namespace below ours whose parent is
 * bwrap (parent) or, bwrap gone, us (a subreaper)? Its /proc status:
 * PPid, and NSpid's last field 1 (pid 1 of its own namespace). */
static bool is_job_init(pid_t pid, pid_t parent) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return false;
  long ppid = -1;
  int fields = 0;
  const char *last = NULL;
  char nspid[256] = "";
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "PPid:", 5) == 0)
      ppid = strtol(line + 5, NULL, 10);
    else if (strncmp(line, "NSpid:", 6) == 0)
      snprintf(nspid, sizeof(nspid), "%s", line + 6);
  }
  fclose(f);
  for (char *save = NULL, *t = strtok_r(nspid, " \t\n", &save); t;
       t = strtok_r(NULL, " \t\n", &save)) {
    fields++;
    last = t;
  }
  return (ppid == parent || ppid == getpid()) && fields >= 2 && strcmp(last, "1") == 0;
}

/* Read bwrap's report and, once it names the init, hold the init by a
 * pidfd (and hand a copy to the agent's reaper). bwrap is our child,
 * not yet reaped, so its pid names it. */
static void init_track(struct job_init *ji, int status_fd, pid_t bwrap) {
  status_take(ji, status_fd);
  if (ji->pid != 0)
    return;
  pid_t pid = bwrap_status_child_pid(ji->status, ji->len);
  if (pid <= 0)
    return;
  ji->pid = -1;
  int fd = pidfd_linux_open(pid);
  if (fd < 0)
    return; /* gone already: nothing of it to end */
  /* the pidfd names one process; that it is the init is checked after it
   * was opened, and the process is then still alive, so the check was of
   * that process and not of one that reused its pid */
  if (!is_job_init(pid, bwrap) || pidfd_linux_signal(fd, 0) < 0) {
    close(fd);
    return;
  }
  ji->fd = fd;
  ji->pid = pid;
  reaper_linux_watch(fd);
}

/* SIGKILL the init, which takes its namespace down, and wait (bounded)
 * until it and so every process of the namespace is gone. true when the
 * init was still alive to be killed. */
static bool init_end(struct job_init *ji, bool *out_gone) {
  *out_gone = true;
  if (ji->fd < 0)
    return false;
  bool alive = pidfd_linux_signal(ji->fd, SIGKILL) == 0;
  *out_gone = pidfd_linux_wait_exit(ji->fd, INIT_EXIT_WAIT_MS);
  return alive;
}

static void stderr_note(const struct sandbox_job *job, struct job_result *res, size_t cap,
                        const char *note);

/* Start the job's first process once (bwrap, or the entry itself) and
 * supervise it to its end; deadline and CPU time count from start. 0, or a
 * CORDON_E_* code (nothing started) or a negated errno. */
static int start_once(struct sandbox_plan *plan, struct job_result *res, struct cgroup_job *cg,
                      const struct launch_rlimit *rl, size_t nrl, int64_t start,
                      struct start_end *end) {
  const struct manifest *m = plan->job->manifest;
  const struct sandbox_os_plan *os = plan->os;
  const struct posix_job_user_probe *user = &plan->probe->os->user;
  bool iso = plan->level == SANDBOX_LEVEL_ISOLATED;
  int r;
  int pidfd = -1;
  int status_pipe[2] = {-1, -1};
  struct job_init ji = {.fd = -1};
  pid_t pid = -1;
  size_t nkeep = 0;
  int *keep = NULL;
  struct posix_output out;
  struct strv argv;
  strv_init(&argv);
  *end = (struct start_end){.err_from = res->err.len};

  r = posix_output_open(&out, res, (size_t)m->output_kb * 1024, plan->job);
  if (r < 0)
    return job_result_fail(res, CORDON_E_SPAWN_FAILED, "pipe: %s", strerror(-r));

  if (iso) {
    /* a status pipe of this start's own: its report says whether the
     * entry started (bwrap.h) */
    if ((r = launch_cloexec_pipe(status_pipe)) < 0) {
      r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "pipe: %s", strerror(-r));
      goto out;
    }
    fcntl(status_pipe[0], F_SETFL, O_NONBLOCK);
    /* bwrap reads the filter from the memfd's offset, which a start
     * before this one left at its end */
    if (lseek(os->seccomp_fd, 0, SEEK_SET) < 0) {
      r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "seccomp filter: %s", strerror(errno));
      goto out;
    }
    keep = malloc((4 + os->grants.n_fds) * sizeof(int));
    if (!keep || (r = bwrap_argv_with_status_fd(&plan->argv, status_pipe[1], &argv)) < 0) {
      r = -ENOMEM;
      goto out;
    }
    keep[nkeep++] = plan->job->package_dirfd;
    keep[nkeep++] = os->seccomp_fd;
    keep[nkeep++] = status_pipe[1];
    if (os->workspace_fd >= 0)
      keep[nkeep++] = os->workspace_fd;
    if (os->grants.n_fds) /* fds is NULL without grants */
      memcpy(keep + nkeep, os->grants.fds, os->grants.n_fds * sizeof(int));
    nkeep += os->grants.n_fds;
  }
  int cgfds[3];
  size_t ncg = 0;
  for (int i = 0; i < 3; i++)
    if (cg->procs_fd[i] >= 0)
      cgfds[ncg++] = cg->procs_fd[i];

  static char *const empty_env[] = {NULL};
  struct launch_spec spec = {
      .path = plan->argv.v[0],
      .argv = iso ? argv.v : plan->argv.v,
      .envp = iso ? empty_env : plan->envp.v,
      .stdout_fd = out.wr[0],
      .stderr_fd = out.wr[1],
      .keep_fds = keep,
      .n_keep = nkeep,
      .cgroup_procs_fds = cgfds,
      .n_cgroup = ncg,
      .into_cgroup = cg->v2_dir_fd >= 0,
      .cgroup_dir_fd = cg->v2_dir_fd,
      .rlimits = rl,
      .n_rlimits = nrl,
      .drop_uid = user->is_root,
      .uid = user->u.uid,
      .gid = user->u.gid,
      .no_new_privs = true,
      .parent_death_signal = SIGKILL,
      .cwd = iso ? "/" : plan->job->package_path,
      .seccomp = iso ? NULL : os->prog,
      .ns_tmpfs = iso && os->ns_target ? &os->ns_tmpfs : NULL,
  };
  pthread_mutex_lock(&live_lock); /* the reaper of another job must not take it */
  r = launch_spawn(&spec, &pid);
  if (r == 0 && n_live < sizeof(live_pids) / sizeof(live_pids[0]))
    live_pids[n_live++] = pid;
  pthread_mutex_unlock(&live_lock);
  posix_output_close_writers(&out);
  if (status_pipe[1] >= 0) { /* bwrap's copy is the only writer now */
    close(status_pipe[1]);
    status_pipe[1] = -1;
  }
  if (r < 0) {
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "cannot start %s: %s", spec.path, strerror(-r));
    goto out;
  }
  res->ran = true;
  pidfd = pidfd_linux_open(pid);

  int64_t deadline = start + (int64_t)m->timeout_s * 1000;
  int64_t cpu_max_usec = (int64_t)m->cpu_s * 1000000;
  bool exited = false, cancelled = false, cpu_out = false;
  int status = 0;
  while (!exited) {
    struct pollfd pf[3];
    size_t n = 0;
    int i_pid = -1, i_cancel = -1;
    if (iso) /* bwrap names its init as soon as it has cloned it */
      init_track(&ji, status_pipe[0], pid);
    if (pidfd >= 0) {
      pf[n] = (struct pollfd){pidfd, POLLIN, 0};
      i_pid = (int)n++;
    }
    if (iso && ji.pid == 0 && !ji.ended)
      pf[n++] = (struct pollfd){status_pipe[0], POLLIN, 0};
    if (plan->job->cancel_fd >= 0) {
      pf[n] = (struct pollfd){plan->job->cancel_fd, POLLIN, 0};
      i_cancel = (int)n++;
    }
    int64_t left = deadline - core_mono_ms();
    if (left <= 0) {
      res->timed_out = true;
      break;
    }
    /* without a pidfd, poll in short steps and ask waitpid */
    int wait_ms = pidfd >= 0 ? (int)(left > 60000 ? 60000 : left) : (left > 20 ? 20 : (int)left);
    /* the tree's CPU time, read from its cgroup every 100 ms */
    if (cg->cpu_dir && wait_ms > 100)
      wait_ms = 100;
    if (cg->cpu_dir && cgroup_job_cpu_usec(cg) > cpu_max_usec) {
      cpu_out = true;
      break;
    }
    int k = posix_output_poll(&out, pf, n, wait_ms);
    if (k < 0 && k != -EINTR)
      break;
    if (k < 0)
      continue;
    if (i_cancel >= 0 && (pf[i_cancel].revents & (POLLIN | POLLHUP))) {
      cancelled = true;
      break;
    }
    if (pidfd < 0 || (i_pid >= 0 && (pf[i_pid].revents & POLLIN))) {
      if (iso) /* bwrap exited before its report was read: read it now */
        init_track(&ji, status_pipe[0], pid);
      if (waitpid(pid, &status, WNOHANG) == pid)
        exited = true;
    }
  }

  if (iso) /* the last chance to learn the init, bwrap not yet reaped */
    init_track(&ji, status_pipe[0], exited ? -1 : pid);
  bool ns_gone = true;
  if (!exited) {
    /* timeout, cancel or CPU: count what is left besides the entry, kill all */
    pid_t tree[64];
    size_t desc, n_tree = 0;
    if (iso) { /* below bwrap: its init and the entry, then the rest */
      desc = n_tree = procs_descendants(pid, tree, sizeof(tree) / sizeof(tree[0]));
      desc = desc > 0 ? desc - 1 : 0;
    } else { /* we are the subreaper: re-parented orphans are our children */
      desc = procs_descendants(getpid(), tree, 0);
      if (reaper_linux_pid() > 0 && desc > 0 && kill(reaper_linux_pid(), 0) == 0)
        desc--; /* the agent's reaper is no part of the job */
    }
    res->orphans_killed = desc > 1 ? (unsigned)(desc - 1) : 0;
    /* the init first: its SIGKILL takes the namespace down, whatever the
     * job did to the init (its parent-death signal is the job's to
     * clear); bwrap then */
    if (iso && init_end(&ji, &ns_gone))
      res->kill_scope = KILL_SCOPE_PID_NAMESPACE;
    kill(pid, SIGKILL);
    procs_kill_descendants(pid, 0);
    if (n_tree > sizeof(tree) / sizeof(tree[0]))
      n_tree = sizeof(tree) / sizeof(tree[0]);
    wait_gone(tree, n_tree);
    if (cgroup_job_kill(cg) > 0 && res->kill_scope == KILL_SCOPE_NONE)
      res->kill_scope = KILL_SCOPE_CGROUP;
    if (!iso) { /* one job per agent process in contained mode: see SECURITY.md */
      if (procs_kill_descendants(getpid(), reaper_linux_pid()) > 0 &&
          res->kill_scope == KILL_SCOPE_NONE)
        res->kill_scope = KILL_SCOPE_DESCENDANTS;
      if (res->kill_scope == KILL_SCOPE_NONE)
        res->kill_scope = cg->pids_dir ? KILL_SCOPE_CGROUP : KILL_SCOPE_DESCENDANTS;
    } else if (res->kill_scope == KILL_SCOPE_NONE) {
      res->kill_scope = KILL_SCOPE_PID_NAMESPACE; /* bwrap's death ended it */
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
      ;
    if (cancelled)
      job_result_fail(res, CORDON_E_CANCELLED, "the job was cancelled");
  } else if (iso) {
    /* bwrap has reported the entry's end; what the job left in its
     * namespace (the init's children) is counted and ended with the
     * init: the init's parent-death signal is not relied on. The tree of
     * an isolated job always ends with its namespace; whether anything
     * was left in it cannot be told for sure (bwrap's exit may have
     * ended the init, and the namespace with it, a moment before the
     * count), so kill_scope does not depend on the count. */
    size_t left_behind = ji.fd >= 0 ? procs_descendants(ji.pid, NULL, 0) : 0;
    init_end(&ji, &ns_gone);
    res->orphans_killed = (unsigned)left_behind;
    res->kill_scope = KILL_SCOPE_PID_NAMESPACE;
  } else {
    /* the entry is gone; whatever it left behind is killed and counted */
    size_t left_behind =
        cg->pids_dir ? cgroup_job_kill(cg) : procs_kill_descendants(getpid(), reaper_linux_pid());
    res->orphans_killed = (unsigned)left_behind;
    if (left_behind > 0)
      res->kill_scope = cg->pids_dir ? KILL_SCOPE_CGROUP : KILL_SCOPE_DESCENDANTS;
  }
  if (!ns_gone) {
    /* a process stuck in the kernel holds the namespace up: its cgroup
     * is killed too, and the result says so */
    cgroup_job_kill(cg);
    stderr_note(plan->job, res, (size_t)m->output_kb * 1024,
                "cordon: the job's pid namespace had not ended 5 s after its init was "
                "killed\n");
  }
  live_remove(pid);
  reap_orphans();
  res->wall_ms = (uint64_t)(core_mono_ms() - start);
  posix_output_finish(&out);
  end->status = status;
  end->cpu_out = cpu_out;
  /* bwrap ended by itself (not by a signal: an OOM kill of bwrap says
   * nothing about the entry) without reporting the entry's start */
  status_take(&ji, status_pipe[0]); /* its writers are gone */
  end->not_started =
      iso && exited && WIFEXITED(status) && !bwrap_status_entry_started(ji.status, ji.len);
  r = 0;
out:
  free(keep);
  strv_release(&argv);
  for (int i = 0; i < 2; i++)
    if (status_pipe[i] >= 0)
      close(status_pipe[i]);
  if (pidfd >= 0)
    close(pidfd);
  if (ji.fd >= 0)
    close(ji.fd);
  posix_output_release(&out);
  return r;
}

/* The workspace tmpfs a root agent mounts for an isolated job: sized in
 * bytes and in inodes (bwrap_workspace_tmpfs_options; bwrap has no inode
 * option), owned by the job user, on JOB_DIR/workspace, in a mount
 * namespace of the running thread's own that receives the host's mounts
 * and sends none: the host never sees it, and it dies with the agent
 * (nothing to sweep after a crash). bwrap, started from this thread,
 * copies that namespace and binds the tmpfs from os->workspace_fd. */
struct workspace_mount {
  int old_ns; /* the thread's mount namespace before, or -1 */
  char *path; /* the mount point */
  bool mounted;
};

static int workspace_mount_enter(const struct sandbox_plan *plan, struct workspace_mount *wm) {
  const struct posix_job_user_probe *user = &plan->probe->os->user;
  char opts[160];
  int r = bwrap_workspace_tmpfs_options(plan->job->manifest->disk_mb, user->u.uid, user->u.gid,
                                        opts, sizeof(opts));
  if (r < 0)
    return r;
  if (asprintf(&wm->path, "%s/workspace", plan->job->job_dir) < 0) {
    wm->path = NULL;
    return -ENOMEM;
  }
  if ((wm->old_ns = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC)) < 0)
    return -errno;
  /* per thread (it unshares the thread's fs_struct too); never let the
   * tmpfs propagate to the host's mount namespace */
  if (unshare(CLONE_NEWNS) < 0) {
    r = -errno;
    close(wm->old_ns);
    wm->old_ns = -1;
    return r;
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
    return -errno;
  if (mkdir(wm->path, 0700) < 0 && errno != EEXIST)
    return -errno;
  if (mount("cordon-workspace", wm->path, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
    return -errno;
  wm->mounted = true;
  int fd = open(wm->path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  r = dup3(fd, plan->os->workspace_fd, O_CLOEXEC) < 0 ? -errno : 0;
  close(fd);
  return r;
}

/* After the job (or a failed enter): the placeholder on the fd again, the
 * tmpfs unmounted, the thread back in its mount namespace, the mount point
 * removed. The tmpfs's memory is freed once bwrap's namespace is gone. */
static void workspace_mount_leave(const struct sandbox_plan *plan, struct workspace_mount *wm) {
  int ph = open("/dev/null", O_PATH | O_CLOEXEC);
  if (ph >= 0) {
    dup3(ph, plan->os->workspace_fd, O_CLOEXEC);
    close(ph);
  }
  if (wm->mounted)
    umount2(wm->path, MNT_DETACH);
  if (wm->old_ns >= 0) {
    setns(wm->old_ns, CLONE_NEWNS);
    close(wm->old_ns);
  }
  if (wm->path)
    rmdir(wm->path);
  free(wm->path);
  *wm = (struct workspace_mount){.old_ns = -1};
}

/* The last line this start wrote on stderr (bwrap's own, when the entry
 * never started), without its newline; "" when there is none. */
static void last_err_line(const struct job_result *res, size_t from, char *buf, size_t size) {
  const char *s = (const char *)res->err.data + from;
  size_t n = res->err.len > from ? res->err.len - from : 0;
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
    n--;
  size_t b = n;
  while (b && s[b - 1] != '\n')
    b--;
  n -= b;
  if (n > size - 1)
    n = size - 1;
  memcpy(buf, s + b, n);
  buf[n] = '\0';
}

static bool cancel_asked(const struct sandbox_job *job) {
  struct pollfd pf = {job->cancel_fd, POLLIN, 0};
  return job->cancel_fd >= 0 && poll(&pf, 1, 0) > 0 && (pf.revents & (POLLIN | POLLHUP));
}

/* A line of cordon's own on the job's stderr, live too (after bwrap's
 * line, which went out live as it was read). */
static void stderr_note(const struct sandbox_job *job, struct job_result *res, size_t cap,
                        const char *note) {
  size_t before = res->err.len;
  result_buf_append(&res->err, (const uint8_t *)note, strlen(note), cap);
  if (job->on_output && res->err.len > before)
    job->on_output(job->output_ctx, 1, before, res->err.data + before, res->err.len - before);
}

int sandbox_os_run(struct sandbox_plan *plan, struct job_result *res) {
  const struct manifest *m = plan->job->manifest;
  const struct sandbox_os_plan *os = plan->os;
  const struct posix_job_user_probe *user = &plan->probe->os->user;
  bool iso = plan->level == SANDBOX_LEVEL_ISOLATED;
  size_t cap = (size_t)m->output_kb * 1024;
  int r;
  struct cgroup_job cg;
  cgroup_job_init(&cg);
  struct workspace_mount wm = {.old_ns = -1};

  if (!iso && mkdir(os->workspace, 0700) == 0 && user->is_root &&
      chown(os->workspace, user->u.uid, user->u.gid) < 0) {
    return job_result_fail(res, CORDON_E_SPAWN_FAILED, "workspace: %s", strerror(errno));
  }

  /* bwrap's own two processes count against the process limit too */
  unsigned nproc = m->processes + (iso ? 2 : 0);
  if (cgroup_job_create(&cg, plan->policy->state_dir, (uint64_t)m->memory_mb << 20, nproc) < 0) {
    cgroup_job_release(&cg);
    return -ENOMEM;
  }
  struct cgroup_avail got = {cg.mem_dir != NULL, cg.pids_dir != NULL, cg.cpu_dir != NULL};
  set_limits(plan, &got, res);

  struct launch_rlimit rl[6];
  size_t nrl = 0;
  rl[nrl++] = (struct launch_rlimit){RLIMIT_CPU, {m->cpu_s, m->cpu_s + 1}};
  rl[nrl++] = (struct launch_rlimit){RLIMIT_CORE, {0, 0}};
  rl[nrl++] = (struct launch_rlimit){RLIMIT_NOFILE, {1024, 1024}};
  rl[nrl++] =
      (struct launch_rlimit){RLIMIT_FSIZE, {(rlim_t)m->disk_mb << 20, (rlim_t)m->disk_mb << 20}};
  if (!cg.mem_dir) {
    /* address space, not resident memory: the honest rlimit substitute */
    rlim_t as = ((rlim_t)m->memory_mb << 20) + (iso ? (64u << 20) : 0);
    rl[nrl++] = (struct launch_rlimit){RLIMIT_AS, {as, as}};
  }
  if (!cg.pids_dir) {
    /* RLIMIT_NPROC counts every thread of the job's uid (a per-user
     * agent's: the user's whole desktop, the agent too): the job gets its
     * allowance on top of what that uid runs now, as on macOS (a moment's
     * count: what else the uid starts or ends meanwhile moves it) */
    rlim_t np = (rlim_t)procs_count_uid(user->u.uid) + nproc;
    rl[nrl++] = (struct launch_rlimit){RLIMIT_NPROC, {np, np}};
  }

  /* always a subreaper: orphans of a contained job come back to us, so the
   * sweep finds them, and so do bwrap's inits when bwrap is killed, so
   * they are reaped even under a PID 1 that does not reap */
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  /* the mount point of the launcher's namespace (a per-user agent) */
  if (iso && os->ns_target && mkdir(os->ns_target, 0700) < 0 && errno != EEXIST) {
    r = -errno;
    job_result_not_run(res);
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "workspace: %s", strerror(-r));
    goto out;
  }
  if (iso && !os->ns_target && os->workspace_fd >= 0 &&
      (r = workspace_mount_enter(plan, &wm)) < 0) {
    job_result_not_run(res);
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "workspace tmpfs: %s", strerror(-r));
    goto out;
  }
  int64_t start = core_mono_ms();
  struct start_end end;
  r = start_once(plan, res, &cg, rl, nrl, start, &end);
  char line[256] = "";
  bool retried = false;
  if (r == 0 && end.not_started) {
    /* Nothing of the package ran and the sandbox is gone: a failure a
     * host file's rename can cause is tried once more, at once, within
     * the job's time (docs/SECURITY.md, "When bwrap cannot build the
     * sandbox"). */
    last_err_line(res, end.err_from, line, sizeof(line));
    if (bwrap_setup_error_transient(line) && !cancel_asked(plan->job) &&
        core_mono_ms() < start + (int64_t)m->timeout_s * 1000) {
      stderr_note(plan->job, res, cap,
                  "cordon: bwrap could not build the sandbox, the package had not started; "
                  "building it again\n");
      retried = true;
      r = start_once(plan, res, &cg, rl, nrl, start, &end);
    }
  }
  if (r < 0)
    goto out;
  if (end.not_started) {
    /* the sandbox was never built: no level, no limits, no output */
    last_err_line(res, end.err_from, line, sizeof(line));
    int code = WEXITSTATUS(end.status);
    job_result_not_run(res);
    if (line[0])
      r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "%s%s", line,
                          retried ? " (retried once)" : "");
    else
      r = job_result_fail(res, CORDON_E_SPAWN_FAILED,
                          "bwrap exited with status %d before the package started%s", code,
                          retried ? " (retried once)" : "");
    goto out;
  }
  if (iso) /* the job tree is dead: nothing it made can change any more */
    report_quarantine(&os->grants, plan->job->job_id, res, cap);
  /* bwrap reports a job killed by signal N as exit status 128+N */
  posix_exit_status(end.status, iso, res);
  if (end.cpu_out) { /* reported like RLIMIT_CPU's end: signal SIGXCPU */
    res->exited = false;
    res->signal = SIGXCPU;
  }
  res->oom_killed = cgroup_job_oom_killed(&cg);
  r = 0;
out:
  if (wm.old_ns >= 0 || wm.path)
    workspace_mount_leave(plan, &wm);
  if (iso && os->ns_target)
    rmdir(os->ns_target);
  cgroup_job_release(&cg);
  return r;
}

int sandbox_os_enter_user_cgroup(int argc, char *const *argv, const char **out_why) {
  return user_scope_enter(argc, argv, out_why);
}

int sandbox_os_sweep_leftovers(const char *state_dir) {
  return (int)cgroup_instance_sweep(state_dir);
}

int sandbox_os_reap_leftovers(const char *job_id) {
  /* bwrap's own --die-with-parent has a window during its setup in which
   * the sandbox can outlive a killed agent; the job's cgroups find it. */
  return (int)cgroup_job_reap(job_id);
}
