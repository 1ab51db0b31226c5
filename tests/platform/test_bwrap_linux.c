/* Tests for platform/linux/bwrap.c: the pure bwrap argv builder.
 *
 * Each test builds an argv from a hand-made struct bwrap_host, a struct
 * bwrap_input and a manifest parsed from a JSON literal; no bwrap is run. */
#include "core/manifest.h"
#include "platform/linux/bwrap.h"
#include "platform/linux/grants_linux.h"
#include "platform/strv.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NV "\"name\":\"t\",\"version\":\"1\""
#define BASE NV ",\"entry\":[\"/bin/sh\",\"run.sh\"]"

#define PACKAGE_FD 7
#define SECCOMP_FD 9

static const struct bwrap_base host_base[] = {
    {"/usr", NULL},      {"/bin", "usr/bin"},     {"/sbin", "usr/sbin"},
    {"/lib", "usr/lib"}, {"/lib64", "usr/lib64"}, {"/etc", NULL},
};
static const char *const host_blind_files[] = {"/etc/shadow", "/etc/ssh/ssh_host_ed25519_key"};
static const char *const host_blind_dirs[] = {"/etc/cordon-agent", "/etc/ssl/private"};

static const struct bwrap_host test_host = {
    .bwrap_path = "/usr/bin/bwrap",
    .base = host_base,
    .n_base = sizeof(host_base) / sizeof(host_base[0]),
    .blind_files = host_blind_files,
    .n_blind_files = 2,
    .blind_dirs = host_blind_dirs,
    .n_blind_dirs = 2,
};

/* grants as grants_resolve would hand them over: grants, then blinds/overlays */
static const struct bwrap_mount test_mounts[] = {
    {BWRAP_MOUNT_RO_FD, 11, "/home/cordon-job/Documents"},
    {BWRAP_MOUNT_RW_FD, 12, "/home/cordon-job/src"},
    {BWRAP_MOUNT_BLIND_DIR, -1, "/home/cordon-job/src/.ssh"},
    {BWRAP_MOUNT_BLIND_FILE, -1, "/home/cordon-job/src/.netrc"},
    {BWRAP_MOUNT_RO_FD, 13, "/home/cordon-job/src/.git/hooks"},
    {BWRAP_MOUNT_RW_FD, 14, "/cordon/workspace/out"},
};
#define N_TEST_MOUNTS (sizeof(test_mounts) / sizeof(test_mounts[0]))

struct fx {
  struct manifest *m;
  struct bwrap_host host;
  struct bwrap_input in;
  struct strv argv;
  char **a; /* argv.v */
  size_t n; /* argv.n */
};

static char *default_args[] = {"world", "--bind", "/", "/"};

/* Build with the test host, the test mounts and two dispatch args. */
static void fx_build_with(struct fx *f, const char *json, const struct bwrap_mount *mounts,
                          size_t n_mounts, char *const *args, size_t n_args) {
  memset(f, 0, sizeof(*f));
  struct cordon_diag d = {{0}};
  int r = manifest_parse(json, strlen(json), &f->m, &d);
  cr_assert_eq(r, 0, "manifest: %s", d.msg);
  f->host = test_host;
  f->in.m = f->m;
  f->in.entry = manifest_entry_for(f->m, MANIFEST_PLATFORM_LINUX);
  cr_assert_not_null(f->in.entry);
  f->in.args = args;
  f->in.n_args = n_args;
  f->in.home = "/home/cordon-job";
  f->in.user = "cordon-job";
  f->in.package_fd = PACKAGE_FD;
  f->in.seccomp_fd = SECCOMP_FD;
  f->in.mounts = mounts;
  f->in.n_mounts = n_mounts;
  strv_init(&f->argv);
  cr_assert_eq(bwrap_argv_build(&f->host, &f->in, &f->argv), 0);
  cr_assert_eq(f->argv.err, 0);
  f->a = f->argv.v;
  f->n = f->argv.n;
  cr_assert_not_null(f->a);
  cr_assert_null(f->a[f->n], "argv is NULL-terminated");
}

static void fx_build(struct fx *f, const char *json) {
  fx_build_with(f, json, test_mounts, N_TEST_MOUNTS, default_args, 2);
}

static void fx_release(struct fx *f) {
  strv_release(&f->argv);
  manifest_free(f->m);
}

/* ---- argv search helpers; all stop at the "--" that ends bwrap's options
 * unless told otherwise ---- */

/* index of the "--" that ends bwrap's options */
static size_t end_of_options(const struct fx *f) {
  for (size_t i = 1; i < f->n; i++)
    if (strcmp(f->a[i], "--") == 0)
      return i;
  cr_assert_fail("no \"--\" in argv");
  return 0;
}

