/* Tests for core/result.c: UTF-8 validation and the §5 result JSON. */
#include "core/error.h"
#include "core/result.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- utf8_valid ---- */

struct utf8_row {
  const char *bytes;
  size_t len;
  bool valid;
  const char *what;
};

#define U(s, v, w)                                                                                 \
  { s, sizeof(s) - 1, v, w }

static const struct utf8_row utf8_rows[] = {
    U("", true, "empty"),
    U("hello, world\n", true, "ASCII"),
    U("a\0b", true, "NUL is ASCII"),
    U("\x7f", true, "DEL, the last 1-byte"),
    U("\xc2\x80", true, "U+0080, the first 2-byte"),
    U("\xc3\xa9", true, "U+00E9"),
    U("\xdf\xbf", true, "U+07FF, the last 2-byte"),
    U("\xe0\xa0\x80", true, "U+0800, the first 3-byte"),
    U("\xe2\x82\xac", true, "U+20AC euro"),
    U("\xed\x9f\xbf", true, "U+D7FF, just below the surrogates"),
    U("\xee\x80\x80", true, "U+E000, just above the surrogates"),
    U("\xef\xbf\xbf", true, "U+FFFF, the last 3-byte"),
    U("\xf0\x90\x80\x80", true, "U+10000, the first 4-byte"),
    U("\xf0\x9d\x84\x9e", true, "U+1D11E"),
    U("\xf4\x8f\xbf\xbf", true, "U+10FFFF, the last code point"),
    U("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80!", true, "mixed"),
    /* continuation bytes without a lead */
    U("\x80", false, "lone continuation 0x80"),
    U("\xbf", false, "lone continuation 0xBF"),
    U("a\x80z", false, "continuation inside ASCII"),
    U("\xc3\xa9\xa9", false, "extra continuation"),
    /* overlongs */
    U("\xc0\x80", false, "overlong NUL (2-byte)"),
    U("\xc0\xaf", false, "overlong '/' (2-byte)"),
    U("\xc1\xbf", false, "overlong U+007F (2-byte)"),
    U("\xe0\x80\x80", false, "overlong NUL (3-byte)"),
    U("\xe0\x80\xaf", false, "overlong '/' (3-byte)"),
    U("\xe0\x9f\xbf", false, "overlong U+07FF (3-byte)"),
    U("\xf0\x80\x80\x80", false, "overlong NUL (4-byte)"),
    U("\xf0\x80\x80\xaf", false, "overlong '/' (4-byte)"),
    U("\xf0\x8f\xbf\xbf", false, "overlong U+FFFF (4-byte)"),
    /* surrogates */
    U("\xed\xa0\x80", false, "U+D800"),
    U("\xed\xad\xbf", false, "U+DB7F"),
    U("\xed\xb0\x80", false, "U+DC00"),
    U("\xed\xbf\xbf", false, "U+DFFF"),
    U("\xed\xa0\xbd\xed\xb8\x80", false, "CESU-8 surrogate pair"),
    /* beyond U+10FFFF and invalid lead bytes */
    U("\xf4\x90\x80\x80", false, "U+110000"),
    U("\xf5\x80\x80\x80", false, "lead 0xF5"),
    U("\xf7\xbf\xbf\xbf", false, "U+1FFFFF"),
    U("\xf8\x88\x80\x80\x80", false, "5-byte form"),
    U("\xfc\x84\x80\x80\x80\x80", false, "6-byte form"),
    U("\xfe", false, "0xFE"),
    U("\xff", false, "0xFF"),
    /* truncated sequences */
    U("\xc2", false, "2-byte missing 1"),
    U("\xe0\xa0", false, "3-byte missing 1"),
    U("\xe2", false, "3-byte missing 2"),
    U("\xf0\x90\x80", false, "4-byte missing 1"),
    U("\xf0\x90", false, "4-byte missing 2"),
    U("\xf0", false, "4-byte missing 3"),
    U("abc\xc3", false, "truncated at the end"),
    U("\xc2"
      "a",
      false, "2-byte with ASCII continuation"),
    U("\xe0\xa0"
      "a",
      false, "3-byte with ASCII third byte"),
    U("\xf0\x90\x80"
      "a",
      false, "4-byte with ASCII fourth byte"),
    U("\xc2\xc2\x80", false, "lead where a continuation belongs"),
    U("\xe2\x82\x00", false, "NUL where a continuation belongs"),
};

Test(result, utf8_valid_table) {
  for (size_t i = 0; i < sizeof(utf8_rows) / sizeof(utf8_rows[0]); i++) {
    const struct utf8_row *r = &utf8_rows[i];
    cr_expect_eq(utf8_valid((const uint8_t *)r->bytes, r->len), r->valid, "%s: expected %s",
                 r->what, r->valid ? "valid" : "invalid");
  }
}

