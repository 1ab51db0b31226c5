/* Limits for the whole job tree (issue 12, class 5): real cordon-agent,
 * real bwrap, real jobs of six processes. Three agent setups:
 *   root:  the agent as root (jobs as cordon-job), cgroups of its own;
 *   deleg: the agent as an unprivileged user inside a cgroup subtree the
 *          test creates as root and chowns to that user (what systemd's
 *          Delegate=yes gives a user unit), the agent moved into it first;
 *   plain: the agent as that user with no cgroup it may write: the
 *          result must say rlimit.
 * That user is a throw-away account of each test (sbx_user_make): with
 * the shared cordon-test, plain's RLIMIT_NPROC (it counts every process
 * of the uid) also counted other tests' processes running at once. The
 * delegated subtree's name holds the pid, so that runs of this file in
 * other checkouts do not share it.
 * Six processes together must not pass memory_mb or cpu_s where a cgroup
 * exists; writing to /dev, /dev/shm, /tmp and the workspace together stops
 * at disk_mb; the agent reaps the orphans a kill leaves; at contained,
 * memory and CPU hold for the tree the same way. The jobs run one at a
 * time (a *sandbox* file).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/magic.h>

#include "sbx_harness.h"

#define DELEG "cordon-limits-test-"

enum mode { MODE_ROOT, MODE_DELEG, MODE_PLAIN };

/* the level the next package asks for at least */
static const char *min_sandbox = "isolated";

static struct {
  enum mode mode;
  struct sbx_dirs d; /* temp dir, agent --config, package source dir */
  struct sbx_user u; /* the agent in MODE_DELEG and MODE_PLAIN */
  /* delegated cgroup dirs the agent joins (MODE_DELEG) */
  char deleg[4][2200];
  const char *deleg_dirs[4]; /* the same, for sbx_exec.cgroups */
  size_t n_deleg;
} E;

static bool read_small(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "re");
  if (!f)
    return false;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
  return true;
}

/* Our own cgroup path for a v1 controller, or v2 (ctrl NULL). */
static bool own_cgroup(const char *ctrl, char *out, size_t len) {
  FILE *f = fopen("/proc/self/cgroup", "re");
  if (!f)
    return false;
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    *c2 = '\0';
    if (!ctrl) {
      found = strcmp(line, "0") == 0;
    } else {
      for (char *save, *t = strtok_r(c1 + 1, ",", &save); t && !found;
           t = strtok_r(NULL, ",", &save))
        found = strcmp(t, ctrl) == 0;
    }
    if (found)
      snprintf(out, len, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
  }
  fclose(f);
  return found;
}

