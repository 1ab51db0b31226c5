#include "agent/recover.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compat/posix.h"
#include "core/id.h"
#include "platform/daemon.h"
#include "platform/fs.h"
#include "platform/sandbox.h"

struct temps {
  const struct agent_spool *sp;
  int n;
};

static void accepted_not_spooled(void *ctx, const uint8_t id[CORDON_ID_LEN]) {
  struct temps *t = ctx;
  t->n++;
  (void)agent_spool_mark_running(t->sp, id);
}

int agent_recover_temps(const struct agent_spool *sp, const struct agent_seen *seen) {
  struct temps t = {.sp = sp};
  agent_seen_recover_temps(seen, accepted_not_spooled, &t);
  return t.n + agent_spool_recover_temps(sp);
}

/* Does the directory at dirfd/name hold nothing but empty directories
 * (at most depth levels down)? */
static bool only_empty_dirs(int parent, const char *name, int depth) {
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return false;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return false;
  }
  bool empty = true;
  struct dirent *de;
  while (empty && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    /* a directory opens as one (never through a link); anything else is not empty */
    empty = depth > 0 && only_empty_dirs(dirfd(d), de->d_name, depth - 1);
  }
  closedir(d);
  return empty;
}

int agent_recover_sandbox(const char *config_dir) {
  int n = sandbox_sweep_leftovers(config_dir);
  return n > 0 ? n : 0;
}

/* CONFIG/jobs/exec-*: made before `started` and its exec gone. */
static bool exec_dir_stale(const char *jobs, const char *name, time_t started) {
  char dir[PATH_MAX];
  struct stat st;
  if (snprintf(dir, sizeof(dir), "%s/%s", jobs, name) >= (int)sizeof(dir) || stat(dir, &st) < 0 ||
      !S_ISDIR(st.st_mode) || st.st_mtime >= started)
    return false;
  struct daemon_lock *lock = NULL;
  if (daemon_lock_take(dir, AGENT_EXEC_LOCK, &lock) < 0)
    return false; /* held: the exec runs */
  daemon_lock_release(lock);
  return true;
}

int agent_recover_staging(const char *config_dir, const struct agent_spool *sp) {
  char jobs[PATH_MAX];
  if (snprintf(jobs, sizeof(jobs), "%s/jobs", config_dir) >= (int)sizeof(jobs))
    return 0;
  DIR *d = opendir(jobs);
  if (!d)
    return 0;
  int n = 0;
  time_t started = time(NULL);
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "exec-", 5) == 0) {
      if (exec_dir_stale(jobs, de->d_name, started) && fs_remove_tree_at(dirfd(d), de->d_name) == 0)
        n++;
      continue;
    }
    if (!cordon_id_hex_valid(de->d_name))
      continue;
    uint8_t id[CORDON_ID_LEN];
    if (cordon_id_from_hex(de->d_name, id) < 0)
      continue;
    if (!agent_spool_has_result(sp, id) && !only_empty_dirs(dirfd(d), de->d_name, 2))
      continue;
    if (fs_remove_tree_at(dirfd(d), de->d_name) == 0)
      n++;
  }
  closedir(d);
  return n;
}