Test(result, utf8_valid_respects_the_length) {
  const uint8_t euro[] = {0xe2, 0x82, 0xac, 0xff};
  cr_assert(utf8_valid(euro, 3));
  cr_assert_not(utf8_valid(euro, 2), "a cut in the middle of a sequence");
  cr_assert_not(utf8_valid(euro, 1));
  cr_assert_not(utf8_valid(euro, 4));
  cr_assert(utf8_valid(euro, 0));
}

Test(result, utf8_valid_accepts_every_scalar_value) {
  /* encode every scalar value; the decoder must accept all of them */
  uint8_t b[4];
  for (uint32_t cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff)
      continue;
    size_t n;
    if (cp < 0x80) {
      b[0] = (uint8_t)cp;
      n = 1;
    } else if (cp < 0x800) {
      b[0] = (uint8_t)(0xc0 | (cp >> 6));
      b[1] = (uint8_t)(0x80 | (cp & 0x3f));
      n = 2;
    } else if (cp < 0x10000) {
      b[0] = (uint8_t)(0xe0 | (cp >> 12));
      b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
      b[2] = (uint8_t)(0x80 | (cp & 0x3f));
      n = 3;
    } else {
      b[0] = (uint8_t)(0xf0 | (cp >> 18));
      b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
      b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
      b[3] = (uint8_t)(0x80 | (cp & 0x3f));
      n = 4;
    }
    if (!utf8_valid(b, n))
      cr_assert_fail("U+%04X rejected", cp);
  }
}

Test(result, utf8_valid_agrees_with_jansson_on_two_byte_inputs) {
  /* every 2-byte string: jansson's own UTF-8 check is the reference */
  uint8_t b[2];
  for (unsigned x = 0; x < 256; x++) {
    for (unsigned y = 0; y < 256; y++) {
      b[0] = (uint8_t)x;
      b[1] = (uint8_t)y;
      json_t *s = json_stringn((const char *)b, 2);
      bool ref = s != NULL;
      json_decref(s);
      if (utf8_valid(b, 2) != ref)
        cr_assert_fail("%02x %02x: utf8_valid %d, jansson %d", x, y, !ref, ref);
    }
  }
}

Test(result, utf8_valid_agrees_with_jansson_on_three_byte_inputs) {
  /* every 3-byte string that starts with a multi-byte lead (0xC0..0xFF) */
  uint8_t b[3];
  for (unsigned x = 0xc0; x < 256; x++) {
    for (unsigned y = 0; y < 256; y++) {
      for (unsigned z = 0; z < 256; z++) {
        b[0] = (uint8_t)x;
        b[1] = (uint8_t)y;
        b[2] = (uint8_t)z;
        json_t *s = json_stringn((const char *)b, 3);
        bool ref = s != NULL;
        json_decref(s);
        if (utf8_valid(b, 3) != ref)
          cr_assert_fail("%02x %02x %02x: utf8_valid %d, jansson %d", x, y, z, !ref, ref);
      }
    }
  }
}

/* ---- job_result_to_json ---- */

static json_t *to_json(const struct job_result *r) {
  json_t *j = job_result_to_json(r);
  cr_assert_not_null(j, "job_result_to_json returned NULL");
  return j;
}

static json_t *get(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  cr_assert_not_null(v, "key %s missing", key);
  return v;
}

static void set_buf(struct result_buf *b, const void *data, size_t len) {
  free(b->data);
  b->data = malloc(len ? len : 1);
  cr_assert_not_null(b->data);
  memcpy(b->data, data, len);
  b->len = len;
}

/* decode <name>_base64 and compare with want */
static void assert_base64_field(json_t *o, const char *name, const void *want, size_t len) {
  char key[32];
  snprintf(key, sizeof(key), "%s_base64", name);
  json_t *s = get(o, key);
  cr_assert(json_is_string(s), "%s is a string", key);
  uint8_t out[4096];
  size_t got = 0;
  cr_assert_eq(sodium_base642bin(out, sizeof(out), json_string_value(s), json_string_length(s),
                                 NULL, &got, NULL, sodium_base64_VARIANT_ORIGINAL),
               0, "%s is standard base64 with padding: %s", key, json_string_value(s));
  cr_assert_eq(got, len);
  cr_assert_arr_eq(out, want, len);
}

