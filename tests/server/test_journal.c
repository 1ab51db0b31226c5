/* server/journal.c: field names and priorities, and the real daemon
 * writing natively to a journal socket this test binds in a mount
 * namespace of its own (libsystemd sends to /run/systemd/journal/socket;
 * a tmpfs over /run/systemd, private to the test, puts ours there). */
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

#include "server/journal.h"

#define SERVER_BIN CORDON_BINARY_DIR "/cordon-server"
#define JOURNAL_SOCKET "/run/systemd/journal/socket"

Test(journal, field_names_are_upper_case_and_prefixed) {
  char buf[64];
  journal_field_name("job", buf, sizeof(buf));
  cr_assert_str_eq(buf, "CORDON_JOB");
  journal_field_name("exit_code", buf, sizeof(buf));
  cr_assert_str_eq(buf, "CORDON_EXIT_CODE");
  journal_field_name("a.b-c=d", buf, sizeof(buf));
  cr_assert_str_eq(buf, "CORDON_A_B_C_D");
  journal_field_name("", buf, sizeof(buf));
  cr_assert_str_eq(buf, "CORDON_");
  journal_field_name("abcdefghijklmnopqrstuvwxyz", buf, 12);
  cr_assert_str_eq(buf, "CORDON_ABCD", "cut to the buffer");
}

Test(journal, levels_are_syslog_priorities) {
  cr_assert_eq(journal_priority(CORE_LOG_DEBUG), 7);
  cr_assert_eq(journal_priority(CORE_LOG_INFO), 6);
  cr_assert_eq(journal_priority(CORE_LOG_WARN), 4);
  cr_assert_eq(journal_priority(CORE_LOG_ERROR), 3);
}

Test(journal, journal_stream_must_name_stderr_itself) {
  struct stat st;
  cr_assert_eq(fstat(2, &st), 0);
  char v[64];
  snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
  setenv("JOURNAL_STREAM", v, 1);
  cr_assert(journal_stream_is_stderr());
  snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino + 1);
  setenv("JOURNAL_STREAM", v, 1); /* inherited by a child whose stderr went elsewhere */
  cr_assert(!journal_stream_is_stderr());
  setenv("JOURNAL_STREAM", "garbage", 1);
  cr_assert(!journal_stream_is_stderr());
  unsetenv("JOURNAL_STREAM");
  cr_assert(!journal_stream_is_stderr());
}

/* One native-protocol datagram's field, or NULL: "KEY=VALUE\n", or
 * "KEY\n" + 64-bit little-endian length + VALUE + "\n". */
static char *field(const char *d, size_t n, const char *key, char *out, size_t size) {
  size_t kl = strlen(key);
  const char *p = d, *end = d + n;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (!nl)
      return NULL;
    if (eq && eq < nl) {
      if ((size_t)(eq - p) == kl && memcmp(p, key, kl) == 0) {
        snprintf(out, size, "%.*s", (int)(nl - eq - 1), eq + 1);
        return out;
      }
      p = nl + 1;
    } else {
      uint64_t len = 0;
      if (nl + 9 > end)
        return NULL;
      for (int i = 7; i >= 0; i--)
        len = len << 8 | (unsigned char)nl[1 + i];
      if ((size_t)(nl - p) == kl && memcmp(p, key, kl) == 0) {
        snprintf(out, size, "%.*s", (int)len, nl + 9);
        return out;
      }
      p = nl + 9 + len + 1;
    }
  }
  return NULL;
}

static pid_t server = -1;
static char tmp_dir[64];

static void teardown(void) {
  if (server > 0) {
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
  }
  if (tmp_dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
    (void)!system(cmd);
  }
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

Test(journal, under_systemd_the_daemon_writes_to_the_journal_with_fields, .timeout = 60,
     .fini = teardown) {
  if (!journal_available())
    cr_skip_test("built without libsystemd");
  if (geteuid() != 0 || unshare(CLONE_NEWNS) < 0)
    cr_skip_test("needs root for a private mount namespace");
  cr_assert_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
  mkdir("/run/systemd", 0755);
  cr_assert_eq(mount("tmpfs", "/run/systemd", "tmpfs", 0, "mode=0755"), 0, "%s", strerror(errno));
  cr_assert_eq(mkdir("/run/systemd/journal", 0755), 0);
  int js = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX, .sun_path = JOURNAL_SOCKET};
  cr_assert_eq(bind(js, (struct sockaddr *)&a, sizeof(a)), 0);
  struct timeval tv = {0, 200000};
  setsockopt(js, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/cordon-test-journal-XXXXXX");
  cr_assert_not_null(mkdtemp(tmp_dir));
  const char *dir = tmp_dir;
  char cmd[400], state[300], errlog[300];
  snprintf(state, sizeof(state), "%s/state", dir);
  snprintf(errlog, sizeof(errlog), "%s/stderr", dir);
  snprintf(cmd, sizeof(cmd), "%s init --state %s 2>/dev/null", SERVER_BIN, state);
  cr_assert_eq(system(cmd), 0);
  pid_t pid = server = fork();
  if (pid == 0) {
    int fd = open(errlog, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    struct stat st;
    if (fd < 0 || dup2(fd, 2) < 0 || fstat(2, &st) < 0)
      _exit(127);
    char v[64];
    snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", v, 1);
    execl(SERVER_BIN, SERVER_BIN, "run", "--state", state, "--listen", "127.0.0.1:0", (char *)NULL);
    _exit(127);
  }
  bool listening = false;
  char v[512];
  for (int i = 0; i < 50 && !listening; i++) {
    static char d[65536];
    ssize_t n = recv(js, d, sizeof(d), 0);
    if (n <= 0 || !field(d, (size_t)n, "CORDON_MSG", v, sizeof(v)) || strcmp(v, "listening"))
      continue;
    listening = true;
    cr_assert_str_eq(field(d, (size_t)n, "PRIORITY", v, sizeof(v)), "6");
    cr_assert_str_eq(field(d, (size_t)n, "SYSLOG_IDENTIFIER", v, sizeof(v)), "cordon-server");
    cr_assert_not_null(field(d, (size_t)n, "MESSAGE", v, sizeof(v)));
    cr_assert(strncmp(v, "msg=listening listen=127.0.0.1:", 31) == 0, "%s", v);
    cr_assert_not_null(field(d, (size_t)n, "CORDON_LISTEN", v, sizeof(v)));
    cr_assert(strncmp(v, "127.0.0.1:", 10) == 0, "%s", v);
    cr_assert_str_eq(field(d, (size_t)n, "CORDON_STATE", v, sizeof(v)), state);
    cr_assert_str_eq(field(d, (size_t)n, "CORDON_LOG", v, sizeof(v)), "journal");
  }
  cr_assert(listening, "the listening line reached the journal");
  static char text[65536];
  slurp(errlog, text, sizeof(text));
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
    slurp(errlog, text, sizeof(text));
  }
  cr_assert(strstr(text, "level=info prog=cordon-server msg=\"SIGHUP: no log file to reopen\" "
                         "log=journal"),
            "%s", text);
  kill(pid, SIGTERM);
  int st;
  waitpid(pid, &st, 0);
  server = -1;
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
