/* cordon-server command plumbing: shared option handling and the one-line
 * error format `cordon-server: <code>: <message>` (DESIGN.md section 2).
 *
 * Every command is `int server_cmd_<name>(const struct server_cli *cli, int
 * argc, char **argv)` and returns the process exit status: 0 success, 1 a
 * failure, 2 bad usage or malformed local input. argv[0] is the command name;
 * each command also accepts `--state DIR` among its own options. */
#ifndef CORDON_SERVER_CLI_H
#define CORDON_SERVER_CLI_H

#include "core/error.h"

#define SERVER_PROG "cordon-server"
#define SERVER_DEFAULT_STATE "/var/lib/cordon-server"

struct server_cli {
  const char *state_dir; /* from a global --state, or SERVER_DEFAULT_STATE */
};

/* Print `cordon-server: <code>: <message>` on stderr, where message is diag
 * when set, else the code's own message. Returns the exit status for err. */
int server_cli_fail(int err, const struct cordon_diag *diag);

/* The same with a formatted message. */
int server_cli_failf(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Exit status for an error: 2 for usage and malformed local input (manifest,
 * package contents, key files), 1 otherwise. */
int server_cli_exit_status(int err);

int server_cmd_init(const struct server_cli *cli, int argc, char **argv);
int server_cmd_pack(const struct server_cli *cli, int argc, char **argv);
/* Admin commands on the state database (server/cmd_user.c, cmd_paircode.c,
 * cmd_devices.c, cmd_revoke.c, cmd_jobs.c). */
int server_cmd_user(const struct server_cli *cli, int argc, char **argv);
int server_cmd_paircode(const struct server_cli *cli, int argc, char **argv);
int server_cmd_devices(const struct server_cli *cli, int argc, char **argv);
int server_cmd_revoke(const struct server_cli *cli, int argc, char **argv);
int server_cmd_jobs(const struct server_cli *cli, int argc, char **argv);
int server_cmd_job(const struct server_cli *cli, int argc, char **argv);
int server_cmd_run(const struct server_cli *cli, int argc, char **argv);
int server_cmd_dispatch(const struct server_cli *cli, int argc, char **argv);
int server_cmd_cancel(const struct server_cli *cli, int argc, char **argv);

#endif
