/* core/ratelimit.c: which events of a run are written, what each line
 * says was suppressed, windows, the table by address. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "core/ratelimit.h"

Test(ratelimit, the_first_burst_then_powers_of_two_each_with_what_it_skipped) {
  struct core_ratelimit rl = {0};
  uint64_t total_sup = 0, last = 0;
  int written = 0;
  for (uint64_t n = 1; n <= 10000; n++) {
    uint64_t sup = 99;
    bool w = core_ratelimit_hit(&rl, 1000, &sup);
    bool want = n <= CORE_RATELIMIT_BURST || (n & (n - 1)) == 0;
    cr_assert_eq(w, want, "event %llu", (unsigned long long)n);
    if (w) {
      written++;
      total_sup += sup;
      cr_assert_eq(sup, n - last - 1, "event %llu says %llu", (unsigned long long)n,
                   (unsigned long long)sup);
      last = n;
    } else {
      cr_assert_eq(sup, 99, "untouched when not written");
    }
  }
  cr_assert_eq(written, 5 + 11); /* 1..5, 8, 16, ..., 8192 */
  cr_assert_eq(total_sup + (uint64_t)written, 8192);
}

Test(ratelimit, a_window_starts_again_and_carries_what_it_suppressed) {
  struct core_ratelimit rl = {.window_ms = 60000};
  uint64_t sup;
  for (int i = 0; i < 7; i++) /* 1..5 written, 6 and 7 not */
    core_ratelimit_hit(&rl, 0, &sup);
  cr_assert(core_ratelimit_hit(&rl, 59999, &sup), "the 8th is written");
  cr_assert_eq(sup, 2, "the 6th and 7th");
  cr_assert(!core_ratelimit_hit(&rl, 59999, &sup), "the 9th is not");
  cr_assert(core_ratelimit_hit(&rl, 60000, &sup), "a new window: its first is written");
  cr_assert_eq(sup, 1, "the old window's 9th");
  for (int i = 0; i < 4; i++)
    cr_assert(core_ratelimit_hit(&rl, 60001, &sup), "a whole new burst");
  cr_assert(!core_ratelimit_hit(&rl, 60001, &sup));
}

Test(ratelimit, the_table_keys_by_address_and_reuses_the_oldest_slot) {
  static struct core_ratelimit_table t;
  core_ratelimit_table_init(&t, 60000);
  char host[64];
  core_ratelimit_addr_host("10.0.0.1:4242", host, sizeof(host));
  cr_assert_str_eq(host, "10.0.0.1");
  core_ratelimit_addr_host("[::1]:80", host, sizeof(host));
  cr_assert_str_eq(host, "::1");
  core_ratelimit_addr_host("fe80::1", host, sizeof(host));
  cr_assert_str_eq(host, "fe80::1", "a bare v6 address is kept whole");
  uint64_t sup;
  for (int i = 0; i < CORE_RATELIMIT_BURST; i++)
    cr_assert(core_ratelimit_table_hit(&t, "a", 0, &sup));
  cr_assert(!core_ratelimit_table_hit(&t, "a", 0, &sup), "a's 6th");
  cr_assert(core_ratelimit_table_hit(&t, "b", 0, &sup), "b is counted apart");
  /* fill every slot: a (the oldest) is the one reused */
  for (int i = 0; i < CORE_RATELIMIT_TABLE_SLOTS; i++) {
    char k[16];
    snprintf(k, sizeof(k), "k%d", i);
    core_ratelimit_table_hit(&t, k, 1 + i, &sup);
  }
  cr_assert(core_ratelimit_table_hit(&t, "a", 5000, &sup), "a starts again");
  cr_assert_eq(sup, 0, "nothing carried over from an evicted slot");
}
