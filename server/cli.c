#include "server/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/admin_client.h"
#include "server/admin_ops.h"

int server_cli_exit_status(int err) {
  switch (err) {
  case 0:
    return 0;
  case CORDON_E_USAGE:
  case CORDON_E_MANIFEST_INVALID:
  case CORDON_E_PACKAGE_CORRUPT:
  case CORDON_E_PACKAGE_TOO_LARGE:
  case CORDON_E_CONFIG_INVALID:
    return 2;
  default:
    return 1;
  }
}

int server_cli_fail(int err, const struct cordon_diag *diag) {
  const char *msg = diag && diag->msg[0] ? diag->msg : cordon_err_message(err);
  fprintf(stderr, "%s: %s: %s\n", SERVER_PROG, cordon_err_name(err), msg);
  return server_cli_exit_status(err);
}

int server_cli_failf(int err, const char *fmt, ...) {
  struct cordon_diag d;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d.msg, sizeof(d.msg), fmt, ap);
  va_end(ap);
  return server_cli_fail(err, &d);
}

int server_cli_db_fail(int err, const struct cordon_diag *diag) {
  if (err == -EINVAL)
    err = CORDON_E_USAGE;
  return server_cli_fail(err, diag);
}

int server_cli_open_db(const char *state_dir, struct server_db **out_db) {
  struct cordon_diag diag = {{0}};
  struct server_db *db = NULL;
  int err = server_db_open(state_dir, 0, &db, &diag);
  if (err)
    return server_cli_fail(err, &diag);
  *out_db = db;
  return 0;
}

void server_cli_format_time(int64_t t, const char *never, char *buf, size_t size) {
  struct tm tm;
  time_t tt = (time_t)t;
  if (t == 0 || !gmtime_r(&tt, &tm) || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf(buf, size, "%s", t == 0 ? never : "?");
}

json_t *server_cli_json_time(int64_t t) {
  if (t == 0)
    return json_null();
  char buf[64];
  server_cli_format_time(t, "", buf, sizeof(buf));
  return json_string(buf);
}

void server_cli_escape(const char *s, char *buf, size_t size) {
  size_t o = 0;
  if (size == 0)
    return;
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    char tmp[8];
    size_t n;
    if (*p < 0x20 || *p == 0x7f) {
      n = (size_t)snprintf(tmp, sizeof(tmp), "\\x%02x", *p);
    } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
      n = (size_t)snprintf(tmp, sizeof(tmp), "\\x%02x", p[1]);
      p++;
    } else if (*p == '\\') {
      n = 2;
      memcpy(tmp, "\\\\", 2);
    } else {
      tmp[0] = (char)*p;
      n = 1;
    }
    if (o + n >= size)
      break;
    memcpy(buf + o, tmp, n);
    o += n;
  }
  buf[o] = '\0';
}

int server_cli_parse_duration(const char *s, int64_t *out_seconds) {
  /* a number alone (seconds), or number-unit pairs: 90s, 10m, 1h30m, 1d12h */
  if (!s || !*s)
    return -EINVAL;
  int64_t total = 0;
  const char *p = s;
  while (*p) {
    if (*p < '0' || *p > '9')
      return -EINVAL;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || end == p)
      return -EINVAL;
    int64_t mult;
    switch (*end) {
    case '\0':
      if (p != s) /* "1h30": a bare number only alone */
        return -EINVAL;
      mult = 1;
      break;
    case 's':
      mult = 1;
      break;
    case 'm':
      mult = 60;
      break;
    case 'h':
      mult = 3600;
      break;
    case 'd':
      mult = 86400;
      break;
    default:
      return -EINVAL;
    }
    if (v > (INT64_MAX - total) / mult)
      return -EINVAL;
    total += (int64_t)v * mult;
    p = *end ? end + 1 : end;
  }
  *out_seconds = total;
  return 0;
}

