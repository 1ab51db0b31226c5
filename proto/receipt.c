#include "proto/receipt.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "proto/ticket.h"

_Static_assert(RECEIPT_HASH_LEN == MSG_HASH_LEN, "hash sizes");
_Static_assert(RECEIPT_SIG_LEN == MSG_SIG_LEN, "signature sizes");
_Static_assert(RECEIPT_TICKET_LEN == TICKET_BODY_LEN, "ticket size");
_Static_assert(RECEIPT_FILE_MAX < 2048, "a receipt file stays small");

/* Offsets in a version-1 ticket body (proto/ticket.h). */
#define TK_USER_TAG (1 + 2 * CORDON_ID_LEN)
#define TK_INDEX_HASH (1 + 4 * CORDON_ID_LEN)
#define TK_ARGS_HASH (TK_INDEX_HASH + 32)

void receipt_hash(const uint8_t *data, size_t len, uint8_t out[RECEIPT_HASH_LEN]) {
  crypto_generichash(out, RECEIPT_HASH_LEN, data, len, NULL, 0);
}

static void copy_str(char *dst, size_t cap, const char *src, int *err) {
  size_t n = src ? strlen(src) : 0;
  if (n >= cap) {
    *err = -EINVAL;
    n = 0;
  }
  if (n)
    memcpy(dst, src, n);
  dst[n] = '\0';
}

int receipt_from_result(const struct msg_result *m, const uint8_t *ticket, size_t ticket_len,
                        struct receipt *out_receipt) {
  struct receipt r;
  memset(&r, 0, sizeof(r));
  memcpy(r.job_id, m->job_id, CORDON_ID_LEN);
  memcpy(r.device_id, m->device_id, CORDON_ID_LEN);
  if (ticket && ticket_len == RECEIPT_TICKET_LEN && ticket[0] == 1) {
    r.bound = true;
    memcpy(r.user_tag, ticket + TK_USER_TAG, CORDON_ID_LEN);
    memcpy(r.index_hash, ticket + TK_INDEX_HASH, RECEIPT_HASH_LEN);
    memcpy(r.args_hash, ticket + TK_ARGS_HASH, RECEIPT_HASH_LEN);
    receipt_hash(ticket, ticket_len, r.ticket_hash);
  }
  r.started_ms = m->has_started_ms ? m->started_ms : 0;
  r.ended_ms = m->has_ended_ms ? m->ended_ms : 0;
  if (m->has_exit_code) {
    r.end = RECEIPT_END_EXITED;
    r.status = m->exit_code;
  } else if (m->has_signal) {
    r.end = RECEIPT_END_SIGNALLED;
    r.status = m->signal;
  } else {
    r.end = RECEIPT_END_NOT_RUN;
  }
  receipt_hash(m->stdout_buf.data, m->stdout_buf.len, r.stdout_hash);
  receipt_hash(m->stderr_buf.data, m->stderr_buf.len, r.stderr_hash);
  r.stdout_truncated = m->stdout_truncated;
  r.stderr_truncated = m->stderr_truncated;
  r.timed_out = m->timed_out;
  r.requested = (uint8_t)m->sandbox.requested;
  r.level = m->sandbox.has_level ? (uint8_t)m->sandbox.level : RECEIPT_LEVEL_NULL;
  r.limits[0] = (uint8_t)m->sandbox.limits.memory;
  r.limits[1] = (uint8_t)m->sandbox.limits.processes;
  r.limits[2] = (uint8_t)m->sandbox.limits.cpu;
  r.limits[3] = (uint8_t)m->sandbox.limits.time;
  r.limits[4] = (uint8_t)m->sandbox.limits.disk;
  int err = 0;
  copy_str(r.mechanism, sizeof(r.mechanism), m->sandbox.mechanism, &err);
  copy_str(r.downgrade_reason, sizeof(r.downgrade_reason), m->sandbox.downgrade_reason, &err);
  copy_str(r.error_code, sizeof(r.error_code), m->has_error ? m->error.code : NULL, &err);
  if (err)
    return err;
  *out_receipt = r;
  return 0;
}

