/* cordon-server dispatch / cancel: requests to the running daemon. */
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/admin_client.h"
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
  const char *code = json_string_value(json_object_get(reply, "code"));
  const char *message = json_string_value(json_object_get(reply, "message"));
  json_t *cands = json_object_get(reply, "candidates");
  size_t i;
  json_t *c;
  json_array_foreach(cands, i, c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    fprintf(stderr, "  device %s%s%s%s: %s\n", json_string_value(json_object_get(c, "device")),
            name ? " (" : "", name ? name : "", name ? ")" : "",
            json_string_value(json_object_get(c, "reason")));
  }
  int err = code ? cordon_err_from_name(code) : CORDON_E_INTERNAL;
  return server_cli_failf(err ? err : CORDON_E_INTERNAL, "%s", message ? message : "failed");
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
  json_t *req = json_pack("{s:s, s:s, s:s?, s:s, s:o, s:b}", "op", "dispatch", "user", user,
                          "device", device, "package", pkg, "args", args, "wait", wait);
  json_t *reply;
  struct cordon_diag diag = {{0}};
  int r = admin_call(state, req, &reply, &diag);
  json_decref(req);
  if (r < 0)
    return server_cli_fail(r, &diag);
  int rc;
  if (!json_is_true(json_object_get(reply, "ok"))) {
    rc = reply_error(reply);
  } else if (!wait) {
    printf("%s\n", json_string_value(json_object_get(reply, "job_id")));
    rc = 0;
  } else {
    json_t *job = json_object_get(reply, "job");
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
  json_t *req = json_pack("{s:s, s:s}", "op", "cancel", "job", argv[optind]);
  json_t *reply;
  struct cordon_diag diag = {{0}};
  int r = admin_call(state, req, &reply, &diag);
  json_decref(req);
  if (r < 0)
    return server_cli_fail(r, &diag);
  int rc = json_is_true(json_object_get(reply, "ok")) ? 0 : reply_error(reply);
  if (rc == 0)
    fprintf(stderr, "cordon-server: job %s cancelled\n", argv[optind]);
  json_decref(reply);
  return rc;
}
