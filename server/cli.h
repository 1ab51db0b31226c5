/* cordon-server command plumbing: shared option handling, the one-line
 * error format `cordon-server: <code>: <message>` (docs/DESIGN.md section 2) and
 * the helpers the commands share (opening the database, times, escaping,
 * durations, JSON output).
 *
 * Every command is `int server_cmd_<name>(const struct server_cli *cli, int
 * argc, char **argv)` and returns the process exit status: 0 success, 1 a
 * failure, 2 bad usage or malformed local input. argv[0] is the command name;
 * each command also accepts `--state DIR` among its own options. */
#ifndef CORDON_SERVER_CLI_H
#define CORDON_SERVER_CLI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "server/db.h"

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

/* --- shared by the commands that read and change the state database ------
 * (user, pair-code, devices, revoke, jobs, job). They print tables for
 * people and JSON (--json) on stdout, errors as one line on stderr in the
 * server_cli_fail format. */

/* Open STATE/cordon.db (never creating it). On failure prints the error and
 * returns the exit status; 0 and *out_db on success. */
int server_cli_open_db(const char *state_dir, struct server_db **out_db);

/* Print a database error (server_cli_fail) and return the exit status:
 * -EINVAL from the database is bad usage (2). */
int server_cli_db_fail(int err, const struct cordon_diag *diag);

/* "2026-11-30T04:23:19Z", or `never` for 0. */
void server_cli_format_time(int64_t t, const char *never, char *buf, size_t size);
/* The same as a JSON string, or JSON null for 0. New reference. */
json_t *server_cli_json_time(int64_t t);

/* s made safe for a terminal: bytes below 0x20, 0x7f and the C1 controls
 * (U+0080..U+009F) as \xNN, a backslash as \\. Truncated to fit size. */
void server_cli_escape(const char *s, char *buf, size_t size);

/* "600", "600s", "10m", "2h", "1d", and pairs such as "1h30m" -> seconds;
 * -EINVAL otherwise. */
int server_cli_parse_duration(const char *s, int64_t *out_seconds);

/* json_dumpf(j) on stdout, indented, with a final newline; steals j. ascii:
 * escape everything outside ASCII (for people's terminals). 0 or exit 1. */
int server_cli_print_json(json_t *j, int ascii);

/* --- live state from the running daemon (devices, jobs, job) ------------
 * The database's online flag is what the daemon last wrote; only a running
 * daemon knows who is connected now. These ask it (admin op `sessions`,
 * answered within SERVER_CLI_LIVE_TIMEOUT_MS). */

#define SERVER_CLI_LIVE_TIMEOUT_MS 5000

/* 0 and *out_sessions (the reply's array, new reference), or -ESRCH when
 * no daemon runs, or another error when one did not answer; why (never
 * NULL) then says it for people: "daemon not running" or "the daemon did
 * not answer: ...". */
int server_cli_live_sessions(const char *state_dir, json_t **out_sessions, char *why,
                             size_t why_size);
/* Whether device_id is connected: JSON true or false, or null when sessions
 * is NULL (unknown). New reference. */
json_t *server_cli_online_json(const json_t *sessions, const char *device_id);
/* The same for a table: "online", "offline" or "unknown". */
const char *server_cli_online_text(const json_t *sessions, const char *device_id);

int server_cmd_init(const struct server_cli *cli, int argc, char **argv);
int server_cmd_pack(const struct server_cli *cli, int argc, char **argv);
/* Commands on the state database (server/cmd_user.c, cmd_paircode.c,
 * cmd_devices.c, cmd_revoke.c, cmd_jobs.c). */
int server_cmd_user(const struct server_cli *cli, int argc, char **argv);
int server_cmd_paircode(const struct server_cli *cli, int argc, char **argv);
int server_cmd_devices(const struct server_cli *cli, int argc, char **argv);
int server_cmd_device(const struct server_cli *cli, int argc, char **argv);
int server_cmd_revoke(const struct server_cli *cli, int argc, char **argv);
int server_cmd_jobs(const struct server_cli *cli, int argc, char **argv);
int server_cmd_job(const struct server_cli *cli, int argc, char **argv);
int server_cmd_run(const struct server_cli *cli, int argc, char **argv);
int server_cmd_dispatch(const struct server_cli *cli, int argc, char **argv);
int server_cmd_cancel(const struct server_cli *cli, int argc, char **argv);
int server_cmd_verify_receipt(const struct server_cli *cli, int argc, char **argv);
int server_cmd_keys(const struct server_cli *cli, int argc, char **argv);

/* Write job's receipt file (docs/protocol/receipt.md) to path ("-" for
 * stdout), the device-key statement signed now with STATE/ticket.key.
 * Prints the error and returns the exit status (server/cmd_receipt.c). */
int server_cli_write_receipt(const char *state, struct server_db *db,
                             const struct server_db_job *job, const char *path);

#endif
