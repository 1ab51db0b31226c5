/* cordon-agent: command-line entry: parse the command line and dispatch to
 * the commands (agent/commands.h), which are the agent library; help and
 * version come from the command table (agent/cli.c). stdout carries what
 * was asked: `status` and `explain` a summary (--json: JSON), `exec` of a
 * package its result JSON, an ad-hoc `exec` the command's own output,
 * `metrics` Prometheus text; one-line errors go to stderr as
 * "cordon-agent: <code>: <message>". Exit status: 0 ran and exited 0 /
 * command succeeded; 1 ran and failed, timed out or was refused; 2 bad
 * usage or malformed local input; 3 (`run`) not paired, or revoked or
 * unpaired by the server; an ad-hoc `exec`: the command's own. */
#include <getopt.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/cli.h"
#include "agent/cmd_service.h"
#include "agent/commands.h"
#include "agent/config.h"
#include "compat/posix.h"
#include "core/log.h"
#include "core/manifest.h"
#include "platform/sandbox.h"

/* Options that take a value, of every command (service's included): the
 * word after one is never the command. */
static bool takes_value(const char *a) {
  static const char *const opts[] = {"--config", "--trust",         "--server",    "--code",
                                     "--name",   "--drain-timeout", "--log-level", "--ro",
                                     "--rw",     "--root",          "--agent-path"};
  for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
    if (strcmp(a, opts[i]) == 0)
      return true;
  return false;
}

/* -h/--help anywhere before "--" (on any command or subcommand), --version,
 * and the `help` and `version` commands: answered here, on stdout, exit 0,
 * before any config is read. Returns -1 when argv asks for none of them. */
static int help_or_version(int argc, char **argv) {
  const char *cmd = NULL, *operand = NULL;
  bool help = false, version = false, json = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0)
      break;
    if (takes_value(a)) {
      i++;
      continue;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
      help = true;
    else if (strcmp(a, "--version") == 0 && !cmd)
      version = true;
    else if (strcmp(a, "--json") == 0)
      json = true;
    else if (a[0] == '-')
      continue;
    else if (!cmd)
      cmd = a;
    else if (!operand)
      operand = a;
  }
  if (help) {
    const struct agent_cli_command *c = agent_cli_find(cmd);
    if (cmd && !c)
      return agent_usagef("unknown command %s (" AGENT_PROG " help lists them)", cmd);
    if (c)
      agent_cli_print_help(stdout, c);
    else
      agent_cli_print_usage(stdout);
    return 0;
  }
  if (version || (cmd && strcmp(cmd, "version") == 0)) {
    if (operand)
      return agent_usagef("version takes no operand (%s)", operand);
    agent_cli_print_version(json);
    return 0;
  }
  if (cmd && strcmp(cmd, "help") == 0) {
    const struct agent_cli_command *c = agent_cli_find(operand);
    if (operand && !c)
      return agent_usagef("unknown command %s (" AGENT_PROG " help lists them)", operand);
    if (c)
      agent_cli_print_help(stdout, c);
    else
      agent_cli_print_usage(stdout);
    return 0;
  }
  return -1;
}

struct cli {
  const char *config_dir;
  const char *cmd;
  const char *target;
  const char *trust;
  const char *server, *code, *name;
  const char *drain_timeout, *log_level;
  bool json;
  bool net; /* exec/explain of an ad-hoc command: --net, --ro, --rw */
  const char *ro[MANIFEST_MAX_GRANTS], *rw[MANIFEST_MAX_GRANTS];
  size_t n_ro, n_rw;
  bool service; /* run --service: started by the Windows Service Control Manager */
  char **args;
  size_t n_args;
};

/* Every option a command may take; which command takes which is the
 * table below. getopt_long: "--opt VALUE" and "--opt=VALUE" alike. */
