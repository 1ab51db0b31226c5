/* libFuzzer target for the reading of /proc/self/cgroup
 * (cgroup_parse_self, platform/linux/cgroup.c): text the kernel writes,
 * but whose paths name cgroups that processes of other users may create.
 *
 * The parser must never read past the text's end, and what it accepts is
 * a path the mount can show: "" or absolute, no "." or ".." component,
 * no " (deleted)" end, shorter than out, and found in the text after a
 * "0::" (v2) or a controller list naming the controller. A refusal
 * leaves out untouched. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "platform/linux/cgroup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      abort();                                                                                     \
  } while (0)

static void check_one(const char *text, const char *ctrl, size_t len) {
  char out[64];
  memset(out, 'u', sizeof(out));
  int r = cgroup_parse_self(text, ctrl, out, len);
  if (r != 0) {
    CHECK(r == -ENOENT || r == -EINVAL || r == -ENAMETOOLONG);
    for (size_t i = 0; i < sizeof(out); i++)
      CHECK(out[i] == 'u');
    return;
  }
  size_t n = strnlen(out, len);
  CHECK(n < len);
  CHECK(n == 0 || out[0] == '/');
  CHECK(strstr(out, "/./") == NULL && strstr(out, "/../") == NULL);
  CHECK(n < 2 || strcmp(out + n - 2, "/.") != 0);
  CHECK(n < 3 || strcmp(out + n - 3, "/..") != 0);
  CHECK(n < 10 || strcmp(out + n - 10, " (deleted)") != 0);
  CHECK(strchr(out, '\n') == NULL);
  CHECK(n == 0 || strstr(text, out) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* an exact-size, NUL-terminated copy, so that ASan sees any read past
   * the end; a NUL inside ends the text early, as it would the file's */
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  static const char *const ctrls[] = {NULL, "memory", "cpuacct", "pids"};
  for (size_t i = 0; i < sizeof(ctrls) / sizeof(ctrls[0]); i++) {
    check_one(text, ctrls[i], 64);
    check_one(text, ctrls[i], 8);
    check_one(text, ctrls[i], 1);
  }
  free(text);
  return 0;
}
