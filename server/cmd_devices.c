/* cordon-server devices [--user U] [--json]: the paired devices (docs/DESIGN.md
 * section 2). cordon-server device show|label|rename|approve|reject DEVICE
 * ...: one device (DEVICE: its id, name or a unique id prefix, with --user
 * when names clash). Each asks the running daemon (admin ops devices,
 * device, label, rename, approve, reject), which resolves DEVICE; with no
 * daemon it works on the database with the same objects
 * (server/admin_view.h), and whether a device is online is then unknown
 * (JSON null), never the database's last word. The text views are
 * rendered from those objects; names and platforms come from the devices:
 * printed escaped. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/admin_ops.h"
#include "server/admin_view.h"
#include "server/cli.h"
#include "server/db.h"

#define NOT_RUNNING_WHY "daemon not running"

static int print_table(const json_t *devices) {
  struct server_cli_table t;
  server_cli_table_init(&t, 9, "ID", "NAME", "OWNER", "PLATFORM", "LEVEL", "ONLINE", "LAST SEEN",
                        "STATE", "LABELS");
  size_t i;
  json_t *d;
  json_array_foreach(devices, i, d) {
    char name[4 * SERVER_DB_NAME_MAX + 1], platform[4 * SERVER_DB_PLATFORM_MAX + 1];
    char labels[SERVER_DB_LABELS_MAX * (2 * SERVER_DB_LABEL_MAX + 2) + 1];
    server_cli_escape(server_cli_str(d, "name", ""), name, sizeof(name));
    server_cli_escape(server_cli_str(d, "platform", "-"), platform, sizeof(platform));
    server_cli_labels_text(json_object_get(d, "labels"), labels, sizeof(labels));
    char owner[4 * SERVER_DB_NAME_MAX + 1];
    server_cli_escape(server_cli_str(d, "owner", "?"), owner, sizeof(owner));
    server_cli_table_row(&t, server_cli_str(d, "id", "?"), name, owner, platform,
                         server_cli_str(d, "best_level", "-"),
                         server_cli_online_word(json_object_get(d, "online")),
                         server_cli_str(d, "last_seen", "never"), server_cli_str(d, "state", "?"),
                         labels[0] ? labels : "-");
  }
  int status = server_cli_table_print(&t);
  server_cli_table_release(&t);
  return status;
}

/* A request of op on DEVICE (and user); NULL when out of memory. */
static json_t *device_request(enum admin_op op, const char *device, const char *user) {
  json_t *req = admin_request_new(op);
  int r = req ? admin_request_set(req, ADMIN_ARG_DEVICE, json_string(device)) : -ENOMEM;
  if (r == 0 && user)
    r = admin_request_set(req, ADMIN_ARG_USER, json_string(user));
  if (r < 0) {
    json_decref(req);
    return NULL;
  }
  return req;
}

/* The devices from the running daemon (*out_live true), or (none running)
 * from the database with online null: 0 and *out_list, or the exit status. */
static int devices_get(const char *state, const char *user, json_t **out_list, bool *out_live) {
  json_t *req = admin_request_new(ADMIN_OP_DEVICES);
  if (req && user && admin_request_set(req, ADMIN_ARG_USER, json_string(user)) < 0) {
    json_decref(req);
    req = NULL;
  }
  struct server_db *db = NULL;
  int status = server_cli_ask_or_open(state, req, ADMIN_REPLY_DEVICES, out_list, &db);
  *out_live = !db;
  if (status || !db)
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
  json_t *arr = admin_view_devices(&l, NULL, NULL);
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
      return server_cli_help("devices", NULL);
    default:
      return server_cli_bad_option("devices", NULL, argv);
    }
  }
  if (optind != argc)
    return server_cli_usage("devices", NULL, "unexpected argument '%s'", argv[optind]);
  json_t *list = NULL;
  bool live = false;
  int status = devices_get(state, user, &list, &live);
  if (status)
    return status;
  if (json)
    return server_cli_print_json(list, 0);
  status = print_table(list);
  json_decref(list);
  if (!live)
    fprintf(stderr, "%s: online: unknown (%s)\n", SERVER_PROG, NOT_RUNNING_WHY);
  return status;
}

static int print_labels(const json_t *labels, int json) {
  if (json)
    return server_cli_print_json(json_incref((json_t *)labels), 0);
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)labels, k, v) printf("%s=%s\n", k, json_string_value(v));
  return fflush(stdout) == 0 ? 0 : server_cli_failf(-EIO, "cannot write to stdout");
}

/* Open the database and find the DEVICE an operator named (cli.h), when
 * no daemon runs. On failure the error is printed, nothing is left open,
 * and the exit status returned. */