static bool is_fs(const char *path, long magic) {
  struct statfs sf;
  return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

/* A subtree owned by E.u: v1 memory, pids and cpuacct dirs below
 * ours, or one v2 dir with memory and pids enabled for its children. */
static void make_delegation(void) {
  char own[2048];
  E.n_deleg = 0;
  static const char *const ctrls[] = {"memory", "pids", "cpuacct"};
  for (size_t i = 0; i < 3; i++) {
    char mnt[64];
    snprintf(mnt, sizeof(mnt), "/sys/fs/cgroup/%s", ctrls[i]);
    if (!is_fs(mnt, CGROUP_SUPER_MAGIC) || !own_cgroup(ctrls[i], own, sizeof(own)))
      continue;
    snprintf(E.deleg[E.n_deleg], sizeof(E.deleg[0]), "%s%s/" DELEG "%d", mnt, own, (int)getpid());
    xsystem("mkdir -p %s && chown -R %s: %s", E.deleg[E.n_deleg], E.u.name, E.deleg[E.n_deleg]);
    E.n_deleg++;
  }
  if (E.n_deleg == 3)
    return;
  E.n_deleg = 0;
  const char *v2 = is_fs("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC)           ? "/sys/fs/cgroup"
                   : is_fs("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC) ? "/sys/fs/cgroup/unified"
                                                                          : NULL;
  char ctl[512], path[4096];
  if (!v2 || !own_cgroup(NULL, own, sizeof(own)))
    cr_skip_test("no cgroup hierarchy to delegate here");
  snprintf(path, sizeof(path), "%s%s/cgroup.controllers", v2, own);
  if (!read_small(path, ctl, sizeof(ctl)) || !strstr(ctl, "memory") || !strstr(ctl, "pids"))
    cr_skip_test("cgroup v2 here has no memory and pids controllers to delegate");
  snprintf(E.deleg[0], sizeof(E.deleg[0]), "%s%s/" DELEG "%d", v2, own, (int)getpid());
  xsystem("mkdir -p %s && chown %s: %s %s/cgroup.procs %s/cgroup.subtree_control", E.deleg[0],
          E.u.name, E.deleg[0], E.deleg[0], E.deleg[0]);
  E.n_deleg = 1;
}

static void remove_delegation(void) {
  for (size_t i = 0; i < E.n_deleg; i++) /* children first; kernel refuses busy ones */
    xsystem("find %s -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null; rmdir %s || true",
            E.deleg[i], E.deleg[i]);
  E.n_deleg = 0;
}

static void setup(enum mode mode) {
  memset(&E, 0, sizeof(E));
  min_sandbox = "isolated";
  E.mode = mode;
  if (mode != MODE_ROOT)
    sbx_user_make(&E.u, "cdnlim");
  sbx_dirs_make(&E.d, "/tmp/cordon-lim-XXXXXX", E.u.uid, E.u.gid);
  if (mode == MODE_DELEG)
    make_delegation();
}

static void setup_root(void) {
  setup(MODE_ROOT);
}
static void setup_deleg(void) {
  setup(MODE_DELEG);
}
static void setup_plain(void) {
  setup(MODE_PLAIN);
}
static void teardown(void) {
  remove_delegation();
  xsystem("rm -rf %s", E.d.root);
  sbx_user_drop(&E.u);
}

static void package(const char *limits, const char *script) {
  char m[4096];
  snprintf(m, sizeof(m),
           "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
           "\"timeout_s\":30,\"min_sandbox\":\"%s\",\"limits\":{%s}}",
           min_sandbox, limits);
  sbx_package_files(&E.d, m, script);
}

/* `cordon-agent --config C CMD PKG` as root or E.u, in MODE_DELEG
 * moved into the delegated subtree first while still root, as systemd
 * would. */
static struct sbx_run run_agent(const char *cmd) {
  struct sbx_exec x = sbx_exec_of(&E.d, cmd, NULL, E.mode != MODE_ROOT ? E.u.name : NULL,
                                  E.mode != MODE_ROOT ? E.u.home : "/root");
  for (size_t i = 0; i < E.n_deleg; i++)
    E.deleg_dirs[i] = E.deleg[i];
  x.cgroups = E.deleg_dirs;
  x.n_cgroups = E.n_deleg;
  struct sbx_run r = sbx_run_agent(&x);
  cr_assert_neq(r.status, SBX_EXIT_NO_CGROUP, "could not join the delegated cgroup");
  cr_assert(r.res, "no JSON; stderr: %s", r.err);
  return r;
}

static const char *jstr(json_t *o, const char *path) {
  const char *s = json_string_value(jget(o, path));
  return s ? s : "";
}

static void assert_ran_isolated(struct sbx_run *r) {
  cr_assert_str_eq(jstr(r->res, "sandbox.level"), "isolated", "stderr: %s", r->err);
  cr_assert(json_is_null(jget(r->res, "error")), "error: %s / %s", jstr(r->res, "error.code"),
            jstr(r->res, "error.message"));
}

static const char *expected_mech(void) {
  return E.mode == MODE_PLAIN ? "rlimit" : "cgroup";
}

static size_t count(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

#define ALL3(name)                                                                                 \
  static void body_##name(void);                                                                   \
  Test(sandbox_limits_root, name, .init = setup_root, .fini = teardown) {                          \
    body_##name();                                                                                 \
  }                                                                                                \
  Test(sandbox_limits_deleg, name, .init = setup_deleg, .fini = teardown) {                        \
    body_##name();                                                                                 \
  }                                                                                                \
  Test(sandbox_limits_plain, name, .init = setup_plain, .fini = teardown) {                        \
    body_##name();                                                                                 \
  }                                                                                                \
  static void body_##name(void)

/* Six processes of 40 MiB each (240 MiB) under memory_mb 64: with a
 * cgroup the tree never holds them at once (the OOM killer acts and the
 * result says so); with rlimit each process may, which the result admits. */
ALL3(six_processes_together_cannot_exceed_memory_mb) {
  package("\"memory_mb\":64,\"processes\":16",
          "for i in 1 2 3 4 5 6; do\n"
          "  python3 -c 'import time; b = bytearray(40 << 20); b[::4096] = b\"x\" * "
          "len(b[::4096]); print(\"held\", flush=True); time.sleep(3); print(\"done\", "
          "flush=True)' &\n"
          "done\n"
          "wait\n");
  struct sbx_run r = run_agent("exec");
  assert_ran_isolated(&r);
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.memory"), expected_mech());
  const char *out = jstr(r.res, "stdout");
  if (E.mode == MODE_PLAIN) {
    /* per-process RLIMIT_AS: the honest word for what does not hold */
    cr_assert(json_is_null(jget(r.res, "oom_killed")), "rlimit cannot tell an OOM");
  } else {
    cr_assert(json_is_true(jget(r.res, "oom_killed")), "the tree was OOM-killed: %s", out);
    cr_assert_leq(count(out, "done"), 1, "at most one 40 MiB process survives: %s", out);
  }
  json_decref(r.res);
}

/* Six busy processes under cpu_s 2: with a cgroup the tree is killed once
 * their total passes 2 s (about 1 s of wall time on two cores), reported
 * as signal 24 (SIGXCPU), not as a timeout. */
ALL3(six_busy_processes_are_killed_when_their_total_cpu_passes_cpu_s) {
  if (E.mode == MODE_PLAIN) {
    package("\"cpu_s\":2", "true\n");
    struct sbx_run r = run_agent("exec");
    assert_ran_isolated(&r);
    cr_assert_str_eq(jstr(r.res, "sandbox.limits.cpu"), "rlimit");
    json_decref(r.res);
    return;
  }
  package("\"cpu_s\":2,\"processes\":16",
          "for i in 1 2 3 4 5 6; do sh -c 'while :; do :; done' & done\nwait\n");
  struct sbx_run r = run_agent("exec");
  assert_ran_isolated(&r);
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.cpu"), "cgroup");
  cr_assert(json_is_false(jget(r.res, "timed_out")));
  cr_assert_eq(json_integer_value(jget(r.res, "signal")), 24, "SIGXCPU");
  json_int_t wall = json_integer_value(jget(r.res, "wall_ms"));
  /* per-process rlimits alone would let them run 6 x 2 s of CPU: 6 s of wall
   * time on two cores at best */
  cr_assert_lt(wall, 6000, "killed on the tree's total, wall_ms=%lld", (long long)wall);
  cr_assert_geq(json_integer_value(jget(r.res, "orphans_killed")), 5);
  json_decref(r.res);
}

/* Every writable place of the view shares one disk_mb: 6 MiB tried in
 * each of /dev, /dev/shm, /tmp, the workspace; the total written stays at
 * 8 MiB, the first write past it fails with ENOSPC, /dev with EROFS. */
ALL3(writes_to_dev_shm_tmp_and_workspace_together_stop_at_disk_mb) {
  package("\"disk_mb\":8", "exec python3 -c '\n"
                           "import errno, os, sys\n"
                           "total = 0\n"
                           "for d in (\"/dev\", \"/dev/shm\", \"/tmp\", os.environ[\"WORKSPACE\"], "
                           "\"/cordon/dev\", \"/\"):\n"
                           "  n, err = 0, \"ok\"\n"
                           "  try:\n"
                           "    with open(os.path.join(d, \"fill\"), \"wb\") as f:\n"
                           "      for i in range(6 * 16):\n"
                           "        n += f.write(b\"x\" * 65536); f.flush()\n"
                           "  except OSError as e:\n"
                           "    err = errno.errorcode[e.errno]\n"
                           "  total += n\n"
                           "  print(d, n, err)\n"
                           "print(\"total\", total)\n"
                           "'\n");
  struct sbx_run r = run_agent("exec");
  assert_ran_isolated(&r);
  const char *out = jstr(r.res, "stdout");
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.disk"), "tmpfs");
  long total = -1;
  const char *t = strstr(out, "total ");
  cr_assert(t && sscanf(t, "total %ld", &total) == 1, "got %s / %s", out, jstr(r.res, "stderr"));
  cr_assert_leq(total, 8L << 20, "total written %ld: %s", total, out);
  cr_assert_geq(total, 7L << 20, "the budget is usable: %s", out);
  cr_assert(strstr(out, "/dev 0 EROFS"), "/dev is read-only: %s", out);
  cr_assert(strstr(out, "/cordon/dev 0 EROFS"), "bwrap's dev dir is read-only: %s", out);
  cr_assert(strstr(out, "/ 0 EROFS"), "the root is read-only: %s", out);
  cr_assert(strstr(out, "ENOSPC"), "the first write past disk_mb fails with ENOSPC: %s", out);
  json_decref(r.res);
}

/* 100,000 empty files in the workspace (the red team's 300,000 took 330
 * MiB of host kernel memory with disk_mb 8, bwrap's --size bounding bytes
 * only): in every mode the tmpfs stops them at its inode bound (disk_mb x
 * 256) with ENOSPC, with or without a cgroup. */
static const char inode_flood[] =
    "exec python3 -c '\n"
    "import errno, os\n"
    "w = os.environ[\"WORKSPACE\"]\n"
    "print(\"inodes\", os.statvfs(w).f_files, flush=True)\n"
    "n, err = 0, \"ok\"\n"
    "try:\n"
    "  for i in range(100000):\n"
    "    os.close(os.open(\"%s/f%d\" % (w, i), os.O_CREAT | os.O_WRONLY, 0o644)); n += 1\n"
    "except OSError as e:\n"
    "  err = errno.errorcode[e.errno]\n"
    "print(\"made\", n, err, flush=True)\n"
    "'\n";

ALL3(an_inode_flood_stops_at_the_workspace_tmpfs_inode_bound_in_every_mode) {
  package("\"memory_mb\":64,\"disk_mb\":8,\"processes\":16", inode_flood);
  struct sbx_run r = run_agent("exec");
  assert_ran_isolated(&r);
  const char *out = jstr(r.res, "stdout");
  long made = -1;
  const char *m = strstr(out, "made ");
  if (m)
    sscanf(m, "made %ld", &made);
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.disk"), "tmpfs", "%s", out);
  cr_assert(strstr(out, "inodes 2048\n"), "8 MiB x 256 inodes: %s", out);
  cr_assert(strstr(out, "ENOSPC"), "the flood ends at the inode bound: %s", out);
  /* the root directory, .tmp and .shm take three */
  cr_assert(made >= 2000 && made <= 2048, "made %ld: %s", made, out);
  json_decref(r.res);
}

/* A writable grant is no part of the workspace tmpfs: what a job writes
 * there is bounded per file (RLIMIT_FSIZE = disk_mb: EFBIG past it) and
 * not in total, so three files of 6 MiB under disk_mb 8 all land, and the
 * result says disk: none in every mode. */
ALL3(a_writable_grant_is_bounded_per_file_only_and_the_result_says_so) {
  /* not below /tmp, which is the workspace's .tmp in the view */
  char dir[128], json[512];
  snprintf(dir, sizeof(dir), "/var/tmp/cordon-lim-grant-%d", (int)getpid());
  xsystem("rm -rf %s && mkdir -m 0777 %s", dir, dir);
  snprintf(json, sizeof(json), "{\"grant_roots\":[\"%s\"]}", dir);
  sbx_agent_config(&E.d, json);
  char m[1024];
  snprintf(m, sizeof(m),
           "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
           "\"timeout_s\":30,\"limits\":{\"disk_mb\":8},"
           "\"capabilities\":{\"fs\":[{\"path\":\"%s\",\"access\":\"rw\"}]}}",
           dir);
  char script[1024];
  snprintf(script, sizeof(script),
           "exec python3 -c '\n"
           "import errno\n"
           "for name, mib in ((\"a\", 6), (\"b\", 6), (\"c\", 6), (\"big\", 9)):\n"
           "  n, err = 0, \"ok\"\n"
           "  try:\n"
           "    with open(\"%s/\" + name, \"wb\") as f:\n"
           "      for i in range(mib * 16): n += f.write(b\"x\" * 65536); f.flush()\n"
           "  except OSError as e:\n"
           "    err = errno.errorcode[e.errno]\n"
           "  print(name, n, err)\n"
           "'\n",
           dir);
  sbx_package_files(&E.d, m, script);
  struct sbx_run r = run_agent("exec");
  assert_ran_isolated(&r);
  const char *out = jstr(r.res, "stdout");
  cr_assert(strstr(out, "a 6291456 ok\nb 6291456 ok\nc 6291456 ok\n"),
            "18 MiB in total under disk_mb 8: %s / %s", out, jstr(r.res, "stderr"));
  cr_assert(strstr(out, "big 8388608 EFBIG"), "one file stops at disk_mb: %s", out);
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.disk"), "none",
                   "disk_mb does not hold for the tree with a writable grant");
  struct sbx_run e = run_agent("explain");
  cr_assert(json_is_false(jget(e.res, "limits_for_tree.disk")));
  cr_assert_eq(json_integer_value(jget(e.res, "disk_for_tree.writable_grants")), 1);
  cr_assert_str_eq(jstr(e.res, "disk_for_tree.writable_grants_bytes"), "rlimit");
  xsystem("rm -rf %s", dir);
  json_decref(e.res);
  json_decref(r.res);
}

/* The workspace tmpfs is the job's alone and goes with it: the agent (root)
 * or its launcher (per-user) mounts it in a mount namespace of its own,
 * so the host never has it in its mount table, during the job or after,
 * and the job directory (its mount point in it) is gone after the job. */
ALL3(the_workspace_tmpfs_is_never_in_the_host_mount_table_and_gone_after_the_job) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "grep -c cordon-workspace /proc/%d/mountinfo > %s/during",
           (int)getpid(), E.d.root);
  char script[1024];
  /* the job cannot read the host's /proc; the test looks while it sleeps */
  snprintf(script, sizeof(script),
           "grep ' /cordon/workspace ' /proc/self/mountinfo\n"
           "grep -E '^(CapPrm|CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status\n"
           "touch $WORKSPACE/f && sleep 2\n");
  package("\"disk_mb\":8", script);
  pid_t looker = fork();
  cr_assert(looker >= 0);
  if (looker == 0) {
    usleep(1200 * 1000);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  struct sbx_run r = run_agent("exec");
  int st;
  waitpid(looker, &st, 0);
  assert_ran_isolated(&r);
  const char *out = jstr(r.res, "stdout");
  cr_assert(strstr(out, "nr_inodes=2048"), "the agent's tmpfs: %s", out);
  /* the launcher's user namespace (per-user) gives the job nothing */
  cr_assert(strstr(out, "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
                        "CapBnd:\t0000000000000000\n"),
            "no capability: %s", out);
  cr_assert(strstr(out, "NoNewPrivs:\t1\nSeccomp:\t2\n"), "%s", out);
  char path[256], during[32] = "";
  snprintf(path, sizeof(path), "%s/during", E.d.root);
  cr_assert(read_small(path, during, sizeof(during)));
  cr_assert_str_eq(during, "0\n", "never in the host's mount table");
  FILE *f = fopen("/proc/self/mountinfo", "re");
  char line[4096];
  while (f && fgets(line, sizeof(line), f))
    cr_assert(!strstr(line, "cordon-workspace") && !strstr(line, E.d.root), "left: %s", line);
  if (f)
    fclose(f);
  snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/jobs)\"", E.d.config);
  xsystem("%s", cmd);
  json_decref(r.res);
}

