/* bench/scale: one cordon-server holding N devices, measured end to end on
 * loopback with bench_loadgen (the devices and the dispatcher) and
 * bench_echo (the baseline), in one run:
 *   - sessions established per second while N devices connect; the
 *     server's VmRSS with no session and with N, and per session;
 *   - dispatch throughput (admin socket -> job -> running -> result stored
 *     -> ack) with 1, 100 and N devices, and median / p99 latency at half
 *     the maximum measured with 100 devices;
 *   - recovery: kill -9 of the server and a restart while N devices are
 *     connected and jobs are being dispatched; the time until all are back
 *     (the agent's backoff and jitter), and from the jobs table, that every
 *     job whose dispatch was answered has exactly one result (lost) and no
 *     job reached a device twice (duplicated);
 *   - the baseline: plain libuv TCP echo, same connection count and the same
 *     message rate, so each figure of the session layer is also a ratio.
 * The last line sums it up:
 *   scale: devices=N sessions_per_s=... rss_per_session_kib=... jobs_per_s=...
 *          p99_ms=... reconnect_s=... lost=0 duplicated=0
 *
 * Usage: bench_scale [--devices N] [--cache DIR] [--smoke]
 *        bench_scale --cluster [DEVICES [JOBS [CONC]]]
 *   --cluster    jobs per second for one server on SQLite, one on
 *                PostgreSQL and two servers routed through it, in one run:
 *                bench/cluster.sh (a throwaway PostgreSQL; as root)
 *   --devices N  (default 10000)
 *   --cache DIR  keep the server's state and the devices' identities in DIR
 *                and reuse them on the next run (pairing 10,000 devices
 *                takes a while); without it, a fresh directory, removed
 *   --smoke      fewer jobs; exit 1 unless every device connected, every
 *                dispatched job has exactly one result and none is lost or
 *                duplicated (nothing about speed) */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SERVER CORDON_BINARY_DIR "/cordon-server"
#define LOADGEN CORDON_BINARY_DIR "/bench_loadgen"
#define ECHO CORDON_BINARY_DIR "/bench_echo"
#define SERVER_DEFAULT_MAX_CONNS 1024 /* net_limits_default() */

static char dir[512], state[600], pkg[600], ids[600], jobs_log[600], slog[600];
/* when this run began, as `jobs --since` reads it: a cached state holds the
 * jobs of earlier runs too, which are not this run's to check (and all of
 * them would be more than one admin reply holds) */
static char run_start[32];
static bool smoke;
static int failures;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL: ");
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  failures++;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  return system(cmd) == 0 ? 0 : -1;
}

static long rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long kib = -1;
  while (f && fgets(line, sizeof(line), f))
    if (strncmp(line, "VmRSS:", 6) == 0)
      kib = atol(line + 6);
  if (f)
    fclose(f);
  return kib;
}

/* ---- the server ---- */

static pid_t server_pid;
static int server_port;

/* The port from the log's "listening" line (the last one: a restart
 * appends). */
static int read_port(long from) {
  FILE *f = fopen(slog, "r");
  if (!f)
    return 0;
  fseek(f, from, SEEK_SET);
  char line[1024];
  int port = 0;
  while (fgets(line, sizeof(line), f)) {
    char *p = strstr(line, "msg=listening listen=127.0.0.1:");
    if (p)
      port = atoi(p + strlen("msg=listening listen=127.0.0.1:"));
  }
  fclose(f);
  return port;
}

static int server_start(int port, unsigned devices) {
  struct stat st;
  long from = stat(slog, &st) == 0 ? (long)st.st_size : 0;
  char listen[64], conns[32];
  snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
  snprintf(conns, sizeof(conns), "%u", devices + 256);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(slog, O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    if (devices + 16 > SERVER_DEFAULT_MAX_CONNS)
      execl(SERVER, SERVER, "run", "--state", state, "--listen", listen, "--drain-timeout", "0",
            "--max-connections", conns, (char *)NULL);
    else
      execl(SERVER, SERVER, "run", "--state", state, "--listen", listen, "--drain-timeout", "0",
            (char *)NULL);
    _exit(127);
  }
  server_pid = pid;
  for (int i = 0; i < 200; i++) {
    usleep(25000);
    int p = read_port(from);
    if (p) {
      server_port = p;
      return 0;
    }
    if (waitpid(pid, NULL, WNOHANG) == pid)
      break;
  }
  fprintf(stderr, "bench_scale: the server did not start (see %s)\n", slog);
  return -1;
}

