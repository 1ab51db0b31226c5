/* The quarantine walk of platform/linux/grants_linux.c run directly on
 * real directories (no agent, no bwrap: the end-to-end runs are in
 * test_sandbox_grants_linux.c): what a symlink's target must look like to
 * count as outward, and that no depth, path length, name length, count or
 * unreadable directory lets a new hidden entry stay where it was. The
 * grant here had no hidden entry and no symlink before "the job".
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "platform/linux/grants_linux.h"

static char dir[64];
static int dir_fd = -1;

static void make_dir(void) {
  snprintf(dir, sizeof(dir), "/tmp/cordon-qtest-XXXXXX");
  cr_assert(mkdtemp(dir));
  dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cr_assert(dir_fd >= 0);
}

static void drop_dir(void) {
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "chmod -R u+rwx %s 2>/dev/null; rm -rf %s", dir, dir);
  if (system(cmd) != 0)
    cr_log_warn("could not remove %s", dir);
  if (dir_fd >= 0)
    close(dir_fd);
}

/* One shell command's stdout (small). */
static char *capture(const char *cmd) {
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, p);
  buf[n] = '\0';
  pclose(p);
  return buf;
}

static void touch_at(int fd, const char *name) {
  int f = openat(fd, name, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  cr_assert(f >= 0, "create %s: %s", name, strerror(errno));
  close(f);
}

/* mkdirat chain of n levels named name below fd; calls at(level, fd) on
 * the way. Returns nothing: the fds are closed. */
static void chain(int fd, int n, const char *name, void (*at)(int level, int fd)) {
  int cur = dup(fd);
  for (int i = 1; i <= n; i++) {
    cr_assert(mkdirat(cur, name, 0755) == 0, "level %d: %s", i, strerror(errno));
    int next = openat(cur, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert(next >= 0);
    close(cur);
    cur = next;
    if (at)
      at(i, cur);
  }
  close(cur);
}

/* The quarantine of one writable grant, dir, that knew nothing before. */
static int quarantine(struct grants_quarantine_report *rep) {
  struct bwrap_mount m = {BWRAP_MOUNT_RW_FD, dir_fd, dir};
  size_t idx = 0;
  struct grant_set g = {.mounts = &m, .n_mounts = 1, .rw_grants = &idx, .n_rw_grants = 1};
  grants_quarantine_report_init(rep);
  return grants_quarantine_new(&g, "job1", rep);
}

static char *left_in_place(const char *pattern) {
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "cd %s && find . -name '%s' ! -path '*cordon-quarantined*' | sort",
           dir, pattern);
  return capture(cmd);
}

TestSuite(grants_quarantine, .init = make_dir, .fini = drop_dir);

Test(grants_quarantine, symlinks_are_outward_when_their_target_can_leave_the_grant) {
  cr_assert(mkdirat(dir_fd, "src", 0755) == 0 && mkdirat(dir_fd, "sub", 0755) == 0);
  touch_at(dir_fd, "src/main.c");
  cr_assert(symlinkat("src", dir_fd, "srclink") == 0);
  int sub = openat(dir_fd, "sub", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cr_assert(sub >= 0);
  static const struct {
    const char *target;
    bool at_sub; /* the link is in sub/ (depth 1), else in the root */
    bool outward;
  } cases[] = {
      {"src/main.c", false, false},
      {"./src//main.c", false, false},
      {"nothere", false, false},
      {"nothere/deeper/x", false, false},
      {"sub/../src/main.c", false, false},
      {"../src/main.c", true, false},
      {"src", false, false},
      {"/etc/passwd", false, true},
      {"/", false, true},
      {"..", false, true},
      {"../x", false, true},
      {"../.bashrc", false, true},
      {"src/../../.bashrc", false, true},
      {"../../.ssh/authorized_keys", true, true},
      {"nothere/../../x", false, true},
      {".git/config", false, true},      /* a hidden entry on the way */
      {"src/../.envrc", false, true},    /* ... however it is reached */
      {"srclink/main.c", false, true},   /* a symlink on the way */
      {"srclink", false, true},          /* a chain: the last one is a link */
      {"sub/../srclink/x", false, true}, /* ... anywhere */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int fd = cases[i].at_sub ? sub : dir_fd;
    char name[32];
    snprintf(name, sizeof(name), "l%zu", i);
    cr_assert(symlinkat(cases[i].target, fd, name) == 0);
    cr_expect_eq(grants_link_outward(fd, name, cases[i].at_sub ? 1 : 0), cases[i].outward,
                 "%s%s: expected %s", cases[i].at_sub ? "sub/" : "", cases[i].target,
                 cases[i].outward ? "outward" : "inside");
  }
  close(sub);
}

static void envrc_at_100_and_1000(int level, int fd) {
  if (level == 100 || level == 1000)
    touch_at(fd, ".envrc");
}

Test(grants_quarantine, a_tree_deeper_than_its_stack_is_moved_aside_whole_below_the_bound) {
  chain(dir_fd, 1000, "d", envrc_at_100_and_1000);
  struct grants_quarantine_report rep;
  cr_assert_eq(quarantine(&rep), 0);
  cr_assert_str_empty(left_in_place(".envrc"));
  cr_expect_eq(rep.n_hidden, 1, "the one at level 100, by name");
  cr_expect_eq(rep.n_unwalked, 1, "level %d and all below it", GRANTS_QUARANTINE_MAX_DEPTH + 1);
  cr_expect_eq(rep.n_failed, 0);
  grants_quarantine_report_release(&rep);
}

static void envrc_below_path_max(int level, int fd) {
  if (level == 30) {
    touch_at(fd, ".envrc");
    cr_assert(symlinkat("../../../../../../../../../../../../../../../../../../../../../../../../"
                        "../../../../../../../x",
                        fd, "up") == 0);
  }
}

Test(grants_quarantine, entries_below_a_path_longer_than_path_max_are_moved) {
  char name[NAME_MAX + 1];
  memset(name, 'n', 250);
  name[250] = '\0';
  chain(dir_fd, 30, name, envrc_below_path_max); /* 30 x 251 > PATH_MAX */
  struct grants_quarantine_report rep;
  cr_assert_eq(quarantine(&rep), 0);
  cr_assert_str_empty(left_in_place(".envrc"));
  cr_assert_str_empty(left_in_place("up"));
  cr_expect_eq(rep.n_hidden, 1);
  cr_expect_eq(rep.n_links, 1);
  cr_assert_eq(rep.named.n, 2);
  /* a path past the cut is named by its head and its tail */
  for (size_t i = 0; i < rep.named.n; i++)
    cr_expect(strlen(rep.named.v[i]) < GRANTS_QUARANTINE_NAME_CHARS + 2 * NAME_MAX &&
                  strstr(rep.named.v[i], "..."),
              "%s", rep.named.v[i]);
  grants_quarantine_report_release(&rep);
}

Test(grants_quarantine, many_entries_are_all_walked_and_the_note_names_only_the_first) {
  cr_assert(mkdirat(dir_fd, "many", 0755) == 0);
  int many = openat(dir_fd, "many", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (int i = 0; i < 100000; i++) {
    char n[32];
    snprintf(n, sizeof(n), "%sf%d", i % 1000 == 0 ? "." : "", i);
    touch_at(many, n);
  }
  close(many);
  touch_at(dir_fd, ".envrc");
  struct grants_quarantine_report rep;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  cr_assert_eq(quarantine(&rep), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  cr_log_info("the quarantine of 100,001 entries: %ld ms",
              (long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000));
  cr_expect_eq(rep.n_hidden, 101);
  cr_expect_eq(rep.named.n, GRANTS_QUARANTINE_MAX_NAMED);
  cr_assert_str_empty(left_in_place(".?*"));
  grants_quarantine_report_release(&rep);
}

Test(grants_quarantine, a_name_too_long_for_the_suffix_is_cut_and_moved) {
  char name[NAME_MAX + 1];
  memset(name, 'h', NAME_MAX);
  name[0] = '.';
  name[NAME_MAX] = '\0';
  touch_at(dir_fd, name);
  name[NAME_MAX - 1] = 'x';
  touch_at(dir_fd, name); /* the same cut */
  struct grants_quarantine_report rep;
  cr_assert_eq(quarantine(&rep), 0);
  cr_expect_eq(rep.n_hidden, 2);
  cr_assert_str_empty(left_in_place(".h*"));
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "ls -A %s | grep -c '^\\.hhh.*cordon-quarantined-job1-'", dir);
  cr_expect_str_eq(capture(cmd), "2\n");
  grants_quarantine_report_release(&rep);
}

Test(grants_quarantine, a_directory_it_cannot_search_or_change_is_moved_aside_whole) {
  /* as an account that cannot pass over file modes */
  if (getuid() == 0) {
    cr_assert(fchown(dir_fd, 65534, 65534) == 0);
    cr_assert(setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0);
  }
  static const struct {
    const char *name;
    mode_t mode;
  } cases[] = {{"locked", 0}, {"listonly", 0444}, {"nowrite", 0555}};
  for (size_t i = 0; i < 3; i++) {
    cr_assert(mkdirat(dir_fd, cases[i].name, 0755) == 0);
    int fd = openat(dir_fd, cases[i].name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    touch_at(fd, ".envrc");
    cr_assert(fchmod(fd, cases[i].mode) == 0);
    close(fd);
  }
  struct grants_quarantine_report rep;
  cr_assert_eq(quarantine(&rep), 0);
  cr_expect_eq(rep.n_unwalked, 3);
  cr_expect_eq(rep.n_hidden, 0);
  cr_expect_eq(rep.n_failed, 0);
  char want[64];
  for (size_t i = 0; i < 3; i++) {
    snprintf(want, sizeof(want), "%s", cases[i].name);
    cr_expect(faccessat(dir_fd, want, F_OK, AT_SYMLINK_NOFOLLOW) < 0, "%s left", want);
  }
  grants_quarantine_report_release(&rep);
}
