/* bench_package_verify: verify and unpack a large .cpkg, compared with raw
 * BLAKE2b over the same bytes (issue 3, "Speed and memory").
 *
 *   bench_package_verify [--size-mib N | --1g] [--dir DIR] [--runs N] [--no-agent]
 *
 * Builds a package of N MiB (default 256) of random data in a temporary
 * directory under DIR (default $TMPDIR or /tmp), then:
 *   - raw: crypto_generichash (BLAKE2b-256) over the package bytes, mmapped
 *     and page-cache hot, in this process;
 *   - verify: agent_cpkg_stage() in a fresh child process (this program
 *     re-executed), timed from fork to exit, its peak RSS from wait4();
 *   - exec: `cordon-agent exec PKG --trust PUB` the same way (a no-op entry),
 *     when that binary is built.
 * Prints MB/s (10^6 bytes), the verify/raw ratio and peak RSS, with the
 * targets: ratio >= 0.70, peak RSS < 16 MiB and no larger for 1 GiB.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/cpkg_stage.h"
#include "agent/trust.h"
#include "proto/keyfile.h"
#include "server/pack.h"

#define MIB (1024.0 * 1024.0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what) {
  fprintf(stderr, "bench_package_verify: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void write_text(const char *path, const char *text, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, text, len) != (ssize_t)len || close(fd) < 0)
    die(path);
}

/* Child mode: stage PKG into the empty STAGE directory, trusting PUB. */
static int child_stage(const char *pkg, const char *pub, const char *stage) {
  if (sodium_init() < 0)
    return 3;
  struct cpkg_trust *t = NULL;
  struct cordon_diag d = {{0}};
  if (cpkg_trust_new(&t) != 0 || agent_trust_load_file(t, pub, &d) != 0) {
    fprintf(stderr, "trust: %s\n", d.msg);
    return 3;
  }
  int dirfd = open(stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0)
    return 3;
  struct manifest *m = NULL;
  uint8_t h[CPKG_HASH_SIZE];
  int err = agent_cpkg_stage(pkg, t, dirfd, &m, h, &d);
  if (err) {
    fprintf(stderr, "stage: %s: %s\n", cordon_err_name(err), d.msg);
    return 1;
  }
  manifest_free(m);
  cpkg_trust_free(t);
  close(dirfd);
  return 0;
}

/* Seconds to BLAKE2b-256 the whole buffer, 1 MiB at a time. */
static double raw_hash_secs(const uint8_t *buf, size_t len) {
  uint8_t h[32];
  crypto_generichash_state st;
  double t0 = now();
  crypto_generichash_init(&st, NULL, 0, sizeof(h));
  for (size_t off = 0; off < len; off += 1u << 20)
    crypto_generichash_update(&st, buf + off, len - off < (1u << 20) ? len - off : 1u << 20);
  crypto_generichash_final(&st, h, sizeof(h));
  return now() - t0;
}

struct run_result {
  double secs;
  long maxrss_kib;
  int status;
};