/* What needs /tmp and /dev/shm keeps working inside the budget. */
ALL3(mktemp_and_python_multiprocessing_work) {
  package("\"disk_mb\":8", "mktemp && mktemp -d && exec python3 -c '\n"
                           "import multiprocessing as mp, tempfile\n"
                           "def sq(x): return x * x\n"
                           "if __name__ == \"__main__\":\n"
                           "  lock = mp.Lock(); lock.acquire(); lock.release()\n"
                           "  with mp.Pool(2) as p: print(\"pool\", sum(p.map(sq, range(10))))\n"
                           "  q = mp.Queue(); q.put(7); print(\"queue\", q.get())\n"
                           "  print(\"tempfile\", tempfile.mkstemp()[1].startswith(\"/tmp/\"))\n"
                           "'\n");
  struct sbx_run r = run_agent("exec");
  assert_ran_isolated(&r);
  const char *out = jstr(r.res, "stdout");
  cr_assert_eq(json_integer_value(jget(r.res, "exit_code")), 0, "%s / %s", out,
               jstr(r.res, "stderr"));
  cr_assert(strstr(out, "/tmp/tmp."), "mktemp: %s", out);
  cr_assert(strstr(out, "pool 285"), "multiprocessing (sem_open on /dev/shm): %s", out);
  cr_assert(strstr(out, "queue 7"), "%s", out);
  cr_assert(strstr(out, "tempfile True"), "%s", out);
  json_decref(r.res);
}

