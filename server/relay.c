/* server/relay.h: the relayed events' text. */
#include "server/relay.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define RELAY_FIELDS_MAX 11 /* of the body, the MAC not counted */
#define RELAY_MAC_HEX (2 * RELAY_MAC_LEN)
#define RELAY_KEY_CONTEXT "cordon relay key v1"
#define RELAY_B64_MAX                                                                              \
  (sodium_base64_ENCODED_LEN(RELAY_CHUNK_MAX, sodium_base64_VARIANT_ORIGINAL) - 1)

static const char *const kind_names[] = {
    [EVENT_JOB_STATE] = "state",
    [EVENT_JOB_OUTPUT] = "output",
    [EVENT_DEVICE_ONLINE] = "online",
    [EVENT_DEVICE_OFFLINE] = "offline",
};
#define KIND_COUNT (sizeof(kind_names) / sizeof(kind_names[0]))

/* ---- what a field may hold (both ways) ---- */

static bool is_hex_id(const char *s, size_t n) {
  if (n != CORDON_ID_HEX_LEN)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return true;
}

static bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* a user name: [A-Za-z0-9._-], starting with a letter or digit */
static bool is_user(const char *s, size_t n) {
  if (n == 0 || n > SERVER_DB_NAME_MAX || !is_alnum(s[0]))
    return false;
  for (size_t i = 1; i < n; i++)
    if (!is_alnum(s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
      return false;
  return true;
}

/* an error code or a state's name: [a-z0-9_-] */
static bool is_token(const char *s, size_t n, size_t max) {
  if (n == 0 || n > max)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
          s[i] == '-'))
      return false;
  return true;
}

static bool is_state(const char *s, size_t n) {
  char name[16];
  enum server_db_job_state st;
  if (!is_token(s, n, sizeof(name) - 1))
    return false;
  memcpy(name, s, n);
  name[n] = '\0';
  return server_db_job_state_parse(name, &st) == 0;
}

/* ---- the key and the MAC ---- */

int relay_key_derive(const uint8_t *secret, size_t len, uint8_t out_key[RELAY_KEY_LEN]) {
  if (!secret || len < crypto_generichash_KEYBYTES_MIN || len > crypto_generichash_KEYBYTES_MAX)
    return -EINVAL;
  return crypto_generichash(out_key, RELAY_KEY_LEN, (const unsigned char *)RELAY_KEY_CONTEXT,
                            sizeof(RELAY_KEY_CONTEXT) - 1, secret, len) == 0
             ? 0
             : -EINVAL;
}

static void mac_hex(const uint8_t key[RELAY_KEY_LEN], const char *body, size_t len,
                    char out[RELAY_MAC_HEX + 1]) {
  uint8_t mac[RELAY_MAC_LEN];
  crypto_generichash(mac, sizeof(mac), (const unsigned char *)body, len, key, RELAY_KEY_LEN);
  sodium_bin2hex(out, RELAY_MAC_HEX + 1, mac, sizeof(mac));
}

/* ---- encode ---- */

/* NULL as "-"; false when s does not fit. */
static bool put_opt(char *buf, size_t size, size_t *at, const char *s,
                    bool (*fits)(const char *, size_t)) {
  if (s && !fits(s, strlen(s)))
    return false;
  int n = snprintf(buf + *at, size - *at, " %s", s ? s : "-");
  if (n < 0 || (size_t)n >= size - *at)
    return false;
  *at += (size_t)n;
  return true;
}

static bool fits_hex_id(const char *s, size_t n) {
  return is_hex_id(s, n);
}

static bool fits_code(const char *s, size_t n) {
  return is_token(s, n, SERVER_DB_CODE_MAX);
}

