/* Windows defaults: %ProgramData%\cordon, lowest level `contained`. */
#include <windows.h>

#include <knownfolders.h>
#include <objbase.h>
#include <shlobj.h>

#include <stdio.h>

#include "compat/win32.h"
#include "platform/paths.h"

int paths_agent_config_dir(char *out, size_t len) {
  PWSTR base = NULL;
  if (SHGetKnownFolderPath(&FOLDERID_ProgramData, KF_FLAG_DONT_VERIFY, NULL, &base) != S_OK) {
    CoTaskMemFree(base);
    return -ENOENT;
  }
  char *u = win_utf8(base);
  CoTaskMemFree(base);
  if (!u)
    return -ENOMEM;
  int n = snprintf(out, len, "%s\\cordon", u);
  free(u);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

enum sandbox_level paths_default_lowest_level(void) {
  return SANDBOX_LEVEL_CONTAINED;
}

const char *paths_platform_name(void) {
  return "windows";
}

unsigned paths_platform_bit(void) {
  return MANIFEST_PLATFORM_WINDOWS;
}
