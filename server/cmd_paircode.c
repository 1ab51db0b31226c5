/* cordon-server pair-code USER [--ttl 10m]: mint a single-use pairing code.
 * The code alone on stdout's first line; everything else on stderr. The code
 * is never logged and exists nowhere else once this command exits.
 * pair-code list [--user U] [--json]: the codes (their public ids, never
 * their secrets), with state and why their last attempt failed.
 * pair-code revoke ID: a live code is burned. A user called `list` or
 * `revoke` mints with `pair-code --user NAME`. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "server/cli.h"
#include "server/db.h"

static const char *code_state_text(const struct server_db_code_info *c) {
  if (c->state == SERVER_DB_CODE_USED)
    return "used";
  if (c->state == SERVER_DB_CODE_BURNED || c->attempts_left <= 0)
    return "burned";
  return c->expired ? "expired" : "live";
}

static int code_list(struct server_db *db, const char *user, int json) {
  struct cordon_diag diag = {{0}};
  struct server_db_user u = {0};
  struct server_db_code_list l = {0};
  int err = user ? server_db_user_get_by_name(db, user, &u, &diag) : 0;
  if (!err)
    err = server_db_code_list(db, user ? u.id : 0, &l, &diag);
  if (err)
    return server_cli_db_fail(err, &diag);
  int status = 0;
  if (json) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < l.count; i++) {
      const struct server_db_code_info *c = &l.items[i];
      json_t *o =
          json_pack("{s:s, s:s, s:s, s:i, s:o, s:o, s:s?, s:o}", "id", c->id, "user", c->user,
                    "state", code_state_text(c), "attempts_left", c->attempts_left, "created",
                    server_cli_json_time(c->created), "expires", server_cli_json_time(c->expires),
                    "last_failure", c->last_failure[0] ? c->last_failure : NULL, "last_failure_at",
                    server_cli_json_time(c->last_failure_at));
      if (json_array_append_new(arr, o) < 0) {
        json_decref(arr);
        arr = NULL;
      }
    }
    status = server_cli_print_json(arr, 0);
  } else {
    printf("%-10s  %-12s %-8s %-8s %-20s %-20s %s\n", "ID", "USER", "STATE", "ATTEMPTS", "CREATED",
           "EXPIRES", "LAST FAILURE");
    for (size_t i = 0; i < l.count; i++) {
      const struct server_db_code_info *c = &l.items[i];
      char created[64], expires[64], failed[64];
      server_cli_format_time(c->created, "-", created, sizeof(created));
      server_cli_format_time(c->expires, "-", expires, sizeof(expires));
      server_cli_format_time(c->last_failure_at, "-", failed, sizeof(failed));
      printf("%-10s  %-12s %-8s %-8d %-20s %-20s %s%s%s\n", c->id, c->user, code_state_text(c),
             c->attempts_left, created, expires, c->last_failure[0] ? c->last_failure : "-",
             c->last_failure[0] ? " at " : "", c->last_failure[0] ? failed : "");
    }
  }
  server_db_code_list_release(&l);
  return status;
}

static int code_revoke(struct server_db *db, const char *id) {
  struct cordon_diag diag = {{0}};
  char norm[SERVER_DB_CODE_ID_SIZE];
  size_t n = 0;
  /* as typed: any case, with dashes; a whole code names its id too */
  for (const char *p = id; *p && n < SERVER_DB_CODE_ID_CHARS; p++)
    if (*p != '-' && *p != ' ')
      norm[n++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
  norm[n] = '\0';
  int err = server_db_code_revoke(db, norm, &diag);
  if (err == -EALREADY) {
    fprintf(stderr, "%s: pairing code %s was not live (nothing to revoke)\n", SERVER_PROG, norm);
    return 0;
  }
  if (err)
    return server_cli_db_fail(err, &diag);
  fprintf(stderr, "%s: pairing code %s revoked\n", SERVER_PROG, norm);
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
    struct server_db *db = NULL;
    int status = server_cli_open_db(state, &db);
    if (status)
      return status;
    status = want == 1 ? code_list(db, user, json) : code_revoke(db, argv[optind + 1]);
    server_db_close(db);
    return status;
  }
  if (user && sub && strcmp(sub, "list") == 0 && argc - optind == 1) { /* list --user U */
    struct server_db *db = NULL;
    int status = server_cli_open_db(state, &db);
    if (status)
      return status;
    status = code_list(db, user, json);
    server_db_close(db);
    return status;
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
