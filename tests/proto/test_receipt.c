#include "proto/receipt.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/ticket.h"

/* The test vector of docs/protocol/receipt.md, section 7: device key from
 * seed 01 01 .. 01, server ticket key from seed 02 02 .. 02. */
static void keys(uint8_t dpk[32], uint8_t dsk[64], uint8_t spk[32], uint8_t ssk[64]) {
  uint8_t seed[32];
  memset(seed, 1, sizeof(seed));
  crypto_sign_seed_keypair(dpk, dsk, seed);
  memset(seed, 2, sizeof(seed));
  crypto_sign_seed_keypair(spk, ssk, seed);
}

static void vector_ticket(uint8_t body[TICKET_BODY_LEN]) {
  struct ticket t = {0};
  memset(t.job_id, 0x11, sizeof(t.job_id));
  memset(t.device_id, 0x22, sizeof(t.device_id));
  ticket_user_tag("alice", t.user_tag);
  memset(t.session_id, 0x33, sizeof(t.session_id));
  memset(t.index_hash, 0x44, sizeof(t.index_hash));
  char *args[] = {"--fast", "x"};
  ticket_args_hash(args, 2, t.args_hash);
  t.issued_ms = 1767225600000ull;
  t.expires_ms = t.issued_ms + 300000;
  ticket_encode(&t, body);
}

static void vector_result(struct msg_result *m) {
  memset(m, 0, sizeof(*m));
  memset(m->job_id, 0x11, sizeof(m->job_id));
  memset(m->device_id, 0x22, sizeof(m->device_id));
  m->has_exit_code = true;
  m->exit_code = 0;
  m->stdout_buf.data = (uint8_t *)"hello\n";
  m->stdout_buf.len = 6;
  m->wall_ms = 1500;
  m->has_oom_killed = true;
  m->sandbox.requested = MSG_LEVEL_ISOLATED;
  m->sandbox.has_level = true;
  m->sandbox.level = MSG_LEVEL_ISOLATED;
  m->sandbox.mechanism = "bwrap+seccomp+cgroup";
  m->sandbox.limits =
      (struct msg_limits_used){MSG_ENFORCE_CGROUP, MSG_ENFORCE_CGROUP, MSG_ENFORCE_CGROUP,
                               MSG_ENFORCE_CGROUP, MSG_ENFORCE_TMPFS};
  m->has_started_ms = m->has_ended_ms = true;
  m->started_ms = 1767225601000ull;
  m->ended_ms = 1767225602500ull;
}

static void hex(const uint8_t *p, size_t n, char *out) {
  sodium_bin2hex(out, 2 * n + 1, p, n);
}

/* Builds the vector's file; returns its length. */
static size_t vector_file(uint8_t *file, size_t cap) {
  uint8_t dpk[32], dsk[64], spk[32], ssk[64], ticket[TICKET_BODY_LEN];
  keys(dpk, dsk, spk, ssk);
  vector_ticket(ticket);
  struct msg_result m;
  vector_result(&m);
  cr_assert_eq(receipt_sign_result(&m, ticket, sizeof(ticket), dsk), 0);
  uint8_t rc[RECEIPT_MAX], st[RECEIPT_STATEMENT_MAX], ssig[64];
  size_t rlen, slen, flen;
  cr_assert_eq(receipt_verify_result(&m, ticket, sizeof(ticket), dpk, rc, sizeof(rc), &rlen, NULL),
               0);
  struct receipt_statement s = {0};
  memset(s.device_id, 0x22, sizeof(s.device_id));
  snprintf(s.user, sizeof(s.user), "alice");
  memcpy(s.device_key, dpk, 32);
  cr_assert_eq(receipt_statement_encode(&s, st, sizeof(st), &slen), 0);
  crypto_sign_detached(ssig, NULL, st, slen, ssk);
  cr_assert_eq(receipt_file_build(rc, rlen, m.receipt_sig, st, slen, ssig, file, cap, &flen), 0);
  return flen;
}

Test(receipt, encodes_the_documented_vector) {
  uint8_t file[RECEIPT_FILE_MAX];
  size_t n = vector_file(file, sizeof(file));
  char h[2 * RECEIPT_FILE_MAX + 1];
  hex(file, n, h);
  const char *dump = getenv("RECEIPT_VECTOR_OUT"); /* regenerate: write it there */
  if (dump) {
    FILE *f = fopen(dump, "w");
    cr_assert(f);
    fprintf(f, "\"%s\"\n", h);
    fclose(f);
  }
  /* docs/protocol/receipt.md, section 7 */
  static const char expected[] =
#include "receipt_vector.inc"
      ;
  cr_assert_str_eq(h, expected);
}

