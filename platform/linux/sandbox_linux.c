/* The Linux sandbox: bwrap + seccomp (isolated), or cgroup/rlimits +
 * seccomp + tree kill (contained), always as a non-root job user. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "platform/linux/bwrap.h"
#include "platform/linux/cgroup.h"
#include "platform/linux/grants.h"
#include "platform/linux/launch.h"
#include "platform/linux/procs.h"
#include "platform/linux/seccomp.h"
#include "platform/sandbox.h"
#include "platform/posix/drain.h"
#include "platform/posix/job_user.h"
#include "platform/sandbox_common.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif

struct sandbox_probe {
  bool is_root;
  bool thorough;
  /* job user */
  bool user_ok;
  char user_error[160];
  uid_t uid;
  gid_t gid;
  char *user_name;
  char *home;
  /* bwrap */
  char *bwrap_path;
  bool bwrap_exists;
  char bwrap_version[64];
  bool bwrap_tried, bwrap_works;
  char bwrap_error[256];
  /* kernel */
  bool userns_ok;
  char userns_detail[160];
  bool seccomp_ok;
  int landlock_abi;
  enum sandbox_level best;
  const char *reason;
};

struct sandbox_plan {
  const struct sandbox_policy *policy;
  const struct sandbox_probe *probe;
  const struct sandbox_job *job;
  enum sandbox_level level;
  const char *reason;
  bool net; /* the job may use the network */
  struct strv argv, envp;
  int seccomp_fd;
  struct sock_fprog *prog;
  struct grant_set grants;
  char *workspace; /* contained mode: host path */
  bool expect_cgroup;
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
static int run_capture(const struct sandbox_probe *p, char *const *argv, char *out, size_t len,
                       int timeout_ms) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0)
    return -errno;
  char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
  struct launch_spec spec = {
      .path = argv[0],
      .argv = argv,
      .envp = envp,
      .stdout_fd = pfd[1],
      .stderr_fd = pfd[1],
      .drop_uid = p->is_root,
      .uid = p->uid,
      .gid = p->gid,
      .cwd = "/",
  };
  pid_t pid;
  int r = launch_spawn(&spec, &pid);
  close(pfd[1]);
  if (r < 0) {
    close(pfd[0]);
    return r;
  }
  size_t have = 0;
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    struct pollfd pf = {pfd[0], POLLIN, 0};
    int64_t left = deadline - now_ms();
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

