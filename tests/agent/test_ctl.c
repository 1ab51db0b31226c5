/* The control protocol's pure parts (agent/ctl.c): the line reader and its
 * limit, the request parser, the status JSON and the Prometheus text. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/ctl.h"

Test(ctl_reader, a_line_in_pieces_is_one_request) {
  struct agent_ctl_reader r;
  agent_ctl_reader_init(&r);
  size_t used = 0, len = 0;
  cr_assert_eq(agent_ctl_reader_feed(&r, "{\"op\":", 6, &used, &len), 0);
  cr_assert_eq(agent_ctl_reader_feed(&r, "\"status\"}\nrest", 14, &used, &len), 1);
  cr_assert_eq(used, 10, "the bytes after the newline are the next line's");
  cr_assert_eq(len, 15);
  cr_assert_str_eq(r.buf, "{\"op\":\"status\"}");
}

Test(ctl_reader, refuses_a_line_past_the_limit_before_storing_it) {
  static char big[AGENT_CTL_REQUEST_MAX + 8];
  memset(big, ' ', sizeof(big));
  struct agent_ctl_reader r;
  agent_ctl_reader_init(&r);
  size_t used, len;
  /* the longest line: AGENT_CTL_REQUEST_MAX bytes with its newline */
  big[AGENT_CTL_REQUEST_MAX - 1] = '\n';
  cr_assert_eq(agent_ctl_reader_feed(&r, big, AGENT_CTL_REQUEST_MAX, &used, &len), 1);
  cr_assert_eq(len, AGENT_CTL_REQUEST_MAX - 1);
  /* one byte more, in one piece or in two */
  agent_ctl_reader_init(&r);
  big[AGENT_CTL_REQUEST_MAX - 1] = ' ';
  big[AGENT_CTL_REQUEST_MAX] = '\n';
  cr_assert_eq(agent_ctl_reader_feed(&r, big, AGENT_CTL_REQUEST_MAX + 1, &used, &len),
               CORDON_E_LIMIT);
  agent_ctl_reader_init(&r);
  cr_assert_eq(agent_ctl_reader_feed(&r, big, 1000, &used, &len), 0);
  cr_assert_eq(agent_ctl_reader_feed(&r, big, AGENT_CTL_REQUEST_MAX - 1 - 1000, &used, &len), 0);
  cr_assert_eq(agent_ctl_reader_feed(&r, " \n", 2, &used, &len), CORDON_E_LIMIT);
  cr_assert_eq(r.len, AGENT_CTL_REQUEST_MAX - 1, "nothing more was stored (%zu)", r.len);
}

static const struct {
  const char *line;
  int want; /* 0, or CORDON_E_USAGE */
  enum agent_ctl_op op;
} requests[] = {
    {"{\"op\":\"status\"}", 0, AGENT_CTL_STATUS},
    {" { \"op\" : \"metrics\" } ", 0, AGENT_CTL_METRICS},
    {"{\"op\":\"stop\"}", CORDON_E_USAGE, 0},
    {"{\"op\":\"status\",\"x\":1}", CORDON_E_USAGE, 0},
    {"{\"op\":\"status\",\"op\":\"metrics\"}", CORDON_E_USAGE, 0},
    {"{\"op\":7}", CORDON_E_USAGE, 0},
    {"{}", CORDON_E_USAGE, 0},
    {"[\"status\"]", CORDON_E_USAGE, 0},
    {"\"status\"", CORDON_E_USAGE, 0},
    {"status", CORDON_E_USAGE, 0},
    {"", CORDON_E_USAGE, 0},
    {"{\"op\":\"status\"", CORDON_E_USAGE, 0},
    {"{\"op\":\"st\\u0000tus\"}", CORDON_E_USAGE, 0},
};

Test(ctl_request, only_a_known_op_alone_is_a_request) {
  for (size_t i = 0; i < sizeof(requests) / sizeof(requests[0]); i++) {
    enum agent_ctl_op op = (enum agent_ctl_op)99;
    struct cordon_diag d = {{0}};
    int r = agent_ctl_parse_request(requests[i].line, strlen(requests[i].line), &op, &d);
    cr_assert_eq(r, requests[i].want, "%s: %d (%s)", requests[i].line, r, d.msg);
    if (r == 0)
      cr_assert_eq(op, requests[i].op, "%s", requests[i].line);
    else
      cr_assert(d.msg[0], "%s: a reason", requests[i].line);
  }
}

Test(ctl_request, a_nul_byte_or_an_overlong_line_is_refused) {
  enum agent_ctl_op op;
  const char with_nul[] = "{\"op\":\"status\"}\0";
  cr_assert_eq(agent_ctl_parse_request(with_nul, sizeof(with_nul) - 1, &op, NULL), CORDON_E_USAGE);
  static char big[AGENT_CTL_REQUEST_MAX + 1];
  memset(big, ' ', sizeof(big));
  memcpy(big, "{\"op\":\"status\"}", 15);
  cr_assert_eq(agent_ctl_parse_request(big, sizeof(big), &op, NULL), CORDON_E_USAGE);
}