/* explain says which limits hold for the tree, the same as a run. */
ALL3(explain_says_which_limits_hold_for_the_tree) {
  package("\"memory_mb\":64", "true\n");
  struct sbx_run e = run_agent("explain");
  json_t *tree = jget(e.res, "limits_for_tree");
  cr_assert(json_is_object(tree), "explain has limits_for_tree: %s", e.err);
  bool cg = E.mode != MODE_PLAIN;
  cr_assert_eq(json_is_true(json_object_get(tree, "memory")), cg);
  cr_assert_eq(json_is_true(json_object_get(tree, "cpu")), cg);
  cr_assert(json_is_true(json_object_get(tree, "disk")));
  cr_assert(json_is_true(json_object_get(tree, "inodes")));
  cr_assert_str_eq(jstr(e.res, "disk_for_tree.workspace_inodes"), "tmpfs");
  cr_assert_eq(json_integer_value(jget(e.res, "disk_for_tree.inode_bound")), 64 * 256);
  cr_assert_str_eq(jstr(e.res, "disk_for_tree.workspace_mounted_by"),
                   E.mode == MODE_ROOT ? "agent" : "agent-userns");
  cr_assert_str_eq(jstr(e.res, "limits.disk.enforced_by"), "tmpfs");
  cr_assert_str_eq(jstr(e.res, "limits.memory.enforced_by"), expected_mech());
  cr_assert_str_eq(jstr(e.res, "limits.cpu.enforced_by"), expected_mech());
  struct sbx_run r = run_agent("exec");
  assert_ran_isolated(&r);
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.memory"), expected_mech());
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.cpu"), expected_mech());
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.disk"), "tmpfs");
  json_decref(e.res);
  json_decref(r.res);
}

