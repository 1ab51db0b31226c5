/* platform/linux/seccomp.c's compiled-program cache: the program of each
 * variant is built once per process, and every job still gets a memfd of
 * its own (bwrap reads it from its own offset), sealed, holding the same
 * program as the launcher's copy; the two variants stay distinct. What
 * the program allows is tested in test_sandbox_seccomp_linux.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "platform/linux/seccomp.h"

static void *read_all(int fd, size_t *out_len) {
  struct stat st;
  cr_assert_eq(fstat(fd, &st), 0);
  void *buf = malloc((size_t)st.st_size);
  cr_assert(buf);
  cr_assert_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
  *out_len = (size_t)st.st_size;
  return buf;
}

Test(seccomp, each_job_gets_its_own_sealed_fd_of_the_same_program) {
  int a = seccomp_job_filter_fd(false), b = seccomp_job_filter_fd(false);
  cr_assert_geq(a, 0);
  cr_assert_geq(b, 0);
  cr_assert_neq(a, b);
  char x;
  cr_assert_eq(read(a, &x, 1), 1, "reading one moves only its own offset");
  cr_assert_eq(lseek(b, 0, SEEK_CUR), 0, "the other is still at 0");
  cr_assert_eq(write(b, "x", 1), -1, "sealed against writes");
  cr_assert_eq(fcntl(b, F_GET_SEALS) & (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL),
               F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  size_t la, lb;
  void *pa = read_all(a, &la), *pb = read_all(b, &lb);
  cr_assert_gt(la, 0);
  cr_assert_eq(la, lb);
  cr_assert_eq(memcmp(pa, pb, la), 0);

  struct sock_fprog *prog = NULL;
  cr_assert_eq(seccomp_job_filter_prog(false, &prog), 0);
  cr_assert_eq(prog->len * sizeof(struct sock_filter), la);
  cr_assert_eq(memcmp(prog->filter, pa, la), 0, "the launcher gets the same program");
  seccomp_job_prog_free(prog);

  int n = seccomp_job_filter_fd(true);
  cr_assert_geq(n, 0);
  size_t ln;
  void *pn = read_all(n, &ln);
  cr_assert(ln != la || memcmp(pn, pa, la) != 0, "net allowed is another program");
  free(pa);
  free(pb);
  free(pn);
  close(a);
  close(b);
  close(n);
}
