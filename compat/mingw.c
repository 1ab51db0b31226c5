/* POSIX file calls on Win32 for the shared code; see compat/mingw.h. */
#include "compat/mingw.h"

#include <windows.h>

#include <aclapi.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>

#include "compat/win32.h"

struct compat_dir {
  int fd; /* owned: closed by closedir */
  HANDLE find;
  bool first, done;
  WIN32_FIND_DATAW fd_data;
  struct compat_dirent ent;
};

static int fail(int neg_errno) {
  errno = -neg_errno;
  return -1;
}

/* Open a UTF-16 path per POSIX flags; returns a CRT fd or -1 with errno.
 * A file created with a mode that has no group/other bits gets an
 * owner-only DACL; otherwise the parent's inheritable ACL applies. */
static int open_wide(const wchar_t *wpath, int flags, unsigned mode) {
  DWORD access = 0;
  switch (flags & _O_ACCMODE) {
  case _O_WRONLY:
    access = GENERIC_WRITE;
    break;
  case _O_RDWR:
    access = GENERIC_READ | GENERIC_WRITE;
    break;
  default:
    access = GENERIC_READ;
    break;
  }
  if (flags & O_DIRECTORY)
    access = FILE_LIST_DIRECTORY | FILE_READ_ATTRIBUTES | READ_CONTROL | SYNCHRONIZE;
  if (flags & _O_APPEND)
    access = (access & ~(DWORD)GENERIC_WRITE) | FILE_APPEND_DATA;
  DWORD disp;
  if ((flags & _O_CREAT) && (flags & _O_EXCL))
    disp = CREATE_NEW;
  else if ((flags & _O_CREAT) && (flags & _O_TRUNC))
    disp = CREATE_ALWAYS;
  else if (flags & _O_CREAT)
    disp = OPEN_ALWAYS;
  else if (flags & _O_TRUNC)
    disp = TRUNCATE_EXISTING;
  else
    disp = OPEN_EXISTING;
  DWORD fl = FILE_ATTRIBUTE_NORMAL | FILE_FLAG_BACKUP_SEMANTICS;
  if (flags & O_NOFOLLOW)
    fl |= FILE_FLAG_OPEN_REPARSE_POINT;
  SECURITY_ATTRIBUTES sa = {sizeof(sa), NULL, FALSE};
  if ((flags & _O_CREAT) && (mode & 077) == 0) {
    sa.lpSecurityDescriptor = win_owner_only_sd();
    if (!sa.lpSecurityDescriptor)
      return fail(-EACCES);
  }
  HANDLE h =
      CreateFileW(wpath, access | READ_CONTROL,
                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, &sa, disp, fl, NULL);
  if (sa.lpSecurityDescriptor)
    LocalFree(sa.lpSecurityDescriptor);
  if (h == INVALID_HANDLE_VALUE)
    return fail(win_last_err());
  BY_HANDLE_FILE_INFORMATION info;
  if (!GetFileInformationByHandle(h, &info)) {
    int e = win_last_err();
    CloseHandle(h);
    return fail(e);
  }
  int err = 0;
  if ((flags & O_NOFOLLOW) && (info.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT))
    err = -ELOOP;
  else if ((flags & O_DIRECTORY) && !(info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY))
    err = -ENOTDIR;
  else if (!(flags & O_DIRECTORY) && (info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) &&
           (flags & _O_ACCMODE) != _O_RDONLY)
    err = -EISDIR;
  if (err) {
    CloseHandle(h);
    return fail(err);
  }
  int fd = _open_osfhandle((intptr_t)h, flags & (_O_ACCMODE | _O_APPEND));
  if (fd < 0) {
    CloseHandle(h);
    return fail(-EMFILE);
  }
  _setmode(fd, _O_BINARY);
  return fd;
}

static unsigned mode_arg(int flags, va_list ap) {
  return (flags & _O_CREAT) ? va_arg(ap, unsigned) : 0;
}

