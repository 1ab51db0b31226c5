#include "server/cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/admin_client.h"
#include "server/admin_ops.h"

int server_cli_exit_status(int err) {
  switch (err) {
  case 0:
    return 0;
  case CORDON_E_USAGE:
  case CORDON_E_MANIFEST_INVALID:
  case CORDON_E_PACKAGE_CORRUPT:
  case CORDON_E_PACKAGE_TOO_LARGE:
  case CORDON_E_CONFIG_INVALID:
    return 2;
  default:
    return 1;
  }
}

int server_cli_fail(int err, const struct cordon_diag *diag) {
  const char *msg = diag && diag->msg[0] ? diag->msg : cordon_err_message(err);
  fprintf(stderr, "%s: %s: %s\n", SERVER_PROG, cordon_err_name(err), msg);
  return server_cli_exit_status(err);
}

int server_cli_failf(int err, const char *fmt, ...) {
  struct cordon_diag d;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d.msg, sizeof(d.msg), fmt, ap);
  va_end(ap);
  return server_cli_fail(err, &d);
}

int server_cli_db_code(int err) {
  switch (err) {
  case -EINVAL:
    return CORDON_E_USAGE;
  case -ENOENT:
    return CORDON_E_NOT_FOUND;
  case -EEXIST:
    return CORDON_E_ALREADY_EXISTS;
  case -ENOTUNIQ: /* a name or prefix that names several: say which */
    return CORDON_E_USAGE;
  default:
    return err;
  }
}

int server_cli_db_fail(int err, const struct cordon_diag *diag) {
  return server_cli_fail(server_cli_db_code(err), diag);
}

int server_cli_device_resolve(struct server_db *db, const char *text, const char *user,
                              struct server_db_device *out_dev) {
  struct cordon_diag diag = {{0}};
  struct server_db_user u = {0};
  int err = user ? server_db_user_get_by_name(db, user, &u, &diag) : 0;
  if (!err)
    err = server_db_device_resolve(db, text, user ? u.id : 0, out_dev, &diag);
  return err ? server_cli_db_fail(err, &diag) : 0;
}

void server_cli_code_id(const char *text, char out[SERVER_DB_CODE_ID_SIZE]) {
  size_t n = 0;
  for (const char *p = text ? text : ""; *p && n < SERVER_DB_CODE_ID_CHARS; p++)
    if (*p != '-' && *p != ' ')
      out[n++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
  out[n] = '\0';
}

int server_cli_admin_fail(int err, const struct cordon_diag *diag) {
  if (err == -ENOENT || err == -ECONNREFUSED)
    return diag && diag->msg[0]
               ? server_cli_fail(CORDON_E_NOT_RUNNING, diag)
               : server_cli_failf(CORDON_E_NOT_RUNNING, "the daemon is not running");
  return server_cli_fail(err, diag);
}

int server_cli_open_db(const char *state_dir, struct server_db **out_db) {
  struct cordon_diag diag = {{0}};
  struct server_db *db = NULL;
  int err = server_db_open(state_dir, 0, &db, &diag);
  if (err)
    return server_cli_fail(err, &diag);
  *out_db = db;
  return 0;
}

void server_cli_format_time(int64_t t, const char *never, char *buf, size_t size) {
  struct tm tm;
  time_t tt = (time_t)t;
  if (t == 0 || !gmtime_r(&tt, &tm) || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf(buf, size, "%s", t == 0 ? never : "?");
}

json_t *server_cli_json_time(int64_t t) {
  if (t == 0)
    return json_null();
  char buf[64];
  server_cli_format_time(t, "", buf, sizeof(buf));
  return json_string(buf);
}

void server_cli_escape(const char *s, char *buf, size_t size) {
  size_t o = 0;
  if (size == 0)
    return;
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    char tmp[8];
    size_t n;
    if (*p < 0x20 || *p == 0x7f) {
      n = (size_t)snprintf(tmp, sizeof(tmp), "\\x%02x", *p);
    } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
      n = (size_t)snprintf(tmp, sizeof(tmp), "\\x%02x", p[1]);
      p++;
    } else if (*p == '\\') {
      n = 2;
      memcpy(tmp, "\\\\", 2);
    } else {
      tmp[0] = (char)*p;
      n = 1;
    }
    if (o + n >= size)
      break;
    memcpy(buf + o, tmp, n);
    o += n;
  }
  buf[o] = '\0';
}

