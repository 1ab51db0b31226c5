/* cordon-server: command dispatch over the command table (server/cli.c).
 * Each command lives in server/cmd_<name>.c and is declared in
 * server/cli.h. -h and --help anywhere among a command's arguments (before
 * a `--`) print its help, or its subcommand's, and exit 0. */
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "server/cli.h"

/* Whether argv (the command's arguments) asks for help before any `--`. */
static int wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0)
      return 0;
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
      return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                       {"help", no_argument, NULL, 'h'},
                                       {"version", no_argument, NULL, 'V'},
                                       {0}};
  struct server_cli cli = {.state_dir = SERVER_DEFAULT_STATE};
  core_log_set_program(SERVER_PROG);
  opterr = 0; /* every usage error is our own one line */
  int c, version = 0;
  while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      cli.state_dir = optarg;
      break;
    case 'h':
      return server_cli_help(NULL, NULL);
    case 'V':
      version = 1;
      break;
    default:
      return server_cli_bad_option(NULL, NULL, argv);
    }
  }
  if (version) {
    char *vargv[] = {"version", NULL};
    return server_cmd_version(&cli, 1, vargv);
  }
  if (optind >= argc)
    return server_cli_usage(NULL, NULL, "no command given");
  if (sodium_init() < 0)
    return server_cli_failf(CORDON_E_CRYPTO, "libsodium failed to initialise");
  const char *name = argv[optind];
  const struct server_cli_command *cmd = server_cli_command_find(name);
  if (!cmd)
    return server_cli_usage(NULL, NULL, "unknown command '%s'", name);
  int cargc = argc - optind;
  char **cargv = argv + optind;
  if (wants_help(cargc, cargv)) {
    const char *sub = cargc > 1 && server_cli_form_find(cmd, cargv[1]) ? cargv[1] : NULL;
    return server_cli_help(cmd->name, sub);
  }
  return cmd->run(&cli, cargc, cargv);
}
