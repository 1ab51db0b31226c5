/* cordon-server keys rotate [--ticket] [--publisher] | retire KEY_ID |
 * list [--json]: the server's ticket and publisher keys (server/keys.h).
 * rotate and retire commit STATE/keys.json, then tell a running daemon
 * with SIGHUP (its pid is in STATE/daemon.lock, which it holds), which
 * reloads its keys and announces them to every connected agent; agents
 * that are offline get the announcements when they next connect. On a
 * state whose database is PostgreSQL (a cluster's), they also write the
 * new key files, sealed under the cluster's Noise key, into the database
 * (server/keysync.h), where every other server's daemon picks them up;
 * and they refuse to start from keys older than the database's. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/cli.h"
#include "server/db.h"
#include "server/keys.h"
#include "server/keysync.h"
#include "server/lock.h"

/* SIGHUP to the daemon holding STATE/daemon.lock: 1 told, 0 none runs. */
static int tell_daemon(const char *state) {
  char path[4096], buf[32] = "";
  snprintf(path, sizeof(path), "%s/%s", state, SERVER_LOCK_FILE);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return 0;
  int told = 0;
  if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
    flock(fd, LOCK_UN); /* nobody holds it: no daemon */
  } else if (errno == EWOULDBLOCK) {
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    long pid = n > 0 ? strtol(buf, NULL, 10) : 0;
    if (pid > 0 && kill((pid_t)pid, SIGHUP) == 0)
      told = 1;
  }
  close(fd);
  return told;
}

static void say_done(const char *state, const char *what, uint64_t serial) {
  int told = tell_daemon(state);
  fprintf(stderr, "%s: %s (announcement %llu); %s\n", SERVER_PROG, what, (unsigned long long)serial,
          told ? "the running daemon announces it to connected agents now, others on connect"
               : "no daemon runs: agents get it when they connect to the next one");
}

/* The database of a cluster's state (STATE/db-url names a PostgreSQL
 * one) into *out; NULL for SQLite's (one server: nothing to share). */
static int cluster_db(const char *state, struct server_db **out, struct cordon_diag *diag) {
  char path[4096];
  struct stat st;
  *out = NULL;
  snprintf(path, sizeof(path), "%s/%s", state, SERVER_DB_URL_FILE);
  if (lstat(path, &st) < 0)
    return 0;
  int r = server_db_open(state, 0, out, diag);
  if (r == 0 && !server_db_is_shared(*out)) {
    server_db_close(*out);
    *out = NULL;
  }
  return r;
}

/* Before a rotation or retirement on a cluster's state: this state's
 * chain must not be older than the database's (the new announcement
 * would not extend the cluster's chain). */
static int cluster_not_behind(const char *state, struct server_db *db, struct cordon_diag *diag) {
  uint64_t row = 0;
  int r = server_db_cluster_keys_serial(db, &row, diag);
  if (r == -ENOENT)
    return 0;
  if (r < 0)
    return r;
  struct server_keyring k;
  if ((r = server_keyring_load(state, &k, diag)) < 0)
    return r;
  size_t own = k.n_chain;
  server_keyring_release(&k);
  if (row > own)
    return cordon_diag_set(
        diag, -EAGAIN,
        "this server's keys (announcement %zu) are older than the cluster's (%llu, in the "
        "database): its daemon installs those within %u s of its start; rotate after that, or "
        "on an up-to-date server",
        own, (unsigned long long)row, KEYSYNC_POLL_MS / 1000);
  return 0;
}

/* After a rotation or retirement on a cluster's state: its key files,
 * sealed, into the database. 0, or 1 when the database holds another
 * server's announcement of that serial or a later one (the chains
 * diverged: said on stderr). A failure to write is a warning: the daemon
 * of this state writes them at its next check. */
static int cluster_publish(const char *state, struct server_db *db, uint64_t serial) {
  char path[4096];
  uint8_t *noise = NULL, *sealed = NULL;
  size_t len = 0;
  uint64_t sealed_serial = 0;
  struct cordon_diag diag = {{0}};
  snprintf(path, sizeof(path), "%s/%s", state, SERVER_NOISE_KEY_FILE);
  int r = keys_read_file(path, KEYFILE_NOISE_SECRET, &noise, &diag);
  if (r == 0)
    r = server_keys_bundle_seal(state, noise, &sealed, &len, &sealed_serial, &diag);
  sodium_free(noise);
  if (r == 0)
    r = server_db_cluster_keys_put(db, sealed_serial, sealed, len, &diag);
  free(sealed);
  if (r == -EEXIST) {
    fprintf(stderr,
            "%s: error: the database already holds a rotation %llu or later made on another "
            "server: this server's keys now differ from the cluster's; see docs/OPERATIONS.md, "
            "\"Rotating keys\"\n",
            SERVER_PROG, (unsigned long long)serial);
    return 1;
  }
  if (r < 0)
    fprintf(stderr,
            "%s: warning: the new keys were not written to the database (%s): this server's "
            "daemon writes them when it next checks (at its start, then every %u s)\n",
            SERVER_PROG, diag.msg, KEYSYNC_POLL_MS / 1000);
  else
    fprintf(stderr,
            "%s: the cluster's other servers install announcement %llu from the database "
            "within %u s\n",
            SERVER_PROG, (unsigned long long)sealed_serial, KEYSYNC_POLL_MS / 1000);
  return 0;
}

