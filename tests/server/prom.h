/* The metrics listener of a running daemon, from a test: a GET, and the
 * value of one series of its Prometheus text (every line checked for the
 * format on the way). Header-only. */
#ifndef CORDON_TESTS_SERVER_PROM_H
#define CORDON_TESTS_SERVER_PROM_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define E2E_HTTP_FN static __attribute__((unused))

/* The port of the metrics listener a daemon started with `--metrics
 * 127.0.0.1:0` logged (its last `metrics=` in the log at log_path). */
E2E_HTTP_FN int prom_port_from_log(const char *log_path) {
  static const char key[] = " metrics=127.0.0.1:";
  char line[2048];
  FILE *f = fopen(log_path, "r");
  cr_assert(f, "%s", log_path);
  int port = 0;
  while (fgets(line, sizeof(line), f)) {
    char *p = strstr(line, key);
    if (p)
      port = atoi(p + strlen(key));
  }
  fclose(f);
  cr_assert_gt(port, 0, "no metrics listener in %s", log_path);
  return port;
}

/* GET path from the metrics listener: the status, the body in body. */
E2E_HTTP_FN int http_get(int port, const char *path, char *body, size_t size) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  char req[300];
  int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path);
  cr_assert_eq(write(fd, req, (size_t)n), n);
  static char resp[1 << 17];
  size_t len = 0;
  ssize_t k;
  while ((k = read(fd, resp + len, sizeof(resp) - 1 - len)) > 0)
    len += (size_t)k;
  close(fd);
  resp[len] = '\0';
  int status = 0;
  cr_assert_eq(sscanf(resp, "HTTP/1.1 %d ", &status), 1, "%s", resp);
  char *b = strstr(resp, "\r\n\r\n");
  cr_assert(b);
  snprintf(body, size, "%s", b + 4);
  return status;
}

/* Every line of a Prometheus text exposition: a # HELP or # TYPE comment,
 * or NAME[{LABELS}] VALUE. Returns the value of `series` (exact name and
 * labels), or -1 when it is absent. */
E2E_HTTP_FN double prom_value(const char *text, const char *series) {
  double found = -1;
  char *copy = strdup(text);
  for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') {
      cr_assert(strncmp(line, "# HELP cordon_", 14) == 0 ||
                    strncmp(line, "# TYPE cordon_", 14) == 0,
                "%s", line);
      continue;
    }
    char *sp = strrchr(line, ' ');
    cr_assert(sp, "%s", line);
    *sp = '\0';
    char *end;
    double v = strtod(sp + 1, &end);
    cr_assert(*end == '\0' && sp[1], "a number: %s", sp + 1);
    const char *name = line;
    cr_assert(strncmp(name, "cordon_", 7) == 0, "%s", name);
    for (const char *q = name; *q && *q != '{'; q++)
      cr_assert((*q >= 'a' && *q <= 'z') || *q == '_', "metric name %s", name);
    char *brace = strchr(line, '{');
    if (brace)
      cr_assert(line[strlen(line) - 1] == '}' && strstr(brace, "=\""), "labels %s", line);
    if (strcmp(line, series) == 0)
      found = v;
  }
  free(copy);
  return found;
}

#endif