static struct agent_health health(void) {
  struct agent_health h;
  agent_health_init(&h);
  h.started_ms = 1764583547123ull; /* 2025-12-01T10:05:47.123Z */
  snprintf(h.server, sizeof(h.server), "127.0.0.1:7443");
  return h;
}

Test(ctl_status, says_connected_since_and_the_running_jobs) {
  struct agent_health h = health();
  h.connected = true;
  h.connected_since_ms = h.started_ms + 1000;
  agent_health_error(&h, "connection to %s failed: %s", h.server, "refused");
  struct agent_ctl_job jobs[1] = {{.id = "0123456789abcdef0123456789abcdef",
                                   .package = "nap@1",
                                   .started_ms = h.started_ms + 2000,
                                   .level = "isolated"}};
  struct agent_ctl_view v = {.pid = 42,
                             .version = "0.1.0",
                             .config_dir = "/var/lib/cordon-agent",
                             .health = &h,
                             .jobs = jobs,
                             .n_jobs = 1,
                             .max_jobs = 4};
  json_t *s = agent_ctl_status_json(&v);
  cr_assert(json_is_true(json_object_get(s, "running")));
  cr_assert_eq(json_integer_value(json_object_get(s, "pid")), 42);
  cr_assert_str_eq(json_string_value(json_object_get(s, "started")), "2025-12-01T10:05:47.123Z");
  cr_assert(json_is_true(json_object_get(s, "connected")));
  cr_assert_str_eq(json_string_value(json_object_get(s, "connected_since")),
                   "2025-12-01T10:05:48.123Z");
  cr_assert(json_is_null(json_object_get(s, "disconnected_since")));
  cr_assert_str_eq(json_string_value(json_object_get(s, "server")), "127.0.0.1:7443");
  json_t *j = json_array_get(json_object_get(s, "jobs_running"), 0);
  cr_assert_str_eq(json_string_value(json_object_get(j, "package")), "nap@1");
  cr_assert_str_eq(json_string_value(json_object_get(j, "level")), "isolated");
  cr_assert_str_eq(json_string_value(json_object_get(j, "started")), "2025-12-01T10:05:49.123Z");
  json_t *e = json_object_get(s, "last_error");
  cr_assert_str_eq(json_string_value(json_object_get(e, "message")),
                   "connection to 127.0.0.1:7443 failed: refused");
  json_decref(s);

  h.connected = false;
  h.disconnected_ms = h.started_ms + 5000;
  v.n_jobs = 0;
  s = agent_ctl_status_json(&v);
  cr_assert(json_is_false(json_object_get(s, "connected")));
  cr_assert(json_is_null(json_object_get(s, "connected_since")));
  cr_assert_str_eq(json_string_value(json_object_get(s, "disconnected_since")),
                   "2025-12-01T10:05:52.123Z");
  cr_assert_eq(json_array_size(json_object_get(s, "jobs_running")), 0);
  json_decref(s);
}

/* The text exposition format, strictly enough to catch a broken line:
 * comments are "# HELP name text" / "# TYPE name type" and come before
 * the samples of their metric; a sample is name{label="value",...} value. */
static double sample(const char *text, const char *series) {
  const char *p = text;
  size_t n = strlen(series);
  while ((p = strstr(p, series))) {
    if ((p == text || p[-1] == '\n') && p[n] == ' ')
      return strtod(p + n + 1, NULL);
    p += n;
  }
  cr_assert_fail("no sample %s in\n%s", series, text);
  return -1;
}

static void assert_exposition_format(const char *text) {
  char *copy = strdup(text);
  char typed[64][80];
  int n_typed = 0;
  cr_assert(strlen(text) > 0 && text[strlen(text) - 1] == '\n', "ends with a newline");
  for (char *save, *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (strncmp(line, "# HELP ", 7) == 0)
      continue;
    if (strncmp(line, "# TYPE ", 7) == 0) {
      char name[80], type[16];
      cr_assert_eq(sscanf(line + 7, "%79s %15s", name, type), 2, "%s", line);
      cr_assert(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0, "%s", line);
      cr_assert_lt(n_typed, 64);
      snprintf(typed[n_typed++], sizeof(typed[0]), "%s", name);
      continue;
    }
    const char *p = line;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == ':')
      p++;
    cr_assert(p > line, "a metric name: %s", line);
    char name[80];
    snprintf(name, sizeof(name), "%.*s", (int)(p - line), line);
    bool declared = false;
    for (int i = 0; i < n_typed; i++)
      declared |= strcmp(typed[i], name) == 0;
    cr_assert(declared, "TYPE before the samples of %s", name);
    if (*p == '{') {
      p++;
      while (*p != '}') {
        while (isalnum((unsigned char)*p) || *p == '_')
          p++;
        cr_assert(p[0] == '=' && p[1] == '"', "label=\"value\": %s", line);
        p = strchr(p + 2, '"');
        cr_assert(p, "%s", line);
        p++;
        if (*p == ',')
          p++;
        else
          cr_assert_eq(*p, '}', "%s", line);
      }
      p++;
    }
    cr_assert_eq(*p, ' ', "%s", line);
    char *end;
    strtod(p + 1, &end);
    cr_assert(end > p + 1 && *end == '\0', "a number: %s", line);
  }
  free(copy);
}

