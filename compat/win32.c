#include "compat/win32.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include <sddl.h>

wchar_t *win_wide(const char *utf8) {
  int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, utf8, -1, NULL, 0);
  if (n <= 0)
    return NULL;
  wchar_t *w = malloc((size_t)n * sizeof(wchar_t));
  if (!w)
    return NULL;
  if (MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, utf8, -1, w, n) != n) {
    free(w);
    return NULL;
  }
  return w;
}

char *win_utf8(const wchar_t *wide) {
  int n = WideCharToMultiByte(CP_UTF8, 0, wide, -1, NULL, 0, NULL, NULL);
  if (n <= 0)
    return NULL;
  char *s = malloc((size_t)n);
  if (!s)
    return NULL;
  if (WideCharToMultiByte(CP_UTF8, 0, wide, -1, s, n, NULL, NULL) != n) {
    free(s);
    return NULL;
  }
  return s;
}

int win_errno(DWORD err) {
  switch (err) {
  case ERROR_SUCCESS:
    return 0;
  case ERROR_FILE_NOT_FOUND:
  case ERROR_PATH_NOT_FOUND:
  case ERROR_INVALID_DRIVE:
  case ERROR_BAD_NETPATH:
  case ERROR_BAD_NET_NAME:
  case ERROR_MOD_NOT_FOUND:
  case ERROR_PROC_NOT_FOUND:
    return -ENOENT;
  case ERROR_ACCESS_DENIED:
  case ERROR_PRIVILEGE_NOT_HELD:
  case ERROR_WRITE_PROTECT:
  case ERROR_CANT_ACCESS_FILE:
    return -EACCES;
  case ERROR_SHARING_VIOLATION:
  case ERROR_LOCK_VIOLATION:
  case ERROR_BUSY:
    return -EBUSY;
  case ERROR_FILE_EXISTS:
  case ERROR_ALREADY_EXISTS:
    return -EEXIST;
  case ERROR_DIR_NOT_EMPTY:
    return -ENOTEMPTY;
  case ERROR_DIRECTORY:
    return -ENOTDIR;
  case ERROR_NOT_ENOUGH_MEMORY:
  case ERROR_OUTOFMEMORY:
  case ERROR_COMMITMENT_LIMIT:
    return -ENOMEM;
  case ERROR_FILENAME_EXCED_RANGE:
  case ERROR_BUFFER_OVERFLOW:
    return -ENAMETOOLONG;
  case ERROR_INVALID_NAME:
  case ERROR_INVALID_PARAMETER:
  case ERROR_BAD_PATHNAME:
  case ERROR_NO_UNICODE_TRANSLATION:
    return -EINVAL;
  case ERROR_DISK_FULL:
  case ERROR_HANDLE_DISK_FULL:
    return -ENOSPC;
  case ERROR_CALL_NOT_IMPLEMENTED:
  case ERROR_NOT_SUPPORTED:
    return -ENOSYS;
  case ERROR_CANT_RESOLVE_FILENAME:
    return -ELOOP;
  case ERROR_BROKEN_PIPE:
  case ERROR_NO_DATA:
    return -EPIPE;
  case ERROR_TIMEOUT:
  case WAIT_TIMEOUT:
    return -ETIMEDOUT;
  default:
    return -EIO;
  }
}

int win_last_err(void) {
  return win_errno(GetLastError());
}

wchar_t *win_handle_path(HANDLE h) {
  DWORD n = GetFinalPathNameByHandleW(h, NULL, 0, FILE_NAME_NORMALIZED | VOLUME_NAME_DOS);
  if (n == 0) {
    errno = -win_last_err();
    return NULL;
  }
  wchar_t *w = malloc(((size_t)n + 1) * sizeof(wchar_t));
  if (!w) {
    errno = ENOMEM;
    return NULL;
  }
  DWORD m = GetFinalPathNameByHandleW(h, w, n + 1, FILE_NAME_NORMALIZED | VOLUME_NAME_DOS);
  if (m == 0 || m > n) {
    errno = m == 0 ? -win_last_err() : EIO;
    free(w);
    return NULL;
  }
  /* "\\?\C:\x" -> "C:\x"; keep "\\?\UNC\..." and volume GUID paths whole */
  if (wcsncmp(w, L"\\\\?\\", 4) == 0 && w[4] && w[5] == L':')
    memmove(w, w + 4, (wcslen(w + 4) + 1) * sizeof(wchar_t));
  return w;
}

wchar_t *win_join(const wchar_t *dir, const char *name) {
  wchar_t *wn = win_wide(name);
  if (!wn)
    return NULL;
  size_t dl = wcslen(dir), nl = wcslen(wn);
  wchar_t *w = malloc((dl + nl + 2) * sizeof(wchar_t));
  if (w) {
    memcpy(w, dir, dl * sizeof(wchar_t));
    size_t k = dl;
    if (k && w[k - 1] != L'\\' && w[k - 1] != L'/')
      w[k++] = L'\\';
    for (size_t i = 0; i < nl; i++)
      w[k++] = wn[i] == L'/' ? L'\\' : wn[i];
    w[k] = 0;
  }
  free(wn);
  return w;
}

void win_backslashes(char *s) {
  for (; *s; s++)
    if (*s == '/')
      *s = '\\';
}

char *win_system_path(const char *posix_abs) {
  /* a drive path ("D:/x", "D:\\x") stays on its drive, as written */
  char c = posix_abs[0];
  if (((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) && posix_abs[1] == ':' &&
      (posix_abs[2] == '/' || posix_abs[2] == '\\')) {
    char *p = strdup(posix_abs);
    if (p)
      win_backslashes(p);
    return p;
  }
  wchar_t drive[MAX_PATH];
  UINT n = GetSystemWindowsDirectoryW(drive, MAX_PATH);
  char d[3] = "C:";
  if (n >= 2 && drive[1] == L':')
    d[0] = (char)drive[0];
  char *s = NULL;
  if (asprintf(&s, "%s%s", d, posix_abs) < 0)
    return NULL;
  win_backslashes(s);
  return s;
}

bool win_token_is_elevated(HANDLE token) {
  TOKEN_ELEVATION e;
  DWORD len = 0;
  if (GetTokenInformation(token, TokenElevation, &e, sizeof(e), &len) && e.TokenIsElevated)
    return true;
  return win_token_is_system(token);
}

bool win_token_is_system(HANDLE token) {
  union {
    TOKEN_USER tu;
    BYTE buf[256];
  } u;
  DWORD len = 0;
  if (!GetTokenInformation(token, TokenUser, &u, sizeof(u), &len))
    return false;
  return IsWellKnownSid(u.tu.User.Sid, WinLocalSystemSid) != FALSE;
}

/* (compat/win32.h) */
PSECURITY_DESCRIPTOR win_owner_only_sd(void) {
  HANDLE tok;
  if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &tok))
    return NULL;
  union {
    TOKEN_USER tu;
    BYTE buf[256];
  } u;
  DWORD len;
  BOOL ok = GetTokenInformation(tok, TokenUser, &u, sizeof(u), &len);
  CloseHandle(tok);
  LPWSTR me = NULL;
  if (!ok || !ConvertSidToStringSidW(u.tu.User.Sid, &me))
    return NULL;
  wchar_t sddl[256];
  _snwprintf(sddl, 256, L"D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;FA;;;%ls)", me);
  sddl[255] = 0;
  LocalFree(me);
  PSECURITY_DESCRIPTOR sd = NULL;
  if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, &sd, NULL))
    return NULL;
  return sd;
}