int compat_open(const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  unsigned mode = mode_arg(flags, ap);
  va_end(ap);
  wchar_t *w = win_wide(path);
  if (!w)
    return fail(-EINVAL);
  int fd = open_wide(w, flags, mode);
  free(w);
  return fd;
}

static bool is_absolute(const char *name) {
  return name[0] == '/' || name[0] == '\\' || (name[0] && name[1] == ':');
}

/* The UTF-16 path of name below dirfd (or name itself); NULL with errno. */
static wchar_t *at_path(int dirfd, const char *name) {
  if (dirfd == AT_FDCWD || is_absolute(name)) {
    wchar_t *w = win_wide(name);
    if (!w)
      errno = EINVAL;
    return w;
  }
  HANDLE h = (HANDLE)_get_osfhandle(dirfd);
  if (h == INVALID_HANDLE_VALUE) {
    errno = EBADF;
    return NULL;
  }
  wchar_t *dir = win_handle_path(h);
  if (!dir)
    return NULL;
  wchar_t *w = strcmp(name, ".") == 0 ? dir : win_join(dir, name);
  if (w != dir)
    free(dir);
  if (!w)
    errno = ENOMEM;
  return w;
}

int compat_openat(int dirfd, const char *name, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  unsigned mode = mode_arg(flags, ap);
  va_end(ap);
  wchar_t *w = at_path(dirfd, name);
  if (!w)
    return -1;
  int fd = open_wide(w, flags, mode);
  free(w);
  return fd;
}

int compat_mkdir(const char *path, unsigned mode) {
  return compat_mkdirat(AT_FDCWD, path, mode);
}

int compat_mkdirat(int dirfd, const char *name, unsigned mode) {
  wchar_t *w = at_path(dirfd, name);
  if (!w)
    return -1;
  /* no group/other bits: owner-only, as open() does; else inherited */
  SECURITY_ATTRIBUTES sa = {sizeof(sa), NULL, FALSE};
  if ((mode & 077) == 0 && !(sa.lpSecurityDescriptor = win_owner_only_sd())) {
    free(w);
    return fail(-EACCES);
  }
  BOOL ok = CreateDirectoryW(w, sa.lpSecurityDescriptor ? &sa : NULL);
  int e = ok ? 0 : win_last_err();
  if (sa.lpSecurityDescriptor)
    LocalFree(sa.lpSecurityDescriptor);
  free(w);
  return e ? fail(e) : 0;
}

int compat_unlinkat(int dirfd, const char *name, int flags) {
  wchar_t *w = at_path(dirfd, name);
  if (!w)
    return -1;
  int e = 0;
  DWORD attr = GetFileAttributesW(w);
  if (attr == INVALID_FILE_ATTRIBUTES) {
    e = win_last_err();
  } else if (flags & AT_REMOVEDIR) {
    /* a directory, or a junction/directory symlink (removes the link) */
    if (!(attr & FILE_ATTRIBUTE_DIRECTORY))
      e = -ENOTDIR;
    else if (!RemoveDirectoryW(w))
      e = win_last_err();
  } else if ((attr & FILE_ATTRIBUTE_DIRECTORY) && !(attr & FILE_ATTRIBUTE_REPARSE_POINT)) {
    e = -EISDIR;
  } else {
    if (attr & FILE_ATTRIBUTE_READONLY)
      SetFileAttributesW(w, attr & ~(DWORD)FILE_ATTRIBUTE_READONLY);
    BOOL ok = (attr & FILE_ATTRIBUTE_DIRECTORY) ? RemoveDirectoryW(w) : DeleteFileW(w);
    if (!ok)
      e = win_last_err();
  }
  free(w);
  return e ? fail(e) : 0;
}

int compat_fchmod(int fd, unsigned mode) {
  (void)mode;
  return _get_osfhandle(fd) == -1 ? fail(-EBADF) : 0;
}

