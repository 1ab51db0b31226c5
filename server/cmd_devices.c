/* cordon-server devices [--user U] [--json]: the paired devices (docs/DESIGN.md
 * section 2). Names and platforms come from the devices: printed escaped.
 * cordon-server device label DEVICE [KEY=VALUE...] [--remove KEY]...: the
 * operator's labels of a device, which dispatch --where matches. Both ask
 * the running daemon (admin ops devices and label); with no daemon they
 * work on the database, and whether a device is online is then unknown
 * (JSON null), never the database's last word. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/admin_client.h"
#include "server/admin_ops.h"
#include "server/admin_view.h"
#include "server/cli.h"
#include "server/db.h"

static const char devices_usage[] =
    "usage: cordon-server devices [--user USER] [--json] [--state DIR]";
static const char device_usage[] = "usage: cordon-server device label DEVICE [KEY=VALUE...] "
                                   "[--remove KEY]... [--json] [--state DIR]";

/* A labels object as the database formats it: "k=v,k=v". */
static void labels_text(const json_t *labels, char *buf, size_t size) {
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

/* The devices --json objects (server/admin_view.h) as a table. */
static void print_table(const json_t *devices) {
  printf("%-32s  %-20s %-12s %-8s %-9s %-7s %-20s %-7s %s\n", "ID", "NAME", "OWNER", "PLATFORM",
         "LEVEL", "ONLINE", "LAST SEEN", "STATE", "LABELS");
  size_t i;
  json_t *d;
  json_array_foreach(devices, i, d) {
    char name[4 * SERVER_DB_NAME_MAX + 1], platform[4 * SERVER_DB_PLATFORM_MAX + 1];
    server_cli_escape(server_cli_str(d, "name", ""), name, sizeof(name));
    server_cli_escape(server_cli_str(d, "platform", "-"), platform, sizeof(platform));
    char labels[SERVER_DB_LABELS_MAX * (2 * SERVER_DB_LABEL_MAX + 2) + 1];
    labels_text(json_object_get(d, "labels"), labels, sizeof(labels));
    printf("%-32s  %-20s %-12s %-8s %-9s %-7s %-20s %-7s %s\n", server_cli_str(d, "id", "?"), name,
           server_cli_str(d, "owner", "?"), platform, server_cli_str(d, "best_level", "-"),
           server_cli_online_word(json_object_get(d, "online")),
           server_cli_str(d, "last_seen", "never"), server_cli_str(d, "state", "?"),
           labels[0] ? labels : "-");
  }
}

/* The devices from the running daemon, or (none running) from the
 * database with online unknown: 0 and *out_list, or an exit status. */
static int devices_get(const char *state, const char *user, json_t **out_list, char *why,
                       size_t why_size) {
  json_t *req = admin_request_new(ADMIN_OP_DEVICES);
  if (req && user && admin_request_set(req, ADMIN_ARG_USER, json_string(user)) < 0) {
    json_decref(req);
    req = NULL;
  }
  int status = server_cli_ask_for(state, req, ADMIN_REPLY_DEVICES, out_list);
  if (status != -ESRCH)
    return status;
  snprintf(why, why_size, "daemon not running");
  struct server_db *db = NULL;
  if ((status = server_cli_open_db(state, &db)))
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
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < l.count; i++)
    if (json_array_append_new(arr, admin_view_device(&l.items[i], json_null())) < 0) {
      json_decref(arr);
      arr = NULL;
    }
  server_db_device_list_release(&l);
  if (!arr)
    return server_cli_failf(-ENOMEM, "out of memory");
  *out_list = arr;
  return 0;
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
  json_t *list = NULL;
  char why[600] = "";
  int status = devices_get(state, user, &list, why, sizeof(why));
  if (status)
    return status;
  if (json) {
    status = server_cli_print_json(list, 0);
  } else {
    print_table(list);
    json_decref(list);
    if (why[0])
      fprintf(stderr, "%s: online: unknown (%s)\n", SERVER_PROG, why);
  }
  return status;
}

static int print_labels(const struct server_db_labels *l, int json) {
  if (json)
    return server_cli_print_json(server_db_labels_to_json(l), 0);
  for (size_t i = 0; i < l->count; i++)
    printf("%s=%s\n", l->items[i].key, l->items[i].value);
  return fflush(stdout) == 0 ? 0 : server_cli_failf(-EIO, "cannot write to stdout");
}