int relay_encode(const uint8_t key[RELAY_KEY_LEN], const char *instance, uint64_t *seq,
                 const struct event *ev, relay_emit_fn emit, void *ctx) {
  if (!key || !instance || !is_hex_id(instance, strlen(instance)) || !ev ||
      (unsigned)ev->kind == 0 || (unsigned)ev->kind >= KIND_COUNT)
    return -EINVAL;
  bool device_event = ev->kind == EVENT_DEVICE_ONLINE || ev->kind == EVENT_DEVICE_OFFLINE;
  if (device_event ? !ev->device_id : (!ev->job_id || !is_hex_id(ev->job_id, strlen(ev->job_id))))
    return -EINVAL;
  if (ev->kind == EVENT_JOB_STATE && (!ev->state || !is_state(ev->state, strlen(ev->state))))
    return -EINVAL;
  if (ev->kind == EVENT_JOB_OUTPUT && ev->stream != EVENT_STDOUT && ev->stream != EVENT_STDERR)
    return -EINVAL;
  if (ev->kind == EVENT_JOB_OUTPUT && ev->len > 0 && !ev->data)
    return -EINVAL;
  size_t chunks =
      ev->kind != EVENT_JOB_OUTPUT ? 1 : (ev->len + RELAY_CHUNK_MAX - 1) / RELAY_CHUNK_MAX;
  struct relay_payload p;
  for (size_t k = 0; k < chunks; k++) {
    const size_t size = sizeof(p.text);
    int n = snprintf(p.text, size, RELAY_VERSION " %s %llu %s", instance,
                     (unsigned long long)(*seq + k), kind_names[ev->kind]);
    if (n < 0 || (size_t)n >= size)
      return -EINVAL;
    size_t at = (size_t)n;
    bool ok;
    switch (ev->kind) {
    case EVENT_JOB_STATE:
      ok = put_opt(p.text, size, &at, ev->job_id, fits_hex_id) &&
           put_opt(p.text, size, &at, ev->state, is_state) &&
           put_opt(p.text, size, &at, ev->device_id, fits_hex_id) &&
           put_opt(p.text, size, &at, ev->user, is_user) &&
           put_opt(p.text, size, &at, ev->code, fits_code);
      break;
    case EVENT_JOB_OUTPUT: {
      size_t from = k * RELAY_CHUNK_MAX;
      size_t len = ev->len - from < RELAY_CHUNK_MAX ? ev->len - from : RELAY_CHUNK_MAX;
      ok = put_opt(p.text, size, &at, ev->job_id, fits_hex_id) &&
           put_opt(p.text, size, &at, ev->device_id, fits_hex_id) &&
           put_opt(p.text, size, &at, ev->user, is_user);
      n = ok ? snprintf(p.text + at, size - at, " %d %llu ", ev->stream == EVENT_STDERR ? 2 : 1,
                        (unsigned long long)(ev->offset + from))
             : -1;
      ok = n > 0 && (size_t)n < size - at &&
           size - at - (size_t)n >= sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
      if (ok) {
        at += (size_t)n;
        sodium_bin2base64(p.text + at, size - at, ev->data + from, len,
                          sodium_base64_VARIANT_ORIGINAL);
        at += strlen(p.text + at);
      }
      break;
    }
    default:
      ok = put_opt(p.text, size, &at, ev->device_id, fits_hex_id) &&
           put_opt(p.text, size, &at, ev->user, is_user);
      break;
    }
    if (!ok || at + 1 + RELAY_MAC_HEX > RELAY_PAYLOAD_MAX)
      return -EINVAL;
    p.text[at++] = ' ';
    mac_hex(key, p.text, at - 1, p.text + at);
    p.len = at + RELAY_MAC_HEX;
    int r = emit(ctx, &p);
    if (r < 0) {
      *seq += k;
      return r;
    }
  }
  *seq += chunks;
  return 0;
}

bool relay_is_from(const char *payload, size_t len, const char *instance) {
  const size_t v = sizeof(RELAY_VERSION) - 1;
  return payload && instance && len > v + 1 + CORDON_ID_HEX_LEN &&
         memcmp(payload, RELAY_VERSION " ", v + 1) == 0 &&
         memcmp(payload + v + 1, instance, CORDON_ID_HEX_LEN) == 0 &&
         payload[v + 1 + CORDON_ID_HEX_LEN] == ' ';
}

/* ---- decode ---- */

struct field {
  const char *p;
  size_t n;
};

/* Fields separated by one space each, none empty; count, or -1. */
static int split(const char *s, size_t len, struct field *f) {
  int count = 0;
  size_t start = 0;
  for (size_t i = 0; i <= len; i++) {
    if (i < len && s[i] != ' ')
      continue;
    if (i == start || count == RELAY_FIELDS_MAX)
      return -1;
    f[count].p = s + start;
    f[count].n = i - start;
    count++;
    start = i + 1;
  }
  return count;
}

static bool is_dash(const struct field *f) {
  return f->n == 1 && f->p[0] == '-';
}