int compat_chmod(const char *path, unsigned mode) {
  (void)mode;
  wchar_t *w = win_wide(path);
  if (!w)
    return fail(-EINVAL);
  DWORD attr = GetFileAttributesW(w);
  free(w);
  return attr == INVALID_FILE_ATTRIBUTES ? fail(win_last_err()) : 0;
}

/* Mode bits from the DACL: the owner bits always; "group/other" bits when
 * a broad group (Everyone, Authenticated Users, Users, Guests, Anonymous)
 * may read or write, or when there is no DACL at all. */
static unsigned dacl_mode_bits(HANDLE h) {
  PACL dacl = NULL;
  PSECURITY_DESCRIPTOR sd = NULL;
  if (GetSecurityInfo(h, SE_FILE_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL, &dacl, NULL, &sd) !=
      ERROR_SUCCESS)
    return 077; /* cannot tell: say it is open, never private */
  unsigned bits = 0;
  if (!dacl) {
    bits = 077;
  } else {
    static const WELL_KNOWN_SID_TYPE broad[] = {WinWorldSid, WinAuthenticatedUserSid,
                                                WinBuiltinUsersSid, WinBuiltinGuestsSid,
                                                WinAnonymousSid};
    for (DWORD i = 0; i < dacl->AceCount; i++) {
      ACE_HEADER *hd;
      if (!GetAce(dacl, i, (void **)&hd) || hd->AceType != ACCESS_ALLOWED_ACE_TYPE)
        continue;
      ACCESS_ALLOWED_ACE *a = (ACCESS_ALLOWED_ACE *)hd;
      bool is_broad = false;
      for (size_t k = 0; k < sizeof(broad) / sizeof(broad[0]) && !is_broad; k++)
        is_broad = IsWellKnownSid((PSID)&a->SidStart, broad[k]) != FALSE;
      if (!is_broad)
        continue;
      if (a->Mask & (FILE_READ_DATA | GENERIC_READ | GENERIC_ALL))
        bits |= 044;
      if (a->Mask & (FILE_WRITE_DATA | FILE_APPEND_DATA | GENERIC_WRITE | GENERIC_ALL))
        bits |= 022;
      if (a->Mask & (FILE_EXECUTE | GENERIC_EXECUTE | GENERIC_ALL))
        bits |= 011;
    }
  }
  LocalFree(sd);
  return bits;
}

static void fill_stat(HANDLE h, const BY_HANDLE_FILE_INFORMATION *info, struct stat *st) {
  memset(st, 0, sizeof(*st));
  unsigned other = dacl_mode_bits(h);
  if (info->dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY)
    st->st_mode = (unsigned short)(S_IFDIR | 0700 | other);
  else
    st->st_mode = (unsigned short)(S_IFREG | 0600 | other);
  uint64_t size = ((uint64_t)info->nFileSizeHigh << 32) | info->nFileSizeLow;
  st->st_size = size > (uint64_t)LONG_MAX ? LONG_MAX : (_off_t)size;
  st->st_nlink = (short)info->nNumberOfLinks;
  st->st_dev = info->dwVolumeSerialNumber;
  uint64_t t =
      ((uint64_t)info->ftLastWriteTime.dwHighDateTime << 32) | info->ftLastWriteTime.dwLowDateTime;
  st->st_mtime = (time_t)(t / 10000000ull - 11644473600ull);
}

int compat_fstat(int fd, struct stat *st) {
  HANDLE h = (HANDLE)_get_osfhandle(fd);
  if (h == INVALID_HANDLE_VALUE)
    return fail(-EBADF);
  if (GetFileType(h) != FILE_TYPE_DISK) {
    memset(st, 0, sizeof(*st));
    st->st_mode = S_IFIFO;
    return 0;
  }
  BY_HANDLE_FILE_INFORMATION info;
  if (!GetFileInformationByHandle(h, &info))
    return fail(win_last_err());
  fill_stat(h, &info, st);
  return 0;
}

