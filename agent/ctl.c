#include "agent/ctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compat/posix.h"

void agent_ctl_reader_init(struct agent_ctl_reader *r) {
  r->len = 0;
  r->buf[0] = '\0';
}

int agent_ctl_reader_feed(struct agent_ctl_reader *r, const char *data, size_t n, size_t *out_used,
                          size_t *out_line_len) {
  const char *nl = memchr(data, '\n', n);
  size_t take = nl ? (size_t)(nl - data) : n;
  /* the line, its newline and the NUL must fit: checked before storing */
  if (take > sizeof(r->buf) - 1 - r->len)
    return CORDON_E_LIMIT;
  memcpy(r->buf + r->len, data, take);
  r->len += take;
  r->buf[r->len] = '\0';
  if (!nl)
    return 0;
  *out_used = take + 1;
  *out_line_len = r->len;
  return 1;
}

static const struct {
  const char *name;
  enum agent_ctl_op op;
} ops[] = {
    {"status", AGENT_CTL_STATUS},
    {"metrics", AGENT_CTL_METRICS},
};

int agent_ctl_parse_request(const char *line, size_t len, enum agent_ctl_op *out_op,
                            struct cordon_diag *diag) {
  if (len >= AGENT_CTL_REQUEST_MAX)
    return cordon_diag_set(diag, CORDON_E_USAGE, "a request is at most %d bytes",
                           AGENT_CTL_REQUEST_MAX - 1);
  if (memchr(line, '\0', len))
    return cordon_diag_set(diag, CORDON_E_USAGE, "a request holds no NUL byte");
  json_error_t jerr;
  json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return cordon_diag_set(diag, CORDON_E_USAGE, "not JSON: %s", jerr.text);
  int r = 0;
  const char *key;
  json_t *v;
  if (!json_is_object(root)) {
    r = cordon_diag_set(diag, CORDON_E_USAGE, "a request is a JSON object");
    goto out;
  }
  json_object_foreach(root, key, v) {
    if (strcmp(key, "op") != 0) {
      r = cordon_diag_set(diag, CORDON_E_USAGE, "unknown key '%.32s'", key);
      goto out;
    }
  }
  const char *name = json_string_value(json_object_get(root, "op"));
  r = cordon_diag_set(diag, CORDON_E_USAGE, "\"op\" must be \"status\" or \"metrics\"");
  for (size_t i = 0; name && i < sizeof(ops) / sizeof(ops[0]); i++)
    if (strcmp(name, ops[i].name) == 0) {
      *out_op = ops[i].op;
      r = 0;
    }
out:
  json_decref(root);
  return r;
}

void agent_ctl_time(uint64_t ms, char *buf, size_t len) {
  time_t t = (time_t)(ms / 1000);
  /* gmtime: the loop thread is the only caller of the time functions in
   * the agent, and gmtime_r is not on every platform's C library */
  struct tm *tm = gmtime(&t);
  char date[24] = "1970-01-01T00:00:00";
  if (tm)
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", tm);
  snprintf(buf, len, "%s.%03uZ", date, (unsigned)(ms % 1000));
}

static json_t *time_or_null(uint64_t ms, bool valid) {
  if (!valid)
    return json_null();
  char t[40];
  agent_ctl_time(ms, t, sizeof(t));
  return json_string(t);
}

json_t *agent_ctl_status_json(const struct agent_ctl_view *v) {
  const struct agent_health *h = v->health;
  json_t *o = json_object();
  json_t *jobs = json_array();
  if (!o || !jobs) {
    json_decref(o);
    json_decref(jobs);
    return NULL;
  }
  json_object_set_new(o, "running", json_true());
  json_object_set_new(o, "pid", json_integer(v->pid));
  json_object_set_new(o, "version", json_string(v->version));
  json_object_set_new(o, "config_dir", json_string(v->config_dir));
  json_object_set_new(o, "started", time_or_null(h->started_ms, true));
  json_object_set_new(o, "server", h->server[0] ? json_string(h->server) : json_null());
  json_object_set_new(o, "connected", json_boolean(h->connected));
  json_object_set_new(o, "connected_since", time_or_null(h->connected_since_ms, h->connected));
  json_object_set_new(o, "disconnected_since",
                      time_or_null(h->disconnected_ms, !h->connected && h->disconnected_ms));
  json_object_set_new(o, "draining", json_boolean(h->draining));
  json_object_set_new(o, "max_jobs", json_integer(v->max_jobs));
  for (size_t i = 0; i < v->n_jobs; i++) {
    const struct agent_ctl_job *j = &v->jobs[i];
    json_t *e = json_object();
    json_object_set_new(e, "id", json_string(j->id));
    json_object_set_new(e, "package", json_string(j->package));
    json_object_set_new(e, "started", time_or_null(j->started_ms, true));
    json_object_set_new(e, "level", j->level ? json_string(j->level) : json_null());
    json_array_append_new(jobs, e);
  }
  json_object_set_new(o, "jobs_running", jobs);
  if (h->last_error_ms) {
    json_t *e = json_object();
    json_object_set_new(e, "at", time_or_null(h->last_error_ms, true));
    json_object_set_new(e, "message", json_string(h->last_error));
    json_object_set_new(o, "last_error", e);
  } else {
    json_object_set_new(o, "last_error", json_null());
  }
  return o;
}

