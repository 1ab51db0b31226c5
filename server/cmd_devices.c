/* cordon-server devices [--user U] [--json]: the paired devices (docs/DESIGN.md
 * section 2). Names and platforms come from the devices: printed escaped.
 * cordon-server device label DEVICE [KEY=VALUE...] [--remove KEY]...: the
 * operator's labels of a device, which dispatch --where matches. Both work
 * on the database, whether the daemon runs or not; whether a device is
 * online is the running daemon's answer, and with no daemon it is unknown
 * (JSON null), never the database's last word. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/cli.h"
#include "server/db.h"

static const char *device_state_name(enum server_db_device_state s) {
  return s == SERVER_DB_DEVICE_ACTIVE    ? "active"
         : s == SERVER_DB_DEVICE_PENDING ? "pending"
                                         : "revoked";
}

static json_t *device_json(const struct server_db_device *d, const json_t *live) {
  return json_pack("{s:s, s:s, s:s, s:s?, s:s?, s:o, s:o, s:s, s:o}", "id", d->id, "name", d->name,
                   "owner", d->owner, "platform", d->platform[0] ? d->platform : NULL, "best_level",
                   d->has_level ? sandbox_level_name(d->best_level) : NULL, "online",
                   server_cli_online_json(live, d->id), "last_seen",
                   server_cli_json_time(d->last_seen), "state", device_state_name(d->state),
                   "labels", server_db_labels_to_json(&d->labels));
}

static void print_table(const struct server_db_device_list *l, const json_t *live) {
  printf("%-32s  %-20s %-12s %-8s %-9s %-7s %-20s %-7s %s\n", "ID", "NAME", "OWNER", "PLATFORM",
         "LEVEL", "ONLINE", "LAST SEEN", "STATE", "LABELS");
  for (size_t i = 0; i < l->count; i++) {
    const struct server_db_device *d = &l->items[i];
    char name[4 * SERVER_DB_NAME_MAX + 1], platform[4 * SERVER_DB_PLATFORM_MAX + 1], seen[64];
    server_cli_escape(d->name, name, sizeof(name));
    server_cli_escape(d->platform[0] ? d->platform : "-", platform, sizeof(platform));
    server_cli_format_time(d->last_seen, "never", seen, sizeof(seen));
    const char *level = d->has_level ? sandbox_level_name(d->best_level) : "-";
    char labels[SERVER_DB_LABELS_MAX * (2 * SERVER_DB_LABEL_MAX + 2) + 1];
    server_db_labels_format(&d->labels, labels, sizeof(labels));
    printf("%-32s  %-20s %-12s %-8s %-9s %-7s %-20s %-7s %s\n", d->id, name, d->owner, platform,
           level ? level : "-", server_cli_online_text(live, d->id), seen,
           device_state_name(d->state), labels[0] ? labels : "-");
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
      return server_cli_help("devices", NULL);
    default:
      return server_cli_bad_option("devices", NULL, argv);
    }
  }
  if (optind != argc)
    return server_cli_usage("devices", NULL, "unexpected argument '%s'", argv[optind]);
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

static int print_labels(const struct server_db_labels *l, int json) {
  if (json)
    return server_cli_print_json(server_db_labels_to_json(l), 0);
  for (size_t i = 0; i < l->count; i++)
    printf("%s=%s\n", l->items[i].key, l->items[i].value);
  return fflush(stdout) == 0 ? 0 : server_cli_failf(-EIO, "cannot write to stdout");
}

/* Open the database and find the DEVICE an operator named (cli.h). On
 * failure the error is printed, nothing is left open, and the exit status
 * returned. */
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
  struct server_db *db = NULL;
  struct server_db_device d;
  int status = open_device(state, args[0], user, &db, &d);
  if (status)
    return status;
  struct server_db_labels after;
  int err = server_db_device_label(db, d.id, set, n_set, remove, n_remove, &after, &diag);
  server_db_device_release(&d);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  return print_labels(&after, json);
}

