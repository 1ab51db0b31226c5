/* The agent as a systemd service (platform/service.h, through
 * platform/posix/service_posix.h).
 *
 * System scope: /etc/systemd/system/cordon-agent.service, the agent as
 * root with /var/lib/cordon-agent, jobs as job_user (created here when
 * missing). User scope: ~/.config/systemd/user/cordon-agent.service (or
 * $XDG_CONFIG_HOME), managed by `systemctl --user`.
 *
 * The hardening directives are chosen so bwrap keeps working inside the
 * service: it needs user, mount, pid, net, ipc, uts (and cgroup) namespaces
 * and must be able to mount a fresh /proc, which the kernel refuses in a
 * user namespace when /proc has parts mounted over (ProtectKernelTunables
 * and ProtectKernelLogs do that; ProcSubset=pid hides what bwrap reads).
 * The unit's system call filter binds bwrap and the jobs as well. Each
 * directive's reason is in the unit itself; this is the one place the
 * text is written: installers/linux/ ships what `service print` renders
 * (tests/platform/test_service_linux.c compares them), and
 * docs/OPERATIONS.md records the `systemd-analyze security` scores.
 */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "platform/fs.h"
#include "platform/posix/service_posix.h"

#define UNIT_NAME "cordon-agent.service"
#define SYSTEMCTL "/usr/bin/systemctl"
#define USERADD "/usr/sbin/useradd"
#define SYSTEM_STATE_DIR "/var/lib/cordon-agent"

int service_self_path(char *out, size_t len) {
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  if (n < 0)
    return -errno;
  if ((size_t)n >= len - 1)
    return -ENAMETOOLONG;
  out[n] = '\0';
  return 0;
}

enum service_scope service_default_scope(void) {
  return SERVICE_SCOPE_SYSTEM;
}

const char *service_manager_name(void) {
  return "systemd";
}

/* One quoted word, with systemd's specifier (%) expansion disabled and, in
 * an Exec line, variable ($) expansion too, so any path is taken
 * literally. */
static void append_word(FILE *f, const char *w, bool exec) {
  fputc('"', f);
  for (const char *p = w; *p; p++) {
    if (*p == '"' || *p == '\\')
      fputc('\\', f);
    if (*p == '%')
      fputc('%', f);
    if (*p == '$' && exec)
      fputc('$', f);
    fputc(*p, f);
  }
  fputc('"', f);
}

static bool bad_path(const char *p) {
  return !p || p[0] != '/' || strpbrk(p, "\n\r") != NULL;
}