enum {
  OPT_CONFIG = 1000,
  OPT_TRUST,
  OPT_JSON,
  OPT_NET,
  OPT_RO,
  OPT_RW,
  OPT_SERVER,
  OPT_CODE,
  OPT_NAME,
  OPT_DRAIN,
  OPT_LOG_LEVEL,
  OPT_SERVICE
};
static const struct option all_opts[] = {
    {"config", required_argument, NULL, OPT_CONFIG},
    {"trust", required_argument, NULL, OPT_TRUST},
    {"json", no_argument, NULL, OPT_JSON},
    {"net", no_argument, NULL, OPT_NET},
    {"ro", required_argument, NULL, OPT_RO},
    {"rw", required_argument, NULL, OPT_RW},
    {"server", required_argument, NULL, OPT_SERVER},
    {"code", required_argument, NULL, OPT_CODE},
    {"name", required_argument, NULL, OPT_NAME},
    {"drain-timeout", required_argument, NULL, OPT_DRAIN},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"service", no_argument, NULL, OPT_SERVICE},
    {0},
};

/* Which options each command takes (--config: every one), and how many
 * operands before "--". */
static const struct {
  const char *cmd;
  const int opts[8];
  int operands;
} cmd_opts[] = {
    {"status", {OPT_JSON}, 0},
    {"explain", {OPT_TRUST, OPT_JSON, OPT_NET, OPT_RO, OPT_RW}, 1},
    {"exec", {OPT_TRUST, OPT_JSON, OPT_NET, OPT_RO, OPT_RW}, 1},
    {"pair", {OPT_SERVER, OPT_CODE, OPT_NAME}, 0},
    {"run", {OPT_DRAIN, OPT_LOG_LEVEL, OPT_SERVICE}, 0},
    {"metrics", {0}, 0},
    {"unpair", {0}, 0},
};

/* The command's own option table (getopt_long's form) into out. */
static int command_options(const char *cmd, struct option out[16], int *out_operands) {
  for (size_t i = 0; i < sizeof(cmd_opts) / sizeof(cmd_opts[0]); i++) {
    if (strcmp(cmd_opts[i].cmd, cmd) != 0)
      continue;
    size_t n = 0;
    out[n++] = all_opts[0]; /* --config */
    for (size_t k = 0; k < 8 && cmd_opts[i].opts[k]; k++)
      for (const struct option *o = all_opts; o->name; o++)
        if (o->val == cmd_opts[i].opts[k])
          out[n++] = *o;
    out[n] = (struct option){0};
    *out_operands = cmd_opts[i].operands;
    return 0;
  }
  return -1;
}

/* An option the command does not take (known to another command, or to
 * none), or a value given to one that takes none. */
static int refused_option(const char *cmd, const struct option *mine, const char *arg) {
  if (strncmp(arg, "--", 2) != 0)
    return agent_usagef("unknown option %s (" AGENT_PROG " help %s)", arg, cmd);
  size_t n = strcspn(arg + 2, "=");
  for (const struct option *o = mine; o->name; o++)
    if (strlen(o->name) == n && strncmp(o->name, arg + 2, n) == 0)
      return agent_usagef("--%s takes no value", o->name);
  for (const struct option *o = all_opts; o->name; o++)
    if (strlen(o->name) == n && strncmp(o->name, arg + 2, n) == 0)
      return agent_usagef("%s does not take --%s (" AGENT_PROG " help %s)", cmd, o->name, cmd);
  return agent_usagef("unknown option %.*s (" AGENT_PROG " help %s)", (int)(n + 2), arg, cmd);
}

static int set_option(struct cli *c, int id, const char *v) {
  switch (id) {
  case OPT_CONFIG:
    c->config_dir = v;
    break;
  case OPT_TRUST:
    c->trust = v;
    break;
  case OPT_JSON:
    c->json = true;
    break;
  case OPT_NET:
    c->net = true;
    break;
  case OPT_SERVER:
    c->server = v;
    break;
  case OPT_CODE:
    c->code = v;
    break;
  case OPT_NAME:
    c->name = v;
    break;
  case OPT_DRAIN:
    c->drain_timeout = v;
    break;
  case OPT_LOG_LEVEL:
    c->log_level = v;
    break;
  case OPT_SERVICE:
    c->service = true;
    break;
  case OPT_RO:
  case OPT_RW:
    if (c->n_ro + c->n_rw >= MANIFEST_MAX_GRANTS)
      return agent_usagef("at most %d --ro and --rw", MANIFEST_MAX_GRANTS);
    if (id == OPT_RO)
      c->ro[c->n_ro++] = v;
    else
      c->rw[c->n_rw++] = v;
    break;
  }
  return 0;
}