/* first index >= from, < end, where a[i..] matches the k strings; -1 if none */
static long find_seq(const struct fx *f, size_t from, const char *const *seq, size_t k) {
  size_t end = end_of_options(f);
  for (size_t i = from; i + k <= end; i++) {
    size_t j = 0;
    while (j < k && strcmp(f->a[i + j], seq[j]) == 0)
      j++;
    if (j == k)
      return (long)i;
  }
  return -1;
}

static long find_flag(const struct fx *f, const char *flag) {
  const char *seq[] = {flag};
  return find_seq(f, 1, seq, 1);
}

static long find_pair(const struct fx *f, const char *a, const char *b) {
  const char *seq[] = {a, b};
  return find_seq(f, 1, seq, 2);
}

static long find_triple(const struct fx *f, const char *a, const char *b, const char *c) {
  const char *seq[] = {a, b, c};
  return find_seq(f, 1, seq, 3);
}

static size_t count_flag(const struct fx *f, const char *flag) {
  size_t end = end_of_options(f), c = 0;
  for (size_t i = 1; i < end; i++)
    c += strcmp(f->a[i], flag) == 0;
  return c;
}

static size_t count_pair(const struct fx *f, const char *a, const char *b) {
  size_t end = end_of_options(f), c = 0;
  for (size_t i = 1; i + 1 < end; i++)
    c += strcmp(f->a[i], a) == 0 && strcmp(f->a[i + 1], b) == 0;
  return c;
}

static bool is_mount_flag(const char *s) {
  static const char *const flags[] = {
      "--bind",         "--ro-bind",      "--dev-bind",    "--bind-try", "--ro-bind-try",
      "--dev-bind-try", "--bind-fd",      "--ro-bind-fd",  "--tmpfs",    "--symlink",
      "--proc",         "--dev",          "--mqueue",      "--dir",      "--file",
      "--bind-data",    "--ro-bind-data", "--overlay-src", "--overlay",  "--tmp-overlay",
      "--ro-overlay"};
  for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
    if (strcmp(s, flags[i]) == 0)
      return true;
  return false;
}

/* ---- the command and namespaces ---- */

Test(bwrap, starts_with_the_configured_bwrap_path) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  cr_assert_str_eq(f.a[0], "/usr/bin/bwrap");
  fx_release(&f);

  memset(&f, 0, sizeof(f));
  struct manifest *m = NULL;
  struct cordon_diag d = {{0}};
  const char *json = "{" BASE "}";
  cr_assert_eq(manifest_parse(json, strlen(json), &m, &d), 0);
  struct bwrap_host h = test_host;
  h.bwrap_path = "/opt/bwrap/bin/bwrap";
  struct bwrap_input in = {
      .m = m, .entry = &m->entry[0], .home = "/h", .user = "u", .package_fd = 3, .seccomp_fd = 4};
  struct strv v;
  strv_init(&v);
  cr_assert_eq(bwrap_argv_build(&h, &in, &v), 0);
  cr_assert_str_eq(v.v[0], "/opt/bwrap/bin/bwrap");
  strv_release(&v);
  manifest_free(m);
}

Test(bwrap, unshares_every_namespace_and_the_network_without_net) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  static const char *const ns[] = {"--unshare-user", "--unshare-ipc",    "--unshare-pid",
                                   "--unshare-uts",  "--unshare-cgroup", "--unshare-net"};
  for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
    cr_expect_eq(count_flag(&f, ns[i]), 1, "%s once", ns[i]);
  cr_expect_lt(find_flag(&f, "--share-net"), 0);
  fx_release(&f);

  fx_build(&f, "{" BASE ",\"capabilities\":{\"net\":false}}");
  cr_expect_geq(find_flag(&f, "--unshare-net"), 0, "explicit net:false");
  fx_release(&f);
}

Test(bwrap, keeps_the_network_namespace_only_with_net) {
  struct fx f;
  fx_build(&f, "{" BASE ",\"capabilities\":{\"net\":true}}");
  cr_assert_lt(find_flag(&f, "--unshare-net"), 0);
  cr_assert_lt(find_flag(&f, "--unshare-all"), 0, "--unshare-all would unshare the net too");
  static const char *const ns[] = {"--unshare-user", "--unshare-ipc", "--unshare-pid",
                                   "--unshare-uts", "--unshare-cgroup"};
  for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
    cr_expect_geq(find_flag(&f, ns[i]), 0, "%s with net", ns[i]);
  fx_release(&f);
}

Test(bwrap, disables_nested_userns_and_drops_everything) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  long disable = find_flag(&f, "--disable-userns");
  cr_assert_geq(disable, 0);
  /* bwrap refuses --disable-userns unless a user namespace is created */
  cr_assert_geq(find_flag(&f, "--unshare-user"), 0);
  cr_assert_geq(find_flag(&f, "--die-with-parent"), 0);
  cr_assert_geq(find_flag(&f, "--new-session"), 0);
  cr_assert_geq(find_pair(&f, "--cap-drop", "ALL"), 0);
  cr_assert_lt(find_flag(&f, "--cap-add"), 0);
  cr_assert_eq(count_flag(&f, "--cap-drop"), 1);
  fx_release(&f);
}