Test(result, fresh_result_has_every_field_of_section_5) {
  struct job_result r;
  job_result_init(&r);
  json_t *j = to_json(&r);
  static const char *const keys[] = {
      "job_id",     "device_id",        "exit_code",        "signal",  "stdout",
      "stderr",     "stdout_truncated", "stderr_truncated", "wall_ms", "timed_out",
      "oom_killed", "orphans_killed",   "kill_scope",       "sandbox", "error"};
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
    get(j, keys[i]);
  cr_assert(json_is_null(get(j, "exit_code")), "never ran: no exit code");
  cr_assert(json_is_null(get(j, "signal")));
  cr_assert(json_is_null(get(j, "oom_killed")), "unknown by default");
  cr_assert(json_is_null(get(j, "device_id")));
  cr_assert(json_is_null(get(j, "error")));
  cr_assert_str_eq(json_string_value(get(j, "stdout")), "");
  cr_assert_null(json_object_get(j, "stdout_base64"));
  cr_assert(json_is_false(get(j, "timed_out")));
  cr_assert(json_is_null(get(j, "kill_scope")), "nothing was killed");
  json_t *sb = get(j, "sandbox");
  static const char *const sbkeys[] = {"requested", "level", "mechanism", "downgrade_reason",
                                       "limits"};
  for (size_t i = 0; i < sizeof(sbkeys) / sizeof(sbkeys[0]); i++)
    get(sb, sbkeys[i]);
  cr_assert_str_eq(json_string_value(get(sb, "requested")), "isolated");
  cr_assert(json_is_null(get(sb, "level")), "no level chosen yet");
  cr_assert(json_is_null(get(sb, "mechanism")));
  cr_assert(json_is_null(get(sb, "downgrade_reason")));
  json_t *lim = get(sb, "limits");
  static const char *const lkeys[] = {"memory", "processes", "time", "disk"};
  for (size_t i = 0; i < 4; i++)
    cr_assert_str_eq(json_string_value(get(lim, lkeys[i])), "none", "%s", lkeys[i]);
  json_decref(j);
  job_result_release(&r);
}

Test(result, exited_job_has_an_exit_code_and_no_signal) {
  struct job_result r;
  job_result_init(&r);
  r.ran = true;
  r.exited = true;
  r.exit_code = 3;
  r.signal = 9; /* ignored when exited */
  json_t *j = to_json(&r);
  cr_assert_eq(json_integer_value(get(j, "exit_code")), 3);
  cr_assert(json_is_integer(get(j, "exit_code")));
  cr_assert(json_is_null(get(j, "signal")));
  json_decref(j);
  r.exit_code = 0;
  j = to_json(&r);
  cr_assert(json_is_integer(get(j, "exit_code")), "0 is a number, not null");
  cr_assert_eq(json_integer_value(get(j, "exit_code")), 0);
  json_decref(j);
}

Test(result, signalled_job_has_null_exit_code_and_the_signal) {
  struct job_result r;
  job_result_init(&r);
  r.ran = true;
  r.exited = false;
  r.exit_code = 137;
  r.signal = 9;
  json_t *j = to_json(&r);
  cr_assert(json_is_null(get(j, "exit_code")));
  cr_assert(json_is_integer(get(j, "signal")));
  cr_assert_eq(json_integer_value(get(j, "signal")), 9);
  json_decref(j);
}

Test(result, refused_job_has_neither_exit_code_nor_signal) {
  struct job_result r;
  job_result_init(&r);
  r.exited = true;
  r.exit_code = 1;
  r.signal = 15;
  json_t *j = to_json(&r);
  cr_assert(json_is_null(get(j, "exit_code")));
  cr_assert(json_is_null(get(j, "signal")));
  json_decref(j);
}

Test(result, utf8_output_is_a_string) {
  struct job_result r;
  job_result_init(&r);
  static const char out[] = "h\xc3\xa9llo \xe2\x82\xac\n";
  static const char err[] = "warn: \xf0\x9f\x98\x80\n";
  set_buf(&r.out, out, sizeof(out) - 1);
  set_buf(&r.err, err, sizeof(err) - 1);
  json_t *j = to_json(&r);
  cr_assert_str_eq(json_string_value(get(j, "stdout")), out);
  cr_assert_str_eq(json_string_value(get(j, "stderr")), err);
  cr_assert_null(json_object_get(j, "stdout_base64"));
  cr_assert_null(json_object_get(j, "stderr_base64"));
  json_decref(j);
  job_result_release(&r);
  cr_assert_null(r.out.data);
  job_result_release(&r); /* twice is harmless */
  job_result_release(NULL);
}

Test(result, output_with_nul_bytes_goes_to_base64_and_keeps_its_length) {
  struct job_result r;
  job_result_init(&r);
  set_buf(&r.out, "a\0b\0", 4);
  json_t *j = to_json(&r);
  cr_assert(json_is_null(get(j, "stdout")), "a NUL is a control byte: not a string");
  assert_base64_field(j, "stdout", "a\0b\0", 4);
  json_decref(j);
  job_result_release(&r);
}

