/* platform/fs.h on Win32. Nothing here follows a symbolic link or a
 * junction: entries are listed with FindFirstFileExW and any reparse point
 * is removed as a link (never descended into) or refused when copying. */
#include <windows.h>

#include <aclapi.h>
#include <sddl.h>

#include <io.h>
#include <stdio.h>

#include "compat/win32.h"
#include "platform/fs.h"

static wchar_t *fd_path(int fd) {
  HANDLE h = (HANDLE)_get_osfhandle(fd);
  if (h == INVALID_HANDLE_VALUE) {
    errno = EBADF;
    return NULL;
  }
  return win_handle_path(h);
}

static wchar_t *join_w(const wchar_t *dir, const wchar_t *name) {
  size_t dl = wcslen(dir), nl = wcslen(name);
  wchar_t *w = malloc((dl + nl + 2) * sizeof(wchar_t));
  if (!w)
    return NULL;
  memcpy(w, dir, dl * sizeof(wchar_t));
  size_t k = dl;
  if (k && w[k - 1] != L'\\')
    w[k++] = L'\\';
  memcpy(w + k, name, (nl + 1) * sizeof(wchar_t));
  return w;
}

static bool dots(const wchar_t *n) {
  return (n[0] == L'.' && n[1] == 0) || (n[0] == L'.' && n[1] == L'.' && n[2] == 0);
}

/* Remove path (a file, link or directory tree). */
static int remove_w(const wchar_t *path, int depth) {
  if (depth > 256)
    return -ELOOP;
  DWORD attr = GetFileAttributesW(path);
  if (attr == INVALID_FILE_ATTRIBUTES) {
    DWORD e = GetLastError();
    return e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND ? 0 : win_errno(e);
  }
  if (attr & FILE_ATTRIBUTE_READONLY)
    SetFileAttributesW(path, attr & ~(DWORD)FILE_ATTRIBUTE_READONLY);
  if (attr & FILE_ATTRIBUTE_REPARSE_POINT) /* the link itself, never its target */
    return ((attr & FILE_ATTRIBUTE_DIRECTORY) ? RemoveDirectoryW(path) : DeleteFileW(path))
               ? 0
               : win_last_err();
  if (!(attr & FILE_ATTRIBUTE_DIRECTORY))
    return DeleteFileW(path) ? 0 : win_last_err();
  int r = 0;
  wchar_t *pat = join_w(path, L"*");
  if (!pat)
    return -ENOMEM;
  WIN32_FIND_DATAW fd;
  HANDLE f = FindFirstFileExW(pat, FindExInfoBasic, &fd, FindExSearchNameMatch, NULL, 0);
  free(pat);
  if (f != INVALID_HANDLE_VALUE) {
    do {
      if (dots(fd.cFileName))
        continue;
      wchar_t *sub = join_w(path, fd.cFileName);
      int rr = sub ? remove_w(sub, depth + 1) : -ENOMEM;
      free(sub);
      if (rr < 0)
        r = rr;
    } while (FindNextFileW(f, &fd));
    FindClose(f);
  }
  if (!RemoveDirectoryW(path) && r == 0)
    r = win_last_err();
  return r;
}

int fs_remove_tree_at(int dirfd, const char *name) {
  wchar_t *dir = fd_path(dirfd);
  if (!dir)
    return -errno;
  wchar_t *p = win_join(dir, name);
  free(dir);
  if (!p)
    return -ENOMEM;
  int r = remove_w(p, 0);
  free(p);
  return r;
}

struct copy_state {
  DWORD dst_vol; /* the destination must not be inside the source */
  DWORD dst_hi, dst_lo;
  size_t files;
  unsigned long long bytes;
  char path[4096]; /* for messages, '/'-separated below the source */
  struct cordon_diag *diag;
};

static int diag_err(struct copy_state *cs, int err) {
  return cordon_diag_set(cs->diag, err, "%s: %s", cs->path, strerror(-err));
}

