/* Tests for core/error.c: the one table of error codes. */
#include "core/error.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* every CORDON_E_* value, from the table itself */
static const int all_codes[] = {
#define ROW_(name, str, msg) CORDON_E_##name,
    CORDON_ERR_MAP(ROW_)
#undef ROW_
};
#define N_CODES (sizeof(all_codes) / sizeof(all_codes[0]))

Test(error, table_covers_the_enum_without_gaps) {
  cr_assert_eq(N_CODES, (size_t)(CORDON_E_END_ - CORDON_E_BASE_ - 1));
  for (size_t i = 0; i < N_CODES; i++)
    cr_assert_eq(all_codes[i], CORDON_E_BASE_ + 1 + (int)i);
}

Test(error, codes_never_collide_with_a_negated_errno) {
  /* errno values stay below 4096 (the kernel's MAX_ERRNO) */
  for (size_t i = 0; i < N_CODES; i++)
    cr_assert_lt(all_codes[i], -4095, "code %d", all_codes[i]);
}

Test(error, every_code_has_a_distinct_name_and_a_message) {
  for (size_t i = 0; i < N_CODES; i++) {
    const char *name = cordon_err_name(all_codes[i]);
    const char *msg = cordon_err_message(all_codes[i]);
    cr_assert_not_null(name);
    cr_assert_not_null(msg);
    cr_assert_neq(name[0], '\0');
    cr_assert_neq(msg[0], '\0');
    cr_assert_str_neq(name, "io_error", "io_error is reserved for errno");
    if (all_codes[i] != CORDON_E_INTERNAL)
      cr_assert_str_neq(name, "internal_error", "code %d has no row of its own", all_codes[i]);
    for (const char *p = name; *p; p++)
      cr_assert((*p >= 'a' && *p <= 'z') || *p == '_', "name %s is not lower snake_case", name);
    for (size_t j = 0; j < i; j++)
      cr_assert_str_neq(name, cordon_err_name(all_codes[j]), "codes %d and %d share a name",
                        all_codes[i], all_codes[j]);
  }
}

Test(error, every_name_round_trips) {
  for (size_t i = 0; i < N_CODES; i++) {
    const char *name = cordon_err_name(all_codes[i]);
    cr_assert_eq(cordon_err_from_name(name), all_codes[i], "%s", name);
  }
}

Test(error, design_codes_have_their_stable_names) {
  static const struct {
    int code;
    const char *name;
  } rows[] = {
      {CORDON_E_SANDBOX_UNAVAILABLE, "sandbox_unavailable"},
      {CORDON_E_CAPABILITY_DENIED, "capability_denied"},
      {CORDON_E_SCOPE_TOO_BROAD, "scope_too_broad"},
      {CORDON_E_SIGNATURE_INVALID, "signature_invalid"},
      {CORDON_E_UNKNOWN_KEY, "unknown_key"},
      {CORDON_E_PACKAGE_CORRUPT, "package_corrupt"},
      {CORDON_E_PACKAGE_TOO_LARGE, "package_too_large"},
      {CORDON_E_MANIFEST_INVALID, "manifest_invalid"},
      {CORDON_E_TICKET_EXPIRED, "ticket_expired"},
      {CORDON_E_TICKET_REPLAYED, "ticket_replayed"},
      {CORDON_E_WRONG_DEVICE, "wrong_device"},
      {CORDON_E_SPAWN_FAILED, "spawn_failed"},
      {CORDON_E_JOB_USER_MISSING, "job_user_missing"},
      {CORDON_E_NO_ELIGIBLE_DEVICE, "no_eligible_device"},
      {CORDON_E_CANCELLED, "cancelled"},
      {CORDON_E_AGENT_RESTARTED, "agent_restarted"},
      {CORDON_E_AGENT_STOPPED, "agent_stopped"},
      {CORDON_E_DEVICE_LOST, "device_lost"},
      {CORDON_E_CONFIG_INVALID, "config_invalid"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    cr_expect_str_eq(cordon_err_name(rows[i].code), rows[i].name);
    cr_expect_eq(cordon_err_from_name(rows[i].name), rows[i].code, "%s", rows[i].name);
  }
}

Test(error, unknown_names_map_to_zero) {
  static const char *const names[] = {
      "",  "io_error", "MANIFEST_INVALID", "manifest_invalid ", "manifest", "sandbox_unavailable_",
      "ok"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    cr_expect_eq(cordon_err_from_name(names[i]), 0, "\"%s\"", names[i]);
}

Test(error, negated_errno_is_io_error_with_the_system_message) {
  static const int errs[] = {EPERM, ENOENT, EACCES, ENOMEM, EEXIST, ELOOP, ENOSPC, EINTR, 4095};
  for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
    cr_expect_str_eq(cordon_err_name(-errs[i]), "io_error", "-%d", errs[i]);
    /* strerror's buffer for an unknown errno is freed by the next call: copy */
    char *got = strdup(cordon_err_message(-errs[i]));
    cr_assert_not_null(got);
    cr_expect_str_eq(got, strerror(errs[i]), "-%d", errs[i]);
    free(got);
  }
}

Test(error, values_outside_the_table_are_internal_errors) {
  static const int vals[] = {CORDON_E_BASE_, CORDON_E_BASE_ - 1, -20000, 1, 42};
  for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
    cr_expect_str_eq(cordon_err_name(vals[i]), "internal_error", "%d", vals[i]);
    cr_expect_str_eq(cordon_err_message(vals[i]), "internal error", "%d", vals[i]);
  }
}

