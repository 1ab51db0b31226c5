/* The end of a job of `cordon-agent run` does not depend on the job
 * (docs/SECURITY.md, "The job's init"): the real agent against the
 * scripted server runs a real isolated job, as root (the job as a
 * throw-away job user) and as that user with no cgroup of its own (the
 * per-user agent a desktop runs), and the test rewrites the job's
 * namespace init from outside (tests/platform/init_harness.h) so that it
 * clears its parent-death signal and pauses. A cancel, a drain and a
 * kill -9 of the agent each still end the whole job.
 */
#include <errno.h>
#include <grp.h>
#include <jansson.h>
#include <pwd.h>

#include "../platform/init_harness.h"
#include "../platform/sbx_harness.h"
#include "scripted_server.h"

static struct {
  bool as_user;
  struct sbx_user u; /* the job user; in as_user also the agent's */
  char marker[64];
  char code[64]; /* the result's error code, once there is one */
  bool has_result, has_kill_scope;
  uint32_t kill_scope;
  pid_t init;
} T;

static bool on_msg(struct net_conn *c, const struct msg *m) {
  (void)c;
  if (m->type != MSG_RESULT)
    return false;
  T.has_result = true;
  snprintf(T.code, sizeof(T.code), "%s", m->result.has_error ? m->result.error.code : "");
  T.has_kill_scope = m->result.has_kill_scope;
  T.kill_scope = m->result.kill_scope;
  return false;
}

static void setup_env(bool as_user) {
  memset(&T, 0, sizeof(T));
  init_harness_skip_unless_able();
  T.as_user = as_user;
  sbx_user_make(&T.u, as_user ? "cdnriu" : "cdnrij");
  snprintf(T.marker, sizeof(T.marker), "3000.%d3", getpid());
  ss_setup("cordon-ri", on_msg);
  char path[300], json[256];
  snprintf(path, sizeof(path), "%s/config.json", S.cfg);
  if (as_user)
    snprintf(json, sizeof(json), "{}");
  else
    snprintf(json, sizeof(json), "{\"job_user\": \"%s\"}", T.u.name);
  write_file(path, json, 0644);
  if (as_user)
    xsystem("chown -R %s: %s", T.u.name, S.dir);
}

static void setup_root(void) {
  setup_env(false);
}
static void setup_user(void) {
  setup_env(true);
}

static void teardown_env(void) {
  ss_teardown();
  if (T.marker[0])
    xsystem("pkill -KILL -f '^sleep %s$' ; true", T.marker);
  sbx_user_drop(&T.u);
}

#define BOTH(name) SBX_BOTH(run_init_root, run_init_user, name)

/* `cordon-agent run --drain-timeout 1`, as root or as T.u (no cgroup is
 * delegated to it: it has none). */
static pid_t start(void) {
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int fd = open(S.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 2);
    if (T.as_user && (setgroups(0, NULL) < 0 || setgid(T.u.gid) < 0 || setuid(T.u.uid) < 0))
      _exit(125);
    setenv("HOME", T.as_user ? T.u.home : "/root", 1);
    execl(AGENT, AGENT, "--config", S.cfg, "run", "--drain-timeout", "1", (char *)NULL);
    _exit(127);
  }
  return pid;
}

static bool init_found(void) {
  T.init = find_init_now(S.agent);
  return T.init > 0;
}

static bool result_seen(void) {
  return T.has_result;
}

static bool job_gone(void) {
  return !worker_alive(T.marker) && kill(T.init, 0) < 0;
}

/* An agent running one job whose init the test has rewritten and which
 * now pauses for ever, its parent-death signal cleared; the job's id in
 * id. */
static void agent_with_a_rewritten_init(uint8_t id[16]) {
  char m[256], script[512];
  snprintf(m, sizeof(m),
           "{\"name\":\"ri\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
           "\"timeout_s\":60}");
  /* an orphan's exit wakes the init into the rewritten code */
  snprintf(script, sizeof(script),
           "sleep %s &\n"
           "until [ -e /cordon/workspace/patched ]; do sleep 0.05; done\n"
           "(sleep 0.2 &); sleep 100\n",
           T.marker);
  struct pkg p = make_package("ri", m, script);
  S.agent = start();
  cr_assert(spin(10000, connected), "%s", slurp(S.log));
  randombytes_buf(id, 16);
  send_job_id(&p, id);
  cr_assert(spin(20000, init_found), "the job did not start:\n%s", slurp(S.log));
  rewrite_init(T.init, -1, T.u.uid, T.u.gid);
  wait_paused(T.init);
}

BOTH(a_rewritten_init_ends_at_cancel) {
  uint8_t id[16];
  agent_with_a_rewritten_init(id);
  struct msg c = {.type = MSG_CANCEL};
  memcpy(c.cancel.job_id, id, 16);
  send_msg(S.conn, &c);
  cr_assert(spin(10000, result_seen), "no result:\n%s", slurp(S.log));
  cr_assert(spin(3000, job_gone), "the job outlived its cancel");
  cr_assert_str_eq(T.code, "cancelled");
  cr_assert(T.has_kill_scope && T.kill_scope == 1, "kill_scope: the pid namespace");
}

BOTH(a_rewritten_init_ends_when_the_agent_drains) {
  uint8_t id[16];
  agent_with_a_rewritten_init(id);
  kill(S.agent, SIGTERM); /* the job is cancelled after --drain-timeout 1 */
  /* the session ends first: the result is the spool's, the log says it */
  cr_assert_eq(wait_exit(S.agent, 10000), 0, "%s", slurp(S.log));
  S.agent = 0;
  cr_assert(log_has("code=agent_stopped"), "%s", slurp(S.log));
  cr_assert(spin(3000, job_gone), "the job outlived the agent's stop");
}

BOTH(a_rewritten_init_ends_when_the_agent_is_killed) {
  uint8_t id[16];
  agent_with_a_rewritten_init(id);
  kill(S.agent, SIGKILL);
  waitpid(S.agent, NULL, 0);
  S.agent = 0;
  cr_assert(spin(3000, job_gone), "the job outlived its agent");
}