/* The agent is a subreaper at every level and reaps what comes back to it:
 * at the timeout it kills bwrap, whose pid-namespace init then dies an
 * orphan. Were the agent no subreaper, or did it not reap, that init would
 * end up a child of this test (a subreaper too) once the agent exits. */
ALL3(orphaned_bwrap_inits_are_reaped_by_the_agent) {
  cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  package("\"processes\":16", "sleep 30 &\nsetsid sleep 30 &\nsleep 30\n");
  char path[512], m[512];
  snprintf(m, sizeof(m),
           "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
           "\"timeout_s\":1}");
  snprintf(path, sizeof(path), "%s/manifest.json", E.d.pkg);
  write_file(path, m, 0644);
  struct sbx_run r = run_agent("exec");
  assert_ran_isolated(&r);
  cr_assert(json_is_true(jget(r.res, "timed_out")));
  usleep(300 * 1000); /* an unreaped orphan would be re-parented to us by now */
  /* exec's reaper comes back to us once exec has ended, and exits within
   * moments: it is no part of the job, which sleeps 30 s */
  pid_t extra = 0;
  for (int round = 0; round < 300 && extra == 0; round++) {
    siginfo_t si = {0};
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid != 0) {
      char proc[64], comm[32] = "";
      snprintf(proc, sizeof(proc), "/proc/%d/comm", (int)si.si_pid);
      FILE *f = fopen(proc, "re");
      if (f) {
        if (!fgets(comm, sizeof(comm), f))
          comm[0] = '\0';
        fclose(f);
      }
      cr_assert_str_eq(comm, "cordon-reaper\n", "a process of the job came back to the test: %ld",
                       (long)si.si_pid);
      (void)waitpid(si.si_pid, NULL, 0);
      continue;
    }
    int st;
    extra = waitpid(-1, &st, WNOHANG);
    if (extra == 0)
      usleep(10 * 1000);
  }
  cr_assert(extra < 0 && errno == ECHILD, "a process of the job came back to the test: %ld",
            (long)extra);
  json_decref(r.res);
}

