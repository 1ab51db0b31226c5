/* cordon-server run --listen HOST:PORT [--advertise HOST:PORT]... [--job-grace SECONDS]
 *   [--queue-ttl DURATION] [--drain-timeout SECONDS] [--log-level LEVEL] [--log-file PATH]
 *   [--metrics HOST:PORT] [--max-connections N] [--max-preauth-per-address N] */
#include <getopt.h>
#if defined(__has_include)
#if __has_include(<malloc.h>)
#include <malloc.h> /* mallopt, where the C library has it */
#endif
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "net/conn.h"
#include "proto/msg.h"
#include "server/cli.h"
#include "server/daemon.h"

static int parse_host_port(const char *s, char *host, size_t host_len, int *out_port) {
  const char *colon = strrchr(s, ':');
  if (!colon || colon == s || (size_t)(colon - s) >= host_len)
    return -1;
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port < 0 || port > 65535 || colon[1] == '\0')
    return -1;
  const char *h = s;
  size_t hl = (size_t)(colon - s);
  if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') { /* [::1]:7443 */
    h++;
    hl -= 2;
  }
  memcpy(host, h, hl);
  host[hl] = '\0';
  *out_port = (int)port;
  return 0;
}

static int parse_seconds(const char *s, long lo, long hi, long *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* One --advertise: a cluster address for every welcome (welcome.servers),
 * in the strict form agents accept; at most MSG_SERVERS_MAX, no repeats.
 * 0, or the exit status after the one-line error. */
static int advertise_add(const char **list, size_t *n, const char *addr) {
  if (msg_addr_parse(addr, strlen(addr), NULL, NULL) < 0)
    return server_cli_failf(CORDON_E_USAGE,
                            "--advertise: expected HOST:PORT (a DNS name, an IPv4 address or "
                            "[IPv6], a port in 1..65535, at most %d bytes), got '%.300s'",
                            MSG_ADDR_MAX, addr);
  for (size_t i = 0; i < *n; i++)
    if (strcmp(list[i], addr) == 0)
      return server_cli_failf(CORDON_E_USAGE, "--advertise: '%s' is given twice", addr);
  if (*n == MSG_SERVERS_MAX)
    return server_cli_failf(CORDON_E_USAGE, "--advertise: at most %d addresses", MSG_SERVERS_MAX);
  list[(*n)++] = addr;
  return 0;
}

int server_cmd_run(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"listen", required_argument, NULL, 'l'},
                                       {"job-grace", required_argument, NULL, 'g'},
                                       {"queue-ttl", required_argument, NULL, 'q'},
                                       {"drain-timeout", required_argument, NULL, 'd'},
                                       {"log-level", required_argument, NULL, 'v'},
                                       {"log-file", required_argument, NULL, 'f'},
                                       {"metrics", required_argument, NULL, 'm'},
                                       {"state", required_argument, NULL, 's'},
                                       {"db", required_argument, NULL, 'D'},
                                       {"require-approval", no_argument, NULL, 'A'},
                                       {"max-connections", required_argument, NULL, 'C'},
                                       {"max-preauth-per-address", required_argument, NULL, 'P'},
                                       {"advertise", required_argument, NULL, 'a'},
                                       {0}};
  const char *state = cli->state_dir, *listen = NULL, *metrics = NULL, *log_file = NULL;
  struct net_limits limits;
  net_limits_default(&limits);
  long max_conns = limits.max_conns, max_pre = limits.max_per_addr;
  long grace = 0, drain = -1;
  int64_t queue_ttl = 0;
  enum core_log_level level = CORE_LOG_INFO;
  int c, require_approval = 0;
  const char *advertise[MSG_SERVERS_MAX];
  size_t n_advertise = 0;
  optind = 0; /* 0: glibc re-initialises its scanner */
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == 'l')
      listen = optarg;
    else if (c == 'g') {
      if (parse_seconds(optarg, 1, 86400, &grace) < 0)
        return server_cli_failf(CORDON_E_USAGE, "--job-grace: seconds in 1..86400");
    } else if (c == 'q') {
      if (server_cli_parse_duration(optarg, &queue_ttl) < 0 || queue_ttl < 1 ||
          queue_ttl > SERVER_DB_QUEUE_TTL_MAX)
        return server_cli_failf(CORDON_E_USAGE,
                                "--queue-ttl: a duration from 1s to 30d (90s, 10m, 1h30m)");
    } else if (c == 'd') {
      if (parse_seconds(optarg, 0, 86400, &drain) < 0)
        return server_cli_failf(CORDON_E_USAGE, "--drain-timeout: seconds in 0..86400");
    } else if (c == 'v') {
      if (core_log_level_parse(optarg, &level) < 0)
        return server_cli_failf(CORDON_E_USAGE, "--log-level: debug, info, warn or error, not '%s'",
                                optarg);
    } else if (c == 'f')
      log_file = optarg;
    else if (c == 'm')
      metrics = optarg;
    else if (c == 's')
      state = optarg;
    else if (c == 'D') {
      if (!server_db_url_is_pg(optarg) || strlen(optarg) > SERVER_DB_URL_MAX)
        return server_cli_usage("run", NULL, "--db: a postgresql:// URL of at most %d bytes",
                                SERVER_DB_URL_MAX);
      server_db_set_default_url(optarg); /* instead of what STATE/db-url names */
    } else if (c == 'A')
      require_approval = 1;
    else if (c == 'C') {
      if (parse_seconds(optarg, 1, 1000000, &max_conns) < 0)
        return server_cli_usage("run", NULL, "--max-connections: a number in 1..1000000");
    } else if (c == 'P') {
      if (parse_seconds(optarg, 1, 1000000, &max_pre) < 0)
        return server_cli_usage("run", NULL, "--max-preauth-per-address: a number in 1..1000000");
    } else if (c == 'a') {
      int ar = advertise_add(advertise, &n_advertise, optarg);
      if (ar != 0)
        return ar;
    } else
      return server_cli_bad_option("run", NULL, argv);
  }
  if (!listen || optind != argc)
    return !listen ? server_cli_usage("run", NULL, "--listen HOST:PORT is missing")
                   : server_cli_usage("run", NULL, "unexpected argument '%s'", argv[optind]);
  char host[256], mhost[256];
  int port, mport = 0;
  if (parse_host_port(listen, host, sizeof(host), &port) < 0)
    return server_cli_failf(CORDON_E_USAGE, "--listen: expected HOST:PORT, got '%s'", listen);
  if (metrics && parse_host_port(metrics, mhost, sizeof(mhost), &mport) < 0)
    return server_cli_failf(CORDON_E_USAGE, "--metrics: expected HOST:PORT, got '%s'", metrics);
  if (log_file && !*log_file)
    return server_cli_failf(CORDON_E_USAGE, "--log-file: a path");
  struct daemon_options opt = {
      .state_dir = state,
      .host = host,
      .port = port,
      .job_grace_s = (unsigned)grace,
      .queue_ttl_s = (unsigned)queue_ttl,
      .drain_timeout_s = (int)drain,
      .log_file = log_file,
      .log_level = level,
      .metrics_host = metrics ? mhost : NULL,
      .metrics_port = mport,
      .require_approval = require_approval != 0,
      .limits = &limits,
      .advertise = advertise,
      .n_advertise = n_advertise,
  };
  limits.max_conns = (unsigned)max_conns;
  limits.max_per_addr = (unsigned)max_pre;
#ifdef M_TRIM_THRESHOLD
  /* glibc gives the heap's top back to the kernel whenever 128 KiB of it
   * are free, and every job frees that much (SQLite's statement journals,
   * the messages): the pages were faulted in again each time, 5-10 % of the
   * daemon's CPU per job (bench/README.md, scale). At most 8 MiB stay. */
  mallopt(M_TRIM_THRESHOLD, 8 << 20);
#endif
  struct cordon_diag diag = {{0}};
  int r = daemon_run(&opt, &diag);
  if (r < 0)
    return server_cli_fail(r, &diag);
  return 0;
}