/* ---- byte writer and reader ---- */

struct wr {
  uint8_t *p;
  size_t cap, n;
  int err;
};

static void put(struct wr *w, const void *data, size_t len) {
  if (w->err)
    return;
  if (len > w->cap - w->n) {
    w->err = -ENOBUFS;
    return;
  }
  memcpy(w->p + w->n, data, len);
  w->n += len;
}

static void put_u8(struct wr *w, unsigned v) {
  uint8_t b = (uint8_t)v;
  put(w, &b, 1);
}

static void put_be(struct wr *w, uint64_t v, unsigned bytes) {
  uint8_t b[8];
  for (unsigned i = 0; i < bytes; i++)
    b[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
  put(w, b, bytes);
}

static void put_str8(struct wr *w, const char *s) {
  size_t n = strlen(s);
  put_u8(w, (unsigned)n);
  put(w, s, n);
}

struct rd {
  const uint8_t *p;
  size_t len, off;
  bool bad;
};

static const uint8_t *take(struct rd *r, size_t n) {
  if (r->bad || n > r->len - r->off) {
    r->bad = true;
    return NULL;
  }
  const uint8_t *at = r->p + r->off;
  r->off += n;
  return at;
}

static void get(struct rd *r, void *out, size_t n) {
  const uint8_t *at = take(r, n);
  if (at)
    memcpy(out, at, n);
  else
    memset(out, 0, n);
}

static unsigned get_u8(struct rd *r) {
  uint8_t b;
  get(r, &b, 1);
  return b;
}

static uint64_t get_be(struct rd *r, unsigned bytes) {
  uint8_t b[8];
  get(r, b, bytes);
  uint64_t v = 0;
  for (unsigned i = 0; i < bytes; i++)
    v = v << 8 | b[i];
  return v;
}

/* A str8 into out (cap bytes with the NUL); max is the field's cap. */
static void get_str8(struct rd *r, char *out, size_t max) {
  size_t n = get_u8(r);
  if (n > max) {
    r->bad = true;
    n = 0;
  }
  get(r, out, n);
  out[r->bad ? 0 : n] = '\0';
}

/* ---- field checks (the same on both sides) ---- */

static bool is_token(const char *s) {
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
      return false;
  return true;
}

static bool is_mechanism(const char *s) {
  static const char *const names[] = {"bwrap",        "seccomp", "landlock", "cgroup", "rlimit",
                                      "appcontainer", "job",     "pgroup",   "none"};
  if (!*s)
    return true; /* null */
  while (*s) {
    size_t n = strcspn(s, "+");
    bool known = false;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !known; i++)
      known = strlen(names[i]) == n && memcmp(names[i], s, n) == 0;
    if (!known)
      return false;
    s += n;
    if (*s == '+' && !*++s)
      return false; /* a trailing '+' */
  }
  return true;
}

static bool all_zero(const uint8_t *p, size_t n) {
  uint8_t acc = 0;
  for (size_t i = 0; i < n; i++)
    acc |= p[i];
  return acc == 0;
}

static bool receipt_valid(const struct receipt *r) {
  if (!r->bound && !(all_zero(r->user_tag, sizeof(r->user_tag)) &&
                     all_zero(r->index_hash, sizeof(r->index_hash)) &&
                     all_zero(r->args_hash, sizeof(r->args_hash)) &&
                     all_zero(r->ticket_hash, sizeof(r->ticket_hash))))
    return false;
  switch (r->end) {
  case RECEIPT_END_EXITED:
    if (r->status < INT32_MIN || r->status > (int64_t)UINT32_MAX)
      return false;
    break;
  case RECEIPT_END_SIGNALLED:
    if (r->status < 1 || r->status > 127)
      return false;
    break;
  case RECEIPT_END_NOT_RUN:
    if (r->status != 0)
      return false;
    break;
  default:
    return false;
  }
  if (r->requested > MSG_LEVEL_ISOLATED ||
      (r->level > MSG_LEVEL_ISOLATED && r->level != RECEIPT_LEVEL_NULL))
    return false;
  for (size_t i = 0; i < sizeof(r->limits); i++)
    if (r->limits[i] > MSG_ENFORCE_PGROUP)
      return false;
  return memchr(r->mechanism, '\0', sizeof(r->mechanism)) &&
         memchr(r->downgrade_reason, '\0', sizeof(r->downgrade_reason)) &&
         memchr(r->error_code, '\0', sizeof(r->error_code)) && is_mechanism(r->mechanism) &&
         is_token(r->downgrade_reason) && is_token(r->error_code);
}

