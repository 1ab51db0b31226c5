#include <criterion/criterion.h>
#include <sodium.h>
#include <string.h>

#include "proto/keyfile.h"

static void setup(void) {
  cr_assert(sodium_init() >= 0);
}

TestSuite(keyfile, .init = setup);

Test(keyfile, format_then_parse_round_trips) {
  uint8_t key[32], back[32];
  randombytes_buf(key, sizeof(key));
  char line[KEYFILE_MAX_BYTES];
  size_t len = 0;
  cr_assert_eq(keyfile_format(KEYFILE_PUBLISHER_PUBLIC, key, "id=abc", line, sizeof(line), &len),
               0);
  cr_assert_eq(strncmp(line, "cordon-publisher-v1 ", 20), 0);
  cr_assert_eq(line[len - 1], '\n');
  cr_assert_eq(strlen(line), len);
  cr_assert_eq(keyfile_parse(KEYFILE_PUBLISHER_PUBLIC, line, len, back, NULL), 0);
  cr_assert_eq(memcmp(key, back, 32), 0);
}

Test(keyfile, parses_without_newline_and_with_crlf) {
  uint8_t key[32] = {1, 2, 3}, back[32];
  char line[KEYFILE_MAX_BYTES];
  size_t len = 0;
  cr_assert_eq(keyfile_format(KEYFILE_NOISE_SECRET, key, NULL, line, sizeof(line), &len), 0);
  cr_assert_eq(keyfile_parse(KEYFILE_NOISE_SECRET, line, len - 1, back, NULL), 0);
  line[len - 1] = '\r';
  line[len] = '\n';
  cr_assert_eq(keyfile_parse(KEYFILE_NOISE_SECRET, line, len + 1, back, NULL), 0);
  cr_assert_eq(memcmp(key, back, 32), 0);
}

Test(keyfile, refuses_a_key_of_another_kind) {
  uint8_t key[32] = {0}, back[32];
  char line[KEYFILE_MAX_BYTES];
  size_t len = 0;
  struct cordon_diag d = {{0}};
  cr_assert_eq(keyfile_format(KEYFILE_PUBLISHER_SECRET, key, NULL, line, sizeof(line), &len), 0);
  cr_assert_eq(keyfile_parse(KEYFILE_PUBLISHER_PUBLIC, line, len, back, &d),
               CORDON_E_CONFIG_INVALID);
  cr_assert(strstr(d.msg, "cordon-publisher-secret-v1"), "%s", d.msg);
}

Test(keyfile, refuses_malformed_lines) {
  static const char *const bad[] = {
      "",
      "cordon-publisher-v1",
      "cordon-publisher-v1 ",
      "cordon-publisher-v1 AAAA",
      "cordon-publisher-v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",     /* 43 chars */
      "cordon-publisher-v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", /* too long */
      "cordon-publisher-v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA*=",
      "cordon-publisher-v1  AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
      "cordon-publisher-v2 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
      "cordon-publisher-v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\nsecond line",
      "cordon-publisher-v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= bad\x01comment",
  };
  uint8_t back[32];
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct cordon_diag d = {{0}};
    cr_expect_eq(keyfile_parse(KEYFILE_PUBLISHER_PUBLIC, bad[i], strlen(bad[i]), back, &d),
                 CORDON_E_CONFIG_INVALID, "accepted case %zu", i);
    cr_expect(d.msg[0], "no diagnostic for case %zu", i);
  }
  const char *good = "cordon-publisher-v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= a comment";
  cr_assert_eq(keyfile_parse(KEYFILE_PUBLISHER_PUBLIC, good, strlen(good), back, NULL), 0);
}

Test(keyfile, refuses_oversized_input_and_bad_comment_on_format) {
  char big[KEYFILE_MAX_BYTES + 10];
  memset(big, 'A', sizeof(big));
  uint8_t key[32] = {0};
  cr_assert_eq(keyfile_parse(KEYFILE_PUBLISHER_PUBLIC, big, sizeof(big), key, NULL),
               CORDON_E_CONFIG_INVALID);
  char line[KEYFILE_MAX_BYTES];
  size_t len;
  cr_assert_eq(keyfile_format(KEYFILE_PUBLISHER_PUBLIC, key, "new\nline", line, sizeof(line), &len),
               CORDON_E_USAGE);
}