static bool get_u64(const struct field *f, uint64_t *out) {
  if (f->n == 0 || f->n > 20 || (f->n > 1 && f->p[0] == '0'))
    return false;
  uint64_t v = 0;
  for (size_t i = 0; i < f->n; i++) {
    if (f->p[i] < '0' || f->p[i] > '9')
      return false;
    unsigned d = (unsigned)(f->p[i] - '0');
    if (v > (UINT64_MAX - d) / 10)
      return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

static void copy(char *dst, const struct field *f) {
  memcpy(dst, f->p, f->n);
  dst[f->n] = '\0';
}

/* A "-" or an id into dst (*out NULL or dst). */
static bool get_opt_id(const struct field *f, char *dst, const char **out) {
  if (is_dash(f)) {
    *out = NULL;
    return true;
  }
  if (!is_hex_id(f->p, f->n))
    return false;
  copy(dst, f);
  *out = dst;
  return true;
}

static bool get_opt_user(const struct field *f, char *dst, const char **out) {
  if (is_dash(f)) {
    *out = NULL;
    return true;
  }
  if (!is_user(f->p, f->n))
    return false;
  copy(dst, f);
  *out = dst;
  return true;
}

static bool get_base64(const struct field *f, uint8_t *dst, size_t *out_len) {
  if (f->n == 0 || f->n > RELAY_B64_MAX || f->n % 4 != 0)
    return false;
  /* the alphabet checked here: libsodium's decoder is not a validator of
   * bytes above 0x7f */
  size_t pad = f->p[f->n - 1] == '=' ? (f->p[f->n - 2] == '=' ? 2 : 1) : 0;
  for (size_t i = 0; i < f->n - pad; i++)
    if (!is_alnum(f->p[i]) && f->p[i] != '+' && f->p[i] != '/')
      return false;
  size_t len = 0;
  const char *end = NULL;
  if (sodium_base642bin(dst, RELAY_CHUNK_MAX, f->p, f->n, NULL, &len, &end,
                        sodium_base64_VARIANT_ORIGINAL) != 0 ||
      end != f->p + f->n || len == 0)
    return false;
  *out_len = len;
  return true;
}

static int bad(const char **out_why, const char *why) {
  if (out_why)
    *out_why = why;
  return -EINVAL;
}

int relay_decode(const uint8_t key[RELAY_KEY_LEN], const char *payload, size_t len,
                 struct relay_msg *out, const char **out_why) {
  if (!key || !payload || !out)
    return bad(out_why, "no payload");
  if (len > RELAY_PAYLOAD_MAX)
    return bad(out_why, "too long");
  if (len < RELAY_MAC_HEX + 2 || payload[len - RELAY_MAC_HEX - 1] != ' ')
    return bad(out_why, "no MAC");
  size_t body = len - RELAY_MAC_HEX - 1;
  char mac[RELAY_MAC_HEX + 1];
  mac_hex(key, payload, body, mac);
  if (sodium_memcmp(mac, payload + body + 1, RELAY_MAC_HEX) != 0)
    return bad(out_why, "bad MAC (not this cluster's)");
  struct field f[RELAY_FIELDS_MAX];
  int n = split(payload, body, f);
  if (n < 4)
    return bad(out_why, "not fields");
  const size_t v = sizeof(RELAY_VERSION) - 1;
  if (f[0].n != v || memcmp(f[0].p, RELAY_VERSION, v) != 0)
    return bad(out_why, "unknown version");
  memset(&out->ev, 0, sizeof(out->ev));
  if (!is_hex_id(f[1].p, f[1].n))
    return bad(out_why, "bad instance");
  copy(out->instance, &f[1]);
  if (!get_u64(&f[2], &out->seq))
    return bad(out_why, "bad sequence number");
  unsigned kind = 0;
  for (unsigned k = 1; k < KIND_COUNT; k++)
    if (f[3].n == strlen(kind_names[k]) && memcmp(f[3].p, kind_names[k], f[3].n) == 0)
      kind = k;
  struct event *ev = &out->ev;
  ev->kind = (enum event_kind)kind;
  switch (kind) {
  case EVENT_JOB_STATE:
    if (n != 9)
      return bad(out_why, "state: not 9 fields");
    if (!is_hex_id(f[4].p, f[4].n))
      return bad(out_why, "bad job id");
    copy(out->job_id, &f[4]);
    ev->job_id = out->job_id;
    if (!is_state(f[5].p, f[5].n))
      return bad(out_why, "bad state");
    copy(out->state, &f[5]);
    ev->state = out->state;
    if (!get_opt_id(&f[6], out->device_id, &ev->device_id))
      return bad(out_why, "bad device id");
    if (!get_opt_user(&f[7], out->user, &ev->user))
      return bad(out_why, "bad user");
    if (!is_dash(&f[8])) {
      if (!is_token(f[8].p, f[8].n, SERVER_DB_CODE_MAX))
        return bad(out_why, "bad code");
      copy(out->code, &f[8]);
      ev->code = out->code;
    }
    return 0;
  case EVENT_JOB_OUTPUT:
    if (n != 10)
      return bad(out_why, "output: not 10 fields");
    if (!is_hex_id(f[4].p, f[4].n))
      return bad(out_why, "bad job id");
    copy(out->job_id, &f[4]);
    ev->job_id = out->job_id;
    if (!get_opt_id(&f[5], out->device_id, &ev->device_id))
      return bad(out_why, "bad device id");
    if (!get_opt_user(&f[6], out->user, &ev->user))
      return bad(out_why, "bad user");
    if (f[7].n != 1 || (f[7].p[0] != '1' && f[7].p[0] != '2'))
      return bad(out_why, "bad stream");
    ev->stream = f[7].p[0] == '2' ? EVENT_STDERR : EVENT_STDOUT;
    if (!get_u64(&f[8], &ev->offset))
      return bad(out_why, "bad offset");
    if (!get_base64(&f[9], out->data, &ev->len))
      return bad(out_why, "bad data");
    if (ev->offset > UINT64_MAX - ev->len)
      return bad(out_why, "offset past the end");
    ev->data = out->data;
    return 0;
  case EVENT_DEVICE_ONLINE:
  case EVENT_DEVICE_OFFLINE:
    if (n != 6)
      return bad(out_why, "device: not 6 fields");
    if (!is_hex_id(f[4].p, f[4].n))
      return bad(out_why, "bad device id");
    copy(out->device_id, &f[4]);
    ev->device_id = out->device_id;
    if (!get_opt_user(&f[5], out->user, &ev->user))
      return bad(out_why, "bad user");
    return 0;
  default:
    return bad(out_why, "unknown kind");
  }
}