/* ---- the base view ---- */

Test(bwrap, base_entries_become_ro_binds_or_symlinks) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  for (size_t i = 0; i < test_host.n_base; i++) {
    const struct bwrap_base *b = &test_host.base[i];
    if (b->link_target)
      cr_expect_geq(find_triple(&f, "--symlink", b->link_target, b->path), 0, "%s", b->path);
    else
      cr_expect_geq(find_triple(&f, "--ro-bind", b->path, b->path), 0, "%s", b->path);
    /* never writable */
    cr_expect_lt(find_triple(&f, "--bind", b->path, b->path), 0, "%s", b->path);
  }
  cr_assert_geq(find_pair(&f, "--proc", "/proc"), 0);
  fx_release(&f);
}

/* /dev: a read-only directory with only the host's pseudo-devices bound
 * on it; bwrap's --dev (for its devpts) is made read-only right after. */
Test(bwrap, dev_is_read_only_with_only_pseudo_devices) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  cr_assert_lt(find_pair(&f, "--dev", "/dev"), 0, "bwrap's --dev is an unsized writable tmpfs");
  const char *seq[] = {"--dev", SANDBOX_DEV_DIR, "--remount-ro", SANDBOX_DEV_DIR};
  cr_assert_geq(find_seq(&f, 1, seq, 4), 0);
  cr_assert_eq(count_flag(&f, "--dev"), 1);
  static const char *const nodes[] = {"/dev/null",   "/dev/zero",    "/dev/full",
                                      "/dev/random", "/dev/urandom", "/dev/tty"};
  size_t end = end_of_options(&f);
  size_t n_dev_bind = 0;
  for (size_t i = 1; i + 2 < end; i++) {
    if (strcmp(f.a[i], "--dev-bind") != 0)
      continue;
    n_dev_bind++;
    bool known = false;
    for (size_t k = 0; k < sizeof(nodes) / sizeof(nodes[0]); k++)
      known = known || strcmp(f.a[i + 1], nodes[k]) == 0;
    cr_expect(known, "--dev-bind of %s", f.a[i + 1]);
    cr_expect_str_eq(f.a[i + 1], f.a[i + 2], "bound on its own path");
  }
  cr_assert_eq(n_dev_bind, sizeof(nodes) / sizeof(nodes[0]));
  cr_assert_geq(find_triple(&f, "--symlink", SANDBOX_DEV_DIR "/pts", "/dev/pts"), 0);
  cr_assert_geq(find_triple(&f, "--symlink", "pts/ptmx", "/dev/ptmx"), 0);
  /* the only writable dirs: one tmpfs, the workspace */
  cr_assert_eq(count_flag(&f, "--bind"), 0);
  fx_release(&f);
}

Test(bwrap, blinds_forbidden_files_and_dirs_of_the_base) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  for (size_t i = 0; i < test_host.n_blind_files; i++)
    cr_expect_geq(find_triple(&f, "--ro-bind", "/dev/null", test_host.blind_files[i]), 0, "%s",
                  test_host.blind_files[i]);
  for (size_t i = 0; i < test_host.n_blind_dirs; i++) {
    const char *d = test_host.blind_dirs[i];
    const char *seq[] = {"--tmpfs", d, "--remount-ro", d};
    cr_expect_geq(find_seq(&f, 1, seq, 4), 0, "%s", d);
  }
  /* a blind must come after the base bind of /etc it covers */
  long etc = find_triple(&f, "--ro-bind", "/etc", "/etc");
  long shadow = find_triple(&f, "--ro-bind", "/dev/null", "/etc/shadow");
  cr_assert_lt(etc, shadow);
  fx_release(&f);
}

Test(bwrap, real_host_blinds_include_etc_shadow) {
  /* with the forbidden table of platform/forbidden.c on this host */
  struct stat st;
  if (stat("/etc/shadow", &st) != 0)
    cr_skip_test("no /etc/shadow here");
  struct fx f;
  struct bwrap_host h = test_host;
  grants_base_blinds(&h.blind_files, &h.n_blind_files, &h.blind_dirs, &h.n_blind_dirs);
  memset(&f, 0, sizeof(f));
  const char *json = "{" BASE "}";
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_parse(json, strlen(json), &f.m, &d), 0);
  struct bwrap_input in = {.m = f.m,
                           .entry = &f.m->entry[0],
                           .home = "/h",
                           .user = "u",
                           .package_fd = 3,
                           .seccomp_fd = 4};
  strv_init(&f.argv);
  cr_assert_eq(bwrap_argv_build(&h, &in, &f.argv), 0);
  f.a = f.argv.v;
  f.n = f.argv.n;
  cr_assert_geq(find_triple(&f, "--ro-bind", "/dev/null", "/etc/shadow"), 0);
  fx_release(&f);
}

/* ---- size-capped tmpfs ---- */

