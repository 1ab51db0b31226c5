/* End-to-end tests of the Linux sandbox: the real cordon-agent binary runs
 * real packages under real bwrap, once with the agent as root (jobs run as
 * the job_user its config names) and once with the agent as an
 * unprivileged user (jobs run as that user). Each escape attempt must be
 * contained, and the result fields must say how. That user is a throw-away
 * account of each test (sbx_user_make), not the shared cordon-job or
 * cordon-test: with those, another test running at once took part of the
 * fork bomb's RLIMIT_NPROC (it counts every process of the uid) and
 * removed files planted in the home.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbx_harness.h"

struct env {
  bool as_user;      /* agent runs as u */
  struct sbx_user u; /* the job user (and in as_user, the agent's) */
  struct sbx_dirs d; /* temp dir, agent --config, package source dir */
  char home[256];    /* home of whoever runs the job */
  uid_t owner_uid;   /* who owns files the agent must write */
  gid_t owner_gid;
};

static struct env E;

static void agent_config(const char *json);

static void setup_env(bool as_user) {
  memset(&E, 0, sizeof(E));
  E.as_user = as_user;
  sbx_user_make(&E.u, as_user ? "cdnsbxu" : "cdnsbxj");
  snprintf(E.home, sizeof(E.home), "%s", E.u.home);
  E.owner_uid = as_user ? E.u.uid : 0;
  E.owner_gid = as_user ? E.u.gid : 0;
  sbx_dirs_make(&E.d, "/tmp/cordon-sbx-XXXXXX", E.owner_uid, E.owner_gid);
  agent_config("{}");
  /* a planted secret in the job user's home */
  xsystem("mkdir -p %s/.ssh && echo SECRET-KEY-MATERIAL > %s/.ssh/id_ed25519 && "
          "chmod 700 %s/.ssh && chmod 600 %s/.ssh/id_ed25519 && chown -R %s: %s/.ssh",
          E.home, E.home, E.home, E.home, E.u.name, E.home);
}

static void teardown_env(void) {
  xsystem("rm -rf %s", E.d.root);
  sbx_user_drop(&E.u);
}

static void setup_root(void) {
  setup_env(false);
}
static void setup_user(void) {
  setup_env(true);
}

/* The package: a manifest (JSON fragment of extra keys) and a script. */
static void package(const char *extra_manifest, const char *script) {
  char m[8192];
  snprintf(m, sizeof(m),
           "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]%s%s%s}",
           extra_manifest && strstr(extra_manifest, "timeout_s") ? "" : ",\"timeout_s\":20",
           extra_manifest && *extra_manifest ? "," : "", extra_manifest ? extra_manifest : "");
  sbx_package_files(&E.d, m, script);
}

/* CONFIG/config.json: json, an object; as root with E.u as its job_user
 * unless json names one. */
static void agent_config(const char *json) {
  char c[1024];
  const char *rest = json + 1; /* after the '{' */
  if (E.as_user || strstr(json, "\"job_user\""))
    snprintf(c, sizeof(c), "%s", json);
  else
    snprintf(c, sizeof(c), "{\"job_user\": \"%s\"%s%s", E.u.name, *rest == '}' ? "" : ",", rest);
  sbx_agent_config(&E.d, c);
}

/* Run `cordon-agent --config C exec PKG -- args` as root or E.u.
 * envs: extra "K=V" strings for the agent's environment. */
static struct sbx_run run_agent(const char *cmd, const char *const *args, const char *const *envs) {
  struct sbx_exec x =
      sbx_exec_of(&E.d, cmd, args, E.as_user ? E.u.name : NULL, E.as_user ? E.home : "/root");
  x.envs = envs;
  return sbx_run_agent(&x);
}

static struct sbx_run exec_pkg(const char *const *args) {
  return run_agent("exec", args, NULL);
}

static void assert_isolated_ok(struct sbx_run *r) {
  sbx_assert_ran(r, "isolated");
  cr_assert(json_is_null(jget(r->res, "sandbox.downgrade_reason")));
}

static void assert_refused(struct sbx_run *r, const char *code) {
  sbx_assert_refused(r, code);
  cr_assert(strstr(r->err, code), "stderr names the code: %s", r->err);
}

/* Each behaviour is a function run twice: agent as root and as a user. */
#define BOTH(name) SBX_BOTH(sandbox_root, sandbox_user, name)

/* ---- positive cases ---- */