static void server_stop(int sig) {
  if (server_pid <= 0)
    return;
  kill(server_pid, sig);
  waitpid(server_pid, NULL, 0);
  server_pid = 0;
}

/* ---- a load generator ---- */

struct lg {
  pid_t pid;
  FILE *in, *out;
};

static int lg_start(struct lg *g, unsigned devices, const char *ids_path, bool backoff) {
  int to[2], from[2];
  if (pipe(to) < 0 || pipe(from) < 0)
    return -1;
  char srv[64], n[32];
  snprintf(srv, sizeof(srv), "127.0.0.1:%d", server_port);
  snprintf(n, sizeof(n), "%u", devices);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[1]);
    close(from[0]);
    char *argv[] = {LOADGEN,
                    "--server",
                    srv,
                    "--state",
                    state,
                    "--devices",
                    n,
                    "--ids",
                    (char *)ids_path,
                    "--package",
                    pkg,
                    "--jobs-log",
                    jobs_log,
                    backoff ? "--backoff" : NULL,
                    NULL};
    execv(LOADGEN, argv);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  g->pid = pid;
  g->in = fdopen(to[1], "w");
  g->out = fdopen(from[0], "r");
  char line[512];
  if (!fgets(line, sizeof(line), g->out)) /* "loadgen ready ..." */
    return -1;
  return 0;
}

/* The answer line of a command sent before (it starts with the command's
 * word) in out: 0 when it says ok. */
static int lg_wait(struct lg *g, const char *cmd, char *out, size_t cap) {
  char word[32];
  sscanf(cmd, "%31s", word);
  while (fgets(out, (int)cap, g->out)) {
    out[strcspn(out, "\n")] = '\0';
    if (strncmp(out, word, strlen(word)) == 0 && out[strlen(word)] == ' ')
      return strstr(out, " ok") == out + strlen(word) ? 0 : -1;
  }
  snprintf(out, cap, "%s: the load generator ended", word);
  return -1;
}

/* Send a command and wait for its answer ("!..." ones are not answered). */
static int lg_cmd(struct lg *g, const char *cmd, char *out, size_t cap) {
  fprintf(g->in, "%s\n", cmd);
  fflush(g->in);
  return cmd[0] == '!' ? 0 : lg_wait(g, cmd, out, cap);
}

static void lg_stop(struct lg *g) {
  if (!g->pid)
    return;
  fprintf(g->in, "quit\n");
  fclose(g->in);
  fclose(g->out);
  waitpid(g->pid, NULL, 0);
  g->pid = 0;
}

static double val(const char *line, const char *key) {
  char k[64];
  snprintf(k, sizeof(k), " %s=", key);
  const char *p = strstr(line, k);
  return p ? atof(p + strlen(k)) : -1;
}

/* ---- the jobs table ---- */

static long count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  long n = 0;
  int c;
  while (f && (c = fgetc(f)) != EOF)
    n += c == '\n';
  if (f)
    fclose(f);
  return n;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The job ids of lines [from, to) of the jobs log, against the jobs table
 * (`cordon-server jobs --json --limit 0 --since <this run's start>`): how
 * many are not 'done' (a
 * result stored; lost), and how many appear twice (duplicated). */