Test(result, text_with_tabs_newlines_and_carriage_returns_stays_a_string) {
  static const char *const texts[] = {"",
                                      "plain\n",
                                      "a\tb\r\n",
                                      "\"quoted\" \\ slash /",
                                      "caf\xc3\xa9 \xf0\x9f\x98\x80",
                                      "DEL \x7f is printed as is"};
  for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
    struct job_result r;
    job_result_init(&r);
    set_buf(&r.out, texts[i], strlen(texts[i]));
    json_t *j = to_json(&r);
    cr_assert(json_is_string(get(j, "stdout")), "row %zu is text", i);
    cr_assert_str_eq(json_string_value(get(j, "stdout")), texts[i]);
    cr_assert_null(json_object_get(j, "stdout_base64"), "row %zu", i);
    json_decref(j);
    job_result_release(&r);
  }
}

Test(result, valid_utf8_with_other_control_bytes_goes_to_base64) {
  /* each valid UTF-8, each with a byte JSON writes as six characters */
  static const struct {
    const char *bytes;
    size_t len;
  } rows[] = {
      {"\x01", 1}, {"\x00", 1}, {"ok\x1b[31mred", 11}, {"\b\f", 2}, {"\x1f tail", 6},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    cr_assert(utf8_valid((const uint8_t *)rows[i].bytes, rows[i].len), "row %zu", i);
    cr_assert_not(result_output_is_text((const uint8_t *)rows[i].bytes, rows[i].len), "row %zu", i);
    struct job_result r;
    job_result_init(&r);
    set_buf(&r.err, rows[i].bytes, rows[i].len);
    json_t *j = to_json(&r);
    cr_assert(json_is_null(get(j, "stderr")), "row %zu: stderr is null", i);
    assert_base64_field(j, "stderr", rows[i].bytes, rows[i].len);
    cr_assert_str_eq(json_string_value(get(j, "stdout")), "", "the other stream is its own");
    json_decref(j);
    job_result_release(&r);
  }
}

Test(result, invalid_utf8_output_goes_to_base64) {
  static const struct {
    const char *bytes;
    size_t len;
  } rows[] = {
      {"\xff", 1},
      {"\x00\x01\x02\xfe\xff", 5},
      {"text then \xc3", 11},
      {"\xed\xa0\x80", 3},
      {"\xc0\x80", 2},
      {"ab", 2}, /* control: valid */
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    bool valid = utf8_valid((const uint8_t *)rows[i].bytes, rows[i].len);
    struct job_result r;
    job_result_init(&r);
    set_buf(&r.out, rows[i].bytes, rows[i].len);
    set_buf(&r.err, rows[i].bytes, rows[i].len);
    json_t *j = to_json(&r);
    if (valid) {
      cr_assert(json_is_string(get(j, "stdout")));
      cr_assert_null(json_object_get(j, "stdout_base64"));
    } else {
      cr_assert(json_is_null(get(j, "stdout")), "row %zu: stdout is null", i);
      cr_assert(json_is_null(get(j, "stderr")), "row %zu: stderr is null", i);
      assert_base64_field(j, "stdout", rows[i].bytes, rows[i].len);
      assert_base64_field(j, "stderr", rows[i].bytes, rows[i].len);
    }
    json_decref(j);
    job_result_release(&r);
  }
}

Test(result, each_stream_is_judged_on_its_own) {
  struct job_result r;
  job_result_init(&r);
  set_buf(&r.out, "fine\n", 5);
  set_buf(&r.err, "\xff\xfe", 2);
  json_t *j = to_json(&r);
  cr_assert_str_eq(json_string_value(get(j, "stdout")), "fine\n");
  cr_assert_null(json_object_get(j, "stdout_base64"));
  cr_assert(json_is_null(get(j, "stderr")));
  assert_base64_field(j, "stderr", "\xff\xfe", 2);
  json_decref(j);
  job_result_release(&r);
}

Test(result, large_binary_output_round_trips_through_base64) {
  struct job_result r;
  job_result_init(&r);
  uint8_t buf[4000];
  for (size_t i = 0; i < sizeof(buf); i++)
    buf[i] = (uint8_t)(i * 7 + 0x80);
  set_buf(&r.out, buf, sizeof(buf));
  r.out.truncated = true;
  json_t *j = to_json(&r);
  assert_base64_field(j, "stdout", buf, sizeof(buf));
  cr_assert(json_is_true(get(j, "stdout_truncated")));
  cr_assert(json_is_false(get(j, "stderr_truncated")));
  json_decref(j);
  job_result_release(&r);
}