/* device rename DEVICE NAME */
static int device_rename(const char *state, const char *user, char **args, size_t nargs) {
  if (nargs != 2)
    return server_cli_usage("device", "rename",
                            nargs < 2 ? "DEVICE and NAME are needed" : "one NAME expected");
  struct server_db *db = NULL;
  struct server_db_device d;
  int status = open_device(state, args[0], user, &db, &d);
  if (status)
    return status;
  struct cordon_diag diag = {{0}};
  int err = server_db_device_rename(db, d.id, args[1], &diag);
  server_db_close(db);
  if (err) {
    server_db_device_release(&d);
    return err == -EPERM ? server_cli_fail(CORDON_E_USAGE, &diag) : server_cli_db_fail(err, &diag);
  }
  char old[4 * SERVER_DB_NAME_MAX + 1], name[4 * SERVER_DB_NAME_MAX + 1];
  server_cli_escape(d.name, old, sizeof(old));
  server_cli_escape(args[1], name, sizeof(name));
  fprintf(stderr, "%s: device %s (owner %s) renamed from %s to %s\n", SERVER_PROG, d.id, d.owner,
          old, name);
  server_db_device_release(&d);
  return 0;
}

#define DEVICE_SHOW_RECENT 10

static json_t *jobs_json(const struct server_db_job_list *l, const json_t *live) {
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < l->count; i++)
    if (json_array_append_new(arr, server_cli_job_summary_json(&l->items[i], live)) < 0) {
      json_decref(arr);
      arr = NULL;
    }
  return arr;
}

static void print_jobs(const char *title, const struct server_db_job_list *l) {
  printf("%s:%s\n", title, l->count ? "" : " none");
  for (size_t i = 0; i < l->count; i++) {
    const struct server_db_job *j = &l->items[i];
    char created[64], error[SERVER_DB_CODE_MAX + 32], pkg[2 * SERVER_DB_NAME_MAX + 2];
    char pkg_text[4 * sizeof(pkg)];
    server_cli_format_time(j->created, "-", created, sizeof(created));
    server_cli_job_error(j, error, sizeof(error));
    server_cli_job_package(j, pkg, sizeof(pkg));
    server_cli_escape(pkg, pkg_text, sizeof(pkg_text));
    printf("  %-32s  %-9s %-24s %-20s %s\n", j->id, server_db_job_state_name(j->state), pkg_text,
           created, error);
  }
}

