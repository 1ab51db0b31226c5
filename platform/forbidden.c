#include "platform/forbidden.h"

#include <stddef.h>
#include <string.h>

#include "core/manifest.h"
#include "platform/paths.h"

#define LINUX MANIFEST_PLATFORM_LINUX
#define MACOS MANIFEST_PLATFORM_MACOS
#define WINDOWS MANIFEST_PLATFORM_WINDOWS
#define POSIX (MANIFEST_PLATFORM_LINUX | MANIFEST_PLATFORM_MACOS)
#define ALL MANIFEST_PLATFORM_ALL

#define SECRET_HOME(os, p)                                                                         \
  { FORBIDDEN_SECRET, FORBIDDEN_HOME, (os), (p) }
#define SECRET_ROOT(os, p)                                                                         \
  { FORBIDDEN_SECRET, FORBIDDEN_ROOT, (os), (p) }
#define AUTORUN_HOME(os, p)                                                                        \
  { FORBIDDEN_AUTORUN, FORBIDDEN_HOME, (os), (p) }

/* docs/SECURITY.md describes these lists; keep it in step. */
static const struct forbidden_row table[] = {
    /* credentials and secrets below the job user's home */
    SECRET_HOME(ALL, ".ssh"), SECRET_HOME(ALL, ".gnupg"), SECRET_HOME(ALL, ".aws"),
    SECRET_HOME(ALL, ".azure"), SECRET_HOME(ALL, ".kube"), SECRET_HOME(ALL, ".docker"),
    SECRET_HOME(ALL, ".config/gh"), SECRET_HOME(ALL, ".netrc"), SECRET_HOME(ALL, ".pypirc"),
    SECRET_HOME(ALL, ".npmrc"), SECRET_HOME(ALL, ".git-credentials"),
    SECRET_HOME(LINUX | WINDOWS, ".config/git/credentials"), SECRET_HOME(LINUX, ".mozilla"),
    SECRET_HOME(LINUX, ".thunderbird"), SECRET_HOME(LINUX, ".config/google-chrome"),
    SECRET_HOME(LINUX, ".config/chromium"), SECRET_HOME(LINUX, ".config/BraveSoftware"),
    SECRET_HOME(LINUX, ".config/microsoft-edge"), SECRET_HOME(ALL, ".password-store"),
    SECRET_HOME(LINUX, ".local/share/keyrings"), SECRET_HOME(LINUX, ".config/cordon"),
    SECRET_HOME(LINUX, ".local/state/cordon-agent"), SECRET_HOME(LINUX, ".pki"),
    /* cloud and tool credentials */
    SECRET_HOME(ALL, ".config/gcloud"), SECRET_HOME(ALL, ".oci"),
    SECRET_HOME(LINUX | MACOS, ".config/doctl"),
    SECRET_HOME(MACOS, "Library/Application Support/doctl"), SECRET_HOME(ALL, ".vault-token"),
    SECRET_HOME(ALL, ".terraform.d"), SECRET_HOME(ALL, ".terraformrc"),
    SECRET_HOME(ALL, ".cargo/credentials"), SECRET_HOME(ALL, ".cargo/credentials.toml"),
    SECRET_HOME(ALL, ".config/rclone"), SECRET_HOME(ALL, ".s3cfg"), SECRET_HOME(ALL, ".config/hub"),
    SECRET_HOME(ALL, ".config/op"), SECRET_HOME(ALL, ".gem/credentials"),
    SECRET_HOME(ALL, ".m2/settings-security.xml"), SECRET_HOME(ALL, ".config/helm"),
    SECRET_HOME(ALL, ".config/sops"), SECRET_HOME(ALL, ".age"),
    /* browsers as snap and flatpak, and others */
    SECRET_HOME(LINUX, "snap/firefox"), SECRET_HOME(LINUX, "snap/chromium"),
    SECRET_HOME(LINUX, "snap/thunderbird"), SECRET_HOME(LINUX, "snap/bitwarden"),
    SECRET_HOME(LINUX, ".var/app"), SECRET_HOME(LINUX, ".config/vivaldi"),
    SECRET_HOME(LINUX, ".config/opera"), SECRET_HOME(LINUX, ".librewolf"),
    SECRET_HOME(LINUX, ".waterfox"), SECRET_HOME(LINUX, ".config/epiphany"),
    SECRET_HOME(LINUX, ".local/share/epiphany"), SECRET_HOME(LINUX, ".config/falkon"),
    SECRET_HOME(LINUX, ".config/qutebrowser"), SECRET_HOME(LINUX, ".local/share/qutebrowser"),
    SECRET_HOME(LINUX, ".config/evolution"), SECRET_HOME(LINUX, ".local/share/evolution"),
    /* password and key stores */
    SECRET_HOME(LINUX, ".local/share/kwalletd"), SECRET_HOME(LINUX, ".kde/share/apps/kwallet"),
    SECRET_HOME(LINUX, ".config/kwalletrc"), SECRET_HOME(LINUX, ".config/Bitwarden"),
    SECRET_HOME(LINUX, ".config/Bitwarden CLI"),
    SECRET_HOME(MACOS, "Library/Application Support/Bitwarden CLI"),
    SECRET_HOME(ALL, ".config/gopass"), SECRET_HOME(ALL, ".local/share/gopass"),
    SECRET_HOME(LINUX, ".config/KeePassXC"), SECRET_HOME(LINUX, ".config/keepassxc"),
    SECRET_HOME(LINUX, ".local/share/cordon-server"),
    SECRET_HOME(LINUX, ".local/share/cordon-agent"), SECRET_HOME(LINUX, ".config/cordon-server"),
    SECRET_HOME(LINUX, ".config/cordon-agent"), SECRET_HOME(MACOS, "Library/Keychains"),
    SECRET_HOME(MACOS, "Library/Cookies"),
    SECRET_HOME(MACOS, "Library/Application Support/Google/Chrome"),
    SECRET_HOME(MACOS, "Library/Application Support/Firefox"), SECRET_HOME(MACOS, "Library/Safari"),
    SECRET_HOME(MACOS, "Library/Application Support/cordon"),
    /* browser profiles, credential stores and the Startup folder */
    SECRET_HOME(WINDOWS, "AppData"), SECRET_HOME(WINDOWS, "NTUSER.DAT"),

    /* system secrets and the programs' state */
    SECRET_ROOT(POSIX, "/etc/shadow"), SECRET_ROOT(LINUX, "/etc/gshadow"),
    SECRET_ROOT(LINUX, "/etc/shadow-"), SECRET_ROOT(LINUX, "/etc/gshadow-"),
    SECRET_ROOT(LINUX, "/etc/ssl/private"), SECRET_ROOT(LINUX, "/etc/security/opasswd"),
    SECRET_ROOT(LINUX, "/etc/ssh/*_key"), SECRET_ROOT(MACOS, "/etc/master.passwd"),
    SECRET_ROOT(MACOS, "/private/etc/master.passwd"), SECRET_ROOT(MACOS, "/var/db/dslocal"),
    SECRET_ROOT(MACOS, "/etc/ssh"), SECRET_ROOT(MACOS, "/private/etc/ssh"),
    SECRET_ROOT(MACOS, "/Library/Keychains"),
    SECRET_ROOT(MACOS, "/Library/Application Support/cordon"),
    SECRET_ROOT(POSIX, "/var/lib/cordon-agent"), SECRET_ROOT(LINUX, "/var/lib/cordon-server"),
    SECRET_ROOT(MACOS, "/var/root"), SECRET_ROOT(POSIX, "/root"),

    /* login scripts and autostart places */
    AUTORUN_HOME(POSIX, ".bashrc"), AUTORUN_HOME(POSIX, ".bash_profile"),
    AUTORUN_HOME(POSIX, ".bash_login"), AUTORUN_HOME(LINUX, ".bash_logout"),
    AUTORUN_HOME(POSIX, ".profile"), AUTORUN_HOME(POSIX, ".zshrc"), AUTORUN_HOME(POSIX, ".zshenv"),
    AUTORUN_HOME(POSIX, ".zprofile"), AUTORUN_HOME(POSIX, ".zlogin"),
    AUTORUN_HOME(LINUX, ".xprofile"), AUTORUN_HOME(LINUX, ".xsessionrc"),
    AUTORUN_HOME(LINUX, ".pam_environment"), AUTORUN_HOME(LINUX, ".config/autostart"),
    AUTORUN_HOME(LINUX, ".config/systemd"), AUTORUN_HOME(LINUX, ".config/environment.d"),
    AUTORUN_HOME(POSIX, ".config/fish"), AUTORUN_HOME(LINUX, ".local/share/applications"),
    AUTORUN_HOME(POSIX, ".local/bin"), AUTORUN_HOME(MACOS, "Library/LaunchAgents"),
    AUTORUN_HOME(MACOS, "Library/Application Support/com.apple.backgroundtaskmanagementagent"),

    /* inside a writable grant no row is needed: every hidden entry there
     * (.git as a whole, .envrc, ...) stays read-only by rule (grants.h) */
};

