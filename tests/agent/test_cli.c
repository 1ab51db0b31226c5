/* cordon-agent's command line, with the real binary: -h/--help on every
 * command of the table (exit 0, stdout), `help [COMMAND]`, `--version` and
 * `version [--json]`, one-line usage errors (exit 2, never "usage: usage:"),
 * and a non-cordon peer reported as protocol_error. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/cli.h"
#include "proto/msg.h"

#define AGENT CORDON_BINARY_DIR "/cordon-agent"

struct out {
  int status;
  char out[1 << 15];
  char err[1 << 13];
};

static char dir[64];

static void setup(void) {
  snprintf(dir, sizeof(dir), "/tmp/cordon-cli-XXXXXX");
  cr_assert(mkdtemp(dir));
}

static void teardown(void) {
  char c[128];
  snprintf(c, sizeof(c), "rm -rf '%s'", dir);
  cr_expect_eq(system(c), 0);
}

static void slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = '\0';
  if (f)
    fclose(f);
}

/* Run the agent with argv (NULL-terminated, without the program) to its end;
 * stdin is /dev/null. */
static struct out *run_argv(const char *const *args) {
  static struct out o;
  memset(&o, 0, sizeof(o));
  char outp[128], errp[128];
  snprintf(outp, sizeof(outp), "%s/out", dir);
  snprintf(errp, sizeof(errp), "%s/err", dir);
  const char *argv[64] = {AGENT};
  size_t n = 1;
  for (; args[n - 1]; n++)
    argv[n] = args[n - 1];
  argv[n] = NULL;
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    FILE *fo = fopen(outp, "w"), *fe = fopen(errp, "w"), *fi = fopen("/dev/null", "r");
    dup2(fileno(fo), 1);
    dup2(fileno(fe), 2);
    dup2(fileno(fi), 0);
    execv(argv[0], (char **)argv);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  slurp(outp, o.out, sizeof(o.out));
  slurp(errp, o.err, sizeof(o.err));
  return &o;
}
#define RUN(...) run_argv((const char *const[]){__VA_ARGS__, NULL})

static size_t lines(const char *s) {
  size_t n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

static void assert_usage_error(const struct out *o, const char *what) {
  cr_assert_eq(o->status, 2, "%s: exit %d, stderr %s", what, o->status, o->err);
  cr_assert_str_empty(o->out, "%s: nothing on stdout: %s", what, o->out);
  cr_assert_eq(lines(o->err), 1, "%s: one line on stderr: %s", what, o->err);
  cr_assert(strncmp(o->err, "cordon-agent: usage: ", 21) == 0, "%s: %s", what, o->err);
  cr_assert_null(strstr(o->err + 21, "usage:"), "%s: no doubled prefix: %s", what, o->err);
}

Test(agent_cli, every_command_answers_help_on_stdout_with_exit_0, .init = setup, .fini = teardown) {
  size_t n = 0;
  for (const struct agent_cli_command *c = agent_cli_commands; c->name; c++, n++) {
    char want[160];
    snprintf(want, sizeof(want), "usage: cordon-agent [--config DIR] %s", c->name);
    const char *forms[][4] = {{c->name, "--help", NULL},
                              {c->name, "-h", NULL},
                              {"help", c->name, NULL},
                              {"--config", dir, c->name, "--help"}};
    for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
      const char *const *a = forms[f];
      struct out *o = a[3] ? RUN(a[0], a[1], a[2], a[3]) : RUN(a[0], a[1]);
      cr_assert_eq(o->status, 0, "%s form %zu: exit %d: %s", c->name, f, o->status, o->err);
      cr_assert_str_empty(o->err, "%s form %zu: %s", c->name, f, o->err);
      cr_assert(strncmp(o->out, want, strlen(want)) == 0, "%s form %zu: %s", c->name, f, o->out);
      cr_assert(strstr(o->out, c->summary), "%s: %s", c->name, o->out);
    }
  }
  cr_assert_geq(n, 10, "status explain exec pair run metrics unpair service help version");
  cr_assert(agent_cli_find("service"), "the usage lists service");
}

Test(agent_cli, subcommands_and_options_answer_help_too, .init = setup, .fini = teardown) {
  struct out *o = RUN("service", "install", "--help");
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->out, "usage: cordon-agent [--config DIR] service install|uninstall"), "%s",
            o->out);
  cr_assert(strstr(o->out, "--agent-path PATH"), "%s", o->out);
  o = RUN("run", "--drain-timeout", "5", "-h");
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->out, "--drain-timeout S"), "%s", o->out);
  o = RUN("pair", "--server", "x:1", "--help");
  cr_assert_eq(o->status, 0, "--server's value is not the command: %s", o->err);
  cr_assert(strstr(o->out, "[--config DIR] pair --server"), "%s", o->out);
}