static int copy_file(const wchar_t *src, const wchar_t *dst, struct copy_state *cs) {
  HANDLE in = CreateFileW(src, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING,
                          FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_SEQUENTIAL_SCAN, NULL);
  if (in == INVALID_HANDLE_VALUE)
    return diag_err(cs, win_last_err());
  HANDLE out = CreateFileW(dst, GENERIC_WRITE, 0, NULL, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL);
  if (out == INVALID_HANDLE_VALUE) {
    int e = win_last_err();
    CloseHandle(in);
    return diag_err(cs, e);
  }
  int r = 0;
  static char buf[65536];
  for (;;) {
    DWORD n = 0;
    if (!ReadFile(in, buf, sizeof(buf), &n, NULL)) {
      r = diag_err(cs, win_last_err());
      break;
    }
    if (n == 0)
      break;
    cs->bytes += n;
    if (cs->bytes > STAGE_MAX_BYTES) {
      r = cordon_diag_set(cs->diag, CORDON_E_PACKAGE_TOO_LARGE, "package larger than %llu bytes",
                          STAGE_MAX_BYTES);
      break;
    }
    DWORD w = 0;
    if (!WriteFile(out, buf, n, &w, NULL) || w != n) {
      r = diag_err(cs, win_last_err());
      break;
    }
  }
  CloseHandle(in);
  if (!CloseHandle(out) && r == 0)
    r = win_last_err();
  return r;
}

static int copy_dir(const wchar_t *src, const wchar_t *dst, int depth, struct copy_state *cs) {
  if (depth > STAGE_MAX_DEPTH)
    return cordon_diag_set(cs->diag, CORDON_E_PACKAGE_TOO_LARGE, "%s: nested too deeply", cs->path);
  wchar_t *pat = join_w(src, L"*");
  if (!pat)
    return -ENOMEM;
  WIN32_FIND_DATAW fd;
  HANDLE f = FindFirstFileExW(pat, FindExInfoBasic, &fd, FindExSearchNameMatch, NULL, 0);
  free(pat);
  if (f == INVALID_HANDLE_VALUE)
    return diag_err(cs, win_last_err());
  size_t plen = strlen(cs->path);
  int r = 0;
  do {
    if (dots(fd.cFileName))
      continue;
    char *name = win_utf8(fd.cFileName);
    if (!name) {
      r = -ENOMEM;
      break;
    }
    int k = snprintf(cs->path + plen, sizeof(cs->path) - plen, "/%s", name);
    free(name);
    if (k < 0 || (size_t)k >= sizeof(cs->path) - plen) {
      cs->path[plen] = '\0';
      r = cordon_diag_set(cs->diag, CORDON_E_USAGE, "%s: path too long", cs->path);
      break;
    }
    if (++cs->files > STAGE_MAX_FILES) {
      r = cordon_diag_set(cs->diag, CORDON_E_PACKAGE_TOO_LARGE, "more than %d files",
                          STAGE_MAX_FILES);
      break;
    }
    wchar_t *s = join_w(src, fd.cFileName), *d = join_w(dst, fd.cFileName);
    if (!s || !d) {
      r = -ENOMEM;
    } else if (fd.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT) {
      r = cordon_diag_set(cs->diag, CORDON_E_USAGE,
                          "%s: not a regular file or directory (a symbolic link or junction)",
                          cs->path);
    } else if (fd.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) {
      HANDLE h = CreateFileW(s, FILE_READ_ATTRIBUTES, FILE_SHARE_READ | FILE_SHARE_WRITE, NULL,
                             OPEN_EXISTING,
                             FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT, NULL);
      BY_HANDLE_FILE_INFORMATION info;
      if (h == INVALID_HANDLE_VALUE || !GetFileInformationByHandle(h, &info)) {
        r = diag_err(cs, win_last_err());
      } else if (info.dwVolumeSerialNumber == cs->dst_vol && info.nFileIndexHigh == cs->dst_hi &&
                 info.nFileIndexLow == cs->dst_lo) {
        r = cordon_diag_set(cs->diag, CORDON_E_USAGE,
                            "%s: the source contains the staging directory (is the agent's "
                            "config directory inside the package?)",
                            cs->path);
      } else if (!CreateDirectoryW(d, NULL)) {
        r = diag_err(cs, win_last_err());
      } else {
        r = copy_dir(s, d, depth + 1, cs);
      }
      if (h != INVALID_HANDLE_VALUE)
        CloseHandle(h);
    } else {
      r = copy_file(s, d, cs);
    }
    free(s);
    free(d);
    cs->path[plen] = '\0';
  } while (r == 0 && FindNextFileW(f, &fd));
  FindClose(f);
  return r;
}

