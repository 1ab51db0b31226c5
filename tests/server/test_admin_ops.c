/* The admin socket's op table (server/admin_ops.h): requests are checked
 * against it the same way on both sides, and the replies keep their
 * shape. */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "server/admin_client.h"
#include "server/admin_ops.h"

static json_t *parse(const char *text) {
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  cr_assert_not_null(j, "%s: %s", text, je.text);
  return j;
}

/* 0 and the op, or the error with its message in msg. */
static int check(const char *text, enum admin_op *op, char *msg, size_t size) {
  json_t *req = parse(text);
  struct cordon_diag diag = {{0}};
  int r = admin_request_check(req, op, &diag);
  snprintf(msg, size, "%s", diag.msg);
  json_decref(req);
  return r;
}

Test(admin_ops, every_op_is_named_once_and_round_trips) {
  for (int op = 0; op < ADMIN_OP_COUNT_; op++) {
    const char *name = admin_op_name((enum admin_op)op);
    cr_assert_not_null(name);
    for (int other = 0; other < op; other++)
      cr_assert_str_neq(name, admin_op_name((enum admin_op)other));
    json_t *req = admin_request_new((enum admin_op)op);
    cr_assert_str_eq(json_string_value(json_object_get(req, "op")), name);
    json_decref(req);
  }
  cr_assert_null(admin_op_name(ADMIN_OP_COUNT_));
  cr_assert_null(admin_arg_key(ADMIN_ARG_COUNT_));
  cr_assert_str_eq(admin_op_name(ADMIN_OP_DISPATCH), "dispatch");
  cr_assert_str_eq(admin_op_name(ADMIN_OP_CANCEL), "cancel");
  cr_assert_str_eq(admin_op_name(ADMIN_OP_REVOKE), "revoke");
  cr_assert_str_eq(admin_op_name(ADMIN_OP_PING), "ping");
}

Test(admin_ops, a_request_built_by_the_client_passes_the_daemons_check) {
  json_t *req = admin_request_new(ADMIN_OP_DISPATCH);
  cr_assert_eq(admin_request_set(req, ADMIN_ARG_USER, json_string("alice")), 0);
  cr_assert_eq(admin_request_set(req, ADMIN_ARG_PACKAGE, json_string("/p.cpkg")), 0);
  cr_assert_eq(admin_request_set(req, ADMIN_ARG_ARGS, json_pack("[s]", "x")), 0);
  cr_assert_eq(admin_request_set(req, ADMIN_ARG_WAIT, json_true()), 0);
  cr_assert_eq(admin_request_set(req, ADMIN_ARG_USER, NULL), -ENOMEM);
  enum admin_op op;
  cr_assert_eq(admin_request_check(req, &op, NULL), 0);
  cr_assert_eq(op, ADMIN_OP_DISPATCH);
  cr_assert_str_eq(admin_request_string(req, ADMIN_ARG_USER), "alice");
  cr_assert_str_eq(admin_request_string(req, ADMIN_ARG_PACKAGE), "/p.cpkg");
  cr_assert_null(admin_request_string(req, ADMIN_ARG_DEVICE));
  cr_assert(json_is_array(admin_request_get(req, ADMIN_ARG_ARGS)));
  cr_assert(admin_request_flag(req, ADMIN_ARG_WAIT));
  cr_assert_not(admin_request_flag(req, ADMIN_ARG_JOB));
  json_decref(req);
}

struct check_case {
  const char *request;
  int err; /* 0: accepted */
  const char *message;
};