Test(agent_cli, help_and_no_command, .init = setup, .fini = teardown) {
  const char *forms[][2] = {{"--help", NULL}, {"-h", NULL}, {"help", NULL}};
  for (size_t f = 0; f < 3; f++) {
    struct out *o = RUN(forms[f][0]);
    cr_assert_eq(o->status, 0);
    cr_assert(strncmp(o->out, "usage: cordon-agent [--config DIR] COMMAND", 42) == 0, "%s", o->out);
    for (const struct agent_cli_command *c = agent_cli_commands; c->name; c++) {
      char line[64];
      snprintf(line, sizeof(line), "\n  %-9s ", c->name);
      cr_assert(strstr(o->out, line), "usage lists %s: %s", c->name, o->out);
    }
  }
  assert_usage_error(run_argv((const char *const[]){NULL}), "no command");
  assert_usage_error(RUN("help", "bogus"), "help bogus");
  assert_usage_error(RUN("bogus", "--help"), "bogus --help");
}

Test(agent_cli, usage_errors_are_one_line_with_exit_2, .init = setup, .fini = teardown) {
  assert_usage_error(RUN("--config", dir, "bogus"), "unknown command");
  assert_usage_error(RUN("--config", dir, "status", "--bogus"), "unknown option");
  assert_usage_error(RUN("--config", dir, "status", "-x"), "unknown short option");
  assert_usage_error(RUN("--config", dir, "status", "a", "b"), "extra operand");
  assert_usage_error(RUN("--config", dir, "exec"), "exec without a package");
  assert_usage_error(RUN("--config", dir, "pair", "--server"), "missing value");
  assert_usage_error(RUN("--config", dir, "run", "--drain-timeout", "x"), "bad value");
  assert_usage_error(RUN("--config", dir, "service"), "service without an action");
  assert_usage_error(RUN("--config", dir, "service", "reinstall"), "unknown action");
  assert_usage_error(RUN("--config", dir, "version", "extra"), "version operand");
  /* each command takes its own options only, and its operands only */
  assert_usage_error(RUN("--config", dir, "status", "--code", "x", "--trust", "/nonexistent"),
                     "another command's option");
  assert_usage_error(RUN("--config", dir, "status", "a"), "an operand status does not take");
  assert_usage_error(RUN("--config", dir, "pair", "--drain-timeout", "5"), "run's option on pair");
  assert_usage_error(RUN("--config", dir, "status", "--json=yes"), "a value for a flag");
  assert_usage_error(RUN("--config", dir, "metrics", "--", "x"), "arguments after --");
  /* "--" ends the options: a job's --help is the job's */
  struct out *o = RUN("--config", dir, "exec", "--", "--help");
  cr_assert_eq(o->status, 2, "%s", o->err);
  cr_assert_null(strstr(o->out, "usage: cordon-agent"), "%s", o->out);
}

Test(agent_cli, version_in_text_and_json, .init = setup, .fini = teardown) {
  char first[128];
  snprintf(first, sizeof(first), "cordon-agent %s\n", CORDON_VERSION);
  const char *forms[][2] = {{"--version", NULL}, {"version", NULL}};
  for (size_t f = 0; f < 2; f++) {
    struct out *o = RUN(forms[f][0]);
    cr_assert_eq(o->status, 0, "%s", o->err);
    cr_assert(strncmp(o->out, first, strlen(first)) == 0, "%s", o->out);
    char proto[64];
    snprintf(proto, sizeof(proto), "protocol: %d..%d\n", MSG_PROTO_VERSION_MIN,
             MSG_PROTO_VERSION_MAX);
    cr_assert(strstr(o->out, proto), "%s", o->out);
    cr_assert(strstr(o->out, "platform layer: " CORDON_PLATFORM_NAME "\n"), "%s", o->out);
    cr_assert(strstr(o->out, "build: platform=" CORDON_PLATFORM_NAME " "), "%s", o->out);
    cr_assert(strstr(o->out, "libsodium 1."), "%s", o->out);
    cr_assert(strstr(o->out, "libuv 1."), "%s", o->out);
    cr_assert(strstr(o->out, "msgpack-c "), "%s", o->out);
  }
  struct out *o = RUN("version", "--json");
  cr_assert_eq(o->status, 0);
  json_t *j = json_loads(o->out, 0, NULL);
  cr_assert(j, "%s", o->out);
  cr_assert_str_eq(json_string_value(json_object_get(j, "version")), CORDON_VERSION);
  cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "protocol"), "max")),
               MSG_PROTO_VERSION_MAX);
  json_t *libs = json_object_get(j, "libraries");
  cr_assert(json_is_string(json_object_get(libs, "libsodium")));
  cr_assert(json_is_string(json_object_get(libs, "libuv")));
  cr_assert(json_is_string(json_object_get(libs, "msgpack-c")));
  json_decref(j);
}

