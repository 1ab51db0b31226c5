#include "agent/spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compat/posix.h"
#include "core/file.h"
#include "platform/fs.h"

#define RUNNING_EXT ".running"
#define RESULT_EXT ".result"

/* SPOOL/<hex id><ext> into out (PATH_MAX). */
static void spool_path(const struct agent_spool *sp, const char *hex, const char *ext, char *out,
                       size_t n) {
  snprintf(out, n, "%s/%s%s", sp->dir, hex, ext);
}

int agent_spool_init(struct agent_spool *sp, const char *config_dir) {
  snprintf(sp->dir, sizeof(sp->dir), "%s/spool", config_dir);
  return fs_mkdir_p(sp->dir, 0700);
}

/* Not synced: the accept record is the seen entry (agent/seen.c). Lost in
 * a crash, the job ends on the server at its deadline (device_lost), an
 * explicit failure still; kept, it ends sooner as agent_restarted. */
int agent_spool_mark_running(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN]) {
  char hex[CORDON_ID_HEX_SIZE], path[PATH_MAX];
  cordon_id_to_hex(id, hex);
  spool_path(sp, hex, RUNNING_EXT, path, sizeof(path));
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return -errno;
  close(fd);
  return 0;
}

int agent_spool_put_result(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN],
                           const uint8_t *msg, size_t len) {
  char hex[CORDON_ID_HEX_SIZE], name[CORDON_ID_HEX_SIZE + sizeof(RESULT_EXT)];
  cordon_id_to_hex(id, hex);
  snprintf(name, sizeof(name), "%s" RESULT_EXT, hex);
  int r = core_write_file_atomic(sp->dir, name, msg, len, 0600);
  char running[PATH_MAX];
  spool_path(sp, hex, RUNNING_EXT, running, sizeof(running));
  unlink(running);
  return r;
}

void agent_spool_ack(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN]) {
  char hex[CORDON_ID_HEX_SIZE], path[PATH_MAX];
  cordon_id_to_hex(id, hex);
  spool_path(sp, hex, RESULT_EXT, path, sizeof(path));
  unlink(path);
}

/* Is name "<CORDON_ID_HEX_LEN characters><ext>"? */
static bool has_id_and_ext(const char *name, const char *ext) {
  return strlen(name) == CORDON_ID_HEX_LEN + strlen(ext) &&
         strcmp(name + CORDON_ID_HEX_LEN, ext) == 0;
}

void agent_spool_each_result(const struct agent_spool *sp, size_t max,
                             void (*fn)(void *ctx, const uint8_t *msg, size_t len), void *ctx) {
  DIR *d = opendir(sp->dir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!has_id_and_ext(de->d_name, RESULT_EXT))
      continue;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", sp->dir, de->d_name);
    char *buf;
    size_t len;
    if (core_read_file(path, max, -EFBIG, "spool", &buf, &len, NULL) < 0)
      continue;
    if (len > 0)
      fn(ctx, (const uint8_t *)buf, len);
    free(buf);
  }
  closedir(d);
}

void agent_spool_each_orphan(const struct agent_spool *sp,
                             void (*fn)(void *ctx, const uint8_t id[CORDON_ID_LEN]), void *ctx) {
  DIR *d = opendir(sp->dir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!has_id_and_ext(de->d_name, RUNNING_EXT))
      continue;
    char hex[CORDON_ID_HEX_SIZE];
    memcpy(hex, de->d_name, CORDON_ID_HEX_LEN);
    hex[CORDON_ID_HEX_LEN] = '\0';
    uint8_t id[CORDON_ID_LEN];
    if (!cordon_id_hex_valid(hex) || cordon_id_from_hex(hex, id) < 0)
      continue;
    char result[PATH_MAX];
    spool_path(sp, hex, RESULT_EXT, result, sizeof(result));
    if (access(result, F_OK) == 0)
      continue;
    fn(ctx, id);
  }
  closedir(d);
}
