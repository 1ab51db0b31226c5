/* bench/dispatch: end-to-end dispatch latency and throughput against the
 * fixed reference bwrap command, measured in the same run.
 *   1. reference bwrap /bin/true, one at a time: median and p99
 *   2. `cordon-server dispatch --wait` of a /bin/true package to a paired
 *      agent on loopback: median and p99 (target: median <= 1.3x bwrap)
 *   3. jobs per second with 8 in flight, both ways (target >= 70%)
 * Usage: bench_dispatch [N]   (run as root, like the CI) */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

static char *const ref[] = {"/usr/bin/bwrap",
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

static char state[256], pkg[300], cfg[300];
static char *const *make_ref(int i) {
  (void)i;
  return ref;
}
static char *dispatch_argv[] = {SERVER,   "dispatch", "--user", "alice", pkg,
                                "--wait", "--state",  state,    NULL};
static char *const *make_dispatch(int i) {
  (void)i;
  return dispatch_argv;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 40;
  char dir[] = "/tmp/cordon-bench-dispatch-XXXXXX";
  if (!mkdtemp(dir))
    return 1;
  chmod(dir, 0755);
  snprintf(state, sizeof(state), "%s/state", dir);
  snprintf(cfg, sizeof(cfg), "%s/agent", dir);
  snprintf(pkg, sizeof(pkg), "%s/true.cpkg", dir);
  char cmd[2048], log[300], code[128] = "";
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
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
      char *p = strstr(line, "listening on 127.0.0.1:");
      if (p)
        port = atoi(p + strlen("listening on 127.0.0.1:"));
    }
    if (f)
      fclose(f);
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
           "echo '{\"max_jobs\": 16}' > %s/config.json; %s --config %s pair "
           "--server 127.0.0.1:%d --code %s 2>/dev/null",
           cfg, AGENT, cfg, port, code);
  if (sh(cmd) < 0)
    return 1;
  char alog[300];
  snprintf(alog, sizeof(alog), "%s/agent.log", dir);
  char *ag[] = {AGENT, "--config", cfg, "run", NULL};
  pid_t apid = spawn(ag, alog);
  sleep(1);

  double *a = calloc((size_t)n, sizeof(double)), *b = calloc((size_t)n, sizeof(double));
  for (int i = 0; i < 3; i++) { /* warm up */
    wait_ok(spawn(ref, NULL));
    wait_ok(spawn(dispatch_argv, NULL));
  }
  for (int i = 0; i < n; i++) {
    double t = now_ms();
    wait_ok(spawn(ref, NULL));
    a[i] = now_ms() - t;
    t = now_ms();
    if (wait_ok(spawn(dispatch_argv, NULL)) < 0) {
      fprintf(stderr, "bench: dispatch failed\n");
      return 1;
    }
    b[i] = now_ms() - t;
  }
  qsort(a, (size_t)n, sizeof(double), cmp);
  qsort(b, (size_t)n, sizeof(double), cmp);
  int total = n * 2;
  double tr = throughput(make_ref, total, 8);
  double td = throughput(make_dispatch, total, 8);
  printf("dispatch: %d runs each, alternating; agent and server on this machine (as %s)\n", n,
         geteuid() == 0 ? "root" : "a user");
  printf("  %-38s median %7.2f ms  p99 %7.2f ms\n", "reference bwrap /bin/true", a[n / 2],
         a[(n * 99) / 100]);
  printf("  %-38s median %7.2f ms  p99 %7.2f ms\n", "dispatch --wait (/bin/true package)", b[n / 2],
         b[(n * 99) / 100]);
  printf("  latency ratio dispatch/bwrap: %.2f (target <= 1.3)\n", b[n / 2] / a[n / 2]);
  printf("  %-38s %7.1f jobs/s\n", "reference bwrap, 8 in flight", tr);
  printf("  %-38s %7.1f jobs/s\n", "dispatch --wait, 8 in flight", td);
  printf("  throughput ratio: %.2f (target >= 0.70)\n", td / tr);
  kill(apid, SIGTERM);
  waitpid(apid, NULL, 0);
  kill(spid, SIGTERM);
  waitpid(spid, NULL, 0);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)!system(cmd);
  free(a);
  free(b);
  return 0;
}
