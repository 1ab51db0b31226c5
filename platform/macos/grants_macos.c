/* Places on macOS (level none): grants and roots are compared by their
 * real paths (symlinks followed once, by realpath), secrets and names as
 * written below the home's real path. Nothing is hidden from a job at
 * level none: the grant rules only bound what a package may ask for. */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/macos/sandbox_macos.h"

int sandbox_os_place_add(const struct sandbox_os_probe *p, enum sandbox_place_base base,
                         const char *path, enum sandbox_place_use use,
                         struct sandbox_places *list) {
  char home[PATH_MAX], full[PATH_MAX], real[PATH_MAX];
  int n;
  if (base == SANDBOX_BASE_HOME) {
    if (!realpath(p->user.u.home, home))
      snprintf(home, sizeof(home), "%s", p->user.u.home);
    n = path[0] ? snprintf(full, sizeof(full), "%s/%s", home, path)
                : snprintf(full, sizeof(full), "%s", home);
  } else {
    n = snprintf(full, sizeof(full), "%s", path);
  }
  if (n < 0 || (size_t)n >= sizeof(full))
    return -ENAMETOOLONG;
  if (use == SANDBOX_PLACE_GRANT && !realpath(full, real))
    return -errno;
  if (use == SANDBOX_PLACE_SECRET && strchr(full, '*')) {
    glob_t g;
    int r = 0;
    if (glob(full, 0, NULL, &g) != 0)
      return 0;
    for (size_t i = 0; i < g.gl_pathc && r == 0; i++) {
      char *copy = strdup(g.gl_pathv[i]);
      r = copy ? sandbox_places_push(list, copy, NULL) : -ENOMEM;
    }
    globfree(&g);
    return r;
  }
  char *copy = strdup(use == SANDBOX_PLACE_GRANT ? real : full);
  return copy ? sandbox_places_push(list, copy, NULL) : -ENOMEM;
}

bool sandbox_os_place_within(const struct sandbox_place *inner, const struct sandbox_place *outer) {
  return sandbox_path_within(inner->path, outer->path, '/', false);
}

void sandbox_os_place_free(struct sandbox_os_place *os) {
  (void)os; /* places are paths only here */
}