int receipt_encode(const struct receipt *r, uint8_t *out, size_t cap, size_t *out_len) {
  if (!receipt_valid(r))
    return -EINVAL;
  struct wr w = {.p = out, .cap = cap};
  put(&w, RECEIPT_DOMAIN, sizeof(RECEIPT_DOMAIN)); /* with its NUL */
  put_u8(&w, RECEIPT_VERSION);
  put(&w, r->job_id, CORDON_ID_LEN);
  put(&w, r->device_id, CORDON_ID_LEN);
  put_u8(&w, r->bound);
  put(&w, r->user_tag, CORDON_ID_LEN);
  put(&w, r->index_hash, RECEIPT_HASH_LEN);
  put(&w, r->args_hash, RECEIPT_HASH_LEN);
  put(&w, r->ticket_hash, RECEIPT_HASH_LEN);
  put_be(&w, r->started_ms, 8);
  put_be(&w, r->ended_ms, 8);
  put_u8(&w, (unsigned)r->end);
  put_be(&w, (uint64_t)r->status, 8);
  put(&w, r->stdout_hash, RECEIPT_HASH_LEN);
  put_u8(&w, r->stdout_truncated);
  put(&w, r->stderr_hash, RECEIPT_HASH_LEN);
  put_u8(&w, r->stderr_truncated);
  put_u8(&w, r->timed_out);
  put_u8(&w, r->requested);
  put_u8(&w, r->level);
  put(&w, r->limits, sizeof(r->limits));
  put_str8(&w, r->mechanism);
  put_str8(&w, r->downgrade_reason);
  put_str8(&w, r->error_code);
  if (w.err)
    return w.err;
  *out_len = w.n;
  return 0;
}

static bool get_bool(struct rd *r) {
  unsigned v = get_u8(r);
  if (v > 1)
    r->bad = true;
  return v == 1;
}