Test(admin_ops, requests_that_do_not_fit_get_the_ops_usage_message) {
  static const struct check_case cases[] = {
      {"{}", CORDON_E_USAGE, "missing op"},
      {"{\"op\": 7}", CORDON_E_USAGE, "missing op"},
      {"{\"op\": \"frobnicate\"}", CORDON_E_USAGE, "unknown op"},
      {"{\"op\": \"ping\"}", 0, ""},
      {"{\"op\": \"ping\", \"user\": 1, \"extra\": []}", CORDON_E_USAGE,
       "unknown key 'user' for op ping"}, /* not ping's args: refused */
      {"{\"op\": \"ping\", \"extra\": []}", CORDON_E_USAGE, "unknown key 'extra' for op ping"},
      {"{\"op\": \"hello\", \"versions\": [1]}", 0, ""},
      {"{\"op\": \"hello\"}", CORDON_E_USAGE, "hello needs versions"},
      {"{\"op\": \"dispatch\", \"user\": \"a\", \"bytes\": 10}", 0, ""},
      {"{\"op\": \"dispatch\", \"user\": \"a\", \"bytes\": \"10\"}", CORDON_E_USAGE,
       "dispatch needs user, package and args"},
      {"{\"op\": \"label\", \"device\": \"d\", \"set\": [\"a=b\"], \"remove\": []}", 0, ""},
      {"{\"op\": \"label\", \"device\": \"d\", \"set\": \"a=b\"}", CORDON_E_USAGE,
       "label needs a device, and set and remove are arrays"},
      {"{\"op\": \"jobs\", \"limit\": 5, \"user\": \"a\"}", 0, ""},
      {"{\"op\": \"watch\"}", 0, ""},
      {"{\"op\": \"follow\"}", CORDON_E_USAGE, "follow needs a job"},
      {"{\"op\": \"dispatch\", \"user\": \"a\", \"package\": \"/p\"}", 0, ""},
      {"{\"op\": \"dispatch\", \"user\": \"a\", \"package\": \"/p\", \"args\": [], "
       "\"device\": \"d\", \"wait\": false, \"job\": 3}",
       CORDON_E_USAGE, "unknown key 'job' for op dispatch"},
      {"{\"op\": \"dispatch\", \"package\": \"/p\"}", CORDON_E_USAGE,
       "dispatch needs user, package and args"},
      /* package or bytes: the daemon's handler wants exactly one (test_admin_sock.c) */
      {"{\"op\": \"dispatch\", \"user\": \"a\"}", 0, ""},
      {"{\"op\": \"dispatch\", \"user\": \"a\", \"package\": \"/p\", \"args\": \"x\"}",
       CORDON_E_USAGE, "dispatch needs user, package and args"},
      {"{\"op\": \"dispatch\", \"user\": \"a\", \"package\": \"/p\", \"device\": 5}",
       CORDON_E_USAGE, "dispatch needs user, package and args"},
      {"{\"op\": \"dispatch\", \"user\": \"a\", \"package\": \"/p\", \"wait\": 1}", CORDON_E_USAGE,
       "dispatch needs user, package and args"},
      {"{\"op\": \"cancel\", \"job\": \"j\"}", 0, ""},
      {"{\"op\": \"cancel\"}", CORDON_E_USAGE, "no such job"},
      {"{\"op\": \"cancel\", \"job\": null}", CORDON_E_USAGE, "no such job"},
      {"{\"op\": \"revoke\", \"device\": \"d\"}", 0, ""},
      {"{\"op\": \"revoke\", \"job\": \"d\"}", CORDON_E_USAGE, "revoke needs a device"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    enum admin_op op = ADMIN_OP_COUNT_;
    char msg[sizeof(((struct cordon_diag *)0)->msg)];
    int r = check(cases[i].request, &op, msg, sizeof(msg));
    cr_assert_eq(r, cases[i].err, "%s: %d", cases[i].request, r);
    cr_assert_str_eq(msg, cases[i].message, "%s", cases[i].request);
    if (r == 0) { /* the op named in the request */
      char want[64];
      cr_assert_eq(sscanf(cases[i].request, "{\"op\": \"%63[a-z]\"", want), 1);
      cr_assert_str_eq(admin_op_name(op), want);
    }
  }
}

Test(admin_ops, replies_say_ok_or_carry_a_code_and_a_message) {
  json_t *ok = admin_reply_ok();
  cr_assert(admin_reply_is_ok(ok));
  cr_assert_eq(json_object_size(ok), 1);
  json_decref(ok);

  json_t *e = admin_reply_error(CORDON_E_NO_ELIGIBLE_DEVICE, "no device can run this job");
  cr_assert_not(admin_reply_is_ok(e));
  cr_assert_str_eq(json_string_value(json_object_get(e, "code")), "no_eligible_device");
  const char *message;
  cr_assert_eq(admin_reply_err(e, &message), CORDON_E_NO_ELIGIBLE_DEVICE);
  cr_assert_str_eq(message, "no device can run this job");
  json_decref(e);

  json_t *odd = parse("{\"ok\": false, \"code\": \"not_a_code\"}");
  cr_assert_eq(admin_reply_err(odd, &message), CORDON_E_INTERNAL);
  cr_assert_null(message);
  json_decref(odd);
  odd = parse("{\"ok\": 1}");
  cr_assert_not(admin_reply_is_ok(odd), "only true is ok");
  json_decref(odd);
}

Test(admin_ops, the_client_refuses_a_request_the_table_refuses_before_connecting) {
  json_t *req = admin_request_new(ADMIN_OP_CANCEL); /* no job */
  json_t *reply = NULL;
  struct cordon_diag diag = {{0}};
  /* no daemon and no directory: a connection attempt would be -ENOENT */
  int r = admin_call("/nonexistent/cordon-state", req, &reply, &diag);
  cr_assert_eq(r, CORDON_E_USAGE);
  cr_assert_str_eq(diag.msg, "no such job");
  cr_assert_null(reply);
  json_decref(req);

  req = admin_request_new(ADMIN_OP_PING);
  r = admin_call("/nonexistent/cordon-state", req, &reply, &diag);
  cr_assert_eq(r, -ENOENT);
  cr_assert(strstr(diag.msg, "the daemon is not running"), "%s", diag.msg);
  json_decref(req);
}