/* The options of a keys subcommand (argv[0] is the subcommand): --state
 * for all, --ticket and --publisher for rotate, --json for list; n_args
 * operands. 0 parsed, or the exit status (help printed: 0 through
 * *out_done; usage: 2). */
struct keys_opts {
  const char *state;
  bool ticket, publisher, json;
  char **args;
};

static int parse(int argc, char **argv, bool rotate, bool list, int n_args, struct keys_opts *o,
                 bool *out_done) {
  static const struct option opts[] = {
      {"ticket", no_argument, NULL, 't'}, {"publisher", no_argument, NULL, 'p'},
      {"json", no_argument, NULL, 'j'},   {"state", required_argument, NULL, 's'},
      {"help", no_argument, NULL, 'h'},   {0}};
  const char *sub = argv[0];
  int c;
  optind = 0;
  opterr = 0;
  *out_done = false;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 's') {
      o->state = optarg;
    } else if (c == 'h') {
      server_cli_help("keys", sub);
      *out_done = true;
      return 0;
    } else if (rotate && (c == 't' || c == 'p')) {
      *(c == 't' ? &o->ticket : &o->publisher) = true;
    } else if (list && c == 'j') {
      o->json = true;
    } else {
      *out_done = true;
      return server_cli_bad_option("keys", sub, argv);
    }
  }
  if (argc - optind != n_args) {
    *out_done = true;
    return server_cli_usage("keys", sub,
                            argc - optind < n_args ? "KEY_ID is missing" : "unexpected arguments");
  }
  o->args = argv + optind;
  return 0;
}

static int cmd_rotate(struct keys_opts *o, struct server_db *db) {
  if (!o->ticket && !o->publisher)
    o->ticket = o->publisher = true;
  uint64_t serial = 0;
  char tid[33], pid[33];
  struct cordon_diag diag = {{0}};
  int r = db ? cluster_not_behind(o->state, db, &diag) : 0;
  if (r == 0)
    r = server_keys_rotate(o->state, o->ticket, o->publisher, &serial, tid, pid, &diag);
  if (r < 0)
    return server_cli_fail(r, &diag);
  if (tid[0])
    printf("ticket %s\n", tid);
  if (pid[0])
    printf("publisher %s\n", pid);
  fflush(stdout);
  say_done(o->state, "keys rotated", serial);
  return db ? cluster_publish(o->state, db, serial) : 0;
}

static int cmd_retire(struct keys_opts *o, struct server_db *db) {
  uint64_t serial = 0;
  char id[33];
  struct cordon_diag diag = {{0}};
  int r = db ? cluster_not_behind(o->state, db, &diag) : 0;
  if (r == 0)
    r = server_keys_retire(o->state, o->args[0], &serial, id, &diag);
  if (r < 0)
    return server_cli_fail(r, &diag);
  char what[80];
  snprintf(what, sizeof(what), "publisher key %s retired", id);
  say_done(o->state, what, serial);
  return db ? cluster_publish(o->state, db, serial) : 0;
}

static int cmd_list(struct keys_opts *o) {
  json_t *list = NULL;
  struct cordon_diag diag = {{0}};
  int r = server_keys_list(o->state, &list, &diag);
  if (r < 0)
    return server_cli_fail(r, &diag);
  if (o->json) {
    char *s = json_dumps(list, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s)
      printf("%s\n", s);
    free(s);
  } else {
    struct server_cli_table t;
    server_cli_table_init(&t, 5, "ID", "ROLE", "CREATED", "RETIRED", "CURRENT");
    size_t i;
    json_t *k;
    json_array_foreach(list, i, k) {
      const char *ret = json_string_value(json_object_get(k, "retired"));
      server_cli_table_row(&t, json_string_value(json_object_get(k, "id")),
                           json_string_value(json_object_get(k, "role")),
                           json_string_value(json_object_get(k, "created")), ret ? ret : "-",
                           json_is_true(json_object_get(k, "current")) ? "yes" : "");
    }
    (void)server_cli_table_print(&t);
    server_cli_table_release(&t);
  }
  fflush(stdout);
  json_decref(list);
  return 0;
}

int server_cmd_keys(const struct server_cli *cli, int argc, char **argv) {
  if (argc < 2)
    return server_cli_usage("keys", NULL, "a keys subcommand is missing");
  const char *sub = argv[1];
  if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0) {
    server_cli_help("keys", NULL);
    return 0;
  }
  if (strcmp(sub, "export-public") == 0)
    return server_cmd_keys_export_public(cli, argc - 1, argv + 1);
  bool rotate = strcmp(sub, "rotate") == 0, retire = strcmp(sub, "retire") == 0,
       list = strcmp(sub, "list") == 0;
  if (!rotate && !retire && !list)
    return server_cli_usage("keys", NULL, "unknown keys subcommand '%s'", sub);
  struct keys_opts o = {.state = cli->state_dir};
  bool done;
  int st = parse(argc - 1, argv + 1, rotate, list, retire ? 1 : 0, &o, &done);
  if (done)
    return st;
  if (list)
    return cmd_list(&o);
  struct server_db *db = NULL;
  struct cordon_diag diag = {{0}};
  int r = cluster_db(o.state, &db, &diag);
  if (r < 0)
    return server_cli_fail(r, &diag);
  st = rotate ? cmd_rotate(&o, db) : cmd_retire(&o, db);
  server_db_close(db);
  return st;
}
