/* The OS-neutral rules of the one forbidden table (platform/forbidden.c):
 * which places of a home count as hidden or bin-like, which names mark a
 * cordon state directory, and that the secret rows cover the credential
 * classes of issue 12 on this OS. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/manifest.h"
#include "platform/forbidden.h"
#include "platform/paths.h"

Test(forbidden, hidden_and_bin_places_of_the_home) {
  static const struct {
    const char *rel;
    bool hidden;
  } cases[] = {
      {".bashrc", true},   {".config", true},   {".config/gcloud", true}, {".git", true},
      {"bin", true},       {"bin/tool", true},  {".local/bin", true},     {".local", true},
      {"binaries", false}, {"projects", false}, {"projects/.git", false}, /* inside a grant: the
                                                                             walk's rule */
      {"src/bin", false},  {"data.txt", false}, {"my.bashrc", false},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    cr_expect_eq(forbidden_home_hidden(cases[i].rel), cases[i].hidden, "%s", cases[i].rel);
}

Test(forbidden, state_directory_markers) {
  const char *yes[] = {"ticket.key", "noise.key",    "publisher.key",
                       "cordon.db",  "identity.key", "pairing.json"};
  const char *no[] = {"publisher.pub", "config.json", "key", "cordon.db-wal", ""};
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
    cr_expect(forbidden_state_marker(yes[i]), "%s", yes[i]);
  for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
    cr_expect(!forbidden_state_marker(no[i]), "%s", no[i]);
}

static bool has_secret(const char *path) {
  for (const struct forbidden_row *r = NULL; (r = forbidden_next(FORBIDDEN_SECRET, r));)
    if (r->base == FORBIDDEN_HOME && strcmp(r->path, path) == 0)
      return true;
  return false;
}

Test(forbidden, secret_rows_cover_the_credential_classes_on_every_os) {
  /* rows marked ALL: the same on Linux, macOS and Windows */
  const char *all[] = {".config/gcloud",          ".oci",           ".vault-token", ".terraform.d",
                       ".cargo/credentials.toml", ".config/rclone", ".s3cfg",       ".config/hub",
                       ".config/gopass",          ".ssh",           ".aws"};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
    cr_expect(has_secret(all[i]), "%s", all[i]);
  if (paths_platform_bit() == MANIFEST_PLATFORM_LINUX) {
    const char *lin[] = {"snap/firefox",      ".var/app",      ".local/share/kwalletd",
                         ".config/Bitwarden", ".config/doctl", ".config/vivaldi"};
    for (size_t i = 0; i < sizeof(lin) / sizeof(lin[0]); i++)
      cr_expect(has_secret(lin[i]), "%s", lin[i]);
  }
}

Test(forbidden, rows_come_in_table_order_for_one_kind_only) {
  size_t n = 0;
  for (const struct forbidden_row *r = NULL; (r = forbidden_next(FORBIDDEN_AUTORUN, r)); n++) {
    cr_assert_eq(r->kind, FORBIDDEN_AUTORUN);
    cr_assert(r->os & paths_platform_bit());
  }
  cr_assert(n > 0);
}