/* [--config DIR] COMMAND [its options and operands] [-- ARGS...]. The
 * environment's CORDON_CONFIG stands in for --config. */
static int parse_cli(int argc, char **argv, struct cli *c) {
  memset(c, 0, sizeof(*c));
  c->config_dir = getenv("CORDON_CONFIG");
  if (c->config_dir && !c->config_dir[0])
    c->config_dir = NULL;
  static const struct option global[] = {{"config", required_argument, NULL, OPT_CONFIG}, {0}};
  opterr = 0;
  optind = 0; /* glibc: start afresh */
  int id;
  /* "+": the options before the command only */
  while ((id = getopt_long(argc, argv, "+", global, NULL)) != -1) {
    if (id == '?' || id == ':')
      return optopt == OPT_CONFIG ||
                     (argv[optind - 1] && strncmp(argv[optind - 1], "--config", 8) == 0)
                 ? agent_usage("--config needs a directory")
                 : agent_usagef("unknown option %s before the command", argv[optind - 1]);
    c->config_dir = optarg;
  }
  if (optind >= argc)
    return agent_usage("a command is needed (" AGENT_PROG " help lists them)");
  c->cmd = argv[optind];
  struct option opts[16];
  int operands = 0;
  if (command_options(c->cmd, opts, &operands) < 0)
    return 0; /* main() names an unknown command */
  int sub_argc = argc - optind;
  char **sub_argv = argv + optind;
  optind = 0;
  int n_operands = 0;
  /* "-": operands come back as 1, in order; "--" ends the options */
  while ((id = getopt_long(sub_argc, sub_argv, "-:", opts, NULL)) != -1) {
    const char *arg = sub_argv[optind - 1];
    if (id == 1) {
      if (++n_operands > operands)
        return agent_usagef("unexpected argument %s (" AGENT_PROG " help %s)", optarg, c->cmd);
      c->target = optarg;
    } else if (id == ':') {
      return agent_usagef("%s needs a value", arg);
    } else if (id == '?') {
      return refused_option(c->cmd, opts, arg);
    } else {
      int r = set_option(c, id, optarg);
      if (r)
        return r;
    }
  }
  if (optind > 0 && optind <= sub_argc && strcmp(sub_argv[optind - 1], "--") == 0) {
    c->args = sub_argv + optind;
    c->n_args = (size_t)(sub_argc - optind);
  } else if (optind < sub_argc) {
    return agent_usagef("unexpected argument %s", sub_argv[optind]);
  }
  if (c->n_args && operands == 0)
    return agent_usagef("%s takes no arguments after --", c->cmd);
  return 0;
}

/* exec and explain: of a package (DIR|FILE.cpkg), or with no package of
 * the ad-hoc command after "--". */
static int cmd_exec(const struct cli *c, const struct agent_config *cfg, bool explain) {
  const char *name = explain ? "explain" : "exec";
  bool caps = c->net || c->n_ro || c->n_rw;
  if (!c->target && c->n_args == 0)
    return agent_usagef("%s needs a package or -- CMD (" AGENT_PROG " help %s)", name, name);
  if (c->target && caps)
    return agent_usagef("--net, --ro and --rw are for an ad-hoc command (%s -- CMD), a package "
                        "says what it needs",
                        name);
  if (!c->target && c->trust)
    return agent_usage("--trust is for a .cpkg package");
  struct agent_exec_options o = {
      .source = c->target,
      .trust = c->trust,
      .args = c->args,
      .n_args = c->n_args,
      .explain = explain,
      .json = c->json,
      .net = c->net,
      .ro = c->ro,
      .rw = c->rw,
      .n_ro = c->n_ro,
      .n_rw = c->n_rw,
  };
  return agent_cmd_exec(cfg, &o);
}

