/* The OS-neutral sandbox policy: the forbidden table's per-OS rows, path
 * containment, and the grant rules of platform/grants.c judged on places
 * the real OS layer resolves (this build's: identity on Linux, real paths
 * on the macOS layer) in a private tree: grant roots, the agent's state
 * directory as a secret, the order of the rules. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/manifest.h"
#include "platform/forbidden.h"
#include "platform/grants.h"
#include "platform/paths.h"
#include "platform/sandbox_os.h"

/* ---- the table ---- */

static bool has_row(enum forbidden_kind kind, enum forbidden_base base, const char *path) {
  for (const struct forbidden_row *r = NULL; (r = forbidden_next(kind, r));)
    if (r->base == base && strcmp(r->path, path) == 0)
      return true;
  return false;
}

Test(forbidden, every_os_forbids_ssh_keys_and_cloud_credentials) {
  const char *all[] = {".ssh", ".gnupg", ".aws", ".kube", ".docker", ".netrc", ".git-credentials"};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
    cr_assert(has_row(FORBIDDEN_SECRET, FORBIDDEN_HOME, all[i]), "%s", all[i]);
}

Test(forbidden, rows_flagged_for_one_os_apply_only_there) {
  unsigned os = paths_platform_bit();
  cr_assert_eq(has_row(FORBIDDEN_SECRET, FORBIDDEN_HOME, "Library/Keychains"),
               os == MANIFEST_PLATFORM_MACOS);
  cr_assert_eq(has_row(FORBIDDEN_SECRET, FORBIDDEN_HOME, "AppData"),
               os == MANIFEST_PLATFORM_WINDOWS);
  cr_assert_eq(has_row(FORBIDDEN_SECRET, FORBIDDEN_ROOT, "/etc/gshadow"),
               os == MANIFEST_PLATFORM_LINUX);
  cr_assert_eq(has_row(FORBIDDEN_AUTORUN, FORBIDDEN_HOME, ".bashrc"),
               os != MANIFEST_PLATFORM_WINDOWS);
}

Test(forbidden, each_kind_yields_only_its_rows_in_order) {
  const struct forbidden_row *prev = NULL;
  size_t n = 0;
  for (const struct forbidden_row *r = NULL; (r = forbidden_next(FORBIDDEN_AUTORUN, r)); n++) {
    cr_assert_eq(r->kind, FORBIDDEN_AUTORUN);
    cr_assert(r->os & paths_platform_bit());
    cr_assert(!prev || r > prev, "table order");
    prev = r;
  }
  cr_assert_gt(n, 0);
}

/* ---- containment ---- */

