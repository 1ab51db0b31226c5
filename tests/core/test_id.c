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

Test(id, ordered_ids_begin_with_the_time_and_sort_by_it) {
  uint8_t a[CORDON_ID_LEN], b[CORDON_ID_LEN], c[CORDON_ID_LEN];
  uint64_t ms = 0x0123456789abULL; /* 48 bits */
  cordon_id_ordered(a, ms);
  const uint8_t be[CORDON_ID_TIME_LEN] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab};
  cr_assert_arr_eq(a, be, CORDON_ID_TIME_LEN, "the time, big-endian, first");
  cordon_id_ordered(b, ms);
  cr_assert_arr_eq(b, be, CORDON_ID_TIME_LEN);
  cr_assert_arr_neq(a + CORDON_ID_TIME_LEN, b + CORDON_ID_TIME_LEN,
                    CORDON_ID_LEN - CORDON_ID_TIME_LEN, "the rest is random");
  /* a later millisecond sorts after, whatever the random bytes, also in
   * the hex form the database orders by */
  char ha[CORDON_ID_HEX_SIZE], hc[CORDON_ID_HEX_SIZE];
  for (int k = 0; k < 200; k++) {
    cordon_id_ordered(a, ms + (uint64_t)k);
    cordon_id_ordered(c, ms + (uint64_t)k + 1);
    cr_assert_lt(memcmp(a, c, CORDON_ID_LEN), 0);
    cordon_id_to_hex(a, ha);
    cordon_id_to_hex(c, hc);
    cr_assert_lt(strcmp(ha, hc), 0, "%s %s", ha, hc);
  }
  /* only the low 48 bits of the time are kept */
  cordon_id_ordered(c, ms | (0xffffULL << 48));
  cr_assert_arr_eq(c, be, CORDON_ID_TIME_LEN);
}
