/* Tests for core/id.c: the one 128-bit id and its hex form. */
#include "core/id.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

Test(id, hex_round_trips_and_is_lowercase) {
  uint8_t id[CORDON_ID_LEN], back[CORDON_ID_LEN];
  char hex[CORDON_ID_HEX_SIZE];
  for (int k = 0; k < 100; k++) {
    cordon_id_random(id);
    cordon_id_to_hex(id, hex);
    cr_assert_eq(strlen(hex), CORDON_ID_HEX_LEN);
    cr_assert(cordon_id_hex_valid(hex), "%s", hex);
    cr_assert_eq(cordon_id_from_hex(hex, back), 0);
    cr_assert_arr_eq(id, back, CORDON_ID_LEN);
  }
}

Test(id, refuses_wrong_length_and_non_hex_without_writing) {
  uint8_t out[CORDON_ID_LEN];
  memset(out, 0xaa, sizeof(out));
  const char *bad[] = {"",
                       "00",
                       "0123456789abcdef0123456789abcde",
                       "0123456789abcdef0123456789abcdef0",
                       "0123456789abcdef0123456789abcdeg",
                       "0123456789abcdef 123456789abcdef"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    cr_assert_eq(cordon_id_from_hex(bad[i], out), -EINVAL, "%s", bad[i]);
    cr_assert(!cordon_id_hex_valid(bad[i]), "%s", bad[i]);
  }
  for (size_t i = 0; i < sizeof(out); i++)
    cr_assert_eq(out[i], 0xaa);
  /* upper case parses but is not the canonical form */
  cr_assert_eq(cordon_id_from_hex("0123456789ABCDEF0123456789ABCDEF", out), 0);
  cr_assert(!cordon_id_hex_valid("0123456789ABCDEF0123456789ABCDEF"));
}