int server_cli_parse_duration(const char *s, int64_t *out_seconds) {
  /* a number alone (seconds), or number-unit pairs: 90s, 10m, 1h30m, 1d12h */
  if (!s || !*s)
    return -EINVAL;
  int64_t total = 0;
  const char *p = s;
  while (*p) {
    if (*p < '0' || *p > '9')
      return -EINVAL;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || end == p)
      return -EINVAL;
    int64_t mult;
    switch (*end) {
    case '\0':
      if (p != s) /* "1h30": a bare number only alone */
        return -EINVAL;
      mult = 1;
      break;
    case 's':
      mult = 1;
      break;
    case 'm':
      mult = 60;
      break;
    case 'h':
      mult = 3600;
      break;
    case 'd':
      mult = 86400;
      break;
    default:
      return -EINVAL;
    }
    if (v > (INT64_MAX - total) / mult)
      return -EINVAL;
    total += (int64_t)v * mult;
    p = *end ? end + 1 : end;
  }
  *out_seconds = total;
  return 0;
}

int server_cli_print_json(json_t *j, int ascii) {
  if (!j)
    return server_cli_failf(-ENOMEM, "out of memory");
  int rc =
      json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | (ascii ? JSON_ENSURE_ASCII : 0));
  json_decref(j);
  if (rc != 0 || fputc('\n', stdout) == EOF || fflush(stdout) != 0)
    return server_cli_failf(-EIO, "cannot write to stdout");
  return 0;
}

int server_cli_ask(const char *state_dir, json_t *req, json_t **out_reply) {
  json_t *reply = NULL;
  struct cordon_diag diag = {{0}};
  int r =
      req ? admin_call_within(state_dir, req, SERVER_CLI_API_TIMEOUT_MS, &reply, &diag) : -ENOMEM;
  json_decref(req);
  if (r == -ENOENT || r == -ECONNREFUSED)
    return -ESRCH;
  if (r < 0)
    return server_cli_fail(r, &diag);
  if (!admin_reply_is_ok(reply)) {
    const char *msg;
    int err = admin_reply_err(reply, &msg);
    int status = server_cli_failf(err, "%s", msg ? msg : cordon_err_message(err));
    json_decref(reply);
    return status;
  }
  *out_reply = reply;
  return 0;
}

int server_cli_ask_for(const char *state_dir, json_t *req, const char *key, json_t **out_value) {
  json_t *reply = NULL;
  int status = server_cli_ask(state_dir, req, &reply);
  if (status)
    return status;
  json_t *v = json_incref(json_object_get(reply, key));
  json_decref(reply);
  if (!v)
    return server_cli_failf(CORDON_E_PROTOCOL, "the daemon's reply has no %s", key);
  *out_value = v;
  return 0;
}

int server_cli_ask_or_open(const char *state_dir, json_t *req, const char *key, json_t **out_value,
                           struct server_db **out_db) {
  *out_value = NULL;
  *out_db = NULL;
  int status = server_cli_ask_for(state_dir, req, key, out_value);
  return status == -ESRCH ? server_cli_open_db(state_dir, out_db) : status;
}

const char *server_cli_str(const json_t *o, const char *key, const char *dflt) {
  const char *v = json_string_value(json_object_get(o, key));
  return v ? v : dflt;
}

const char *server_cli_online_word(const json_t *online) {
  return json_is_true(online) ? "online" : json_is_false(online) ? "offline" : "unknown";
}