Test(ctl_metrics, prometheus_text_with_every_outcome_and_the_counters) {
  struct agent_health h = health();
  h.connected = true;
  h.outcomes[AGENT_OUTCOME_SUCCEEDED] = 3;
  h.outcomes[AGENT_OUTCOME_REFUSED] = 2;
  h.connects = 5;
  h.sessions = 2;
  h.bytes_sent = 1234;
  h.bytes_received = 99;
  struct agent_ctl_job jobs[2] = {{.id = "a"}, {.id = "b"}};
  struct agent_ctl_view v = {.pid = 1,
                             .version = "0.1.0",
                             .config_dir = "/x",
                             .health = &h,
                             .jobs = jobs,
                             .n_jobs = 2,
                             .max_jobs = 4};
  char *t = agent_ctl_metrics_text(&v);
  cr_assert(t);
  assert_exposition_format(t);
  cr_assert_eq(sample(t, "cordon_agent_jobs_total{outcome=\"succeeded\"}"), 3);
  cr_assert_eq(sample(t, "cordon_agent_jobs_total{outcome=\"refused\"}"), 2);
  cr_assert_eq(sample(t, "cordon_agent_jobs_total{outcome=\"lost\"}"), 0);
  cr_assert_eq(sample(t, "cordon_agent_jobs_running"), 2);
  cr_assert_eq(sample(t, "cordon_agent_connected"), 1);
  cr_assert_eq(sample(t, "cordon_agent_reconnects_total"), 4);
  cr_assert_eq(sample(t, "cordon_agent_sessions_total"), 2);
  cr_assert_eq(sample(t, "cordon_agent_sent_bytes_total"), 1234);
  cr_assert_eq(sample(t, "cordon_agent_received_bytes_total"), 99);
  int outcomes = 0;
  for (const char *p = t; (p = strstr(p, "\ncordon_agent_jobs_total{")); p++)
    outcomes++;
  cr_assert_eq(outcomes, AGENT_OUTCOME_N);
  free(t);
}

Test(ctl_reply, replies_are_one_json_line) {
  struct agent_health h = health();
  struct agent_ctl_view v = {
      .pid = 1, .version = "0.1.0", .config_dir = "/x", .health = &h, .max_jobs = 1};
  char *lines[] = {agent_ctl_reply(AGENT_CTL_STATUS, &v), agent_ctl_reply(AGENT_CTL_METRICS, &v),
                   agent_ctl_reply_error(CORDON_E_USAGE, "no such op")};
  const char *keys[] = {"status", "metrics", "error"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(lines[i]);
    cr_assert(n > 1 && lines[i][n - 1] == '\n');
    cr_assert_null(memchr(lines[i], '\n', n - 1), "one line");
    json_t *j = json_loadb(lines[i], n, 0, NULL);
    cr_assert(j, "%s", lines[i]);
    cr_assert_eq(json_is_true(json_object_get(j, "ok")), i < 2);
    cr_assert(json_object_get(j, keys[i]), "%s", lines[i]);
    json_decref(j);
    free(lines[i]);
  }
}

Test(health, outcomes_follow_the_result) {
  struct job_result r;
  job_result_init(&r);
  cr_assert_eq(agent_outcome_of(&r), AGENT_OUTCOME_REFUSED);
  r.ran = r.exited = true;
  cr_assert_eq(agent_outcome_of(&r), AGENT_OUTCOME_SUCCEEDED);
  r.exit_code = 3;
  cr_assert_eq(agent_outcome_of(&r), AGENT_OUTCOME_FAILED);
  r.exited = false;
  r.signal = 9;
  cr_assert_eq(agent_outcome_of(&r), AGENT_OUTCOME_KILLED);
  r.timed_out = true;
  cr_assert_eq(agent_outcome_of(&r), AGENT_OUTCOME_TIMED_OUT);
  r.error = CORDON_E_CANCELLED;
  cr_assert_eq(agent_outcome_of(&r), AGENT_OUTCOME_CANCELLED);
  job_result_init(&r);
  r.error = CORDON_E_AGENT_RESTARTED;
  cr_assert_eq(agent_outcome_of(&r), AGENT_OUTCOME_LOST);
  r.error = CORDON_E_CAPABILITY_DENIED;
  cr_assert_eq(agent_outcome_of(&r), AGENT_OUTCOME_REFUSED);
  cr_assert_str_eq(agent_outcome_name(AGENT_OUTCOME_TIMED_OUT), "timed_out");
}