Test(bwrap, one_size_capped_tmpfs_holds_workspace_tmp_and_shm) {
  static const struct {
    const char *json;
    uint64_t bytes;
  } rows[] = {
      {"{" BASE "}", 64ull << 20},
      {"{" BASE ",\"limits\":{\"disk_mb\":1}}", 1ull << 20},
      {"{" BASE ",\"limits\":{\"disk_mb\":4095}}", 4095ull << 20},
      {"{" BASE ",\"limits\":{\"disk_mb\":4096}}", 4096ull << 20}, /* 2^32: no 32-bit wrap */
      {"{" BASE ",\"limits\":{\"disk_mb\":16384}}", 16384ull << 20},
  };
  for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
    struct fx f;
    fx_build(&f, rows[r].json);
    char size[32];
    snprintf(size, sizeof(size), "%" PRIu64, rows[r].bytes);
    const char *seq[] = {"--size", size, "--tmpfs", SANDBOX_WORKSPACE_DIR};
    cr_expect_geq(find_seq(&f, 1, seq, 4), 0, "%s: --size %s --tmpfs %s", rows[r].json, size,
                  SANDBOX_WORKSPACE_DIR);
    cr_expect_eq(count_flag(&f, "--size"), 1, "one sized tmpfs: disk_mb in all");
    cr_expect_eq(count_pair(&f, "--tmpfs", SANDBOX_WORKSPACE_DIR), 1);
    cr_expect_eq(count_pair(&f, "--tmpfs", "/tmp"), 0, "/tmp is no tmpfs of its own");
    cr_expect_eq(count_pair(&f, "--tmpfs", "/dev/shm"), 0);
    long ws = find_pair(&f, "--tmpfs", SANDBOX_WORKSPACE_DIR);
    long tmp = find_triple(&f, "--symlink", SANDBOX_TMP_DIR, "/tmp");
    long shm = find_triple(&f, "--symlink", SANDBOX_SHM_DIR, "/dev/shm");
    long tmpdir = find_pair(&f, "--dir", SANDBOX_TMP_DIR);
    long shmdir = find_pair(&f, "--dir", SANDBOX_SHM_DIR);
    cr_expect(ws >= 0 && tmp > ws && shm > ws, "the links point into the workspace tmpfs");
    cr_expect(tmpdir > ws && shmdir > ws, "their dirs are made inside it");
    /* every other tmpfs is read-only right away (blinds) */
    size_t end = end_of_options(&f);
    for (size_t i = 1; i + 1 < end; i++) {
      if (strcmp(f.a[i], "--tmpfs") != 0 || strcmp(f.a[i + 1], SANDBOX_WORKSPACE_DIR) == 0)
        continue;
      cr_expect(i + 3 < end && strcmp(f.a[i + 2], "--remount-ro") == 0 &&
                    strcmp(f.a[i + 3], f.a[i + 1]) == 0,
                "--tmpfs %s is writable", f.a[i + 1]);
    }
    fx_release(&f);
  }
}

/* A root agent mounts the workspace tmpfs itself, sized in bytes and in
 * inodes (bwrap's --size bounds bytes only): bwrap binds it from its fd
 * where it made its own tmpfs, and /tmp and /dev/shm still point into it. */
Test(bwrap, an_agent_mounted_workspace_is_bound_from_its_fd_instead_of_a_sized_tmpfs) {
  struct fx f;
  memset(&f, 0, sizeof(f));
  const char *json = "{" BASE ",\"limits\":{\"disk_mb\":8}}";
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_parse(json, strlen(json), &f.m, &d), 0);
  struct bwrap_input in = {.m = f.m,
                           .entry = &f.m->entry[0],
                           .home = "/h",
                           .user = "u",
                           .package_fd = 3,
                           .seccomp_fd = 4,
                           .workspace_mounted = true,
                           .workspace_fd = 0, /* any fd, 0 included */
                           .mounts = test_mounts,
                           .n_mounts = N_TEST_MOUNTS};
  strv_init(&f.argv);
  cr_assert_eq(bwrap_argv_build(&test_host, &in, &f.argv), 0);
  f.a = f.argv.v;
  f.n = f.argv.n;
  long ws = find_triple(&f, "--bind-fd", "0", SANDBOX_WORKSPACE_DIR);
  cr_assert_geq(ws, 0, "the workspace is the agent's tmpfs");
  cr_assert_eq(count_flag(&f, "--size"), 0, "no tmpfs of bwrap's own for it");
  cr_assert_eq(count_pair(&f, "--tmpfs", SANDBOX_WORKSPACE_DIR), 0);
  long tmpdir = find_pair(&f, "--dir", SANDBOX_TMP_DIR);
  long shmdir = find_pair(&f, "--dir", SANDBOX_SHM_DIR);
  cr_assert(tmpdir > ws && shmdir > ws, "/tmp and /dev/shm are made inside it");
  cr_assert_gt(find_triple(&f, "--bind-fd", "14", "/cordon/workspace/out"), ws,
               "a grant inside the workspace is bound after it");
  fx_release(&f);
}

