/* cordon-agent run under systemd writes to the journal natively, as the
 * server does (svc/journal.c): the real agent binary, paired to a server
 * address that refuses connections, with stderr named by JOURNAL_STREAM and a
 * journal socket this test binds in a mount namespace of its own
 * (tests/svc/journal_sock.h). Its start line arrives with priority 6 and
 * CORDON_* fields, the failed connection with priority 4, and neither is
 * on stderr as well. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <sodium.h>
#include <sys/wait.h>

#include "agent/state.h"
#include "proto/noise.h"
#include "svc/journal.h"
#include "tests/svc/journal_sock.h"

#define AGENT CORDON_BINARY_DIR "/cordon-agent"

/* A loopback port nothing listens on: bound and kept, never listening, so
 * that connections are refused and no other test's server can take it. */
static int closed_port(void) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
  cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
  return ntohs(a.sin_port); /* s stays open until the test ends */
}

static void pair(const char *cfg) {
  uint8_t pub[32], *priv = sodium_malloc(32), server_priv[32];
  noise_keypair_generate(pub, priv);
  struct agent_pairing p = {0};
  snprintf(p.host, sizeof(p.host), "127.0.0.1");
  p.port = closed_port();
  noise_keypair_generate(p.server_key, server_priv);
  randombytes_buf(p.device_id, 16);
  snprintf(p.user, sizeof(p.user), "alice");
  snprintf(p.name, sizeof(p.name), "test");
  uint8_t sk[64], pubs[1][32];
  crypto_sign_keypair(p.ticket_key, sk);
  crypto_sign_keypair(pubs[0], sk);
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_pairing_save(cfg, priv, &p, (const uint8_t(*)[32])pubs, 1, &d), 0, "%s",
               d.msg);
  sodium_free(priv);
}

Test(agent_journal, under_systemd_the_agent_writes_to_the_journal_with_fields_and_priorities,
     .timeout = 60, .fini = journal_sock_teardown) {
  if (!journal_available())
    cr_skip_test("built with CORDON_WITH_SYSTEMD=OFF: no journal writer");
  const char *why = "";
  int js = journal_sock_bind(&why);
  if (js < 0)
    cr_skip_test("%s", why);
  cr_assert(sodium_init() >= 0);
  snprintf(journal_sock_tmp, sizeof(journal_sock_tmp), "/tmp/cordon-test-ajournal-XXXXXX");
  cr_assert_not_null(mkdtemp(journal_sock_tmp));
  chmod(journal_sock_tmp, 0755); /* the job user stages under it */
  char cfg[200], errlog[200];
  snprintf(cfg, sizeof(cfg), "%s/agent", journal_sock_tmp);
  snprintf(errlog, sizeof(errlog), "%s/stderr", journal_sock_tmp);
  pair(cfg);
  journal_sock_daemon = fork();
  cr_assert(journal_sock_daemon >= 0);
  if (journal_sock_daemon == 0) {
    if (journal_sock_child_stderr(errlog) < 0)
      _exit(127);
    execl(AGENT, AGENT, "--config", cfg, "run", (char *)NULL);
    _exit(127);
  }
  bool started = false, failed = false;
  char v[1024];
  for (int i = 0; i < 100 && !(started && failed); i++) {
    static char d[65536];
    ssize_t n = recv(js, d, sizeof(d), 0);
    if (n <= 0 || !journal_sock_field(d, (size_t)n, "CORDON_MSG", v, sizeof(v)))
      continue;
    cr_assert_str_eq(journal_sock_field(d, (size_t)n, "SYSLOG_IDENTIFIER", v + 512, 512),
                     "cordon-agent");
    if (strcmp(v, "agent started") == 0) {
      started = true;
      cr_assert_str_eq(journal_sock_field(d, (size_t)n, "PRIORITY", v, sizeof(v)), "6");
      cr_assert_not_null(journal_sock_field(d, (size_t)n, "MESSAGE", v, sizeof(v)));
      cr_assert(strncmp(v, "msg=\"agent started\" version=", 28) == 0, "%s", v);
      cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_CONFIG", v, sizeof(v)), cfg);
      cr_assert_str_eq(journal_sock_field(d, (size_t)n, "CORDON_LOG", v, sizeof(v)), "journal");
      cr_assert_not_null(journal_sock_field(d, (size_t)n, "CORDON_PID", v, sizeof(v)));
      cr_assert_eq(atol(v), (long)journal_sock_daemon);
    } else if (strcmp(v, "connection failed") == 0) {
      failed = true;
      cr_assert_str_eq(journal_sock_field(d, (size_t)n, "PRIORITY", v, sizeof(v)), "4");
      cr_assert_not_null(journal_sock_field(d, (size_t)n, "CORDON_SERVER", v, sizeof(v)));
      cr_assert(strncmp(v, "127.0.0.1:", 10) == 0, "%s", v);
      cr_assert_not_null(journal_sock_field(d, (size_t)n, "CORDON_REASON", v, sizeof(v)));
    }
  }
  static char text[65536];
  journal_sock_slurp(errlog, text, sizeof(text));
  cr_assert(started && failed, "started %d, connection failed %d; stderr: %s", started, failed,
            text);
  cr_assert_null(strstr(text, "agent started"), "not on stderr as well: %s", text);
  cr_assert_null(strstr(text, "connection failed"), "not on stderr as well: %s", text);
  kill(journal_sock_daemon, SIGTERM);
  int st;
  waitpid(journal_sock_daemon, &st, 0);
  journal_sock_daemon = -1;
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
  close(js);
}
