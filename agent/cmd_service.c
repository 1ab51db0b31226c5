#include "agent/cmd_service.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/cli.h"
#include "compat/posix.h"
#include "platform/service.h"

#define PROG "cordon-agent"

static int fail(int err, const char *detail) {
  fprintf(stderr, PROG ": %s: %s\n", cordon_err_name(err),
          detail && detail[0] ? detail : cordon_err_message(err));
  return err == CORDON_E_USAGE ? 2 : 1;
}

static int service_usage(const char *msg) {
  return agent_usagef("%s (" PROG " help service)",
                      msg ? msg : "service install|uninstall|start|stop|status|print [OPTIONS]");
}

/* The summary line on stderr, then the JSON on stdout. */
static void print_status(json_t *j, bool json_only) {
  if (!json_only && service_has_scopes()) {
    fprintf(stderr, "%s service %s: %s\n", service_manager_name(),
            json_is_true(json_object_get(j, "installed")) ? "installed" : "not installed",
            json_string_value(json_object_get(j, "detail")));
  } else if (!json_only) {
    json_t *st = json_object_get(j, "state");
    fprintf(stderr, "%s service %s: %s%s%s\n", service_manager_name(),
            json_string_value(json_object_get(j, "name")),
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
  const char *action = NULL, *root = NULL, *agent_path = NULL, *config_dir = NULL;
  bool json_only = false, have_scope = false, default_config = false;
  bool scoped = service_has_scopes();
  enum service_scope scope = service_default_scope();
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!scoped &&
        (strcmp(a, "--user") == 0 || strcmp(a, "--system") == 0 || strcmp(a, "--root") == 0)) {
      fprintf(stderr, PROG ": usage: %s is for systemd and launchd, not Windows\n", a);
      return 2;
    } else if (strcmp(a, "--user") == 0 || strcmp(a, "--system") == 0) {
      enum service_scope s = a[2] == 'u' ? SERVICE_SCOPE_USER : SERVICE_SCOPE_SYSTEM;
      if (have_scope && s != scope)
        return service_usage("--user and --system exclude each other");
      scope = s;
      have_scope = true;
    } else if (strcmp(a, "--root") == 0 || strcmp(a, "--agent-path") == 0 ||
               strcmp(a, "--config") == 0) {
      if (i + 1 >= argc)
        return service_usage("an option needs a value");
      const char *v = argv[++i];
      if (a[2] == 'r')
        root = v;
      else if (a[2] == 'a')
        agent_path = v;
      else
        config_dir = v;
    } else if (strcmp(a, "--default-config") == 0) {
      default_config = true;
    } else if (strcmp(a, "--json") == 0) {
      json_only = true;
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
  if (root && root[0] != '/')
    return service_usage("--root needs an absolute path");

  /* --config after the action: that directory's config, not the caller's */
  struct agent_config *own = NULL;
  if (config_dir) {
    struct cordon_diag cd = {{0}};
    int cr = agent_config_load(config_dir, &own, &cd);
    if (cr < 0)
      return fail(cr, cd.msg);
    cfg = own;
  }

  char self[SERVICE_PATH_MAX];
  if (!agent_path) {
    if (service_self_path(self, sizeof(self)) < 0) {
      agent_config_free(own);
      return fail(CORDON_E_USAGE, "cannot find this program's path; give --agent-path");
    }
    agent_path = self;
  }
  if (root && strcmp(root, "/") == 0)
    root = NULL;

  /* home and uid unset: the service is for the invoking user */
  struct service_options o = {
      .scope = scope,
      .agent_path = agent_path,
      .config_dir = default_config ? NULL : cfg->dir,
      .job_user = cfg->job_user,
      .root = root,
  };
  struct cordon_diag diag = {{0}};
  int r;
  char path[SERVICE_PATH_MAX]; /* the definition file, or the SCM's service name */
  if (service_definition_path(&o, path, sizeof(path)) < 0)
    snprintf(path, sizeof(path), "(none)");
  if (strcmp(action, "install") == 0) {
    r = service_install(&o, &diag);
    if (r == 0 && scoped)
      fprintf(stderr, PROG ": service installed: %s (%s)\n", path,
              root ? "files only" : "enabled; `" PROG " service start` starts it");
    else if (r == 0)
      fprintf(stderr,
              PROG ": service %s installed (automatic start; `" PROG
                   " service start` starts it now)\n",
              path);
  } else if (strcmp(action, "uninstall") == 0) {
    r = service_uninstall(&o, &diag);
    if (r == 0)
      fprintf(stderr,
              scoped ? PROG ": service removed: %s (the state directory %s is kept)\n"
                     : PROG ": service %s removed (the state directory %s is kept)\n",
              path, cfg->dir);
  } else if (strcmp(action, "print") == 0) {
    char *text;
    r = service_render(&o, &text);
    if (r == 0) {
      fputs(text, stdout);
      fflush(stdout);
      free(text);
    } else {
      cordon_diag_set(&diag, r,
                      scoped ? "cannot render the service definition (absolute paths needed)"
                             : "cannot build the service's command line (an absolute agent path "
                               "is needed)");
    }
  } else if (strcmp(action, "start") == 0) {
    r = service_start(&o, &diag);
  } else if (strcmp(action, "stop") == 0) {
    r = service_stop(&o, &diag);
  } else if (strcmp(action, "status") == 0) {
    json_t *j = NULL;
    r = service_status(&o, &j);
    if (r == 0) {
      print_status(j, json_only);
      json_decref(j);
    } else if (!scoped) {
      cordon_diag_set(&diag, r, "cannot query the Service Control Manager");
    }
  } else {
    fprintf(stderr, PROG ": usage: unknown service action %s\n", action);
    agent_config_free(own);
    return 2;
  }
  agent_config_free(own);
  if (r < 0)
    return fail(r, diag.msg);
  return 0;
}