/* A peer that is not cordon: it answers every connection with an HTTP
 * error, as a web server on the wrong port would. */
static int http_fd;
static void *http_serve(void *arg) {
  (void)arg;
  for (;;) {
    int c = accept(http_fd, NULL, NULL);
    if (c < 0)
      return NULL;
    static const char reply[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    ssize_t w = write(c, reply, sizeof(reply) - 1);
    (void)w;
    char sink[512];
    while (read(c, sink, sizeof(sink)) > 0)
      ;
    close(c);
  }
}

Test(agent_cli, a_non_cordon_peer_is_a_protocol_error, .init = setup, .fini = teardown) {
  http_fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(http_fd, (struct sockaddr *)&a, sizeof(a)), 0);
  cr_assert_eq(listen(http_fd, 4), 0);
  socklen_t al = sizeof(a);
  getsockname(http_fd, (struct sockaddr *)&a, &al);
  pthread_t t;
  pthread_create(&t, NULL, http_serve, NULL);
  char server[64];
  snprintf(server, sizeof(server), "127.0.0.1:%d", ntohs(a.sin_port));
  struct out *o = RUN("--config", dir, "pair", "--server", server, "--code",
                      "0123456789abcdefghjkmnpqrstvwxyz01234567");
  cr_assert_eq(o->status, 1, "exit %d: %s", o->status, o->err);
  cr_assert(strncmp(o->err, "cordon-agent: protocol_error: ", 30) == 0, "%s", o->err);
  cr_assert(strstr(o->err, "does not speak the cordon protocol"), "%s", o->err);
  cr_assert_eq(lines(o->err), 1, "%s", o->err);
}

/* A peer's words (a pairing server's goaway message is any UTF-8) reach
 * the terminal through agent_say_error: control bytes, ESC and the C1
 * controls come out as \xNN, never raw. */
Test(cli, an_error_detail_never_carries_control_bytes_to_the_terminal) {
  cr_redirect_stderr();
  agent_say_error(CORDON_E_CRYPTO, "the server refused: x: \x1b]0;owned\x07\x1b[2J\xc2\x9b"
                                   "31m\r\xc2\xa0ok");
  fflush(stderr);
  char buf[512] = {0};
  FILE *f = cr_get_redirected_stderr();
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  cr_assert(strstr(buf, "x: \\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\x0d\xc2\xa0ok\n"), "%s", buf);
  for (size_t i = 0; i + 1 < n; i++)
    cr_assert(buf[i] >= 0x20 || buf[i] < 0, "a control byte at %zu", i);
}

/* --config=DIR is --config DIR; CORDON_CONFIG stands in for either, and
 * an explicit --config wins over it (status --json names the directory). */
static bool config_is(const struct out *o, const char *want) {
  char key[700];
  snprintf(key, sizeof(key), "\"config_dir\": \"%s\"", want);
  return strstr(o->out, key) != NULL;
}

Test(agent_cli, config_by_equals_and_by_the_environment, .init = setup, .fini = teardown) {
  char other[600];
  snprintf(other, sizeof(other), "%s/other", dir);
  char eq[640];
  snprintf(eq, sizeof(eq), "--config=%s", other);
  struct out *o = RUN(eq, "status", "--json");
  cr_assert(config_is(o, other), "--config= was read: %s %s", o->out, o->err);
  setenv("CORDON_CONFIG", other, 1);
  o = RUN("status", "--json");
  cr_assert(config_is(o, other), "CORDON_CONFIG was read: %s %s", o->out, o->err);
  o = RUN("--config", dir, "status", "--json");
  unsetenv("CORDON_CONFIG");
  cr_assert(config_is(o, dir), "--config wins over CORDON_CONFIG: %s", o->out);
}
