/* cordon-server dispatch / cancel: requests to the running daemon. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/admin_client.h"
#include "server/admin_ops.h"
#include "server/cli.h"

static void print_json(json_t *j) {
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (s) {
    puts(s);
    free(s);
  }
  fflush(stdout);
}

/* A daemon error reply: its code and message, and for no_eligible_device
 * each candidate's reason on stderr. */
static int reply_error(json_t *reply) {
  const char *message;
  int err = admin_reply_err(reply, &message);
  json_t *cands = json_object_get(reply, ADMIN_REPLY_CANDIDATES);
  size_t i;
  json_t *c;
  json_array_foreach(cands, i, c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    fprintf(stderr, "  device %s%s%s%s: %s\n", json_string_value(json_object_get(c, "device")),
            name ? " (" : "", name ? name : "", name ? ")" : "",
            json_string_value(json_object_get(c, "reason")));
  }
  return server_cli_failf(err, "%s", message ? message : "failed");
}

int server_cmd_dispatch(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"user", required_argument, NULL, 'u'},
                                       {"device", required_argument, NULL, 'd'},
                                       {"wait", no_argument, NULL, 'w'},
                                       {"state", required_argument, NULL, 's'},
                                       {0}};
  const char *state = cli->state_dir, *user = NULL, *device = NULL;
  bool wait = false;
  int c;
  optind = 0; /* 0: glibc re-initialises its scanner */
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'u':
      user = optarg;
      break;
    case 'd':
      device = optarg;
      break;
    case 'w':
      wait = true;
      break;
    case 's':
      state = optarg;
      break;
    default:
      return server_cli_failf(CORDON_E_USAGE,
                              "dispatch --user U [--device D] FILE.cpkg [--wait] [-- ARGS...]");
    }
  }
  /* getopt permutes: the package is the first operand, the rest are args */
  if (!user || optind >= argc)
    return server_cli_failf(CORDON_E_USAGE,
                            "dispatch --user U [--device D] FILE.cpkg [--wait] [-- ARGS...]");
  char pkg[PATH_MAX];
  if (!realpath(argv[optind], pkg))
    return server_cli_failf(CORDON_E_USAGE, "%s: cannot read the package", argv[optind]);
  json_t *args = json_array();
  for (int i = optind + 1; i < argc; i++)
    json_array_append_new(args, json_string(argv[i]));
  json_t *req = admin_request_new(ADMIN_OP_DISPATCH);
  int r = req ? admin_request_set(req, ADMIN_ARG_ARGS, args) : -ENOMEM;
  if (!req)
    json_decref(args);
  if (r == 0)
    r = admin_request_set(req, ADMIN_ARG_USER, json_string(user));
  if (r == 0 && device)
    r = admin_request_set(req, ADMIN_ARG_DEVICE, json_string(device));
  if (r == 0)
    r = admin_request_set(req, ADMIN_ARG_PACKAGE, json_string(pkg));
  if (r == 0)
    r = admin_request_set(req, ADMIN_ARG_WAIT, json_boolean(wait));
  json_t *reply = NULL;
  struct cordon_diag diag = {{0}};
  if (r == 0)
    r = admin_call(state, req, &reply, &diag);
  json_decref(req);
  if (r < 0)
    return server_cli_fail(r, &diag);
  int rc;
  if (!admin_reply_is_ok(reply)) {
    rc = reply_error(reply);
  } else if (!wait) {
    printf("%s\n", json_string_value(json_object_get(reply, ADMIN_REPLY_JOB_ID)));
    rc = 0;
  } else {
    json_t *job = json_object_get(reply, ADMIN_REPLY_JOB);
    json_t *res = json_object_get(job, "result");
    const char *st = json_string_value(json_object_get(job, "state"));
    if (json_is_object(res)) {
      print_json(res);
      json_t *ec = json_object_get(res, "exit_code");
      json_t *err = json_object_get(res, "error");
      if (json_is_object(err)) {
        rc = server_cli_failf(cordon_err_from_name(json_string_value(json_object_get(err, "code"))),
                              "%s", json_string_value(json_object_get(err, "message")));
      } else {
        rc = json_is_integer(ec) && json_integer_value(ec) == 0 ? 0 : 1;
      }
    } else {
      rc = server_cli_failf(st && strcmp(st, "expired") == 0 ? CORDON_E_DEVICE_LOST
                                                             : CORDON_E_CANCELLED,
                            "job %s ended %s without a result",
                            json_string_value(json_object_get(job, "id")), st ? st : "?");
    }
  }
  json_decref(reply);
  return rc;
}

int server_cmd_cancel(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'}, {0}};
  const char *state = cli->state_dir;
  int c;
  optind = 0; /* 0: glibc re-initialises its scanner */
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == 's')
      state = optarg;
    else
      return server_cli_failf(CORDON_E_USAGE, "cancel JOB");
  }
  if (optind + 1 != argc)
    return server_cli_failf(CORDON_E_USAGE, "cancel JOB");
  json_t *req = admin_request_new(ADMIN_OP_CANCEL);
  int r = req ? admin_request_set(req, ADMIN_ARG_JOB, json_string(argv[optind])) : -ENOMEM;
  json_t *reply = NULL;
  struct cordon_diag diag = {{0}};
  if (r == 0)
    r = admin_call(state, req, &reply, &diag);
  json_decref(req);
  if (r < 0)
    return server_cli_fail(r, &diag);
  int rc = admin_reply_is_ok(reply) ? 0 : reply_error(reply);
  if (rc == 0)
    fprintf(stderr, "cordon-server: job %s cancelled\n", argv[optind]);
  json_decref(reply);
  return rc;
}