int sandbox_probe_new(const struct sandbox_policy *policy, bool thorough,
                      struct sandbox_probe **out_probe) {
  struct sandbox_probe *p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  p->thorough = thorough;
  p->is_root = geteuid() == 0;
  p->bwrap_path = strdup(policy->bwrap_path ? policy->bwrap_path : "/usr/bin/bwrap");

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
    p->user_name = ju.name;
    p->home = ju.home;
  }
  if (!p->bwrap_path || (p->user_ok && (!p->user_name || !p->home))) {
    sandbox_probe_free(p);
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

  if (thorough && p->bwrap_exists && p->user_ok) {
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

  if (!p->bwrap_exists) {
    p->best = SANDBOX_LEVEL_CONTAINED;
    p->reason = "bwrap_unavailable";
  } else if (!p->userns_ok) {
    p->best = SANDBOX_LEVEL_CONTAINED;
    p->reason = "userns_denied";
  } else if (!p->seccomp_ok) {
    p->best = SANDBOX_LEVEL_CONTAINED;
    p->reason = "seccomp_unavailable";
  } else if (p->bwrap_tried && !p->bwrap_works) {
    p->best = SANDBOX_LEVEL_CONTAINED;
    p->reason = "bwrap_unavailable";
  } else {
    p->best = SANDBOX_LEVEL_ISOLATED;
    p->reason = NULL;
  }
  *out_probe = p;
  return 0;
}

void sandbox_probe_free(struct sandbox_probe *p) {
  if (!p)
    return;
  free(p->user_name);
  free(p->home);
  free(p->bwrap_path);
  free(p);
}

enum sandbox_level sandbox_probe_best(const struct sandbox_probe *p, const char **out_reason) {
  if (out_reason)
    *out_reason = p->reason;
  return p->best;
}

json_t *sandbox_probe_json(const struct sandbox_probe *p) {
  json_t *o = json_object();
  json_t *b = json_object();
  json_object_set_new(b, "path", json_string(p->bwrap_path));
  json_object_set_new(b, "present", json_boolean(p->bwrap_exists));
  json_object_set_new(b, "version",
                      p->bwrap_version[0] ? json_string(p->bwrap_version) : json_null());
  json_object_set_new(b, "trial", p->bwrap_tried ? json_boolean(p->bwrap_works) : json_null());
  json_object_set_new(b, "error", p->bwrap_error[0] ? json_string(p->bwrap_error) : json_null());
  json_object_set_new(o, "bwrap", b);
  json_t *u = json_object();
  json_object_set_new(u, "allowed", json_boolean(p->userns_ok));
  json_object_set_new(u, "detail", json_string(p->userns_detail));
  json_object_set_new(o, "userns", u);
  json_t *s = json_object();
  json_object_set_new(s, "available", json_boolean(p->seccomp_ok));
  json_object_set_new(o, "seccomp", s);
  json_t *l = json_object();
  json_object_set_new(l, "abi", json_integer(p->landlock_abi));
  json_object_set_new(l, "used", json_false());
  json_object_set_new(o, "landlock", l);
  json_object_set_new(o, "cgroups", cgroup_probe_json());
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

static bool cgroup_expected(const struct sandbox_probe *p) {
  return p->is_root; /* creating cgroups needs root here; run() reports reality */
}

int sandbox_plan_new(const struct sandbox_policy *policy, const struct sandbox_probe *probe,
                     const struct sandbox_job *job, struct job_result *result,
                     struct sandbox_plan **out_plan) {
  const struct manifest *m = job->manifest;
  result->requested = m->min_sandbox;
  const struct manifest_argv *entry = manifest_entry_for(m, MANIFEST_PLATFORM_LINUX);
  if (!entry)
    return job_result_fail(result, CORDON_E_PLATFORM_MISMATCH, "the package does not run on linux");
  if (!probe->user_ok)
    return job_result_fail(result, CORDON_E_JOB_USER_MISSING, "%s", probe->user_error);
  if (m->net && !policy->net_allowed)
    return job_result_fail(result, CORDON_E_CAPABILITY_DENIED,
                           "the package asks for the network; the device owner does not allow it");

  enum sandbox_level level = probe->best;
  const char *reason = probe->reason;
  if (level < m->min_sandbox || level < policy->lowest_level) {
    result->level = level;
    result->level_known = true;
    result->downgrade_reason = reason;
    return job_result_fail(
        result, CORDON_E_SANDBOX_UNAVAILABLE,
        "this device can give '%s' (%s); the %s requires '%s'", sandbox_level_name(level),
        reason ? reason : "no reason", level < m->min_sandbox ? "package" : "device owner",
        sandbox_level_name(level < m->min_sandbox ? m->min_sandbox : policy->lowest_level));
  }

  struct sandbox_plan *plan = calloc(1, sizeof(*plan));
  if (!plan)
    return -ENOMEM;
  plan->policy = policy;
  plan->probe = probe;
  plan->job = job;
  plan->level = level;
  plan->reason = reason;
  plan->net = m->net && policy->net_allowed;
  plan->seccomp_fd = -1;
  plan->expect_cgroup = cgroup_expected(probe);
  strv_init(&plan->argv);
  strv_init(&plan->envp);

  /* Grants are checked at every level: too broad is refused on every OS. */
  struct grant_user gu = {
      .home = probe->home, .switch_fsuid = probe->is_root, .uid = probe->uid, .gid = probe->gid};
  struct cordon_diag diag = {{0}};
  int r = grants_resolve(policy, &gu, m, &plan->grants, &diag);
  if (r < 0) {
    job_result_fail(result, r, "%s", diag.msg[0] ? diag.msg : cordon_err_message(r));
    goto out_fail;
  }

  if (level == SANDBOX_LEVEL_ISOLATED) {
    plan->seccomp_fd = seccomp_job_filter_fd(plan->net);
    if (plan->seccomp_fd < 0) {
      r = job_result_fail(result, CORDON_E_SPAWN_FAILED, "seccomp filter: %s",
                          strerror(-plan->seccomp_fd));
      goto out_fail;
    }
    struct bwrap_host host = {.bwrap_path = probe->bwrap_path};
    host.base = host_base(&host.n_base);
    grants_base_blinds(&host.blind_files, &host.n_blind_files, &host.blind_dirs,
                       &host.n_blind_dirs);
    struct bwrap_input in = {
        .m = m,
        .entry = entry,
        .args = job->args,
        .n_args = job->n_args,
        .home = probe->home,
        .user = probe->user_name,
        .package_fd = job->package_dirfd,
        .seccomp_fd = plan->seccomp_fd,
        .mounts = plan->grants.mounts,
        .n_mounts = plan->grants.n_mounts,
    };
    r = bwrap_argv_build(&host, &in, &plan->argv);
    if (r < 0)
      goto out_fail;
  } else {
    /* contained: the real paths; network cut by seccomp when not allowed */
    r = seccomp_job_filter_prog(plan->net, &plan->prog);
    if (r < 0) {
      job_result_fail(result, CORDON_E_SPAWN_FAILED, "seccomp filter: %s", strerror(-r));
      goto out_fail;
    }
    if (asprintf(&plan->workspace, "%s/workspace", job->job_dir) < 0) {
      plan->workspace = NULL;
      r = -ENOMEM;
      goto out_fail;
    }
    sandbox_direct_argv_env(m, entry, job->args, job->n_args, job->package_path, plan->workspace,
                            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                            probe->home, probe->user_name, &plan->argv, &plan->envp);
    r = plan->argv.err ? plan->argv.err : plan->envp.err;
    if (r < 0)
      goto out_fail;
  }
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
  if (plan->seccomp_fd >= 0)
    close(plan->seccomp_fd);
  seccomp_job_prog_free(plan->prog);
  grants_release(&plan->grants);
  free(plan->workspace);
  free(plan);
}

/* Which mechanism enforces each limit, given which cgroups exist. */
static void set_limits(const struct sandbox_plan *plan, bool mem_cg, bool pids_cg,
                       struct job_result *res) {
  bool iso = plan->level == SANDBOX_LEVEL_ISOLATED;
  res->lim_memory = mem_cg ? LIMIT_MECH_CGROUP : LIMIT_MECH_RLIMIT;
  res->lim_processes = pids_cg ? LIMIT_MECH_CGROUP : LIMIT_MECH_RLIMIT;
  res->lim_cpu = LIMIT_MECH_RLIMIT;
  res->lim_time = iso ? LIMIT_MECH_PID_NAMESPACE : pids_cg ? LIMIT_MECH_CGROUP : LIMIT_MECH_PGROUP;
  res->lim_disk = iso ? LIMIT_MECH_TMPFS : LIMIT_MECH_NONE;
  snprintf(res->mechanism, sizeof(res->mechanism), "%sseccomp%s+rlimit%s", iso ? "bwrap+" : "",
           (mem_cg || pids_cg) ? "+cgroup" : "", (!iso && !pids_cg) ? "+pgroup" : "");
}

json_t *sandbox_plan_explain(const struct sandbox_plan *plan) {
  const struct manifest *m = plan->job->manifest;
  struct job_result tmp;
  job_result_init(&tmp);
  set_limits(plan, plan->expect_cgroup, plan->expect_cgroup, &tmp);
  json_t *o = json_object();
  json_object_set_new(o, "level", json_string(sandbox_level_name(plan->level)));
  json_object_set_new(o, "downgrade_reason",
                      plan->reason ? json_string(plan->reason) : json_null());
  json_object_set_new(o, "requested", json_string(sandbox_level_name(m->min_sandbox)));
  json_object_set_new(o, "mechanism", json_string(tmp.mechanism));
  json_t *argv = json_array();
  for (size_t i = 0; i < plan->argv.n; i++)
    json_array_append_new(argv, json_string(plan->argv.v[i]));
  json_object_set_new(o, "argv", argv);
  if (plan->level != SANDBOX_LEVEL_ISOLATED) {
    json_t *env = json_array();
    for (size_t i = 0; i < plan->envp.n; i++)
      json_array_append_new(env, json_string(plan->envp.v[i]));
    json_object_set_new(o, "env", env);
  }
  json_object_set_new(o, "seccomp", seccomp_job_rules_json(plan->net));
  json_object_set_new(o, "net", json_boolean(plan->net));
  json_t *lim = sandbox_limits_json(m, &tmp);
  if (plan->expect_cgroup)
    json_object_set_new(o, "limits_note",
                        json_string("cgroup where the agent can create one at run time, "
                                    "rlimit otherwise; the result says which was used"));
  json_object_set_new(o, "limits", lim);
  json_object_set_new(o, "job_user", json_string(plan->probe->user_name));
  json_object_set_new(o, "job_uid", json_integer(plan->probe->uid));
  return o;
}

/* ---- running ---- */


int sandbox_run(struct sandbox_plan *plan, struct job_result *res) {
  const struct manifest *m = plan->job->manifest;
  const struct sandbox_probe *probe = plan->probe;
  bool iso = plan->level == SANDBOX_LEVEL_ISOLATED;
  size_t cap = (size_t)m->output_kb * 1024;
  int r;
  int out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
  int pidfd = -1;
  pid_t pid = -1;
  struct cgroup_job cg;
  cgroup_job_init(&cg);

  res->level = plan->level;
  res->level_known = true;
  res->downgrade_reason = plan->reason;
  res->requested = m->min_sandbox;
  res->out.data = malloc(cap ? cap : 1);
  res->err.data = malloc(cap ? cap : 1);
  if (!res->out.data || !res->err.data)
    return -ENOMEM;

  if (!iso && mkdir(plan->workspace, 0700) == 0 && probe->is_root &&
      chown(plan->workspace, probe->uid, probe->gid) < 0) {
    return job_result_fail(res, CORDON_E_SPAWN_FAILED, "workspace: %s", strerror(errno));
  }

  /* bwrap's own two processes count against the process limit too */
  unsigned nproc = m->processes + (iso ? 2 : 0);
  if (probe->is_root &&
      cgroup_job_create(&cg, plan->job->job_id, (uint64_t)m->memory_mb << 20, nproc) < 0)
    return -ENOMEM;
  set_limits(plan, cg.mem_dir != NULL, cg.pids_dir != NULL, res);

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
  if (!cg.pids_dir)
    rl[nrl++] = (struct launch_rlimit){RLIMIT_NPROC, {nproc, nproc}};

  if (pipe2(out_p, O_CLOEXEC) < 0 || pipe2(err_p, O_CLOEXEC) < 0) {
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "pipe: %s", strerror(errno));
    goto out;
  }
  fcntl(out_p[0], F_SETFL, O_NONBLOCK);
  fcntl(err_p[0], F_SETFL, O_NONBLOCK);

  int keep[8];
  size_t nkeep = 0;
  if (iso) {
    keep[nkeep++] = plan->job->package_dirfd;
    keep[nkeep++] = plan->seccomp_fd;
  }
  int *keep_all = keep;
  int *grown = NULL;
  if (iso && plan->grants.n_fds) {
    grown = malloc((nkeep + plan->grants.n_fds) * sizeof(int));
    if (!grown) {
      r = -ENOMEM;
      goto out;
    }
    memcpy(grown, keep, nkeep * sizeof(int));
    memcpy(grown + nkeep, plan->grants.fds, plan->grants.n_fds * sizeof(int));
    nkeep += plan->grants.n_fds;
    keep_all = grown;
  }
  int cgfds[2];
  size_t ncg = 0;
  for (int i = 0; i < 2; i++)
    if (cg.procs_fd[i] >= 0)
      cgfds[ncg++] = cg.procs_fd[i];

  static char *const empty_env[] = {NULL};
  struct launch_spec spec = {
      .path = plan->argv.v[0],
      .argv = plan->argv.v,
      .envp = iso ? empty_env : plan->envp.v,
      .stdout_fd = out_p[1],
      .stderr_fd = err_p[1],
      .keep_fds = keep_all,
      .n_keep = nkeep,
      .cgroup_procs_fds = cgfds,
      .n_cgroup = ncg,
      .rlimits = rl,
      .n_rlimits = nrl,
      .drop_uid = probe->is_root,
      .uid = probe->uid,
      .gid = probe->gid,
      .cwd = iso ? "/" : plan->job->package_path,
      .seccomp = iso ? NULL : plan->prog,
  };
  /* orphans of a contained job come back to us, so the sweep finds them */
  if (!iso)
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  int64_t start = now_ms();
  r = launch_spawn(&spec, &pid);
  free(grown);
  close(out_p[1]);
  close(err_p[1]);
  out_p[1] = err_p[1] = -1;
  if (r < 0) {
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "cannot start %s: %s", spec.path, strerror(-r));
    goto out;
  }
  res->ran = true;
  pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

  int64_t deadline = start + (int64_t)m->timeout_s * 1000;
  bool out_open = true, err_open = true, exited = false, cancelled = false;
  int status = 0;
  while (!exited) {
    struct pollfd pf[4];
    int n = 0, i_out = -1, i_err = -1, i_pid = -1, i_cancel = -1;
    if (out_open) {
      pf[n] = (struct pollfd){out_p[0], POLLIN, 0};
      i_out = n++;
    }
    if (err_open) {
      pf[n] = (struct pollfd){err_p[0], POLLIN, 0};
      i_err = n++;
    }
    if (pidfd >= 0) {
      pf[n] = (struct pollfd){pidfd, POLLIN, 0};
      i_pid = n++;
    }
    if (plan->job->cancel_fd >= 0) {
      pf[n] = (struct pollfd){plan->job->cancel_fd, POLLIN, 0};
      i_cancel = n++;
    }
    int64_t left = deadline - now_ms();
    if (left <= 0) {
      res->timed_out = true;
      break;
    }
    /* without a pidfd, poll in short steps and ask waitpid */
    int wait_ms = pidfd >= 0 ? (int)(left > 60000 ? 60000 : left) : (left > 20 ? 20 : (int)left);
    int k = poll(pf, (nfds_t)n, wait_ms);
    if (k < 0 && errno != EINTR)
      break;
    if (i_out >= 0 && (pf[i_out].revents & (POLLIN | POLLHUP | POLLERR)))
      out_open = posix_drain_fd(out_p[0], &res->out, cap);
    if (i_err >= 0 && (pf[i_err].revents & (POLLIN | POLLHUP | POLLERR)))
      err_open = posix_drain_fd(err_p[0], &res->err, cap);
    if (i_cancel >= 0 && (pf[i_cancel].revents & (POLLIN | POLLHUP))) {
      cancelled = true;
      break;
    }
    if (pidfd < 0 || (i_pid >= 0 && (pf[i_pid].revents & POLLIN))) {
      if (waitpid(pid, &status, WNOHANG) == pid)
        exited = true;
    }
  }

  if (!exited) {
    /* timeout or cancel: count what is left besides the entry, kill all */
    pid_t tmp[1];
    size_t desc;
    if (iso) /* below bwrap: its init and the entry, then the rest */
      desc = procs_descendants(pid, tmp, 0) - 1;
    else /* we are the subreaper: re-parented orphans are our children */
      desc = procs_descendants(getpid(), tmp, 0);
    res->orphans_killed = desc > 1 ? (unsigned)(desc - 1) : 0;
    kill(pid, SIGKILL);
    procs_kill_descendants(pid);
    cgroup_job_kill(&cg);
    if (!iso) /* one job per agent process in contained mode: see SECURITY.md */
      procs_kill_descendants(getpid());
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
      ;
    if (cancelled)
      job_result_fail(res, CORDON_E_CANCELLED, "the job was cancelled");
  } else if (!iso) {
    /* the entry is gone; whatever it left behind is killed and counted */
    size_t left_behind = cg.pids_dir ? cgroup_job_kill(&cg) : procs_kill_descendants(getpid());
    res->orphans_killed = (unsigned)left_behind;
  }
  /* reap re-parented orphans (contained mode makes us their subreaper) */
  while (!iso && waitpid(-1, NULL, WNOHANG) > 0)
    ;
  res->wall_ms = (uint64_t)(now_ms() - start);

  /* the rest of the output: the writers are dead, so EOF comes quickly */
  int64_t drain_deadline = now_ms() + 2000;
  while ((out_open || err_open) && now_ms() < drain_deadline) {
    struct pollfd pf[2];
    int n = 0;
    if (out_open)
      pf[n++] = (struct pollfd){out_p[0], POLLIN, 0};
    if (err_open)
      pf[n++] = (struct pollfd){err_p[0], POLLIN, 0};
    if (poll(pf, (nfds_t)n, 100) <= 0)
      continue;
    if (out_open)
      out_open = posix_drain_fd(out_p[0], &res->out, cap);
    if (err_open)
      err_open = posix_drain_fd(err_p[0], &res->err, cap);
  }

  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    /* bwrap reports a job killed by signal N as exit status 128+N */
    if (iso && code > 128 && code < 128 + 65) {
      res->exited = false;
      res->signal = code - 128;
    } else {
      res->exited = true;
      res->exit_code = code;
    }
  } else if (WIFSIGNALED(status)) {
    res->exited = false;
    res->signal = WTERMSIG(status);
  }
  res->oom_killed = cgroup_job_oom_killed(&cg);
  r = 0;
out:
  if (pidfd >= 0)
    close(pidfd);
  for (int i = 0; i < 2; i++) {
    if (out_p[i] >= 0)
      close(out_p[i]);
    if (err_p[i] >= 0)
      close(err_p[i]);
  }
  cgroup_job_release(&cg);
  return r;
}

int sandbox_reap_leftovers(const char *job_id) {
  /* bwrap's own --die-with-parent has a window during its setup in which
   * the sandbox can outlive a killed agent; the job's cgroups find it. */
  return (int)cgroup_job_reap(job_id);
}