Test(receipt, file_verifies_and_decodes) {
  uint8_t file[RECEIPT_FILE_MAX], dpk[32], dsk[64], spk[32], ssk[64];
  keys(dpk, dsk, spk, ssk);
  size_t n = vector_file(file, sizeof(file));
  struct receipt r;
  struct receipt_statement s;
  cr_assert_eq(receipt_file_verify(file, n, spk, &r, &s, NULL), 0);
  cr_assert(r.bound);
  cr_assert_eq(r.end, RECEIPT_END_EXITED);
  cr_assert_eq(r.status, 0);
  cr_assert_str_eq(r.mechanism, "bwrap+seccomp+cgroup");
  cr_assert_str_eq(s.user, "alice");
  uint8_t h[32];
  receipt_hash((const uint8_t *)"hello\n", 6, h);
  cr_assert_eq(memcmp(h, r.stdout_hash, 32), 0);
  cr_assert_eq(r.started_ms, 1767225601000ull);
}

Test(receipt, any_changed_byte_fails_verification) {
  uint8_t file[RECEIPT_FILE_MAX], dpk[32], dsk[64], spk[32], ssk[64];
  keys(dpk, dsk, spk, ssk);
  size_t n = vector_file(file, sizeof(file));
  for (size_t i = 0; i < n; i++)
    for (unsigned bit = 0; bit < 8; bit++) {
      file[i] ^= (uint8_t)(1u << bit);
      cr_assert_neq(receipt_file_verify(file, n, spk, NULL, NULL, NULL), 0, "byte %zu bit %u", i,
                    bit);
      file[i] ^= (uint8_t)(1u << bit);
    }
  /* cut short at every length, and one byte more */
  for (size_t len = 0; len < n; len++)
    cr_assert_neq(receipt_file_verify(file, len, spk, NULL, NULL, NULL), 0);
  file[n] = 0;
  cr_assert_neq(receipt_file_verify(file, n + 1, spk, NULL, NULL, NULL), 0);
  cr_assert_eq(receipt_file_verify(file, n, spk, NULL, NULL, NULL), 0);
}

Test(receipt, another_server_key_fails) {
  uint8_t file[RECEIPT_FILE_MAX], dpk[32], dsk[64], spk[32], ssk[64];
  keys(dpk, dsk, spk, ssk);
  size_t n = vector_file(file, sizeof(file));
  struct cordon_diag d = {{0}};
  cr_assert_eq(receipt_file_verify(file, n, dpk, NULL, NULL, &d), CORDON_E_SIGNATURE_INVALID);
  cr_assert(strstr(d.msg, "statement"), "%s", d.msg);
}

Test(receipt, result_changed_after_signing_fails) {
  uint8_t dpk[32], dsk[64], spk[32], ssk[64], ticket[TICKET_BODY_LEN], buf[RECEIPT_MAX];
  keys(dpk, dsk, spk, ssk);
  vector_ticket(ticket);
  struct msg_result m;
  vector_result(&m);
  cr_assert_eq(receipt_sign_result(&m, ticket, sizeof(ticket), dsk), 0);
  size_t len;
  struct msg_result c = m;
  c.stdout_buf.data = (uint8_t *)"hellO\n";
  cr_assert_eq(receipt_verify_result(&c, ticket, sizeof(ticket), dpk, buf, sizeof(buf), &len, NULL),
               CORDON_E_SIGNATURE_INVALID);
  c = m;
  c.exit_code = 1;
  cr_assert_eq(receipt_verify_result(&c, ticket, sizeof(ticket), dpk, buf, sizeof(buf), &len, NULL),
               CORDON_E_SIGNATURE_INVALID);
  c = m;
  c.sandbox.level = MSG_LEVEL_CONTAINED;
  cr_assert_eq(receipt_verify_result(&c, ticket, sizeof(ticket), dpk, buf, sizeof(buf), &len, NULL),
               CORDON_E_SIGNATURE_INVALID);
  /* another ticket than the one signed */
  uint8_t other[TICKET_BODY_LEN];
  memcpy(other, ticket, sizeof(other));
  other[160] ^= 1;
  cr_assert_eq(receipt_verify_result(&m, other, sizeof(other), dpk, buf, sizeof(buf), &len, NULL),
               CORDON_E_SIGNATURE_INVALID);
  c = m;
  c.has_receipt_sig = false;
  cr_assert_eq(receipt_verify_result(&c, ticket, sizeof(ticket), dpk, buf, sizeof(buf), &len, NULL),
               CORDON_E_SIGNATURE_INVALID);
  /* another device key */
  cr_assert_eq(receipt_verify_result(&m, ticket, sizeof(ticket), spk, buf, sizeof(buf), &len, NULL),
               CORDON_E_SIGNATURE_INVALID);
  cr_assert_eq(receipt_verify_result(&m, ticket, sizeof(ticket), dpk, buf, sizeof(buf), &len, NULL),
               0);
}

