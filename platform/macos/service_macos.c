/* The agent as a launchd LaunchAgent (platform/service.h, through
 * platform/posix/service_posix.h): per user only.
 *
 * ~/Library/LaunchAgents/org.cordon.agent.plist, loaded into the user's
 * GUI domain with `launchctl bootstrap gui/<uid> PLIST`; uninstall boots it
 * out and removes the file. Logs go to ~/Library/Logs/cordon/. A system
 * LaunchDaemon (jobs as a dedicated account) is not offered: creating that
 * account on macOS (dscl/sysadminctl) is not something we could test here.
 *
 * Plain POSIX: /bin/launchctl is run by absolute path (posix_service_exec). Tested on Linux for
 * what it writes (with `root` set); the launchctl calls were not run.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "platform/fs.h"
#include "platform/macos/os.h"
#include "platform/posix/service_posix.h"

#define LABEL "org.cordon.agent"
#define LAUNCHCTL "/bin/launchctl"

int service_self_path(char *out, size_t len) {
  return macos_os_self_path(out, len);
}

enum service_scope service_default_scope(void) {
  return SERVICE_SCOPE_USER;
}

const char *service_manager_name(void) {
  return "launchd";
}

static bool bad_path(const char *p) {
  return !p || p[0] != '/';
}

/* XML character data: the five special characters escaped; control
 * characters other than tab/newline cannot appear in a plist string. */
static int put_xml(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '&':
      fputs("&amp;", f);
      break;
    case '<':
      fputs("&lt;", f);
      break;
    case '>':
      fputs("&gt;", f);
      break;
    case '"':
      fputs("&quot;", f);
      break;
    case '\'':
      fputs("&apos;", f);
      break;
    default:
      if (*p < 0x20 && *p != '\t' && *p != '\n')
        return CORDON_E_USAGE;
      fputc(*p, f);
    }
  }
  return 0;
}

static int put_string(FILE *f, const char *indent, const char *s) {
  fprintf(f, "%s<string>", indent);
  int r = put_xml(f, s);
  fputs("</string>\n", f);
  return r;
}

static int log_dir(const struct service_options *o, char *out, size_t len, bool with_root) {
  int n =
      snprintf(out, len, "%s%s/Library/Logs/cordon", with_root && o->root ? o->root : "", o->home);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int service_os_render(const struct service_options *o, char **out_text) {
  if (o->scope != SERVICE_SCOPE_USER)
    return CORDON_E_USAGE;
  if (bad_path(o->agent_path) || bad_path(o->home) || (o->config_dir && bad_path(o->config_dir)))
    return CORDON_E_USAGE;
  char logs[PATH_MAX], out_log[PATH_MAX + 32], err_log[PATH_MAX + 32];
  if (log_dir(o, logs, sizeof(logs), false) < 0)
    return CORDON_E_USAGE;
  snprintf(out_log, sizeof(out_log), "%s/agent.out.log", logs);
  snprintf(err_log, sizeof(err_log), "%s/agent.err.log", logs);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f)
    return -ENOMEM;
  int r = 0;
  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" "
        "\"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n"
        "<!-- cordon-agent as a LaunchAgent; written by `cordon-agent service install`.\n"
        "     Jobs run at level none on macOS: see docs/MACOS.md. -->\n"
        "<plist version=\"1.0\">\n<dict>\n"
        "  <key>Label</key>\n  <string>" LABEL "</string>\n"
        "  <key>ProgramArguments</key>\n  <array>\n",
        f);
  r |= put_string(f, "    ", o->agent_path);
  if (o->config_dir) {
    r |= put_string(f, "    ", "--config");
    r |= put_string(f, "    ", o->config_dir);
  }
  r |= put_string(f, "    ", "run");
  fputs("  </array>\n"
        "  <!-- start at login (when the plist is loaded) -->\n"
        "  <key>RunAtLoad</key>\n  <true/>\n"
        "  <!-- restart after a crash or an error exit, not after a clean stop -->\n"
        "  <key>KeepAlive</key>\n  <dict>\n"
        "    <key>SuccessfulExit</key>\n    <false/>\n"
        "    <key>Crashed</key>\n    <true/>\n"
        "  </dict>\n"
        "  <key>ThrottleInterval</key>\n  <integer>10</integer>\n"
        "  <key>ProcessType</key>\n  <string>Background</string>\n"
        "  <key>StandardOutPath</key>\n",
        f);
  r |= put_string(f, "  ", out_log);
  fputs("  <key>StandardErrorPath</key>\n", f);
  r |= put_string(f, "  ", err_log);
  fputs("</dict>\n</plist>\n", f);
  if (fclose(f) != 0 || !text) {
    free(text);
    return -ENOMEM;
  }
  if (r) {
    free(text);
    return CORDON_E_USAGE;
  }
  *out_text = text;
  return 0;
}