int receipt_decode(const uint8_t *buf, size_t len, struct receipt *out_receipt,
                   struct cordon_diag *diag) {
  if (len > RECEIPT_MAX)
    return cordon_diag_set(diag, CORDON_E_LIMIT, "the receipt is longer than %d bytes",
                           (int)RECEIPT_MAX);
  struct rd rd = {.p = buf, .len = len};
  struct receipt r;
  memset(&r, 0, sizeof(r));
  const uint8_t *dom = take(&rd, sizeof(RECEIPT_DOMAIN));
  if (!dom || memcmp(dom, RECEIPT_DOMAIN, sizeof(RECEIPT_DOMAIN)) != 0)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "not a receipt (no \"%s\" prefix)",
                           RECEIPT_DOMAIN);
  if (get_u8(&rd) != RECEIPT_VERSION)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "unknown receipt version");
  get(&rd, r.job_id, CORDON_ID_LEN);
  get(&rd, r.device_id, CORDON_ID_LEN);
  r.bound = get_bool(&rd);
  get(&rd, r.user_tag, CORDON_ID_LEN);
  get(&rd, r.index_hash, RECEIPT_HASH_LEN);
  get(&rd, r.args_hash, RECEIPT_HASH_LEN);
  get(&rd, r.ticket_hash, RECEIPT_HASH_LEN);
  r.started_ms = get_be(&rd, 8);
  r.ended_ms = get_be(&rd, 8);
  r.end = (enum receipt_end)get_u8(&rd);
  r.status = (int64_t)get_be(&rd, 8);
  get(&rd, r.stdout_hash, RECEIPT_HASH_LEN);
  r.stdout_truncated = get_bool(&rd);
  get(&rd, r.stderr_hash, RECEIPT_HASH_LEN);
  r.stderr_truncated = get_bool(&rd);
  r.timed_out = get_bool(&rd);
  r.requested = (uint8_t)get_u8(&rd);
  r.level = (uint8_t)get_u8(&rd);
  get(&rd, r.limits, sizeof(r.limits));
  get_str8(&rd, r.mechanism, RECEIPT_MECHANISM_MAX);
  get_str8(&rd, r.downgrade_reason, RECEIPT_CODE_MAX);
  get_str8(&rd, r.error_code, RECEIPT_CODE_MAX);
  if (rd.bad)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "the receipt is cut short or has a bad field");
  if (rd.off != len)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "bytes after the receipt");
  /* a string with a NUL inside would not re-encode to the same bytes */
  if (strlen(r.mechanism) + strlen(r.downgrade_reason) + strlen(r.error_code) + RECEIPT_FIXED_LEN +
              3 !=
          len ||
      !receipt_valid(&r))
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "the receipt has a field out of range");
  *out_receipt = r;
  return 0;
}

void receipt_sign(const uint8_t *buf, size_t len, const uint8_t secret_key[RECEIPT_SECRET_LEN],
                  uint8_t out_sig[RECEIPT_SIG_LEN]) {
  crypto_sign_detached(out_sig, NULL, buf, len, secret_key);
}

int receipt_sign_result(struct msg_result *m, const uint8_t *ticket, size_t ticket_len,
                        const uint8_t secret_key[RECEIPT_SECRET_LEN]) {
  struct receipt r;
  uint8_t buf[RECEIPT_MAX];
  size_t len;
  int err = receipt_from_result(m, ticket, ticket_len, &r);
  if (err == 0)
    err = receipt_encode(&r, buf, sizeof(buf), &len);
  if (err)
    return err;
  m->has_ticket_hash = r.bound;
  if (r.bound)
    memcpy(m->ticket_hash, r.ticket_hash, RECEIPT_HASH_LEN);
  receipt_sign(buf, len, secret_key, m->receipt_sig);
  m->has_receipt_sig = true;
  return 0;
}

int receipt_of_result(const struct msg_result *m, const uint8_t *ticket, size_t ticket_len,
                      uint8_t *out_buf, size_t cap, size_t *out_len, struct cordon_diag *diag) {
  if (!m->has_receipt_sig)
    return cordon_diag_set(diag, CORDON_E_SIGNATURE_INVALID, "the result carries no receipt_sig");
  struct receipt r;
  int err = receipt_from_result(m, m->has_ticket_hash ? ticket : NULL, ticket_len, &r);
  if (err)
    return cordon_diag_set(diag, CORDON_E_SIGNATURE_INVALID,
                           "the result's fields do not fit a receipt");
  if (m->has_ticket_hash &&
      (!r.bound || sodium_memcmp(r.ticket_hash, m->ticket_hash, RECEIPT_HASH_LEN) != 0))
    return cordon_diag_set(diag, CORDON_E_SIGNATURE_INVALID,
                           "the result's ticket_hash is not the ticket this server issued");
  size_t len;
  err = receipt_encode(&r, out_buf, cap, &len);
  if (err)
    return cordon_diag_set(diag, err == -ENOBUFS ? err : CORDON_E_SIGNATURE_INVALID,
                           "the result's fields do not fit a receipt");
  *out_len = len;
  return 0;
}