static void check_jobs(long from, long to, long *out_lost, long *out_dup, long *out_checked) {
  *out_lost = *out_dup = *out_checked = -1;
  char cmd[2048];
  snprintf(cmd, sizeof(cmd), "'%s' jobs --json --limit 0 --since '%s' --state '%s' 2>/dev/null",
           SERVER, run_start, state);
  FILE *p = popen(cmd, "r");
  json_t *arr = p ? json_loadf(p, 0, NULL) : NULL;
  if (p)
    pclose(p);
  if (!json_is_array(arr)) {
    json_decref(arr);
    return;
  }
  size_t n = json_array_size(arr);
  char **done = calloc(n + 1, sizeof(char *));
  size_t nd = 0;
  for (size_t i = 0; i < n; i++) {
    json_t *j = json_array_get(arr, i);
    const char *st = json_string_value(json_object_get(j, "state"));
    const char *id = json_string_value(json_object_get(j, "id"));
    if (id && st && strcmp(st, "done") == 0)
      done[nd++] = (char *)id;
  }
  qsort(done, nd, sizeof(char *), cmp_str);
  size_t cap = (size_t)(to - from) + 1, nw = 0;
  char **want = calloc(cap, sizeof(char *));
  FILE *l = fopen(jobs_log, "r");
  char line[128];
  long i = 0;
  while (l && fgets(line, sizeof(line), l)) {
    line[strcspn(line, "\n")] = '\0';
    if (i >= from && i < to && nw < cap)
      want[nw++] = strdup(line);
    i++;
  }
  if (l)
    fclose(l);
  qsort(want, nw, sizeof(char *), cmp_str);
  long lost = 0, dup = 0;
  for (size_t k = 0; k < nw; k++) {
    if (k > 0 && strcmp(want[k], want[k - 1]) == 0)
      dup++;
    if (!bsearch(&want[k], done, nd, sizeof(char *), cmp_str))
      lost++;
  }
  *out_checked = (long)nw;
  *out_lost = lost;
  *out_dup = dup;
  for (size_t k = 0; k < nw; k++)
    free(want[k]);
  free(want);
  free(done);
  json_decref(arr);
}

static const char *db_file(void) {
  static char path[700];
  snprintf(path, sizeof(path), "%s/cordon.db", state);
  return path;
}

/* ---- setup ---- */

static rlim_t raise_nofile(void) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rlim_t cap = rl.rlim_max;
  FILE *f = fopen("/proc/sys/fs/nr_open", "r");
  unsigned long nr = 0;
  if (f && fscanf(f, "%lu", &nr) == 1 && nr > cap) {
    struct rlimit up = {nr, nr}; /* root may raise the hard limit */
    if (setrlimit(RLIMIT_NOFILE, &up) == 0)
      cap = nr;
  }
  if (f)
    fclose(f);
  rl.rlim_cur = rl.rlim_max = cap;
  setrlimit(RLIMIT_NOFILE, &rl);
  getrlimit(RLIMIT_NOFILE, &rl);
  return rl.rlim_cur;
}

static int setup_state(void) {
  struct stat st;
  if (stat(db_file(), &st) == 0)
    return 0; /* the cache's */
  return sh("set -e; mkdir -p '%s/p'; "
            "echo '{\"name\":\"synthetic\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}' "
            "> '%s/p/manifest.json'; '%s' init --state '%s' >/dev/null 2>&1",
            dir, dir, SERVER, state);
}