static int agents_dir(const struct service_options *o, char *out, size_t len) {
  if (o->scope != SERVICE_SCOPE_USER || bad_path(o->home))
    return CORDON_E_USAGE;
  int n = snprintf(out, len, "%s%s/Library/LaunchAgents", o->root ? o->root : "", o->home);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int service_os_definition_path(const struct service_options *o, char *out, size_t len) {
  char dir[PATH_MAX];
  int r = agents_dir(o, dir, sizeof(dir));
  if (r < 0)
    return r;
  int n = snprintf(out, len, "%s/" LABEL ".plist", dir);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Run launchctl with args; output captured (may be NULL). Returns the exit
 * status or a negated errno. */
static int launchctl(char *const *argv, char *capture, size_t cap_len) {
  char *envp[] = {"PATH=/usr/bin:/bin:/usr/sbin:/sbin", NULL};
  return posix_service_exec(argv, envp, capture, cap_len);
}

static void domain(const struct service_options *o, char *out, size_t len, bool with_label) {
  snprintf(out, len, "gui/%u%s", o->uid, with_label ? "/" LABEL : "");
}

static int bootstrap(const struct service_options *o, const char *plist, char *out, size_t len) {
  char dom[64];
  domain(o, dom, sizeof(dom), false);
  char *argv[] = {LAUNCHCTL, "bootstrap", dom, (char *)plist, NULL};
  return launchctl(argv, out, len);
}

static int bootout(const struct service_options *o) {
  char target[128];
  domain(o, target, sizeof(target), true);
  char *argv[] = {LAUNCHCTL, "bootout", target, NULL};
  return launchctl(argv, NULL, 0);
}

int service_os_install(const struct service_options *o, struct cordon_diag *diag) {
  if (o->scope != SERVICE_SCOPE_USER)
    return cordon_diag_set(diag, CORDON_E_USAGE,
                           "macOS: only a per-user LaunchAgent is offered (see docs/MACOS.md)");
  if (!o->root && geteuid() == 0)
    return cordon_diag_set(diag, CORDON_E_USAGE,
                           "install the LaunchAgent as the user it is for, not as root");
  char *text;
  int r = service_os_render(o, &text);
  if (r < 0)
    return cordon_diag_set(diag, r, "agent path, home and config dir must be absolute paths");
  char dir[PATH_MAX], path[PATH_MAX], logs[PATH_MAX];
  if ((r = agents_dir(o, dir, sizeof(dir))) < 0 ||
      (r = service_os_definition_path(o, path, sizeof(path))) < 0 ||
      (r = log_dir(o, logs, sizeof(logs), true)) < 0) {
    cordon_diag_set(diag, r, "path too long");
    goto out;
  }
  if ((r = fs_mkdir_p(dir, 0755)) < 0 || (r = fs_mkdir_p(logs, 0700)) < 0) {
    cordon_diag_set(diag, r, "cannot create %s or %s: %s", dir, logs, strerror(-r));
    goto out;
  }
  if (o->config_dir) {
    char cfg[PATH_MAX];
    int n = snprintf(cfg, sizeof(cfg), "%s%s", o->root ? o->root : "", o->config_dir);
    if (n < 0 || (size_t)n >= sizeof(cfg) || (r = fs_mkdir_p(cfg, 0700)) < 0) {
      r = r < 0 ? r : -ENAMETOOLONG;
      cordon_diag_set(diag, r, "cannot create %s: %s", o->config_dir, strerror(-r));
      goto out;
    }
  }
  if ((r = posix_service_write_definition(dir, LABEL ".plist", text, diag)) < 0)
    goto out;
  if (o->root)
    goto out;
  (void)bootout(o); /* a loaded older definition would make bootstrap fail */
  char msg[512];
  int st = bootstrap(o, path, msg, sizeof(msg));
  if (st != 0) {
    msg[strcspn(msg, "\n")] = '\0';
    r = cordon_diag_set(diag, CORDON_E_INTERNAL, "launchctl bootstrap: %s",
                        msg[0] ? msg : "failed");
  }
out:
  free(text);
  return r;
}

int service_os_uninstall(const struct service_options *o, struct cordon_diag *diag) {
  char path[PATH_MAX];
  int r = service_os_definition_path(o, path, sizeof(path));
  if (r < 0)
    return cordon_diag_set(diag, r, "macOS: only a per-user LaunchAgent is offered");
  if (!o->root)
    (void)bootout(o); /* fails harmlessly when it is not loaded */
  if (unlink(path) < 0 && errno != ENOENT)
    return cordon_diag_set(diag, -errno, "cannot remove %s: %s", path, strerror(errno));
  return 0;
}

int service_os_start(const struct service_options *o, struct cordon_diag *diag) {
  char path[PATH_MAX];
  int r = service_os_definition_path(o, path, sizeof(path));
  if (r < 0)
    return cordon_diag_set(diag, r, "macOS: only a per-user LaunchAgent is offered");
  if (o->root)
    return 0;
  (void)bootstrap(o, path, NULL, 0); /* not loaded (stopped earlier): load it */
  char target[128], msg[512];
  domain(o, target, sizeof(target), true);
  char *argv[] = {LAUNCHCTL, "kickstart", target, NULL};
  if (launchctl(argv, msg, sizeof(msg)) != 0) {
    msg[strcspn(msg, "\n")] = '\0';
    return cordon_diag_set(diag, CORDON_E_INTERNAL, "launchctl kickstart: %s",
                           msg[0] ? msg : "failed");
  }
  return 0;
}

/* Unloading is what keeps launchd from starting it again (KeepAlive);
 * the plist stays, so it loads again at the next login. */
int service_os_stop(const struct service_options *o, struct cordon_diag *diag) {
  if (o->scope != SERVICE_SCOPE_USER)
    return cordon_diag_set(diag, CORDON_E_USAGE, "macOS: only a per-user LaunchAgent is offered");
  if (!o->root)
    (void)bootout(o);
  return 0;
}

int service_os_status(const struct service_options *o, json_t **out_status) {
  char path[PATH_MAX];
  int r = service_os_definition_path(o, path, sizeof(path));
  if (r < 0)
    return r;
  struct stat st;
  json_t *j = json_object();
  if (!j)
    return -ENOMEM;
  json_object_set_new(j, "manager", json_string("launchd"));
  json_object_set_new(j, "scope", json_string("user"));
  json_object_set_new(j, "path", json_string(path));
  json_object_set_new(j, "installed", json_boolean(stat(path, &st) == 0));
  if (o->root) {
    json_object_set_new(j, "enabled", json_null());
    json_object_set_new(j, "active", json_null());
    json_object_set_new(j, "detail", json_string("files under --root only"));
  } else {
    char target[128], out[8192];
    domain(o, target, sizeof(target), true);
    char *argv[] = {LAUNCHCTL, "print", target, NULL};
    int rc = launchctl(argv, out, sizeof(out));
    json_object_set_new(j, "enabled", rc < 0 ? json_null() : json_boolean(rc == 0));
    json_object_set_new(j, "active",
                        rc < 0 ? json_null()
                               : json_boolean(rc == 0 && strstr(out, "state = running")));
    json_object_set_new(j, "detail",
                        json_string(rc < 0    ? "launchctl could not be run"
                                    : rc == 0 ? "loaded"
                                              : "not loaded"));
  }
  *out_status = j;
  return 0;
}