int server_cli_live_sessions(const char *state_dir, json_t **out_sessions, char *why,
                             size_t why_size) {
  json_t *req = admin_request_new(ADMIN_OP_SESSIONS), *reply = NULL;
  struct cordon_diag diag = {{0}};
  int r =
      req ? admin_call_within(state_dir, req, SERVER_CLI_LIVE_TIMEOUT_MS, &reply, &diag) : -ENOMEM;
  json_decref(req);
  if (r == -ENOENT || r == -ECONNREFUSED) {
    snprintf(why, why_size, "daemon not running");
    return -ESRCH;
  }
  if (r < 0) {
    snprintf(why, why_size, "the daemon did not answer: %s",
             diag.msg[0] ? diag.msg : cordon_err_message(r));
    return r;
  }
  json_t *list = json_object_get(reply, ADMIN_REPLY_SESSIONS);
  if (!admin_reply_is_ok(reply) || !json_is_array(list)) {
    const char *msg = NULL;
    if (!admin_reply_is_ok(reply))
      (void)admin_reply_err(reply, &msg);
    snprintf(why, why_size, "the daemon did not answer: %s", msg ? msg : "no session list");
    json_decref(reply);
    return CORDON_E_PROTOCOL;
  }
  *out_sessions = json_incref(list);
  json_decref(reply);
  return 0;
}

void server_cli_job_error_text(const json_t *job, char *buf, size_t size) {
  json_t *res = json_object_get(job, "result");
  const char *code = json_string_value(json_object_get(job, "error"));
  if (!code)
    code = json_string_value(json_object_get(json_object_get(res, "error"), "code"));
  json_t *ec = json_object_get(job, "exit_code"), *sig = json_object_get(job, "signal");
  if (!json_is_integer(ec))
    ec = json_object_get(res, "exit_code");
  if (!json_is_integer(sig))
    sig = json_object_get(res, "signal");
  if (code)
    snprintf(buf, size, "%s", code);
  else if (json_is_integer(sig))
    snprintf(buf, size, "signal %lld", (long long)json_integer_value(sig));
  else if (json_is_integer(ec) && json_integer_value(ec) != 0)
    snprintf(buf, size, "exit %lld", (long long)json_integer_value(ec));
  else
    snprintf(buf, size, "-");
}

void server_cli_labels_text(const json_t *labels, char *buf, size_t size) {
  struct server_db_labels l = {0};
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)labels, k, v) {
    struct server_db_label one;
    snprintf(one.key, sizeof(one.key), "%s", k);
    snprintf(one.value, sizeof(one.value), "%s", json_string_value(v) ? json_string_value(v) : "");
    (void)server_db_labels_put(&l, &one, NULL);
  }
  server_db_labels_format(&l, buf, size);
}

static bool is_online(const json_t *sessions, const char *device_id) {
  size_t i;
  json_t *s;
  json_array_foreach(sessions, i, s) {
    const char *d = json_string_value(json_object_get(s, "device"));
    if (d && device_id && strcmp(d, device_id) == 0)
      return true;
  }
  return false;
}

json_t *server_cli_online_json(const json_t *sessions, const char *device_id) {
  return sessions ? json_boolean(is_online(sessions, device_id)) : json_null();
}

const char *server_cli_online_text(const json_t *sessions, const char *device_id) {
  return sessions ? is_online(sessions, device_id) ? "online" : "offline" : "unknown";
}

/* --- the command table ---------------------------------------------------- */

#define FORMS(...) ((const struct server_cli_form[]){__VA_ARGS__, {NULL, NULL, NULL}})