int compat_stat(const char *path, struct stat *st) {
  wchar_t *w = win_wide(path);
  if (!w)
    return fail(-EINVAL);
  HANDLE h = CreateFileW(w, FILE_READ_ATTRIBUTES | READ_CONTROL,
                         FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                         OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, NULL);
  free(w);
  if (h == INVALID_HANDLE_VALUE)
    return fail(win_last_err());
  BY_HANDLE_FILE_INFORMATION info;
  BOOL ok = GetFileInformationByHandle(h, &info);
  int e = ok ? 0 : win_last_err();
  if (ok)
    fill_stat(h, &info, st);
  CloseHandle(h);
  return e ? fail(e) : 0;
}

int compat_geteuid(void) {
  HANDLE tok;
  if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &tok))
    return 1;
  bool elevated = win_token_is_elevated(tok);
  CloseHandle(tok);
  return elevated ? 0 : 1;
}

compat_DIR *compat_fdopendir(int fd) {
  HANDLE h = (HANDLE)_get_osfhandle(fd);
  if (h == INVALID_HANDLE_VALUE) {
    errno = EBADF;
    return NULL;
  }
  wchar_t *dir = win_handle_path(h);
  if (!dir)
    return NULL;
  wchar_t *pat = win_join(dir, "*");
  free(dir);
  struct compat_dir *d = calloc(1, sizeof(*d));
  if (!pat || !d) {
    free(pat);
    free(d);
    errno = ENOMEM;
    return NULL;
  }
  d->find = FindFirstFileExW(pat, FindExInfoBasic, &d->fd_data, FindExSearchNameMatch, NULL, 0);
  free(pat);
  if (d->find == INVALID_HANDLE_VALUE) {
    DWORD e = GetLastError();
    if (e != ERROR_FILE_NOT_FOUND && e != ERROR_NO_MORE_FILES) {
      free(d);
      errno = -win_errno(e);
      return NULL;
    }
    d->done = true;
  }
  d->fd = fd;
  d->first = true;
  return d;
}

compat_DIR *compat_opendir(const char *path) {
  int fd = compat_open(path, O_RDONLY | O_DIRECTORY, 0);
  if (fd < 0)
    return NULL;
  compat_DIR *d = compat_fdopendir(fd);
  if (!d)
    _close(fd);
  return d;
}

struct compat_dirent *compat_readdir(compat_DIR *d) {
  for (;;) {
    if (d->done)
      return NULL;
    if (!d->first && !FindNextFileW(d->find, &d->fd_data)) {
      d->done = true;
      return NULL;
    }
    d->first = false;
    int n = WideCharToMultiByte(CP_UTF8, 0, d->fd_data.cFileName, -1, d->ent.d_name,
                                (int)sizeof(d->ent.d_name), NULL, NULL);
    if (n > 0)
      return &d->ent;
    /* a name that is not valid UTF-16 cannot be named in UTF-8: skip it */
  }
}

int compat_closedir(compat_DIR *d) {
  if (!d)
    return 0;
  if (d->find != INVALID_HANDLE_VALUE && d->find)
    FindClose(d->find);
  int r = _close(d->fd);
  free(d);
  return r;
}

int compat_dirfd(compat_DIR *d) {
  return d->fd;
}

/* The live aligned blocks: few (one per .cpkg being read), so a short
 * array searched under a lock is enough. */
#define ALIGNED_MAX 256
static void *aligned_live[ALIGNED_MAX];
static size_t aligned_n;
static SRWLOCK aligned_lock = SRWLOCK_INIT;