Test(receipt, unbound_receipt_without_a_ticket) {
  uint8_t dpk[32], dsk[64], spk[32], ssk[64], buf[RECEIPT_MAX];
  keys(dpk, dsk, spk, ssk);
  struct msg_result m;
  vector_result(&m);
  m.has_exit_code = false;
  m.has_error = true;
  m.error.code = "agent_restarted";
  m.error.message = "";
  cr_assert_eq(receipt_sign_result(&m, NULL, 0, dsk), 0);
  cr_assert(!m.has_ticket_hash);
  size_t len;
  cr_assert_eq(receipt_verify_result(&m, NULL, 0, dpk, buf, sizeof(buf), &len, NULL), 0);
  struct receipt r;
  cr_assert_eq(receipt_decode(buf, len, &r, NULL), 0);
  cr_assert(!r.bound);
  cr_assert_eq(r.end, RECEIPT_END_NOT_RUN);
  cr_assert_str_eq(r.error_code, "agent_restarted");
  /* a result claiming a ticket hash is checked against the issued ticket */
  uint8_t ticket[TICKET_BODY_LEN];
  vector_ticket(ticket);
  m.has_ticket_hash = true;
  cr_assert_eq(receipt_verify_result(&m, NULL, 0, dpk, buf, sizeof(buf), &len, NULL),
               CORDON_E_SIGNATURE_INVALID);
}

Test(receipt, decode_is_strict_and_encode_checks_ranges) {
  uint8_t dpk[32], dsk[64], spk[32], ssk[64], ticket[TICKET_BODY_LEN], buf[RECEIPT_MAX];
  keys(dpk, dsk, spk, ssk);
  vector_ticket(ticket);
  struct msg_result m;
  vector_result(&m);
  struct receipt r, back;
  size_t len;
  cr_assert_eq(receipt_from_result(&m, ticket, sizeof(ticket), &r), 0);
  cr_assert_eq(receipt_encode(&r, buf, sizeof(buf), &len), 0);
  cr_assert_eq(len, RECEIPT_FIXED_LEN + 3 + strlen("bwrap+seccomp+cgroup"));
  cr_assert_eq(receipt_decode(buf, len, &back, NULL), 0);
  uint8_t again[RECEIPT_MAX];
  size_t len2;
  cr_assert_eq(receipt_encode(&back, again, sizeof(again), &len2), 0);
  cr_assert_eq(len2, len);
  cr_assert_eq(memcmp(buf, again, len), 0);
  /* a bool that is 2, a level out of range, a mechanism that is not one */
  buf[sizeof(RECEIPT_DOMAIN) + 1 + 32] = 2;
  cr_assert_eq(receipt_decode(buf, len, &back, NULL), CORDON_E_PROTOCOL);
  struct receipt bad = r;
  bad.level = 3;
  cr_assert_eq(receipt_encode(&bad, buf, sizeof(buf), &len), -EINVAL);
  bad = r;
  snprintf(bad.mechanism, sizeof(bad.mechanism), "bwrap+");
  cr_assert_eq(receipt_encode(&bad, buf, sizeof(buf), &len), -EINVAL);
  bad = r;
  bad.bound = false;
  cr_assert_eq(receipt_encode(&bad, buf, sizeof(buf), &len), -EINVAL);
  cr_assert_eq(receipt_encode(&r, buf, 100, &len), -ENOBUFS);
  uint8_t big[RECEIPT_FILE_MAX + 1] = {0};
  struct receipt_file f;
  cr_assert_eq(receipt_file_parse(big, sizeof(big), &f, NULL), CORDON_E_LIMIT);
}