const struct server_cli_command server_cli_commands[] = {
    {"init", server_cmd_init, "create the state directory, its keys and database",
     FORMS({NULL, "[--db postgresql://...] [--keys-from STATE]",
            "create the state directory, its keys and database (SQLite in the state "
            "directory, or the PostgreSQL database --db names, kept in STATE/db-url); with "
            "--keys-from (and --db), another server of STATE's cluster: STATE's keys"})},
    {"run", server_cmd_run, "the daemon",
     FORMS({NULL,
            "--listen HOST:PORT [--advertise HOST:PORT]... [--job-grace SECONDS] "
            "[--queue-ttl DURATION] [--drain-timeout SECONDS] "
            "[--log-level debug|info|warn|error] [--log-file PATH] "
            "[--metrics HOST:PORT] [--require-approval] [--max-connections N] "
            "[--max-preauth-per-address N] [--db postgresql://...]",
            "the daemon: agents' sessions and pairing on HOST:PORT, admin requests on "
            "STATE/admin.sock"})},
    {"user", server_cmd_user, "users",
     FORMS({"add", "NAME [--json]", "add a user"}, {"list", "[--json]", "list the users"},
           {"set", "NAME --require-approval yes|no",
            "whether the user's newly paired devices wait for device approve"},
           {"remove", "NAME", "revoke every device of a user and burn its codes; jobs are kept"})},
    {"pair-code", server_cmd_paircode, "single-use pairing codes",
     FORMS(
         {NULL, "USER [--ttl DURATION]", "mint a pairing code for USER; the code alone on stdout"},
         {"list", "[--user USER] [--json]",
          "the codes: id, user, state, attempts left, why the last attempt failed"},
         {"revoke", "ID", "burn a live code (ID: its first two groups, as pair-code list shows)"})},
    {"devices", server_cmd_devices, "list the paired devices",
     FORMS({NULL, "[--user USER] [--json]", "list the paired devices"})},
    {"device", server_cmd_device, "one device",
     FORMS({"label", "DEVICE [KEY=VALUE...] [--remove KEY]... [--user USER] [--json]",
            "set and remove a device's labels; prints its labels"},
           {"show", "DEVICE [--user USER] [--json]",
            "everything about a device: level, labels, facts it reported, its jobs"},
           {"approve", "DEVICE [--user USER]",
            "a pending device gets jobs from now on (compare the authentication strings first)"},
           {"reject", "DEVICE [--user USER]", "a pending device is revoked for good"},
           {"rename", "DEVICE NAME [--user USER]",
            "rename a device (names are unique among a user's devices)"})},
    {"revoke", server_cmd_revoke, "revoke a device (terminal)",
     FORMS({NULL, "DEVICE [--user USER]", "revoke a device: its key is refused from then on"})},
    {"pack", server_cmd_pack, "build and sign an executor package",
     FORMS({NULL, "DIR -o FILE.cpkg [--key PUBLISHER_KEY]", "build and sign a package from DIR"})},
    {"dispatch", server_cmd_dispatch, "send a package to a device of a user",
     FORMS({NULL,
            "--user USER [--device DEVICE] [--where KEY=VALUE]... FILE.cpkg [--wait | --detach] "
            "[--no-queue | --queue-ttl DURATION] [--key KEY] [--explain] [-- ARGS...]",
            "ask the daemon to send a job to a device of USER"})},
    {"cancel", server_cmd_cancel, "cancel a job",
     FORMS({NULL, "JOB", "cancel a job (through the daemon)"})},
    {"jobs", server_cmd_jobs, "list jobs",
     FORMS({NULL,
            "[--user USER] [--device DEVICE] [--job-state STATE] [--since TIME] [--limit N] "
            "[--json]",
            "list the newest jobs, filtered"})},
    {"job", server_cmd_job, "one job and its result",
     FORMS(
         {NULL, "JOB [--json] [--wait | --follow] [--receipt FILE]",
          "show one job and its result; --receipt writes its signed receipt file (- for stdout)"})},
    {"verify-receipt", server_cmd_verify_receipt, "check a job receipt offline",
     FORMS({NULL, "FILE --trust SERVER.pub",
            "check a receipt file against the server's ticket public key, offline"})},
    {"keys", server_cmd_keys, "the ticket and publisher keys",
     FORMS({"rotate", "[--ticket] [--publisher]",
            "new keys, announced to the agents signed by the old ones"},
           {"retire", "KEY_ID", "an older publisher key's packages are refused from then on"},
           {"list", "[--json]", "every key: id, role, created, retired, current"},
           {"export-public", "", "print the ticket public key (SERVER.pub for verify-receipt)"})},
    {"backup", server_cmd_backup, "copy the state database, also while the daemon runs",
     FORMS({NULL, "FILE", "a consistent copy of the state database in a new FILE"})},
    {"restore", server_cmd_restore, "put a backup back (the daemon stopped)",
     FORMS({NULL, "FILE", "replace the state database with the backup in FILE"})},
    {"migrate", server_cmd_migrate, "move the SQLite state into PostgreSQL (the daemon stopped)",
     FORMS({NULL, "--to postgresql://...",
            "copy every table of STATE/cordon.db into the empty PostgreSQL database the URL "
            "names, in one transaction, read back and compared; then STATE/db-url names it"})},
    {"version", server_cmd_version, "this build's versions",
     FORMS(
         {NULL, "[--json]", "the version, protocol versions, build options and library versions"})},
    {"help", server_cmd_help, "help on a command",
     FORMS({NULL, "[COMMAND [SUBCOMMAND]]", "help on a command, or the list of commands"})},
    {NULL, NULL, NULL, NULL},
};

