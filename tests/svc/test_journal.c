/* svc/journal.c: field names, priorities, when JOURNAL_STREAM names
 * stderr, and the writer in this process against a journal socket of the
 * test's own: the datagram parsed here (binary-safe values, priorities,
 * valid field names), an entry above the datagram limit in a sealed memfd,
 * a full queue dropped and counted, a gone socket falling back to stderr.
 * The daemons' use of it: tests/server/test_journal.c,
 * tests/agent/test_journal_agent.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc/journal.h"
#include "tests/svc/journal_sock.h"

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

/* The writer itself, in this process, against a journal socket of the
 * test's own (tests/svc/journal_sock.h: root, a private mount namespace). */

/* Install the writer on a bound socket, stderr into a file of its own so
 * that what falls back to it can be read (journal_sock_tmp/stderr). */
static int writer_setup(char *errlog, size_t size) {
  if (!journal_available())
    cr_skip_test("built without the journal");
  const char *why = "";
  int js = journal_sock_bind(&why);
  if (js < 0)
    cr_skip_test("%s", why);
  snprintf(journal_sock_tmp, sizeof(journal_sock_tmp), "/tmp/cordon-test-svcjournal-XXXXXX");
  cr_assert_not_null(mkdtemp(journal_sock_tmp));
  snprintf(errlog, size, "%s/stderr", journal_sock_tmp);
  int fd = open(errlog, O_WRONLY | O_CREAT | O_APPEND, 0600);
  cr_assert(fd >= 0 && dup2(fd, 2) == 2);
  close(fd);
  core_log_set_program("cordon-test");
  cr_assert_eq(journal_install(), 0);
  cr_assert(journal_active());
  return js;
}

/* Every field of a datagram has a valid journal name (A-Z, 0-9, '_', not
 * first a digit or '_', at most 64 bytes) and is whole; the count. */
static int check_fields(const char *d, size_t n) {
  const char *p = d, *end = d + n;
  int fields = 0;
  while (p < end) {
    const char *q = p;
    while (q < end && *q != '=' && *q != '\n')
      q++;
    cr_assert(q < end, "a field without '=' or newline");
    size_t nl = (size_t)(q - p);
    cr_assert(nl > 0 && nl <= 64 && !(p[0] >= '0' && p[0] <= '9') && p[0] != '_', "%.*s", (int)nl,
              p);
    for (size_t i = 0; i < nl; i++)
      cr_assert((p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '_',
                "field name %.*s", (int)nl, p);
    if (*q == '=') {
      const char *e = memchr(q, '\n', (size_t)(end - q));
      cr_assert_not_null(e, "a value without its newline");
      p = e + 1;
    } else {
      cr_assert((size_t)(end - q) >= 9, "a binary field without its length");
      uint64_t len = 0;
      for (int i = 7; i >= 0; i--)
        len = len << 8 | (unsigned char)q[1 + i];
      cr_assert((size_t)(end - q) >= 9 + len + 1 && q[9 + len] == '\n', "binary field cut");
      p = q + 9 + len + 1;
    }
    fields++;
  }
  return fields;
}

Test(journal_writer, a_value_with_a_newline_arrives_whole_in_the_binary_safe_form,
     .fini = journal_sock_teardown) {
  char errlog[128];
  int js = writer_setup(errlog, sizeof(errlog));
  core_log_kv(CORE_LOG_WARN, "two lines", "detail", "first\nsecond", "job", "j-1", "exit code", "3",
              NULL);
  static char d[65536];
  ssize_t n = recv(js, d, sizeof(d), 0);
  cr_assert_gt(n, 0, "a datagram arrived");
  cr_assert_eq(check_fields(d, (size_t)n), 7);
  /* the name, a newline, the length (12) as 64-bit little endian, the value */
  static const char binary[] = "\nCORDON_DETAIL\n\x0c\0\0\0\0\0\0\0first\nsecond\n";
  cr_assert_not_null(memmem(d, (size_t)n, binary, sizeof(binary) - 1), "%.*s", (int)n, d);
  char v[256];
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_DETAIL", v, sizeof(v)),
                   "first\nsecond");
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "PRIORITY", v, sizeof(v)), "4");
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "SYSLOG_IDENTIFIER", v, sizeof(v)),
                   "cordon-test");
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_MSG", v, sizeof(v)), "two lines");
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_JOB", v, sizeof(v)), "j-1");
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_EXIT_CODE", v, sizeof(v)), "3");
  /* MESSAGE is the logfmt text: one line, the newline escaped */
  cr_assert_not_null(journal_sock_field(d, (size_t)n, "MESSAGE", v, sizeof(v)));
  cr_assert_str_eq(v, "msg=\"two lines\" detail=\"first\\x0asecond\" job=j-1 exit_code=3");
  core_log_kv(CORE_LOG_ERROR, "plain", NULL);
  n = recv(js, d, sizeof(d), 0);
  cr_assert_gt(n, 0);
  cr_assert_eq(check_fields(d, (size_t)n), 4);
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "PRIORITY", v, sizeof(v)), "3");
  core_log_kv(CORE_LOG_DEBUG, "below the level", NULL); /* dropped before the writer */
  core_log_kv(CORE_LOG_INFO, "info", NULL);
  n = recv(js, d, sizeof(d), 0);
  cr_assert_gt(n, 0);
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "PRIORITY", v, sizeof(v)), "6");
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_MSG", v, sizeof(v)), "info");
  static char text[4096];
  journal_sock_slurp(errlog, text, sizeof(text));
  cr_assert_str_eq(text, "", "nothing on stderr: %s", text);
}