static struct run_result run_child(char *const argv[], int quiet) {
  struct run_result r = {0};
  sync(); /* start each run without the previous run's dirty pages being written back */
  double t0 = now();
  pid_t pid = fork();
  if (pid < 0)
    die("fork");
  if (pid == 0) {
    if (quiet) {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  int status;
  struct rusage ru;
  if (wait4(pid, &status, 0, &ru) != pid)
    die("wait4");
  r.secs = now() - t0;
  r.maxrss_kib = ru.ru_maxrss;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

static void rm_rf(const char *path) {
  char *cmd = NULL;
  if (asprintf(&cmd, "rm -rf '%s'", path) < 0 || system(cmd) != 0)
    fprintf(stderr, "bench_package_verify: could not remove %s\n", path);
  free(cmd);
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--child-stage") == 0)
    return child_stage(argv[2], argv[3], argv[4]);

  size_t size_mib = 256;
  int runs = 3, use_agent = 1;
  const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--size-mib") == 0 && i + 1 < argc)
      size_mib = strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--1g") == 0)
      size_mib = 1024;
    else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
      base = argv[++i];
    else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
      runs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--no-agent") == 0)
      use_agent = 0;
    else {
      fprintf(stderr, "usage: bench_package_verify [--size-mib N | --1g] [--dir DIR] [--runs N] "
                      "[--no-agent]\n");
      return 2;
    }
  }
  if (size_mib == 0 || runs < 1)
    return 2;
  if (sodium_init() < 0)
    return 1;

  char dir[4096];
  snprintf(dir, sizeof(dir), "%s/cordon-bench-XXXXXX", base);
  if (!mkdtemp(dir))
    die(dir);
  char src[4200], pkg[4200], pub[4200], stage[4200], data[4300], manifest[4300];
  snprintf(src, sizeof(src), "%s/src", dir);
  snprintf(pkg, sizeof(pkg), "%s/bench.cpkg", dir);
  snprintf(pub, sizeof(pub), "%s/publisher.pub", dir);
  snprintf(stage, sizeof(stage), "%s/stage", dir);
  snprintf(data, sizeof(data), "%s/data.bin", src);
  snprintf(manifest, sizeof(manifest), "%s/manifest.json", src);
  if (mkdir(src, 0755) < 0)
    die(src);
  static const char mjson[] = "{\"name\":\"bench\",\"version\":\"1.0.0\",\"entry\":[\"/bin/"
                              "true\"],\"min_sandbox\":\"none\"}\n";
  write_text(manifest, mjson, strlen(mjson));

  /* Random contents, written 1 MiB at a time. */
  uint8_t *chunk = malloc(1 << 20);
  int fd = open(data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (!chunk || fd < 0)
    die(data);
  for (size_t i = 0; i < size_mib; i++) {
    randombytes_buf(chunk, 1 << 20);
    if (write(fd, chunk, 1 << 20) != 1 << 20)
      die(data);
  }
  close(fd);
  free(chunk);

  uint8_t pk[crypto_sign_PUBLICKEYBYTES];
  uint8_t *sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
  crypto_sign_keypair(pk, sk);
  char line[KEYFILE_MAX_BYTES];
  size_t line_len;
  if (keyfile_format(KEYFILE_PUBLISHER_PUBLIC, pk, "bench", line, sizeof(line), &line_len) != 0)
    return 1;
  write_text(pub, line, line_len);
  struct cordon_diag d = {{0}};
  struct pack_summary sum;
  double t0 = now();
  int err = pack_dir(src, pkg, sk, &sum, &d);
  double pack_s = now() - t0;
  sodium_free(sk);
  if (err) {
    fprintf(stderr, "bench_package_verify: pack: %s: %s\n", cordon_err_name(err), d.msg);
    return 1;
  }
  rm_rf(src); /* keep the page cache for the package */

  /* Raw BLAKE2b over the same bytes, page-cache hot, in this process; runs
   * alternate with the verifying child so that both see the same machine. */
  fd = open(pkg, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    die(pkg);
  size_t len = (size_t)sum.size;
  const uint8_t *map = mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (map == MAP_FAILED)
    die("mmap");
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (sl < 0)
    die("/proc/self/exe");
  self[sl] = '\0';
  double raw_best = 1e9, ver_best = 1e9;
  long ver_rss = 0;
  for (int r = 0; r < runs; r++) {
    double s = raw_hash_secs(map, len);
    if (s < raw_best)
      raw_best = s;
    if (mkdir(stage, 0700) < 0)
      die(stage);
    char *cargv[] = {self, "--child-stage", pkg, pub, stage, NULL};
    struct run_result rr = run_child(cargv, 0);
    if (rr.status != 0) {
      fprintf(stderr, "bench_package_verify: verifying child failed (status %d)\n", rr.status);
      rm_rf(dir);
      return 1;
    }
    if (rr.secs < ver_best)
      ver_best = rr.secs;
    if (rr.maxrss_kib > ver_rss)
      ver_rss = rr.maxrss_kib;
    rm_rf(stage);
  }

  double mb = (double)len / 1e6;
  double raw_mbs = mb / raw_best, ver_mbs = mb / ver_best, ratio = ver_mbs / raw_mbs;
  printf(
      "package:                  %zu MiB of random data, %llu bytes, %zu files (packed in %.2fs)\n",
      size_mib, (unsigned long long)sum.size, sum.n_files, pack_s);
  printf("raw crypto_generichash:   %8.1f MB/s\n", raw_mbs);
  printf("verify+unpack (stage):    %8.1f MB/s  ratio %.2f  (target >= 0.70: %s)\n", ver_mbs, ratio,
         ratio >= 0.70 ? "met" : "MISSED");
  printf("peak RSS, verifying proc: %8.1f MiB  (target < 16 MiB: %s)\n", (double)ver_rss / 1024.0,
         (double)ver_rss * 1024.0 < 16.0 * MIB ? "met" : "MISSED");

  char agent[4096];
  snprintf(agent, sizeof(agent), "%s/cordon-agent", CORDON_BINARY_DIR);
  if (use_agent && access(agent, X_OK) == 0) {
    double ex_best = 1e9;
    long ex_rss = 0;
    int status = 0;
    for (int r = 0; r < runs; r++) {
      double s = raw_hash_secs(map, len);
      if (s < raw_best)
        raw_best = s;
      char *eargv[] = {agent, "exec", pkg, "--trust", pub, NULL};
      struct run_result rr = run_child(eargv, 1);
      status = rr.status;
      if (rr.secs < ex_best)
        ex_best = rr.secs;
      if (rr.maxrss_kib > ex_rss)
        ex_rss = rr.maxrss_kib;
    }
    printf(
        "cordon-agent exec:        %8.1f MB/s  ratio %.2f  peak RSS %.1f MiB  (exit status %d%s)\n",
        mb / ex_best, (mb / ex_best) / (mb / raw_best), (double)ex_rss / 1024.0, status,
        status == 0 ? "" : ": see `cordon-agent exec` for why");
  } else {
    printf("cordon-agent exec:        skipped (%s)\n",
           use_agent ? "no cordon-agent built" : "--no-agent");
  }
  munmap((void *)map, len);
  close(fd);
  rm_rf(dir);
  return 0;
}