int compat_posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || (align & (align - 1)) != 0)
    return EINVAL;
  void *p = _aligned_malloc(size ? size : 1, align);
  if (!p)
    return ENOMEM;
  AcquireSRWLockExclusive(&aligned_lock);
  bool ok = aligned_n < ALIGNED_MAX;
  if (ok)
    aligned_live[aligned_n++] = p;
  ReleaseSRWLockExclusive(&aligned_lock);
  if (!ok) {
    _aligned_free(p);
    return ENOMEM;
  }
  *out = p;
  return 0;
}

#undef free
void compat_free(void *p) {
  if (!p)
    return;
  bool aligned = false;
  AcquireSRWLockExclusive(&aligned_lock);
  for (size_t i = 0; i < aligned_n; i++) {
    if (aligned_live[i] == p) {
      aligned_live[i] = aligned_live[--aligned_n];
      aligned = true;
      break;
    }
  }
  ReleaseSRWLockExclusive(&aligned_lock);
  if (aligned)
    _aligned_free(p);
  else
    free(p);
}

char *compat_strchrnul(const char *s, int c) {
  while (*s && *s != (char)c)
    s++;
  return (char *)s;
}

struct sort_ctx {
  int (*cmp)(const void *, const void *, void *);
  void *arg;
};

static int sort_thunk(void *ctx, const void *a, const void *b) {
  const struct sort_ctx *c = ctx;
  return c->cmp(a, b, c->arg);
}

void compat_qsort_r(void *base, size_t n, size_t size,
                    int (*cmp)(const void *, const void *, void *), void *arg) {
  struct sort_ctx c = {cmp, arg};
  qsort_s(base, n, size, sort_thunk, &c);
}

int compat_pipe2(int fds[2], int flags) {
  (void)flags; /* non-blocking pipes do not exist for CRT fds; none is asked for */
  return _pipe(fds, 65536, _O_BINARY | _O_NOINHERIT);
}

int compat_setenv(const char *name, const char *value, int overwrite) {
  if (!name || !name[0] || strchr(name, '=')) {
    errno = EINVAL;
    return -1;
  }
  if (!overwrite && getenv(name))
    return 0;
  errno_t e = _putenv_s(name, value);
  if (e) {
    errno = e;
    return -1;
  }
  return 0;
}

int compat_unsetenv(const char *name) {
  return compat_setenv(name, "", 1);
}

FILE *compat_fopen(const char *path, const char *mode) {
  wchar_t wmode[16];
  size_t k = 0;
  bool bin = false;
  for (const char *m = mode; *m && k < 13; m++) {
    if (*m == 'e')
      continue;
    bin |= *m == 'b' || *m == 't';
    wmode[k++] = (wchar_t)(unsigned char)*m;
  }
  if (!bin)
    wmode[k++] = L'b';
  wmode[k] = 0;
  wchar_t *w = win_wide(path);
  if (!w) {
    errno = EINVAL;
    return NULL;
  }
  FILE *f = _wfopen(w, wmode);
  free(w);
  return f;
}

int compat_rename(const char *from, const char *to) {
  wchar_t *a = win_wide(from), *b = win_wide(to);
  int e = 0;
  if (!a || !b)
    e = -EINVAL;
  else if (!MoveFileExW(a, b, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH))
    e = win_last_err();
  free(a);
  free(b);
  return e ? fail(e) : 0;
}

int compat_unlink(const char *path) {
  return compat_unlinkat(AT_FDCWD, path, 0);
}

int compat_rmdir(const char *path) {
  return compat_unlinkat(AT_FDCWD, path, AT_REMOVEDIR);
}

int compat_access(const char *path, int mode) {
  wchar_t *w = win_wide(path);
  if (!w)
    return fail(-EINVAL);
  DWORD attr = GetFileAttributesW(w);
  free(w);
  if (attr == INVALID_FILE_ATTRIBUTES)
    return fail(win_last_err());
  if ((mode & W_OK) && (attr & FILE_ATTRIBUTE_READONLY) && !(attr & FILE_ATTRIBUTE_DIRECTORY))
    return fail(-EACCES);
  return 0;
}
