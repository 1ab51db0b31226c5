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
#ifdef CORDON_VERSION /* from the build (CMake), when it says */
#define SERVER_VERSION CORDON_VERSION
#else
#define SERVER_VERSION "0.1.0"
#endif
#define SERVER_DEFAULT_STATE "/var/lib/cordon-server"

struct server_cli {
  const char *state_dir; /* from a global --state, or SERVER_DEFAULT_STATE */
};

/* --- the command table ----------------------------------------------------
 * Every command, its forms (one per subcommand, or one for a command
 * without), their arguments and a summary: the only source of the help
 * and the usage lines. tests/server/test_cli_table.c runs every form
 * (--help, a missing argument, an unknown id) and checks that
 * docs/man/cordon-server.8.scd has an entry for each. */

struct server_cli_form {
  const char *sub;     /* subcommand word ("add"), NULL for a command without */
  const char *args;    /* what follows `cordon-server COMMAND [SUB]` */
  const char *summary; /* one line */
};

struct server_cli_command {
  const char *name;
  int (*run)(const struct server_cli *cli, int argc, char **argv);
  const char *summary;                 /* one line, for the command list */
  const struct server_cli_form *forms; /* terminated by a form with summary NULL */
};

/* Terminated by an entry with name NULL. */
extern const struct server_cli_command server_cli_commands[];

/* The command called name, NULL when there is none. */
const struct server_cli_command *server_cli_command_find(const char *name);
/* The form of cmd whose sub is sub (NULL: the form without one), or NULL. */
const struct server_cli_form *server_cli_form_find(const struct server_cli_command *cmd,
                                                   const char *sub);

/* Help on stdout: the command list (cmd NULL), a command's forms, or one
 * form of it (sub given and a form of cmd). Returns 0, or the exit status
 * of an unknown command (2, with its one-line error). */
int server_cli_help(const char *cmd, const char *sub);

/* A usage error, one line on stderr: `cordon-server: usage: <what>;
 * expected: cordon-server CMD [SUB] ARGS [| ...] (cordon-server help CMD)`,
 * with the forms of cmd (only sub's when sub names one). Returns 2. */
