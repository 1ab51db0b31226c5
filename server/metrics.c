/* The daemon's metrics (server/metrics.h). */
#include "server/metrics.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/db.h"

_Static_assert(METRICS_JOB_STATES == SERVER_DB_JOB_STATE_COUNT, "one gauge per job state");

#define METRICS_TEXT_MAX (1u << 20)
#define HIST_MAX_BUCKETS 16

static const char *const pair_labels[] = {
#define METRICS_LABEL_(id, label) [METRICS_PAIR_##id] = label,
    METRICS_PAIR_FAILURES(METRICS_LABEL_)
#undef METRICS_LABEL_
};

static const char *const refusal_labels[] = {
#define METRICS_LABEL_(id, label) [METRICS_REFUSAL_##id] = label,
    METRICS_RESULT_REFUSALS(METRICS_LABEL_)
#undef METRICS_LABEL_
};

struct histogram {
  const double *bounds; /* upper bounds in seconds, ascending; +Inf implied */
  size_t n;
  uint64_t buckets[HIST_MAX_BUCKETS]; /* not cumulative: rendered cumulative */
  uint64_t count;
  double sum;
};

static const double latency_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                        0.5,   1,    2.5,   5,    10,  30};
static const double duration_bounds[] = {0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400};

static struct {
  uint64_t connections;
  uint64_t pairings;
  uint64_t pair_failures[METRICS_PAIR_COUNT_];
  uint64_t bytes_sent;
  uint64_t dispatched;
  uint64_t finished[METRICS_JOB_STATES];
  uint64_t refusals[METRICS_REFUSAL_COUNT_];
  uint64_t groups[2]; /* committed, failed */
  struct histogram latency, duration;
} m = {
    .latency = {latency_bounds, sizeof(latency_bounds) / sizeof(latency_bounds[0]), {0}, 0, 0},
    .duration = {duration_bounds, sizeof(duration_bounds) / sizeof(duration_bounds[0]), {0}, 0, 0},
};

_Static_assert(sizeof(latency_bounds) / sizeof(latency_bounds[0]) <= HIST_MAX_BUCKETS, "buckets");
_Static_assert(sizeof(duration_bounds) / sizeof(duration_bounds[0]) <= HIST_MAX_BUCKETS, "buckets");

static void observe(struct histogram *h, double v) {
  size_t i = 0;
  while (i < h->n && v > h->bounds[i])
    i++;
  if (i < h->n)
    h->buckets[i]++;
  h->count++;
  h->sum += v;
}

void metrics_connection_accepted(void) {
  m.connections++;
}
void metrics_pairing_succeeded(void) {
  m.pairings++;
}
void metrics_pairing_failed(enum metrics_pair_failure why) {
  if ((unsigned)why < METRICS_PAIR_COUNT_)
    m.pair_failures[why]++;
}
void metrics_bytes_sent(uint64_t n) {
  m.bytes_sent += n;
}
void metrics_job_dispatched(void) {
  m.dispatched++;
}
void metrics_dispatch_latency(uint64_t ms) {
  observe(&m.latency, (double)ms / 1000.0);
}
void metrics_job_finished(int final_state, int64_t wall_ms) {
  if (final_state >= 0 && final_state < METRICS_JOB_STATES)
    m.finished[final_state]++;
  if (wall_ms >= 0)
    observe(&m.duration, (double)wall_ms / 1000.0);
}
void metrics_result_refused(enum metrics_result_refusal why) {
  if ((unsigned)why < METRICS_REFUSAL_COUNT_)
    m.refusals[why]++;
}

void metrics_db_group(int err) {
  m.groups[err != 0]++;
}

void metrics_reset(void) {
  struct histogram l = m.latency, d = m.duration;
  memset(&m, 0, sizeof(m));
  m.latency.bounds = l.bounds;
  m.latency.n = l.n;
  m.duration.bounds = d.bounds;
  m.duration.n = d.n;
}

/* ---- rendering ---- */

struct text {
  char *buf;
  size_t len, cap;
  bool failed;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...) {
  if (t->failed)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap * 2;
    char *nb = cap <= METRICS_TEXT_MAX ? realloc(t->buf, cap) : NULL;
    if (!nb) {
      t->failed = true;
      return;
    }
    t->buf = nb;
    t->cap = cap;
  }
}

