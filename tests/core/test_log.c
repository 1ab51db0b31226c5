/* Tests for core/log.c: one logfmt line per event. */
#include "core/log.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

Test(log, formats_time_level_program_message_and_fields) {
  char line[512];
  const char *kv[] = {"job", "6bf9", "user", "alice smith", "code", ""};
  /* 2026-12-01T10:05:47.123Z */
  core_log_format(line, sizeof(line), 1796119547123ULL, CORE_LOG_WARN, "cordon-server", "job sent",
                  kv, 3);
  cr_assert_str_eq(line, "ts=2026-12-01T10:05:47.123Z level=warn prog=cordon-server "
                         "msg=\"job sent\" job=6bf9 user=\"alice smith\" code=\"\"");
}

Test(log, dates_across_leap_years_and_the_epoch) {
  char line[256];
  core_log_format(line, sizeof(line), 0, CORE_LOG_INFO, "p", "m", NULL, 0);
  cr_assert(strncmp(line, "ts=1970-01-01T00:00:00.000Z ", 28) == 0, "%s", line);
  core_log_format(line, sizeof(line), 951782400000ULL + 999, CORE_LOG_INFO, "p", "m", NULL, 0);
  cr_assert(strncmp(line, "ts=2000-02-29T00:00:00.999Z ", 28) == 0, "%s", line);
  core_log_format(line, sizeof(line), 4107542399000ULL, CORE_LOG_INFO, "p", "m", NULL, 0);
  cr_assert(strncmp(line, "ts=2100-02-28T23:59:59.000Z ", 28) == 0, "%s", line);
}

Test(log, values_that_would_break_the_line_are_quoted_and_escaped) {
  char line[256];
  const char *kv[] = {"name", "a\"b\\c\nd=e\x1b", "bad key!", "v"};
  core_log_format(line, sizeof(line), 0, CORE_LOG_ERROR, "p", "x", kv, 2);
  cr_assert(strstr(line, " name=\"a\\\"b\\\\c\\x0ad=e\\x1b\" bad_key_=v"), "%s", line);
  cr_assert(strchr(line, '\n') == NULL);
}

/* C1 controls (U+0080..U+009F, UTF-8 c2 80..c2 9f: CSI is c2 9b) act on a
 * terminal as ESC sequences do: a peer's text must not carry them into a log. */
Test(log, c1_controls_are_escaped_like_c0) {
  char line[256];
  const char *kv[] = {"reason", "a\xc2\x9b"
                                "31mred\xc2\x85z \xc2\xa0ok"};
  core_log_format(line, sizeof(line), 0, CORE_LOG_WARN, "p", "x", kv, 1);
  cr_assert(strstr(line, " reason=\"a\\xc2\\x9b31mred\\xc2\\x85z \xc2\xa0ok\""), "%s", line);
  cr_assert(strstr(line, "\xc2\x9b") == NULL);
}

Test(log, a_cut_line_stays_terminated) {
  char line[40];
  size_t n =
      core_log_format(line, sizeof(line), 0, CORE_LOG_INFO, "prog", "a long message here", NULL, 0);
  cr_assert_eq(n, sizeof(line) - 1);
  cr_assert_eq(strlen(line), n);
}

Test(log, levels_parse_and_filter) {
  enum core_log_level l = CORE_LOG_ERROR;
  cr_assert_eq(core_log_level_parse("debug", &l), 0);
  cr_assert_eq(l, CORE_LOG_DEBUG);
  cr_assert_eq(core_log_level_parse("verbose", &l), -EINVAL);
  cr_assert_eq(l, CORE_LOG_DEBUG);
  core_log_set_level(CORE_LOG_WARN);
  cr_assert(!core_log_enabled(CORE_LOG_INFO));
  cr_assert(core_log_enabled(CORE_LOG_ERROR));
  core_log_set_level(CORE_LOG_INFO);
}

static int seen;
static char last[512];
static void capture(const struct core_log_event *ev, void *ctx) {
  (void)ctx;
  seen++;
  snprintf(last, sizeof(last), "%s|%s|%zu|%s", core_log_level_name(ev->level), ev->msg, ev->n_kv,
           ev->n_kv ? ev->kv[1] : "");
}

Test(log, a_writer_receives_events_above_the_level) {
  core_log_set_writer(capture, NULL);
  core_log_set_level(CORE_LOG_INFO);
  core_log_kv(CORE_LOG_DEBUG, "hidden", "k", "v", NULL);
  cr_assert_eq(seen, 0);
  core_log_kv(CORE_LOG_WARN, "pairing failed", "addr", "127.0.0.1:5555", "reason", "bad_code",
              NULL);
  cr_assert_eq(seen, 1);
  cr_assert_str_eq(last, "warn|pairing failed|2|127.0.0.1:5555");
  core_log("plain %d", 7);
  cr_assert_str_eq(last, "info|plain 7|0|");
  core_log_set_writer(NULL, NULL);
}