Test(path_within, is_component_wise) {
  struct {
    const char *inner, *outer;
    char sep;
    bool fold, want;
  } rows[] = {
      {"/a/b", "/a", '/', false, true},
      {"/a", "/a", '/', false, true},
      {"/ab", "/a", '/', false, false},
      {"/a", "/a/b", '/', false, false},
      {"/anything", "/", '/', false, true},
      {"/a/b", "/a/", '/', false, true},
      {"/A/b", "/a", '/', false, false},
      {"C:\\Users\\X\\y", "c:\\users\\x", '\\', true, true},
      {"C:\\Users\\Xy", "C:\\Users\\X", '\\', true, false},
      {"C:\\x", "C:\\", '\\', true, true},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    cr_assert_eq(sandbox_path_within(rows[i].inner, rows[i].outer, rows[i].sep, rows[i].fold),
                 rows[i].want, "%s in %s", rows[i].inner, rows[i].outer);
}

/* ---- the grant rules on real places ---- */

static char root[64], state[96];
static struct sandbox_probe *probe;
static struct sandbox_policy policy;
static const char *roots[1];

static void setup(void) {
  snprintf(root, sizeof(root), "/tmp/cordon-policy-XXXXXX");
  cr_assert(mkdtemp(root));
  chmod(root, 0755);
  char p[160];
  snprintf(p, sizeof(p), "%s/a", root);
  cr_assert(mkdir(p, 0755) == 0);
  snprintf(state, sizeof(state), "%s/state", root);
  cr_assert(mkdir(state, 0755) == 0);
  roots[0] = root;
  policy = (struct sandbox_policy){
      .grant_roots = roots, .n_grant_roots = 1, .job_user = "cordon-job", .state_dir = state};
  cr_assert(sandbox_probe_new(&policy, false, &probe) == 0);
  cr_assert(probe->facts.user_error == NULL, "job user: %s (run scripts/test-setup.sh)",
            probe->facts.user_error);
}

static void teardown(void) {
  sandbox_probe_free(probe);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
  cr_assert(system(cmd) == 0);
}

/* Judge one grant (path, access); returns the code, fills diag/out. */
static int judge(const char *path, const char *access, struct sandbox_grants *out,
                 struct cordon_diag *diag) {
  char json[512];
  snprintf(json, sizeof(json),
           "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/true\"],"
           "\"capabilities\":{\"fs\":[{\"path\":\"%s\",\"access\":\"%s\"}]}}",
           path, access);
  struct manifest *m = NULL;
  struct cordon_diag md = {{0}};
  cr_assert(manifest_parse(json, strlen(json), &m, &md) == 0, "manifest: %s", md.msg);
  int r = sandbox_grants_check(&policy, probe->os, probe->facts.has_home, m, out, diag);
  if (r == 0) {
    /* the judged grants point into the manifest: keep what is checked */
    cr_assert_eq(out->n, 1);
    out->v[0].g = NULL;
  }
  manifest_free(m);
  return r;
}

TestSuite(grants, .init = setup, .fini = teardown);

Test(grants, a_grant_under_a_root_resolves_to_its_real_path) {
  char p[160], real[PATH_MAX];
  snprintf(p, sizeof(p), "%s/a", root);
  cr_assert(realpath(p, real));
  struct sandbox_grants g;
  struct cordon_diag d = {{0}};
  cr_assert_eq(judge(p, "ro", &g, &d), 0, "%s", d.msg);
  cr_assert_str_eq(g.v[0].place->path, real);
  cr_assert_eq(g.v[0].n_hidden, 0);
  sandbox_grants_release(&g);
}

Test(grants, a_read_grant_around_the_state_dir_hands_it_over_to_hide) {
  struct sandbox_grants g;
  struct cordon_diag d = {{0}};
  cr_assert_eq(judge(root, "ro", &g, &d), 0, "%s", d.msg);
  cr_assert_eq(g.v[0].n_hidden, 1);
  char real[PATH_MAX];
  cr_assert(realpath(state, real));
  cr_assert_str_eq(g.v[0].hidden[0]->path, real);
  sandbox_grants_release(&g);
}

Test(grants, a_writable_grant_around_the_state_dir_is_too_broad) {
  struct sandbox_grants g;
  struct cordon_diag d = {{0}};
  cr_assert_eq(judge(root, "rw", &g, &d), CORDON_E_SCOPE_TOO_BROAD);
  cr_assert(strstr(d.msg, "contains the forbidden path"), "%s", d.msg);
}

Test(grants, a_grant_inside_the_state_dir_is_denied) {
  struct sandbox_grants g;
  struct cordon_diag d = {{0}};
  cr_assert_eq(judge(state, "ro", &g, &d), CORDON_E_CAPABILITY_DENIED);
  cr_assert(strstr(d.msg, "is the forbidden path"), "%s", d.msg);
}

Test(grants, the_roots_come_before_the_forbidden_paths) {
  /* /etc holds forbidden paths, but is first of all outside the roots */
  struct sandbox_grants g;
  struct cordon_diag d = {{0}};
  cr_assert_eq(judge("/etc", "rw", &g, &d), CORDON_E_CAPABILITY_DENIED);
  cr_assert(strstr(d.msg, "not under any of the owner's grant roots"), "%s", d.msg);
}

Test(grants, root_as_written_is_too_broad_before_anything_resolves) {
  struct sandbox_grants g;
  struct cordon_diag d = {{0}};
  cr_assert_eq(judge("/", "ro", &g, &d), CORDON_E_SCOPE_TOO_BROAD);
  cr_assert_str_eq(d.msg, "a grant of / is too broad");
}

Test(grants, a_missing_grant_is_denied_naming_why) {
  char p[160];
  snprintf(p, sizeof(p), "%s/missing", root);
  struct sandbox_grants g;
  struct cordon_diag d = {{0}};
  cr_assert_eq(judge(p, "ro", &g, &d), CORDON_E_CAPABILITY_DENIED);
  cr_assert(strstr(d.msg, "No such file"), "%s", d.msg);
}
