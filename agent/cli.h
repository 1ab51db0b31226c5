/* What every agent command prints, in one place: the one-line error on
 * stderr, "cordon-agent: <code>: <message>", JSON on stdout (--json, or
 * the commands that only speak JSON), and the command table that help,
 * usage and main.c's dispatch all read. The exit statuses are main.c's
 * contract: 0 done (help and version included), 1 ran and failed or was
 * refused, 2 bad usage or malformed local input, AGENT_EXIT_UNPAIRED
 * (`run` only) not paired, or revoked or unpaired by the server:
 * restarting cannot help until someone pairs the device (the systemd units
 * say RestartPreventExitStatus=). Nothing here exits or keeps state. */
#ifndef CORDON_AGENT_CLI_H
#define CORDON_AGENT_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/error.h"

#define AGENT_PROG "cordon-agent"
#define AGENT_EXIT_UNPAIRED 3

/* The version this build reports (in `version`, in hello, in the log):
 * the build's CORDON_VERSION (CMakeLists.txt). */
#ifndef CORDON_VERSION
#error "CORDON_VERSION comes from the build (CMakeLists.txt)"
#endif
#define AGENT_VERSION CORDON_VERSION

/* One command of the agent: the table in cli.c is the only list. */
struct agent_cli_command {
  const char *name;
  const char *synopsis; /* what follows the name, "" for nothing */
  const char *summary;  /* one line */
  const char *details;  /* option lines for `help NAME`, each "  --x  what\n"; may be "" */
};

/* The commands, in the order usage lists them; a NULL name ends it. */
extern const struct agent_cli_command agent_cli_commands[];

/* The command called name, NULL if none. */
const struct agent_cli_command *agent_cli_find(const char *name);
/* The usage (every command, one line each) on f. */
void agent_cli_print_usage(FILE *f);
/* `help NAME`: the command's synopsis, summary and details on f. */
void agent_cli_print_help(FILE *f, const struct agent_cli_command *c);
/* `version`: version, protocol versions, build options, the libraries'
 * versions and the platform layer, as text or (json) a JSON object, on
 * stdout. */
void agent_cli_print_version(bool json);

/* "cordon-agent: <code name>: <detail>" on stderr; detail NULL or empty:
 * the code's own message. */
void agent_say_error(int err, const char *detail);
/* agent_say_error, then the exit status for err: 2 for CORDON_E_USAGE,
 * else 1. */
int agent_fail(int err, const char *message);
/* A usage error (CORDON_E_USAGE): one line, "cordon-agent: usage: <msg>",
 * and returns 2. */
int agent_usage(const char *message);
/* A usage error with a printf format, one line, returns 2. */
int agent_usagef(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The code a failed connection reports: before the session is
 * established (the server's first message), a frame over the limit means
 * the peer does not speak cordon (an HTTP or SSH server: its first bytes
 * read as a huge length), CORDON_E_PROTOCOL, not CORDON_E_LIMIT. err as
 * the connection's on_close gave it. */
int agent_connect_error(int err, bool established);
/* j, indented and in insertion order, and a newline on stdout, flushed;
 * j is borrowed. Prints nothing when j cannot be encoded. */
void agent_print_json(json_t *j);

#endif
