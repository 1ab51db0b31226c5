#include "core/result.h"

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const limit_names[] = {"none",  "cgroup",        "rlimit", "job",
                                          "tmpfs", "pid-namespace", "pgroup"};

const char *limit_mech_name(enum limit_mech m) {
  if ((unsigned)m >= sizeof(limit_names) / sizeof(limit_names[0]))
    return "none";
  return limit_names[m];
}

const char *kill_scope_name(enum kill_scope k) {
  static const char *const names[] = {NULL,          "pid-namespace", "cgroup",
                                      "descendants", "pgroup",        "job"};
  return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : NULL;
}

void result_buf_append(struct result_buf *b, const uint8_t *data, size_t n, size_t cap) {
  size_t room = cap > b->len ? cap - b->len : 0;
  size_t take = n < room ? n : room;
  if (take) {
    memcpy(b->data + b->len, data, take);
    b->len += take;
  }
  if (take < n)
    b->truncated = true;
}

void job_result_init(struct job_result *r) {
  memset(r, 0, sizeof(*r));
  r->oom_killed = -1;
  r->requested = SANDBOX_LEVEL_ISOLATED;
}

void job_result_release(struct job_result *r) {
  if (!r)
    return;
  free(r->out.data);
  free(r->err.data);
  r->out.data = r->err.data = NULL;
}

/* Replace each byte that does not start a valid UTF-8 sequence with '?':
 * a message may be cut inside a character or carry a non-UTF-8 path, and
 * must still serialise. */
static void utf8_sanitize(char *s) {
  size_t len = strlen(s);
  for (size_t i = 0; i < len;) {
    size_t n = 1;
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x80) {
      n = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
      if (n == 0 || i + n > len || !utf8_valid((const uint8_t *)s + i, n)) {
        s[i++] = '?';
        continue;
      }
    }
    i += n;
  }
}

int job_result_fail(struct job_result *r, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->error_message, sizeof(r->error_message), fmt, ap);
  va_end(ap);
  utf8_sanitize(r->error_message);
  cordon_escape_controls(r->error_message, sizeof(r->error_message));
  r->error = err;
  return err;
}

void job_result_not_run(struct job_result *r) {
  r->ran = r->exited = false;
  r->exit_code = r->signal = 0;
  r->out.len = r->err.len = 0;
  r->out.truncated = r->err.truncated = false;
  r->wall_ms = 0;
  r->timed_out = false;
  r->oom_killed = -1;
  r->orphans_killed = 0;
  r->kill_scope = KILL_SCOPE_NONE;
  r->level_known = false;
  r->level = SANDBOX_LEVEL_NONE;
  r->mechanism[0] = '\0';
  r->downgrade_reason = NULL;
  r->lim_memory = r->lim_processes = r->lim_cpu = r->lim_time = r->lim_disk = LIMIT_MECH_NONE;
}

bool utf8_valid(const uint8_t *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t n;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (len - i <= n)
      return false;
    for (size_t k = 1; k <= n; k++) {
      if ((s[i + k] & 0xc0) != 0x80)
        return false;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n + 1;
  }
  return true;
}

