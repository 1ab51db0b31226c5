/* cordon-server backup FILE | restore FILE: the state database, copied with
 * SQLite's online backup. backup works while the daemon runs (one
 * consistent snapshot); restore is refused while a daemon holds the state
 * (STATE/daemon.lock, server/lock.h) and holds that lock itself while it
 * replaces the database. Key files and STATE/queue are not in the
 * database (docs/OPERATIONS.md, "Backups"). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "server/cli.h"
#include "server/db.h"
#include "server/lock.h"

static int parse(const char *cmd, int argc, char **argv, const char **state) {
  static const struct option opts[] = {
      {"state", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {0}};
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 's')
      *state = optarg;
    else if (c == 'h')
      return server_cli_help(cmd, NULL) == 0 ? -1 : 2;
    else
      return server_cli_bad_option(cmd, NULL, argv);
  }
  if (argc - optind != 1)
    return server_cli_usage(cmd, NULL, argc == optind ? "FILE is missing" : "one FILE expected");
  return 0;
}

int server_cmd_backup(const struct server_cli *cli, int argc, char **argv) {
  const char *state = cli->state_dir;
  int status = parse("backup", argc, argv, &state);
  if (status)
    return status < 0 ? 0 : status;
  const char *file = argv[optind];
  struct server_db *db = NULL;
  if ((status = server_cli_open_db(state, &db)))
    return status;
  struct cordon_diag diag = {{0}};
  int err = server_db_backup(db, file, &diag);
  server_db_close(db);
  if (err == -EEXIST)
    return server_cli_failf(CORDON_E_ALREADY_EXISTS, "%s exists; a backup never overwrites", file);
  if (err)
    return server_cli_fail(err, &diag);
  fprintf(stderr, "%s: backed up %s/%s to %s (keys and %s/queue are separate files)\n", SERVER_PROG,
          state, SERVER_DB_FILE, file, state);
  return 0;
}

int server_cmd_restore(const struct server_cli *cli, int argc, char **argv) {
  const char *state = cli->state_dir;
  int status = parse("restore", argc, argv, &state);
  if (status)
    return status < 0 ? 0 : status;
  const char *file = argv[optind];
  struct cordon_diag diag = {{0}};
  struct server_lock *lock = NULL;
  int err = server_lock_take(state, &lock, &diag);
  if (err == -EBUSY)
    return server_cli_failf(-EBUSY, "%s; stop the daemon before restoring", diag.msg);
  if (err)
    return server_cli_fail(err, &diag);
  struct server_db *db = NULL;
  if ((status = server_cli_open_db(state, &db))) {
    server_lock_release(lock);
    return status;
  }
  err = server_db_restore(db, file, &diag);
  server_db_close(db);
  server_lock_release(lock);
  if (err)
    return server_cli_fail(err, &diag);
  fprintf(stderr, "%s: restored %s/%s from %s; devices paired after that backup must pair again\n",
          SERVER_PROG, state, SERVER_DB_FILE, file);
  return 0;
}
