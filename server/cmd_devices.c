/* cordon-server devices [--user U] [--json]: the paired devices (docs/DESIGN.md
 * section 2). Names and platforms come from the devices: printed escaped.
 * Whether a device is online is the running daemon's answer; with no
 * daemon it is unknown (JSON null), never the database's last word. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>

#include "server/cli.h"
#include "server/db.h"

static const char devices_usage[] =
    "usage: cordon-server devices [--user USER] [--json] [--state DIR]";

static const char *device_state_name(enum server_db_device_state s) {
  return s == SERVER_DB_DEVICE_ACTIVE ? "active" : "revoked";
}

static json_t *device_json(const struct server_db_device *d, const json_t *live) {
  return json_pack("{s:s, s:s, s:s, s:s?, s:s?, s:o, s:o, s:s}", "id", d->id, "name", d->name,
                   "owner", d->owner, "platform", d->platform[0] ? d->platform : NULL, "best_level",
                   d->has_level ? sandbox_level_name(d->best_level) : NULL, "online",
                   server_cli_online_json(live, d->id), "last_seen",
                   server_cli_json_time(d->last_seen), "state", device_state_name(d->state));
}

static void print_table(const struct server_db_device_list *l, const json_t *live) {
  printf("%-32s  %-20s %-12s %-8s %-9s %-7s %-20s %s\n", "ID", "NAME", "OWNER", "PLATFORM", "LEVEL",
         "ONLINE", "LAST SEEN", "STATE");
  for (size_t i = 0; i < l->count; i++) {
    const struct server_db_device *d = &l->items[i];
    char name[4 * SERVER_DB_NAME_MAX + 1], platform[4 * SERVER_DB_PLATFORM_MAX + 1], seen[64];
    server_cli_escape(d->name, name, sizeof(name));
    server_cli_escape(d->platform[0] ? d->platform : "-", platform, sizeof(platform));
    server_cli_format_time(d->last_seen, "never", seen, sizeof(seen));
    const char *level = d->has_level ? sandbox_level_name(d->best_level) : "-";
    printf("%-32s  %-20s %-12s %-8s %-9s %-7s %-20s %s\n", d->id, name, d->owner, platform,
           level ? level : "-", server_cli_online_text(live, d->id), seen,
           device_state_name(d->state));
  }
}

int server_cmd_devices(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                       {"user", required_argument, NULL, 'u'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *state = cli->state_dir, *user = NULL;
  int json = 0, c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      state = optarg;
      break;
    case 'u':
      user = optarg;
      break;
    case 'j':
      json = 1;
      break;
    case 'h':
      printf("%s\n", devices_usage);
      return 0;
    default:
      return server_cli_failf(CORDON_E_USAGE, "%s", devices_usage);
    }
  }
  if (optind != argc)
    return server_cli_failf(CORDON_E_USAGE, "%s", devices_usage);
  struct server_db *db = NULL;
  int status = server_cli_open_db(state, &db);
  if (status)
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_user u = {0};
  struct server_db_device_list l = {0};
  int err = user ? server_db_user_get_by_name(db, user, &u, &diag) : 0;
  if (!err)
    err = server_db_device_list(db, user ? u.id : 0, &l, &diag);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  json_t *live = NULL;
  char why[600];
  if (server_cli_live_sessions(state, &live, why, sizeof(why)) < 0)
    live = NULL;
  if (json) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < l.count; i++)
      if (json_array_append_new(arr, device_json(&l.items[i], live)) < 0) {
        json_decref(arr);
        arr = NULL;
      }
    status = server_cli_print_json(arr, 0);
  } else {
    print_table(&l, live);
  }
  if (!live && !json)
    fprintf(stderr, "%s: online: unknown (%s)\n", SERVER_PROG, why);
  json_decref(live);
  server_db_device_list_release(&l);
  return status;
}
