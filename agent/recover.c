#include "agent/recover.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compat/posix.h"
#include "core/id.h"
#include "platform/fs.h"

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

int agent_recover_staging(const char *config_dir, const struct agent_spool *sp) {
  char jobs[PATH_MAX];
  if (snprintf(jobs, sizeof(jobs), "%s/jobs", config_dir) >= (int)sizeof(jobs))
    return 0;
  DIR *d = opendir(jobs);
  if (!d)
    return 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
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