bool result_output_is_text(const uint8_t *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (s[i] < 0x20 && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
      return false;
  return utf8_valid(s, len);
}

/* Output as a string when it is text, else null plus <name>_base64. */
static int put_output(json_t *o, const char *name, const struct result_buf *b) {
  const uint8_t *data = b->data ? b->data : (const uint8_t *)"";
  if (result_output_is_text(data, b->len))
    return json_object_set_new(o, name, json_stringn((const char *)data, b->len));
  size_t cap = sodium_base64_encoded_len(b->len, sodium_base64_VARIANT_ORIGINAL);
  char *enc = malloc(cap);
  if (!enc)
    return -1;
  sodium_bin2base64(enc, cap, data, b->len, sodium_base64_VARIANT_ORIGINAL);
  char key[32];
  snprintf(key, sizeof(key), "%s_base64", name);
  int r = json_object_set_new(o, name, json_null());
  r |= json_object_set_new(o, key, json_stringn_nocheck(enc, cap - 1));
  free(enc);
  return r;
}

int job_result_output_decode(const json_t *result, const char *name, size_t max, uint8_t **out_data,
                             size_t *out_len) {
  char key[32];
  if (!json_is_object(result) || snprintf(key, sizeof(key), "%s_base64", name) >= (int)sizeof(key))
    return -EINVAL;
  const json_t *text = json_object_get(result, name), *b64 = json_object_get(result, key);
  if (!text || (json_is_string(text) && b64))
    return -EINVAL;
  if (json_is_string(text)) {
    size_t n = json_string_length(text);
    if (n > max)
      return -E2BIG;
    uint8_t *d = malloc(n ? n : 1);
    if (!d)
      return -ENOMEM;
    memcpy(d, json_string_value(text), n);
    *out_data = d;
    *out_len = n;
    return 0;
  }
  if (!json_is_null(text))
    return -EINVAL;
  if (!b64)
    return -ENODATA;
  if (!json_is_string(b64))
    return -EINVAL;
  /* the padded form: 4 characters per 3 bytes, the last group padded */
  size_t n = json_string_length(b64);
  if (n % 4 != 0)
    return -EINVAL;
  if (n / 4 > (max + 2) / 3)
    return -E2BIG;
  size_t cap = n / 4 * 3;
  uint8_t *d = malloc(cap ? cap : 1);
  if (!d)
    return -ENOMEM;
  const char *s = json_string_value(b64), *end = NULL;
  size_t len = 0;
  if (sodium_base642bin(d, cap, s, n, NULL, &len, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
      end != s + n) {
    free(d);
    return -EINVAL;
  }
  if (len > max) {
    free(d);
    return -E2BIG;
  }
  *out_data = d;
  *out_len = len;
  return 0;
}

json_t *job_result_to_json(const struct job_result *r) {
  json_t *o = json_object();
  json_t *sb = json_object();
  json_t *lim = json_object();
  if (!o || !sb || !lim)
    goto out_fail;
  int e = 0;
  e |= json_object_set_new(o, "job_id", json_string(r->job_id));
  e |= json_object_set_new(o, "device_id",
                           r->device_id[0] ? json_string(r->device_id) : json_null());
  e |= json_object_set_new(o, "exit_code",
                           r->ran && r->exited ? json_integer(r->exit_code) : json_null());
  e |= json_object_set_new(o, "signal",
                           r->ran && !r->exited ? json_integer(r->signal) : json_null());
  e |= put_output(o, "stdout", &r->out);
  e |= put_output(o, "stderr", &r->err);
  e |= json_object_set_new(o, "stdout_truncated", json_boolean(r->out.truncated));
  e |= json_object_set_new(o, "stderr_truncated", json_boolean(r->err.truncated));
  e |= json_object_set_new(o, "wall_ms", json_integer((json_int_t)r->wall_ms));
  e |= json_object_set_new(o, "timed_out", json_boolean(r->timed_out));
  e |= json_object_set_new(o, "oom_killed",
                           r->oom_killed < 0 ? json_null() : json_boolean(r->oom_killed));
  e |= json_object_set_new(o, "orphans_killed", json_integer(r->orphans_killed));
  e |= json_object_set_new(
      o, "kill_scope",
      kill_scope_name(r->kill_scope) ? json_string(kill_scope_name(r->kill_scope)) : json_null());

  e |= json_object_set_new(sb, "requested", json_string(sandbox_level_name(r->requested)));
  e |= json_object_set_new(
      sb, "level", r->level_known ? json_string(sandbox_level_name(r->level)) : json_null());
  e |= json_object_set_new(sb, "mechanism",
                           r->mechanism[0] ? json_string(r->mechanism) : json_null());
  e |= json_object_set_new(sb, "downgrade_reason",
                           r->downgrade_reason ? json_string(r->downgrade_reason) : json_null());
  e |= json_object_set_new(lim, "memory", json_string(limit_mech_name(r->lim_memory)));
  e |= json_object_set_new(lim, "processes", json_string(limit_mech_name(r->lim_processes)));
  e |= json_object_set_new(lim, "cpu", json_string(limit_mech_name(r->lim_cpu)));
  e |= json_object_set_new(lim, "time", json_string(limit_mech_name(r->lim_time)));
  e |= json_object_set_new(lim, "disk", json_string(limit_mech_name(r->lim_disk)));
  e |= json_object_set_new(sb, "limits", lim);
  lim = NULL;
  e |= json_object_set_new(o, "sandbox", sb);
  sb = NULL;
  if (r->error) {
    json_t *err = json_object();
    if (!err)
      goto out_fail;
    e |= json_object_set_new(err, "code", json_string(cordon_err_name(r->error)));
    e |= json_object_set_new(
        err, "message",
        json_string(r->error_message[0] ? r->error_message : cordon_err_message(r->error)));
    e |= json_object_set_new(o, "error", err);
  } else {
    e |= json_object_set_new(o, "error", json_null());
  }
  if (e)
    goto out_fail;
  return o;
out_fail:
  json_decref(lim);
  json_decref(sb);
  json_decref(o);
  return NULL;
}
