/* `cordon-agent service install|uninstall|start|stop|status|print` on
 * Windows, on the Service Control Manager (platform/windows/service_windows.h),
 * and `run --service`, the service's own command line. Same contract as
 * agent/cmd_service.h; the systemd/launchd options --user, --system and
 * --root do not apply here and are refused. */
#include <windows.h>

#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/cmd_service.h"
#include "agent/commands.h"
#include "compat/posix.h"
#include "compat/win32.h"
#include "platform/windows/service_windows.h"

#define PROG "cordon-agent"
/* the service's log is started afresh (the old one kept as .1) past this */
#define SERVICE_LOG_MAX_BYTES (4L * 1024 * 1024)

static int service_usage(const char *msg) {
  if (msg)
    fprintf(stderr, PROG ": usage: %s\n", msg);
  fprintf(stderr,
          "usage: " PROG " [--config DIR] service install|uninstall|start|stop|status|print\n"
          "         [--agent-path PATH] [--default-config] [--json]\n");
  return 2;
}

static void print_status(json_t *j, bool json_only) {
  if (!json_only) {
    json_t *st = json_object_get(j, "state");
    fprintf(stderr, "scm service %s: %s%s%s\n", json_string_value(json_object_get(j, "name")),
            json_is_true(json_object_get(j, "installed")) ? "installed" : "not installed",
            json_is_string(st) ? ", " : "", json_is_string(st) ? json_string_value(st) : "");
  }
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (s)
    printf("%s\n", s);
  free(s);
  fflush(stdout);
}

int agent_cmd_service(int argc, char **argv, const struct agent_config *cfg) {
  const char *action = NULL, *agent_path = NULL, *config_dir = NULL;
  bool json_only = false, default_config = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--agent-path") == 0 || strcmp(a, "--config") == 0) {
      if (i + 1 >= argc)
        return service_usage("an option needs a value");
      if (a[2] == 'a')
        agent_path = argv[++i];
      else
        config_dir = argv[++i];
    } else if (strcmp(a, "--default-config") == 0) {
      default_config = true;
    } else if (strcmp(a, "--json") == 0) {
      json_only = true;
    } else if (strcmp(a, "--user") == 0 || strcmp(a, "--system") == 0 || strcmp(a, "--root") == 0) {
      fprintf(stderr, PROG ": usage: %s is for systemd and launchd, not Windows\n", a);
      return 2;
    } else if (a[0] == '-') {
      fprintf(stderr, PROG ": usage: unknown option %s\n", a);
      return 2;
    } else if (!action) {
      action = a;
    } else {
      fprintf(stderr, PROG ": usage: unexpected argument %s\n", a);
      return 2;
    }
  }
  if (!action)
    return service_usage(NULL);

  /* --config after the action: that directory's config, not the caller's */
  struct agent_config *own = NULL;
  if (config_dir) {
    struct cordon_diag cd = {{0}};
    int cr = agent_config_load(config_dir, &own, &cd);
    if (cr < 0)
      return agent_fail(cr, cd.msg);
    cfg = own;
  }
  /* agent_path NULL: this program (service_windows_command_line finds it) */
  struct service_windows_options o = {
      .agent_path = agent_path,
      .config_dir = default_config ? NULL : cfg->dir,
  };
  struct cordon_diag diag = {{0}};
  int r;
  if (strcmp(action, "install") == 0) {
    r = service_windows_install(&o, &diag);
    if (r == 0)
      fprintf(stderr,
              PROG ": service %s installed (automatic start; `" PROG
                   " service start` starts it now)\n",
              SERVICE_WINDOWS_DEFAULT_NAME);
  } else if (strcmp(action, "uninstall") == 0) {
    r = service_windows_uninstall(&o, &diag);
    if (r == 0)
      fprintf(stderr, PROG ": service %s removed (the state directory %s is kept)\n",
              SERVICE_WINDOWS_DEFAULT_NAME, cfg->dir);
  } else if (strcmp(action, "start") == 0) {
    r = service_windows_start(&o, &diag);
  } else if (strcmp(action, "stop") == 0) {
    r = service_windows_stop(&o, &diag);
  } else if (strcmp(action, "print") == 0) {
    wchar_t *cl = NULL;
    r = service_windows_command_line(&o, &cl);
    char *u = r == 0 ? win_utf8(cl) : NULL;
    if (u) {
      printf("%s\n", u);
      fflush(stdout);
    } else {
      cordon_diag_set(&diag, r < 0 ? r : -ENOMEM,
                      "cannot build the service's command line (an absolute agent path is needed)");
      r = r < 0 ? r : -ENOMEM;
    }
    free(u);
    free(cl);
  } else if (strcmp(action, "status") == 0) {
    json_t *j = NULL;
    r = service_windows_status(&o, &j);
    if (r == 0) {
      print_status(j, json_only);
      json_decref(j);
    } else {
      cordon_diag_set(&diag, r, "cannot query the Service Control Manager");
    }
  } else {
    fprintf(stderr, PROG ": usage: unknown service action %s\n", action);
    agent_config_free(own);
    return 2;
  }
  agent_config_free(own);
  if (r < 0)
    return agent_fail(r, diag.msg);
  return 0;
}

