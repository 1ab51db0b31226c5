/* The admin socket's timeouts and connection caps (docs/protocol/admin.md,
 * "Timeouts and connection caps") against the real daemon, with short
 * deadlines (CORDON_ADMIN_REQUEST_TIMEOUT_MS, CORDON_ADMIN_IDLE_TIMEOUT_MS)
 * and cordon-test as a member of the admin group (CORDON_ADMIN_GROUP). */
#include "e2e.h"

#include <dirent.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "admin_conn.h"
#include "server/admin_ops.h"

#define REQUEST_MS 1000
#define IDLE_MS 3000

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* The connection's last line is limit_exceeded with a message that starts
 * with prefix, then the daemon closes it. */
static void assert_timed_out(struct conn *c, const char *prefix) {
  json_t *j = read_line(c);
  cr_assert_not_null(j, "closed without a final line");
  cr_assert(json_is_false(json_object_get(j, "ok")), "%s", json_dumps(j, 0));
  cr_assert_str_eq(str(j, "code"), "limit_exceeded");
  cr_assert(strncmp(str(j, "message"), prefix, strlen(prefix)) == 0, "%s", str(j, "message"));
  json_decref(j);
  cr_assert_null(read_line(c), "closed after the line");
}

static void limits_setup(void) {
  setenv("CORDON_ADMIN_REQUEST_TIMEOUT_MS", "1000", 1);
  setenv("CORDON_ADMIN_IDLE_TIMEOUT_MS", "3000", 1);
  e2e_setup();
}

TestSuite(admin_limits, .init = limits_setup, .fini = e2e_teardown, .timeout = 120);

Test(admin_limits, a_half_line_is_answered_and_closed_after_the_deadline) {
  struct conn *c = conn_open();
  assert_ok(ask(c, "{\"op\":\"ping\"}"));
  long t0 = now_ms();
  send_raw(c, "{\"op\":\"pi", 9);
  usleep(REQUEST_MS / 2 * 1000);
  send_raw(c, "n", 1); /* more bytes of the same line: the deadline stays */
  assert_timed_out(c, "a request line not complete");
  long dt = now_ms() - t0;
  cr_assert(dt >= REQUEST_MS - 50 && dt < REQUEST_MS + 1500, "closed after %ld ms", dt);
  conn_close(c);
  cr_assert(wait_in(e2e_server_log, "msg=\"admin connection timed out\"", 2000));
  c = conn_open(); /* others go on */
  assert_ok(ask(c, "{\"op\":\"ping\"}"));
  conn_close(c);
}

Test(admin_limits, a_body_needs_bytes_within_the_deadline_and_a_stalled_one_is_closed) {
  struct conn *c = conn_open();
  const char line[] = "{\"op\":\"dispatch\",\"user\":\"alice\",\"bytes\":100000}\n";
  send_raw(c, line, strlen(line));
  /* bytes every half deadline: the connection stays, for four deadlines */
  long t0 = now_ms();
  char chunk[100] = {0};
  for (int i = 0; i < 8; i++) {
    send_raw(c, chunk, sizeof(chunk));
    usleep(REQUEST_MS / 2 * 1000);
  }
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  cr_assert_eq(poll(&p, 1, 0), 0, "nothing said while the body comes");
  cr_assert_eq(uploads(), 1, "the body is being stored");
  long t1 = now_ms();
  assert_timed_out(c, "no bytes of the request's body");
  long dt = now_ms() - t1, all = now_ms() - t0;
  cr_assert(all >= 4 * REQUEST_MS, "the body had progress: %ld ms", all);
  cr_assert(dt >= REQUEST_MS / 2 - 100 && dt < REQUEST_MS + 1500, "stalled %ld ms", dt);
  conn_close(c);
  cr_assert_eq(uploads(), 0, "the partial body is removed");
}

Test(admin_limits, an_idle_connection_is_closed_and_a_watch_is_not) {
  struct conn *w = conn_open();
  assert_ok(ask(w, "{\"op\":\"watch\"}"));
  struct conn *c = conn_open();
  assert_ok(ask(c, "{\"op\":\"ping\"}"));
  long t0 = now_ms();
  assert_timed_out(c, "idle between requests");
  long dt = now_ms() - t0;
  cr_assert(dt >= IDLE_MS - 50 && dt < IDLE_MS + 1500, "closed after %ld ms idle", dt);
  conn_close(c);
  struct pollfd p = {.fd = w->fd, .events = POLLIN};
  cr_assert_eq(poll(&p, 1, 1500), 0, "the watch is still open, silent");
  conn_close(w);
}

/* Member children of one uid try ADMIN_CONN_MAX connections at once: 16
 * get in, the rest are refused, and the daemon's own user still gets in. */
static void cap_setup(void) {
  setenv("CORDON_ADMIN_GROUP", "cordon-test", 1);
  e2e_setup();
}

TestSuite(admin_cap, .init = cap_setup, .fini = e2e_teardown, .timeout = 120);

Test(admin_cap, one_uid_holds_at_most_16_and_the_daemons_user_still_gets_in) {
  struct group *g = getgrnam("cordon-test");
  struct passwd *pw = getpwnam("cordon-test");
  cr_assert(g && pw, "the cordon-test account (scripts/test-setup.sh)");
  cr_assert_eq(chown(e2e_state, (uid_t)-1, g->gr_gid), 0);
  cr_assert_eq(chmod(e2e_state, 0710), 0);
  int held[2], go[2];
  cr_assert_eq(pipe(held), 0);
  cr_assert_eq(pipe(go), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(held[0]);
    close(go[1]);
    if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
      _exit(10);
    unsigned char in = 0;
    for (int i = 0; i < ADMIN_CONN_MAX; i++) {
      int fd = sock_connect();
      if (fd < 0)
        continue;
      (void)!send(fd, "{\"op\":\"ping\"}\n", 14, MSG_NOSIGNAL);
      char b[64] = "";
      if (read(fd, b, sizeof(b) - 1) == 12 && strcmp(b, "{\"ok\":true}\n") == 0)
        in++; /* kept open */
      else
        close(fd);
    }
    (void)!write(held[1], &in, 1);
    char x;
    (void)!read(go[0], &x, 1); /* hold them until the parent has asked */
    _exit(0);
  }
  close(held[1]);
  close(go[0]);
  unsigned char in = 0;
  cr_assert_eq(read(held[0], &in, 1), 1);
  cr_assert_eq(in, 16, "connections of one member uid: %u", in);
  char want[120];
  snprintf(want, sizeof(want), "msg=\"admin connection refused\" uid=%d ", (int)pw->pw_uid);
  cr_assert(count_in(e2e_server_log, want) >= ADMIN_CONN_MAX - 16, "each refusal logged");
  cr_assert(count_in(e2e_server_log, "too many admin connections of this uid") > 0);
  struct conn *c = conn_open(); /* the daemon's own user, while they are held */
  assert_ok(ask(c, "{\"op\":\"ping\"}"));
  conn_close(c);
  close(go[1]);
  int st;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
  close(held[0]);
}
