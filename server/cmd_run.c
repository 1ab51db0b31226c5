/* cordon-server run --listen HOST:PORT [--job-grace SECONDS] [--queue-ttl DURATION] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int server_cmd_run(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"listen", required_argument, NULL, 'l'},
                                       {"job-grace", required_argument, NULL, 'g'},
                                       {"queue-ttl", required_argument, NULL, 'q'},
                                       {"state", required_argument, NULL, 's'},
                                       {0}};
  const char *state = cli->state_dir, *listen = NULL;
  long grace = 0;
  int64_t queue_ttl = 0;
  int c;
  optind = 0; /* 0: glibc re-initialises its scanner */
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == 'l')
      listen = optarg;
    else if (c == 'g') {
      char *end;
      grace = strtol(optarg, &end, 10);
      if (*end || grace < 1 || grace > 86400)
        return server_cli_failf(CORDON_E_USAGE, "--job-grace: seconds in 1..86400");
    } else if (c == 'q') {
      if (server_cli_parse_duration(optarg, &queue_ttl) < 0 || queue_ttl < 1 ||
          queue_ttl > SERVER_DB_QUEUE_TTL_MAX)
        return server_cli_failf(CORDON_E_USAGE,
                                "--queue-ttl: a duration from 1s to 30d (90s, 10m, 1h30m)");
    } else if (c == 's')
      state = optarg;
    else
      return server_cli_failf(CORDON_E_USAGE, "run --listen HOST:PORT [--job-grace SECONDS] "
                                              "[--queue-ttl DURATION] [--state DIR]");
  }
  if (!listen || optind != argc)
    return server_cli_failf(CORDON_E_USAGE, "run --listen HOST:PORT [--state DIR]");
  char host[256];
  int port;
  if (parse_host_port(listen, host, sizeof(host), &port) < 0)
    return server_cli_failf(CORDON_E_USAGE, "--listen: expected HOST:PORT, got '%s'", listen);
  struct daemon_options opt = {
      .state_dir = state,
      .host = host,
      .port = port,
      .job_grace_s = (unsigned)grace,
      .queue_ttl_s = (unsigned)queue_ttl,
  };
  struct cordon_diag diag = {{0}};
  int r = daemon_run(&opt, &diag);
  if (r < 0)
    return server_cli_fail(r, &diag);
  return 0;
}