Test(bwrap, the_workspace_tmpfs_options_bound_size_and_inodes_for_the_job_user) {
  char opts[160];
  cr_assert_eq(bwrap_workspace_tmpfs_options(8, 999, 995, opts, sizeof(opts)), 0);
  cr_assert_str_eq(opts, "size=8388608,nr_inodes=2048,mode=0755,uid=999,gid=995");
  cr_assert_eq(bwrap_workspace_tmpfs_options(16384, 4294967294u, 7, opts, sizeof(opts)), 0);
  cr_assert_str_eq(opts, "size=17179869184,nr_inodes=4194304,mode=0755,uid=4294967294,gid=7",
                   "no 32-bit wrap");
  cr_assert_eq(bwrap_workspace_tmpfs_options(8, 999, 995, opts, 20), -ENAMETOOLONG);
}

/* ---- package and grants ---- */

Test(bwrap, package_is_mounted_read_only_from_its_fd) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  cr_assert_geq(find_triple(&f, "--ro-bind-fd", "7", SANDBOX_PACKAGE_DIR), 0);
  cr_assert_lt(find_triple(&f, "--bind-fd", "7", SANDBOX_PACKAGE_DIR), 0);
  cr_assert_geq(find_pair(&f, "--chdir", SANDBOX_PACKAGE_DIR), 0);
  fx_release(&f);
}

Test(bwrap, grant_mounts_follow_in_order_with_their_fd_and_dest) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  long pkg = find_triple(&f, "--ro-bind-fd", "7", SANDBOX_PACKAGE_DIR);
  long ws = find_pair(&f, "--tmpfs", SANDBOX_WORKSPACE_DIR);
  cr_assert_geq(pkg, 0);
  size_t from = (size_t)pkg + 3;
  cr_assert_gt(from, (size_t)ws, "grants come after the workspace tmpfs they may sit in");
  for (size_t i = 0; i < N_TEST_MOUNTS; i++) {
    const struct bwrap_mount *mt = &test_mounts[i];
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", mt->fd);
    long at = -1;
    size_t len = 0;
    switch (mt->kind) {
    case BWRAP_MOUNT_RO_FD: {
      const char *seq[] = {"--ro-bind-fd", fd, mt->dest};
      at = find_seq(&f, from, seq, 3);
      len = 3;
      break;
    }
    case BWRAP_MOUNT_RW_FD: {
      const char *seq[] = {"--bind-fd", fd, mt->dest};
      at = find_seq(&f, from, seq, 3);
      len = 3;
      break;
    }
    case BWRAP_MOUNT_BLIND_DIR: {
      const char *seq[] = {"--tmpfs", mt->dest, "--remount-ro", mt->dest};
      at = find_seq(&f, from, seq, 4);
      len = 4;
      break;
    }
    case BWRAP_MOUNT_BLIND_FILE: {
      const char *seq[] = {"--ro-bind", "/dev/null", mt->dest};
      at = find_seq(&f, from, seq, 3);
      len = 3;
      break;
    }
    }
    cr_assert_eq(at, (long)from, "mount %zu (%s) directly after the previous one", i, mt->dest);
    from = (size_t)at + len;
  }
  /* each grant dest appears once: no second, path-based mount of it */
  for (size_t i = 0; i < N_TEST_MOUNTS; i++)
    if (test_mounts[i].kind == BWRAP_MOUNT_RO_FD || test_mounts[i].kind == BWRAP_MOUNT_RW_FD)
      cr_expect_eq(count_flag(&f, test_mounts[i].dest), 1, "%s", test_mounts[i].dest);
  fx_release(&f);
}

Test(bwrap, read_only_and_writable_grants_use_different_flags) {
  static const struct bwrap_mount ro[] = {{BWRAP_MOUNT_RO_FD, 21, "/data"}};
  static const struct bwrap_mount rw[] = {{BWRAP_MOUNT_RW_FD, 21, "/data"}};
  struct fx f;
  fx_build_with(&f, "{" BASE "}", ro, 1, NULL, 0);
  cr_assert_geq(find_triple(&f, "--ro-bind-fd", "21", "/data"), 0);
  cr_assert_lt(find_flag(&f, "--bind-fd"), 0);
  fx_release(&f);
  fx_build_with(&f, "{" BASE "}", rw, 1, NULL, 0);
  cr_assert_geq(find_triple(&f, "--bind-fd", "21", "/data"), 0);
  cr_assert_lt(find_triple(&f, "--ro-bind-fd", "21", "/data"), 0);
  fx_release(&f);
}

Test(bwrap, root_is_remounted_read_only_after_every_mount) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  long root = find_pair(&f, "--remount-ro", "/");
  cr_assert_geq(root, 0);
  size_t end = end_of_options(&f);
  for (size_t i = 1; i < end; i++)
    if (is_mount_flag(f.a[i]))
      cr_expect_lt((long)i, root, "%s at %zu after --remount-ro / at %ld", f.a[i], i, root);
  fx_release(&f);
}

