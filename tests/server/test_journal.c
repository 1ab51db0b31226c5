/* The real server writing natively (svc/journal.c) to a journal socket
 * this test binds in a mount namespace of its own (tests/svc/journal_sock.h). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "svc/journal.h"
#include "tests/svc/journal_sock.h"

#define SERVER_BIN CORDON_BINARY_DIR "/cordon-server"
#define JOURNAL_SOCKET JOURNAL_SOCK_PATH

Test(journal, under_systemd_the_daemon_writes_to_the_journal_with_fields, .timeout = 60,
     .fini = journal_sock_teardown) {
  if (!journal_available())
    cr_skip_test("built with CORDON_WITH_SYSTEMD=OFF: no journal writer");
  const char *why = "";
  int js = journal_sock_bind(&why);
  if (js < 0)
    cr_skip_test("%s", why);

  snprintf(journal_sock_tmp, sizeof(journal_sock_tmp), "/tmp/cordon-test-journal-XXXXXX");
  cr_assert_not_null(mkdtemp(journal_sock_tmp));
  const char *dir = journal_sock_tmp;
  char cmd[400], state[300], errlog[300];
  snprintf(state, sizeof(state), "%s/state", dir);
  snprintf(errlog, sizeof(errlog), "%s/stderr", dir);
  snprintf(cmd, sizeof(cmd), "%s init --state %s 2>/dev/null", SERVER_BIN, state);
  cr_assert_eq(system(cmd), 0);
  pid_t pid = journal_sock_daemon = fork();
  if (pid == 0) {
    if (journal_sock_child_stderr(errlog) < 0)
      _exit(127);
    execl(SERVER_BIN, SERVER_BIN, "run", "--state", state, "--listen", "127.0.0.1:0", (char *)NULL);
    _exit(127);
  }
  bool listening = false;
  char v[512];
  for (int i = 0; i < 50 && !listening; i++) {
    static char d[65536];
    ssize_t n = recv(js, d, sizeof(d), 0);
    if (n <= 0 || !journal_sock_field(d, (size_t)n, "CORDON_MSG", v, sizeof(v)) ||
        strcmp(v, "listening"))
      continue;
    listening = true;
    cr_assert_str_eq(journal_sock_field(d, (size_t)n, "PRIORITY", v, sizeof(v)), "6");
    cr_assert_str_eq(journal_sock_field(d, (size_t)n, "SYSLOG_IDENTIFIER", v, sizeof(v)),
                     "cordon-server");
    cr_assert_not_null(journal_sock_field(d, (size_t)n, "MESSAGE", v, sizeof(v)));
    cr_assert(strncmp(v, "msg=listening listen=127.0.0.1:", 31) == 0, "%s", v);
    cr_assert_not_null(journal_sock_field(d, (size_t)n, "CORDON_LISTEN", v, sizeof(v)));
    cr_assert(strncmp(v, "127.0.0.1:", 10) == 0, "%s", v);
    cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_STATE", v, sizeof(v)), state);
    cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_LOG", v, sizeof(v)), "journal");
  }
  cr_assert(listening, "the listening line reached the journal");
  static char text[65536];
  journal_sock_slurp(errlog, text, sizeof(text));
  cr_assert_null(strstr(text, "msg=listening"), "not on stderr as well: %s", text);
  /* the journal refuses lines: they are not lost, they go to stderr */
  close(js);
  unlink(JOURNAL_SOCKET);
  int f = open(JOURNAL_SOCKET, O_WRONLY | O_CREAT, 0600); /* not a socket */
  close(f);
  kill(pid, SIGHUP);
  for (int i = 0; i < 100 && !strstr(text, "SIGHUP"); i++) {
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    journal_sock_slurp(errlog, text, sizeof(text));
  }
  cr_assert(strstr(text, "level=info prog=cordon-server msg=\"SIGHUP: no log file to reopen\" "
                         "log=journal"),
            "%s", text);
  kill(pid, SIGTERM);
  int st;
  waitpid(pid, &st, 0);
  journal_sock_daemon = -1;
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
