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

/* RtlGetVersion: GetVersionEx lies to programs without a compatibility
 * manifest; ntdll's call does not. */
void paths_os_version(char *out, size_t len) {
  typedef LONG(WINAPI * rtl_get_version_fn)(OSVERSIONINFOW *);
  HMODULE ntdll = GetModuleHandleW(L"ntdll.dll");
  rtl_get_version_fn get =
      ntdll ? (rtl_get_version_fn)(void (*)(void))GetProcAddress(ntdll, "RtlGetVersion") : NULL;
  OSVERSIONINFOW v = {.dwOSVersionInfoSize = sizeof(v)};
  if (get && get(&v) == 0)
    snprintf(out, len, "Windows %lu.%lu.%lu", (unsigned long)v.dwMajorVersion,
             (unsigned long)v.dwMinorVersion, (unsigned long)v.dwBuildNumber);
  else
    snprintf(out, len, "unknown");
}