int fs_copy_tree(int src_dirfd, int dst_dirfd, struct cordon_diag *diag) {
  struct copy_state *cs = calloc(1, sizeof(*cs));
  if (!cs)
    return -ENOMEM;
  cs->diag = diag;
  cs->path[0] = '.';
  wchar_t *src = fd_path(src_dirfd), *dst = fd_path(dst_dirfd);
  int r = 0;
  BY_HANDLE_FILE_INFORMATION info;
  if (!src || !dst) {
    r = -errno;
  } else if (!GetFileInformationByHandle((HANDLE)_get_osfhandle(dst_dirfd), &info)) {
    r = win_last_err();
  } else {
    cs->dst_vol = info.dwVolumeSerialNumber;
    cs->dst_hi = info.nFileIndexHigh;
    cs->dst_lo = info.nFileIndexLow;
    r = copy_dir(src, dst, 0, cs);
    if (r < 0) { /* leave nothing behind */
      wchar_t *pat = join_w(dst, L"*");
      WIN32_FIND_DATAW fd;
      HANDLE f = pat ? FindFirstFileExW(pat, FindExInfoBasic, &fd, FindExSearchNameMatch, NULL, 0)
                     : INVALID_HANDLE_VALUE;
      if (f != INVALID_HANDLE_VALUE) {
        do {
          if (dots(fd.cFileName))
            continue;
          wchar_t *sub = join_w(dst, fd.cFileName);
          if (sub)
            (void)remove_w(sub, 0);
          free(sub);
        } while (FindNextFileW(f, &fd));
        FindClose(f);
      }
      free(pat);
    }
  }
  free(src);
  free(dst);
  free(cs);
  return r;
}

/* A new private directory (mode without group/other bits): only SYSTEM,
 * the Administrators and the agent's own account may use it; nothing is
 * inherited from the parent (ProgramData lets every user read). */
static int make_private(const wchar_t *path) {
  HANDLE tok;
  if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &tok))
    return win_last_err();
  union {
    TOKEN_USER tu;
    BYTE buf[256];
  } u;
  DWORD len;
  BOOL ok = GetTokenInformation(tok, TokenUser, &u, sizeof(u), &len);
  CloseHandle(tok);
  if (!ok)
    return win_last_err();
  LPWSTR me = NULL;
  if (!ConvertSidToStringSidW(u.tu.User.Sid, &me))
    return win_last_err();
  wchar_t sddl[256];
  _snwprintf(sddl, sizeof(sddl) / sizeof(sddl[0]),
             L"D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;FA;;;%ls)", me);
  sddl[sizeof(sddl) / sizeof(sddl[0]) - 1] = 0;
  LocalFree(me);
  PSECURITY_DESCRIPTOR sd = NULL;
  if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, &sd, NULL))
    return win_last_err();
  SECURITY_ATTRIBUTES sa = {sizeof(sa), sd, FALSE};
  int r = CreateDirectoryW(path, &sa) ? 0 : win_last_err();
  LocalFree(sd);
  return r;
}

int fs_mkdir_p(const char *path, unsigned mode) {
  wchar_t *w = win_wide(path);
  if (!w)
    return -EINVAL;
  for (wchar_t *p = w; *p; p++)
    if (*p == L'/')
      *p = L'\\';
  int r = 0;
  size_t n = wcslen(w);
  /* skip a drive ("C:\") or UNC prefix ("\\server\share\") */
  size_t start = 0;
  if (n >= 2 && w[1] == L':')
    start = 3;
  else if (n >= 2 && w[0] == L'\\' && w[1] == L'\\') {
    int seps = 0;
    for (start = 2; start < n && seps < 2; start++)
      if (w[start] == L'\\')
        seps++;
  }
  bool private_dir = (mode & 077) == 0;
  for (size_t i = start; i <= n && r == 0; i++) {
    if (w[i] != L'\\' && w[i] != 0)
      continue;
    if (i == 0 || w[i - 1] == L'\\')
      continue;
    wchar_t saved = w[i];
    w[i] = 0;
    bool last = saved == 0 || (saved == L'\\' && w[i + 1] == 0);
    int e =
        (last && private_dir) ? make_private(w) : (CreateDirectoryW(w, NULL) ? 0 : win_last_err());
    if (e < 0 && e != -EEXIST &&
        !(e == -EACCES && GetFileAttributesW(w) != INVALID_FILE_ATTRIBUTES))
      r = e;
    w[i] = saved;
  }
  free(w);
  return r;
}