int server_cli_print_json(json_t *j, int ascii) {
  if (!j)
    return server_cli_failf(-ENOMEM, "out of memory");
  int rc =
      json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | (ascii ? JSON_ENSURE_ASCII : 0));
  json_decref(j);
  if (rc != 0 || fputc('\n', stdout) == EOF || fflush(stdout) != 0)
    return server_cli_failf(-EIO, "cannot write to stdout");
  return 0;
}

int server_cli_ask(const char *state_dir, json_t *req, json_t **out_reply) {
  json_t *reply = NULL;
  struct cordon_diag diag = {{0}};
  int r =
      req ? admin_call_within(state_dir, req, SERVER_CLI_API_TIMEOUT_MS, &reply, &diag) : -ENOMEM;
  json_decref(req);
  if (r == -ENOENT || r == -ECONNREFUSED)
    return -ESRCH;
  if (r < 0)
    return server_cli_fail(r, &diag);
  if (!admin_reply_is_ok(reply)) {
    const char *msg;
    int err = admin_reply_err(reply, &msg);
    int status = server_cli_failf(err, "%s", msg ? msg : cordon_err_message(err));
    json_decref(reply);
    return status;
  }
  *out_reply = reply;
  return 0;
}

int server_cli_ask_for(const char *state_dir, json_t *req, const char *key, json_t **out_value) {
  json_t *reply = NULL;
  int status = server_cli_ask(state_dir, req, &reply);
  if (status)
    return status;
  json_t *v = json_incref(json_object_get(reply, key));
  json_decref(reply);
  if (!v)
    return server_cli_failf(CORDON_E_PROTOCOL, "the daemon's reply has no %s", key);
  *out_value = v;
  return 0;
}

const char *server_cli_str(const json_t *o, const char *key, const char *dflt) {
  const char *v = json_string_value(json_object_get(o, key));
  return v ? v : dflt;
}

const char *server_cli_online_word(const json_t *online) {
  return json_is_true(online) ? "online" : json_is_false(online) ? "offline" : "unknown";
}

int server_cli_live_sessions(const char *state_dir, json_t **out_sessions, char *why,
                             size_t why_size) {
  json_t *req = admin_request_new(ADMIN_OP_SESSIONS), *reply = NULL;
  struct cordon_diag diag = {{0}};
  int r =
      req ? admin_call_within(state_dir, req, SERVER_CLI_LIVE_TIMEOUT_MS, &reply, &diag) : -ENOMEM;
  json_decref(req);
  if (r == -ENOENT || r == -ECONNREFUSED) {
    snprintf(why, why_size, "daemon not running");
    return -ESRCH;
  }
  if (r < 0) {
    snprintf(why, why_size, "the daemon did not answer: %s",
             diag.msg[0] ? diag.msg : cordon_err_message(r));
    return r;
  }
  json_t *list = json_object_get(reply, ADMIN_REPLY_SESSIONS);
  if (!admin_reply_is_ok(reply) || !json_is_array(list)) {
    const char *msg = NULL;
    if (!admin_reply_is_ok(reply))
      (void)admin_reply_err(reply, &msg);
    snprintf(why, why_size, "the daemon did not answer: %s", msg ? msg : "no session list");
    json_decref(reply);
    return CORDON_E_PROTOCOL;
  }
  *out_sessions = json_incref(list);
  json_decref(reply);
  return 0;
}

static bool is_online(const json_t *sessions, const char *device_id) {
  size_t i;
  json_t *s;
  json_array_foreach(sessions, i, s) {
    const char *d = json_string_value(json_object_get(s, "device"));
    if (d && device_id && strcmp(d, device_id) == 0)
      return true;
  }
  return false;
}

json_t *server_cli_online_json(const json_t *sessions, const char *device_id) {
  return sessions ? json_boolean(is_online(sessions, device_id)) : json_null();
}

const char *server_cli_online_text(const json_t *sessions, const char *device_id) {
  return sessions ? is_online(sessions, device_id) ? "online" : "offline" : "unknown";
}