/* contained (no bwrap): memory and CPU hold for the tree the same way when
 * a cgroup exists; disk is `none` (RLIMIT_FSIZE per file only). */
static void contained(void) {
  sbx_agent_config(&E.d,
                   "{\"bwrap_path\": \"/nonexistent/bwrap\", \"lowest_level\": \"contained\"}");
  min_sandbox = "contained";
}

ALL3(contained_cpu_and_memory_hold_for_the_tree_where_a_cgroup_exists) {
  contained();
  package("\"cpu_s\":2,\"processes\":16",
          "for i in 1 2 3 4 5 6; do sh -c 'while :; do :; done' & done\nwait\n");
  struct sbx_run r = run_agent("exec");
  cr_assert_str_eq(jstr(r.res, "sandbox.level"), "contained", "stderr: %s", r.err);
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.cpu"), expected_mech());
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.memory"), expected_mech());
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.disk"), "none");
  if (E.mode != MODE_PLAIN) {
    cr_assert_eq(json_integer_value(jget(r.res, "signal")), 24, "SIGXCPU");
    cr_assert_lt(json_integer_value(jget(r.res, "wall_ms")), 6000);
  }
  json_decref(r.res);
}

/* A fork bomb (children forking again) under processes 8: with a cgroup
 * the tree never holds more than pids.max (processes + bwrap's two), so at
 * most 8 - 1 forks succeed (bwrap's init and the shell are in it too);
 * with RLIMIT_NPROC the count is per uid, so only the bound is asserted. */
