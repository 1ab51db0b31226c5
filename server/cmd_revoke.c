/* cordon-server revoke DEVICE: terminal. This marks the device revoked in the
 * database, which refuses its key from then on; closing its live session is
 * the daemon's part (see the note below). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>

#include "server/admin.h"
#include "server/cli.h"
#include "server/db.h"

static const char revoke_usage[] = "usage: cordon-server revoke DEVICE [--state DIR]";

int server_cmd_revoke(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {
      {"state", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {0}};
  const char *state = cli->state_dir;
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      state = optarg;
      break;
    case 'h':
      printf("%s\n", revoke_usage);
      return 0;
    default:
      return server_cli_failf(CORDON_E_USAGE, "%s", revoke_usage);
    }
  }
  if (argc - optind != 1)
    return server_cli_failf(CORDON_E_USAGE, "%s", revoke_usage);
  const char *id = argv[optind];
  struct server_db *db = NULL;
  int status = admin_open_db(state, &db);
  if (status)
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_device d;
  int err = server_db_device_get(db, id, &d, &diag);
  if (!err) {
    err = server_db_device_revoke(db, id, &diag);
    if (err == -EALREADY) {
      fprintf(stderr, "%s: device %s was already revoked\n", SERVER_PROG, d.id);
      err = 0;
    } else if (!err) {
      char name[4 * SERVER_DB_NAME_MAX + 1];
      admin_escape(d.name, name, sizeof(name));
      fprintf(stderr, "%s: revoked device %s (%s, owner %s)\n", SERVER_PROG, d.id, name, d.owner);
    }
    server_db_device_release(&d);
  }
  server_db_close(db);
  if (err)
    return admin_fail(err, &diag);
  /* Daemon notification point: the revocation is committed, so a running
   * daemon refuses the key at the next handshake; closing a session that is
   * live right now is done by the daemon when told over its admin socket. */
  return 0;
}
