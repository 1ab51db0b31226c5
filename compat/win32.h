/* Small Win32 helpers shared by the POSIX shim (compat/mingw.c) and the
 * windows platform layer: UTF-8 inside, UTF-16 at the API boundary; Win32
 * errors mapped once to negated errno values (core/error.h). Compiled into the
 * Windows build only. Nothing here prints. */
#ifndef CORDON_COMPAT_WIN32_H
#define CORDON_COMPAT_WIN32_H

#include <windows.h>

#include <stdbool.h>
#include <stddef.h>

/* A UTF-16 copy of a UTF-8 string (malloc'd), NULL on invalid UTF-8 or no
 * memory. '/' is kept as is. */
wchar_t *win_wide(const char *utf8);
/* A UTF-8 copy of a UTF-16 string (malloc'd), NULL on failure. */
char *win_utf8(const wchar_t *wide);

/* The negated errno for a Win32 error code (GetLastError()). */
int win_errno(DWORD err);
/* -errno for GetLastError(), for `return win_last_err();` */
int win_last_err(void);

/* The full path of an open file or directory handle, without the "\\?\"
 * prefix where it is a plain drive path (malloc'd UTF-16), NULL on failure
 * with errno set. */
wchar_t *win_handle_path(HANDLE h);

/* Join dir and a relative UTF-8 name ('/' becomes '\'), malloc'd. */
wchar_t *win_join(const wchar_t *dir, const char *name);

/* Turn every '/' of s into '\' in place. */
void win_backslashes(char *s);
/* "/Windows/System32/cmd.exe" -> "C:\Windows\System32\cmd.exe" on the
 * system drive (malloc'd UTF-8); a drive path ("D:/x") stays on its
 * drive. NULL on no memory. */
char *win_system_path(const char *posix_abs);

/* A protected security descriptor that lets only the current account,
 * SYSTEM and the Administrators in, full access (what mode 0600/0700 means
 * here; inherited by what a directory holds); LocalFree it. NULL on
 * failure (GetLastError). */
PSECURITY_DESCRIPTOR win_owner_only_sd(void);

/* Is the process token elevated (an administrator's full token or SYSTEM)? */
bool win_token_is_elevated(HANDLE token);
/* Is the token's user LocalSystem (S-1-5-18)? */
bool win_token_is_system(HANDLE token);

#endif