/* ---- run --service ---- */

/* A service has no console: its log lines go to <config>\service.log. */
static void log_to_file(const char *dir) {
  char path[MAX_PATH * 3], old[MAX_PATH * 3 + 2];
  snprintf(path, sizeof(path), "%s/service.log", dir);
  snprintf(old, sizeof(old), "%s.1", path);
  struct stat st;
  if (stat(path, &st) == 0 && st.st_size > SERVICE_LOG_MAX_BYTES)
    rename(path, old);
  /* A service starts without standard handles: the CRT's stderr has no
   * descriptor (-2). freopen gives it the file; Wine's msvcrt refuses to
   * reopen a stream without a descriptor, so there fd 2 is made the file
   * and the (msvcrt, not opaque) stream pointed at it. */
  wchar_t *w = win_wide(path);
  if (!w)
    return;
  bool ok = _wfreopen(w, L"ab", stderr) != NULL;
#ifndef _UCRT
  if (!ok && _fileno(stderr) < 0) {
    int fd = _wopen(w, _O_WRONLY | _O_CREAT | _O_APPEND | _O_BINARY | _O_NOINHERIT,
                    _S_IREAD | _S_IWRITE);
    if (fd >= 0 && (fd == 2 || _dup2(fd, 2) == 0)) {
      stderr->_file = 2;
      clearerr(stderr);
      ok = true;
    }
    if (fd >= 0 && fd != 2)
      _close(fd);
  }
#endif
  free(w);
  if (!ok)
    return;
  setvbuf(stderr, NULL, _IONBF, 0);
  SetStdHandle(STD_ERROR_HANDLE, (HANDLE)_get_osfhandle(_fileno(stderr)));
}

static int service_run(void *ctx) {
  const struct agent_config *cfg = ctx;
  log_to_file(cfg->dir);
  fprintf(stderr, PROG ": started by the Service Control Manager\n");
  int rc = agent_cmd_run(cfg);
  fprintf(stderr, PROG ": service stopped (exit status %d)\n", rc);
  return rc;
}

static void service_stop(void *ctx) {
  (void)ctx;
  agent_run_request_stop();
}

int agent_cmd_run_service(const struct agent_config *cfg) {
  int r = service_windows_dispatch(SERVICE_WINDOWS_DEFAULT_NAME, service_run, service_stop,
                                   (void *)cfg);
  if (r == CORDON_E_USAGE)
    return agent_usage("run --service: this process was not started by the Service Control "
                       "Manager (run it without --service in a console)");
  if (r < 0)
    return agent_fail(r, "cannot connect to the Service Control Manager");
  /* the run's own exit status, which the SCM was told */
  return r;
}