/* The socket's default send buffer: a datagram above it fails EMSGSIZE. */
static size_t datagram_limit(void) {
  char buf[32] = "";
  journal_sock_slurp("/proc/sys/net/core/wmem_default", buf, sizeof(buf));
  size_t v = (size_t)strtoull(buf, NULL, 10);
  return v ? v : 212992;
}

Test(journal_writer, an_entry_above_the_datagram_limit_comes_whole_in_a_sealed_memfd,
     .fini = journal_sock_teardown) {
  char errlog[128];
  int js = writer_setup(errlog, sizeof(errlog));
  size_t big = datagram_limit() + 65536;
  char *value = malloc(big + 1);
  cr_assert_not_null(value);
  for (size_t i = 0; i < big; i++)
    value[i] = (char)('a' + i % 26);
  value[big / 2] = '\n'; /* binary-safe in the memfd too */
  value[big] = '\0';
  core_log_kv(CORE_LOG_INFO, "large", "blob", value, NULL);

  char byte;
  struct iovec iov = {&byte, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } control;
  struct msghdr mh = {.msg_iov = &iov,
                      .msg_iovlen = 1,
                      .msg_control = control.buf,
                      .msg_controllen = sizeof(control.buf)};
  ssize_t n = recvmsg(js, &mh, MSG_CMSG_CLOEXEC);
  cr_assert_eq(n, 0, "an empty datagram (%zd)", n);
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cr_assert(cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
                cm->cmsg_len == CMSG_LEN(sizeof(int)),
            "one file descriptor");
  int mfd;
  memcpy(&mfd, CMSG_DATA(cm), sizeof(int));
  int seals = fcntl(mfd, F_GET_SEALS);
  int want = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
  cr_assert_eq(seals & want, want, "sealed: %#x", seals);
  struct stat st;
  cr_assert_eq(fstat(mfd, &st), 0);
  cr_assert_gt((size_t)st.st_size, big);
  char *d = malloc((size_t)st.st_size);
  cr_assert_eq(pread(mfd, d, (size_t)st.st_size, 0), st.st_size);
  cr_assert_eq(check_fields(d, (size_t)st.st_size), 5);
  const char *f = memmem(d, (size_t)st.st_size, "\nCORDON_BLOB\n", 13);
  cr_assert_not_null(f);
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--)
    len = len << 8 | (unsigned char)f[13 + i];
  cr_assert_eq(len, big, "the whole value, not cut");
  cr_assert_eq(memcmp(f + 21, value, big), 0);
  char v[64];
  cr_assert_str_eq(journal_sock_field(d, (size_t)st.st_size, "CORDON_MSG", v, sizeof(v)), "large");
  close(mfd);
  free(d);
  free(value);
  static char text[4096];
  journal_sock_slurp(errlog, text, sizeof(text));
  cr_assert_str_eq(text, "", "nothing on stderr: %s", text);
}

Test(journal_writer, a_full_journal_drops_and_counts_and_the_next_line_carries_the_count,
     .fini = journal_sock_teardown) {
  char errlog[128];
  int js = writer_setup(errlog, sizeof(errlog));
  /* nobody reads: the queue fills, the writer must not block */
  int sent = 0;
  for (; sent < 100000 && journal_dropped() == 0; sent++)
    core_log_kv(CORE_LOG_INFO, "filling", "n", "x", NULL);
  cr_assert_gt(journal_dropped(), 0, "dropped after %d lines", sent);
  for (int i = 0; i < 5; i++)
    core_log_kv(CORE_LOG_INFO, "dropped too", NULL);
  unsigned long long dropped = journal_dropped();
  cr_assert_eq(dropped, 6);
  static char text[4096];
  journal_sock_slurp(errlog, text, sizeof(text));
  cr_assert_str_eq(text, "", "not on stderr either: %s", text);
  static char d[65536];
  int queued = 0;
  while (recv(js, d, sizeof(d), MSG_DONTWAIT) > 0)
    queued++;
  cr_assert_eq(queued, sent - 1, "every line before the first drop arrived");
  core_log_kv(CORE_LOG_INFO, "after", NULL);
  ssize_t n = recv(js, d, sizeof(d), 0);
  cr_assert_gt(n, 0);
  char v[64];
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_MSG", v, sizeof(v)), "after");
  cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_JOURNAL_DROPPED", v, sizeof(v)), "6");
  core_log_kv(CORE_LOG_INFO, "later", NULL); /* reported once */
  n = recv(js, d, sizeof(d), 0);
  cr_assert_gt(n, 0);
  cr_assert_null(journal_sock_field(d, (size_t)n, "CORDON_JOURNAL_DROPPED", v, sizeof(v)));
  cr_assert_eq(journal_dropped(), 6, "the total stays");
}

Test(journal_writer, a_line_the_journal_cannot_take_goes_to_stderr, .fini = journal_sock_teardown) {
  char errlog[128];
  int js = writer_setup(errlog, sizeof(errlog));
  close(js);
  unlink(JOURNAL_SOCK_PATH); /* the socket gone */
  core_log_kv(CORE_LOG_WARN, "no socket", "job", "j-2", NULL);
  static char text[4096];
  journal_sock_slurp(errlog, text, sizeof(text));
  cr_assert_not_null(strstr(text, "level=warn prog=cordon-test msg=\"no socket\" job=j-2\n"), "%s",
                     text);
  cr_assert_eq(journal_dropped(), 0, "not counted as dropped");
}
