/* bench/dispatch: end-to-end dispatch latency and throughput against the
 * fair reference (bench/fair_ref.h: by hand, the bwrap command line
 * explain prints, a seccomp filter of the same shape, a fresh memory+pids
 * cgroup, the job user), with the old minimal reference (`bwrap --ro-bind
 * / /`) as context, in round-robin alternation in one run:
 *   1. `cordon-server dispatch --wait` of a /bin/true package to a paired
 *      agent on loopback, one at a time: median and p90 (target: median
 *      <= 1.3x the fair reference)
 *   2. jobs per second with 1, 8 and 20 in flight, against as many
 *      parallel fair-reference launches (target >= 0.8)
 *   3. the agent daemon's peak RSS (VmHWM; target < 8 MiB)
 * Usage: bench_dispatch [N]   (as root, like the CI) */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/fair_ref.h"

#define SERVER CORDON_BINARY_DIR "/cordon-server"
#define AGENT CORDON_BINARY_DIR "/cordon-agent"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static pid_t spawn(char *const argv[], const char *out_path) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

static int wait_ok(pid_t pid) {
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int sh(const char *cmd) {
  return system(cmd) == 0 ? 0 : -1;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static char *const old_ref[] = {"/usr/bin/bwrap",
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

/* Run `make(i)` commands, `par` at a time; returns jobs per second. */
static double throughput(char *const *(*make)(int), int total, int par) {
  pid_t running[64] = {0};
  int started = 0, done = 0;
  double t0 = now_ms();
  while (done < total) {
    for (int s = 0; s < par && started < total; s++)
      if (!running[s])
        running[s] = spawn(make(started++), NULL);
    int st;
    pid_t p = wait(&st);
    for (int s = 0; s < par; s++)
      if (running[s] == p) {
        running[s] = 0;
        done++;
      }
  }
  return total / ((now_ms() - t0) / 1000.0);
}

static char state[256], pkg[300], cfg[300], spec[300], pkgdir[300], self[4096];
static char *fair_argv[] = {self, "--fair-ref", spec, pkgdir, NULL};
static char *const *make_ref(int i) {
  (void)i;
  return fair_argv;
}
static char *dispatch_argv[] = {SERVER,   "dispatch", "--user", "alice", pkg,
                                "--wait", "--state",  state,    NULL};
static char *const *make_dispatch(int i) {
  (void)i;
  return dispatch_argv;
}

static long vm_hwm_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
  FILE *f = fopen(path, "re");
  long kb = -1;
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
      break;
  if (f)
    fclose(f);
  return kb;
}

static double timed(char *const argv[]) {
  double t = now_ms();
  if (wait_ok(spawn(argv, NULL)) < 0) {
    fprintf(stderr, "bench: %s %s failed\n", argv[0], argv[1]);
    exit(1);
  }
  return now_ms() - t;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--fair-ref") == 0)
    return fair_ref_main(argv[2], argv[3]);
  int n = argc > 1 ? atoi(argv[1]) : 40;
  if (n < 2 || geteuid() != 0) {
    fprintf(stderr, "usage: bench_dispatch [N>=2]  (as root)\n");
    return 2;
  }
  char dir[] = "/tmp/cordon-bench-dispatch-XXXXXX";
  if (!mkdtemp(dir))
    return 1;
  chmod(dir, 0755);
  ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (sl <= 0)
    return 1;
  self[sl] = '\0';
  snprintf(state, sizeof(state), "%s/state", dir);
  snprintf(cfg, sizeof(cfg), "%s/agent", dir);
  snprintf(pkg, sizeof(pkg), "%s/true.cpkg", dir);
  snprintf(pkgdir, sizeof(pkgdir), "%s/p", dir);
  snprintf(spec, sizeof(spec), "%s/explain.json", dir);
  char cmd[4096], log[300], code[128] = "";
  snprintf(log, sizeof(log), "%s/server.log", dir);
  snprintf(
      cmd, sizeof(cmd),
      "set -e; mkdir -p %s/p; echo '{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}' "
      "> %s/p/manifest.json; %s init --state %s >/dev/null 2>&1; "
      "%s user add alice --state %s >/dev/null 2>&1; %s pack %s/p -o %s --state %s >/dev/null 2>&1",
      dir, dir, SERVER, state, SERVER, state, SERVER, dir, pkg, state);
  if (sh(cmd) < 0)
    return 1;
  char *srv[] = {SERVER, "run", "--state", state, "--listen", "127.0.0.1:0", NULL};
  pid_t spid = spawn(srv, log);
  int port = 0;
  for (int i = 0; i < 100 && !port; i++) {
    usleep(50000);
    FILE *f = fopen(log, "r");
    char line[1024];
    while (f && fgets(line, sizeof(line), f)) {
      char *p = strstr(line, " listen=127.0.0.1:");
      if (p)
        port = atoi(p + strlen(" listen=127.0.0.1:"));
    }
    if (f)
      fclose(f);
  }
  if (!port) {
    fprintf(stderr, "bench: the server did not start (see %s)\n", log);
    return 1;
  }
  snprintf(cmd, sizeof(cmd), "%s pair-code alice --state %s 2>/dev/null | head -n 1", SERVER,
           state);
  FILE *p = popen(cmd, "r");
  if (!p || !fgets(code, sizeof(code), p))
    return 1;
  pclose(p);
  code[strcspn(code, "\n")] = '\0';
  mkdir(cfg, 0700);
  snprintf(cmd, sizeof(cmd),
           "echo '{\"max_jobs\": 32}' > %s/config.json; %s --config %s pair "
           "--server 127.0.0.1:%d --code %s >/dev/null 2>&1",
           cfg, AGENT, cfg, port, code);
  if (sh(cmd) < 0)
    return 1;
  /* the fair reference runs what the agent would run for this package */
  if (fair_ref_write_spec(AGENT, cfg, pkgdir, spec) < 0) {
    fprintf(stderr, "bench: explain did not give an isolated plan\n");
    return 1;
  }
  char alog[300];
  snprintf(alog, sizeof(alog), "%s/agent.log", dir);
  char *ag[] = {AGENT, "--config", cfg, "run", NULL};
  pid_t apid = spawn(ag, alog);
  sleep(1);

  double *a = calloc((size_t)n, sizeof(double)), *b = calloc((size_t)n, sizeof(double));
  double *c = calloc((size_t)n, sizeof(double)), *ra = calloc((size_t)n, sizeof(double));
  for (int i = 0; i < 3; i++) { /* warm up */
    timed(fair_argv);
    timed(dispatch_argv);
    timed(old_ref);
  }
  double l0[3], l1[3];
  getloadavg(l0, 3);
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < 3; k++) { /* the order rotates every round */
      switch ((i + k) % 3) {
      case 0:
        b[i] = timed(dispatch_argv);
        break;
      case 1:
        a[i] = timed(fair_argv);
        break;
      case 2:
        c[i] = timed(old_ref);
        break;
      }
    }
    ra[i] = b[i] / a[i];
  }
  qsort(a, (size_t)n, sizeof(double), cmp);
  qsort(b, (size_t)n, sizeof(double), cmp);
  qsort(c, (size_t)n, sizeof(double), cmp);
  qsort(ra, (size_t)n, sizeof(double), cmp);
  static const int pars[] = {1, 8, 20};
  double tr[3], td[3];
  int total = n * 4 < 80 ? 80 : n * 4;
  for (int k = 0; k < 3; k++) { /* alternating too: four slices of each, interleaved */
    double sr = 0, sd = 0;
    for (int slice = 0; slice < 4; slice++) {
      sr += (total / 4) / throughput(make_ref, total / 4, pars[k]);
      sd += (total / 4) / throughput(make_dispatch, total / 4, pars[k]);
    }
    tr[k] = (total / 4) * 4 / sr;
    td[k] = (total / 4) * 4 / sd;
  }
  getloadavg(l1, 3);
  long hwm = vm_hwm_kb(apid);
  printf("dispatch: %d rounds, round-robin; agent and server on this machine; load average "
         "%.2f before, %.2f after (%ld cpus)\n",
         n, l0[0], l1[0], sysconf(_SC_NPROCESSORS_ONLN));
  printf("  %-40s median %7.2f ms  p90 %7.2f ms\n", "dispatch --wait (/bin/true package)", b[n / 2],
         b[(n * 9) / 10]);
  printf("  %-40s median %7.2f ms  p90 %7.2f ms\n", "fair reference (same view/filter/cgroup)",
         a[n / 2], a[(n * 9) / 10]);
  printf("  %-40s median %7.2f ms  p90 %7.2f ms\n", "old minimal reference (--ro-bind / /)",
         c[n / 2], c[(n * 9) / 10]);
  printf("  latency ratio dispatch/fair: median of medians %.2f, median per round %.2f "
         "(target <= 1.3)\n",
         b[n / 2] / a[n / 2], ra[n / 2]);
  printf("  latency ratio dispatch/old minimal: %.2f (context only)\n", b[n / 2] / c[n / 2]);
  for (int k = 0; k < 3; k++)
    printf("  %2d in flight: dispatch %7.1f jobs/s, fair reference %7.1f jobs/s, ratio %.2f "
           "(target >= 0.8)\n",
           pars[k], td[k], tr[k], td[k] / tr[k]);
  printf("  agent peak RSS (VmHWM of the daemon): %.2f MiB (target < 8 MiB)\n", hwm / 1024.0);
  kill(apid, SIGTERM);
  waitpid(apid, NULL, 0);
  kill(spid, SIGTERM);
  waitpid(spid, NULL, 0);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)!system(cmd);
  free(a);
  free(b);
  free(c);
  free(ra);
  return 0;
}
