#include "agent/cli.h"

#include <msgpack.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "compat/posix.h"
#include "platform/paths.h"
#include "proto/msg.h"

/* The one list of commands: usage, `help`, `-h` and main.c's dispatch
 * read it. docs/man/cordon-agent.8.scd says the same in prose. */
const struct agent_cli_command agent_cli_commands[] = {
    {"status", "[--json]", "what sandbox this device can give, its pairing and the running agent",
     "  --json                the whole report as JSON (default: a summary)\n"},
    {"explain",
     "DIR|FILE.cpkg [--trust KEYFILE] [--json] [-- ARGS...]  |  explain [--net] [--ro PATH] [--rw "
     "PATH] [--json] -- CMD [ARGS...]",
     "the sandbox plan for a package or an ad-hoc command, without running it",
     "  --trust KEYFILE       a publisher public key file a .cpkg may verify against\n"
     "  --net, --ro, --rw     as for exec\n"
     "  --json                the whole plan as JSON: bwrap argv, seccomp rules, ... (default: a "
     "summary)\n"},
    {"exec",
     "DIR|FILE.cpkg [--trust KEYFILE] [-- ARGS...]  |  exec [--net] [--ro PATH] [--rw PATH] "
     "[--json] -- CMD [ARGS...]",
     "run a package, or an ad-hoc command, here under the same sandbox as a dispatched job",
     "  --trust KEYFILE       a publisher public key file a .cpkg may verify against\n"
     "  -- ARGS...            a package: appended to its entry\n"
     "  -- CMD [ARGS...]      no package: run CMD (found on PATH) in a default manifest\n"
     "  --net                 ad-hoc: the command may use the network\n"
     "  --ro PATH             ad-hoc: PATH readable (repeatable; under the owner's grant_roots)\n"
     "  --rw PATH             ad-hoc: PATH readable and writable (repeatable)\n"
     "  --json                ad-hoc: the result JSON instead of the command's own output\n"},
    {"pair", "--server HOST:PORT [--code CODE] [--name NAME]",
     "enrol this device with a server (the code may come on stdin)",
     "  --server HOST:PORT    the server's agent port\n"
     "  --code CODE           the pairing code (default: the first line of stdin)\n"
     "  --name NAME           how the server lists this device (default: the host name)\n"},
    {"run", "[--drain-timeout S] [--log-level LEVEL] [--service]",
     "stay connected and run dispatched jobs",
     "  --drain-timeout S     on SIGTERM, how long running jobs may go on (default 30, 0..86400)\n"
     "  --log-level LEVEL     debug, info (default), warn or error\n"
     "  --service             as the Windows service (the SCM's command line only)\n"},
    {"metrics", "", "the running agent's metrics (Prometheus text)", ""},
    {"unpair", "", "forget the pairing (and tell the server when it is reachable)", ""},
    {"service", "install|uninstall|start|stop|status|print [OPTIONS]",
     "the agent as a service of this OS's service manager",
     "  --user | --system     the scope (systemd and launchd only)\n"
     "  --root DIR            write the files below DIR, touch nothing else (systemd, launchd)\n"
     "  --agent-path PATH     the cordon-agent the service runs (default: this one)\n"
     "  --config DIR          the config directory the service uses\n"
     "  --default-config      leave --config out of the service definition\n"
     "  --json                status: JSON only\n"},
    {"help", "[COMMAND]", "this list, or one command's options", ""},
    {"version", "[--json]", "version, protocol versions, build options and libraries",
     "  --json                as a JSON object\n"},
    {NULL, NULL, NULL, NULL},
};

const struct agent_cli_command *agent_cli_find(const char *name) {
  for (const struct agent_cli_command *c = agent_cli_commands; name && c->name; c++)
    if (strcmp(c->name, name) == 0)
      return c;
  return NULL;
}

void agent_cli_print_usage(FILE *f) {
  fprintf(f, "usage: " AGENT_PROG " [--config DIR] COMMAND [OPTIONS]\n"
             "       " AGENT_PROG " --help | --version\n\ncommands:\n");
  for (const struct agent_cli_command *c = agent_cli_commands; c->name; c++)
    fprintf(f, "  %-9s %s\n", c->name, c->summary);
  fprintf(f, "\n`" AGENT_PROG " help COMMAND` or `" AGENT_PROG
             " COMMAND --help` shows a command's options.\n");
}

