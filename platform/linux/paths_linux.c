#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "platform/paths.h"

int paths_agent_config_dir(char *out, size_t len) {
  int n;
  if (geteuid() == 0) {
    n = snprintf(out, len, "/var/lib/cordon-agent");
  } else {
    const char *xdg = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");
    if (xdg && xdg[0] == '/')
      n = snprintf(out, len, "%s/cordon-agent", xdg);
    else if (home && home[0] == '/')
      n = snprintf(out, len, "%s/.local/state/cordon-agent", home);
    else {
      struct passwd *pw = getpwuid(getuid());
      if (!pw)
        return -ENOENT;
      n = snprintf(out, len, "%s/.local/state/cordon-agent", pw->pw_dir);
    }
  }
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

enum sandbox_level paths_default_lowest_level(void) {
  return SANDBOX_LEVEL_ISOLATED;
}

const char *paths_platform_name(void) {
  return "linux";
}

unsigned paths_platform_bit(void) {
  return MANIFEST_PLATFORM_LINUX;
}

void paths_os_version(char *out, size_t len) {
  struct utsname u;
  if (uname(&u) == 0)
    snprintf(out, len, "%s %s", u.sysname, u.release);
  else
    snprintf(out, len, "unknown");
}
