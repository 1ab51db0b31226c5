/* The job cgroups of `cordon-agent run` (platform/linux/cgroup.h), with
 * the real agent against the scripted server, real isolated jobs and real
 * cgroups (root only): a job's cgroup lives below the agent instance's own
 * parent and comes from the pool made ahead; after kill -9 of the agent
 * during a job, the restarted agent leaves no job cgroup and no process of
 * it, a surviving reaper included; the sweep leaves another instance's
 * jobs and a running `exec` of its own config alone; the pooled cgroups
 * still cap a fork bomb and kill an allocation over memory_mb. */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <jansson.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include "../platform/sbx_harness.h"
#include "platform/linux/cgroup.h"
#include "scripted_server.h"

struct seen_result {
  uint8_t id[16];
  int n;
  char code[64];
  bool exited, signalled, oom;
  long exit_code, signal;
  char out[512];
};

static struct {
  int running;
  struct seen_result res[8];
  int n_res;
  char base[3][4096]; /* the v1 memory, pids, cpuacct bases (or [0]: v2) */
  size_t n_base;
  char inst[CGROUP_INSTANCE_NAME_SIZE];
  pid_t extra[4];    /* other processes the test started */
  bool deleg;        /* the agent runs as u in a delegated subtree */
  struct sbx_user u; /* a throw-away account of the test (deleg) */
  uid_t uid;
  gid_t gid;
  const char *job_user; /* who the jobs run as */
} T;

static bool on_msg(struct net_conn *c, const struct msg *m) {
  (void)c;
  if (m->type == MSG_RUNNING)
    T.running++;
  if (m->type != MSG_RESULT)
    return false;
  struct seen_result *r = NULL;
  for (int i = 0; i < T.n_res && !r; i++)
    if (memcmp(T.res[i].id, m->result.job_id, 16) == 0)
      r = &T.res[i];
  if (!r) {
    cr_assert_lt(T.n_res, 8);
    r = &T.res[T.n_res++];
    memset(r, 0, sizeof(*r));
    memcpy(r->id, m->result.job_id, 16);
  }
  r->n++;
  snprintf(r->code, sizeof(r->code), "%s", m->result.has_error ? m->result.error.code : "");
  r->exited = m->result.has_exit_code;
  r->exit_code = (long)m->result.exit_code;
  r->signalled = m->result.has_signal;
  r->signal = (long)m->result.signal;
  r->oom = m->result.has_oom_killed && m->result.oom_killed;
  snprintf(r->out, sizeof(r->out), "%.*s", (int)m->result.stdout_buf.len,
           (const char *)m->result.stdout_buf.data);
  return false;
}

static const uint8_t *job_id(int k) {
  static uint8_t ids[8][16];
  randombytes_buf(ids[k], 16);
  return ids[k];
}

static const uint8_t *want;
static bool have_result(void) {
  for (int i = 0; i < T.n_res; i++)
    if (memcmp(T.res[i].id, want, 16) == 0)
      return true;
  return false;
}
static struct seen_result *wait_result(const uint8_t *id, int ms) {
  want = id;
  cr_assert(spin(ms, have_result), "no result within %d ms; agent log:\n%s", ms, slurp(S.log));
  for (int i = 0; i < T.n_res; i++)
    if (memcmp(T.res[i].id, id, 16) == 0)
      return &T.res[i];
  return NULL;
}

static int want_running;
static bool running_n(void) {
  return T.running >= want_running;
}

/* Our cgroup in the v1 hierarchy whose controller list is exactly ctrl
 * (as mounted here: one controller each), or in v2 (ctrl ""). */
static bool own_cgroup(const char *ctrl, char *out, size_t len) {
  FILE *f = fopen("/proc/self/cgroup", "re");
  char line[4400], ctrls[256] = "", path[4096];
  bool found = false;
  while (f && !found && fgets(line, sizeof(line), f)) {
    ctrls[0] = '\0'; /* stays empty for v2's "0::/path" */
    if (sscanf(line, "%*d:%255[^:]:%4095s", ctrls, path) == 2 ||
        sscanf(line, "%*d::%4095s", path) == 1)
      found = strcmp(ctrls, ctrl) == 0;
  }
  if (found && snprintf(out, len, "%s", strcmp(path, "/") == 0 ? "" : path) >= (int)len)
    found = false;
  if (f)
    fclose(f);
  return found;
}

