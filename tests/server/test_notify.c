/* server/notify.c: the sd_notify datagram protocol, to sockets the test
 * binds itself (a path and the abstract namespace); the watchdog's
 * environment. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/notify.h"

static int bind_dgram(const char *name, bool abstract) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  size_t len = strlen(name);
  cr_assert_lt(len + 1, sizeof(a.sun_path));
  memcpy(a.sun_path + (abstract ? 1 : 0), name, len);
  socklen_t al = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, al), 0, "%s", strerror(errno));
  struct timeval tv = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

static void expect(int fd, const char *want) {
  char buf[256];
  ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
  cr_assert_gt(n, 0, "a datagram");
  buf[n] = '\0';
  cr_assert_str_eq(buf, want);
}

Test(notify, without_notify_socket_nothing_is_sent_and_nothing_fails) {
  unsetenv("NOTIFY_SOCKET");
  struct notify *n = (struct notify *)1;
  cr_assert_eq(notify_open(&n, NULL), 0);
  cr_assert_null(n);
  cr_assert_eq(notify_send(n, "READY=1"), 0);
  notify_close(n);
}

Test(notify, a_path_socket_gets_each_message_as_one_datagram) {
  char path[64];
  snprintf(path, sizeof(path), "/tmp/cordon-notify-%ld", (long)getpid());
  unlink(path);
  int fd = bind_dgram(path, false);
  setenv("NOTIFY_SOCKET", path, 1);
  struct notify *n = NULL;
  cr_assert_eq(notify_open(&n, NULL), 0);
  cr_assert_not_null(n);
  cr_assert_eq(notify_send(n, "READY=1\nSTATUS=0 devices online, 0 jobs running"), 0);
  expect(fd, "READY=1\nSTATUS=0 devices online, 0 jobs running");
  cr_assert_eq(notify_send(n, "WATCHDOG=1"), 0);
  expect(fd, "WATCHDOG=1");
  notify_close(n);
  close(fd);
  unlink(path);
}

Test(notify, an_abstract_socket_is_named_with_an_at_sign) {
  char name[64], env[66];
  snprintf(name, sizeof(name), "cordon-notify-test-%ld", (long)getpid());
  int fd = bind_dgram(name, true);
  snprintf(env, sizeof(env), "@%s", name);
  setenv("NOTIFY_SOCKET", env, 1);
  struct notify *n = NULL;
  cr_assert_eq(notify_open(&n, NULL), 0);
  cr_assert_eq(notify_send(n, "STOPPING=1"), 0);
  expect(fd, "STOPPING=1");
  notify_close(n);
  close(fd);
}

Test(notify, a_value_that_is_no_socket_address_is_refused) {
  setenv("NOTIFY_SOCKET", "relative/path", 1);
  struct notify *n = NULL;
  struct cordon_diag diag = {{0}};
  cr_assert_eq(notify_open(&n, &diag), -EINVAL);
  cr_assert(strstr(diag.msg, "relative/path"), "%s", diag.msg);
  /* a socket nobody listens on: the send fails, the caller goes on */
  setenv("NOTIFY_SOCKET", "/tmp/cordon-notify-nobody-listens", 1);
  cr_assert_eq(notify_open(&n, NULL), 0);
  cr_assert_lt(notify_send(n, "READY=1"), 0);
  notify_close(n);
}

Test(notify, the_watchdog_interval_is_for_this_process_only) {
  unsetenv("WATCHDOG_PID");
  unsetenv("WATCHDOG_USEC");
  cr_assert_eq(notify_watchdog_usec(), 0);
  setenv("WATCHDOG_USEC", "30000000", 1);
  cr_assert_eq(notify_watchdog_usec(), 30000000);
  char pid[32];
  snprintf(pid, sizeof(pid), "%ld", (long)getpid());
  setenv("WATCHDOG_PID", pid, 1);
  cr_assert_eq(notify_watchdog_usec(), 30000000);
  snprintf(pid, sizeof(pid), "%ld", (long)getpid() + 1);
  setenv("WATCHDOG_PID", pid, 1);
  cr_assert_eq(notify_watchdog_usec(), 0, "meant for another process");
  unsetenv("WATCHDOG_PID");
  setenv("WATCHDOG_USEC", "-5", 1);
  cr_assert_eq(notify_watchdog_usec(), 0);
  setenv("WATCHDOG_USEC", "12x", 1);
  cr_assert_eq(notify_watchdog_usec(), 0);
}