int main(int argc, char **argv) {
  unsigned devices = 10000;
  const char *cache = NULL;
  time_t t0 = time(NULL) - 1;
  struct tm tm0;
  gmtime_r(&t0, &tm0);
  strftime(run_start, sizeof(run_start), "%Y-%m-%dT%H:%M:%SZ", &tm0);
  if (argc >= 2 && strcmp(argv[1], "--cluster") == 0) {
    if (argc > 5) {
      fprintf(stderr, "usage: bench_scale --cluster [DEVICES [JOBS [CONC]]]\n");
      return 2;
    }
    char *cl[8] = {"/bin/bash", CORDON_SOURCE_DIR "/bench/cluster.sh", CORDON_BINARY_DIR, NULL};
    for (int i = 2; i < argc; i++)
      cl[i + 1] = argv[i];
    execv(cl[0], cl);
    fprintf(stderr, "bench_scale: %s: %s\n", cl[1], strerror(errno));
    return 1;
  }
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc)
      devices = (unsigned)atoi(argv[++i]);
    else if (strcmp(argv[i], "--cache") == 0 && i + 1 < argc)
      cache = argv[++i];
    else if (strcmp(argv[i], "--smoke") == 0)
      smoke = true;
    else {
      fprintf(stderr, "usage: bench_scale [--devices N] [--cache DIR] [--smoke]"
                      " | --cluster [DEVICES [JOBS [CONC]]]\n");
      return 2;
    }
  }
  if (devices < 1) {
    fprintf(stderr, "bench_scale: --devices: at least 1\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  rlim_t nofile = raise_nofile();
  if (cache) {
    snprintf(dir, sizeof(dir), "%s", cache);
    mkdir(dir, 0700);
  } else {
    snprintf(dir, sizeof(dir), "/tmp/cordon-bench-scale-XXXXXX");
    if (!mkdtemp(dir))
      return 1;
  }
  snprintf(state, sizeof(state), "%s/state", dir);
  snprintf(pkg, sizeof(pkg), "%s/synthetic.cpkg", dir);
  snprintf(ids, sizeof(ids), "%s/identities", dir);
  snprintf(jobs_log, sizeof(jobs_log), "%s/jobs.log", dir);
  snprintf(slog, sizeof(slog), "%s/server.log", dir);
  unlink(jobs_log);
  if (setup_state() < 0 ||
      sh("'%s' pack '%s/p' -o '%s' --state '%s' >/dev/null 2>&1", SERVER, dir, pkg, state) < 0) {
    fprintf(stderr, "bench_scale: cannot make the state and the package in %s\n", dir);
    return 1;
  }
  struct statfs sf;
  statfs(dir, &sf);
  printf("scale: %u devices, open files limit %llu, state in %s (fs magic 0x%lx), %ld cores\n",
         devices, (unsigned long long)nofile, dir, (unsigned long)sf.f_type,
         sysconf(_SC_NPROCESSORS_ONLN));
  if ((rlim_t)devices + 512 > nofile)
    printf("scale: warning: the open files limit is below devices + 512\n");
  fflush(stdout);

  char out[1024];
  struct lg g = {0};
  /* pairing (once, with --cache), then a fresh server for the figures */
  if (server_start(0, devices) < 0 || lg_start(&g, devices, ids, false) < 0)
    return 1;
  if (lg_cmd(&g, "pair", out, sizeof(out)) < 0) {
    printf("%s\n", out);
    fail("pairing the devices");
    goto out;
  }
  printf("  pairing: %s\n", out);
  lg_stop(&g);
  server_stop(SIGTERM);
  int port = server_port;
  if (server_start(port, devices) < 0)
    return 1;
  sleep(1);
  long rss0 = rss_kib(server_pid);
  if (lg_start(&g, devices, ids, true) < 0)
    return 1;

  /* 1. sessions */
  if (lg_cmd(&g, "connect", out, sizeof(out)) < 0 || val(out, "n") != devices)
    fail("not every device connected: %s", out);
  double sessions_per_s = val(out, "sessions_per_s");
  double connect_ms = val(out, "ms");
  sleep(1);
  long rss1 = rss_kib(server_pid);
  double per_session = devices ? (double)(rss1 - rss0) / devices : 0;
  printf("  sessions: %u connected in %.0f ms: %.0f sessions/s\n", devices, connect_ms,
         sessions_per_s);
  printf("  server VmRSS: %ld KiB with no session, %ld KiB with %u: %.1f KiB per session\n", rss0,
         rss1, devices, per_session);
  fflush(stdout);

  /* 2. dispatch throughput */
  /* 16 in flight: what one calling service under a uid of its own may
   * hold on the admin socket (ADMIN_UID_CONN_MAX); then 48 with 100
   * devices, as a service running as root or the daemon's user may (all
   * of ADMIN_CONN_MAX, 64): the maximum is the larger */
  unsigned conc = 16, conc_max = 48;
  unsigned count = smoke ? 300 : 5000;
  unsigned ndevs[3] = {1, devices < 100 ? devices : 100, devices};
  double jps[3] = {0};
  char cmd[256];
  for (int k = 0; k < 3; k++) {
    snprintf(cmd, sizeof(cmd), "dispatch %u %u %u 0", count, ndevs[k], conc);
    if (lg_cmd(&g, cmd, out, sizeof(out)) < 0 || val(out, "ok") != count)
      fail("dispatch with %u devices: %s", ndevs[k], out);
    jps[k] = val(out, "jobs_per_s");
    printf("  dispatch, %u in flight, %5u devices: %8.1f jobs/s  median %6.2f ms  p99 %6.2f ms\n",
           conc, ndevs[k], jps[k], val(out, "p50_ms"), val(out, "p99_ms"));
    fflush(stdout);
  }
  snprintf(cmd, sizeof(cmd), "dispatch %u %u %u 0", count, ndevs[1], conc_max);
  if (lg_cmd(&g, cmd, out, sizeof(out)) < 0 || val(out, "ok") != count)
    fail("dispatch with %u devices, %u in flight: %s", ndevs[1], conc_max, out);
  double jps_max = val(out, "jobs_per_s");
  printf("  dispatch, %u in flight, %5u devices: %8.1f jobs/s  median %6.2f ms  p99 %6.2f ms\n",
         conc_max, ndevs[1], jps_max, val(out, "p50_ms"), val(out, "p99_ms"));
  fflush(stdout);
  if (jps_max > jps[1])
    jps[1] = jps_max; /* the maximum with 100 devices: the summary's, and half of it below */
  else
    conc_max = conc;
  double half = jps[1] / 2 > 1 ? jps[1] / 2 : 1;
  unsigned hcount = (unsigned)(half * (smoke ? 2 : 10));
  if (hcount < 50)
    hcount = 50;
  snprintf(cmd, sizeof(cmd), "dispatch %u %u %u %.0f", hcount, ndevs[1], conc_max, half);
  if (lg_cmd(&g, cmd, out, sizeof(out)) < 0 || val(out, "ok") != hcount)
    fail("dispatch at half load: %s", out);
  double p50_half = val(out, "p50_ms"), p99_half = val(out, "p99_ms"),
         jps_half = val(out, "jobs_per_s");
  printf("  at half the maximum with %u devices (%.0f/s offered, %.1f/s done): median %.2f ms  "
         "p99 %.2f ms\n",
         ndevs[1], half, jps_half, p50_half, p99_half);
  fflush(stdout);

  /* 3. recovery: kill -9 while jobs are being dispatched */
  long log_from = count_lines(jobs_log);
  unsigned rrate = (unsigned)(half > 200 ? 200 : half);
  unsigned rcount = rrate * (smoke ? 4 : 8);
  snprintf(cmd, sizeof(cmd), "stats");
  lg_cmd(&g, cmd, out, sizeof(out));
  double dup0 = val(out, "dup_jobs");
  snprintf(cmd, sizeof(cmd), "dispatch %u %u %u %u", rcount, devices, conc, rrate);
  fprintf(g.in, "%s\n", cmd);
  fflush(g.in);
  usleep(smoke ? 1500000 : 3000000);
  lg_cmd(&g, "!mark", out, sizeof(out));
  server_stop(SIGKILL);
  double t_kill = now_ms();
  if (server_start(port, devices) < 0)
    return 1;
  printf("  recovery: killed (-9) and restarted in %.0f ms\n", now_ms() - t_kill);
  fflush(stdout);
  char rout[1024];
  if (lg_wait(&g, cmd, rout, sizeof(rout)) < 0) /* the dispatch's own answer */
    fail("recovery dispatch: %s", rout);
  if (lg_cmd(&g, "waitall 120", out, sizeof(out)) < 0)
    fail("not every device came back: %s", out);
  double reconnect_s = val(out, "ms") / 1000.0;
  printf("  recovery: all %u devices back %.2f s after the kill (%0.f reconnect attempts)\n",
         devices, reconnect_s, val(out, "reconnects"));
  /* results sent before the kill and not acknowledged go again on the new
   * sessions: wait for their acks */
  for (int i = 0; i < 100; i++) {
    lg_cmd(&g, "stats", out, sizeof(out));
    if (val(out, "unacked") == 0)
      break;
    usleep(100000);
  }
  if (val(out, "unacked") != 0)
    fail("results never acknowledged: %s", out);
  long log_to = count_lines(jobs_log), lost, dup, checked;
  check_jobs(log_from, log_to, &lost, &dup, &checked);
  dup += (long)(val(out, "dup_jobs") - dup0);
  printf("  recovery: %s\n", rout);
  printf("  recovery: %ld jobs answered by the admin socket, %ld without a stored result (lost), "
         "%ld delivered or logged twice (duplicated)\n",
         checked, lost, dup);
  if (checked < 0 || lost != 0 || dup != 0)
    fail("lost %ld, duplicated %ld, checked %ld", lost, dup, checked);
  /* every job of the run: exactly one result, from the table */
  long all_lost, all_dup, all_checked;
  check_jobs(0, log_to, &all_lost, &all_dup, &all_checked);
  printf("  all %ld dispatched jobs of the run: %ld without a stored result, %ld twice\n",
         all_checked, all_lost, all_dup);
  if (all_checked <= 0 || all_lost != 0 || all_dup != 0)
    fail("jobs without exactly one result: lost %ld duplicated %ld", all_lost, all_dup);
  fflush(stdout);
  lg_stop(&g);
  server_stop(SIGTERM);

  /* 4. the baseline: plain libuv TCP echo, same connections, same rates */
  {
    int to[2];
    if (pipe(to) < 0)
      return 1;
    pid_t epid = fork();
    if (epid == 0) {
      dup2(to[1], 1);
      close(to[0]);
      execl(ECHO, ECHO, (char *)NULL);
      _exit(127);
    }
    close(to[1]);
    FILE *ef = fdopen(to[0], "r");
    char line[256];
    int eport = 0;
    if (fgets(line, sizeof(line), ef) && strstr(line, "127.0.0.1:"))
      eport = atoi(strstr(line, "127.0.0.1:") + 10);
    usleep(200000);
    long erss0 = rss_kib(epid);
    char eids[700];
    snprintf(eids, sizeof(eids), "%s/none", dir);
    struct lg e = {0};
    if (!eport || lg_start(&e, devices, eids, false) < 0)
      return 1;
    snprintf(cmd, sizeof(cmd), "echo-connect 127.0.0.1:%d", eport);
    lg_cmd(&e, cmd, out, sizeof(out));
    double echo_cps = val(out, "conns_per_s");
    usleep(500000);
    long erss1 = rss_kib(epid);
    double eper = (double)(erss1 - erss0) / devices;
    snprintf(cmd, sizeof(cmd), "echo %u %u %u 0", count * 4, ndevs[1], conc_max);
    lg_cmd(&e, cmd, out, sizeof(out));
    double echo_max = val(out, "jobs_per_s");
    snprintf(cmd, sizeof(cmd), "echo %u %u %u %.0f", hcount, ndevs[1], conc_max, half);
    lg_cmd(&e, cmd, out, sizeof(out));
    double echo_p99 = val(out, "p99_ms"), echo_p50 = val(out, "p50_ms");
    lg_stop(&e);
    kill(epid, SIGKILL);
    waitpid(epid, NULL, 0);
    fclose(ef);
    printf("  baseline (plain libuv TCP echo, 300-byte messages):\n");
    printf("    %u connections at %.0f/s (sessions: %.2fx slower)\n", devices, echo_cps,
           sessions_per_s > 0 ? echo_cps / sessions_per_s : 0);
    printf("    VmRSS %.1f KiB per connection (sessions: %.1fx)\n", eper,
           eper > 0 ? per_session / eper : 0);
    printf("    %.0f round trips/s with %u connections, %u in flight (jobs: %.1fx fewer)\n",
           echo_max, ndevs[1], conc_max, jps[1] > 0 ? echo_max / jps[1] : 0);
    printf("    at %.0f/s: median %.3f ms  p99 %.3f ms (jobs: p99 %.1fx)\n", half, echo_p50,
           echo_p99, echo_p99 > 0 ? p99_half / echo_p99 : 0);
  }
  printf("scale: devices=%u sessions_per_s=%.0f rss_per_session_kib=%.1f jobs_per_s=%.0f "
         "p99_ms=%.2f reconnect_s=%.2f lost=%ld duplicated=%ld\n",
         devices, sessions_per_s, per_session, jps[1], p99_half, reconnect_s, lost, dup);
out:
  lg_stop(&g);
  server_stop(SIGKILL);
  if (!cache && failures == 0)
    sh("rm -rf '%s'", dir);
  else if (failures)
    printf("scale: %d failure(s); the run's files are in %s\n", failures, dir);
  return failures ? 1 : 0;
}