/* `service ...` takes options of its own: hand it the rest of argv. */
static int service_command(int argc, char **argv) {
  const char *config_dir = getenv("CORDON_CONFIG");
  if (config_dir && !config_dir[0])
    config_dir = NULL;
  int i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      config_dir = argv[++i];
    else if (strncmp(argv[i], "--config=", 9) == 0)
      config_dir = argv[i] + 9;
    else
      break;
  }
  struct agent_config *cfg;
  struct cordon_diag diag = {{0}};
  if (agent_config_load(config_dir, &cfg, &diag) < 0) {
    agent_say_error(CORDON_E_CONFIG_INVALID, diag.msg);
    return 2;
  }
  int rc = agent_cmd_service(argc - i, argv + i, cfg);
  agent_config_free(cfg);
  return rc;
}

/* `run --service`: only the Windows service's command line says it (see
 * docs/WINDOWS.md); systemd and launchd run plain `run`. The Windows
 * service drains with the default timeout (the SCM's wait hint). */
static int cmd_run(const struct cli *c, const struct agent_config *cfg) {
  struct agent_run_options opt = {.drain_timeout_s = AGENT_DRAIN_TIMEOUT_DEFAULT_S};
  if (c->drain_timeout) {
    char *end;
    long v = strtol(c->drain_timeout, &end, 10);
    if (*end || end == c->drain_timeout || v < 0 || v > AGENT_DRAIN_TIMEOUT_MAX_S)
      return agent_usage("--drain-timeout: seconds in 0..86400");
    opt.drain_timeout_s = (unsigned)v;
  }
  return c->service ? agent_cmd_run_service(cfg) : agent_cmd_run(cfg, &opt);
}

int main(int argc, char **argv) {
  core_log_set_program(AGENT_PROG);
  int hv = help_or_version(argc, argv);
  if (hv >= 0)
    return hv;
  struct cli c;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0) {
      i++;
      continue;
    }
    if (strncmp(argv[i], "--config=", 9) == 0)
      continue;
    if (strcmp(argv[i], "service") == 0)
      return sodium_init() < 0 ? 1 : service_command(argc, argv);
    break;
  }
  int r = parse_cli(argc, argv, &c);
  if (r)
    return r;
  if (!agent_cli_find(c.cmd))
    return agent_usagef("unknown command %s (" AGENT_PROG " help lists them)", c.cmd);
  if (c.log_level) {
    enum core_log_level level;
    if (core_log_level_parse(c.log_level, &level) < 0)
      return agent_usage("--log-level: debug, info, warn or error");
    core_log_set_level(level);
  }
  if (strcmp(c.cmd, "exec") == 0 || strcmp(c.cmd, "run") == 0) {
    /* a per-user agent without a cgroup asks for one first (a delegated
     * systemd user scope); only when there is none do the limits fall
     * back to rlimits, as the result then says */
    const char *why;
    if (sandbox_enter_user_cgroup(argc, argv, &why) < 0)
      fprintf(stderr, AGENT_PROG ": %s; limits by rlimit\n", why);
  }
  if (sodium_init() < 0) {
    fprintf(stderr, AGENT_PROG ": crypto_failed: libsodium could not start\n");
    return 1;
  }
  struct agent_config *cfg;
  struct cordon_diag diag = {{0}};
  r = agent_config_load(c.config_dir, &cfg, &diag);
  if (r < 0) {
    agent_say_error(r, diag.msg);
    return 2;
  }
  int rc;
  if (strcmp(c.cmd, "status") == 0)
    rc = agent_cmd_status(cfg, c.json);
  else if (strcmp(c.cmd, "exec") == 0)
    rc = cmd_exec(&c, cfg, false);
  else if (strcmp(c.cmd, "explain") == 0)
    rc = cmd_exec(&c, cfg, true);
  else if (strcmp(c.cmd, "pair") == 0)
    rc = agent_cmd_pair(cfg, c.server, c.code, c.name);
  else if (strcmp(c.cmd, "run") == 0)
    rc = cmd_run(&c, cfg);
  else if (strcmp(c.cmd, "metrics") == 0)
    rc = agent_cmd_metrics(cfg);
  else if (strcmp(c.cmd, "unpair") == 0)
    rc = agent_cmd_unpair(cfg);
  else
    rc = agent_usagef("unknown command %s (" AGENT_PROG " help lists them)", c.cmd);
  agent_config_free(cfg);
  return rc;
}
