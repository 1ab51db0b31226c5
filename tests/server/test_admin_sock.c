/* The admin socket end to end: the real cordon-server daemon, its real
 * STATE/admin.sock, requests from the client side (server/admin_client.c)
 * and raw lines that only a hand-written client could send. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/admin_client.h"
#include "server/admin_ops.h"

#define SERVER_BIN CORDON_BINARY_DIR "/cordon-server"

static char tmp_dir[256], state_dir[300], log_path[300], sock_path[320];
static pid_t daemon_pid = -1;

static void msleep(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void slurp(const char *path, char *buf, size_t size) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

static void setup(void) {
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/cordon-test-admin-sock-XXXXXX");
  cr_assert_not_null(mkdtemp(tmp_dir));
  snprintf(state_dir, sizeof(state_dir), "%s/state", tmp_dir);
  snprintf(log_path, sizeof(log_path), "%s/server.log", tmp_dir);
  snprintf(sock_path, sizeof(sock_path), "%s/%s", state_dir, ADMIN_SOCKET_FILE);
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "%s init --state %s 2>/dev/null", SERVER_BIN, state_dir);
  cr_assert_eq(system(cmd), 0);
  daemon_pid = fork();
  cr_assert_neq(daemon_pid, -1);
  if (daemon_pid == 0) {
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0)
      _exit(127);
    execl(SERVER_BIN, SERVER_BIN, "run", "--state", state_dir, "--listen", "127.0.0.1:0",
          (char *)NULL);
    _exit(127);
  }
  static char log[1 << 16];
  for (int i = 0; i < 250; i++) {
    slurp(log_path, log, sizeof(log));
    if (strstr(log, "msg=listening"))
      return;
    msleep(20);
  }
  cr_assert_fail("the daemon did not start: %s", log);
}

static void teardown(void) {
  if (daemon_pid > 0) {
    kill(daemon_pid, SIGKILL);
    waitpid(daemon_pid, NULL, 0);
  }
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
  (void)!system(cmd);
}

TestSuite(admin_sock, .init = setup, .fini = teardown, .timeout = 30);

/* Send bytes as they are; the daemon's one reply line, parsed. */
static json_t *raw(const char *bytes, size_t len) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  cr_assert_lt(strlen(sock_path), sizeof(addr.sun_path));
  memcpy(addr.sun_path, sock_path, strlen(sock_path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  cr_assert_eq(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0, "%s", strerror(errno));
  cr_assert_eq(write(fd, bytes, len), (ssize_t)len);
  static char buf[65536];
  size_t n = 0;
  ssize_t k;
  while ((n == 0 || buf[n - 1] != '\n') && (k = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
    n += (size_t)k; /* one reply line (the connection would take more requests) */
  close(fd);
  buf[n] = '\0';
  cr_assert(n > 0 && buf[n - 1] == '\n', "one line: '%s'", buf);
  json_error_t je;
  json_t *j = json_loads(buf, 0, &je);
  cr_assert_not_null(j, "reply is not JSON (%s): %s", je.text, buf);
  return j;
}

static void assert_error(json_t *reply, const char *code, const char *message) {
  cr_assert(json_is_false(json_object_get(reply, "ok")));
  cr_assert_str_eq(json_string_value(json_object_get(reply, "code")), code);
  cr_assert_str_eq(json_string_value(json_object_get(reply, "message")), message);
  json_decref(reply);
}

static json_t *call(json_t *req) {
  json_t *reply = NULL;
  struct cordon_diag diag = {{0}};
  int r = admin_call(state_dir, req, &reply, &diag);
  json_decref(req);
  cr_assert_eq(r, 0, "%s", diag.msg);
  return reply;
}

Test(admin_sock, ping_is_answered_ok) {
  json_t *reply = call(admin_request_new(ADMIN_OP_PING));
  cr_assert(admin_reply_is_ok(reply));
  cr_assert_eq(json_object_size(reply), 1);
  json_decref(reply);
}

Test(admin_sock, the_socket_is_the_owners_only) {
  struct stat st;
  cr_assert_eq(stat(sock_path, &st), 0);
  cr_assert(S_ISSOCK(st.st_mode));
  cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
}

Test(admin_sock, lines_that_are_not_requests_are_refused) {
  assert_error(raw("not json\n", 9), "usage", "request is not a JSON object");
  assert_error(raw("[1]\n", 4), "usage", "request is not a JSON object");
  assert_error(raw("{\"op\":\"ping\",\"op\":\"ping\"}\n", 26), "usage",
               "request is not a JSON object");
  assert_error(raw("{}\n", 3), "usage", "missing op");
  assert_error(raw("{\"op\":\"nope\"}\n", 14), "usage", "unknown op");
  assert_error(raw("{\"op\":\"dispatch\",\"user\":\"alice\"}\n", 33), "usage",
               "dispatch needs user, package and args");
  static char big[ADMIN_REQUEST_MAX];
  memset(big, 'x', sizeof(big) - 1);
  assert_error(raw(big, sizeof(big) - 1), "limit_exceeded", "request too long");
}

Test(admin_sock, cancel_and_revoke_of_unknown_ids) {
  json_t *req = admin_request_new(ADMIN_OP_CANCEL);
  admin_request_set(req, ADMIN_ARG_JOB, json_string("0123456789abcdef0123456789abcdef"));
  assert_error(call(req), "usage", "no such job");

  req = admin_request_new(ADMIN_OP_REVOKE);
  admin_request_set(req, ADMIN_ARG_DEVICE, json_string("0123456789abcdef0123456789abcdef"));
  json_t *reply = call(req);
  cr_assert(admin_reply_is_ok(reply));
  cr_assert(json_is_false(json_object_get(reply, ADMIN_REPLY_DISCONNECTED)));
  json_decref(reply);
}

Test(admin_sock, dispatch_of_an_unknown_user_names_the_user) {
  json_t *req = admin_request_new(ADMIN_OP_DISPATCH);
  admin_request_set(req, ADMIN_ARG_USER, json_string("nobody"));
  admin_request_set(req, ADMIN_ARG_PACKAGE, json_string("/nonexistent.cpkg"));
  assert_error(call(req), "usage", "no user 'nobody'");
}

Test(admin_sock, sigterm_removes_the_socket_and_every_log_line_is_the_servers) {
  cr_assert_eq(kill(daemon_pid, SIGTERM), 0);
  int st;
  cr_assert_eq(waitpid(daemon_pid, &st, 0), daemon_pid);
  daemon_pid = -1;
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
  cr_assert_eq(access(sock_path, F_OK), -1, "the socket is gone");
  static char log[1 << 16];
  slurp(log_path, log, sizeof(log));
  cr_assert(
      strstr(log, " prog=cordon-server msg=\"signal: draining, then shutting down\" signal=15 "),
      "%s", log);
  cr_assert(strstr(log, " prog=cordon-server msg=stopped\n"), "%s", log);
  /* every line: ts=<RFC 3339 UTC with ms> level=<level> prog=cordon-server msg=... */
  for (char *line = log; *line; line = strchr(line, '\n') + 1) {
    int y, mo, d, h, mi, sec, ms, n = 0;
    char level[8];
    cr_assert_eq(sscanf(line, "ts=%4d-%2d-%2dT%2d:%2d:%2d.%3dZ level=%7s %n", &y, &mo, &d, &h, &mi,
                        &sec, &ms, level, &n),
                 8, "%s", line);
    cr_assert(strcmp(level, "info") == 0 || strcmp(level, "warn") == 0 ||
                  strcmp(level, "error") == 0,
              "%s", line);
    cr_assert_eq(strncmp(line + n, "prog=cordon-server msg=", 23), 0, "%s", line);
    cr_assert_not_null(strchr(line, '\n'));
  }
}
