/* cordon-server pair-code USER [--ttl 10m]: mint a single-use pairing code.
 * The code alone on stdout's first line; everything else on stderr. The code
 * is never logged and exists nowhere else once this command exits.
 * pair-code list [--user U] [--json]: the codes (their public ids, never
 * their secrets), with state and why their last attempt failed.
 * pair-code revoke ID: a live code is burned. list and revoke ask the
 * running daemon (admin ops pair_codes, pair_code_revoke), or with none
 * running work on the database; minting always works on the database
 * (the code's secret never crosses the admin socket). A user called `list` or
 * `revoke` mints with `pair-code --user NAME`. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "server/admin_ops.h"
#include "server/admin_view.h"
#include "server/cli.h"
#include "server/db.h"

/* The codes from the running daemon (admin op pair_codes), or (none
 * running) from the database: 0 and *out_list, or the exit status. */
static int codes_get(const char *state, const char *user, json_t **out_list) {
  json_t *req = admin_request_new(ADMIN_OP_PAIR_CODES);
  if (req && user && admin_request_set(req, ADMIN_ARG_USER, json_string(user)) < 0) {
    json_decref(req);
    req = NULL;
  }
  struct server_db *db = NULL;
  int status = server_cli_ask_or_open(state, req, ADMIN_REPLY_CODES, out_list, &db);
  if (status || !db)
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_user u = {0};
  struct server_db_code_list l = {0};
  int err = user ? server_db_user_get_by_name(db, user, &u, &diag) : 0;
  if (!err)
    err = server_db_code_list(db, user ? u.id : 0, &l, &diag);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  json_t *arr = admin_view_codes(&l);
  server_db_code_list_release(&l);
  if (!arr)
    return server_cli_failf(-ENOMEM, "out of memory");
  *out_list = arr;
  return 0;
}

static int code_list(const char *state, const char *user, int json) {
  json_t *list = NULL;
  int status = codes_get(state, user, &list);
  if (status)
    return status;
  if (json)
    return server_cli_print_json(list, 0);
  struct server_cli_table t;
  server_cli_table_init(&t, 7, "ID", "USER", "STATE", "ATTEMPTS", "CREATED", "EXPIRES",
                        "LAST FAILURE");
  size_t i;
  json_t *c;
  json_array_foreach(list, i, c) {
    const char *failure = server_cli_str(c, "last_failure", NULL);
    char attempts[24], last[SERVER_DB_CODE_MAX + 48], owner[4 * SERVER_DB_NAME_MAX + 1];
    snprintf(attempts, sizeof(attempts), "%lld",
             (long long)json_integer_value(json_object_get(c, "attempts_left")));
    snprintf(last, sizeof(last), "%s%s%s", failure ? failure : "-", failure ? " at " : "",
             failure ? server_cli_str(c, "last_failure_at", "-") : "");
    server_cli_escape(server_cli_str(c, "user", "?"), owner, sizeof(owner));
    server_cli_table_row(&t, server_cli_str(c, "id", "?"), owner, server_cli_str(c, "state", "?"),
                         attempts, server_cli_str(c, "created", "-"),
                         server_cli_str(c, "expires", "-"), last);
  }
  json_decref(list);
  status = server_cli_table_print(&t);
  server_cli_table_release(&t);
  return status;
}

static int code_revoke(const char *state, const char *text) {
  char id[SERVER_DB_CODE_ID_SIZE];
  server_cli_code_id(text, id);
  json_t *req = admin_request_new(ADMIN_OP_PAIR_CODE_REVOKE), *reply = NULL;
  if (req && admin_request_set(req, ADMIN_ARG_CODE, json_string(id)) < 0) {
    json_decref(req);
    req = NULL;
  }
  int status = server_cli_ask(state, req, &reply);
  bool already = false;
  if (status == 0) {
    already = json_is_true(json_object_get(reply, ADMIN_REPLY_ALREADY));
    json_decref(reply);
  } else if (status != -ESRCH) {
    return status;
  } else {
    struct server_db *db = NULL;
    if ((status = server_cli_open_db(state, &db)))
      return status;
    struct cordon_diag diag = {{0}};
    int err = server_db_code_revoke(db, id, &diag);
    server_db_close(db);
    if (err && err != -EALREADY)
      return server_cli_db_fail(err, &diag);
    already = err == -EALREADY;
  }
  if (already)
    fprintf(stderr, "%s: pairing code %s was not live (nothing to revoke)\n", SERVER_PROG, id);
  else
    fprintf(stderr, "%s: pairing code %s revoked\n", SERVER_PROG, id);
  return 0;
}

int server_cmd_paircode(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {
      {"state", required_argument, NULL, 's'}, {"ttl", required_argument, NULL, 't'},
      {"user", required_argument, NULL, 'u'},  {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},        {0}};
  const char *state = cli->state_dir;
  int64_t ttl = SERVER_DB_CODE_TTL_DEFAULT;
  const char *user = NULL;
  int c, json = 0, ttl_given = 0;
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
      ttl_given = 1;
      break;
    case 'u':
      user = optarg;
      break;
    case 'j':
      json = 1;
      break;
    case 'h':
      return server_cli_help("pair-code", NULL);
    default:
      return server_cli_bad_option("pair-code", NULL, argv);
    }
  }
  const char *sub = argc > optind ? argv[optind] : NULL;
  if (sub && !user && (strcmp(sub, "list") == 0 || strcmp(sub, "revoke") == 0)) {
    size_t want = strcmp(sub, "list") == 0 ? 1 : 2;
    if ((size_t)(argc - optind) != want)
      return want == 2 && argc - optind < 2
                 ? server_cli_usage("pair-code", sub, "ID is missing")
                 : server_cli_usage("pair-code", sub, "unexpected argument '%s'", argv[argc - 1]);
    if (ttl_given)
      return server_cli_usage("pair-code", sub, "--ttl is for minting a code");
    return want == 1 ? code_list(state, user, json) : code_revoke(state, argv[optind + 1]);
  }
  if (user && sub && strcmp(sub, "list") == 0 && argc - optind == 1) { /* list --user U */
    return code_list(state, user, json);
  }
  if (argc - optind != (user ? 0 : 1))
    return server_cli_usage("pair-code", NULL,
                            argc == optind ? "USER is missing" : "one USER expected");
  const char *who = user ? user : argv[optind];
  struct server_db *db = NULL;
  int status = server_cli_open_db(state, &db);
  if (status)
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_user u;
  char code[SERVER_DB_CODE_TEXT_SIZE];
  int64_t expires = 0;
  int err = server_db_user_get_by_name(db, who, &u, &diag);
  if (!err && u.removed)
    err = cordon_diag_set(&diag, -ENOENT, "user %s was removed", who);
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
