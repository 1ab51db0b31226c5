/* The control protocol of `cordon-agent run`: how `status` and `metrics`
 * ask the running agent (docs/OPERATIONS.md, "Asking the running agent").
 * The endpoint is CONFIG/agent.sock, a UNIX stream socket made 0600 by
 * the lock holder (agent/ctl_server.c); a client sends one request line
 * and reads one reply line, each a JSON object and a '\n':
 *
 *   {"op":"status"}   -> {"ok":true,"status":{"running":true,...}}
 *   {"op":"metrics"}  -> {"ok":true,"metrics":"<Prometheus text format>"}
 *   anything else     -> {"ok":false,"error":{"code":"usage","message":...}}
 *
 * A request line is at most AGENT_CTL_REQUEST_MAX bytes with its newline:
 * the reader stores into a fixed buffer and refuses a longer line before
 * storing it. A reply is at most AGENT_CTL_REPLY_MAX bytes. Everything in
 * this file is pure (no sockets, no clocks but the times it is given). */
#ifndef CORDON_AGENT_CTL_H
#define CORDON_AGENT_CTL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/health.h"
#include "core/error.h"
#include "core/id.h"

#define AGENT_CTL_SOCKET "agent.sock"
#define AGENT_CTL_REQUEST_MAX 1024
#define AGENT_CTL_REPLY_MAX (256 * 1024)

enum agent_ctl_op {
  AGENT_CTL_STATUS,
  AGENT_CTL_METRICS,
};

/* ---- framing: one line at a time ---- */

struct agent_ctl_reader {
  char buf[AGENT_CTL_REQUEST_MAX]; /* the line so far, then NUL-terminated */
  size_t len;
};

void agent_ctl_reader_init(struct agent_ctl_reader *r);
/* Take bytes from data[0..n). 1: a line is complete: r->buf holds it
 * NUL-terminated without its '\n', *out_line_len bytes; *out_used bytes
 * of data were taken (the rest is for the next line, after
 * agent_ctl_reader_init). 0: all n bytes stored, no line yet.
 * CORDON_E_LIMIT: the line would pass AGENT_CTL_REQUEST_MAX bytes (its
 * newline counted); nothing more was stored. */
int agent_ctl_reader_feed(struct agent_ctl_reader *r, const char *data, size_t n, size_t *out_used,
                          size_t *out_line_len);

/* One request line (len bytes, no newline): 0 and *out_op, or
 * CORDON_E_USAGE with diag when it is longer than the limit, holds a NUL,
 * is not a JSON object, has a key other than "op", or names no known op. */
int agent_ctl_parse_request(const char *line, size_t len, enum agent_ctl_op *out_op,
                            struct cordon_diag *diag);

/* ---- what the running agent answers ---- */

struct agent_ctl_job {
  char id[CORDON_ID_HEX_SIZE];
  char package[160];   /* name@version */
  uint64_t started_ms; /* wall clock */
  const char *level;   /* the sandbox level it runs at (static) */
};

struct agent_ctl_view {
  long pid;
  const char *version;
  const char *config_dir;
  const struct agent_health *health;
  const struct agent_ctl_job *jobs; /* running now */
  size_t n_jobs;
  unsigned max_jobs;
};

/* {"running": true, "pid", "version", "config_dir", "started", "server",
 * "connected", "connected_since" (null while not connected),
 * "disconnected_since" (null while connected or before the first
 * session), "draining", "max_jobs", "jobs_running": [{"id", "package",
 * "started", "level"}], "last_error": null or {"at", "message"}}; times
 * are RFC 3339 UTC with milliseconds. NULL when out of memory. */
json_t *agent_ctl_status_json(const struct agent_ctl_view *v);
/* The Prometheus text exposition format (version 0.0.4), malloc'd; NULL
 * when out of memory. Metric names are in docs/OPERATIONS.md. */
char *agent_ctl_metrics_text(const struct agent_ctl_view *v);
/* A whole reply line ending in '\n', malloc'd (NULL: no memory): for op,
 * or an error reply for code and message. */
char *agent_ctl_reply(enum agent_ctl_op op, const struct agent_ctl_view *v);
char *agent_ctl_reply_error(int code, const char *message);

/* "2026-12-01T10:05:47.123Z" into buf (at least 32 bytes). */
void agent_ctl_time(uint64_t ms, char *buf, size_t len);

#endif