Test(result, oom_killed_is_tristate) {
  static const struct {
    int v;
    int want; /* -1 null, 0 false, 1 true */
  } rows[] = {{-1, -1}, {0, 0}, {1, 1}};
  for (size_t i = 0; i < 3; i++) {
    struct job_result r;
    job_result_init(&r);
    r.oom_killed = rows[i].v;
    json_t *j = to_json(&r);
    json_t *o = get(j, "oom_killed");
    if (rows[i].want < 0)
      cr_expect(json_is_null(o), "%d -> null", rows[i].v);
    else
      cr_expect(json_is_boolean(o) && json_is_true(o) == (rows[i].want == 1), "%d -> %s", rows[i].v,
                rows[i].want ? "true" : "false");
    json_decref(j);
  }
}

Test(result, counters_and_flags_are_copied) {
  struct job_result r;
  job_result_init(&r);
  memcpy(r.job_id, "0123456789abcdef0123456789abcdef", 33);
  strcpy(r.device_id, "dev-1");
  r.ran = true;
  r.exited = false;
  r.signal = 9;
  r.wall_ms = 5000000000ull; /* above 2^32 */
  r.timed_out = true;
  r.orphans_killed = 3;
  r.kill_scope = KILL_SCOPE_PID_NAMESPACE;
  r.err.truncated = true;
  json_t *j = to_json(&r);
  cr_assert_str_eq(json_string_value(get(j, "job_id")), "0123456789abcdef0123456789abcdef");
  cr_assert_str_eq(json_string_value(get(j, "device_id")), "dev-1");
  cr_assert_eq(json_integer_value(get(j, "wall_ms")), 5000000000ll);
  cr_assert(json_is_true(get(j, "timed_out")));
  cr_assert_eq(json_integer_value(get(j, "orphans_killed")), 3);
  cr_assert_str_eq(json_string_value(get(j, "kill_scope")), "pid-namespace");
  cr_assert(json_is_true(get(j, "stderr_truncated")));
  json_decref(j);
}

Test(result, kill_scope_names_are_the_documented_ones) {
  static const char *const want[] = {NULL,          "pid-namespace", "cgroup",
                                     "descendants", "pgroup",        "job"};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    const char *got = kill_scope_name((enum kill_scope)i);
    if (want[i])
      cr_expect_str_eq(got, want[i]);
    else
      cr_expect_null(got);
  }
  cr_expect_null(kill_scope_name((enum kill_scope)99));
}

Test(result, sandbox_object_names_levels_mechanism_and_limits) {
  struct job_result r;
  job_result_init(&r);
  r.requested = SANDBOX_LEVEL_CONTAINED;
  r.level = SANDBOX_LEVEL_NONE;
  r.level_known = true;
  strcpy(r.mechanism, "pgroup");
  r.downgrade_reason = "bwrap_unavailable";
  r.lim_memory = LIMIT_MECH_CGROUP;
  r.lim_processes = LIMIT_MECH_RLIMIT;
  r.lim_cpu = LIMIT_MECH_RLIMIT;
  r.lim_time = LIMIT_MECH_PID_NAMESPACE;
  r.lim_disk = LIMIT_MECH_TMPFS;
  json_t *j = to_json(&r);
  json_t *sb = get(j, "sandbox");
  cr_assert_str_eq(json_string_value(get(sb, "requested")), "contained");
  cr_assert_str_eq(json_string_value(get(sb, "level")), "none");
  cr_assert_str_eq(json_string_value(get(sb, "mechanism")), "pgroup");
  cr_assert_str_eq(json_string_value(get(sb, "downgrade_reason")), "bwrap_unavailable");
  json_t *lim = get(sb, "limits");
  cr_assert_str_eq(json_string_value(get(lim, "memory")), "cgroup");
  cr_assert_str_eq(json_string_value(get(lim, "processes")), "rlimit");
  cr_assert_str_eq(json_string_value(get(lim, "time")), "pid-namespace");
  cr_assert_str_eq(json_string_value(get(lim, "disk")), "tmpfs");
  json_t *cpu = json_object_get(lim, "cpu");
  if (cpu)
    cr_assert_str_eq(json_string_value(cpu), "rlimit");
  json_decref(j);
}

Test(result, limit_mechanism_names_are_the_section_5_vocabulary) {
  static const struct {
    enum limit_mech m;
    const char *name;
  } rows[] = {{LIMIT_MECH_NONE, "none"},     {LIMIT_MECH_CGROUP, "cgroup"},
              {LIMIT_MECH_RLIMIT, "rlimit"}, {LIMIT_MECH_JOB, "job"},
              {LIMIT_MECH_TMPFS, "tmpfs"},   {LIMIT_MECH_PID_NAMESPACE, "pid-namespace"},
              {LIMIT_MECH_PGROUP, "pgroup"}};
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    cr_expect_str_eq(limit_mech_name(rows[i].m), rows[i].name);
  cr_expect_str_eq(limit_mech_name((enum limit_mech)7), "none", "out of range");
  cr_expect_str_eq(limit_mech_name((enum limit_mech) - 1), "none", "out of range");
}

