/* POSIX file calls for the shared code, on Windows (git's compat/mingw.h):
 * reached only through compat/posix.h, which includes this header when the
 * build sets CORDON_WITH_MINGW_COMPAT (the windows layer), so core/, proto/
 * and agent/ keep their POSIX calls and never test the OS. A file that
 * makes these calls includes compat/posix.h itself; nothing is
 * force-included. Paths are UTF-8; they become UTF-16 at the API.
 *
 * What the emulation means on Windows (docs/WINDOWS.md):
 * - open/openat: CreateFileW; O_NOFOLLOW opens a final symlink or junction
 *   itself and fails with ELOOP, as on POSIX; O_DIRECTORY opens directories
 *   (for *at calls and fdopendir) and fails with ENOTDIR on a file; O_PATH
 *   is a plain read-only open; handles are never inheritable.
 * - openat/mkdirat/unlinkat resolve names against the directory handle's
 *   final path (GetFinalPathNameByHandleW), not atomically against the
 *   handle: the agent's directories are protected by their ACLs instead.
 * - modes: a file created with no group/other bits (0600) gets an
 *   owner-only DACL (the account, SYSTEM, Administrators); stat/fstat
 *   report 0600/0700 plus group/other bits when a broad group (Everyone,
 *   Users, ...) may read/write/execute it. fchmod/chmod succeed without a
 *   change.
 * - geteuid() is 0 when the process is elevated or SYSTEM (the "root" case
 *   of the shared code), 1 otherwise.
 * - free() releases the blocks of posix_memalign() too, in any file that
 *   includes this header (the only such allocation, proto/cpkg.c's, is
 *   freed in the same file).
 */
#ifndef CORDON_COMPAT_MINGW_H
#define CORDON_COMPAT_MINGW_H

/* every system header the shared code uses comes first, so the macros
 * below do not rename their declarations */
#include <direct.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

typedef int compat_uid_t;
#define uid_t compat_uid_t
#define gid_t compat_uid_t

/* flags the CRT does not have; bits outside the CRT's _O_* range */
#define O_NOFOLLOW 0x01000000
#define O_DIRECTORY 0x02000000
#define O_CLOEXEC 0 /* no handle is inheritable: CreateFileW without inherit */
#define O_NOCTTY 0
#define O_NONBLOCK 0
#define O_PATH 0
#ifndef S_IFLNK
#define S_IFLNK 0xA000
#endif
#ifndef S_ISLNK
#define S_ISLNK(m) (((m)&0xF000) == S_IFLNK)
#endif
#define AT_FDCWD (-100)
#define AT_REMOVEDIR 0x200
#define AT_SYMLINK_NOFOLLOW 0x100

int compat_open(const char *path, int flags, ...);
int compat_openat(int dirfd, const char *name, int flags, ...);
int compat_mkdir(const char *path, unsigned mode);
int compat_mkdirat(int dirfd, const char *name, unsigned mode);
int compat_unlinkat(int dirfd, const char *name, int flags);
int compat_fchmod(int fd, unsigned mode);
int compat_chmod(const char *path, unsigned mode);
int compat_stat(const char *path, struct stat *st);
int compat_fstat(int fd, struct stat *st);
int compat_geteuid(void);

typedef struct compat_dir compat_DIR;
struct compat_dirent {
  char d_name[260 * 3 + 1]; /* UTF-8 of a MAX_PATH name */
};
compat_DIR *compat_fdopendir(int fd);
compat_DIR *compat_opendir(const char *path);
struct compat_dirent *compat_readdir(compat_DIR *d);
int compat_closedir(compat_DIR *d);
int compat_dirfd(compat_DIR *d);

/* 64-byte aligned allocations (libsodium states): the CRT has
 * _aligned_malloc, whose blocks need _aligned_free; compat_free() tells
 * them apart (a small registry of the live aligned blocks), so shared code
 * keeps calling free(). */
int compat_posix_memalign(void **out, size_t align, size_t size);
void compat_free(void *p);
#define posix_memalign(o, a, s) compat_posix_memalign(o, a, s)
#define free(p) compat_free(p)

/* fsync: FlushFileBuffers through the CRT; posix_fadvise: advice only,
 * none is given on Windows; pipe2: a CRT pipe whose handles are never
 * inherited; SIGPIPE does not exist (writes to a closed pipe fail with
 * EPIPE), so ignoring it is a no-op. */
#define fsync(fd) _commit(fd)
static inline int compat_posix_fadvise(int fd, long long off, long long len, int advice) {
  (void)fd, (void)off, (void)len, (void)advice;
  return 0;
}
#define posix_fadvise(fd, off, len, advice) compat_posix_fadvise(fd, off, len, advice)
#define POSIX_FADV_SEQUENTIAL 2
int compat_pipe2(int fds[2], int flags);
#define pipe2(fds, flags) compat_pipe2(fds, flags)
#define pipe(fds) compat_pipe2(fds, 0)
#ifndef SIGPIPE
#define SIGPIPE 13
#endif

/* path calls with UTF-8 names. rename() replaces an existing target
 * atomically and writes through (MoveFileExW with REPLACE_EXISTING and
 * WRITE_THROUGH), as the spool's write-then-rename needs; fopen() accepts
 * glibc's "e" (dropped: handles reach jobs only through an explicit
 * handle list) and always opens in binary mode. */
FILE *compat_fopen(const char *path, const char *mode);
int compat_rename(const char *from, const char *to);
int compat_unlink(const char *path);
int compat_rmdir(const char *path);
int compat_access(const char *path, int mode);
#undef fopen
#undef rename
#undef unlink
#undef rmdir
#undef access
#define fopen(p, m) compat_fopen(p, m)
#define rename(f, t) compat_rename(f, t)
#define unlink(p) compat_unlink(p)
#define rmdir(p) compat_rmdir(p)
#define access(p, m) compat_access(p, m)

/* environment of the agent process itself (jobs get an explicit block) */
int compat_setenv(const char *name, const char *value, int overwrite);
int compat_unsetenv(const char *name);
#define setenv(n, v, o) compat_setenv(n, v, o)
#define unsetenv(n) compat_unsetenv(n)

/* GNU string and sorting helpers the CRT lacks */
char *compat_strchrnul(const char *s, int c);
void compat_qsort_r(void *base, size_t n, size_t size,
                    int (*cmp)(const void *, const void *, void *), void *arg);
#define strchrnul(s, c) compat_strchrnul(s, c)
#define qsort_r(b, n, s, c, a) compat_qsort_r(b, n, s, c, a)

#undef open
#undef mkdir
#undef stat
#undef fstat
#undef chmod
#define open(...) compat_open(__VA_ARGS__)
#define openat(...) compat_openat(__VA_ARGS__)
#define mkdir(p, m) compat_mkdir(p, m)
#define mkdirat(d, n, m) compat_mkdirat(d, n, m)
#define unlinkat(d, n, f) compat_unlinkat(d, n, f)
#define fchmod(f, m) compat_fchmod(f, m)
#define chmod(p, m) compat_chmod(p, m)
#define stat(p, s) compat_stat(p, s)
#define fstat(f, s) compat_fstat(f, s)
#define geteuid() compat_geteuid()
#define getuid() compat_geteuid()
#define DIR compat_DIR
#define dirent compat_dirent
#define fdopendir(f) compat_fdopendir(f)
#define opendir(p) compat_opendir(p)
#define readdir(d) compat_readdir(d)
#define closedir(d) compat_closedir(d)
#define dirfd(d) compat_dirfd(d)

#endif