static int open_device(const char *state, const char *text, const char *user,
                       struct server_db **out_db, struct server_db_device *out_dev) {
  struct server_db *db = NULL;
  int status = server_cli_open_db(state, &db);
  if (status)
    return status;
  if ((status = server_cli_device_resolve(db, text, user, out_dev))) {
    server_db_close(db);
    return status;
  }
  *out_db = db;
  return 0;
}

/* device label DEVICE [KEY=VALUE...] [--remove KEY]... */
static int device_label(const char *state, const char *user, char **args, size_t nargs,
                        const char *const *remove, size_t n_remove, int json) {
  if (nargs < 1)
    return server_cli_usage("device", "label", "DEVICE is missing");
  size_t n_set = nargs - 1;
  if (n_set > SERVER_DB_LABELS_MAX)
    return server_cli_failf(CORDON_E_LIMIT, "a device has at most %d labels", SERVER_DB_LABELS_MAX);
  struct server_db_label set[SERVER_DB_LABELS_MAX];
  struct cordon_diag diag = {{0}};
  for (size_t i = 0; i < n_set; i++) {
    const char *text = args[1 + i];
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
  json_t *req = device_request(ADMIN_OP_LABEL, args[0], user);
  json_t *sets = json_array(), *rms = json_array();
  for (size_t i = 0; sets && i < n_set; i++)
    json_array_append_new(sets, json_string(args[1 + i]));
  for (size_t i = 0; rms && i < n_remove; i++)
    json_array_append_new(rms, json_string(remove[i]));
  int r = req ? admin_request_set(req, ADMIN_ARG_SET, sets) : (json_decref(sets), -ENOMEM);
  if (r == 0)
    r = admin_request_set(req, ADMIN_ARG_REMOVE, rms);
  else
    json_decref(rms);
  if (r < 0) {
    json_decref(req);
    req = NULL;
  }
  json_t *labels = NULL;
  int status = server_cli_ask_for(state, req, ADMIN_REPLY_LABELS, &labels);
  if (status == 0) {
    status = print_labels(labels, json);
    json_decref(labels);
    return status;
  }
  if (status != -ESRCH)
    return status;
  struct server_db *db = NULL;
  struct server_db_device d;
  if ((status = open_device(state, args[0], user, &db, &d)))
    return status;
  struct server_db_labels after;
  int err = server_db_device_label(db, d.id, set, n_set, remove, n_remove, &after, &diag);
  server_db_device_release(&d);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  labels = server_db_labels_to_json(&after);
  status = print_labels(labels, json);
  json_decref(labels);
  return status;
}

/* device rename DEVICE NAME */
static int device_rename(const char *state, const char *user, char **args, size_t nargs) {
  if (nargs != 2)
    return server_cli_usage("device", "rename",
                            nargs < 2 ? "DEVICE and NAME are needed" : "one NAME expected");
  char old[4 * SERVER_DB_NAME_MAX + 1], name[4 * SERVER_DB_NAME_MAX + 1];
  char id[CORDON_ID_HEX_SIZE], owner[SERVER_DB_NAME_MAX + 1];
  json_t *req = device_request(ADMIN_OP_RENAME, args[0], user), *reply = NULL;
  if (req && admin_request_set(req, ADMIN_ARG_NAME, json_string(args[1])) < 0) {
    json_decref(req);
    req = NULL;
  }
  int status = server_cli_ask(state, req, &reply);
  if (status == 0) {
    json_t *dev = json_object_get(reply, ADMIN_REPLY_DEVICE);
    server_cli_escape(server_cli_str(reply, ADMIN_REPLY_OLD_NAME, ""), old, sizeof(old));
    snprintf(id, sizeof(id), "%s", server_cli_str(dev, "id", "?"));
    snprintf(owner, sizeof(owner), "%s", server_cli_str(dev, "owner", "?"));
    json_decref(reply);
  } else if (status != -ESRCH) {
    return status;
  } else {
    struct server_db *db = NULL;
    struct server_db_device d;
    if ((status = open_device(state, args[0], user, &db, &d)))
      return status;
    struct cordon_diag diag = {{0}};
    int err = server_db_device_rename(db, d.id, args[1], &diag);
    server_db_close(db);
    server_cli_escape(d.name, old, sizeof(old));
    snprintf(id, sizeof(id), "%s", d.id);
    snprintf(owner, sizeof(owner), "%s", d.owner);
    server_db_device_release(&d);
    if (err)
      return err == -EPERM ? server_cli_fail(CORDON_E_USAGE, &diag)
                           : server_cli_db_fail(err, &diag);
  }
  server_cli_escape(args[1], name, sizeof(name));
  fprintf(stderr, "%s: device %s (owner %s) renamed from %s to %s\n", SERVER_PROG, id, owner, old,
          name);
  return 0;
}

static void print_jobs(const char *title, const json_t *jobs) {
  printf("%s:%s\n", title, json_array_size(jobs) ? "" : " none");
  struct server_cli_table t;
  server_cli_table_init(&t, 5, "  ID", "STATE", "PACKAGE", "CREATED", "ERROR");
  size_t i;
  json_t *j;
  json_array_foreach(jobs, i, j) {
    char error[SERVER_DB_CODE_MAX + 32], pkg_text[8 * SERVER_DB_NAME_MAX + 8], id[40];
    server_cli_job_error_text(j, error, sizeof(error));
    server_cli_escape(server_cli_str(j, "package", "-"), pkg_text, sizeof(pkg_text));
    snprintf(id, sizeof(id), "  %s", server_cli_str(j, "id", "?"));
    server_cli_table_row(&t, id, server_cli_str(j, "state", "?"), pkg_text,
                         server_cli_str(j, "created", "-"), error);
  }
  if (json_array_size(jobs))
    (void)server_cli_table_print(&t);
  server_cli_table_release(&t);
}

/* device show DEVICE [--json]: everything known about one device. */
static int device_show(const char *state, const char *user, char **args, size_t nargs, int json) {
  if (nargs != 1)
    return server_cli_usage("device", "show", nargs ? "one DEVICE expected" : "DEVICE is missing");
  json_t *o = NULL;
  int status = server_cli_ask_for(state, device_request(ADMIN_OP_DEVICE, args[0], user),
                                  ADMIN_REPLY_DEVICE, &o);
  bool live = status == 0;
  if (status == -ESRCH) {
    struct server_db *db = NULL;
    struct server_db_device d;
    if ((status = open_device(state, args[0], user, &db, &d)))
      return status;
    struct cordon_diag diag = {{0}};
    int err = admin_view_device_show(db, &d, json_null(), &o, &diag);
    server_db_device_release(&d);
    server_db_close(db);
    if (err)
      return server_cli_db_fail(err, &diag);
  } else if (status) {
    return status;
  }
  if (json)
    return server_cli_print_json(o, 0);
  char name[4 * SERVER_DB_NAME_MAX + 1], platform[4 * SERVER_DB_PLATFORM_MAX + 1], online[64];
  char labels[SERVER_DB_LABELS_MAX * (2 * SERVER_DB_LABEL_MAX + 2) + 1];
  server_cli_escape(server_cli_str(o, "name", ""), name, sizeof(name));
  server_cli_escape(server_cli_str(o, "platform", "-"), platform, sizeof(platform));
  server_cli_labels_text(json_object_get(o, "labels"), labels, sizeof(labels));
  if (live)
    snprintf(online, sizeof(online), "%s", server_cli_online_word(json_object_get(o, "online")));
  else
    snprintf(online, sizeof(online), "unknown (%s)", NOT_RUNNING_WHY);
  const char *why = server_cli_str(o, "downgrade_reason", NULL);
  json_t *facts = json_object_get(o, "facts");
  printf("id:         %s\nname:       %s\nowner:      %s\nstate:      %s\nonline:     %s\n"
         "platform:   %s\nlevel:      %s%s%s%s\nmax jobs:   %lld\nlabels:     %s\n"
         "paired:     %s\nlast seen:  %s\naddress:    %s\nfacts:%s\n",
         server_cli_str(o, "id", "?"), name, server_cli_str(o, "owner", "?"),
         server_cli_str(o, "state", "?"), online, platform, server_cli_str(o, "best_level", "-"),
         why ? " (downgraded: " : "", why ? why : "", why ? ")" : "",
         (long long)json_integer_value(json_object_get(o, "max_jobs")), labels[0] ? labels : "-",
         server_cli_str(o, "paired", "-"), server_cli_str(o, "last_seen", "never"),
         server_cli_str(o, "address", "-"), json_object_size(facts) ? "" : " none");
  const char *k;
  json_t *v;
  json_object_foreach(facts, k, v) {
    char key[256], val[1024];
    server_cli_escape(k, key, sizeof(key));
    server_cli_escape(json_is_string(v) ? json_string_value(v) : "?", val, sizeof(val));
    printf("  %-20s %s\n", key, val);
  }
  print_jobs("running jobs", json_object_get(o, "running_jobs"));
  print_jobs("recent jobs", json_object_get(o, "recent_jobs"));
  json_decref(o);
  return fflush(stdout) == 0 ? 0 : server_cli_failf(-EIO, "cannot write to stdout");
}

/* device approve|reject DEVICE with no daemon: on the database. */
static int decide_db(const char *state, const char *user, bool approve, const char *text) {
  struct server_db *db = NULL;
  struct server_db_device d;
  int status = open_device(state, text, user, &db, &d);
  if (status)
    return status;
  struct cordon_diag diag = {{0}};
  int err = 0;
  if (approve && d.state == SERVER_DB_DEVICE_ACTIVE) { /* idempotent, as revoke is */
    fprintf(stderr, "%s: device %s was already approved\n", SERVER_PROG, d.id);
    server_db_device_release(&d);
    server_db_close(db);
    return 0;
  }
  if (d.state == SERVER_DB_DEVICE_ACTIVE)
    err =
        cordon_diag_set(&diag, CORDON_E_USAGE, "device %s is active, not pending: revoke it", d.id);
  else if (d.state != SERVER_DB_DEVICE_PENDING)
    err = cordon_diag_set(&diag, CORDON_E_NOT_FOUND, "device %s (%s) is revoked, not pending", d.id,
                          d.owner);
  else if (approve)
    err = server_db_device_approve(db, d.id, &diag);
  else
    err = server_db_device_revoke(db, d.id, &diag);
  server_db_close(db);
  char name[4 * SERVER_DB_NAME_MAX + 1];
  server_cli_escape(d.name, name, sizeof(name));
  if (!err)
    fprintf(stderr, "%s: device %s (%s, owner %s) %s\n", SERVER_PROG, d.id, name, d.owner,
            approve ? "approved: it gets jobs from now on" : "rejected: revoked for good");
  server_db_device_release(&d);
  return err ? server_cli_db_fail(err, &diag) : 0;
}

/* device approve DEVICE | device reject DEVICE */
static int device_decide(const char *state, const char *user, const char *sub, char **args,
                         size_t nargs) {
  if (nargs != 1)
    return server_cli_usage("device", sub, nargs ? "one DEVICE expected" : "DEVICE is missing");
  bool approve = strcmp(sub, "approve") == 0;
  json_t *reply = NULL;
  int status = server_cli_ask(
      state, device_request(approve ? ADMIN_OP_APPROVE : ADMIN_OP_REJECT, args[0], user), &reply);
  if (status == -ESRCH)
    return decide_db(state, user, approve, args[0]);
  if (status)
    return status;
  json_t *d = json_object_get(reply, ADMIN_REPLY_DEVICE);
  char name[4 * SERVER_DB_NAME_MAX + 1];
  server_cli_escape(server_cli_str(d, "name", ""), name, sizeof(name));
  if (json_is_true(json_object_get(reply, ADMIN_REPLY_ALREADY)))
    fprintf(stderr, "%s: device %s was already approved\n", SERVER_PROG,
            server_cli_str(d, "id", "?"));
  else
    fprintf(stderr, "%s: device %s (%s, owner %s) %s\n", SERVER_PROG, server_cli_str(d, "id", "?"),
            name, server_cli_str(d, "owner", "?"),
            approve ? "approved: it gets jobs from now on" : "rejected: revoked for good");
  if (json_is_true(json_object_get(reply, ADMIN_REPLY_DISCONNECTED)))
    fprintf(stderr, "%s: its live session was closed\n", SERVER_PROG);
  json_decref(reply);
  return 0;
}

int server_cmd_device(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {
      {"state", required_argument, NULL, 's'}, {"remove", required_argument, NULL, 'r'},
      {"json", no_argument, NULL, 'j'},        {"user", required_argument, NULL, 'u'},
      {"help", no_argument, NULL, 'h'},        {0}};
  const char *state = cli->state_dir, *user = NULL;
  const char *remove[SERVER_DB_LABELS_MAX];
  size_t n_remove = 0;
  int json = 0, c;
  const char *sub0 = argc > 1 && argv[1][0] != '-' ? argv[1] : NULL;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      state = optarg;
      break;
    case 'u':
      user = optarg;
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
      return server_cli_help("device", NULL);
    default:
      return server_cli_bad_option(
          "device",
          sub0 && server_cli_form_find(server_cli_command_find("device"), sub0) ? sub0 : NULL,
          argv);
    }
  }
  /* getopt permutes: the subcommand, then its operands */
  if (argc == optind)
    return server_cli_usage("device", NULL, "a subcommand is needed");
  const char *sub = argv[optind];
  char **args = argv + optind + 1;
  size_t nargs = (size_t)(argc - optind - 1);
  if (n_remove && strcmp(sub, "label") != 0)
    return server_cli_usage("device", sub, "--remove is an option of device label");
  if (strcmp(sub, "label") == 0)
    return device_label(state, user, args, nargs, remove, n_remove, json);
  if (strcmp(sub, "rename") == 0)
    return device_rename(state, user, args, nargs);
  if (strcmp(sub, "show") == 0)
    return device_show(state, user, args, nargs, json);
  if (strcmp(sub, "approve") == 0 || strcmp(sub, "reject") == 0)
    return device_decide(state, user, sub, args, nargs);
  return server_cli_usage("device", NULL, "unknown subcommand '%s'", sub);
}
