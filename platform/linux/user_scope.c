#include "platform/linux/user_scope.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/magic.h>

#include "platform/linux/cgroup.h"

static const char *const systemd_run_paths[] = {"/usr/bin/systemd-run", "/bin/systemd-run"};

enum user_scope_choice user_scope_decide(const struct user_scope_facts *f, const char **out_why) {
  const char *why;
  enum user_scope_choice c = USER_SCOPE_UNAVAILABLE;
  if (f->agent_is_root) {
    why = "the agent is root: it makes its own cgroups";
    c = USER_SCOPE_NOT_NEEDED;
  } else if (f->has_cgroup) {
    why = "the agent may make job cgroups already (a delegated unit)";
    c = USER_SCOPE_NOT_NEEDED;
  } else if (f->in_scope) {
    why = "in a user scope already, and still no cgroup could be made there";
  } else if (f->unit_main) {
    why = "the agent is a systemd unit's main process: give the unit Delegate=yes (service "
          "install --user does)";
  } else if (!f->unified) {
    why = "no cgroup v2 hierarchy: a user manager delegates nothing here";
  } else if (!f->manager) {
    why = "no systemd user manager runs for this user";
  } else if (!f->systemd_run) {
    why = "systemd-run is missing";
  } else {
    why = "a delegated systemd user scope";
    c = USER_SCOPE_ENTER;
  }
  if (out_why)
    *out_why = why;
  return c;
}

int user_scope_manager_socket(const char *runtime_dir, char *buf, size_t len) {
  int n = runtime_dir && runtime_dir[0]
              ? snprintf(buf, len, "%s/systemd/private", runtime_dir)
              : snprintf(buf, len, "/run/user/%u/systemd/private", (unsigned)getuid());
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static const char *systemd_run_path(void) {
  for (size_t i = 0; i < sizeof(systemd_run_paths) / sizeof(systemd_run_paths[0]); i++)
    if (access(systemd_run_paths[i], X_OK) == 0)
      return systemd_run_paths[i];
  return NULL;
}

/* Is the parent a systemd (system or user manager)? */
static bool parent_is_systemd(void) {
  char path[64], comm[32] = "";
  snprintf(path, sizeof(path), "/proc/%ld/comm", (long)getppid());
  FILE *f = fopen(path, "re");
  if (!f)
    return false;
  if (!fgets(comm, sizeof(comm), f))
    comm[0] = '\0';
  fclose(f);
  comm[strcspn(comm, "\n")] = '\0';
  return strcmp(comm, "systemd") == 0;
}

void user_scope_facts_read(const char *runtime_dir, struct user_scope_facts *out) {
  struct cgroup_avail cg = {0};
  if (geteuid() != 0) /* root needs no look */
    cgroup_available(&cg);
  struct statfs sf;
  struct stat st;
  char sock[4096];
  *out = (struct user_scope_facts){
      .agent_is_root = geteuid() == 0,
      .has_cgroup = cg.memory && cg.pids,
      .in_scope = getenv(USER_SCOPE_ENV) != NULL,
      .unit_main = parent_is_systemd(),
      .unified = statfs("/sys/fs/cgroup", &sf) == 0 && (long)sf.f_type == CGROUP2_SUPER_MAGIC,
      /* the socket systemd-run --user connects to first; a manager of
       * another user (a stale XDG_RUNTIME_DIR after su) is no use */
      .manager = user_scope_manager_socket(runtime_dir, sock, sizeof(sock)) == 0 &&
                 lstat(sock, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == getuid(),
      .systemd_run = systemd_run_path() != NULL,
  };
}

int user_scope_argv(const char *systemd_run, const char *self, int argc, char *const *argv,
                    struct strv *out) {
  strv_addv(out, systemd_run, "--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes",
            "--", self, NULL);
  for (int i = 1; i < argc; i++)
    strv_add(out, argv[i]);
  return out->err;
}

/* systemd-run ... /bin/true: does the manager make a delegated scope for
 * us? At most 5 s; the agent's stdio is not touched. */
static bool scope_trial(const char *systemd_run) {
  pid_t pid = fork();
  if (pid < 0)
    return false;
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
    }
    execl(systemd_run, systemd_run, "--user", "--scope", "--quiet", "--collect", "-p",
          "Delegate=yes", "--", "/bin/true", (char *)NULL);
    _exit(127);
  }
  int st = -1;
  for (int i = 0; i < 500; i++) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid)
      return WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (w < 0 && errno != EINTR)
      return false;
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return false;
}

int user_scope_enter(int argc, char *const *argv, const char **out_why) {
  const char *rt = getenv("XDG_RUNTIME_DIR");
  struct user_scope_facts f;
  user_scope_facts_read(rt, &f);
  if (user_scope_decide(&f, out_why) != USER_SCOPE_ENTER)
    return 0;
  const char *run = systemd_run_path();
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (!run || n <= 0 || (size_t)n >= sizeof(self) - 1) {
    *out_why = "the agent's own executable cannot be named";
    return 0;
  }
  self[n] = '\0';
  /* systemd-run --user finds the manager through XDG_RUNTIME_DIR */
  char dir[64];
  if (!rt || !rt[0]) {
    snprintf(dir, sizeof(dir), "/run/user/%u", (unsigned)getuid());
    setenv("XDG_RUNTIME_DIR", dir, 1);
  }
  /* never asked twice, whatever happens next */
  setenv(USER_SCOPE_ENV, "1", 1);
  if (!scope_trial(run)) {
    *out_why = "the user manager made no scope (systemd-run --user --scope failed)";
    return 0;
  }
  struct strv a;
  strv_init(&a);
  int r = user_scope_argv(run, self, argc, argv, &a);
  if (r == 0) {
    execv(run, a.v);
    r = -errno;
    *out_why = "systemd-run could not be executed";
  }
  strv_release(&a);
  return r;
}
