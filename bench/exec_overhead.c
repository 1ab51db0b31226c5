/* bench/exec_overhead: the cost of `cordon-agent exec` on a trivial package
 * (/bin/true) next to the fair reference (bench/fair_ref.h: the same bwrap
 * command line, a seccomp filter of the same shape, the same cgroups, the
 * same user, all by hand), and the old minimal reference (`--ro-bind / /`,
 * no filter, no cgroup) for context. The three run in round-robin
 * alternation in one run, so that load from elsewhere falls on all alike.
 * Prints medians, p90 and the ratios (target: agent <= 1.15 x fair) and
 * the agent's peak RSS (target < 8 MiB).
 * Usage: bench_exec_overhead [N]   (as root: the agent's jobs run as
 * cordon-job in a cgroup only then) */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/fair_ref.h"
#include "platform/linux/seccomp.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* as_uid: 0 to keep ours, else the uid/gid to drop to before exec */
static double run_as(char *const argv[], long *out_rss_kb, uid_t as_uid, gid_t as_gid) {
  double t0 = now_ms();
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    if (as_uid && (setgroups(0, NULL) < 0 || setgid(as_gid) < 0 || setuid(as_uid) < 0))
      _exit(126);
    execv(argv[0], argv);
    _exit(127);
  }
  int st;
  struct rusage ru;
  if (wait4(pid, &st, 0, &ru) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "bench: %s %s failed (status %d)\n", argv[0], argv[1] ? argv[1] : "", st);
    exit(1);
  }
  if (out_rss_kb)
    *out_rss_kb = ru.ru_maxrss;
  return now_ms() - t0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void line(const char *what, double *v, int n) {
  printf("  %-40s median %7.2f ms   p90 %7.2f ms\n", what, v[n / 2], v[n * 9 / 10]);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--fair-ref") == 0)
    return fair_ref_main(argv[2], argv[3]);
  int n = argc > 1 ? atoi(argv[1]) : 100;
  if (n < 1 || geteuid() != 0) {
    fprintf(stderr, "usage: bench_exec_overhead [N]  (as root)\n");
    return 2;
  }
  char dir[] = "/tmp/cordon-bench-XXXXXX";
  if (!mkdtemp(dir))
    return 1;
  chmod(dir, 0755);
  char path[512], cfg[256], pkg[256], spec[256], self[4096];
  snprintf(pkg, sizeof(pkg), "%s/pkg", dir);
  mkdir(pkg, 0755);
  snprintf(path, sizeof(path), "%s/manifest.json", pkg);
  FILE *f = fopen(path, "w");
  fputs("{\"name\":\"true\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}\n", f);
  fclose(f);
  snprintf(cfg, sizeof(cfg), "%s/agent", dir);
  mkdir(cfg, 0700);
  snprintf(spec, sizeof(spec), "%s/explain.json", dir);
  ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (sl <= 0 || fair_ref_write_spec(CORDON_BINARY_DIR "/cordon-agent", cfg, pkg, spec) < 0) {
    fprintf(stderr, "bench: explain did not give an isolated plan\n");
    return 1;
  }
  self[sl] = '\0';

  char *agent[] = {CORDON_BINARY_DIR "/cordon-agent", "--config", cfg, "exec", pkg, NULL};
  char *fair[] = {self, "--fair-ref", spec, pkg, NULL};
  char *old[] = {"/usr/bin/bwrap",
                 "--unshare-all",
                 "--die-with-parent",
                 "--new-session",
                 "--cap-drop",
                 "ALL",
                 "--ro-bind",
                 "/",
                 "/",
                 "--proc",
                 "/proc",
                 "--dev",
                 "/dev",
                 "--tmpfs",
                 "/tmp",
                 "/bin/true",
                 NULL};
  struct passwd *ju = getpwnam("cordon-job");
  if (!ju) {
    fprintf(stderr, "bench: no cordon-job user\n");
    return 1;
  }
  uid_t juid = ju->pw_uid;
  gid_t jgid = ju->pw_gid;
  double *a = calloc((size_t)n, sizeof(double)), *b = calloc((size_t)n, sizeof(double));
  double *c = calloc((size_t)n, sizeof(double)), *ra = calloc((size_t)n, sizeof(double));
  double *rc = calloc((size_t)n, sizeof(double));
  long rss = 0, peak = 0;
  for (int i = 0; i < 5; i++) { /* warm caches */
    run_as(agent, NULL, 0, 0);
    run_as(fair, NULL, 0, 0);
    run_as(old, NULL, juid, jgid);
  }
  double l0[3];
  getloadavg(l0, 3);
  for (int i = 0; i < n; i++) {
    /* the order rotates so that no one always follows another */
    for (int k = 0; k < 3; k++) {
      switch ((i + k) % 3) {
      case 0:
        a[i] = run_as(agent, &rss, 0, 0);
        peak = rss > peak ? rss : peak;
        break;
      case 1:
        b[i] = run_as(fair, NULL, 0, 0);
        break;
      case 2:
        c[i] = run_as(old, NULL, juid, jgid);
        break;
      }
    }
    ra[i] = a[i] / b[i];
    rc[i] = a[i] / c[i];
  }
  double l1[3];
  getloadavg(l1, 3);
  qsort(a, (size_t)n, sizeof(double), cmp);
  qsort(b, (size_t)n, sizeof(double), cmp);
  qsort(c, (size_t)n, sizeof(double), cmp);
  qsort(ra, (size_t)n, sizeof(double), cmp);
  qsort(rc, (size_t)n, sizeof(double), cmp);
  long insns = 0;
  json_error_t je;
  json_t *sj = json_load_file(spec, 0, &je);
  int sfd = fr_filter_fd(json_object_get(sj, "seccomp"), false, &insns);
  if (sfd >= 0)
    close(sfd);
  json_decref(sj);
  printf("exec_overhead: %d rounds, round-robin; load average %.2f before, %.2f after (%ld cpus)\n",
         n, l0[0], l1[0], sysconf(_SC_NPROCESSORS_ONLN));
  line("cordon-agent exec (/bin/true)", a, n);
  line("fair reference (same view/filter/cgroup)", b, n);
  line("old minimal reference (--ro-bind / /)", c, n);
  printf("  ratio agent/fair: median of medians %.3f, median per round %.3f (target <= 1.15)\n",
         a[n / 2] / b[n / 2], ra[n / 2]);
  printf("  ratio agent/old minimal: %.3f (context only: not reachable with the sandbox kept)\n",
         a[n / 2] / c[n / 2]);
  long cordon_insns = 0;
  int cfd = seccomp_job_filter_fd(false);
  struct stat cst;
  if (cfd >= 0 && fstat(cfd, &cst) == 0)
    cordon_insns = (long)(cst.st_size / 8);
  if (cfd >= 0)
    close(cfd);
  printf("  seccomp filters: fair reference %ld BPF instructions, cordon's %ld\n", insns,
         cordon_insns);
  printf("  agent peak RSS: %.2f MiB (target < 8 MiB; includes the launcher child until exec)\n",
         peak / 1024.0);
  char rm[300];
  snprintf(rm, sizeof(rm), "rm -rf %s", dir);
  if (system(rm) != 0)
    fprintf(stderr, "bench: could not remove %s\n", dir);
  free(a);
  free(b);
  free(c);
  free(ra);
  free(rc);
  return 0;
}
