/* cordon-agent: command-line entry. Only JSON goes to stdout; one-line
 * errors go to stderr as "cordon-agent: <code>: <message>". Exit status:
 * 0 ran and exited 0 / command succeeded; 1 ran and failed, timed out or
 * was refused; 2 bad usage or malformed local input. */
#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/cmd_service.h"
#include "agent/commands.h"
#include "agent/config.h"
#include "agent/job.h"
#include "agent/state.h"
#include "compat/posix.h"
#include "platform/paths.h"
#include "platform/sandbox.h"

#define PROG "cordon-agent"

static void say_error(int err, const char *detail) {
  fprintf(stderr, PROG ": %s: %s\n", cordon_err_name(err),
          detail && detail[0] ? detail : cordon_err_message(err));
}

int agent_fail(int err, const char *message) {
  say_error(err, message);
  return err == CORDON_E_USAGE ? 2 : 1;
}

int agent_usage(const char *message) {
  say_error(CORDON_E_USAGE, message);
  return 2;
}

static int usage(const char *msg) {
  if (msg)
    fprintf(stderr, PROG ": usage: %s\n", msg);
  fprintf(
      stderr,
      "usage: " PROG " [--config DIR] COMMAND\n"
      "  status [--json]                         sandbox diagnostics for this device\n"
      "  explain DIR|FILE.cpkg [--json]          the sandbox plan, without running\n"
      "  exec DIR|FILE.cpkg [--trust KEY] [-- ARGS...]  run a package locally\n"
      "  pair --server HOST:PORT [--code CODE] [--name NAME]  enrol (the code may come on stdin)\n"
      "  run [--service]                         stay connected and run dispatched jobs\n"
      "                                          (--service: as the Windows service)\n"
      "  unpair                                  forget the pairing\n");
  return 2;
}

static void print_json(json_t *j) {
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (s) {
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
  }
  fflush(stdout);
}

struct cli {
  const char *config_dir;
  const char *cmd;
  const char *target;
  const char *trust;
  const char *server, *code, *name;
  bool json;
  bool service; /* run --service: started by the Windows Service Control Manager */
  char **args;
  size_t n_args;
};

static int parse_cli(int argc, char **argv, struct cli *c) {
  memset(c, 0, sizeof(*c));
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      c->args = argv + i + 1;
      c->n_args = (size_t)(argc - i - 1);
      break;
    } else if (strcmp(a, "--config") == 0 || strcmp(a, "--trust") == 0 ||
               strcmp(a, "--server") == 0 || strcmp(a, "--code") == 0 || strcmp(a, "--name") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, PROG ": usage: %s needs a value\n", a);
        return 2;
      }
      const char *v = argv[++i];
      if (strcmp(a, "--config") == 0)
        c->config_dir = v;
      else if (strcmp(a, "--trust") == 0)
        c->trust = v;
      else if (strcmp(a, "--server") == 0)
        c->server = v;
      else if (strcmp(a, "--code") == 0)
        c->code = v;
      else
        c->name = v;
    } else if (strcmp(a, "--json") == 0) {
      c->json = true;
    } else if (strcmp(a, "--service") == 0) {
      c->service = true;
    } else if (a[0] == '-' && a[1] == '-') {
      fprintf(stderr, PROG ": usage: unknown option %s\n", a);
      return 2;
    } else if (!c->cmd) {
      c->cmd = a;
    } else if (!c->target) {
      c->target = a;
    } else {
      fprintf(stderr, PROG ": usage: unexpected argument %s\n", a);
      return 2;
    }
  }
  if (!c->cmd)
    return usage(NULL);
  return 0;
}

static int cmd_status(const struct cli *c, const struct agent_config *cfg) {
  struct sandbox_policy pol;
  agent_config_policy(cfg, &pol);
  struct sandbox_probe *probe;
  int r = sandbox_probe_new(&pol, true, &probe);
  if (r < 0) {
    say_error(r, "probing the sandbox failed");
    return 1;
  }
  const char *reason;
  enum sandbox_level best = sandbox_probe_best(probe, &reason);
  json_t *o = json_object();
  json_object_set_new(o, "best_level", json_string(sandbox_level_name(best)));
  json_object_set_new(o, "downgrade_reason", reason ? json_string(reason) : json_null());
  json_object_set_new(o, "platform", json_string(paths_platform_name()));
  json_object_set_new(o, "probes", sandbox_probe_json(probe));
  json_object_set_new(o, "config_dir", json_string(cfg->dir));
  json_object_set_new(o, "lowest_level", json_string(sandbox_level_name(cfg->lowest_level)));
  struct agent_pairing pairing;
  bool paired = agent_pairing_load(cfg->dir, &pairing, NULL) == 0;
  json_object_set_new(o, "paired", json_boolean(paired));
  if (paired) {
    char dev[33], server[300];
    sodium_bin2hex(dev, sizeof(dev), pairing.device_id, 16);
    snprintf(server, sizeof(server), "%s:%d", pairing.host, pairing.port);
    json_object_set_new(o, "device_id", json_string(dev));
    json_object_set_new(o, "server", json_string(server));
    json_object_set_new(o, "user", json_string(pairing.user));
  }
  /* written by `run` as it connects and disconnects */
  char cpath[4200], cstate[32] = "";
  snprintf(cpath, sizeof(cpath), "%s/connection", cfg->dir);
  FILE *cf = fopen(cpath, "re");
  if (cf) {
    if (!fgets(cstate, sizeof(cstate), cf))
      cstate[0] = '\0';
    fclose(cf);
  }
  json_object_set_new(o, "connected", json_boolean(paired && strncmp(cstate, "connected", 9) == 0));
  if (c->json) {
    print_json(o);
  } else {
    /* people: a short summary on stderr keeps stdout for JSON only */
    fprintf(stderr, "best level: %s%s%s\n", sandbox_level_name(best), reason ? " — " : "",
            reason ? reason : "");
    print_json(o);
  }
  json_decref(o);
  sandbox_probe_free(probe);
  return 0;
}