/* device show DEVICE [--json]: everything known about one device. */
static int device_show(const char *state, const char *user, char **args, size_t nargs, int json) {
  if (nargs != 1)
    return server_cli_usage("device", "show", nargs ? "one DEVICE expected" : "DEVICE is missing");
  struct server_db *db = NULL;
  struct server_db_device d;
  int status = open_device(state, args[0], user, &db, &d);
  if (status)
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_job_list running = {0}, recent = {0};
  struct server_db_job_filter f = {.device_id = d.id, .limit = DEVICE_SHOW_RECENT};
  int err = server_db_job_list_active_on_device(db, d.id, &running, &diag);
  if (!err)
    err = server_db_job_list_filtered(db, &f, &recent, &diag);
  server_db_close(db);
  if (err) {
    server_db_device_release(&d);
    server_db_job_list_release(&running);
    return server_cli_db_fail(err, &diag);
  }
  json_t *live = NULL;
  char why[600];
  if (server_cli_live_sessions(state, &live, why, sizeof(why)) < 0)
    live = NULL;
  json_t *facts = d.facts_json ? json_loads(d.facts_json, 0, NULL) : NULL;
  if (!json_is_object(facts)) {
    json_decref(facts);
    facts = json_object();
  }
  if (json) {
    json_t *o = device_json(&d, live);
    if (o &&
        (json_object_set_new(o, "downgrade_reason",
                             d.downgrade_reason[0] ? json_string(d.downgrade_reason)
                                                   : json_null()) ||
         json_object_set_new(o, "max_jobs", json_integer(d.max_jobs)) ||
         json_object_set_new(o, "paired", server_cli_json_time(d.created)) ||
         json_object_set_new(o, "address", d.address[0] ? json_string(d.address) : json_null()) ||
         json_object_set_new(o, "facts", json_incref(facts)) ||
         json_object_set_new(o, "running_jobs", jobs_json(&running, live)) ||
         json_object_set_new(o, "recent_jobs", jobs_json(&recent, live)))) {
      json_decref(o);
      o = NULL;
    }
    status = server_cli_print_json(o, 0);
  } else {
    char name[4 * SERVER_DB_NAME_MAX + 1], platform[4 * SERVER_DB_PLATFORM_MAX + 1];
    char seen[64], paired[64], online[700];
    char labels[SERVER_DB_LABELS_MAX * (2 * SERVER_DB_LABEL_MAX + 2) + 1];
    server_cli_escape(d.name, name, sizeof(name));
    server_cli_escape(d.platform[0] ? d.platform : "-", platform, sizeof(platform));
    server_cli_format_time(d.last_seen, "never", seen, sizeof(seen));
    server_cli_format_time(d.created, "-", paired, sizeof(paired));
    server_db_labels_format(&d.labels, labels, sizeof(labels));
    if (live)
      snprintf(online, sizeof(online), "%s", server_cli_online_text(live, d.id));
    else
      snprintf(online, sizeof(online), "unknown (%s)", why);
    const char *level = d.has_level ? sandbox_level_name(d.best_level) : NULL;
    printf("id:         %s\nname:       %s\nowner:      %s\nstate:      %s\nonline:     %s\n"
           "platform:   %s\nlevel:      %s%s%s%s\nmax jobs:   %d\nlabels:     %s\n"
           "paired:     %s\nlast seen:  %s\naddress:    %s\nfacts:%s\n",
           d.id, name, d.owner, device_state_name(d.state), online, platform, level ? level : "-",
           d.downgrade_reason[0] ? " (downgraded: " : "", d.downgrade_reason,
           d.downgrade_reason[0] ? ")" : "", d.max_jobs, labels[0] ? labels : "-", paired, seen,
           d.address[0] ? d.address : "-", json_object_size(facts) ? "" : " none");
    const char *k;
    json_t *v;
    json_object_foreach(facts, k, v) {
      char key[256], val[1024];
      server_cli_escape(k, key, sizeof(key));
      server_cli_escape(json_is_string(v) ? json_string_value(v) : "?", val, sizeof(val));
      printf("  %-20s %s\n", key, val);
    }
    print_jobs("running jobs", &running);
    print_jobs("recent jobs", &recent);
    status = fflush(stdout) == 0 ? 0 : server_cli_failf(-EIO, "cannot write to stdout");
  }
  json_decref(facts);
  json_decref(live);
  server_db_job_list_release(&running);
  server_db_job_list_release(&recent);
  server_db_device_release(&d);
  return status;
}

/* device approve DEVICE | device reject DEVICE */
static int device_decide(const char *state, const char *user, const char *sub, char **args,
                         size_t nargs) {
  if (nargs != 1)
    return server_cli_usage("device", sub, nargs ? "one DEVICE expected" : "DEVICE is missing");
  bool approve = strcmp(sub, "approve") == 0;
  struct server_db *db = NULL;
  struct server_db_device d;
  int status = open_device(state, args[0], user, &db, &d);
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
  char name[4 * SERVER_DB_NAME_MAX + 1], id[CORDON_ID_HEX_SIZE];
  server_cli_escape(d.name, name, sizeof(name));
  snprintf(id, sizeof(id), "%s", d.id);
  if (!err)
    fprintf(stderr, "%s: device %s (%s, owner %s) %s\n", SERVER_PROG, d.id, name, d.owner,
            approve ? "approved: it gets jobs from now on" : "rejected: revoked for good");
  server_db_device_release(&d);
  if (err)
    return server_cli_db_fail(err, &diag);
  return approve ? 0 : server_cli_close_session(state, id);
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
