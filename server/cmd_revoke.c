/* cordon-server revoke DEVICE [--user U]: terminal. A running daemon is
 * asked (admin op revoke): it resolves DEVICE, commits the revocation to
 * the database (it refuses the key at every handshake from then on), then
 * closes the device's live session. With no daemon running the command
 * does the database part itself, which is all there is to do. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>

#include "server/admin_client.h"
#include "server/admin_ops.h"
#include "server/cli.h"
#include "server/db.h"

int server_cli_close_session(const char *state, const char *id) {
  json_t *req = admin_request_new(ADMIN_OP_REVOKE), *reply = NULL;
  struct cordon_diag diag = {{0}};
  int err = req ? admin_request_set(req, ADMIN_ARG_DEVICE, json_string(id)) : -ENOMEM;
  if (err == 0)
    err = admin_call(state, req, &reply, &diag);
  json_decref(req);
  if (err == -ENOENT || err == -ECONNREFUSED)
    return 0; /* no daemon: nothing is connected */
  if (err)
    return server_cli_failf(err,
                            "revoked in the database, but the daemon could not be told to "
                            "close a live session: %s",
                            diag.msg[0] ? diag.msg : cordon_err_message(err));
  int status = 0;
  if (!admin_reply_is_ok(reply)) {
    const char *msg;
    (void)admin_reply_err(reply, &msg);
    status = server_cli_failf(CORDON_E_INTERNAL,
                              "revoked in the database, but the daemon refused to close a live "
                              "session: %s",
                              msg ? msg : "no reason given");
  } else if (json_is_true(json_object_get(reply, ADMIN_REPLY_DISCONNECTED))) {
    fprintf(stderr, "%s: its live session was closed\n", SERVER_PROG);
  }
  json_decref(reply);
  return status;
}

int server_cmd_revoke(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                       {"user", required_argument, NULL, 'u'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *state = cli->state_dir, *user = NULL;
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      state = optarg;
      break;
    case 'u':
      user = optarg;
      break;
    case 'h':
      return server_cli_help("revoke", NULL);
    default:
      return server_cli_bad_option("revoke", NULL, argv);
    }
  }
  if (argc - optind != 1)
    return server_cli_usage("revoke", NULL,
                            argc == optind ? "DEVICE is missing" : "one DEVICE expected");
  json_t *req = admin_request_new(ADMIN_OP_REVOKE), *reply = NULL;
  int r = req ? admin_request_set(req, ADMIN_ARG_DEVICE, json_string(argv[optind])) : -ENOMEM;
  if (r == 0 && user)
    r = admin_request_set(req, ADMIN_ARG_USER, json_string(user));
  if (r < 0) {
    json_decref(req);
    req = NULL;
  }
  int status = server_cli_ask(state, req, &reply);
  if (status == 0) {
    json_t *dev = json_object_get(reply, ADMIN_REPLY_DEVICE);
    char name[4 * SERVER_DB_NAME_MAX + 1];
    server_cli_escape(server_cli_str(dev, "name", ""), name, sizeof(name));
    if (json_is_true(json_object_get(reply, ADMIN_REPLY_ALREADY)))
      fprintf(stderr, "%s: device %s was already revoked\n", SERVER_PROG,
              server_cli_str(dev, "id", "?"));
    else
      fprintf(stderr, "%s: revoked device %s (%s, owner %s)\n", SERVER_PROG,
              server_cli_str(dev, "id", "?"), name, server_cli_str(dev, "owner", "?"));
    if (json_is_true(json_object_get(reply, ADMIN_REPLY_DISCONNECTED)))
      fprintf(stderr, "%s: its live session was closed\n", SERVER_PROG);
    json_decref(reply);
    return 0;
  }
  if (status != -ESRCH)
    return status;
  struct server_db *db = NULL;
  if ((status = server_cli_open_db(state, &db)))
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_device d;
  if ((status = server_cli_device_resolve(db, argv[optind], user, &d))) {
    server_db_close(db);
    return status;
  }
  int err = server_db_device_revoke(db, d.id, &diag);
  if (err == -EALREADY) {
    fprintf(stderr, "%s: device %s was already revoked\n", SERVER_PROG, d.id);
    err = 0;
  } else if (!err) {
    char name[4 * SERVER_DB_NAME_MAX + 1];
    server_cli_escape(d.name, name, sizeof(name));
    fprintf(stderr, "%s: revoked device %s (%s, owner %s)\n", SERVER_PROG, d.id, name, d.owner);
  }
  server_db_device_release(&d);
  server_db_close(db);
  return err ? server_cli_db_fail(err, &diag) : 0;
}