int service_os_render(const struct service_options *o, char **out_text) {
  if (bad_path(o->agent_path) || (o->config_dir && bad_path(o->config_dir)))
    return CORDON_E_USAGE;
  bool sys = o->scope == SERVICE_SCOPE_SYSTEM;
  const char *config_dir = o->config_dir ? o->config_dir : (sys ? SYSTEM_STATE_DIR : NULL);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f)
    return -ENOMEM;
  fprintf(f,
          "# cordon-agent: runs signed executor packages in the strongest sandbox\n"
          "# this device has (bubblewrap + seccomp). Written by `cordon-agent service\n"
          "# install%s`; see docs/OPERATIONS.md.\n"
          "[Unit]\n"
          "Description=cordon agent%s\n"
          "Documentation=file:/usr/share/doc/cordon-agent/OPERATIONS.md\n",
          sys ? "" : " --user", sys ? "" : " (per user)");
  if (sys)
    fprintf(f, "Wants=network-online.target\n"
               "After=network-online.target\n");
  fprintf(f, "\n[Service]\n"
             "# READY=1 once the first connection attempt is made (a server that is\n"
             "# down must not fail the start), then STATUS= lines; docs/OPERATIONS.md\n"
             "Type=notify\n"
             "NotifyAccess=main\n"
             "ExecStart=");
  append_word(f, o->agent_path, true);
  if (config_dir) {
    fprintf(f, " --config ");
    append_word(f, config_dir, true);
  }
  fprintf(f, " run\n"
             "# SIGHUP re-reads config.json's ceiling; running jobs keep theirs\n"
             "ExecReload=/bin/kill -HUP $MAINPID\n"
             "# a crash or an error exit restarts the agent; a clean stop does not\n"
             "Restart=on-failure\n"
             "RestartSec=5s\n"
             "# 3: not paired, or revoked or unpaired by the server; 2: a bad config,\n"
             "# a staging directory the job user cannot reach, or another agent on\n"
             "# the same config directory. Restarting cannot help until someone acts\n"
             "RestartPreventExitStatus=2 3\n"
             "# the loop says WATCHDOG=1 every 30 s; one silent for 60 s is restarted\n"
             "WatchdogSec=60s\n"
             "# SIGTERM to the agent alone: it tells the server goaway, lets running\n"
             "# jobs finish for --drain-timeout (30 s), spools their results and\n"
             "# exits; what is left of its control group is killed after it\n"
             "KillMode=mixed\n"
             "TimeoutStopSec=45s\n");
  if (!sys)
    fprintf(f, "# the unit's cgroup subtree is the agent's, for per-job cgroups (where\n"
               "# one cannot be made, the job falls back to rlimits and its result says so)\n"
               "Delegate=yes\n");
  if (sys)
    fprintf(f, "# /var/lib/cordon-agent, 0711: the job user must reach its staged\n"
               "# package by path (docs/ARCHITECTURE.md); the files in it stay 0600\n"
               "StateDirectory=cordon-agent\n"
               "StateDirectoryMode=0711\n"
               "# memory and pids limits for jobs: the agent makes a child cgroup per job\n"
               "Delegate=memory pids\n"
               "# the agent runs as root only to drop each job to the job user; these\n"
               "# are the capabilities that needs: set*id for the drop, chown for the\n"
               "# workspace, DAC/FOWNER to clean up files the job user made, KILL for the\n"
               "# job's processes. bwrap itself runs as the job user and gets its\n"
               "# capabilities from its own user namespace, not from this set.\n"
               "CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_CHOWN CAP_FOWNER "
               "CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_KILL\n"
               "# the host is read-only to the agent and its jobs except the state\n"
               "# directory and the job user's home (where writable grants live)\n"
               "ProtectSystem=strict\n"
               "ReadWritePaths=-/var/lib/cordon-job\n");
  if (sys && strcmp(config_dir, SYSTEM_STATE_DIR) != 0) {
    fprintf(f, "ReadWritePaths=");
    append_word(f, config_dir, false);
    fputc('\n', f);
  }
  if (sys)
    fprintf(f, "# no login homes: the job user's home is /var/lib/cordon-job. A job_user\n"
               "# with a home under /home needs a drop-in with ProtectHome=no\n"
               "ProtectHome=yes\n"
               "# a private /tmp; jobs get their own tmpfs from bwrap anyway\n"
               "PrivateTmp=yes\n"
               "# the agent mounts nothing; bwrap's mounts are in its own namespaces\n"
               "PrivateMounts=yes\n"
               "# /dev with only the pseudo-devices; bwrap's --dev binds from these\n"
               "PrivateDevices=yes\n"
               "# cgroups must stay writable: per-job cgroups are created under ours\n"
               "ProtectControlGroups=no\n"
               "# not set, because they mount over parts of /proc and the kernel then\n"
               "# refuses bwrap's fresh /proc in its user namespace:\n"
               "# ProtectKernelTunables, ProtectKernelLogs; ProcSubset (pid) hides\n"
               "# /proc/sys, which bwrap reads\n"
               "ProtectKernelModules=yes\n"
               "ProtectClock=yes\n"
               "ProtectHostname=yes\n"
               "# not set either: PrivateUsers (the agent must be real root to become\n"
               "# the job user), PrivateNetwork and IPAddressDeny (the server is where\n"
               "# the operator put it; jobs may have the network), UMask=0077 (the job\n"
               "# user reads its staged package as 'other', 0644 and 0755)\n");
  if (sys)
    fprintf(f, "# hidepid=invisible: jobs at level contained see only their own\n"
               "# processes; the root agent still sees all (procfs's gid= is 0), and\n"
               "# bwrap can still mount its own /proc (no mounts over this one)\n"
               "ProtectProc=invisible\n");
  fprintf(f,
          "# no setuid gains for the agent or its jobs (the launcher sets it per job\n"
          "# too); bwrap on Debian is not setuid and works under it\n"
          "NoNewPrivileges=yes\n"
          "# exactly the namespaces bwrap makes for an isolated job\n"
          "RestrictNamespaces=user mnt pid net ipc uts cgroup\n"
          "# TCP for the server and jobs with net; AF_UNIX for the control socket\n"
          "# and jobs; AF_NETLINK because bwrap brings up lo in a new network\n"
          "# namespace\n"
          "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK\n"
          "RestrictRealtime=yes\n"
          "RestrictSUIDSGID=yes\n"
          "LockPersonality=yes\n"
          "KeyringMode=private\n"
          "SystemCallArchitectures=native\n"
          "# this filter binds bwrap and every job too: it refuses only calls that\n"
          "# the agent and bwrap never make and the job filter refuses anyway\n"
          "# (platform/linux/seccomp.c); @mount, @privileged and @resources stay,\n"
          "# bwrap mounts and the agent drops to the job user and sets rlimits\n"
          "SystemCallFilter=~@clock @cpu-emulation @debug @module @obsolete @raw-io @reboot "
          "@swap\n"
          "SystemCallErrorNumber=EPERM\n"
          "# not set: MemoryDenyWriteExecute (jobs may run JITs: node, java, pypy)\n"
          "\n[Install]\nWantedBy=%s\n",
          sys ? "multi-user.target" : "default.target");
  if (fclose(f) != 0 || !text) {
    free(text);
    return -ENOMEM;
  }
  *out_text = text;
  return 0;
}