static const char fork_bomb[] = "exec python3 -c '\n"
                                "import os, time\n"
                                "made = 0\n"
                                "for i in range(60):\n"
                                "  try:\n"
                                "    pid = os.fork()\n"
                                "  except OSError:\n"
                                "    continue\n"
                                "  if pid == 0:\n"
                                "    try:\n"
                                "      if os.fork() == 0: time.sleep(1)\n"
                                "    except OSError: pass\n"
                                "    time.sleep(1); os._exit(0)\n"
                                "  made += 1\n"
                                "print(\"made\", made, flush=True)\n"
                                "'\n";

static void assert_fork_bomb_held(struct sbx_run *r) {
  const char *out = jstr(r->res, "stdout");
  int made = -1;
  const char *m = strstr(out, "made ");
  cr_assert(m && sscanf(m, "made %d", &made) == 1, "%s / %s", out, jstr(r->res, "stderr"));
  cr_assert_str_eq(jstr(r->res, "sandbox.limits.processes"), expected_mech());
  cr_assert_leq(made, 7, "the tree stays within processes: %s", out);
  if (E.mode != MODE_PLAIN)
    cr_assert_geq(made, 1, "forking works below the limit: %s", out);
}

ALL3(a_fork_bomb_stays_within_processes) {
  package("\"processes\":8", fork_bomb);
  struct sbx_run r = run_agent("exec");
  assert_ran_isolated(&r);
  assert_fork_bomb_held(&r);
  json_decref(r.res);
}

