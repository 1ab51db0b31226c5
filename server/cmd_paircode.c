/* cordon-server pair-code USER [--ttl 10m]: mint a single-use pairing code.
 * The code alone on stdout's first line; everything else on stderr. The code
 * is never logged and exists nowhere else once this command exits. */
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>

#include "server/cli.h"
#include "server/db.h"

int server_cmd_paircode(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                       {"ttl", required_argument, NULL, 't'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *state = cli->state_dir;
  int64_t ttl = SERVER_DB_CODE_TTL_DEFAULT;
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      state = optarg;
      break;
    case 't':
      if (server_cli_parse_duration(optarg, &ttl) < 0 || ttl < 1 || ttl > SERVER_DB_CODE_TTL_MAX)
        return server_cli_failf(CORDON_E_USAGE,
                                "--ttl '%s': a duration like 90s, 10m or 2h, at most 7d", optarg);
      break;
    case 'h':
      return server_cli_help("pair-code", NULL);
    default:
      return server_cli_bad_option("pair-code", NULL, argv);
    }
  }
  if (argc - optind != 1)
    return server_cli_usage("pair-code", NULL,
                            argc == optind ? "USER is missing" : "one USER expected");
  struct server_db *db = NULL;
  int status = server_cli_open_db(state, &db);
  if (status)
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_user u;
  char code[SERVER_DB_CODE_TEXT_SIZE];
  int64_t expires = 0;
  int err = server_db_user_get_by_name(db, argv[optind], &u, &diag);
  if (!err)
    err = server_db_code_mint(db, u.id, ttl, code, &expires, &diag);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  printf("%s\n", code);
  fflush(stdout);
  sodium_memzero(code, sizeof(code));
  char until[64];
  server_cli_format_time(expires, "-", until, sizeof(until));
  fprintf(stderr,
          "%s: pairing code for user %s: single use, %d attempts, valid until %s (%lld s).\n"
          "%s: on the device: cordon-agent pair --server HOST:PORT --name NAME, "
          "and give the code on stdin (or --code CODE)\n",
          SERVER_PROG, u.name, SERVER_DB_CODE_ATTEMPTS, until, (long long)ttl, SERVER_PROG);
  return 0;
}