static int pathf(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *out, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, len, fmt, ap);
  va_end(ap);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static const char *rootp(const struct service_options *o) {
  return o->root ? o->root : "";
}

static int unit_dir(const struct service_options *o, char *out, size_t len) {
  if (o->scope == SERVICE_SCOPE_SYSTEM)
    return pathf(out, len, "%s/etc/systemd/system", rootp(o));
  const char *xdg = o->root ? NULL : getenv("XDG_CONFIG_HOME");
  if (xdg && xdg[0] == '/')
    return pathf(out, len, "%s/systemd/user", xdg);
  if (bad_path(o->home))
    return CORDON_E_USAGE;
  return pathf(out, len, "%s%s/.config/systemd/user", rootp(o), o->home);
}

int service_os_definition_path(const struct service_options *o, char *out, size_t len) {
  char dir[PATH_MAX];
  int r = unit_dir(o, dir, sizeof(dir));
  if (r < 0)
    return r;
  return pathf(out, len, "%s/" UNIT_NAME, dir);
}

static bool systemd_running(void) {
  struct stat st;
  return stat("/run/systemd/system", &st) == 0 && S_ISDIR(st.st_mode);
}

/* systemctl [--user] verb [unit] */
static int systemctl(const struct service_options *o, const char *verb, bool with_unit,
                     char *capture, size_t cap_len) {
  char *argv[6];
  int n = 0;
  argv[n++] = SYSTEMCTL;
  if (o->scope == SERVICE_SCOPE_USER)
    argv[n++] = "--user";
  argv[n++] = (char *)verb;
  if (with_unit)
    argv[n++] = UNIT_NAME;
  argv[n] = NULL;
  char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL, NULL};
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  char xbuf[PATH_MAX + 20];
  if (xdg && snprintf(xbuf, sizeof(xbuf), "XDG_RUNTIME_DIR=%s", xdg) < (int)sizeof(xbuf))
    envp[2] = xbuf; /* systemctl --user finds the user's manager with it */
  return posix_service_exec(argv, envp, capture, cap_len);
}

static int ensure_job_user(const char *name, struct cordon_diag *diag) {
  if (!name || !name[0])
    return cordon_diag_set(diag, CORDON_E_USAGE, "no job user configured");
  if (getpwnam(name))
    return 0;
  char *argv[] = {
      USERADD,   "--system",          "--create-home", "--home-dir",  "/var/lib/cordon-job",
      "--shell", "/usr/sbin/nologin", "--comment",     "cordon jobs", (char *)name,
      NULL};
  if (strcmp(name, "cordon-job") != 0)
    return cordon_diag_set(diag, CORDON_E_JOB_USER_MISSING,
                           "job user '%s' does not exist; create it first", name);
  char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
  int st = posix_service_exec(argv, envp, NULL, 0);
  if (st != 0)
    return cordon_diag_set(diag, CORDON_E_JOB_USER_MISSING, "useradd %s failed (status %d)", name,
                           st);
  return 0;
}