BOTH(runs_sh_as_the_job_user_with_package_and_workspace) {
  package(NULL, "echo \"uid=$(id -u) pwd=$PWD pkg=$PACKAGE ws=$WORKSPACE args=$*\"\n"
                "echo data > \"$WORKSPACE/f\" && cat \"$WORKSPACE/f\"\n"
                "touch \"$PACKAGE/x\" 2>/dev/null && echo PKG-WRITABLE\n"
                "exit 0\n");
  const char *args[] = {"a", "b c", NULL};
  struct sbx_run r = exec_pkg(args);
  assert_isolated_ok(&r);
  cr_assert_eq(r.status, 0);
  char want[256];
  snprintf(want, sizeof(want),
           "uid=%u pwd=/cordon/package pkg=/cordon/package "
           "ws=/cordon/workspace args=a b c\ndata\n",
           E.u.uid);
  cr_assert_str_eq(out_of(&r), want);
  cr_assert_eq(json_integer_value(jget(r.res, "exit_code")), 0);
  json_decref(r.res);
}

BOTH(runs_python3) {
  package(NULL, "exec python3 -c 'import sys; print(sum(range(10)), sys.version_info[0])'\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  cr_assert_str_eq(out_of(&r), "45 3\n");
  json_decref(r.res);
}

BOTH(reports_exit_code_and_exit_status_1) {
  package(NULL, "echo oops >&2; exit 7\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  cr_assert_eq(r.status, 1);
  cr_assert_eq(json_integer_value(jget(r.res, "exit_code")), 7);
  cr_assert_str_eq(sbx_jstr(r.res, "stderr"), "oops\n");
  json_decref(r.res);
}

BOTH(a_read_grant_really_grants_and_a_write_grant_writes) {
  xsystem(
      "mkdir -p %s/data/in %s/data/out && echo granted > %s/data/in/file && chown -R %s: %s/data",
      E.home, E.home, E.home, E.u.name, E.home);
  package("\"capabilities\":{\"fs\":[{\"path\":\"~/data/in\",\"access\":\"ro\"},"
          "{\"path\":\"~/data/out\",\"access\":\"rw\"}]}",
          "cat ~/data/in/file; echo written > ~/data/out/new && echo W-OK;"
          " echo x > ~/data/in/nope 2>/dev/null || echo RO-DENIED\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  cr_assert_str_eq(out_of(&r), "granted\nW-OK\nRO-DENIED\n");
  char p[512];
  snprintf(p, sizeof(p), "%s/data/out/new", E.home);
  cr_assert(access(p, F_OK) == 0, "the rw grant reached the host");
  snprintf(p, sizeof(p), "%s/data/in/nope", E.home);
  cr_assert(access(p, F_OK) != 0);
  json_decref(r.res);
}

static int listen_tcp(int *out_port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert(bind(s, (struct sockaddr *)&a, sizeof(a)) == 0);
  socklen_t l = sizeof(a);
  getsockname(s, (struct sockaddr *)&a, &l);
  cr_assert(listen(s, 8) == 0);
  *out_port = ntohs(a.sin_port);
  return s;
}

static const char *py_connect =
    "exec python3 -c '\n"
    "import socket,sys\n"
    "try:\n"
    "  s=socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), timeout=3); "
    "print(\"CONNECTED\")\n"
    "except Exception as e: print(\"BLOCKED\", type(e).__name__)\n' \"$1\"\n";

BOTH(net_true_reaches_a_loopback_listener) {
  int port, s = listen_tcp(&port);
  package("\"capabilities\":{\"net\":true}", py_connect);
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  const char *args[] = {ps, NULL};
  struct sbx_run r = exec_pkg(args);
  assert_isolated_ok(&r);
  cr_assert_str_eq(out_of(&r), "CONNECTED\n");
  close(s);
  json_decref(r.res);
}

/* ---- containment ---- */

BOTH(tcp_without_net_is_blocked) {
  int port, s = listen_tcp(&port);
  package(NULL, py_connect);
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  const char *args[] = {ps, NULL};
  struct sbx_run r = exec_pkg(args);
  assert_isolated_ok(&r);
  cr_assert(strncmp(out_of(&r), "BLOCKED", 7) == 0, "got: %s", out_of(&r));
  close(s);
  json_decref(r.res);
}

BOTH(a_read_grant_of_the_home_is_too_broad) {
  package("\"capabilities\":{\"fs\":[{\"path\":\"~\",\"access\":\"ro\"}]}", "true\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_refused(&r, "scope_too_broad");
  json_decref(r.res);
}

BOTH(planted_ssh_key_and_etc_shadow_are_unreadable) {
  package(NULL, "cat ~/.ssh/id_ed25519 2>&1; ls -a ~/.ssh 2>&1; echo ---; cat /etc/shadow 2>&1;"
                " echo ---; cat /etc/gshadow 2>&1; echo END\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  const char *o = out_of(&r);
  cr_assert(!strstr(o, "SECRET-KEY-MATERIAL"), "key leaked: %s", o);
  cr_assert(!strstr(o, "root:"), "shadow leaked: %s", o);
  cr_assert(!strstr(o, "id_ed25519\n"), "the .ssh listing must be empty: %s", o);
  cr_assert(strstr(o, "END"));
  json_decref(r.res);
}

BOTH(agent_state_dir_is_blinded_inside_a_granted_parent) {
  /* the agent's config dir lives inside the granted tree */
  char cfg[280];
  snprintf(cfg, sizeof(cfg), "%.250s/data/agentstate", E.home);
  xsystem("mkdir -p %s && echo AGENT-IDENTITY > %s/identity.key && chown -R %s: %s/data", cfg, cfg,
          E.u.name, E.home);
  snprintf(E.d.config, sizeof(E.d.config), "%s", cfg);
  agent_config("{}");
  package("\"capabilities\":{\"fs\":[{\"path\":\"~/data\",\"access\":\"ro\"}]}",
          "cat ~/data/agentstate/identity.key 2>&1; echo END\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  cr_assert(!strstr(out_of(&r), "AGENT-IDENTITY"), "state leaked: %s", out_of(&r));
  json_decref(r.res);
}

BOTH(a_grant_of_a_symlink_into_ssh_is_refused) {
  xsystem("ln -sfn %s/.ssh %s/sshlink", E.home, E.home);
  package("\"capabilities\":{\"fs\":[{\"path\":\"~/sshlink\",\"access\":\"ro\"}]}",
          "touch /cordon/workspace/RAN; echo RAN\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_refused(&r, "capability_denied");
  json_decref(r.res);
}

BOTH(a_symlink_inside_a_grant_does_not_reach_ssh) {
  xsystem(
      "mkdir -p %s/proj && ln -sfn %s/.ssh/id_ed25519 %s/proj/key && ln -sfn ../.ssh %s/proj/dir"
      " && chown -R %s: %s/proj",
      E.home, E.home, E.home, E.home, E.u.name, E.home);
  package("\"capabilities\":{\"fs\":[{\"path\":\"~/proj\",\"access\":\"ro\"}]}",
          "cat ~/proj/key 2>&1; cat ~/proj/dir/id_ed25519 2>&1; echo END\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  cr_assert(!strstr(out_of(&r), "SECRET-KEY-MATERIAL"), "key leaked: %s", out_of(&r));
  json_decref(r.res);
}

BOTH(writing_bashrc_through_a_writable_home_grant_is_refused) {
  package("\"capabilities\":{\"fs\":[{\"path\":\"~\",\"access\":\"rw\"}]}",
          "echo evil >> ~/.bashrc\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_refused(&r, "scope_too_broad");
  json_decref(r.res);
}

BOTH(a_grant_of_dot_config_needs_the_ceiling_and_writable_is_refused) {
  xsystem("mkdir -p %s/.config && chown %s: %s/.config", E.home, E.u.name, E.home);
  package("\"capabilities\":{\"fs\":[{\"path\":\"~/.config\",\"access\":\"rw\"}]}", "true\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_refused(&r, "capability_denied");
  json_decref(r.res);
  /* named by the ceiling, it is still refused writable: autorun places */
  agent_config("{\"grant_roots\":[\"~\",\"~/.config\"]}");
  r = exec_pkg(NULL);
  assert_refused(&r, "scope_too_broad");
  json_decref(r.res);
}

BOTH(git_hooks_stay_read_only_inside_a_writable_grant) {
  xsystem("mkdir -p %s/proj/.git/hooks && chown -R %s: %s/proj", E.home, E.u.name, E.home);
  package("\"capabilities\":{\"fs\":[{\"path\":\"~/proj\",\"access\":\"rw\"}]}",
          "echo ok > ~/proj/file && echo FILE-OK; echo evil > ~/proj/.git/hooks/pre-commit 2>&1"
          " || echo HOOK-DENIED\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  cr_assert(strstr(out_of(&r), "FILE-OK") && strstr(out_of(&r), "HOOK-DENIED"), "got %s",
            out_of(&r));
  char p[512];
  snprintf(p, sizeof(p), "%s/proj/.git/hooks/pre-commit", E.home);
  cr_assert(access(p, F_OK) != 0);
  json_decref(r.res);
}

BOTH(writes_outside_grants_fail) {
  package(NULL, "for p in /usr/x /etc/x /x /cordon/package/x /cordon/x /var/x; do\n"
                "  (echo x > $p) 2>/dev/null && echo WROTE $p\n"
                "done; echo END\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  cr_assert_str_eq(out_of(&r), "END\n");
  cr_assert(access("/usr/x", F_OK) != 0 && access("/etc/x", F_OK) != 0);
  json_decref(r.res);
}

BOTH(host_unix_sockets_and_dirs_are_not_visible) {
  char sp[100];
  snprintf(sp, sizeof(sp), "%.80s/host.sock", E.d.root);
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof(a.sun_path), "%s", sp);
  cr_assert(bind(s, (struct sockaddr *)&a, sizeof(a)) == 0);
  chmod(sp, 0777);
  listen(s, 4);
  /* an abstract socket too: only a shared network namespace could reach it;
   * its name holds the pid (the namespace is the machine's: another run of
   * this test at once had the name, EADDRINUSE) */
  int s2 = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un b = {.sun_family = AF_UNIX};
  char an[64];
  int al = snprintf(an, sizeof(an), "cordon-test-abstract-%d", (int)getpid());
  memcpy(b.sun_path + 1, an, (size_t)al); /* sun_path[0] stays '\0' */
  cr_assert(bind(s2, (struct sockaddr *)&b, offsetof(struct sockaddr_un, sun_path) + 1 + al) == 0,
            "bind @%s: %s", an, strerror(errno));
  listen(s2, 4);
  package(NULL, "exec python3 -c '\n"
                "import socket,sys,os\n"
                "for addr in (sys.argv[1], \"\\0\" + sys.argv[2]):\n"
                "  try:\n"
                "    c=socket.socket(socket.AF_UNIX); c.connect(addr); print(\"REACHED\", addr)\n"
                "  except Exception as e: print(\"BLOCKED\")\n"
                "for d in "
                "(\"/run\",\"/var\",\"/home\",\"/root\",\"/tmp/"
                "\"+os.path.basename(os.path.dirname(sys.argv[1]))):\n"
                "  print(d, os.path.exists(d))\n' \"$1\" \"$2\"\n");
  const char *args[] = {sp, an, NULL};
  struct sbx_run r = exec_pkg(args);
  assert_isolated_ok(&r);
  const char *o = out_of(&r);
  cr_assert(!strstr(o, "REACHED"), "got %s", o);
  cr_assert(strstr(o, "/run False") && strstr(o, "/var False") && strstr(o, "/home False") &&
                strstr(o, "/root False"),
            "got %s", o);
  close(s);
  close(s2);
  json_decref(r.res);
}

BOTH(the_agent_environment_does_not_leak) {
  package("\"env\":{\"MINE\":\"visible\"}", "env | sort\n");
  const char *envs[] = {"CORDON_TEST_SECRET=hunter2", NULL};
  struct sbx_run r = run_agent("exec", NULL, envs);
  assert_isolated_ok(&r);
  cr_assert(!strstr(out_of(&r), "hunter2"), "leaked: %s", out_of(&r));
  cr_assert(strstr(out_of(&r), "MINE=visible"));
  json_decref(r.res);
}

static const char *py_syscalls =
    "exec python3 -c '\n"
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def t(name, rc):\n"
    "  print(name, \"OK\" if rc == 0 else \"DENIED\", ctypes.get_errno())\n"
    "t(\"ptrace\", libc.ptrace(0, 0, 0, 0))\n"
    "t(\"unshare_user\", libc.unshare(0x10000000))\n"
    "t(\"unshare_mount\", libc.unshare(0x00020000))\n"
    "t(\"clone_newuser\", libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0))\n"
    "t(\"mount\", libc.mount(b\"none\", b\"/tmp\", b\"tmpfs\", 0, None))\n"
    "t(\"bpf\", libc.syscall(321, 0, 0, 0))\n"
    "t(\"keyctl\", libc.syscall(250, 0, 0, 0, 0, 0))\n"
    "rc = libc.syscall(435, 0, 0)\n"
    "print(\"clone3\", ctypes.get_errno())\n"
    "'\n";

BOTH(ptrace_unshare_clone_newuser_mount_are_denied_with_eperm) {
  package(NULL, py_syscalls);
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  const char *o = out_of(&r);
  cr_assert(strstr(o, "ptrace DENIED 1\n"), "got %s", o);
  cr_assert(strstr(o, "unshare_user DENIED 1\n"), "got %s", o);
  cr_assert(strstr(o, "unshare_mount DENIED 1\n"), "got %s", o);
  cr_assert(strstr(o, "clone_newuser DENIED 1\n"), "got %s", o);
  cr_assert(strstr(o, "mount DENIED 1\n"), "got %s", o);
  cr_assert(strstr(o, "bpf DENIED 1\n"), "got %s", o);
  cr_assert(strstr(o, "keyctl DENIED 1\n"), "got %s", o);
  cr_assert(strstr(o, "clone3 38\n"), "clone3 gives ENOSYS: %s", o);
  json_decref(r.res);
}

/* Forks until it cannot (at most 200), then says how many children it got. */
static const char FORK_BOMB[] = "exec python3 -c '\n"
                                "import os, time, signal\n"
                                "kids = []\n"
                                "for i in range(200):\n"
                                "  try:\n"
                                "    pid = os.fork()\n"
                                "  except OSError:\n"
                                "    break\n"
                                "  if pid == 0:\n"
                                "    time.sleep(30); os._exit(0)\n"
                                "  kids.append(pid)\n"
                                "print(\"forked\", len(kids))\n"
                                "for k in kids: os.kill(k, signal.SIGKILL)\n"
                                "'\n";

BOTH(a_fork_bomb_hits_the_process_limit) {
  package("\"limits\":{\"processes\":8}", FORK_BOMB);
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  int forked = -1;
  cr_assert(sscanf(out_of(&r), "forked %d", &forked) == 1, "got %s / %s", out_of(&r),
            sbx_jstr(r.res, "stderr"));
  /* 8 processes in all: python itself plus at most 7 children */
  cr_assert(forked >= 1 && forked <= 7, "forked=%d", forked);
  json_decref(r.res);
}

/* Without a pids cgroup the limit is RLIMIT_NPROC, and a per-user agent's
 * uid runs the user's whole desktop: with 40 other processes of the job's
 * uid running, the job still starts and gets its 8, no more. */
BOTH(a_busy_uid_still_runs_its_job_within_its_process_limit) {
  pid_t others[40];
  int ready[2];
  cr_assert_eq(pipe(ready), 0);
  for (int i = 0; i < 40; i++) {
    others[i] = fork();
    cr_assert_geq(others[i], 0);
    if (others[i] == 0) {
      if (setgroups(0, NULL) < 0 || setgid(E.u.gid) < 0 || setuid(E.u.uid) < 0)
        _exit(127);
      (void)!write(ready[1], "u", 1); /* the uid's now */
      close(ready[1]);
      execl("/bin/sleep", "sleep", "60", (char *)NULL);
      _exit(127);
    }
  }
  close(ready[1]);
  char got[40];
  size_t n = 0;
  for (ssize_t k; n < sizeof(got) && (k = read(ready[0], got + n, sizeof(got) - n)) > 0;)
    n += (size_t)k;
  close(ready[0]);
  cr_assert_eq(n, sizeof(got), "40 processes of the job's uid run");
  package("\"limits\":{\"processes\":8}", FORK_BOMB);
  struct sbx_run r = exec_pkg(NULL);
  for (int i = 0; i < 40; i++) {
    kill(others[i], SIGKILL);
    waitpid(others[i], NULL, 0);
  }
  assert_isolated_ok(&r);
  int forked = -1;
  cr_assert(sscanf(out_of(&r), "forked %d", &forked) == 1, "got %s / %s", out_of(&r),
            sbx_jstr(r.res, "stderr"));
  cr_assert(forked >= 1 && forked <= 7, "forked=%d (limit by %s)", forked,
            sbx_jstr(r.res, "sandbox.limits.processes"));
  json_decref(r.res);
}

BOTH(memory_past_the_limit_is_stopped) {
  package("\"limits\":{\"memory_mb\":64}",
          "exec python3 -c 'b = bytearray(256 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096]); "
          "print(\"ALLOCATED\")'\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  cr_assert(!strstr(out_of(&r), "ALLOCATED"));
  cr_assert_neq(r.status, 0);
  const char *mem = sbx_jstr(r.res, "sandbox.limits.memory");
  if (strcmp(mem, "cgroup") == 0)
    cr_assert(json_is_true(jget(r.res, "oom_killed")), "cgroup OOM is reported");
  else
    cr_assert(strstr(sbx_jstr(r.res, "stderr"), "MemoryError"), "rlimit: %s",
              sbx_jstr(r.res, "stderr"));
  json_decref(r.res);
}

BOTH(tmp_is_capped_at_the_disk_limit) {
  package("\"limits\":{\"disk_mb\":4}",
          "dd if=/dev/zero of=/tmp/fill bs=1M count=16 2>/dev/null; stat -c %s /tmp/fill;"
          " dd if=/dev/zero of=$WORKSPACE/fill bs=1M count=16 2>/dev/null; stat -c %s "
          "$WORKSPACE/fill\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  long a = 0, b = 0;
  cr_assert(sscanf(out_of(&r), "%ld %ld", &a, &b) == 2, "got %s", out_of(&r));
  cr_assert(a <= 4L << 20 && b <= 4L << 20, "a=%ld b=%ld", a, b);
  cr_assert_str_eq(sbx_jstr(r.res, "sandbox.limits.disk"), "tmpfs");
  json_decref(r.res);
}

BOTH(output_past_the_limit_is_truncated) {
  package("\"limits\":{\"output_kb\":4}",
          "head -c 1000000 /dev/zero | tr '\\0' a; echo done >&2\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_isolated_ok(&r);
  cr_assert_eq(strlen(out_of(&r)), 4096);
  cr_assert(json_is_true(jget(r.res, "stdout_truncated")));
  cr_assert(json_is_false(jget(r.res, "stderr_truncated")));
  json_decref(r.res);
}

/* A job's processes are recognised by a unique sleep length. */
static bool marker_alive(const char *marker) {
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "pgrep -f '^(sh -c )?sleep %s' >/dev/null", marker);
  return system(cmd) == 0;
}

BOTH(timeout_kills_the_whole_tree_including_setsid_children) {
  char marker[64];
  snprintf(marker, sizeof(marker), "300.%d1", getpid());
  char script[512];
  snprintf(script, sizeof(script), "setsid sleep %s & (sh -c 'sleep %s' &) ; sleep %s\n", marker,
           marker, marker);
  package("\"timeout_s\":1", script);
  struct sbx_run r = exec_pkg(NULL);
  cr_assert(r.res, "stderr: %s", r.err);
  cr_assert(json_is_true(jget(r.res, "timed_out")));
  cr_assert_eq(r.status, 1);
  cr_assert_geq(json_integer_value(jget(r.res, "orphans_killed")), 2);
  usleep(200 * 1000);
  cr_assert(!marker_alive(marker), "a process of the job survived the timeout");
  json_decref(r.res);
}

/* ---- refusals and downgrades ---- */

BOTH(net_beyond_the_owner_ceiling_is_refused) {
  agent_config("{\"net\": false}");
  package("\"capabilities\":{\"net\":true}", "touch /cordon/workspace/x\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_refused(&r, "capability_denied");
  json_decref(r.res);
}

BOTH(a_grant_outside_the_grant_roots_is_refused) {
  package("\"capabilities\":{\"fs\":[{\"path\":\"/usr/share\",\"access\":\"ro\"}]}", "true\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_refused(&r, "capability_denied");
  json_decref(r.res);
}

BOTH(a_grant_of_root_is_too_broad) {
  agent_config("{\"grant_roots\": [\"/\"]}");
  package("\"capabilities\":{\"fs\":[{\"path\":\"/\",\"access\":\"ro\"}]}", "true\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_refused(&r, "scope_too_broad");
  json_decref(r.res);
}

BOTH(missing_bwrap_refuses_an_isolated_package) {
  agent_config("{\"bwrap_path\": \"/nonexistent/bwrap\"}");
  package(NULL, "echo RAN\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_refused(&r, "sandbox_unavailable");
  cr_assert_str_eq(sbx_jstr(r.res, "sandbox.level"), "contained");
  cr_assert_str_eq(sbx_jstr(r.res, "sandbox.downgrade_reason"), "bwrap_unavailable");
  json_decref(r.res);
}

BOTH(missing_bwrap_downgrades_to_contained_when_both_sides_allow) {
  agent_config("{\"bwrap_path\": \"/nonexistent/bwrap\", \"lowest_level\": \"contained\"}");
  package("\"min_sandbox\":\"contained\"",
          "echo \"uid=$(id -u)\"; echo x > \"$WORKSPACE/f\" && echo WS-OK\n");
  struct sbx_run r = exec_pkg(NULL);
  cr_assert(r.res, "stderr %s", r.err);
  cr_assert(json_is_null(jget(r.res, "error")), "%s", sbx_jstr(r.res, "error.message"));
  cr_assert_str_eq(sbx_jstr(r.res, "sandbox.level"), "contained");
  cr_assert_str_eq(sbx_jstr(r.res, "sandbox.downgrade_reason"), "bwrap_unavailable");
  char want[64];
  snprintf(want, sizeof(want), "uid=%u\nWS-OK\n", E.u.uid);
  cr_assert_str_eq(out_of(&r), want);
  cr_assert_eq(r.status, 0);
  json_decref(r.res);
}

BOTH(contained_mode_still_blocks_tcp_when_net_is_false) {
  agent_config("{\"bwrap_path\": \"/nonexistent/bwrap\", \"lowest_level\": \"contained\"}");
  int port, s = listen_tcp(&port);
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  package("\"min_sandbox\":\"contained\"", py_connect);
  const char *args[] = {ps, NULL};
  struct sbx_run r = exec_pkg(args);
  cr_assert(r.res);
  cr_assert_str_eq(sbx_jstr(r.res, "sandbox.level"), "contained");
  cr_assert(strncmp(out_of(&r), "BLOCKED", 7) == 0, "got %s", out_of(&r));
  close(s);
  json_decref(r.res);
}

BOTH(contained_timeout_kills_setsid_children) {
  agent_config("{\"bwrap_path\": \"/nonexistent/bwrap\", \"lowest_level\": \"contained\"}");
  char marker[64];
  snprintf(marker, sizeof(marker), "300.%d2", getpid());
  char script[512];
  snprintf(script, sizeof(script), "setsid sleep %s & (setsid sh -c 'sleep %s' &); sleep %s\n",
           marker, marker, marker);
  char extra[64];
  snprintf(extra, sizeof(extra), "\"min_sandbox\":\"contained\",\"timeout_s\":1");
  package(extra, script);
  struct sbx_run r = exec_pkg(NULL);
  cr_assert(r.res, "stderr %s", r.err);
  cr_assert(json_is_true(jget(r.res, "timed_out")));
  cr_assert_geq(json_integer_value(jget(r.res, "orphans_killed")), 2);
  usleep(200 * 1000);
  cr_assert(!marker_alive(marker), "a process of the job survived the timeout");
  json_decref(r.res);
}

Test(sandbox_root, a_missing_job_user_is_refused, .init = setup_root, .fini = teardown_env) {
  agent_config("{\"job_user\": \"cordon-no-such-user\"}");
  package(NULL, "echo RAN\n");
  struct sbx_run r = exec_pkg(NULL);
  assert_refused(&r, "job_user_missing");
  json_decref(r.res);
}

BOTH(an_invalid_manifest_exits_2_naming_the_field) {
  package("\"limits\":{\"memory_mb\":1}", "true\n");
  struct sbx_run r = exec_pkg(NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "limits.memory_mb"), "stderr: %s", r.err);
  cr_assert(!r.res, "no JSON for a malformed local input");
}

BOTH(explain_prints_the_bwrap_argv_and_seccomp_rules) {
  package(NULL, "true\n");
  struct sbx_run r = run_agent("explain", NULL, NULL);
  cr_assert_eq(r.status, 0, "stderr %s", r.err);
  cr_assert(r.res);
  cr_assert_str_eq(sbx_jstr(r.res, "level"), "isolated");
  json_t *argv = jget(r.res, "argv");
  cr_assert(json_array_size(argv) > 10);
  cr_assert(strstr(json_string_value(json_array_get(argv, 0)), "bwrap"));
  cr_assert(json_array_size(jget(r.res, "seccomp")) > 10);
  json_decref(r.res);
}
