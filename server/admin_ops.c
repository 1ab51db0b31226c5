/* The admin socket's protocol (server/admin_ops.h): the tables expanded,
 * requests checked against them, the reply shapes. */
#include "server/admin_ops.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

struct admin_arg_desc {
  const char *key;
  enum admin_type type;
};

static const struct admin_arg_desc args[] = {
#define ADMIN_ARG_DESC_(id, key, type) [ADMIN_ARG_##id] = {key, type},
    ADMIN_ARGS(ADMIN_ARG_DESC_)
#undef ADMIN_ARG_DESC_
};

struct admin_op_desc {
  const char *name;
  unsigned required, optional; /* bits of enum admin_arg */
  const char *usage;
};

static const struct admin_op_desc ops[] = {
#define ADMIN_OP_DESC_(id, name, handler, required, optional, usage)                               \
  [ADMIN_OP_##id] = {name, required, optional, usage},
    ADMIN_OPS(ADMIN_OP_DESC_)
#undef ADMIN_OP_DESC_
};

_Static_assert(ADMIN_ARG_COUNT_ <= 32, "an op's args are bits of an unsigned");

const char *admin_op_name(enum admin_op op) {
  return (unsigned)op < ADMIN_OP_COUNT_ ? ops[op].name : NULL;
}

const char *admin_arg_key(enum admin_arg arg) {
  return (unsigned)arg < ADMIN_ARG_COUNT_ ? args[arg].key : NULL;
}

json_t *admin_request_new(enum admin_op op) {
  const char *name = admin_op_name(op);
  return name ? json_pack("{s:s}", "op", name) : NULL;
}

int admin_request_set(json_t *req, enum admin_arg arg, json_t *value) {
  if (!value)
    return -ENOMEM;
  const char *key = admin_arg_key(arg);
  if (!key) {
    json_decref(value);
    return -EINVAL;
  }
  return json_object_set_new(req, key, value) == 0 ? 0 : -ENOMEM;
}

static bool has_type(const json_t *v, enum admin_type type) {
  switch (type) {
  case ADMIN_STRING:
    return json_is_string(v);
  case ADMIN_ARRAY:
    return json_is_array(v);
  case ADMIN_BOOL:
    return json_is_boolean(v);
  case ADMIN_INT:
    return json_is_integer(v);
  }
  return false;
}

static long arg_index(const char *key) {
  for (size_t a = 0; a < ADMIN_ARG_COUNT_; a++)
    if (strcmp(key, args[a].key) == 0)
      return (long)a;
  return -1;
}

int admin_request_check(const json_t *req, enum admin_op *out_op, struct cordon_diag *diag) {
  const char *name = json_string_value(json_object_get(req, "op"));
  if (!name)
    return cordon_diag_set(diag, CORDON_E_USAGE, "missing op");
  for (size_t op = 0; op < ADMIN_OP_COUNT_; op++) {
    if (strcmp(name, ops[op].name) != 0)
      continue;
    unsigned takes = ops[op].required | ops[op].optional;
    json_t *v;
    for (size_t a = 0; a < ADMIN_ARG_COUNT_; a++) {
      unsigned bit = 1u << a;
      v = json_object_get(req, args[a].key);
      bool ok = v ? !(takes & bit) || has_type(v, args[a].type) : !(ops[op].required & bit);
      if (!ok)
        return cordon_diag_set(diag, CORDON_E_USAGE, "%s",
                               ops[op].usage ? ops[op].usage : "bad arguments");
    }
    const char *key;
    json_object_foreach((json_t *)req, key, v) {
      long a = arg_index(key);
      if (strcmp(key, "op") != 0 && (a < 0 || !(takes & (1u << a))))
        return cordon_diag_set(diag, CORDON_E_USAGE, "unknown key '%.64s' for op %s", key, name);
    }
    *out_op = (enum admin_op)op;
    return 0;
  }
  return cordon_diag_set(diag, CORDON_E_USAGE, "unknown op");
}

int admin_request_parse(const char *line, size_t len, json_t **out_req, enum admin_op *out_op,
                        unsigned long long *out_bytes, struct cordon_diag *diag) {
  json_error_t je;
  json_t *req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
  if (!req || !json_is_object(req)) {
    json_decref(req);
    return cordon_diag_set(diag, CORDON_E_USAGE, "request is not a JSON object");
  }
  /* the size first: a body too large is refused whatever else is wrong */
  json_t *b = json_object_get(req, admin_arg_key(ADMIN_ARG_BYTES));
  unsigned long long bytes = 0;
  if (json_is_integer(b)) {
    json_int_t n = json_integer_value(b);
    if (n < 0 || (unsigned long long)n > ADMIN_BODY_MAX) {
      json_decref(req);
      return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE,
                             "bytes: 0 to %llu (the package is too large)", ADMIN_BODY_MAX);
    }
    bytes = (unsigned long long)n;
  }
  enum admin_op op;
  int r = admin_request_check(req, &op, diag);
  if (r < 0) {
    json_decref(req);
    *out_bytes = bytes; /* still to be read past */
    return r;
  }
  *out_req = req;
  *out_op = op;
  *out_bytes = bytes;
  return 0;
}

json_t *admin_request_get(const json_t *req, enum admin_arg arg) {
  const char *key = admin_arg_key(arg);
  return key ? json_object_get(req, key) : NULL;
}

const char *admin_request_string(const json_t *req, enum admin_arg arg) {
  return json_string_value(admin_request_get(req, arg));
}

bool admin_request_flag(const json_t *req, enum admin_arg arg) {
  return json_is_true(admin_request_get(req, arg));
}

long long admin_request_int(const json_t *req, enum admin_arg arg, long long dflt) {
  json_t *v = admin_request_get(req, arg);
  return json_is_integer(v) ? (long long)json_integer_value(v) : dflt;
}

json_t *admin_reply_ok(void) {
  return json_pack("{s:b}", ADMIN_REPLY_OK, 1);
}

json_t *admin_reply_error(int err, const char *message) {
  return json_pack("{s:b, s:s, s:s}", ADMIN_REPLY_OK, 0, ADMIN_REPLY_CODE, cordon_err_name(err),
                   ADMIN_REPLY_MESSAGE, message);
}

bool admin_reply_is_ok(const json_t *reply) {
  return json_is_true(json_object_get(reply, ADMIN_REPLY_OK));
}

int admin_reply_err(const json_t *reply, const char **out_message) {
  const char *code = json_string_value(json_object_get(reply, ADMIN_REPLY_CODE));
  int err = code ? cordon_err_from_name(code) : 0;
  if (!err && code && strcmp(code, cordon_err_name(-EIO)) == 0)
    err = -EIO; /* what every negated errno is called on the wire */
  *out_message = json_string_value(json_object_get(reply, ADMIN_REPLY_MESSAGE));
  return err ? err : CORDON_E_INTERNAL;
}