ALL3(contained_a_fork_bomb_stays_within_processes) {
  contained();
  package("\"processes\":8", fork_bomb);
  struct sbx_run r = run_agent("exec");
  cr_assert_str_eq(jstr(r.res, "sandbox.level"), "contained", "stderr: %s", r.err);
  assert_fork_bomb_held(&r);
  json_decref(r.res);
}

/* contained: six 40 MiB processes under memory_mb 64 are OOM-killed as a
 * tree where a cgroup exists, as at isolated. */
ALL3(contained_six_processes_together_cannot_exceed_memory_mb) {
  contained();
  package("\"memory_mb\":64,\"processes\":16",
          "for i in 1 2 3 4 5 6; do\n"
          "  python3 -c 'import time; b = bytearray(40 << 20); b[::4096] = b\"x\" * "
          "len(b[::4096]); print(\"held\", flush=True); time.sleep(3); print(\"done\", "
          "flush=True)' &\n"
          "done\n"
          "wait\n");
  struct sbx_run r = run_agent("exec");
  cr_assert_str_eq(jstr(r.res, "sandbox.level"), "contained", "stderr: %s", r.err);
  cr_assert_str_eq(jstr(r.res, "sandbox.limits.memory"), expected_mech());
  if (E.mode != MODE_PLAIN) {
    const char *out = jstr(r.res, "stdout");
    cr_assert(json_is_true(jget(r.res, "oom_killed")), "the tree was OOM-killed: %s", out);
    cr_assert_leq(count(out, "done"), 1, "at most one 40 MiB process survives: %s", out);
  }
  json_decref(r.res);
}

/* What ended the tree (kill_scope): a contained job's leftovers go with
 * its cgroup where there is one, else with the sweep of the agent's
 * descendants; a job that ends alone names none. */
ALL3(contained_kill_scope_names_what_ended_the_tree) {
  contained();
  package("\"processes\":16", "true\n");
  struct sbx_run r = run_agent("exec");
  cr_assert_str_eq(jstr(r.res, "sandbox.level"), "contained", "stderr: %s", r.err);
  cr_assert(json_is_null(jget(r.res, "kill_scope")), "nothing was left to kill");
  cr_assert_eq(json_integer_value(jget(r.res, "orphans_killed")), 0);
  json_decref(r.res);
  package("\"processes\":16", "setsid sleep 300 &\nsleep 0.2\n");
  r = run_agent("exec");
  cr_assert_str_eq(jstr(r.res, "sandbox.level"), "contained", "stderr: %s", r.err);
  cr_assert_str_eq(jstr(r.res, "kill_scope"), E.mode == MODE_PLAIN ? "descendants" : "cgroup");
  cr_assert_geq(json_integer_value(jget(r.res, "orphans_killed")), 1);
  json_decref(r.res);
}
