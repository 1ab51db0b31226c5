/* cmdline_build is checked against the real parser (CommandLineToArgvW);
 * cmdline_env_block against the rules Windows expects. */
#include <windows.h>

#include <shellapi.h>
#include <stdlib.h>
#include <string.h>

#include "compat/win32.h"
#include "platform/windows/cmdline.h"
#include "tests/windows/wintest.h"

static void round_trip(char *const *argv) {
  wchar_t *cl = NULL;
  WT_EQ_INT(cmdline_build(argv, &cl), 0);
  int n = 0;
  wchar_t **back = CommandLineToArgvW(cl, &n);
  WT_CHECK(back != NULL, "CommandLineToArgvW failed");
  int want = 0;
  while (argv[want])
    want++;
  WT_EQ_INT(n, want);
  for (int i = 0; i < n; i++) {
    char *u = win_utf8(back[i]);
    WT_EQ_STR(u, argv[i]);
    free(u);
  }
  LocalFree(back);
  free(cl);
}

WT_TEST(cmdline, plain_arguments_are_not_quoted) {
  char *argv[] = {"C:\\x\\prog.exe", "a", "b", NULL};
  wchar_t *cl = NULL;
  WT_EQ_INT(cmdline_build(argv, &cl), 0);
  WT_CHECK(wcscmp(cl, L"C:\\x\\prog.exe a b") == 0, "%ls", cl);
  free(cl);
  round_trip(argv);
}

WT_TEST(cmdline, spaces_quotes_and_backslashes_survive) {
  char *argv[] = {
      "C:\\Program Files\\p.exe", "",         "two words",           "say \"hi\"", "ends\\",
      "ends with space\\",        "a\\\\\"b", "\\\\server\\share\\", "tab\there",  NULL};
  round_trip(argv);
}

WT_TEST(cmdline, utf8_arguments_survive) {
  char *argv[] = {"C:\\p.exe",
                  "gr\xc3\xbc\xc3\x9f"
                  "e",
                  "\xe6\x97\xa5\xe6\x9c\xac", NULL};
  round_trip(argv);
}

WT_TEST(cmdline, invalid_utf8_is_refused) {
  char *argv[] = {"C:\\p.exe", "\xff\xfe", NULL};
  wchar_t *cl = NULL;
  WT_EQ_INT(cmdline_build(argv, &cl), -EINVAL);
}

WT_TEST(cmdline, too_long_is_refused) {
  static char big[40000];
  memset(big, 'a', sizeof(big) - 1);
  char *argv[] = {"C:\\p.exe", big, NULL};
  wchar_t *cl = NULL;
  WT_EQ_INT(cmdline_build(argv, &cl), -EINVAL);
}

WT_TEST(env_block, sorted_without_case_and_double_nul_terminated) {
  char *env[] = {"b=2", "PATH=C:\\Windows", "a=1", "Zed=z", NULL};
  wchar_t *blk = NULL;
  WT_EQ_INT(cmdline_env_block(env, 4, &blk), 0);
  const wchar_t *want[] = {L"a=1", L"b=2", L"PATH=C:\\Windows", L"Zed=z"};
  const wchar_t *p = blk;
  for (int i = 0; i < 4; i++) {
    WT_CHECK(wcscmp(p, want[i]) == 0, "entry %d is %ls", i, p);
    p += wcslen(p) + 1;
  }
  WT_CHECK(*p == 0, "no final NUL");
  free(blk);
}

WT_TEST(env_block, later_duplicate_replaces_earlier) {
  char *env[] = {"Path=one", "TEMP=t", "PATH=two", NULL};
  wchar_t *blk = NULL;
  WT_EQ_INT(cmdline_env_block(env, 3, &blk), 0);
  WT_CHECK(wcscmp(blk, L"PATH=two") == 0, "first is %ls", blk);
  const wchar_t *p = blk + wcslen(blk) + 1;
  WT_CHECK(wcscmp(p, L"TEMP=t") == 0, "second is %ls", p);
  p += wcslen(p) + 1;
  WT_CHECK(*p == 0, "more than two entries");
  free(blk);
}

WT_TEST(env_block, bad_entries_are_refused) {
  char *noeq[] = {"NOVALUE", NULL};
  char *empty_name[] = {"=x", NULL};
  wchar_t *blk = NULL;
  WT_EQ_INT(cmdline_env_block(noeq, 1, &blk), -EINVAL);
  WT_EQ_INT(cmdline_env_block(empty_name, 1, &blk), -EINVAL);
  WT_EQ_INT(cmdline_env_block(NULL, 0, &blk), 0);
  WT_CHECK(blk[0] == 0 && blk[1] == 0, "empty block");
  free(blk);
}