int server_cli_usage(const char *cmd, const char *sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same for getopt's '?' (opterr is 0: getopt prints nothing): names
 * the option that getopt_long stopped at in argv. Returns 2. */
int server_cli_bad_option(const char *cmd, const char *sub, char **argv);

/* `version [--json]`: this build's version, the protocol versions it
 * speaks, its build options and the libraries' versions. */
int server_cmd_version(const struct server_cli *cli, int argc, char **argv);
/* `help [COMMAND [SUB]]`. */
int server_cmd_help(const struct server_cli *cli, int argc, char **argv);

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

/* The stable code of a database error: -EINVAL is usage, -ENOENT not_found,
 * -EEXIST already_exists; others unchanged. */
int server_cli_db_code(int err);
/* Print a database error (server_cli_fail) and return the exit status:
 * -EINVAL from the database is bad usage (2), the rest 1. */
int server_cli_db_fail(int err, const struct cordon_diag *diag);
/* The device an operator named (server_db_device_resolve: id, name, or a
 * unique id prefix of 4 or more digits), of user when user is not NULL.
 * On failure prints the error (not_found, exit 1; usage naming the
 * candidates when several match, exit 2) and returns the exit status. */
int server_cli_device_resolve(struct server_db *db, const char *text, const char *user,
                              struct server_db_device *out_dev);
/* After a device was revoked in the database: ask a running daemon to
 * close its live session (nothing to do when none runs). 0 or the exit
 * status of the printed error (server/cmd_revoke.c). */
int server_cli_close_session(const char *state, const char *id);
/* A pairing code's id as an operator typed it (any case, with dashes or
 * spaces; a whole code names its id too): its first
 * SERVER_DB_CODE_ID_CHARS letters and digits, lower case. */
void server_cli_code_id(const char *text, char out[SERVER_DB_CODE_ID_SIZE]);
/* Print an admin_call error: no daemon listening is not_running (1). */
int server_cli_admin_fail(int err, const struct cordon_diag *diag);

/* "2026-11-30T04:23:19Z", or `never` for 0. */
void server_cli_format_time(int64_t t, const char *never, char *buf, size_t size);
/* The same as a JSON string, or JSON null for 0. New reference. */
json_t *server_cli_json_time(int64_t t);

/* s made safe for a terminal: bytes below 0x20, 0x7f and the C1 controls
 * (U+0080..U+009F) as \xNN, a backslash as \\. Truncated to fit size. */
void server_cli_escape(const char *s, char *buf, size_t size);

/* --- tables ---------------------------------------------------------------
 * A text table whose columns are as wide as their widest cell (counted in
 * UTF-8 characters, cells already escaped), two spaces apart, the last
 * column not padded: a long device or user name moves the columns after
 * it instead of breaking them. Rows are copied; at most
 * SERVER_CLI_TABLE_COLS columns. */
#define SERVER_CLI_TABLE_COLS 12
struct server_cli_table {
  size_t ncols, nrows, cap;
  char **cells; /* nrows * ncols */
  size_t width[SERVER_CLI_TABLE_COLS];
  int err; /* -ENOMEM once a row could not be kept */
};
/* ncols headers follow. */
void server_cli_table_init(struct server_cli_table *t, size_t ncols, ...);
/* ncols cells follow (NULL prints as "-"). */
void server_cli_table_row(struct server_cli_table *t, ...);
/* Print on stdout. 0, or the exit status after saying what failed. */
int server_cli_table_print(struct server_cli_table *t);
void server_cli_table_release(struct server_cli_table *t);

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

/* Ask the running daemon through the admin API (req stolen; answered
 * within SERVER_CLI_API_TIMEOUT_MS). 0 and *out_reply (an ok reply);
 * -ESRCH when no daemon runs (nothing printed: the caller reads the
 * database itself); else the command's exit status, the error printed. */
#define SERVER_CLI_API_TIMEOUT_MS 30000
int server_cli_ask(const char *state_dir, json_t *req, json_t **out_reply);
/* The same, and the ok reply's value of key (new reference; a reply
 * without it is protocol_error) in *out_value. */
int server_cli_ask_for(const char *state_dir, json_t *req, const char *key, json_t **out_value);
/* The same, or with no daemon running the database opened for the caller
 * to answer itself: 0 with *out_value (the daemon answered; *out_db NULL),
 * or 0 with *out_db (no daemon; *out_value NULL); else the exit status. */
int server_cli_ask_or_open(const char *state_dir, json_t *req, const char *key, json_t **out_value,
                           struct server_db **out_db);
/* The string of o's key, or dflt. */
const char *server_cli_str(const json_t *o, const char *key, const char *dflt);
/* A JSON online flag for a table: "online", "offline" or "unknown" (null). */
const char *server_cli_online_word(const json_t *online);

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

/* --- the API's objects as the tables show them ------------------------
 * (server/admin_view.h builds them; the text views read only them). */

/* The ERROR column of a job object (`jobs --json` row or `job --json`):
 * its stable code (the job's, else its result's), else "exit N" or
 * "signal N" for a job that ran and failed, else "-". */
void server_cli_job_error_text(const json_t *job, char *buf, size_t size);
/* A labels object {KEY: VALUE} as "k=v,k=v" ("" when none). */
void server_cli_labels_text(const json_t *labels, char *buf, size_t size);

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
int server_cmd_keys(const struct server_cli *cli, int argc, char **argv);
/* server/cmd_backup.c */
int server_cmd_backup(const struct server_cli *cli, int argc, char **argv);
int server_cmd_restore(const struct server_cli *cli, int argc, char **argv);
/* server/cmd_migrate.c: a stopped server's SQLite state into PostgreSQL. */
int server_cmd_migrate(const struct server_cli *cli, int argc, char **argv);
/* The tables migrate knows, in the order it copies them (foreign keys
 * first), each with the columns its rows are ordered by; the first,
 * schema_version, is not copied (key NULL: the target has its own).
 * Terminated by name NULL. A table of the SQLite schema that is not here
 * is refused (tests/server/test_migrate.c holds the list to the schema). */
struct server_migrate_table {
  const char *name;
  const char *key;
};
extern const struct server_migrate_table server_migrate_tables[];
int server_cmd_verify_receipt(const struct server_cli *cli, int argc, char **argv);
/* `keys export-public` (server/cmd_receipt.c); argv[0] is "export-public". */
int server_cmd_keys_export_public(const struct server_cli *cli, int argc, char **argv);

/* Write job's receipt file (docs/protocol/receipt.md) to path ("-" for
 * stdout), the device-key statement signed now with STATE/ticket.key.
 * Prints the error and returns the exit status (server/cmd_receipt.c). */
int server_cli_write_receipt(const char *state, struct server_db *db,
                             const struct server_db_job *job, const char *path);

#endif
