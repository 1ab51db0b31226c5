/* cordon-server: command dispatch. Each command lives in server/cmd_<name>.c
 * and is declared in server/cli.h. */
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "server/cli.h"

struct server_command {
  const char *name;
  int (*run)(const struct server_cli *cli, int argc, char **argv);
  const char *summary;
};

static const struct server_command commands[] = {
    {"init", server_cmd_init, "create the state directory and keys"},
    {"pack", server_cmd_pack, "build and sign an executor package"},
    {"user", server_cmd_user, "add or list users (user add NAME, user list)"},
    {"pair-code", server_cmd_paircode, "mint a single-use pairing code for a user"},
    {"devices", server_cmd_devices, "list paired devices"},
    {"device", server_cmd_device, "a device's labels (device label DEVICE KEY=VALUE...)"},
    {"revoke", server_cmd_revoke, "revoke a device (terminal)"},
    {"jobs", server_cmd_jobs, "list jobs"},
    {"job", server_cmd_job, "show one job and its result"},
    {"run", server_cmd_run, "the daemon: --listen HOST:PORT"},
    {"dispatch", server_cmd_dispatch, "send a package to a device of a user"},
    {"cancel", server_cmd_cancel, "cancel a job"},
    {"verify-receipt", server_cmd_verify_receipt,
     "check a job receipt offline (--trust server.pub)"},
    {"keys", server_cmd_keys, "keys export-public: the ticket public key, for verify-receipt"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: cordon-server [--state DIR] COMMAND [ARGS...]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    fprintf(f, "  %-6s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\n--state DIR defaults to %s\n", SERVER_DEFAULT_STATE);
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"state", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {0}};
  struct server_cli cli = {.state_dir = SERVER_DEFAULT_STATE};
  core_log_set_program(SERVER_PROG);
  int c;
  while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      cli.state_dir = optarg;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return 2;
  }
  if (sodium_init() < 0)
    return server_cli_failf(CORDON_E_CRYPTO, "libsodium failed to initialise");
  const char *name = argv[optind];
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    if (strcmp(commands[i].name, name) == 0)
      return commands[i].run(&cli, argc - optind, argv + optind);
  return server_cli_failf(CORDON_E_USAGE, "unknown command '%s' (try --help)", name);
}