int receipt_check_sig(const uint8_t *buf, size_t len, const uint8_t sig[RECEIPT_SIG_LEN],
                      const uint8_t public_key[RECEIPT_KEY_LEN], struct cordon_diag *diag) {
  if (crypto_sign_verify_detached(sig, buf, len, public_key) != 0)
    return cordon_diag_set(diag, CORDON_E_SIGNATURE_INVALID,
                           "the receipt signature does not verify with the device's key");
  return 0;
}

int receipt_verify_result(const struct msg_result *m, const uint8_t *ticket, size_t ticket_len,
                          const uint8_t public_key[RECEIPT_KEY_LEN], uint8_t *out_buf, size_t cap,
                          size_t *out_len, struct cordon_diag *diag) {
  size_t len;
  int err = receipt_of_result(m, ticket, ticket_len, out_buf, cap, &len, diag);
  if (!err)
    err = receipt_check_sig(out_buf, len, m->receipt_sig, public_key, diag);
  if (!err)
    *out_len = len;
  return err;
}

/* ---- the server's statement ---- */

static bool user_valid(const char *u) {
  size_t n = strlen(u);
  if (n < 1 || n > RECEIPT_USER_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)u[i] < 0x20 || u[i] == 0x7f)
      return false;
  return true;
}

int receipt_statement_encode(const struct receipt_statement *s, uint8_t *out, size_t cap,
                             size_t *out_len) {
  if (!memchr(s->user, '\0', sizeof(s->user)) || !user_valid(s->user))
    return -EINVAL;
  struct wr w = {.p = out, .cap = cap};
  put(&w, RECEIPT_STATEMENT_DOMAIN, sizeof(RECEIPT_STATEMENT_DOMAIN));
  put_u8(&w, RECEIPT_VERSION);
  put(&w, s->device_id, CORDON_ID_LEN);
  put_str8(&w, s->user);
  put(&w, s->device_key, RECEIPT_KEY_LEN);
  if (w.err)
    return w.err;
  *out_len = w.n;
  return 0;
}

int receipt_statement_decode(const uint8_t *buf, size_t len, struct receipt_statement *out,
                             struct cordon_diag *diag) {
  if (len > RECEIPT_STATEMENT_MAX)
    return cordon_diag_set(diag, CORDON_E_LIMIT, "the statement is longer than %d bytes",
                           (int)RECEIPT_STATEMENT_MAX);
  struct rd rd = {.p = buf, .len = len};
  struct receipt_statement s;
  memset(&s, 0, sizeof(s));
  const uint8_t *dom = take(&rd, sizeof(RECEIPT_STATEMENT_DOMAIN));
  if (!dom || memcmp(dom, RECEIPT_STATEMENT_DOMAIN, sizeof(RECEIPT_STATEMENT_DOMAIN)) != 0)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "not a device key statement");
  if (get_u8(&rd) != RECEIPT_VERSION)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "unknown statement version");
  get(&rd, s.device_id, CORDON_ID_LEN);
  get_str8(&rd, s.user, RECEIPT_USER_MAX);
  get(&rd, s.device_key, RECEIPT_KEY_LEN);
  if (rd.bad || rd.off != len)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "the statement is cut short or too long");
  if (sizeof(RECEIPT_STATEMENT_DOMAIN) + 1 + CORDON_ID_LEN + 1 + strlen(s.user) + RECEIPT_KEY_LEN !=
          len ||
      !user_valid(s.user))
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "the statement's user name is not valid");
  *out = s;
  return 0;
}

/* ---- the file ---- */

int receipt_file_build(const uint8_t *receipt, size_t receipt_len,
                       const uint8_t receipt_sig[RECEIPT_SIG_LEN], const uint8_t *statement,
                       size_t statement_len, const uint8_t statement_sig[RECEIPT_SIG_LEN],
                       uint8_t *out, size_t cap, size_t *out_len) {
  if (receipt_len > RECEIPT_MAX || statement_len > RECEIPT_STATEMENT_MAX)
    return -EINVAL;
  struct wr w = {.p = out, .cap = cap};
  put(&w, RECEIPT_FILE_MAGIC, sizeof(RECEIPT_FILE_MAGIC));
  put_be(&w, receipt_len, 2);
  put(&w, receipt, receipt_len);
  put(&w, receipt_sig, RECEIPT_SIG_LEN);
  put_be(&w, statement_len, 2);
  put(&w, statement, statement_len);
  put(&w, statement_sig, RECEIPT_SIG_LEN);
  if (w.err)
    return w.err;
  *out_len = w.n;
  return 0;
}