Test(bwrap, the_inits_proc_directory_is_an_empty_read_only_tmpfs) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  long proc = find_pair(&f, "--proc", "/proc");
  long mask = find_pair(&f, "--tmpfs", "/proc/1");
  long ro = find_pair(&f, "--remount-ro", "/proc/1");
  cr_assert_geq(proc, 0);
  cr_assert_eq(mask, proc + 2, "right after /proc is mounted");
  cr_assert_eq(ro, mask + 2);
  fx_release(&f);
}

Test(bwrap, no_mount_without_grants_but_the_fixed_ones) {
  struct fx f;
  fx_build_with(&f, "{" BASE "}", NULL, 0, NULL, 0);
  cr_assert_eq(count_flag(&f, "--bind-fd"), 0);
  cr_assert_eq(count_flag(&f, "--ro-bind-fd"), 1, "only the package");
  cr_assert_eq(count_flag(&f, "--bind"), 0, "nothing host-writable");
  fx_release(&f);
}

Test(bwrap, names_no_private_host_tree_as_a_bind_source) {
  struct fx f;
  fx_build(&f, "{" BASE ",\"capabilities\":{\"net\":true}}");
  static const char *const src_flags[] = {"--bind",     "--ro-bind",     "--dev-bind",
                                          "--bind-try", "--ro-bind-try", "--dev-bind-try"};
  static const char *const private[] = {"/home", "/root", "/run", "/var"};
  size_t end = end_of_options(&f);
  for (size_t i = 1; i + 1 < end; i++) {
    for (size_t k = 0; k < sizeof(src_flags) / sizeof(src_flags[0]); k++) {
      if (strcmp(f.a[i], src_flags[k]) != 0)
        continue;
      const char *src = f.a[i + 1];
      for (size_t p = 0; p < 4; p++) {
        size_t n = strlen(private[p]);
        cr_expect(!(strncmp(src, private[p], n) == 0 && (src[n] == '\0' || src[n] == '/')),
                  "%s %s binds a private host tree", f.a[i], src);
      }
      cr_expect_neq(strcmp(src, "/"), 0, "%s / exposes the whole host", f.a[i]);
    }
    /* the fd flags take a number, never a path that could be swapped */
    if (strcmp(f.a[i], "--bind-fd") == 0 || strcmp(f.a[i], "--ro-bind-fd") == 0) {
      char *endp;
      strtol(f.a[i + 1], &endp, 10);
      cr_expect(f.a[i + 1][0] != '\0' && *endp == '\0', "%s %s is not an fd", f.a[i], f.a[i + 1]);
    }
  }
  fx_release(&f);
}

/* ---- seccomp and environment ---- */

Test(bwrap, passes_the_seccomp_fd) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  cr_assert_geq(find_pair(&f, "--seccomp", "9"), 0);
  cr_assert_eq(count_flag(&f, "--seccomp"), 1);
  fx_release(&f);
}

Test(bwrap, clears_the_environment_before_any_setenv) {
  struct fx f;
  fx_build(&f, "{" BASE ",\"env\":{\"A\":\"1\"}}");
  long clear = find_flag(&f, "--clearenv");
  long first_set = find_flag(&f, "--setenv");
  cr_assert_geq(clear, 0);
  cr_assert_geq(first_set, 0);
  cr_assert_lt(clear, first_set);
  cr_assert_eq(count_flag(&f, "--clearenv"), 1);
  cr_assert_lt(find_flag(&f, "--unsetenv"), 0);
  fx_release(&f);
}

Test(bwrap, sets_the_safe_environment) {
  struct fx f;
  fx_build(&f, "{" BASE "}");
  cr_assert_geq(find_triple(&f, "--setenv", "PACKAGE", SANDBOX_PACKAGE_DIR), 0);
  cr_assert_geq(find_triple(&f, "--setenv", "WORKSPACE", SANDBOX_WORKSPACE_DIR), 0);
  cr_assert_geq(find_triple(&f, "--setenv", "HOME", "/home/cordon-job"), 0);
  cr_assert_geq(find_triple(&f, "--setenv", "USER", "cordon-job"), 0);
  cr_assert_geq(find_triple(&f, "--setenv", "TMPDIR", "/tmp"), 0);
  long path = find_pair(&f, "--setenv", "PATH");
  cr_assert_geq(path, 0);
  /* PATH has only absolute entries: no "", "." or relative directory */
  char *p = strdup(f.a[path + 2]);
  cr_assert_not_null(p);
  cr_assert_neq(p[0], '\0');
  cr_assert_null(strstr(p, "::"));
  cr_assert_neq(p[strlen(p) - 1], ':');
  char *save = NULL;
  for (char *tok = strtok_r(p, ":", &save); tok; tok = strtok_r(NULL, ":", &save))
    cr_expect_eq(tok[0], '/', "PATH entry %s", tok);
  free(p);
  for (size_t k = 0; k < 6; k++) {
    static const char *const names[] = {"PACKAGE", "WORKSPACE", "HOME", "PATH", "USER", "TMPDIR"};
    cr_expect_eq(count_flag(&f, names[k]), 1, "%s set once", names[k]);
  }
  fx_release(&f);
}

