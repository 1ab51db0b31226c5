/* The POSIX shim the shared code compiles against on Windows
 * (compat/mingw.h, included through compat/posix.h). */
#include <windows.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "compat/posix.h"
#include "tests/windows/wintest.h"

/* fopen is the shim's too: UTF-8 names */
static void put(const char *dir, const char *name, const char *text) {
  char p[MAX_PATH * 3];
  snprintf(p, sizeof(p), "%s\\%s", dir, name);
  FILE *f = fopen(p, "we");
  WT_CHECK(f != NULL, "create %s", p);
  fputs(text, f);
  fclose(f);
}

WT_TEST(mingw, open_directory_and_openat_below_it) {
  const char *d = wt_tmpdir();
  put(d, "a.txt", "hello");
  int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  WT_CHECK(dfd >= 0, "open dir: %s", strerror(errno));
  int fd = openat(dfd, "a.txt", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  WT_CHECK(fd >= 0, "openat: %s", strerror(errno));
  char buf[16] = {0};
  WT_EQ_INT(read(fd, buf, sizeof(buf) - 1), 5);
  WT_EQ_STR(buf, "hello");
  struct stat st;
  WT_EQ_INT(fstat(fd, &st), 0);
  WT_CHECK(S_ISREG(st.st_mode), "mode 0%o", st.st_mode);
  WT_EQ_INT(st.st_size, 5);
  close(fd);
  WT_EQ_INT(fstat(dfd, &st), 0);
  WT_CHECK(S_ISDIR(st.st_mode), "dir mode 0%o", st.st_mode);
  /* O_DIRECTORY on a file, a missing name */
  WT_EQ_INT(openat(dfd, "a.txt", O_RDONLY | O_DIRECTORY), -1);
  WT_EQ_INT(errno, ENOTDIR);
  WT_EQ_INT(openat(dfd, "missing", O_RDONLY), -1);
  WT_EQ_INT(errno, ENOENT);
  close(dfd);
}

WT_TEST(mingw, create_exclusive) {
  const char *d = wt_tmpdir();
  int dfd = open(d, O_RDONLY | O_DIRECTORY);
  int fd = openat(dfd, "new", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
  WT_CHECK(fd >= 0, "create: %s", strerror(errno));
  WT_EQ_INT(write(fd, "abc\n", 4), 4); /* binary: no \r added */
  close(fd);
  WT_EQ_INT(openat(dfd, "new", O_WRONLY | O_CREAT | O_EXCL, 0644), -1);
  WT_EQ_INT(errno, EEXIST);
  fd = openat(dfd, "new", O_RDONLY);
  struct stat st;
  WT_EQ_INT(fstat(fd, &st), 0);
  WT_EQ_INT(st.st_size, 4);
  close(fd);
  close(dfd);
}

WT_TEST(mingw, private_modes_make_owner_only_files) {
  const char *d = wt_tmpdir();
  int dfd = open(d, O_RDONLY | O_DIRECTORY);
  int fd = openat(dfd, "secret", O_WRONLY | O_CREAT | O_EXCL, 0600);
  WT_CHECK(fd >= 0, "create: %s", strerror(errno));
  struct stat st;
  WT_EQ_INT(fstat(fd, &st), 0);
  WT_EQ_INT(st.st_mode & 077, 0);
  WT_EQ_INT(st.st_mode & 0600, 0600);
  close(fd);
  WT_EQ_INT(mkdirat(dfd, "private", 0700), 0);
  char p[MAX_PATH * 3];
  snprintf(p, sizeof(p), "%s\\private", d);
  WT_EQ_INT(stat(p, &st), 0);
  WT_CHECK(S_ISDIR(st.st_mode), "not a dir");
  WT_EQ_INT(st.st_mode & 077, 0);
  close(dfd);
}

WT_TEST(mingw, mkdirat_unlinkat_and_readdir) {
  const char *d = wt_tmpdir();
  int dfd = open(d, O_RDONLY | O_DIRECTORY);
  WT_EQ_INT(mkdirat(dfd, "sub", 0700), 0);
  WT_EQ_INT(mkdirat(dfd, "sub", 0700), -1);
  WT_EQ_INT(errno, EEXIST);
  put(d, "f", "x");
  put(d,
      "gr\xc3\xbc\xc3\x9f"
      "e.txt",
      "utf8");
  /* readdir sees every name, as UTF-8 */
  int dup_fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY);
  DIR *dir = fdopendir(dup_fd);
  WT_CHECK(dir != NULL, "fdopendir: %s", strerror(errno));
  int seen = 0;
  bool utf8 = false;
  struct dirent *de;
  while ((de = readdir(dir))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    seen++;
    utf8 |= strcmp(de->d_name, "gr\xc3\xbc\xc3\x9f"
                               "e.txt") == 0;
  }
  WT_CHECK(dirfd(dir) == dup_fd, "dirfd");
  closedir(dir);
  WT_EQ_INT(seen, 3);
  WT_CHECK(utf8, "the UTF-8 name was not listed as UTF-8");
  /* unlinkat: a directory without AT_REMOVEDIR is EISDIR, as on Linux */
  WT_EQ_INT(unlinkat(dfd, "sub", 0), -1);
  WT_EQ_INT(errno, EISDIR);
  WT_EQ_INT(unlinkat(dfd, "sub", AT_REMOVEDIR), 0);
  WT_EQ_INT(unlinkat(dfd, "f", 0), 0);
  WT_EQ_INT(unlinkat(dfd, "f", 0), -1);
  WT_EQ_INT(errno, ENOENT);
  close(dfd);
}

WT_TEST(mingw, rename_replaces_an_existing_target) {
  const char *d = wt_tmpdir();
  put(d, "old", "old");
  put(d, "tmp", "new");
  char a[MAX_PATH * 3], b[MAX_PATH * 3];
  snprintf(a, sizeof(a), "%s\\tmp", d);
  snprintf(b, sizeof(b), "%s\\old", d);
  WT_EQ_INT(rename(a, b), 0);
  WT_EQ_INT(access(a, F_OK), -1);
  WT_EQ_INT(access(b, F_OK), 0);
  FILE *f = fopen(b, "re");
  char buf[8] = {0};
  fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  WT_EQ_STR(buf, "new");
  WT_EQ_INT(unlink(b), 0);
  WT_EQ_INT(unlink(b), -1);
  WT_EQ_INT(errno, ENOENT);
}

WT_TEST(mingw, aligned_blocks_are_freed_with_free) {
  void *p[8];
  for (int i = 0; i < 8; i++) {
    WT_EQ_INT(posix_memalign(&p[i], 64, 1000 + (size_t)i), 0);
    WT_EQ_INT((uintptr_t)p[i] % 64, 0);
    memset(p[i], 0xab, 1000);
  }
  char *plain = malloc(100);
  free(p[3]);
  free(plain); /* not an aligned block: the CRT's free */
  for (int i = 0; i < 8; i++)
    if (i != 3)
      free(p[i]);
  free(NULL);
  WT_EQ_INT(posix_memalign(&p[0], 3, 10), EINVAL);
}

static int cmp_rev(const void *a, const void *b, void *arg) {
  int sign = *(int *)arg;
  return sign * (*(const int *)a - *(const int *)b);
}

WT_TEST(mingw, qsort_r_and_strchrnul) {
  int v[] = {3, 1, 2, 5, 4}, sign = -1;
  qsort_r(v, 5, sizeof(int), cmp_rev, &sign);
  for (int i = 0; i < 5; i++)
    WT_EQ_INT(v[i], 5 - i);
  const char *s = "key=value";
  WT_CHECK(strchrnul(s, '=') == s + 3, "found");
  WT_CHECK(strchrnul(s, '#') == s + strlen(s), "not found ends at NUL");
}

WT_TEST(mingw, pipe2_and_setenv) {
  int fds[2];
  WT_EQ_INT(pipe2(fds, O_CLOEXEC), 0);
  WT_EQ_INT(write(fds[1], "ab", 2), 2);
  char b[4] = {0};
  WT_EQ_INT(read(fds[0], b, 2), 2);
  WT_EQ_STR(b, "ab");
  close(fds[0]);
  close(fds[1]);
  WT_EQ_INT(setenv("CORDON_COMPAT_T", "1", 1), 0);
  WT_EQ_STR(getenv("CORDON_COMPAT_T"), "1");
  WT_EQ_INT(setenv("CORDON_COMPAT_T", "2", 0), 0);
  WT_EQ_STR(getenv("CORDON_COMPAT_T"), "1");
  WT_EQ_INT(setenv("BAD=NAME", "x", 1), -1);
}
