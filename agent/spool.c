#include "agent/spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/bgsync.h"
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

/* Written and renamed into place now, synced on a side thread
 * (agent/bgsync.c), which drops the .running only once the result is
 * durable: until then a crash of the machine leaves the .running, and the
 * job is reported agent_restarted, never lost without a word. */
int agent_spool_put_result(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN],
                           const uint8_t *msg, size_t len) {
  char hex[CORDON_ID_HEX_SIZE], tmp[PATH_MAX], dst[PATH_MAX], running[PATH_MAX];
  cordon_id_to_hex(id, hex);
  spool_path(sp, hex, RUNNING_EXT, running, sizeof(running));
  spool_path(sp, hex, RESULT_EXT, dst, sizeof(dst));
  int r = snprintf(tmp, sizeof(tmp), "%s/.%s" RESULT_EXT ".tmp", sp->dir, hex) >= (int)sizeof(tmp)
              ? -ENAMETOOLONG
              : 0;
  int fd = -1;
  if (r == 0) {
    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      r = -errno;
  }
  if (r == 0)
    r = core_write_all(fd, msg, len);
  if (fd >= 0 && close(fd) < 0 && r == 0)
    r = -errno;
  if (r == 0 && rename(tmp, dst) < 0)
    r = -errno;
  if (r < 0) {
    unlink(tmp);
    unlink(running); /* the job is over either way */
    return r;
  }
  agent_bgsync_then_unlink(sp->dir, dst, running);
  return 0;
}

/* The .running too: acked before the side thread dropped it, the result
 * is the server's and the marker nobody's. */
void agent_spool_ack(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN]) {
  char hex[CORDON_ID_HEX_SIZE], path[PATH_MAX];
  cordon_id_to_hex(id, hex);
  spool_path(sp, hex, RESULT_EXT, path, sizeof(path));
  unlink(path);
  spool_path(sp, hex, RUNNING_EXT, path, sizeof(path));
  unlink(path);
}

bool agent_spool_has_result(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN]) {
  char hex[CORDON_ID_HEX_SIZE], path[PATH_MAX];
  cordon_id_to_hex(id, hex);
  spool_path(sp, hex, RESULT_EXT, path, sizeof(path));
  return access(path, F_OK) == 0;
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
    /* an empty .result is what a crash of the machine leaves of one
     * renamed into place but not yet synced: the job is an orphan */
    char result[PATH_MAX];
    struct stat st;
    spool_path(sp, hex, RESULT_EXT, result, sizeof(result));
    if (stat(result, &st) == 0 && st.st_size > 0)
      continue;
    fn(ctx, id);
  }
  closedir(d);
}

/* Is name ".<CORDON_ID_HEX_LEN characters><ext>.tmp" with a valid id?
 * The id into out_id. */
static bool is_tmp_of(const char *name, const char *ext, uint8_t out_id[CORDON_ID_LEN]) {
  size_t n = strlen(name), e = strlen(ext);
  if (n != 1 + CORDON_ID_HEX_LEN + e + 4 || name[0] != '.' ||
      strncmp(name + 1 + CORDON_ID_HEX_LEN, ext, e) != 0 || strcmp(name + n - 4, ".tmp") != 0)
    return false;
  char hex[CORDON_ID_HEX_SIZE];
  memcpy(hex, name + 1, CORDON_ID_HEX_LEN);
  hex[CORDON_ID_HEX_LEN] = '\0';
  return cordon_id_hex_valid(hex) && cordon_id_from_hex(hex, out_id) == 0;
}

int agent_spool_recover_temps(const struct agent_spool *sp) {
  DIR *d = opendir(sp->dir);
  if (!d)
    return 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (de->d_name[0] != '.' || len < 5 || strcmp(de->d_name + len - 4, ".tmp") != 0)
      continue;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", sp->dir, de->d_name);
    if (unlink(path) < 0)
      continue;
    n++;
    /* a .result.tmp: the rename did not happen, so its .running is still
     * there and makes the job an orphan; any other temp is nobody's. A
     * .running.tmp: the job was accepted (its id journaled) when the agent
     * died: a complete .running makes it an orphan, reported
     * agent_restarted */
    uint8_t id[CORDON_ID_LEN];
    if (is_tmp_of(de->d_name, RUNNING_EXT, id)) {
      char hex[CORDON_ID_HEX_SIZE], result[PATH_MAX], running[PATH_MAX];
      cordon_id_to_hex(id, hex);
      spool_path(sp, hex, RESULT_EXT, result, sizeof(result));
      spool_path(sp, hex, RUNNING_EXT, running, sizeof(running));
      if (access(result, F_OK) != 0 && access(running, F_OK) != 0)
        (void)agent_spool_mark_running(sp, id);
    }
  }
  closedir(d);
  return n;
}

int agent_spool_get_result(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN],
                           size_t max, uint8_t **out_msg, size_t *out_len) {
  char hex[CORDON_ID_HEX_SIZE], path[PATH_MAX];
  cordon_id_to_hex(id, hex);
  spool_path(sp, hex, RESULT_EXT, path, sizeof(path));
  char *buf;
  size_t len;
  int r = core_read_file(path, max, -EFBIG, "spool", &buf, &len, NULL);
  if (r < 0)
    return r;
  *out_msg = (uint8_t *)buf;
  *out_len = len;
  return 0;
}
