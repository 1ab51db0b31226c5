/* A hostile or broken peer cannot flood the server's log (core/ratelimit.h):
 * the real daemon (e2e.h) and a fake agent (peer.h) sending 10,000 refused
 * results in one session, and failed handshakes and pairings from one
 * address. The log grows by a bounded number of lines, the metrics count
 * every one, and the lines that are written say how many were not. */
#include "e2e.h"
#include "peer.h"
#include "prom.h"

#include "proto/pairing.h"

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  e2e_setup();
}

TestSuite(flood, .init = setup, .fini = e2e_teardown, .timeout = 300);

/* The server again with a metrics listener: its port. */
static int restart_with_metrics(void) {
  e2e_stop(&e2e_server_pid, SIGTERM);
  e2e_log_restart(e2e_server_log);
  const char *argv[] = {SERVER,   "run",       "--state",     e2e_state, "--listen",
                        e2e_addr, "--metrics", "127.0.0.1:0", NULL};
  e2e_server_pid = spawn_logged(e2e_server_log, argv);
  cr_assert(wait_in(e2e_server_log, "msg=listening", 5000), "the server did not start again");
  return prom_port_from_log(e2e_server_log);
}

static int lines_in(const char *path) {
  return count_in(path, "\n");
}

/* The sum of the suppressed=N fields of the lines holding needle. */
static long suppressed_in(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  char line[4096];
  long sum = 0;
  while (f && fgets(line, sizeof(line), f)) {
    const char *p = strstr(line, " suppressed=");
    if (strstr(line, needle) && p)
      sum += atol(p + strlen(" suppressed="));
  }
  if (f)
    fclose(f);
  return sum;
}

#define FLOOD 10000

Test(flood, ten_thousand_refused_results_cost_a_bounded_number_of_lines_and_are_all_counted) {
  struct e2e_agent *a = pair_agent(0, "one", NULL), *b = pair_agent(1, "two", NULL);
  int mport = restart_with_metrics();
  struct peer p;
  peer_session(&p, a);
  int before = lines_in(e2e_server_log);
  /* each in b's name on a's session: refused wrong_device, answered and acked */
  for (int i = 0; i < FLOOD; i++) {
    uint8_t id[CORDON_ID_LEN];
    cordon_id_random(id);
    send_result(&p, id, b->id);
    if (i % 100 == 99) /* read the answers, so that neither side's queue fills */
      peer_spin(&p, 1);
  }
  static char body[1 << 17];
  double refused = 0;
  for (int t = 0; t < 600 && refused < FLOOD; t++) {
    peer_spin(&p, 50);
    cr_assert_eq(http_get(mport, "/metrics", body, sizeof(body)), 200);
    refused = prom_value(body, "cordon_result_refusals_total{code=\"not_this_device\"}");
  }
  cr_assert_eq(refused, FLOOD, "the metrics count every refused result: %g\n%s", refused, body);
  cr_assert(!p.closed, "the session stays: a refusal is answered, not punished");
  int lines = lines_in(e2e_server_log) - before;
  int logged = count_in(e2e_server_log, "msg=\"result refused\"");
  /* the first CORE_RATELIMIT_BURST, then 2^3 .. 2^13: 5 + 11 = 16 */
  cr_assert_eq(logged, 16, "refusals logged: %d", logged);
  cr_assert_lt(lines, 40, "the log grew by %d lines for %d refused results", lines, FLOOD);
  long sup = suppressed_in(e2e_server_log, "msg=\"result refused\"");
  cr_assert_eq(sup + logged, 8192, "each line says how many before it were not written: %ld", sup);
  peer_release(&p);
}

Test(flood, failed_handshakes_and_pairings_from_one_address_are_counted_and_logged_bounded) {
  int mport = restart_with_metrics();
  int before = lines_in(e2e_server_log);
  /* 200 connections that send garbage instead of a handshake */
  int port = atoi(strrchr(e2e_addr, ':') + 1);
  for (int i = 0; i < 200; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    static const char junk[] = "GET / HTTP/1.0\r\n\r\n\xff\xff\xff\xff";
    (void)!write(fd, junk, sizeof(junk));
    char c;
    (void)!read(fd, &c, 1); /* until the server closes it */
    close(fd);
  }
  /* 100 pairings with a code that does not exist */
  for (int i = 0; i < 100; i++) {
    char cfg[300];
    snprintf(cfg, sizeof(cfg), "%s/bad%d", e2e_dir, i);
    struct out *o = RUN(AGENT, "--config", cfg, "pair", "--server", e2e_addr, "--code",
                        "00000-00000-00000-00000-00000-00000-00000-00000");
    cr_assert_neq(o->status, 0);
    free(o);
  }
  static char body[1 << 17];
  double failed = 0;
  for (int t = 0; t < 100; t++) {
    cr_assert_eq(http_get(mport, "/metrics", body, sizeof(body)), 200);
    failed = 0;
    char *copy = strdup(body);
    for (char *l = strtok(copy, "\n"); l; l = strtok(NULL, "\n"))
      if (strncmp(l, "cordon_pairing_failures_total{", 30) == 0)
        failed += atof(strrchr(l, ' ') + 1);
    free(copy);
    if (failed >= 100)
      break;
    msleep(50);
  }
  cr_assert_eq(failed, 100, "the metrics count every failed pairing: %g", failed);
  int hs = count_in(e2e_server_log, "msg=\"handshake failed\" addr=127.0.0.1");
  int pf = count_in(e2e_server_log, "msg=\"pairing failed\" addr=127.0.0.1");
  /* per address and minute: 5, then the 8th, 16th, ... of each kind */
  cr_assert(hs >= 1 && hs <= 5 + 6, "handshake failures logged: %d", hs);
  cr_assert(pf >= 1 && pf <= 5 + 5, "pairing failures logged: %d", pf);
  cr_assert_eq(suppressed_in(e2e_server_log, "msg=\"pairing failed\"") + pf, 64,
               "the last line counts what it did not write before it");
  int lines = lines_in(e2e_server_log) - before;
  cr_assert_lt(lines, 60, "the log grew by %d lines", lines);
}
