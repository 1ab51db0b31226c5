/* A tiny test runner for the Windows tests (Criterion does not build with
 * mingw-w64). Tests register themselves; each runs in the same process,
 * a failed check ends that test and the run's exit status is the number
 * of failed tests (capped at 100).
 *
 *   WT_TEST(sandbox, kills_the_tree_at_timeout) { WT_CHECK(x == 1, "x is %d", x); }
 *
 * Usage: test.exe [--list] [NAME-SUBSTRING]
 */
#ifndef CORDON_TESTS_WINDOWS_WINTEST_H
#define CORDON_TESTS_WINDOWS_WINTEST_H

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

struct wt_test {
  const char *suite, *name, *file;
  void (*fn)(void);
  struct wt_test *next;
};

void wt_register(struct wt_test *t);
void wt_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(gnu_printf, 3, 4), noreturn));
void wt_skip(const char *why) __attribute__((noreturn));
/* A fresh empty directory (UTF-8 path, '\' separators; never freed). */
const char *wt_tmpdir(void);
/* Wine's version string when running under Wine, else NULL. */
const char *wine_version(void);

#define WT_TEST(suite, name)                                                                       \
  static void wt_fn_##suite##_##name(void);                                                        \
  static struct wt_test wt_t_##suite##_##name = {#suite, #name, __FILE__, wt_fn_##suite##_##name,  \
                                                 NULL};                                            \
  __attribute__((constructor)) static void wt_reg_##suite##_##name(void) {                         \
    wt_register(&wt_t_##suite##_##name);                                                           \
  }                                                                                                \
  static void wt_fn_##suite##_##name(void)

#define WT_CHECK(cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      wt_fail(__FILE__, __LINE__, "check failed: " #cond " — " __VA_ARGS__);                       \
  } while (0)

#define WT_EQ_INT(a, b)                                                                            \
  do {                                                                                             \
    long long wt_a = (long long)(a), wt_b = (long long)(b);                                        \
    if (wt_a != wt_b)                                                                              \
      wt_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, wt_a, wt_b);                   \
  } while (0)

#define WT_EQ_STR(a, b)                                                                            \
  do {                                                                                             \
    const char *wt_a = (a), *wt_b = (b);                                                           \
    if (!wt_a || !wt_b || strcmp(wt_a, wt_b) != 0)                                                 \
      wt_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, wt_a ? wt_a : "(null)",    \
              wt_b ? wt_b : "(null)");                                                             \
  } while (0)

#endif