int receipt_file_parse(const uint8_t *buf, size_t len, struct receipt_file *out_file,
                       struct cordon_diag *diag) {
  if (len > RECEIPT_FILE_MAX)
    return cordon_diag_set(diag, CORDON_E_LIMIT, "the file is longer than %d bytes",
                           (int)RECEIPT_FILE_MAX);
  struct rd rd = {.p = buf, .len = len};
  struct receipt_file f;
  const uint8_t *magic = take(&rd, sizeof(RECEIPT_FILE_MAGIC));
  if (!magic || memcmp(magic, RECEIPT_FILE_MAGIC, sizeof(RECEIPT_FILE_MAGIC)) != 0)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "not a cordon receipt file");
  f.receipt_len = (size_t)get_be(&rd, 2);
  if (f.receipt_len > RECEIPT_MAX)
    return cordon_diag_set(diag, CORDON_E_LIMIT, "the receipt is longer than %d bytes",
                           (int)RECEIPT_MAX);
  f.receipt = take(&rd, f.receipt_len);
  f.receipt_sig = take(&rd, RECEIPT_SIG_LEN);
  f.statement_len = (size_t)get_be(&rd, 2);
  if (f.statement_len > RECEIPT_STATEMENT_MAX)
    return cordon_diag_set(diag, CORDON_E_LIMIT, "the statement is longer than %d bytes",
                           (int)RECEIPT_STATEMENT_MAX);
  f.statement = take(&rd, f.statement_len);
  f.statement_sig = take(&rd, RECEIPT_SIG_LEN);
  if (rd.bad)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "the file is cut short");
  if (rd.off != len)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "bytes after the statement's signature");
  *out_file = f;
  return 0;
}

int receipt_file_verify(const uint8_t *buf, size_t len, const uint8_t server_key[RECEIPT_KEY_LEN],
                        struct receipt *out_receipt, struct receipt_statement *out_statement,
                        struct cordon_diag *diag) {
  struct receipt_file f;
  int err = receipt_file_parse(buf, len, &f, diag);
  if (err)
    return err;
  if (crypto_sign_verify_detached(f.statement_sig, f.statement, f.statement_len, server_key) != 0)
    return cordon_diag_set(diag, CORDON_E_SIGNATURE_INVALID,
                           "the server's statement does not verify with the trusted key");
  struct receipt_statement s;
  if ((err = receipt_statement_decode(f.statement, f.statement_len, &s, diag)))
    return err;
  if (crypto_sign_verify_detached(f.receipt_sig, f.receipt, f.receipt_len, s.device_key) != 0)
    return cordon_diag_set(diag, CORDON_E_SIGNATURE_INVALID,
                           "the receipt does not verify with the device's key");
  struct receipt r;
  if ((err = receipt_decode(f.receipt, f.receipt_len, &r, diag)))
    return err;
  if (sodium_memcmp(r.device_id, s.device_id, CORDON_ID_LEN) != 0)
    return cordon_diag_set(diag, CORDON_E_SIGNATURE_INVALID,
                           "the receipt's device is not the one the statement names");
  if (r.bound) {
    uint8_t tag[CORDON_ID_LEN];
    ticket_user_tag(s.user, tag);
    if (sodium_memcmp(tag, r.user_tag, CORDON_ID_LEN) != 0)
      return cordon_diag_set(diag, CORDON_E_SIGNATURE_INVALID,
                             "the receipt's user is not the one the statement names");
  }
  if (out_receipt)
    *out_receipt = r;
  if (out_statement)
    *out_statement = s;
  return 0;
}