static void setup(void) {
  memset(&T, 0, sizeof(T));
  if (geteuid() != 0)
    cr_skip_test("needs root to make cgroups");
  static const char *const ctrls[] = {"memory", "pids", "cpuacct"};
  char own[2048];
  for (int i = 0; i < 3; i++) {
    char mnt[64];
    snprintf(mnt, sizeof(mnt), "/sys/fs/cgroup/%s", ctrls[i]);
    if (access(mnt, F_OK) == 0 && own_cgroup(ctrls[i], own, sizeof(own)))
      snprintf(T.base[T.n_base++], sizeof(T.base[0]), "%s%s", mnt, own);
  }
  if (T.n_base == 0 && access("/sys/fs/cgroup/cgroup.subtree_control", F_OK) == 0 &&
      own_cgroup("", own, sizeof(own)))
    snprintf(T.base[T.n_base++], sizeof(T.base[0]), "/sys/fs/cgroup%s", own);
  if (T.n_base == 0)
    cr_skip_test("no cgroup hierarchy with memory and pids here");
  ss_setup("cordon-cg", on_msg);
  cgroup_instance_name(S.cfg, 0, T.inst);
  T.job_user = "cordon-job";
}

/* The per-user agent: a throw-away account (not the shared cordon-test,
 * whose processes the sandbox tests running at once count in their
 * RLIMIT_NPROC) inside a subtree delegated to it, as systemd's
 * Delegate=yes gives a user unit; T.base becomes that subtree. On v1: a
 * directory chowned to it in each hierarchy. On v2: one directory whose
 * parent enables memory and pids for it, the directory and the files
 * the kernel names in /sys/kernel/cgroup/delegate (cgroup.procs,
 * cgroup.subtree_control...) chowned to it; its own memory.max and
 * pids.max stay root's. */
static void setup_deleg(void) {
  setup();
  bool v1 = strstr(T.base[0], "/sys/fs/cgroup/memory") == T.base[0] && T.n_base == 3;
  if (!v1 && T.n_base == 1) { /* v2: the parent's controllers for its children */
    char ctl[4200];
    snprintf(ctl, sizeof(ctl), "%s/cgroup.subtree_control", T.base[0]);
    FILE *f = fopen(ctl, "we");
    bool ok = f && fprintf(f, "+memory +pids") > 0;
    if (f && fclose(f) != 0)
      ok = false;
    if (!ok) /* a cgroup that holds processes other than the root */
      cr_skip_test("cannot enable memory and pids below %s: %s", T.base[0], strerror(errno));
  } else if (!v1) {
    cr_skip_test("no v1 memory, pids and cpuacct hierarchies or v2 here");
  }
  sbx_user_make(&T.u, "cdncg");
  T.deleg = true;
  T.uid = T.u.uid;
  T.gid = T.u.gid;
  T.job_user = T.u.name; /* a per-user agent's jobs run as itself */
  for (size_t i = 0; i < T.n_base; i++) {
    size_t n = strlen(T.base[i]);
    snprintf(T.base[i] + n, sizeof(T.base[i]) - n, "/cordon-cg-deleg-%ld", (long)getpid());
    cr_assert_eq(mkdir(T.base[i], 0755), 0, "%s", T.base[i]);
  }
  static char cmd[13000];
  if (v1)
    snprintf(cmd, sizeof(cmd), "chown -R %s: %.200s %.4096s %.4096s %.4096s", T.u.name, S.dir,
             T.base[0], T.base[1], T.base[2]);
  else
    snprintf(cmd, sizeof(cmd),
             "chown -R %1$s: %2$.200s && cd %3$.4096s && "
             "chown %1$s: . cgroup.procs cgroup.subtree_control cgroup.threads && "
             "for f in $(cat /sys/kernel/cgroup/delegate 2>/dev/null); do "
             "[ ! -e \"$f\" ] || chown %1$s: \"$f\" || exit 1; done",
             T.u.name, S.dir, T.base[0]);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  cgroup_instance_name(S.cfg, T.uid, T.inst);
}

static void teardown(void) {
  for (size_t i = 0; i < sizeof(T.extra) / sizeof(T.extra[0]); i++)
    if (T.extra[i] > 0) {
      kill(T.extra[i], SIGKILL);
      waitpid(T.extra[i], NULL, 0);
    }
  if (S.agent > 0) { /* a clean stop removes the pool and the instance dirs */
    kill(S.agent, SIGTERM);
    waitpid(S.agent, NULL, 0);
    S.agent = 0;
  }
  for (size_t i = 0; T.deleg && i < T.n_base; i++) {
    char cmd[4400];
    snprintf(cmd, sizeof(cmd),
             "find %.4096s -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null", T.base[i]);
    (void)!system(cmd);
    rmdir(T.base[i]);
  }
  ss_teardown();
  sbx_user_drop(&T.u);
}

