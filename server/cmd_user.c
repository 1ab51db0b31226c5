/* cordon-server user add NAME | user list [--json] */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "server/cli.h"
#include "server/db.h"

static json_t *user_json(const struct server_db_user *u) {
  return json_pack("{s:I, s:s, s:o}", "id", (json_int_t)u->id, "name", u->name, "created",
                   server_cli_json_time(u->created));
}

static int user_add(struct server_db *db, const char *name, int json) {
  struct cordon_diag diag = {{0}};
  int64_t id;
  int err = server_db_user_add(db, name, &id, &diag);
  if (err)
    return server_cli_db_fail(err, &diag);
  struct server_db_user u;
  if ((err = server_db_user_get(db, id, &u, &diag)))
    return server_cli_db_fail(err, &diag);
  fprintf(stderr, "%s: added user %s (id %lld)\n", SERVER_PROG, u.name, (long long)u.id);
  return json ? server_cli_print_json(user_json(&u), 0) : 0;
}

static int user_list(struct server_db *db, int json) {
  struct cordon_diag diag = {{0}};
  struct server_db_user_list l = {0};
  int err = server_db_user_list(db, &l, &diag);
  if (err)
    return server_cli_db_fail(err, &diag);
  int status = 0;
  if (json) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < l.count; i++)
      if (json_array_append_new(arr, user_json(&l.items[i])) < 0) {
        json_decref(arr);
        arr = NULL;
      }
    status = server_cli_print_json(arr, 0);
  } else {
    printf("%-6s %-24s %s\n", "ID", "NAME", "CREATED");
    for (size_t i = 0; i < l.count; i++) {
      char created[64];
      server_cli_format_time(l.items[i].created, "-", created, sizeof(created));
      printf("%-6lld %-24s %s\n", (long long)l.items[i].id, l.items[i].name, created);
    }
  }
  server_db_user_list_release(&l);
  return status;
}

int server_cmd_user(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *state = cli->state_dir;
  int json = 0, c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      state = optarg;
      break;
    case 'j':
      json = 1;
      break;
    case 'h':
      return server_cli_help("user", NULL);
    default:
      return server_cli_bad_option("user", NULL, argv);
    }
  }
  int nargs = argc - optind;
  const char *sub = nargs > 0 ? argv[optind] : NULL;
  if (!sub)
    return server_cli_usage("user", NULL, "a subcommand is needed");
  if (!server_cli_form_find(server_cli_command_find("user"), sub))
    return server_cli_usage("user", NULL, "unknown subcommand '%s'", sub);
  int add = strcmp(sub, "add") == 0, list = strcmp(sub, "list") == 0;
  if ((add && nargs != 2) || (list && nargs != 1))
    return nargs < 2 ? server_cli_usage("user", sub, "NAME is missing")
                     : server_cli_usage("user", sub, "unexpected argument '%s'", argv[argc - 1]);
  struct server_db *db = NULL;
  int status = server_cli_open_db(state, &db);
  if (status)
    return status;
  status = add ? user_add(db, argv[optind + 1], json) : user_list(db, json);
  server_db_close(db);
  return status;
}
