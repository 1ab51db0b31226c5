/* Places on Windows: paths as written (the profile directory, the system
 * drive for absolute paths), compared case-insensitively. A read-only
 * grant's secrets become deny ACEs for the AppContainer; that a grant
 * follows no junction or symbolic link is checked on handles when the
 * isolated plan anchors it (sandbox_windows.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat/win32.h"
#include "platform/windows/sandbox_windows.h"

int sandbox_os_place_add(const struct sandbox_os_probe *p, enum sandbox_place_base base,
                         const char *path, enum sandbox_place_use use,
                         struct sandbox_places *list) {
  (void)use; /* nothing is resolved here: a grant that does not exist fails at its anchoring */
  char *s = NULL;
  switch (base) {
  case SANDBOX_BASE_HOME:
    if (!p->home)
      return -ENOENT;
    if (asprintf(&s, "%s%s%s", p->home, path[0] ? "\\" : "", path) < 0)
      s = NULL;
    break;
  case SANDBOX_BASE_ROOT:
    s = win_system_path(path);
    break;
  case SANDBOX_BASE_HOST:
    s = strdup(path);
    break;
  }
  if (!s)
    return -ENOMEM;
  win_backslashes(s);
  return sandbox_places_push(list, s, NULL);
}

bool sandbox_os_place_within(const struct sandbox_place *inner, const struct sandbox_place *outer) {
  return sandbox_path_within(inner->path, outer->path, '\\', true);
}

void sandbox_os_place_free(struct sandbox_os_place *os) {
  (void)os; /* places are paths only here */
}