Test(result, error_object_has_the_stable_code_and_the_message) {
  struct job_result r;
  job_result_init(&r);
  cr_assert_eq(job_result_fail(&r, CORDON_E_CAPABILITY_DENIED, "asks for %s", "net"),
               CORDON_E_CAPABILITY_DENIED);
  json_t *j = to_json(&r);
  json_t *e = get(j, "error");
  cr_assert(json_is_object(e));
  cr_assert_eq(json_object_size(e), 2, "exactly code and message");
  cr_assert_str_eq(json_string_value(get(e, "code")), "capability_denied");
  cr_assert_str_eq(json_string_value(get(e, "message")), "asks for net");
  json_decref(j);
}

Test(result, every_error_code_serialises_to_its_name) {
  for (int code = CORDON_E_BASE_ + 1; code < CORDON_E_END_; code++) {
    struct job_result r;
    job_result_init(&r);
    r.error = code; /* no message: the table's message is used */
    json_t *j = to_json(&r);
    json_t *e = get(j, "error");
    cr_expect_str_eq(json_string_value(get(e, "code")), cordon_err_name(code));
    cr_expect_eq(cordon_err_from_name(json_string_value(get(e, "code"))), code);
    cr_expect_str_eq(json_string_value(get(e, "message")), cordon_err_message(code));
    json_decref(j);
  }
}

Test(result, errno_error_is_io_error) {
  struct job_result r;
  job_result_init(&r);
  r.error = -2; /* -ENOENT */
  json_t *j = to_json(&r);
  json_t *e = get(j, "error");
  cr_assert_str_eq(json_string_value(get(e, "code")), "io_error");
  cr_assert_str_eq(json_string_value(get(e, "message")), strerror(2));
  json_decref(j);
}