const struct server_cli_command *server_cli_command_find(const char *name) {
  for (const struct server_cli_command *c = server_cli_commands; name && c->name; c++)
    if (strcmp(c->name, name) == 0)
      return c;
  return NULL;
}

const struct server_cli_form *server_cli_form_find(const struct server_cli_command *cmd,
                                                   const char *sub) {
  for (const struct server_cli_form *f = cmd->forms; f->summary; f++)
    if (sub ? f->sub && strcmp(f->sub, sub) == 0 : !f->sub)
      return f;
  return NULL;
}

/* "cordon-server user add NAME [--json]" */
static void print_form(FILE *out, const char *cmd, const struct server_cli_form *f) {
  fprintf(out, "%s %s%s%s%s%s", SERVER_PROG, cmd, f->sub ? " " : "", f->sub ? f->sub : "",
          f->args[0] ? " " : "", f->args);
}

int server_cli_help(const char *name, const char *sub) {
  if (!name) {
    printf("usage: %s [--state DIR] COMMAND [ARGS...]\n"
           "       %s --version | --help | help COMMAND\n\ncommands:\n",
           SERVER_PROG, SERVER_PROG);
    for (const struct server_cli_command *c = server_cli_commands; c->name; c++)
      printf("  %-10s %s\n", c->name, c->summary);
    printf("\nEvery command takes --state DIR (default %s) and -h, --help.\n"
           "Exit status: 0 done, 1 failed, 2 bad usage (docs/DESIGN.md section 2.1).\n",
           SERVER_DEFAULT_STATE);
    return 0;
  }
  const struct server_cli_command *c = server_cli_command_find(name);
  if (!c)
    return server_cli_usage(NULL, NULL, "unknown command '%s'", name);
  const struct server_cli_form *only = sub ? server_cli_form_find(c, sub) : NULL;
  const char *lead = "usage: ";
  for (const struct server_cli_form *f = c->forms; f->summary; f++) {
    if (only && f != only)
      continue;
    fputs(lead, stdout);
    print_form(stdout, c->name, f);
    printf("\n           %s\n", f->summary);
    lead = "       ";
  }
  printf("\nOptions every command takes: --state DIR (default %s), -h, --help.\n",
         SERVER_DEFAULT_STATE);
  return fflush(stdout) == 0 ? 0 : 1;
}