Test(error, every_code_is_listed_in_the_protocol_doc) {
  FILE *f = fopen(CORDON_SOURCE_DIR "/docs/PROTOCOL.md", "r");
  cr_assert_not_null(f, "docs/PROTOCOL.md lists the stable codes");
  char *doc = NULL;
  size_t cap = 0;
  ssize_t n = getdelim(&doc, &cap, '\0', f);
  fclose(f);
  cr_assert_gt(n, 0);
  for (size_t i = 0; i < N_CODES; i++) {
    char quoted[80];
    snprintf(quoted, sizeof(quoted), "`%s`", cordon_err_name(all_codes[i]));
    cr_expect_not_null(strstr(doc, quoted), "%s is missing from docs/PROTOCOL.md", quoted);
  }
  cr_expect_not_null(strstr(doc, "`io_error`"));
  free(doc);
}

Test(error, diag_set_formats_and_returns_the_code) {
  struct cordon_diag d = {{0}};
  cr_assert_eq(cordon_diag_set(&d, CORDON_E_LIMIT, "field '%s': %d", "x", 7), CORDON_E_LIMIT);
  cr_assert_str_eq(d.msg, "field 'x': 7");
  cr_assert_eq(cordon_diag_set(NULL, -ENOENT, "ignored %s", "y"), -ENOENT, "NULL-safe");
}

Test(error, diag_set_truncates_to_the_buffer) {
  struct cordon_diag d;
  memset(&d, 'x', sizeof(d));
  char big[2000];
  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  cordon_diag_set(&d, CORDON_E_INTERNAL, "%s", big);
  cr_assert_eq(strlen(d.msg), sizeof(d.msg) - 1);
  cr_assert_eq(d.msg[sizeof(d.msg) - 1], '\0');
}

/* ---- control bytes never reach a terminal raw ---- */

Test(error, diag_escapes_control_bytes_a_package_chose) {
  struct cordon_diag d = {{0}};
  cordon_diag_set(&d, CORDON_E_MANIFEST_INVALID, "manifest: unknown key '%s'",
                  "a\x1b]0;pwned\x07\nb\x7f");
  cr_assert_str_eq(d.msg, "manifest: unknown key 'a\\x1b]0;pwned\\x07\\x0ab\\x7f'");
  for (const char *p = d.msg; *p; p++)
    cr_assert((unsigned char)*p >= 0x20 && *p != 0x7f, "raw control byte at %zu", p - d.msg);
}

Test(error, escaping_cuts_whole_escapes_at_the_buffer_end) {
  char buf[8] = "ab\x01\x02";
  cordon_escape_controls(buf, sizeof(buf));
  /* "ab\x01" is 6 bytes; the second escape would need 4 more: cut */
  cr_assert_str_eq(buf, "ab\\x01");
  char plain[8] = "abc";
  cordon_escape_controls(plain, sizeof(plain));
  cr_assert_str_eq(plain, "abc");
}

Test(error, a_long_message_of_control_bytes_stays_terminated) {
  struct cordon_diag d = {{0}};
  char evil[600];
  memset(evil, '\x1b', sizeof(evil) - 1);
  evil[sizeof(evil) - 1] = '\0';
  cordon_diag_set(&d, CORDON_E_USAGE, "%s", evil);
  size_t n = strlen(d.msg);
  cr_assert_lt(n, sizeof(d.msg));
  cr_assert_eq(n % 4, 0, "a cut escape: %zu bytes", n);
  cr_assert(strchr(d.msg, '\x1b') == NULL);
}

/* The C1 controls U+0080..U+009F (UTF-8 c2 80..c2 9f; c2 9b is CSI) are
 * escapes to a terminal as ESC is; U+00A0 and on are text. */
Test(error, c1_controls_are_escaped_too) {
  struct cordon_diag d = {{0}};
  cordon_diag_set(&d, CORDON_E_PROTOCOL, "x %s",
                  "a\xc2\x9b"
                  "31m\xc2\x85z\xc2\xa0\xc3\xa9");
  cr_assert_str_eq(d.msg, "x a\\x9b31m\\x85z\xc2\xa0\xc3\xa9");
  char cut[8] = "ab\xc2\x9b";
  cordon_escape_controls(cut, 7);
  cr_assert_str_eq(cut, "ab\\x9b");
  char tail[8] = "abc\xc2";
  cordon_escape_controls(tail, sizeof(tail));
  cr_assert_str_eq(tail, "abc\xc2", "a lone lead byte is left as it is");
}
