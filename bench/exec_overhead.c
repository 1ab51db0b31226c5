/* bench/exec_overhead: the cost of `cordon-agent exec` on a trivial package
 * (/bin/true) next to a fixed reference bwrap command, measured alternately
 * in the same run. Prints both medians, the ratio (target <= 1.15) and the
 * agent's peak RSS (target < 8 MiB). Usage: bench_exec_overhead [N] */
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
    fprintf(stderr, "bench: %s failed (status %d)\n", argv[0], st);
    exit(1);
  }
  if (out_rss_kb)
    *out_rss_kb = ru.ru_maxrss;
  return now_ms() - t0;
}

static double run(char *const argv[], long *out_rss_kb) {
  return run_as(argv, out_rss_kb, 0, 0);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100;
  char dir[] = "/tmp/cordon-bench-XXXXXX";
  if (!mkdtemp(dir))
    return 1;
  chmod(dir, 0755);
  char path[256], cfg[256];
  snprintf(path, sizeof(path), "%s/pkg", dir);
  mkdir(path, 0755);
  snprintf(path, sizeof(path), "%s/pkg/manifest.json", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"name\":\"true\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}\n", f);
  fclose(f);
  snprintf(cfg, sizeof(cfg), "%s/agent", dir);
  mkdir(cfg, 0700);

  char pkg[256];
  snprintf(pkg, sizeof(pkg), "%s/pkg", dir);
  char *agent[] = {CORDON_BINARY_DIR "/cordon-agent", "--config", cfg, "exec", pkg, NULL};
  char *ref[] = {"/usr/bin/bwrap",
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
  double *a = calloc((size_t)n, sizeof(double)), *b = calloc((size_t)n, sizeof(double));
  double *c = calloc((size_t)n, sizeof(double));
  /* the agent never runs a job as root: the same reference as its job user */
  struct passwd *ju = geteuid() == 0 ? getpwnam("cordon-job") : NULL;
  long rss = 0, peak = 0;
  for (int i = 0; i < 5; i++) { /* warm caches */
    run(agent, NULL);
    run(ref, NULL);
  }
  for (int i = 0; i < n; i++) {
    a[i] = run(agent, &rss);
    if (rss > peak)
      peak = rss;
    b[i] = run(ref, NULL);
    c[i] = ju ? run_as(ref, NULL, ju->pw_uid, ju->pw_gid) : b[i];
  }
  qsort(a, (size_t)n, sizeof(double), cmp);
  qsort(b, (size_t)n, sizeof(double), cmp);
  qsort(c, (size_t)n, sizeof(double), cmp);
  double ma = a[n / 2], mb = b[n / 2], mc = c[n / 2];
  printf("exec_overhead: %d runs each, alternating (agent as %s)\n", n,
         geteuid() == 0 ? "root: job user + cgroup" : "a user");
  printf("  %-34s median %7.2f ms   p90 %7.2f ms\n", "cordon-agent exec (/bin/true)", ma,
         a[n * 9 / 10]);
  printf("  %-34s median %7.2f ms   p90 %7.2f ms\n", "reference bwrap /bin/true", mb,
         b[n * 9 / 10]);
  if (ju)
    printf("  %-34s median %7.2f ms   p90 %7.2f ms\n", "reference bwrap, as cordon-job", mc,
           c[n * 9 / 10]);
  printf("  ratio agent/reference: %.3f (target <= 1.15)\n", ma / mb);
  if (ju)
    printf("  ratio agent/reference as the job user: %.3f (jobs never run as root)\n", ma / mc);
  printf("  agent peak RSS: %.2f MiB (target < 8 MiB; includes the launcher child until exec)\n",
         peak / 1024.0);
  char rm[300];
  snprintf(rm, sizeof(rm), "rm -rf %s", dir);
  if (system(rm) != 0)
    fprintf(stderr, "bench: could not remove %s\n", dir);
  free(a);
  free(b);
  free(c);
  return 0;
}
