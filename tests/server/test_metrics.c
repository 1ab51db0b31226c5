/* server/metrics.c: the text exposition, from the counters and gauges. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/db.h"
#include "server/metrics.h"

static char *render(const struct metrics_gauges *g) {
  char *text = NULL;
  size_t len = 0;
  cr_assert_eq(metrics_render(g, &text, &len), 0);
  cr_assert_eq(strlen(text), len);
  cr_assert_eq(text[len - 1], '\n', "ends with a newline");
  return text;
}

static bool has_line(const char *text, const char *line) {
  size_t n = strlen(line);
  for (const char *p = text; (p = strstr(p, line)); p += n)
    if ((p == text || p[-1] == '\n') && p[n] == '\n')
      return true;
  return false;
}

Test(metrics, every_metric_has_help_and_type_before_its_samples) {
  metrics_reset();
  struct metrics_gauges g = {.have_db = true};
  char *text = render(&g);
  char *copy = strdup(text);
  char typed[64][96];
  size_t n_typed = 0;
  for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
    char name[96];
    if (sscanf(line, "# TYPE %95s", name) == 1) {
      cr_assert_lt(n_typed, 64);
      snprintf(typed[n_typed++], sizeof(typed[0]), "%s", name);
      continue;
    }
    if (line[0] == '#')
      continue;
    size_t len = strcspn(line, "{ ");
    bool ok = false;
    for (size_t i = 0; i < n_typed && !ok; i++) {
      size_t tl = strlen(typed[i]);
      ok = strncmp(line, typed[i], tl) == 0 &&
           (len == tl || (len > tl && (strncmp(line + tl, "_bucket", 7) == 0 ||
                                       strncmp(line + tl, "_sum", 4) == 0 ||
                                       strncmp(line + tl, "_count", 6) == 0)));
    }
    cr_assert(ok, "a sample of a declared metric: %s", line);
  }
  free(copy);
  free(text);
}

Test(metrics, counters_and_labels_follow_the_events) {
  metrics_reset();
  metrics_pairing_failed(METRICS_PAIR_UNKNOWN_CODE);
  metrics_pairing_failed(METRICS_PAIR_UNKNOWN_CODE);
  metrics_pairing_failed(METRICS_PAIR_RATE_LIMITED);
  metrics_pairing_failed((enum metrics_pair_failure)999); /* ignored */
  metrics_result_refused(METRICS_REFUSAL_LATE);
  metrics_job_dispatched();
  metrics_job_finished(SERVER_DB_JOB_DONE, 1500);
  metrics_job_finished(SERVER_DB_JOB_EXPIRED, -1);
  metrics_bytes_sent(100);
  metrics_bytes_sent(23);
  struct metrics_gauges g = {.sessions_online = 3, .have_db = true, .devices_active = 4};
  g.jobs[SERVER_DB_JOB_RUNNING] = 2;
  char *text = render(&g);
  cr_assert(has_line(text, "cordon_pairing_failures_total{reason=\"unknown_code\"} 2"), "%s", text);
  cr_assert(has_line(text, "cordon_pairing_failures_total{reason=\"rate_limited\"} 1"));
  cr_assert(has_line(text, "cordon_pairing_failures_total{reason=\"bad_proof\"} 0"));
  cr_assert(has_line(text, "cordon_result_refusals_total{code=\"late\"} 1"));
  cr_assert(has_line(text, "cordon_jobs_dispatched_total 1"));
  cr_assert(has_line(text, "cordon_jobs_finished_total{state=\"done\"} 1"));
  cr_assert(has_line(text, "cordon_jobs_finished_total{state=\"expired\"} 1"));
  cr_assert(has_line(text, "cordon_sent_bytes_total 123"));
  cr_assert(has_line(text, "cordon_sessions_online 3"));
  cr_assert(has_line(text, "cordon_devices{state=\"active\"} 4"));
  cr_assert(has_line(text, "cordon_jobs{state=\"running\"} 2"));
  cr_assert(has_line(text, "cordon_jobs{state=\"queued\"} 0"));
  /* an expired job has no duration: one observation, 1.5 s */
  cr_assert(has_line(text, "cordon_job_duration_seconds_count 1"));
  cr_assert(has_line(text, "cordon_job_duration_seconds_sum 1.500000"));
  cr_assert(has_line(text, "cordon_job_duration_seconds_bucket{le=\"1\"} 0"));
  cr_assert(has_line(text, "cordon_job_duration_seconds_bucket{le=\"5\"} 1"));
  cr_assert(has_line(text, "cordon_job_duration_seconds_bucket{le=\"+Inf\"} 1"));
  free(text);
}

Test(metrics, histogram_buckets_are_cumulative_and_end_at_the_count) {
  metrics_reset();
  uint64_t ms[] = {1, 4, 30, 200, 200, 7000, 60000};
  for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
    metrics_dispatch_latency(ms[i]);
  struct metrics_gauges g = {0};
  char *text = render(&g);
  cr_assert(has_line(text, "cordon_dispatch_latency_seconds_bucket{le=\"0.005\"} 2"), "%s", text);
  cr_assert(has_line(text, "cordon_dispatch_latency_seconds_bucket{le=\"0.05\"} 3"));
  cr_assert(has_line(text, "cordon_dispatch_latency_seconds_bucket{le=\"0.25\"} 5"));
  cr_assert(has_line(text, "cordon_dispatch_latency_seconds_bucket{le=\"10\"} 6"));
  cr_assert(has_line(text, "cordon_dispatch_latency_seconds_bucket{le=\"30\"} 6"));
  cr_assert(has_line(text, "cordon_dispatch_latency_seconds_bucket{le=\"+Inf\"} 7"));
  cr_assert(has_line(text, "cordon_dispatch_latency_seconds_count 7"));
  /* without the database the database's gauges are left out, not zero */
  cr_assert_null(strstr(text, "cordon_jobs{"));
  free(text);
}
