#include "agent/seen.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/bgsync.h"
#include "compat/posix.h"
#include "core/file.h"
#include "platform/fs.h"

/* an entry is one decimal u64 and a newline */
#define SEEN_ENTRY_MAX 32

int agent_seen_init(struct agent_seen *s, const char *config_dir) {
  snprintf(s->dir, sizeof(s->dir), "%s/seen", config_dir);
  return fs_mkdir_p(s->dir, 0700);
}

/* The entry is visible at once (the replay check of the next job sees
 * it) and synced by a short-lived thread while the job goes on: a crash
 * before that sync can forget the id only together with the session its
 * ticket is bound to, and a ticket of a dead session is refused anyway
 * (docs/ARCHITECTURE.md, "Durable writes"). */
int agent_seen_check_and_add(const struct agent_seen *s, const uint8_t id[CORDON_ID_LEN],
                             uint64_t expires_ms) {
  char hex[CORDON_ID_HEX_SIZE], path[PATH_MAX];
  cordon_id_to_hex(id, hex);
  snprintf(path, sizeof(path), "%s/%s", s->dir, hex);
  /* O_EXCL: the check and the add are one step */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return errno == EEXIST ? CORDON_E_TICKET_REPLAYED : -errno;
  char text[SEEN_ENTRY_MAX];
  int n = snprintf(text, sizeof(text), "%" PRIu64 "\n", expires_ms);
  int r = core_write_all(fd, text, (size_t)n);
  close(fd);
  if (r < 0) {
    unlink(path); /* a torn entry would be kept for ever */
    return r;
  }
  agent_bgsync(s->dir, path);
  return 0;
}

void agent_seen_prune(const struct agent_seen *s, int64_t now_ms) {
  DIR *d = opendir(s->dir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.')
      continue;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", s->dir, de->d_name);
    char *text;
    size_t len;
    unsigned long long exp = 0;
    if (core_read_file(path, SEEN_ENTRY_MAX, -EFBIG, "seen", &text, &len, NULL) == 0) {
      if (sscanf(text, "%llu", &exp) != 1)
        exp = 0;
      free(text);
    }
    if (exp && (int64_t)exp < now_ms - AGENT_SEEN_GRACE_MS)
      unlink(path);
  }
  closedir(d);
}

void agent_seen_recover_temps(const struct agent_seen *s,
                              void (*fn)(void *ctx, const uint8_t id[CORDON_ID_LEN]), void *ctx) {
  DIR *d = opendir(s->dir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (de->d_name[0] != '.' || len < 5 || strcmp(de->d_name + len - 4, ".tmp") != 0)
      continue;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", s->dir, de->d_name);
    if (unlink(path) < 0)
      continue;
    char hex[CORDON_ID_HEX_SIZE];
    uint8_t id[CORDON_ID_LEN];
    if (len != 1 + CORDON_ID_HEX_LEN + 4)
      continue;
    memcpy(hex, de->d_name + 1, CORDON_ID_HEX_LEN);
    hex[CORDON_ID_HEX_LEN] = '\0';
    if (cordon_id_hex_valid(hex) && cordon_id_from_hex(hex, id) == 0 && fn)
      fn(ctx, id);
  }
  closedir(d);
}
