#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "platform/paths.h"

/* ~/Library/Application Support/cordon for a user's agent. An agent run as
 * root uses /Library/Application Support/cordon: root's home (/var/root)
 * is not searchable by the job user, who must reach the staged package,
 * and `sudo` keeps the caller's HOME on macOS. */
int paths_agent_config_dir(char *out, size_t len) {
  int n;
  if (geteuid() == 0) {
    n = snprintf(out, len, "/Library/Application Support/cordon");
  } else {
    const char *home = getenv("HOME");
    if (!home || home[0] != '/') {
      struct passwd *pw = getpwuid(getuid());
      if (!pw || !pw->pw_dir || pw->pw_dir[0] != '/')
        return -ENOENT;
      home = pw->pw_dir;
    }
    n = snprintf(out, len, "%s/Library/Application Support/cordon", home);
  }
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* macOS has no isolation cordon can use: the owner's default accepts
 * `none`, and a package still needs min_sandbox "none" to run here. */
enum sandbox_level paths_default_lowest_level(void) {
  return SANDBOX_LEVEL_NONE;
}

const char *paths_platform_name(void) {
  return "macos";
}

unsigned paths_platform_bit(void) {
  return MANIFEST_PLATFORM_MACOS;
}

void paths_os_version(char *out, size_t len) {
  struct utsname u;
  if (uname(&u) == 0)
    snprintf(out, len, "%s %s", u.sysname, u.release);
  else
    snprintf(out, len, "unknown");
}
