/* platform/fs.h on Windows: copying a package tree, removing a tree,
 * mkdir -p. */
#include <windows.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "compat/posix.h"
#include "platform/fs.h"
#include "tests/windows/wintest.h"

static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  WT_CHECK(f != NULL, "create %s", path);
  fputs(text, f);
  fclose(f);
}

static bool exists(const char *p) {
  return GetFileAttributesA(p) != INVALID_FILE_ATTRIBUTES;
}

WT_TEST(fs, copy_tree_copies_files_and_directories) {
  const char *src = wt_tmpdir(), *dst = wt_tmpdir();
  char p[MAX_PATH * 3];
  snprintf(p, sizeof(p), "%s\\a\\b", src);
  WT_EQ_INT(fs_mkdir_p(p, 0755), 0);
  snprintf(p, sizeof(p), "%s\\top.txt", src);
  put(p, "top");
  snprintf(p, sizeof(p), "%s\\a\\b\\deep.txt", src);
  put(p, "deep");
  int s = open(src, O_RDONLY | O_DIRECTORY), d = open(dst, O_RDONLY | O_DIRECTORY);
  struct cordon_diag diag = {{0}};
  WT_EQ_INT(fs_copy_tree(s, d, &diag), 0);
  snprintf(p, sizeof(p), "%s\\a\\b\\deep.txt", dst);
  FILE *f = fopen(p, "rb");
  WT_CHECK(f != NULL, "not copied: %s", p);
  char buf[16] = {0};
  fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  WT_EQ_STR(buf, "deep");
  close(s);
  close(d);
}

WT_TEST(fs, copy_tree_refuses_the_staging_dir_inside_the_source) {
  const char *src = wt_tmpdir();
  char inner[MAX_PATH * 3];
  snprintf(inner, sizeof(inner), "%s\\state\\jobs\\x", src);
  WT_EQ_INT(fs_mkdir_p(inner, 0700), 0);
  int s = open(src, O_RDONLY | O_DIRECTORY), d = open(inner, O_RDONLY | O_DIRECTORY);
  struct cordon_diag diag = {{0}};
  WT_EQ_INT(fs_copy_tree(s, d, &diag), CORDON_E_USAGE);
  WT_CHECK(strstr(diag.msg, "staging directory") != NULL, "%s", diag.msg);
  close(s);
  close(d);
}

WT_TEST(fs, copy_tree_refuses_too_deep_and_leaves_nothing) {
  const char *src = wt_tmpdir(), *dst = wt_tmpdir();
  char p[MAX_PATH * 3];
  int n = snprintf(p, sizeof(p), "%s", src);
  for (int i = 0; i < STAGE_MAX_DEPTH + 2 && n < (int)sizeof(p) - 4; i++)
    n += snprintf(p + n, sizeof(p) - (size_t)n, "\\d");
  WT_EQ_INT(fs_mkdir_p(p, 0755), 0);
  int s = open(src, O_RDONLY | O_DIRECTORY), d = open(dst, O_RDONLY | O_DIRECTORY);
  struct cordon_diag diag = {{0}};
  WT_EQ_INT(fs_copy_tree(s, d, &diag), CORDON_E_PACKAGE_TOO_LARGE);
  char first[MAX_PATH * 3];
  snprintf(first, sizeof(first), "%s\\d", dst);
  WT_CHECK(!exists(first), "a failed copy left files behind");
  close(s);
  close(d);
}

WT_TEST(fs, remove_tree_removes_everything_even_read_only) {
  const char *base = wt_tmpdir();
  char p[MAX_PATH * 3];
  snprintf(p, sizeof(p), "%s\\victim\\x\\y", base);
  WT_EQ_INT(fs_mkdir_p(p, 0755), 0);
  snprintf(p, sizeof(p), "%s\\victim\\x\\ro.txt", base);
  put(p, "ro");
  SetFileAttributesA(p, FILE_ATTRIBUTE_READONLY);
  int b = open(base, O_RDONLY | O_DIRECTORY);
  WT_EQ_INT(fs_remove_tree_at(b, "victim"), 0);
  snprintf(p, sizeof(p), "%s\\victim", base);
  WT_CHECK(!exists(p), "still there");
  WT_EQ_INT(fs_remove_tree_at(b, "victim"), 0); /* gone is fine */
  close(b);
}

WT_TEST(fs, mkdir_p_with_both_separators) {
  const char *base = wt_tmpdir();
  char p[MAX_PATH * 3];
  snprintf(p, sizeof(p), "%s/one\\two/three", base);
  WT_EQ_INT(fs_mkdir_p(p, 0700), 0);
  WT_EQ_INT(fs_mkdir_p(p, 0700), 0); /* exists: fine */
  snprintf(p, sizeof(p), "%s\\one\\two\\three", base);
  WT_CHECK(exists(p), "not made");
}