int server_cli_usage(const char *name, const char *sub, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  cordon_escape_controls(what, sizeof(what));
  const struct server_cli_command *c = server_cli_command_find(name);
  fprintf(stderr, "%s: %s: %s", SERVER_PROG, cordon_err_name(CORDON_E_USAGE), what);
  if (!c) {
    fprintf(stderr, " (%s --help lists the commands)\n", SERVER_PROG);
    return 2;
  }
  const struct server_cli_form *only = sub ? server_cli_form_find(c, sub) : NULL;
  const char *lead = "; expected: ";
  for (const struct server_cli_form *f = c->forms; f->summary; f++) {
    if (only && f != only)
      continue;
    fputs(lead, stderr);
    print_form(stderr, c->name, f);
    lead = " | ";
  }
  fprintf(stderr, " (%s help %s)\n", SERVER_PROG, c->name);
  return 2;
}

int server_cli_bad_option(const char *name, const char *sub, char **argv) {
  const char *arg = optind > 0 ? argv[optind - 1] : NULL;
  if (optopt && optopt != '?' && arg && arg[0] == '-' && arg[1] != '-' && arg[1] != optopt)
    return server_cli_usage(name, sub, "-%c: unknown option or missing value", optopt);
  return server_cli_usage(name, sub, "'%s': unknown option or missing value", arg ? arg : "?");
}

int server_cmd_help(const struct server_cli *cli, int argc, char **argv) {
  (void)cli;
  if (argc > 3)
    return server_cli_usage("help", NULL, "too many arguments");
  return server_cli_help(argc > 1 ? argv[1] : NULL, argc > 2 ? argv[2] : NULL);
}

/* --- tables --- */

static size_t utf8_chars(const char *s) {
  size_t n = 0;
  for (; *s; s++)
    n += ((unsigned char)*s & 0xc0) != 0x80;
  return n;
}

static void table_add(struct server_cli_table *t, va_list ap) {
  if (t->err)
    return;
  if (t->nrows == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 16;
    char **cells = realloc(t->cells, cap * t->ncols * sizeof(*cells));
    if (!cells) {
      t->err = -ENOMEM;
      return;
    }
    t->cells = cells;
    t->cap = cap;
  }
  char **row = t->cells + t->nrows * t->ncols;
  for (size_t c = 0; c < t->ncols; c++) {
    const char *v = va_arg(ap, const char *);
    row[c] = strdup(v ? v : "-");
    if (!row[c]) {
      while (c--)
        free(row[c]);
      t->err = -ENOMEM;
      return;
    }
    size_t w = utf8_chars(row[c]);
    if (w > t->width[c])
      t->width[c] = w;
  }
  t->nrows++;
}

void server_cli_table_init(struct server_cli_table *t, size_t ncols, ...) {
  memset(t, 0, sizeof(*t));
  t->ncols = ncols > SERVER_CLI_TABLE_COLS ? SERVER_CLI_TABLE_COLS : ncols;
  va_list ap;
  va_start(ap, ncols);
  table_add(t, ap);
  va_end(ap);
}

void server_cli_table_row(struct server_cli_table *t, ...) {
  va_list ap;
  va_start(ap, t);
  table_add(t, ap);
  va_end(ap);
}

int server_cli_table_print(struct server_cli_table *t) {
  if (t->err)
    return server_cli_failf(t->err, "out of memory");
  for (size_t r = 0; r < t->nrows; r++) {
    char **row = t->cells + r * t->ncols;
    for (size_t c = 0; c < t->ncols; c++) {
      bool last = c + 1 == t->ncols;
      fputs(row[c], stdout);
      if (!last)
        printf("%*s", (int)(t->width[c] - utf8_chars(row[c]) + 2), "");
    }
    putchar('\n');
  }
  return fflush(stdout) == 0 ? 0 : server_cli_failf(-EIO, "cannot write to stdout");
}

void server_cli_table_release(struct server_cli_table *t) {
  for (size_t i = 0; t->cells && i < t->nrows * t->ncols; i++)
    free(t->cells[i]);
  free(t->cells);
  memset(t, 0, sizeof(*t));
}
