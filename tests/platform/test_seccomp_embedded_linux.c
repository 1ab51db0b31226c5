/* The seccomp programs embedded at build time (cmake/seccomp_gen.c) are
 * the ones libseccomp builds at run time from the same policy: the two
 * variants, instruction for instruction, through both ways a job gets
 * them (the memfd for bwrap, the array for the launcher). */
#include <criterion/criterion.h>
#include <linux/filter.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "platform/linux/seccomp.h"

static void assert_same_as_libseccomp(bool net) {
  struct sock_filter *built = NULL;
  size_t n = 0;
  cr_assert_eq(seccomp_job_build_bpf(net, &built, &n), 0);
  cr_assert_gt(n, 100, "the policy compiles to a real program (%zu instructions)", n);

  struct sock_fprog *prog = NULL;
  cr_assert_eq(seccomp_job_filter_prog(net, &prog), 0);
  cr_assert_eq(prog->len, n, "net %d: embedded %u instructions, libseccomp %zu", net, prog->len, n);
  for (size_t i = 0; i < n; i++)
    cr_assert(memcmp(&prog->filter[i], &built[i], sizeof(built[i])) == 0,
              "net %d: instruction %zu differs", net, i);
  seccomp_job_prog_free(prog);

  int fd = seccomp_job_filter_fd(net);
  cr_assert_geq(fd, 0);
  struct stat st;
  cr_assert_eq(fstat(fd, &st), 0);
  cr_assert_eq((size_t)st.st_size, n * sizeof(*built));
  struct sock_filter *fromfd = malloc((size_t)st.st_size);
  cr_assert(fromfd);
  cr_assert_eq(pread(fd, fromfd, (size_t)st.st_size, 0), st.st_size);
  cr_assert_eq(memcmp(fromfd, built, (size_t)st.st_size), 0, "net %d: the memfd holds it", net);
  free(fromfd);
  close(fd);
  free(built);
}

Test(seccomp_embedded, a_native_build_embeds_the_programs) {
  cr_assert(seccomp_job_program_embedded(), "built natively, the programs come from the build");
}

Test(seccomp_embedded, the_embedded_program_without_net_is_what_libseccomp_builds) {
  assert_same_as_libseccomp(false);
}

Test(seccomp_embedded, the_embedded_program_with_net_is_what_libseccomp_builds) {
  assert_same_as_libseccomp(true);
}