int server_cmd_device(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                       {"remove", required_argument, NULL, 'r'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *state = cli->state_dir;
  const char *remove[SERVER_DB_LABELS_MAX];
  size_t n_remove = 0;
  int json = 0, c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      state = optarg;
      break;
    case 'r':
      if (n_remove == SERVER_DB_LABELS_MAX)
        return server_cli_failf(CORDON_E_USAGE, "--remove: at most %d keys", SERVER_DB_LABELS_MAX);
      if (!server_db_label_key_valid(optarg))
        return server_cli_failf(CORDON_E_USAGE,
                                "--remove '%s': a label key is 1..63 of [a-z0-9._-] starting "
                                "with a letter or digit",
                                optarg);
      remove[n_remove++] = optarg;
      break;
    case 'j':
      json = 1;
      break;
    case 'h':
      printf("%s\n", device_usage);
      return 0;
    default:
      return server_cli_failf(CORDON_E_USAGE, "%s", device_usage);
    }
  }
  /* getopt permutes: "label", DEVICE, then the labels */
  if (argc - optind < 2 || strcmp(argv[optind], "label") != 0)
    return server_cli_failf(CORDON_E_USAGE, "%s", device_usage);
  const char *id = argv[optind + 1];
  size_t n_set = (size_t)(argc - optind - 2);
  if (n_set > SERVER_DB_LABELS_MAX)
    return server_cli_failf(CORDON_E_LIMIT, "a device has at most %d labels", SERVER_DB_LABELS_MAX);
  struct server_db_label set[SERVER_DB_LABELS_MAX];
  struct cordon_diag diag = {{0}};
  for (size_t i = 0; i < n_set; i++) {
    const char *text = argv[optind + 2 + i];
    if (server_db_label_parse(text, &set[i], &diag) < 0)
      return server_cli_fail(CORDON_E_USAGE, &diag);
    for (size_t k = 0; k < i; k++)
      if (strcmp(set[k].key, set[i].key) == 0)
        return server_cli_failf(CORDON_E_USAGE, "label %s given twice", set[i].key);
    for (size_t k = 0; k < n_remove; k++)
      if (strcmp(remove[k], set[i].key) == 0)
        return server_cli_failf(CORDON_E_USAGE, "label %s both set and removed", set[i].key);
  }
  /* the running daemon changes them, or (none running) the database */
  json_t *req = admin_request_new(ADMIN_OP_LABEL), *sets = json_array(), *rms = json_array();
  for (size_t i = 0; sets && i < n_set; i++)
    json_array_append_new(sets, json_string(argv[optind + 2 + i]));
  for (size_t i = 0; rms && i < n_remove; i++)
    json_array_append_new(rms, json_string(remove[i]));
  int r = req ? admin_request_set(req, ADMIN_ARG_DEVICE, json_string(id)) : -ENOMEM;
  if (r == 0)
    r = admin_request_set(req, ADMIN_ARG_SET, sets);
  else
    json_decref(sets);
  if (r == 0)
    r = admin_request_set(req, ADMIN_ARG_REMOVE, rms);
  else
    json_decref(rms);
  if (r < 0) {
    json_decref(req);
    req = NULL;
  }
  json_t *reply = NULL;
  int status = server_cli_ask(state, req, &reply);
  if (status == 0) {
    json_t *labels = json_object_get(reply, ADMIN_REPLY_LABELS);
    if (json) {
      status = server_cli_print_json(json_incref(labels), 0);
    } else {
      const char *k;
      json_t *v;
      json_object_foreach(labels, k, v) printf("%s=%s\n", k, json_string_value(v));
      status = fflush(stdout) == 0 ? 0 : server_cli_failf(-EIO, "cannot write to stdout");
    }
    json_decref(reply);
    return status;
  }
  if (status != -ESRCH)
    return status;
  struct server_db *db = NULL;
  if ((status = server_cli_open_db(state, &db)))
    return status;
  struct server_db_labels after;
  int err = server_db_device_label(db, id, set, n_set, remove, n_remove, &after, &diag);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  return print_labels(&after, json);
}