static void head(struct text *t, const char *name, const char *type, const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void histogram(struct text *t, const char *name, const char *help,
                      const struct histogram *h) {
  head(t, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < h->n; i++) {
    cum += h->buckets[i];
    put(t, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
  }
  put(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
  put(t, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

int metrics_render(const struct metrics_gauges *g, char **out_text, size_t *out_len) {
  struct text t = {malloc(8192), 0, 8192, false};
  if (!t.buf)
    return -ENOMEM;
  head(&t, "cordon_sessions_online", "gauge", "Agents with an active session.");
  put(&t, "cordon_sessions_online %zu\n", g->sessions_online);
  head(&t, "cordon_connections", "gauge", "Agent TCP connections, in any phase.");
  put(&t, "cordon_connections %zu\n", g->connections);
  head(&t, "cordon_connections_total", "counter", "Agent connections that finished a handshake.");
  put(&t, "cordon_connections_total %llu\n", (unsigned long long)m.connections);
  head(&t, "cordon_draining", "gauge", "1 while the daemon drains after SIGTERM.");
  put(&t, "cordon_draining %d\n", g->draining ? 1 : 0);
  head(&t, "cordon_start_time_seconds", "gauge", "When the daemon started (Unix time).");
  put(&t, "cordon_start_time_seconds %llu\n", (unsigned long long)g->start_time_s);
  if (g->instance) {
    head(&t, "cordon_instance_info", "gauge",
         "This process's cluster instance id (random per start).");
    put(&t, "cordon_instance_info{instance=\"%s\"} 1\n", g->instance);
  }
  if (g->have_db) {
    head(&t, "cordon_devices", "gauge", "Paired devices by state.");
    put(&t, "cordon_devices{state=\"active\"} %zu\n", g->devices_active);
    put(&t, "cordon_devices{state=\"revoked\"} %zu\n", g->devices_revoked);
    head(&t, "cordon_jobs", "gauge", "Jobs in the database by state.");
    for (int s = 0; s < METRICS_JOB_STATES; s++)
      put(&t, "cordon_jobs{state=\"%s\"} %llu\n",
          server_db_job_state_name((enum server_db_job_state)s), (unsigned long long)g->jobs[s]);
  }
  head(&t, "cordon_jobs_dispatched_total", "counter", "Jobs sent to a device by this process.");
  put(&t, "cordon_jobs_dispatched_total %llu\n", (unsigned long long)m.dispatched);
  head(&t, "cordon_jobs_finished_total", "counter",
       "Jobs that reached a final state in this process, by that state.");
  for (int s = 0; s < METRICS_JOB_STATES; s++)
    if (server_db_job_state_is_final((enum server_db_job_state)s))
      put(&t, "cordon_jobs_finished_total{state=\"%s\"} %llu\n",
          server_db_job_state_name((enum server_db_job_state)s), (unsigned long long)m.finished[s]);
  head(&t, "cordon_result_refusals_total", "counter",
       "Results from agents not recorded as the job's outcome, by code.");
  for (int i = 0; i < METRICS_REFUSAL_COUNT_; i++)
    put(&t, "cordon_result_refusals_total{code=\"%s\"} %llu\n", refusal_labels[i],
        (unsigned long long)m.refusals[i]);
  head(&t, "cordon_db_commits_total", "counter",
       "Write transactions the daemon's database handle committed (each one sync at most).");
  put(&t, "cordon_db_commits_total %llu\n", (unsigned long long)g->db_commits);
  head(&t, "cordon_db_groups_total", "counter",
       "Commit groups of the jobs' changes, by outcome (docs/ARCHITECTURE.md, Durable writes).");
  put(&t, "cordon_db_groups_total{outcome=\"committed\"} %llu\n", (unsigned long long)m.groups[0]);
  put(&t, "cordon_db_groups_total{outcome=\"failed\"} %llu\n", (unsigned long long)m.groups[1]);
  head(&t, "cordon_pairings_total", "counter", "Devices paired.");
  put(&t, "cordon_pairings_total %llu\n", (unsigned long long)m.pairings);
  head(&t, "cordon_pairing_failures_total", "counter", "Failed pairing attempts, by reason.");
  for (int i = 0; i < METRICS_PAIR_COUNT_; i++)
    put(&t, "cordon_pairing_failures_total{reason=\"%s\"} %llu\n", pair_labels[i],
        (unsigned long long)m.pair_failures[i]);
  head(&t, "cordon_sent_bytes_total", "counter",
       "Bytes of records sent to agents (before encryption).");
  put(&t, "cordon_sent_bytes_total %llu\n", (unsigned long long)m.bytes_sent);
  histogram(&t, "cordon_dispatch_latency_seconds",
            "From a dispatch request to the agent saying the job runs.", &m.latency);
  histogram(&t, "cordon_job_duration_seconds",
            "Wall time of finished jobs as their agents measured it.", &m.duration);
  if (t.failed) {
    free(t.buf);
    return -ENOMEM;
  }
  *out_text = t.buf;
  *out_len = t.len;
  return 0;
}
