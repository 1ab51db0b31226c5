/* cordon-server user add NAME | user list [--json] | user set NAME
 * --require-approval yes|no | user remove NAME */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "server/cli.h"
#include "server/db.h"

static json_t *user_json(const struct server_db_user *u) {
  return json_pack("{s:I, s:s, s:o, s:b, s:b}", "id", (json_int_t)u->id, "name", u->name, "created",
                   server_cli_json_time(u->created), "require_approval", u->require_approval,
                   "removed", u->removed);
}

static int user_set(struct server_db *db, const char *name, int approval) {
  if (approval < 0)
    return server_cli_usage("user", "set", "--require-approval yes|no is needed");
  struct cordon_diag diag = {{0}};
  struct server_db_user u;
  int err = server_db_user_get_by_name(db, name, &u, &diag);
  if (!err && u.removed)
    err = cordon_diag_set(&diag, -ENOENT, "user %s was removed", name);
  if (!err)
    err = server_db_user_set_require_approval(db, u.id, approval != 0, &diag);
  if (err)
    return server_cli_db_fail(err, &diag);
  fprintf(stderr, "%s: user %s: %s\n", SERVER_PROG, u.name,
          approval ? "newly paired devices wait for device approve"
                   : "newly paired devices get jobs at once");
  return 0;
}

/* Revoke every device and burn every code of the user, keep its jobs. */
static int user_remove(struct server_db *db, const char *state, const char *name) {
  struct cordon_diag diag = {{0}};
  struct server_db_user u;
  struct server_db_device_list l = {0};
  int err = server_db_user_get_by_name(db, name, &u, &diag);
  if (!err && u.removed)
    err = cordon_diag_set(&diag, -ENOENT, "user %s was already removed", name);
  if (!err)
    err = server_db_device_list(db, u.id, &l, &diag);
  if (!err)
    err = server_db_user_remove(db, u.id, &diag);
  if (err) {
    server_db_device_list_release(&l);
    return server_cli_db_fail(err, &diag);
  }
  int status = 0, revoked = 0;
  for (size_t i = 0; i < l.count; i++) {
    if (l.items[i].state == SERVER_DB_DEVICE_REVOKED)
      continue;
    revoked++;
    int st = server_cli_close_session(state, l.items[i].id);
    if (st && !status)
      status = st;
  }
  server_db_device_list_release(&l);
  fprintf(stderr, "%s: removed user %s: %d device(s) revoked, its codes burned, its jobs kept\n",
          SERVER_PROG, u.name, revoked);
  return status;
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
    struct server_cli_table t;
    server_cli_table_init(&t, 5, "ID", "NAME", "CREATED", "APPROVAL", "STATE");
    for (size_t i = 0; i < l.count; i++) {
      const struct server_db_user *u = &l.items[i];
      char created[64], id[24], name[4 * SERVER_DB_NAME_MAX + 1];
      server_cli_format_time(u->created, "-", created, sizeof(created));
      snprintf(id, sizeof(id), "%lld", (long long)u->id);
      server_cli_escape(u->name, name, sizeof(name));
      server_cli_table_row(&t, id, name, created, u->require_approval ? "required" : "-",
                           u->removed ? "removed" : "active");
    }
    status = server_cli_table_print(&t);
    server_cli_table_release(&t);
  }
  server_db_user_list_release(&l);
  return status;
}

int server_cmd_user(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"require-approval", required_argument, NULL, 'a'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *state = cli->state_dir;
  int json = 0, approval = -1, c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      state = optarg;
      break;
    case 'j':
      json = 1;
      break;
    case 'a':
      if (strcmp(optarg, "yes") == 0)
        approval = 1;
      else if (strcmp(optarg, "no") == 0)
        approval = 0;
      else
        return server_cli_usage("user", "set", "--require-approval yes or no, not '%s'", optarg);
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
  int want = strcmp(sub, "list") == 0 ? 1 : 2;
  if (nargs != want)
    return nargs < want ? server_cli_usage("user", sub, "NAME is missing")
                        : server_cli_usage("user", sub, "unexpected argument '%s'", argv[argc - 1]);
  if (approval >= 0 && strcmp(sub, "set") != 0)
    return server_cli_usage("user", sub, "--require-approval is an option of user set");
  struct server_db *db = NULL;
  int status = server_cli_open_db(state, &db);
  if (status)
    return status;
  const char *name = argv[optind + 1];
  if (strcmp(sub, "add") == 0)
    status = user_add(db, name, json);
  else if (strcmp(sub, "list") == 0)
    status = user_list(db, json);
  else if (strcmp(sub, "set") == 0)
    status = user_set(db, name, approval);
  else
    status = user_remove(db, state, name);
  server_db_close(db);
  return status;
}