Test(bwrap, manifest_env_is_appended_after_the_safe_set) {
  struct fx f;
  fx_build(&f,
           "{" BASE ",\"env\":{\"GREETING\":\"hello\",\"EMPTY\":\"\",\"LANG\":\"de_DE.UTF-8\"}}");
  long g = find_triple(&f, "--setenv", "GREETING", "hello");
  long e = find_triple(&f, "--setenv", "EMPTY", "");
  long lang = find_triple(&f, "--setenv", "LANG", "de_DE.UTF-8");
  cr_assert_geq(g, 0);
  cr_assert_geq(e, 0);
  cr_assert_geq(lang, 0);
  cr_assert_lt(g, e, "in manifest order");
  cr_assert_lt(e, lang, "in manifest order");
  /* after every fixed variable: a later --setenv wins, so the manifest's LANG does */
  static const char *const fixed[] = {"PACKAGE", "WORKSPACE", "HOME", "PATH", "TMPDIR"};
  for (size_t k = 0; k < 5; k++)
    cr_expect_lt(find_pair(&f, "--setenv", fixed[k]), g, "%s", fixed[k]);
  long last_lang = -1;
  for (size_t i = 1; i + 2 < end_of_options(&f); i++)
    if (strcmp(f.a[i], "--setenv") == 0 && strcmp(f.a[i + 1], "LANG") == 0)
      last_lang = (long)i;
  cr_assert_eq(last_lang, lang, "the manifest's LANG is the last one");
  long sc = find_flag(&f, "--seccomp");
  cr_assert_lt(lang, sc);
  fx_release(&f);
}

/* ---- the command ---- */

Test(bwrap, relative_entry_runs_from_the_package) {
  struct fx f;
  char *args[] = {"a1", "a2"};
  fx_build_with(&f, "{" NV ",\"entry\":[\"bin/tool\",\"-v\"]}", test_mounts, N_TEST_MOUNTS, args,
                2);
  size_t end = end_of_options(&f);
  cr_assert_eq(f.n, end + 5, "tool, -v, a1, a2 after --");
  cr_assert_str_eq(f.a[end + 1], SANDBOX_PACKAGE_DIR "/bin/tool");
  cr_assert_str_eq(f.a[end + 2], "-v");
  cr_assert_str_eq(f.a[end + 3], "a1");
  cr_assert_str_eq(f.a[end + 4], "a2");
  fx_release(&f);
}

Test(bwrap, absolute_entry_is_kept) {
  struct fx f;
  fx_build_with(&f, "{" NV ",\"entry\":[\"/usr/bin/python3\",\"main.py\"]}", NULL, 0, NULL, 0);
  size_t end = end_of_options(&f);
  cr_assert_eq(f.n, end + 3);
  cr_assert_str_eq(f.a[end + 1], "/usr/bin/python3");
  cr_assert_str_eq(f.a[end + 2], "main.py", "later entry args are not rewritten");
  fx_release(&f);
}

Test(bwrap, dispatch_args_follow_the_entry_args_after_the_separator) {
  struct fx f;
  fx_build_with(&f, "{" BASE "}", test_mounts, N_TEST_MOUNTS, default_args, 4);
  size_t end = end_of_options(&f);
  static const char *const want[] = {"/bin/sh", "run.sh", "world", "--bind", "/", "/"};
  cr_assert_eq(f.n, end + 1 + 6);
  for (size_t i = 0; i < 6; i++)
    cr_expect_str_eq(f.a[end + 1 + i], want[i], "argv[%zu]", end + 1 + i);
  /* the option-looking dispatch args are not bwrap options */
  cr_assert_lt(find_triple(&f, "--bind", "/", "/"), 0);
  /* the separator comes after the last option (seccomp) */
  cr_assert_eq(find_flag(&f, "--seccomp") + 2, (long)end);
  fx_release(&f);
}

Test(bwrap, entry_object_uses_the_linux_argv) {
  struct fx f;
  fx_build_with(&f,
                "{" NV ",\"platforms\":[\"linux\",\"windows\"],"
                "\"entry\":{\"windows\":[\"run.cmd\"],\"linux\":[\"run.sh\",\"x\"]}}",
                NULL, 0, NULL, 0);
  size_t end = end_of_options(&f);
  cr_assert_eq(f.n, end + 3);
  cr_assert_str_eq(f.a[end + 1], SANDBOX_PACKAGE_DIR "/run.sh");
  cr_assert_str_eq(f.a[end + 2], "x");
  fx_release(&f);
}