Test(result, fail_truncates_long_messages) {
  struct job_result r;
  job_result_init(&r);
  char big[1000];
  memset(big, 'm', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  job_result_fail(&r, CORDON_E_SPAWN_FAILED, "%s", big);
  cr_assert_eq(strlen(r.error_message), sizeof(r.error_message) - 1);
  json_t *j = to_json(&r);
  cr_assert_eq(json_string_length(get(get(j, "error"), "message")), sizeof(r.error_message) - 1);
  json_decref(j);
}

/* Regression (was a bug, fixed): job_result_fail() truncates error_message at 511 bytes with
 * vsnprintf, which can cut a multi-byte UTF-8 character in half; json_string()
 * then refuses the message and job_result_to_json() returns NULL, so the whole
 * result (exit code, output, error) is lost. Input: a message of 300 "é"
 * (0xC3 0xA9): the first 511 bytes end in a lone 0xC3. The same happens for
 * any message holding non-UTF-8 bytes, e.g. a path "/tmp/caf\xe9" quoted in a
 * spawn_failed or manifest diag. Expected: a result with a valid (cut back or
 * escaped) message. Reproduced end to end: `cordon-agent exec DIR` on a manifest
 * whose grant is {"path": "~/" + 300 x "\u00e9", "access": "ro"} (missing)
 * is refused with capability_denied, prints the stderr line but NO result
 * JSON on stdout (docs/DESIGN.md §2: the result is printed also when refused). */
Test(result, long_non_ascii_error_message_still_serialises) {
  struct job_result r;
  job_result_init(&r);
  char msg[601];
  for (size_t i = 0; i < 300; i++) {
    msg[2 * i] = '\xc3';
    msg[2 * i + 1] = '\xa9';
  }
  msg[600] = '\0';
  job_result_fail(&r, CORDON_E_SPAWN_FAILED, "%s", msg);
  json_t *j = job_result_to_json(&r);
  cr_assert_not_null(j, "the result JSON is lost");
  json_t *m = get(get(j, "error"), "message");
  cr_assert(utf8_valid((const uint8_t *)json_string_value(m), json_string_length(m)));
  json_decref(j);
}

/* Regression (was a bug, fixed): see above; a message with a non-UTF-8 byte (a Latin-1 path) loses
 * the whole result: job_result_to_json() returns NULL. */
Test(result, non_utf8_error_message_still_serialises) {
  struct job_result r;
  job_result_init(&r);
  job_result_fail(&r, CORDON_E_SPAWN_FAILED, "cannot open %s", "/tmp/caf\xe9/run.sh");
  r.ran = false;
  json_t *j = job_result_to_json(&r);
  cr_assert_not_null(j, "the result JSON is lost");
  cr_assert_str_eq(json_string_value(get(get(j, "error"), "code")), "spawn_failed");
  json_decref(j);
}

Test(result, dumps_as_compact_json) {
  struct job_result r;
  job_result_init(&r);
  r.ran = true;
  r.exited = true;
  set_buf(&r.out, "hi\n", 3);
  json_t *j = to_json(&r);
  char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  cr_assert_not_null(s);
  cr_assert_not_null(strstr(s, "\"exit_code\":0"));
  cr_assert_not_null(strstr(s, "\"stdout\":\"hi\\n\""));
  cr_assert_not_null(strstr(s, "\"error\":null"));
  free(s);
  json_decref(j);
  job_result_release(&r);
}

/* ---- the size bound (docs/DESIGN.md section 5.2) ---- */

/* A result with every field besides the output at its longest JSON: ids
 * at their buffers' length, the widest numbers, and the mechanism, the
 * reason and the error message all control bytes (six characters each). */
static void worst_envelope(struct job_result *r) {
  job_result_init(r);
  memset(r->job_id, 'f', sizeof(r->job_id) - 1);
  memset(r->device_id, 'f', sizeof(r->device_id) - 1);
  r->ran = r->exited = true;
  r->exit_code = -2147483647 - 1;
  r->wall_ms = (uint64_t)INT64_MIN; /* -9223372036854775808: the widest integer */
  r->timed_out = true;
  r->oom_killed = 1;
  r->orphans_killed = 4294967295u;
  r->requested = SANDBOX_LEVEL_CONTAINED;
  r->level = SANDBOX_LEVEL_CONTAINED;
  r->level_known = true;
  memset(r->mechanism, 1, sizeof(r->mechanism) - 1);
  memset(r->reason_store, 1, sizeof(r->reason_store) - 1);
  r->downgrade_reason = r->reason_store;
  r->lim_memory = r->lim_processes = r->lim_cpu = r->lim_time = r->lim_disk =
      LIMIT_MECH_PID_NAMESPACE;
  r->error = CORDON_E_PLATFORM_MISMATCH;
  memset(r->error_message, 1, sizeof(r->error_message) - 1);
}

/* The JSON characters of value (as it is inside a compact dump). */
static size_t value_len(json_t *v) {
  char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  cr_assert_not_null(t);
  size_t n = strlen(t);
  free(t);
  return n;
}

Test(result, no_output_makes_a_result_longer_than_result_json_max) {
  /* each stream's worst: control bytes (six characters each as a string),
   * quotes and backslashes (two), invalid UTF-8, four-byte characters */
  static const struct {
    const char *unit;
    size_t len;
  } fills[] = {{"\x01", 1},  {"\"", 1}, {"\\", 1}, {"\xff", 1}, {"\xf0\x9f\x98\x80", 4},
               {"\"\x01", 2}};
  size_t nf = sizeof(fills) / sizeof(fills[0]);
  uint8_t *bufs[6];
  for (size_t f = 0; f < nf; f++) {
    bufs[f] = malloc(RESULT_OUTPUT_MAX);
    cr_assert_not_null(bufs[f]);
    for (size_t i = 0; i < RESULT_OUTPUT_MAX; i++)
      bufs[f][i] = (uint8_t)fills[f].unit[i % fills[f].len];
  }
  for (size_t a = 0; a < nf; a++) {
    size_t b = (a + 1) % nf;
    struct job_result r;
    worst_envelope(&r);
    /* the buffers are borrowed: not released below */
    r.out = (struct result_buf){bufs[a], RESULT_OUTPUT_MAX, true};
    r.err = (struct result_buf){bufs[b], RESULT_OUTPUT_MAX, true};
    json_t *j = to_json(&r);
    char *text = json_dumps(j, JSON_COMPACT);
    cr_assert_not_null(text);
    size_t total = strlen(text), streams = 0;
    static const char *const keys[] = {"stdout", "stderr", "stdout_base64", "stderr_base64"};
    for (size_t k = 0; k < 4; k++) {
      json_t *v = json_object_get(j, keys[k]);
      if (v && !json_is_null(v)) {
        size_t n = value_len(v);
        cr_assert_leq(n, RESULT_STREAM_JSON_MAX(RESULT_OUTPUT_MAX), "fill %zu: %s is %zu", a,
                      keys[k], n);
        streams += n;
      }
    }
    cr_assert_leq(total - streams, RESULT_JSON_ENVELOPE_MAX, "the rest is %zu", total - streams);
    cr_assert_leq(total, RESULT_JSON_MAX, "fills %zu and %zu: %zu characters", a, b, total);
    /* and both come back byte for byte */
    uint8_t *got;
    size_t n;
    cr_assert_eq(job_result_output_decode(j, "stdout", RESULT_OUTPUT_MAX, &got, &n), 0);
    cr_assert(n == RESULT_OUTPUT_MAX && memcmp(got, bufs[a], n) == 0, "fill %zu", a);
    free(got);
    cr_assert_eq(job_result_output_decode(j, "stderr", RESULT_OUTPUT_MAX, &got, &n), 0);
    cr_assert(n == RESULT_OUTPUT_MAX && memcmp(got, bufs[b], n) == 0, "fill %zu", b);
    free(got);
    free(text);
    json_decref(j);
  }
  for (size_t f = 0; f < nf; f++)
    free(bufs[f]);
}

/* ---- job_result_output_decode ---- */

static json_t *parse(const char *text) {
  json_error_t e;
  json_t *j = json_loads(text, JSON_ALLOW_NUL, &e);
  cr_assert_not_null(j, "%s: %s", text, e.text);
  return j;
}

Test(result, decode_reads_both_forms_and_a_string_of_escapes_from_before) {
  static const struct {
    const char *json;
    const char *want;
    size_t len;
  } rows[] = {
      {"{\"stdout\":\"hi\\n\"}", "hi\n", 3},
      {"{\"stdout\":\"\"}", "", 0},
      {"{\"stdout\":null,\"stdout_base64\":\"AQID/w==\"}", "\x01\x02\x03\xff", 4},
      {"{\"stdout\":null,\"stdout_base64\":\"\"}", "", 0},
      /* what a server before base64 for control bytes stored */
      {"{\"stdout\":\"\\u0001\\u0000x\"}", "\x01\x00x", 3},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    json_t *j = parse(rows[i].json);
    uint8_t *got = NULL;
    size_t n = 99;
    cr_assert_eq(job_result_output_decode(j, "stdout", RESULT_OUTPUT_MAX, &got, &n), 0, "row %zu",
                 i);
    cr_assert_not_null(got);
    cr_assert_eq(n, rows[i].len, "row %zu", i);
    cr_assert_arr_eq(got, rows[i].want, n);
    free(got);
    json_decref(j);
  }
}

Test(result, decode_refuses_what_is_not_one_output_before_allocating) {
  static const struct {
    const char *json;
    size_t max;
    int want;
  } rows[] = {
      {"{\"stdout\":null}", 16, -ENODATA},
      {"{}", 16, -EINVAL},
      {"[]", 16, -EINVAL},
      {"{\"stdout\":\"a\",\"stdout_base64\":\"YQ==\"}", 16, -EINVAL},
      {"{\"stdout\":1}", 16, -EINVAL},
      {"{\"stdout\":null,\"stdout_base64\":7}", 16, -EINVAL},
      {"{\"stdout\":null,\"stdout_base64\":\"YQ\"}", 16, -EINVAL},
      {"{\"stdout\":null,\"stdout_base64\":\"Y*==\"}", 16, -EINVAL},
      {"{\"stdout\":null,\"stdout_base64\":\"YQ==YQ==\"}", 16, -EINVAL},
      {"{\"stdout\":\"12345\"}", 4, -E2BIG},
      {"{\"stdout\":null,\"stdout_base64\":\"MTIzNDU=\"}", 4, -E2BIG},
      {"{\"stdout\":null,\"stdout_base64\":\"MTIzNA==\"}", 4, 0},
      {"{\"stdout\":null,\"stdout_base64\":\"MTIzNDU2\"}", 5, -E2BIG},
      /* a text far beyond max: refused on its length, never decoded */
      {"{\"stdout\":null,\"stdout_base64\":\"********************************\"}", 8, -E2BIG},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    json_t *j = parse(rows[i].json);
    uint8_t *got = NULL;
    size_t n = 0;
    cr_assert_eq(job_result_output_decode(j, "stdout", rows[i].max, &got, &n), rows[i].want,
                 "row %zu: %s", i, rows[i].json);
    free(got);
    json_decref(j);
  }
}

/* Found by tests/fuzz/fuzz_result.c: one byte in base64 is four
 * characters, more than twice its length: the bound is 2n + 4. */
Test(result, short_streams_stay_within_their_bound_too) {
  for (size_t n = 0; n <= 8; n++) {
    static const uint8_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1}, quotes[8] = "\"\"\"\"\"\"\"\"";
    const uint8_t *fills[2] = {ones, quotes};
    for (int f = 0; f < 2; f++) {
      struct job_result r;
      job_result_init(&r);
      r.out = (struct result_buf){(uint8_t *)fills[f], n, false};
      json_t *j = to_json(&r);
      json_t *v = json_object_get(j, json_is_null(get(j, "stdout")) ? "stdout_base64" : "stdout");
      cr_assert_leq(value_len(v), RESULT_STREAM_JSON_MAX(n), "%zu bytes of fill %d", n, f);
      json_decref(j);
    }
  }
}