/* Print the result JSON and the one-line error; return the exit status. */
static int finish_job(const struct job_result *res) {
  json_t *j = job_result_to_json(res);
  if (j) {
    print_json(j);
    json_decref(j);
  }
  if (res->error) {
    say_error(res->error, res->error_message);
    return 1;
  }
  if (res->timed_out) {
    fprintf(stderr, PROG ": timed_out: the job did not finish in time\n");
    return 1;
  }
  return res->ran && res->exited && res->exit_code == 0 ? 0 : 1;
}

static int cmd_exec(const struct cli *c, const struct agent_config *cfg, bool explain) {
  if (!c->target)
    return usage(explain ? "explain DIR|FILE.cpkg" : "exec DIR|FILE.cpkg [-- ARGS...]");
  struct agent_job job;
  struct cordon_diag diag = {{0}};
  int rc;
  int r = agent_job_prepare(&job, cfg, c->target, c->trust, &diag);
  if (r < 0) {
    if (job.result.error) { /* a refused package: the job was attempted */
      rc = finish_job(&job.result);
    } else {
      say_error(r == CORDON_E_MANIFEST_INVALID || r == CORDON_E_PACKAGE_TOO_LARGE ? r
                                                                                  : CORDON_E_USAGE,
                diag.msg);
      rc = 2;
    }
    goto out;
  }
  r = agent_job_plan(&job, c->args, c->n_args, false);
  if (r < 0 && !job.result.error)
    job_result_fail(&job.result, r, "%s", cordon_err_message(r));
  if (explain) {
    if (r < 0) {
      rc = finish_job(&job.result);
      goto out;
    }
    json_t *j = sandbox_plan_explain(job.plan);
    print_json(j);
    json_decref(j);
    rc = 0;
    goto out;
  }
  if (r == 0) {
    r = sandbox_run(job.plan, &job.result);
    if (r < 0 && !job.result.error)
      job_result_fail(&job.result, r, "%s", cordon_err_message(r));
  }
  rc = finish_job(&job.result);
out:
  agent_job_release(&job);
  return rc;
}

/* `service ...` takes options of its own: hand it the rest of argv. */
static int service_command(int argc, char **argv) {
  const char *config_dir = NULL;
  int i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      config_dir = argv[++i];
    else
      break;
  }
  struct agent_config *cfg;
  struct cordon_diag diag = {{0}};
  if (agent_config_load(config_dir, &cfg, &diag) < 0) {
    say_error(CORDON_E_CONFIG_INVALID, diag.msg);
    return 2;
  }
  int rc = agent_cmd_service(argc - i, argv + i, cfg);
  agent_config_free(cfg);
  return rc;
}

/* `run --service`: only the Windows service's command line says it (see
 * docs/WINDOWS.md); systemd and launchd run plain `run`. */
static int cmd_run(const struct cli *c, const struct agent_config *cfg) {
  return c->service ? agent_cmd_run_service(cfg) : agent_cmd_run(cfg);
}

int main(int argc, char **argv) {
  struct cli c;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0) {
      i++;
      continue;
    }
    if (strcmp(argv[i], "service") == 0)
      return sodium_init() < 0 ? 1 : service_command(argc, argv);
    break;
  }
  int r = parse_cli(argc, argv, &c);
  if (r)
    return r;
  if (c.service && strcmp(c.cmd, "run") != 0)
    return agent_usage("--service goes with run only");
  if (sodium_init() < 0) {
    fprintf(stderr, PROG ": crypto_failed: libsodium could not start\n");
    return 1;
  }
  struct agent_config *cfg;
  struct cordon_diag diag = {{0}};
  r = agent_config_load(c.config_dir, &cfg, &diag);
  if (r < 0) {
    say_error(r, diag.msg);
    return 2;
  }
  int rc;
  if (strcmp(c.cmd, "status") == 0)
    rc = cmd_status(&c, cfg);
  else if (strcmp(c.cmd, "exec") == 0)
    rc = cmd_exec(&c, cfg, false);
  else if (strcmp(c.cmd, "explain") == 0)
    rc = cmd_exec(&c, cfg, true);
  else if (strcmp(c.cmd, "pair") == 0)
    rc = agent_cmd_pair(cfg, c.server, c.code, c.name);
  else if (strcmp(c.cmd, "run") == 0)
    rc = cmd_run(&c, cfg);
  else if (strcmp(c.cmd, "unpair") == 0)
    rc = agent_cmd_unpair(cfg);
  else {
    fprintf(stderr, PROG ": usage: unknown command %s\n", c.cmd);
    rc = 2;
  }
  agent_config_free(cfg);
  return rc;
}