/* ---- the Prometheus text ---- */

struct text {
  char *buf;
  size_t len, cap;
  bool failed;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...) {
  for (int attempt = 0; attempt < 2 && !t->failed; attempt++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if (t->buf && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t want = t->len + (size_t)n + 1;
    size_t ncap = t->cap ? t->cap : 2048;
    while (ncap < want)
      ncap *= 2;
    char *nb = realloc(t->buf, ncap);
    if (!nb) {
      t->failed = true;
      return;
    }
    t->buf = nb;
    t->cap = ncap;
  }
}

static void metric(struct text *t, const char *name, const char *type, const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *agent_ctl_metrics_text(const struct agent_ctl_view *v) {
  const struct agent_health *h = v->health;
  struct text t = {0};
  metric(&t, "cordon_agent_build_info", "gauge", "The agent's version (always 1).");
  put(&t, "cordon_agent_build_info{version=\"%s\"} 1\n", v->version);
  metric(&t, "cordon_agent_start_time_seconds", "gauge",
         "When this agent process started, seconds since the epoch.");
  put(&t, "cordon_agent_start_time_seconds %.3f\n", (double)h->started_ms / 1000.0);
  metric(&t, "cordon_agent_connected", "gauge", "1 while a session with the server is up.");
  put(&t, "cordon_agent_connected %d\n", h->connected ? 1 : 0);
  metric(&t, "cordon_agent_draining", "gauge",
         "1 while stopping: no new jobs, running ones finishing.");
  put(&t, "cordon_agent_draining %d\n", h->draining ? 1 : 0);
  metric(&t, "cordon_agent_jobs_running", "gauge", "Jobs running now.");
  put(&t, "cordon_agent_jobs_running %zu\n", v->n_jobs);
  metric(&t, "cordon_agent_max_jobs", "gauge", "Jobs this agent runs at once at most.");
  put(&t, "cordon_agent_max_jobs %u\n", v->max_jobs);
  metric(&t, "cordon_agent_jobs_total", "counter", "Jobs that ended, by outcome.");
  for (int o = 0; o < AGENT_OUTCOME_N; o++)
    put(&t, "cordon_agent_jobs_total{outcome=\"%s\"} %llu\n",
        agent_outcome_name((enum agent_outcome)o), (unsigned long long)h->outcomes[o]);
  metric(&t, "cordon_agent_connects_total", "counter", "Connection attempts to the server.");
  put(&t, "cordon_agent_connects_total %llu\n", (unsigned long long)h->connects);
  metric(&t, "cordon_agent_reconnects_total", "counter",
         "Connection attempts after the first one.");
  put(&t, "cordon_agent_reconnects_total %llu\n",
      (unsigned long long)(h->connects ? h->connects - 1 : 0));
  metric(&t, "cordon_agent_sessions_total", "counter", "Sessions established (welcomes).");
  put(&t, "cordon_agent_sessions_total %llu\n", (unsigned long long)h->sessions);
  metric(&t, "cordon_agent_sent_bytes_total", "counter",
         "Bytes of messages sent to the server (before encryption).");
  put(&t, "cordon_agent_sent_bytes_total %llu\n", (unsigned long long)h->bytes_sent);
  metric(&t, "cordon_agent_received_bytes_total", "counter",
         "Bytes of messages received from the server (after decryption).");
  put(&t, "cordon_agent_received_bytes_total %llu\n", (unsigned long long)h->bytes_received);
  if (t.failed) {
    free(t.buf);
    return NULL;
  }
  return t.buf;
}

/* j and a newline, compact; j is consumed. */
static char *line_of(json_t *j) {
  if (!j)
    return NULL;
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(j);
  if (!s)
    return NULL;
  size_t n = strlen(s);
  char *line = realloc(s, n + 2);
  if (!line) {
    free(s);
    return NULL;
  }
  line[n] = '\n';
  line[n + 1] = '\0';
  return line;
}

char *agent_ctl_reply(enum agent_ctl_op op, const struct agent_ctl_view *v) {
  json_t *o = json_object();
  if (!o)
    return NULL;
  json_object_set_new(o, "ok", json_true());
  if (op == AGENT_CTL_STATUS) {
    json_t *s = agent_ctl_status_json(v);
    if (!s) {
      json_decref(o);
      return NULL;
    }
    json_object_set_new(o, "status", s);
  } else {
    char *text = agent_ctl_metrics_text(v);
    if (!text) {
      json_decref(o);
      return NULL;
    }
    json_object_set_new(o, "metrics", json_string(text));
    free(text);
  }
  return line_of(o);
}

char *agent_ctl_reply_error(int code, const char *message) {
  json_t *o = json_object();
  json_t *e = json_object();
  if (!o || !e) {
    json_decref(o);
    json_decref(e);
    return NULL;
  }
  json_object_set_new(o, "ok", json_false());
  json_object_set_new(e, "code", json_string(cordon_err_name(code)));
  json_object_set_new(e, "message", json_string(message ? message : ""));
  json_object_set_new(o, "error", e);
  return line_of(o);
}