Test(bwrap, the_whole_argv_for_the_hello_example) {
  /* a golden argv: any change to the builder shows up here */
  const char *json =
      "{\"name\":\"hello\",\"version\":\"1.0.0\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
      "\"platforms\":[\"linux\",\"macos\"],\"timeout_s\":10,"
      "\"limits\":{\"memory_mb\":128,\"processes\":16,\"output_kb\":64,\"disk_mb\":16},"
      "\"env\":{\"GREETING\":\"hello\"}}";
  static const struct bwrap_base base[] = {{"/usr", NULL}, {"/bin", "usr/bin"}};
  static const char *const bf[] = {"/etc/shadow"};
  static const char *const bd[] = {"/etc/cordon-agent"};
  static const struct bwrap_mount mounts[] = {
      {BWRAP_MOUNT_RO_FD, 5, "/home/j/Documents"},
      {BWRAP_MOUNT_BLIND_DIR, -1, "/home/j/Documents/.ssh"}};
  struct bwrap_host h = {.bwrap_path = "/usr/bin/bwrap",
                         .base = base,
                         .n_base = 2,
                         .blind_files = bf,
                         .n_blind_files = 1,
                         .blind_dirs = bd,
                         .n_blind_dirs = 1};
  struct manifest *m = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_parse(json, strlen(json), &m, &d), 0, "%s", d.msg);
  char *args[] = {"world"};
  struct bwrap_input in = {.m = m,
                           .entry = manifest_entry_for(m, MANIFEST_PLATFORM_LINUX),
                           .args = args,
                           .n_args = 1,
                           .home = "/home/j",
                           .user = "j",
                           .package_fd = 3,
                           .seccomp_fd = 4,
                           .mounts = mounts,
                           .n_mounts = 2};
  struct strv v;
  strv_init(&v);
  cr_assert_eq(bwrap_argv_build(&h, &in, &v), 0);
  /* clang-format off */
  static const char *const want[] = {
      "/usr/bin/bwrap", "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
      "--unshare-cgroup", "--unshare-net", "--disable-userns", "--die-with-parent",
      "--new-session", "--cap-drop", "ALL", "--hostname", "cordon",
      "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
      "--ro-bind", "/dev/null", "/etc/shadow",
      "--tmpfs", "/etc/cordon-agent", "--remount-ro", "/etc/cordon-agent",
      "--proc", "/proc", "--tmpfs", "/proc/1", "--remount-ro", "/proc/1",
      "--dev", "/cordon/dev", "--remount-ro", "/cordon/dev", "--perms", "0755", "--dir", "/dev",
      "--dev-bind", "/dev/null", "/dev/null", "--dev-bind", "/dev/zero", "/dev/zero",
      "--dev-bind", "/dev/full", "/dev/full", "--dev-bind", "/dev/random", "/dev/random",
      "--dev-bind", "/dev/urandom", "/dev/urandom", "--dev-bind", "/dev/tty", "/dev/tty",
      "--symlink", "/proc/self/fd", "/dev/fd", "--symlink", "/proc/self/fd/0", "/dev/stdin",
      "--symlink", "/proc/self/fd/1", "/dev/stdout", "--symlink", "/proc/self/fd/2", "/dev/stderr",
      "--symlink", "/cordon/dev/pts", "/dev/pts", "--symlink", "pts/ptmx", "/dev/ptmx",
      "--size", "16777216", "--tmpfs", "/cordon/workspace",
      "--perms", "01777", "--dir", "/cordon/workspace/.tmp",
      "--perms", "01777", "--dir", "/cordon/workspace/.shm",
      "--symlink", "/cordon/workspace/.tmp", "/tmp", "--symlink", "/cordon/workspace/.shm", "/dev/shm",
      "--ro-bind-fd", "3", "/cordon/package",
      "--ro-bind-fd", "5", "/home/j/Documents",
      "--tmpfs", "/home/j/Documents/.ssh", "--remount-ro", "/home/j/Documents/.ssh",
      "--remount-ro", "/",
      "--chdir", "/cordon/package", "--clearenv",
      "--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "--setenv", "HOME", "/home/j", "--setenv", "USER", "j", "--setenv", "LOGNAME", "j",
      "--setenv", "PACKAGE", "/cordon/package", "--setenv", "WORKSPACE", "/cordon/workspace",
      "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
      "--setenv", "GREETING", "hello",
      "--seccomp", "4", "--",
      "/bin/sh", "run.sh", "world"};
  /* clang-format on */
  size_t nwant = sizeof(want) / sizeof(want[0]);
  for (size_t i = 0; i < v.n && i < nwant; i++)
    cr_expect_str_eq(v.v[i], want[i], "argv[%zu]", i);
  cr_assert_eq(v.n, nwant);
  cr_assert_null(v.v[v.n]);
  strv_release(&v);
  manifest_free(m);
}