/* Names whose presence in a directory makes it a cordon server's or
 * agent's state directory (server/keys.h, server/db.h, agent/state.h):
 * blinded wherever a grant reaches one. */
static const char *const state_markers[] = {
    "ticket.key", "noise.key", "publisher.key", "cordon.db", "identity.key", "pairing.json",
};

const char *const *forbidden_state_markers(size_t *out_n) {
  *out_n = sizeof(state_markers) / sizeof(state_markers[0]);
  return state_markers;
}

bool forbidden_state_marker(const char *name) {
  for (size_t i = 0; i < sizeof(state_markers) / sizeof(state_markers[0]); i++)
    if (strcmp(name, state_markers[i]) == 0)
      return true;
  return false;
}

bool forbidden_home_hidden(const char *rel) {
  if (rel[0] == '.')
    return true;
  static const char *const bin_like[] = {"bin", ".local/bin"};
  for (size_t i = 0; i < sizeof(bin_like) / sizeof(bin_like[0]); i++) {
    size_t n = strlen(bin_like[i]);
    if (strncmp(rel, bin_like[i], n) == 0 && (rel[n] == '\0' || rel[n] == '/'))
      return true;
  }
  return false;
}

const struct forbidden_row *forbidden_next(enum forbidden_kind kind,
                                           const struct forbidden_row *prev) {
  const struct forbidden_row *end = table + sizeof(table) / sizeof(table[0]);
  unsigned os = paths_platform_bit();
  for (const struct forbidden_row *r = prev ? prev + 1 : table; r < end; r++)
    if (r->kind == kind && (r->os & os))
      return r;
  return NULL;
}