void agent_cli_print_help(FILE *f, const struct agent_cli_command *c) {
  fprintf(f, "usage: " AGENT_PROG " [--config DIR] %s%s%s\n\n%s\n", c->name,
          c->synopsis[0] ? " " : "", c->synopsis, c->summary);
  fprintf(f,
          "\noptions:\n%s  --config DIR          the agent's config directory\n"
          "  -h, --help            this help\n",
          c->details);
}

/* The build's options, as the compiler saw them. */
static void build_options(char *buf, size_t len) {
  bool sanitize = false;
#if defined(__SANITIZE_ADDRESS__)
  sanitize = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  sanitize = true;
#endif
#endif
  int fortify = 0;
#ifdef _FORTIFY_SOURCE
  fortify = _FORTIFY_SOURCE;
#endif
  bool ndebug = false;
#ifdef NDEBUG
  ndebug = true;
#endif
  snprintf(buf, len, "platform=%s sanitize=%s fortify=%d assert=%s compiler=\"%s\"",
           CORDON_PLATFORM_NAME, sanitize ? "on" : "off", fortify, ndebug ? "off" : "on",
           __VERSION__);
}

void agent_cli_print_version(bool json) {
  char opts[256], msgpack_v[32];
  build_options(opts, sizeof(opts));
  snprintf(msgpack_v, sizeof(msgpack_v), "%s", msgpack_version());
  if (json) {
    json_t *o = json_object();
    json_object_set_new(o, "program", json_string(AGENT_PROG));
    json_object_set_new(o, "version", json_string(AGENT_VERSION));
    json_t *p = json_object();
    json_object_set_new(p, "min", json_integer(MSG_PROTO_VERSION_MIN));
    json_object_set_new(p, "max", json_integer(MSG_PROTO_VERSION_MAX));
    json_object_set_new(o, "protocol", p);
    json_object_set_new(o, "platform", json_string(paths_platform_name()));
    json_object_set_new(o, "build", json_string(opts));
    json_t *l = json_object();
    json_object_set_new(l, "libsodium", json_string(sodium_version_string()));
    json_object_set_new(l, "libuv", json_string(uv_version_string()));
    json_object_set_new(l, "msgpack-c", json_string(msgpack_v));
    json_object_set_new(l, "jansson", json_string(JANSSON_VERSION));
    json_object_set_new(o, "libraries", l);
    agent_print_json(o);
    json_decref(o);
    return;
  }
  printf(AGENT_PROG " %s\n"
                    "protocol: %d..%d\n"
                    "platform layer: %s\n"
                    "build: %s\n"
                    "libraries: libsodium %s, libuv %s, msgpack-c %s, jansson %s\n",
         AGENT_VERSION, MSG_PROTO_VERSION_MIN, MSG_PROTO_VERSION_MAX, paths_platform_name(), opts,
         sodium_version_string(), uv_version_string(), msgpack_v, JANSSON_VERSION);
  fflush(stdout);
}

void agent_say_error(int err, const char *detail) {
  /* a detail may quote a peer (a pairing server's goaway): never raw */
  char text[1024];
  snprintf(text, sizeof(text), "%s", detail && detail[0] ? detail : cordon_err_message(err));
  cordon_escape_controls(text, sizeof(text));
  fprintf(stderr, AGENT_PROG ": %s: %s\n", cordon_err_name(err), text);
}

int agent_fail(int err, const char *message) {
  agent_say_error(err, message);
  return err == CORDON_E_USAGE ? 2 : 1;
}

int agent_usage(const char *message) {
  agent_say_error(CORDON_E_USAGE, message);
  return 2;
}

int agent_usagef(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return agent_usage(buf);
}

int agent_connect_error(int err, bool established) {
  return !established && err == CORDON_E_LIMIT ? CORDON_E_PROTOCOL : err;
}

void agent_print_json(json_t *j) {
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (s) {
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
  }
  fflush(stdout);
}