int service_os_install(const struct service_options *o, struct cordon_diag *diag) {
  bool sys = o->scope == SERVICE_SCOPE_SYSTEM;
  if (sys && !o->root && geteuid() != 0)
    return cordon_diag_set(diag, CORDON_E_USAGE,
                           "a system service needs root; use --user for a per-user service");
  char *text;
  int r = service_os_render(o, &text);
  if (r < 0)
    return cordon_diag_set(diag, r, "agent path and config dir must be absolute paths");
  char dir[PATH_MAX], state[PATH_MAX];
  if ((r = unit_dir(o, dir, sizeof(dir))) < 0) {
    free(text);
    return cordon_diag_set(diag, r, "cannot place the unit file");
  }
  if (sys) {
    if (!o->root && (r = ensure_job_user(o->job_user, diag)) < 0)
      goto out;
    const char *sd = o->config_dir ? o->config_dir : SYSTEM_STATE_DIR;
    if ((r = pathf(state, sizeof(state), "%s%s", rootp(o), sd)) < 0 ||
        (r = fs_mkdir_p(state, 0711)) < 0 || (r = chmod(state, 0711) < 0 ? -errno : 0) < 0) {
      cordon_diag_set(diag, r, "cannot create %s: %s", sd, strerror(-r));
      goto out;
    }
  }
  if ((r = fs_mkdir_p(dir, 0755)) < 0) {
    cordon_diag_set(diag, r, "cannot create %s: %s", dir, strerror(-r));
    goto out;
  }
  if ((r = posix_service_write_definition(dir, UNIT_NAME, text, diag)) < 0)
    goto out;
  if (o->root || !systemd_running())
    goto out; /* written only; the next boot's systemd picks it up once enabled */
  if (systemctl(o, "daemon-reload", false, NULL, 0) != 0 ||
      systemctl(o, "enable", true, NULL, 0) != 0)
    r = cordon_diag_set(diag, CORDON_E_INTERNAL, "systemctl%s enable " UNIT_NAME " failed",
                        sys ? "" : " --user");
out:
  free(text);
  return r;
}

int service_os_uninstall(const struct service_options *o, struct cordon_diag *diag) {
  if (o->scope == SERVICE_SCOPE_SYSTEM && !o->root && geteuid() != 0)
    return cordon_diag_set(diag, CORDON_E_USAGE, "removing the system service needs root");
  char path[PATH_MAX];
  int r = service_os_definition_path(o, path, sizeof(path));
  if (r < 0)
    return cordon_diag_set(diag, r, "cannot place the unit file");
  bool manage = !o->root && systemd_running();
  if (manage) /* both fail harmlessly when it is not installed */
    (void)systemctl(o, "disable", true, NULL, 0), (void)systemctl(o, "stop", true, NULL, 0);
  if (unlink(path) < 0 && errno != ENOENT)
    return cordon_diag_set(diag, -errno, "cannot remove %s: %s", path, strerror(errno));
  if (manage)
    (void)systemctl(o, "daemon-reload", false, NULL, 0);
  return 0;
}

static int simple_verb(const struct service_options *o, const char *verb,
                       struct cordon_diag *diag) {
  if (o->root)
    return 0;
  if (!systemd_running())
    return cordon_diag_set(diag, CORDON_E_USAGE, "systemd is not running on this machine");
  char out[512];
  int st = systemctl(o, verb, true, out, sizeof(out));
  if (st != 0) {
    out[strcspn(out, "\n")] = '\0';
    return cordon_diag_set(diag, CORDON_E_INTERNAL, "systemctl %s " UNIT_NAME ": %s", verb,
                           out[0] ? out : "failed");
  }
  return 0;
}

int service_os_start(const struct service_options *o, struct cordon_diag *diag) {
  return simple_verb(o, "start", diag);
}

int service_os_stop(const struct service_options *o, struct cordon_diag *diag) {
  return simple_verb(o, "stop", diag);
}

int service_os_status(const struct service_options *o, json_t **out_status) {
  char path[PATH_MAX];
  int r = service_os_definition_path(o, path, sizeof(path));
  if (r < 0)
    return r;
  struct stat st;
  bool installed = stat(path, &st) == 0;
  json_t *j = json_object();
  if (!j)
    return -ENOMEM;
  json_object_set_new(j, "manager", json_string("systemd"));
  json_object_set_new(j, "scope",
                      json_string(o->scope == SERVICE_SCOPE_SYSTEM ? "system" : "user"));
  json_object_set_new(j, "path", json_string(path));
  json_object_set_new(j, "installed", json_boolean(installed));
  if (!o->root && systemd_running()) {
    char en[128], ac[128];
    systemctl(o, "is-enabled", true, en, sizeof(en));
    systemctl(o, "is-active", true, ac, sizeof(ac));
    en[strcspn(en, "\n")] = '\0';
    ac[strcspn(ac, "\n")] = '\0';
    json_object_set_new(j, "enabled", json_boolean(strcmp(en, "enabled") == 0));
    json_object_set_new(j, "active", json_boolean(strcmp(ac, "active") == 0));
    json_object_set_new(j, "detail", json_sprintf("is-enabled: %s; is-active: %s", en, ac));
  } else {
    json_object_set_new(j, "enabled", json_null());
    json_object_set_new(j, "active", json_null());
    json_object_set_new(
        j, "detail",
        json_string(o->root ? "files under --root only" : "systemd is not running here"));
  }
  *out_status = j;
  return 0;
}
