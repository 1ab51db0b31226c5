/* Helpers shared by the admin commands that read and change the state
 * database directly (user, pair-code, devices, revoke, jobs, job). They print:
 * tables for people and JSON (--json) on stdout, errors as one line on stderr
 * in the server_cli_fail format. */
#ifndef CORDON_SERVER_ADMIN_H
#define CORDON_SERVER_ADMIN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "server/db.h"

/* Open STATE/cordon.db (never creating it). On failure prints the error and
 * returns the exit status; 0 and *out_db on success. */
int admin_open_db(const char *state_dir, struct server_db **out_db);

/* Print a database error (server_cli_fail) and return the exit status:
 * -EINVAL from the database is bad usage (2). */
int admin_fail(int err, const struct cordon_diag *diag);

/* "2026-11-30T04:23:19Z", or `never` for 0. */
void admin_format_time(int64_t t, const char *never, char *buf, size_t size);
/* The same as a JSON string, or JSON null for 0. New reference. */
json_t *admin_json_time(int64_t t);

/* s made safe for a terminal: bytes below 0x20, 0x7f and the C1 controls
 * (U+0080..U+009F) as \xNN, a backslash as \\. Truncated to fit size. */
void admin_escape(const char *s, char *buf, size_t size);

/* "600", "600s", "10m", "2h", "1d" -> seconds; -EINVAL otherwise. */
int admin_parse_duration(const char *s, int64_t *out_seconds);

/* json_dumpf(j) on stdout, indented, with a final newline; steals j. ascii:
 * escape everything outside ASCII (for people's terminals). 0 or exit 1. */
int admin_print_json(json_t *j, int ascii);

#endif