/* Move this process into dir's cgroup. */
static bool join_cgroup(const char *dir) {
  char path[4200];
  snprintf(path, sizeof(path), "%.4096s/cgroup.procs", dir);
  FILE *f = fopen(path, "we");
  bool ok = f && fprintf(f, "0\n") > 0;
  return (f && fclose(f) == 0) && ok;
}

/* `cordon-agent run` as root, or in the delegated mode as T.u
 * moved into its subtree first while still root (as systemd would). On
 * v2 an earlier agent there enabled controllers for the subtree's
 * children, after which no process may join the subtree's top (EBUSY):
 * the restarted agent starts in the leaf that one moved itself into, as
 * systemd's DelegateSubgroup= does (a systemd without it removes a
 * stopped unit's cgroup and makes a fresh one). */
static pid_t start(void) {
  if (!T.deleg)
    return START("--drain-timeout", "5");
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int fd = open(S.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 2);
    for (size_t i = 0; i < T.n_base; i++) {
      char leaf[4200];
      snprintf(leaf, sizeof(leaf), "%.4096s/" CGROUP_AGENT_LEAF, T.base[i]);
      if (!join_cgroup(T.base[i]) && !(errno == EBUSY && join_cgroup(leaf)))
        _exit(126);
    }
    if (setgroups(0, NULL) < 0 || setgid(T.gid) < 0 || setuid(T.uid) < 0)
      _exit(125);
    setenv("HOME", T.u.home, 1);
    execl(AGENT, AGENT, "--config", S.cfg, "run", "--drain-timeout", "5", (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* The instance directory in hierarchy i. */
static const char *idir(size_t i, const char *inst) {
  static char p[4200];
  snprintf(p, sizeof(p), "%s/%s", T.base[i], inst);
  return p;
}

/* The pids in dir's cgroup.procs (at most max). */
static size_t procs_of(const char *dir, pid_t *out, size_t max) {
  char path[8192]; /* dir is at most 4800 bytes: every path fits */
  snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
  FILE *f = fopen(path, "re");
  size_t n = 0;
  long pid;
  while (f && n < max && fscanf(f, "%ld", &pid) == 1)
    out[n++] = (pid_t)pid;
  if (f)
    fclose(f);
  return n;
}

/* The job-* directories below the instance dir of hierarchy i: how many,
 * and how many hold processes (the name of the last such in busy). */
static size_t job_dirs(size_t i, const char *inst, size_t *n_busy, char busy[64]) {
  DIR *d = opendir(idir(i, inst));
  size_t n = 0, nb = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (strncmp(de->d_name, CGROUP_JOB_PREFIX, strlen(CGROUP_JOB_PREFIX)) != 0)
      continue;
    n++;
    char sub[4800];
    pid_t p[4];
    snprintf(sub, sizeof(sub), "%.4200s/%.255s", idir(i, inst), de->d_name);
    if (procs_of(sub, p, 4) > 0) {
      nb++;
      if (busy)
        snprintf(busy, 64, "%.63s", de->d_name);
    }
  }
  if (d)
    closedir(d);
  if (n_busy)
    *n_busy = nb;
  return n;
}

static bool disconnected(void) {
  return S.conn == NULL;
}

static bool gone(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return true;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')');
  return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* One job-* directory holds processes, in every hierarchy. */
static bool job_in_cgroups(void) {
  for (size_t i = 0; i < T.n_base; i++) {
    size_t busy;
    job_dirs(i, T.inst, &busy, NULL);
    if (busy != 1)
      return false;
  }
  return true;
}

static const struct pkg *nap_pkg(void) {
  static struct pkg p;
  static bool made;
  if (!made)
    p = make_package("nap",
                     "{\"name\":\"nap\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                     "sleep 30; echo finished\n");
  made = true;
  return &p;
}

/* The napping job's whole tree (bwrap, its init, the shell and sleep) is
 * in its job cgroup in every hierarchy. Until then the one process there
 * may be the launcher's child in mid-exec: it joins the job's cgroups as
 * root (only root may write there), then drops to the job user and execs
 * bwrap; and the running message comes before it even starts (dispatch
 * sends it as it queues the job). The sleep exists only once every
 * process before it has exec'd. */
static bool job_tree_in_cgroups(void) {
  for (size_t i = 0; i < T.n_base; i++) {
    size_t busy;
    char name[64] = "", dir[4400];
    job_dirs(i, T.inst, &busy, name);
    if (busy != 1)
      return false;
    snprintf(dir, sizeof(dir), "%s/%s", idir(i, T.inst), name);
    pid_t p[8];
    if (procs_of(dir, p, 8) < 4)
      return false;
  }
  return true;
}

static bool pool_full(void) {
  size_t busy;
  return job_dirs(0, T.inst, &busy, NULL) == CGROUP_POOL_SIZE && busy == 0;
}

Test(agent_cgroup, a_jobs_cgroup_is_a_pooled_one_below_the_instance_parent, .init = setup,
     .fini = teardown, .timeout = 90) {
  S.agent = start();
  cr_assert(spin(10000, connected));
  cr_assert(spin(5000, pool_full), "the pool is made at start: %zu dirs",
            job_dirs(0, T.inst, NULL, NULL));
  send_job_id(nap_pkg(), job_id(0));
  want_running = 1;
  cr_assert(spin(20000, running_n), "the job did not start:\n%s", slurp(S.log));
  cr_assert(spin(20000, job_tree_in_cgroups), "the job's tree joined its cgroups:\n%s",
            slurp(S.log));
  for (size_t i = 0; i < T.n_base; i++) {
    size_t busy;
    char name[64] = "";
    size_t n = job_dirs(i, T.inst, &busy, name);
    cr_assert_eq(busy, 1, "%s: one job cgroup holds the job", idir(i, T.inst));
    cr_assert_geq(n, 1);
    char dir[4400];
    snprintf(dir, sizeof(dir), "%s/%s", idir(i, T.inst), name);
    pid_t p[16];
    size_t np = procs_of(dir, p, 16);
    struct passwd *pw = getpwnam(T.job_user);
    cr_assert(pw);
    for (size_t k = 0; k < np; k++) { /* bwrap and the job, as the job user */
      char path[64];
      struct stat st;
      snprintf(path, sizeof(path), "/proc/%ld", (long)p[k]);
      cr_assert(stat(path, &st) == 0, "pid %ld: %s", (long)p[k], strerror(errno));
      cr_assert_eq(st.st_uid, pw->pw_uid, "pid %ld runs as uid %ld", (long)p[k], (long)st.st_uid);
    }
    /* nothing of this job directly in the agent's own cgroup */
    char legacy[4400];
    snprintf(legacy, sizeof(legacy), "%s/cordon-", T.base[i]);
    cr_assert_eq(access(legacy, F_OK), -1);
  }
  kill(S.agent, SIGTERM); /* drains: the job is cancelled after --drain-timeout */
  cr_assert_eq(wait_exit(S.agent, 20000), 0, "%s", slurp(S.log));
  S.agent = 0;
  for (size_t i = 0; i < T.n_base; i++)
    cr_assert_eq(access(idir(i, T.inst), F_OK), -1, "a clean stop removes %s", idir(i, T.inst));
}

/* A process as if a reaper outlived the agent: root joins dir's hierarchies
 * (each of dirs) and sleeps as cordon-job. */
static pid_t plant(char dirs[][4400], size_t n) {
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    for (size_t i = 0; i < n; i++) {
      char path[4500];
      snprintf(path, sizeof(path), "%.4400s/cgroup.procs", dirs[i]);
      FILE *f = fopen(path, "we");
      if (!f || fprintf(f, "0\n") < 0 || fclose(f) != 0)
        _exit(126);
    }
    struct passwd *pw = getpwnam(T.job_user);
    if (!pw || setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
      _exit(125);
    execl("/bin/sleep", "sleep", "1000", (char *)NULL);
    _exit(127);
  }
  /* back once it is in every one of them */
  for (int tries = 0; tries < 400; tries++) {
    bool in_all = true;
    for (size_t i = 0; i < n && in_all; i++) {
      pid_t p[4];
      size_t np = procs_of(dirs[i], p, 4);
      in_all = false;
      for (size_t k = 0; k < np; k++)
        in_all = in_all || p[k] == pid;
    }
    if (in_all)
      return pid;
    usleep(5000);
  }
  cr_assert_fail("the planted process did not join its cgroups");
  return pid;
}

/* A new agent running one napping job id: its cgroup directories in dirs
 * (one per hierarchy) and its processes in pids (bwrap, its init, the
 * shell and sleep: the whole tree is in). How many processes. */
static size_t agent_with_a_napping_job(const uint8_t *id, char dirs[3][4400], pid_t pids[64]) {
  S.agent = start();
  cr_assert(spin(10000, connected));
  send_job_id(nap_pkg(), id);
  want_running = 1;
  cr_assert(spin(20000, running_n), "the job did not start:\n%s", slurp(S.log));
  cr_assert(spin(20000, job_tree_in_cgroups), "bwrap, its init and the job joined its cgroups:\n%s",
            slurp(S.log));
  char name[64] = "";
  for (size_t i = 0; i < T.n_base; i++) {
    size_t busy;
    job_dirs(i, T.inst, &busy, name);
    cr_assert_eq(busy, 1);
    snprintf(dirs[i], 4400, "%s/%s", idir(i, T.inst), name);
  }
  size_t n = procs_of(dirs[0], pids, 64);
  cr_assert_geq(n, 4, "bwrap, its init and the job");
  return n;
}

/* The agent's reaper (sandbox_reaper_start): its child named cordon-reaper. */
static pid_t reaper_of(pid_t agent) {
  for (int tries = 0; tries < 200; tries++) {
    DIR *d = opendir("/proc");
    struct dirent *de;
    pid_t found = 0;
    while (d && !found && (de = readdir(d))) {
      char path[300], buf[512];
      snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
      FILE *f = fopen(path, "re");
      if (!f)
        continue;
      size_t n = fread(buf, 1, sizeof(buf) - 1, f);
      fclose(f);
      buf[n] = '\0';
      long ppid = 0;
      const char *rp = strrchr(buf, ')');
      if (strstr(buf, "(cordon-reaper)") && rp && sscanf(rp + 2, "%*c %ld", &ppid) == 1 &&
          ppid == agent)
        found = (pid_t)atol(de->d_name);
    }
    if (d)
      closedir(d);
    if (found)
      return found;
    usleep(10000);
  }
  return 0;
}

static void body_kill_9_in_a_job(void);
Test(agent_cgroup, after_kill_9_in_a_job_the_restarted_agent_leaves_no_job_cgroup_or_process,
     .init = setup, .fini = teardown, .timeout = 120) {
  body_kill_9_in_a_job();
}
Test(agent_cgroup_deleg, after_kill_9_in_a_job_the_restarted_agent_leaves_no_job_cgroup_or_process,
     .init = setup_deleg, .fini = teardown, .timeout = 120) {
  body_kill_9_in_a_job();
}
static void body_kill_9_in_a_job(void) {
  const uint8_t *id = job_id(0);
  char dirs[3][4400];
  pid_t job_pids[64];
  size_t n_job = agent_with_a_napping_job(id, dirs, job_pids);
  /* the reaper dies first (as if the whole group were killed): what is
   * left is the next start's to sweep */
  pid_t reaper = reaper_of(S.agent);
  cr_assert_gt(reaper, 0, "the agent has its reaper");
  kill(reaper, SIGKILL);
  kill(S.agent, SIGKILL);
  waitpid(S.agent, NULL, 0);
  S.agent = 0;
  /* bwrap's --die-with-parent has a window in which the sandbox outlives
   * the agent (sandbox_reap_leftovers): one as if it had */
  T.extra[0] = plant(dirs, T.n_base);
  pid_t p[4];
  cr_assert_eq(procs_of(dirs[0], p, 4) >= 1, true, "the planted reaper is in the job cgroup");
  cr_assert(spin(10000, disconnected));

  S.agent = start();
  cr_assert(spin(10000, connected));
  struct seen_result *r = wait_result(id, 10000);
  cr_assert_str_eq(r->code, "agent_restarted");
  int st = 0;
  cr_assert_eq(waitpid(T.extra[0], &st, 0), T.extra[0]);
  T.extra[0] = 0;
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the survivor was killed: %d", st);
  for (size_t k = 0; k < n_job; k++)
    cr_assert(gone(job_pids[k]), "pid %ld of the job is gone", (long)job_pids[k]);
  for (size_t i = 0; i < T.n_base; i++)
    cr_assert_eq(access(dirs[i], F_OK), -1, "%s removed", dirs[i]);
  cr_assert(spin(5000, pool_full), "only the new agent's pool is left");
  cr_assert(strstr(slurp(S.log), "processes_killed="), "the sweep says so: %s", slurp(S.log));
}

static void body_kill_9_no_restart(void);
Test(agent_cgroup, after_kill_9_in_a_job_its_processes_go_without_a_restart, .init = setup,
     .fini = teardown, .timeout = 120) {
  body_kill_9_no_restart();
}
Test(agent_cgroup_deleg, after_kill_9_in_a_job_its_processes_go_without_a_restart,
     .init = setup_deleg, .fini = teardown, .timeout = 120) {
  body_kill_9_no_restart();
}
/* The agent's reaper (sandbox_reaper_start): bwrap's --die-with-parent does not
 * reach the init of the job's PID namespace, so without it the job ran on
 * after a kill -9 until the agent's next start. */
static void body_kill_9_no_restart(void) {
  char dirs[3][4400];
  pid_t job_pids[64];
  size_t n_job = agent_with_a_napping_job(job_id(0), dirs, job_pids);
  kill(S.agent, SIGKILL);
  waitpid(S.agent, NULL, 0);
  S.agent = 0;
  /* no agent starts again: the job's processes still go, within seconds */
  bool all_gone = false;
  for (int tries = 0; tries < 500 && !all_gone; tries++) {
    all_gone = true;
    for (size_t k = 0; k < n_job && all_gone; k++)
      all_gone = gone(job_pids[k]);
    if (!all_gone)
      usleep(10000);
  }
  for (size_t k = 0; k < n_job; k++)
    cr_expect(gone(job_pids[k]), "pid %ld of the job is gone", (long)job_pids[k]);
  /* and its cgroups, once the reaper has seen them empty */
  bool removed = false;
  for (int tries = 0; tries < 500 && !removed; tries++) {
    removed = true;
    for (size_t i = 0; i < T.n_base && removed; i++)
      removed = access(dirs[i], F_OK) != 0;
    if (!removed)
      usleep(10000);
  }
  for (size_t i = 0; i < T.n_base; i++)
    cr_expect_eq(access(dirs[i], F_OK), -1, "%s removed", dirs[i]);
}

/* `cordon-agent --config CFG exec -- /bin/sh -c SCRIPT` in the background. */
static pid_t exec_bg(const char *cfg, const char *script) {
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(AGENT, AGENT, "--config", cfg, "exec", "--", "/bin/sh", "-c", script, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* The exec-* job directory of pid below instance inst in hierarchy i
 * (its path in out, when there is one). */
static bool exec_dir(size_t i, const char *inst, pid_t pid, char out[4800]) {
  char pre[64];
  snprintf(pre, sizeof(pre), CGROUP_EXEC_PREFIX "%ld-", (long)pid);
  DIR *d = opendir(idir(i, inst));
  bool found = false;
  struct dirent *de;
  while (d && !found && (de = readdir(d)))
    if ((found = strncmp(de->d_name, pre, strlen(pre)) == 0))
      snprintf(out, 4800, "%.4200s/%.255s", idir(i, inst), de->d_name);
  if (d)
    closedir(d);
  return found;
}

static bool has_exec_dir(size_t i, const char *inst, pid_t pid) {
  char dir[4800];
  return exec_dir(i, inst, pid, dir);
}

/* Ends the nap of the exec of pid: with its sleep killed, `sleep 300;
 * exit N` goes on to exit N. The execs nap until the test is done with
 * them rather than sleep a fixed few seconds: what the test waits on
 * meanwhile (the execs' start, an agent's start and session) may take
 * longer than that under load. The exec's cgroup is there before its
 * sleep is: wait for that. */
static const char *nap_inst;
static pid_t nap_pid;
static bool nap_ended;
static bool end_nap_once(void) {
  char dir[4800];
  pid_t p[16];
  size_t n = 0;
  if (!nap_ended && exec_dir(0, nap_inst, nap_pid, dir))
    n = procs_of(dir, p, 16);
  for (size_t k = 0; k < n && !nap_ended; k++) {
    char path[64], comm[32] = "";
    snprintf(path, sizeof(path), "/proc/%ld/comm", (long)p[k]);
    FILE *f = fopen(path, "re");
    nap_ended = f && fgets(comm, sizeof(comm), f) && strcmp(comm, "sleep\n") == 0 &&
                kill(p[k], SIGKILL) == 0;
    if (f)
      fclose(f);
  }
  return nap_ended;
}
static void end_nap(const char *inst, pid_t pid) {
  nap_inst = inst;
  nap_pid = pid;
  nap_ended = false;
  cr_assert(spin(20000, end_nap_once), "the exec of %ld naps in its cgroup", (long)pid);
}

static pid_t exec_pid[2];
static char other_inst[CGROUP_INSTANCE_NAME_SIZE];
static bool execs_running(void) {
  return has_exec_dir(0, T.inst, exec_pid[0]) && has_exec_dir(0, other_inst, exec_pid[1]);
}

Test(agent_cgroup, the_sweep_leaves_another_instance_and_a_running_exec_alone, .init = setup,
     .fini = teardown, .timeout = 90) {
  char other[300];
  snprintf(other, sizeof(other), "%s/other", S.dir);
  cr_assert_eq(mkdir(other, 0700), 0);
  cgroup_instance_name(other, 0, other_inst);
  cr_assert_str_neq(other_inst, T.inst, "another config dir is another instance");
  /* an exec of this agent's own config dir, and one of another instance */
  T.extra[0] = exec_pid[0] = exec_bg(S.cfg, "sleep 300; exit 7");
  T.extra[1] = exec_pid[1] = exec_bg(other, "sleep 300; exit 8");
  cr_assert(spin(15000, execs_running), "both execs run in their cgroups");
  /* a third instance killed -9 long ago: its empty pool and a job cgroup
   * that still holds a process (pid 999999999 is above any pid_max) */
  char dead[64];
  snprintf(dead, sizeof(dead), CGROUP_INSTANCE_PREFIX "d1d1d1d1%08lx", (unsigned long)getpid());
  char pool[3][4400], busy[3][4400];
  for (size_t i = 0; i < T.n_base; i++) {
    cr_assert_eq(mkdir(idir(i, dead), 0755), 0);
    snprintf(pool[i], sizeof(pool[i]), "%.4200s/" CGROUP_JOB_PREFIX "999999999-0", idir(i, dead));
    snprintf(busy[i], sizeof(busy[i]), "%.4200s/" CGROUP_JOB_PREFIX "999999999-1", idir(i, dead));
    cr_assert_eq(mkdir(pool[i], 0700), 0);
    cr_assert_eq(mkdir(busy[i], 0700), 0);
  }
  T.extra[2] = plant(busy, T.n_base);
  S.agent = start();
  cr_assert(spin(10000, connected));
  cr_assert(execs_running(), "the sweep left both alone");
  for (size_t i = 0; i < T.n_base; i++) {
    cr_assert_eq(access(pool[i], F_OK), -1, "an abandoned empty pool dir goes: %s", pool[i]);
    pid_t p[2];
    cr_assert_eq(procs_of(busy[i], p, 2), 1, "another instance's busy job cgroup is left");
    cr_assert_eq(p[0], T.extra[2]);
  }
  cr_assert_eq(kill(T.extra[2], 0), 0, "and its process lives");
  kill(T.extra[2], SIGKILL);
  waitpid(T.extra[2], NULL, 0);
  T.extra[2] = 0;
  for (size_t i = 0; i < T.n_base; i++) {
    rmdir(busy[i]);
    cr_assert_eq(rmdir(idir(i, dead)), 0);
  }
  end_nap(T.inst, exec_pid[0]);
  end_nap(other_inst, exec_pid[1]);
  int st;
  cr_assert_eq(waitpid(exec_pid[0], &st, 0), exec_pid[0]);
  T.extra[0] = 0;
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 7, "this config's exec finished: %d", st);
  cr_assert_eq(waitpid(exec_pid[1], &st, 0), exec_pid[1]);
  T.extra[1] = 0;
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 8, "the other instance's exec finished: %d", st);
  for (size_t i = 0; i < T.n_base; i++) {
    cr_assert_not(has_exec_dir(i, T.inst, exec_pid[0]), "an exec removes its cgroup");
    cr_assert_eq(access(idir(i, other_inst), F_OK), -1, "and its instance dir when empty");
  }
}

static char pooled[CGROUP_POOL_SIZE][64];
static size_t n_pooled;
static void pool_names(void) {
  n_pooled = 0;
  DIR *d = opendir(idir(0, T.inst));
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (strncmp(de->d_name, CGROUP_JOB_PREFIX, 4) == 0 && n_pooled < CGROUP_POOL_SIZE)
      snprintf(pooled[n_pooled++], 64, "%.63s", de->d_name);
  if (d)
    closedir(d);
}
static bool in_pooled(const char *name) {
  for (size_t i = 0; i < n_pooled; i++)
    if (strcmp(pooled[i], name) == 0)
      return true;
  return false;
}

static void body_pooled_limits(void);
Test(agent_cgroup, pooled_cgroups_cap_a_fork_bomb_and_kill_an_allocation_over_memory_mb,
     .init = setup, .fini = teardown, .timeout = 120) {
  body_pooled_limits();
}
Test(agent_cgroup_deleg, pooled_cgroups_cap_a_fork_bomb_and_kill_an_allocation_over_memory_mb,
     .init = setup_deleg, .fini = teardown, .timeout = 120) {
  body_pooled_limits();
}
static void body_pooled_limits(void) {
  struct pkg bomb = make_package(
      "bomb",
      "{\"name\":\"bomb\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
      "\"limits\":{\"processes\":8}}",
      /* the subshell forks until it cannot (dash then exits); the count
       * is read with builtins only, while the sleeps still hold the pids */
      "( i=0; while [ $i -lt 60 ]; do (echo x >> /tmp/n; exec sleep 3) & i=$((i+1)); done ) "
      "2>/dev/null\n"
      "j=0; while [ $j -lt 20000 ]; do j=$((j+1)); done\n" /* the last children write */
      "n=0; while read -r l; do n=$((n+1)); done < /tmp/n; echo procs $n\n");
  struct pkg hog =
      make_package("hog",
                   "{\"name\":\"hog\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"limits\":{\"memory_mb\":48}}",
                   "python3 -c 'b = bytearray(200 << 20); b[::4096] = b\"x\" * len(b[::4096]); "
                   "print(\"allocated\")'\n");
  S.agent = start();
  cr_assert(spin(10000, connected));
  for (int round = 0; round < 2; round++) {
    cr_assert(spin(5000, pool_full), "the pool is back to %d", CGROUP_POOL_SIZE);
    pool_names();
    const uint8_t *id = job_id(round);
    send_job_id(round == 0 ? &bomb : &hog, id);
    want_running = round + 1;
    cr_assert(spin(20000, running_n), "the job did not start:\n%s", slurp(S.log));
    if (round == 0) {
      cr_assert(spin(20000, job_in_cgroups), "the job's tree joined its cgroups");
      for (size_t i = 0; i < T.n_base; i++) {
        size_t busy;
        char name[64] = "";
        job_dirs(i, T.inst, &busy, name);
        cr_assert_eq(busy, 1);
        cr_assert(in_pooled(name), "the job took %s, made before it arrived", name);
      }
    }
    struct seen_result *r = wait_result(id, 30000);
    if (round == 0) {
      long procs = -1;
      const char *p = strstr(r->out, "procs ");
      cr_assert(p && sscanf(p, "procs %ld", &procs) == 1, "out: %s", r->out);
      /* at once with the two shells, bwrap and its init: 8 + 2 in all,
       * never the 60 it tried */
      cr_assert_leq(procs, 6, "the fork bomb is capped: %s", r->out);
      cr_assert_geq(procs, 1, "it ran: %s", r->out);
    } else {
      cr_assert(r->oom, "the OOM killer acted in the job's cgroup");
      cr_assert_null(strstr(r->out, "allocated"), "the allocation did not succeed: %s", r->out);
    }
  }
}

/* cordon-<job id> directly in the agent's cgroup, as earlier versions made
 * them: the start-up sweep removes an empty one older than a minute, and
 * leaves a young one (another agent may be about to fill it) and one that
 * holds a process (maybe another agent's running job). */
Test(agent_cgroup, legacy_job_dirs_go_only_when_empty_and_older_than_a_minute, .init = setup,
     .fini = teardown, .timeout = 60) {
  char old[3][4400], young[3][4400], busy[3][4400];
  uint8_t rnd[3][16];
  randombytes_buf(rnd, sizeof(rnd));
  char hex[3][33];
  for (int k = 0; k < 3; k++)
    for (int b = 0; b < 16; b++)
      snprintf(hex[k] + 2 * b, 3, "%02x", rnd[k][b]);
  for (size_t i = 0; i < T.n_base; i++) {
    snprintf(old[i], sizeof(old[i]), "%.4096s/cordon-%s", T.base[i], hex[0]);
    snprintf(young[i], sizeof(young[i]), "%.4096s/cordon-%s", T.base[i], hex[1]);
    snprintf(busy[i], sizeof(busy[i]), "%.4096s/cordon-%s", T.base[i], hex[2]);
    cr_assert_eq(mkdir(old[i], 0700), 0);
    cr_assert_eq(mkdir(young[i], 0700), 0);
    cr_assert_eq(mkdir(busy[i], 0700), 0);
    struct timeval tv[2] = {{time(NULL) - 120, 0}, {time(NULL) - 120, 0}};
    cr_assert_eq(utimes(old[i], tv), 0);
    cr_assert_eq(utimes(busy[i], tv), 0);
  }
  T.extra[0] = plant(busy, T.n_base);
  S.agent = start();
  cr_assert(spin(10000, connected));
  for (size_t i = 0; i < T.n_base; i++) {
    cr_assert_eq(access(old[i], F_OK), -1, "empty and old: removed: %s", old[i]);
    cr_assert_eq(access(young[i], F_OK), 0, "young: left");
    pid_t p[2];
    cr_assert_eq(procs_of(busy[i], p, 2), 1, "busy: left with its process");
  }
  kill(T.extra[0], SIGKILL);
  waitpid(T.extra[0], NULL, 0);
  T.extra[0] = 0;
  for (size_t i = 0; i < T.n_base; i++) {
    cr_assert_eq(rmdir(young[i]), 0);
    cr_assert_eq(rmdir(busy[i]), 0);
  }
}
