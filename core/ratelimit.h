/* How often a repeated log line is written: the first CORE_RATELIMIT_BURST
 * events, then the 2^k-th ones (64, 128, 256, ...), each with the count of
 * those not written since the previous line, so that a peer sending
 * 10,000 bad messages costs about 20 lines and every one is still
 * counted. Counters (metrics) count every event; this only decides the
 * log line.
 *
 * A limiter with a window (window_ms > 0) starts counting again when the
 * window has passed: at least one line per window for a source that keeps
 * failing, the first carrying what the previous window suppressed.
 * core_ratelimit_table keys such limiters by a string (a source address)
 * in a fixed number of slots; a new key takes the slot whose window began
 * longest ago, carrying nothing over.
 *
 * Pure: the caller passes the monotonic time. Not thread-safe (one loop). */
#ifndef CORDON_CORE_RATELIMIT_H
#define CORDON_CORE_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

#define CORE_RATELIMIT_BURST 5
#define CORE_RATELIMIT_TABLE_SLOTS 256
#define CORE_RATELIMIT_KEY_MAX 64
/* the window of a table keyed by source address: a line a minute at least */
#define CORE_RATELIMIT_ADDR_WINDOW_MS 60000

struct core_ratelimit {
  int64_t window_ms;    /* 0: one window for ever */
  int64_t window_start; /* the monotonic ms the current window began */
  uint64_t seen;        /* events in this window */
  uint64_t suppressed;  /* events not written since the last line */
};

/* Count one event at now_ms: whether to write its line, and then
 * *suppressed (may be NULL) is how many were not written before it (0 for
 * the first ones). */
bool core_ratelimit_hit(struct core_ratelimit *rl, int64_t now_ms, uint64_t *suppressed);

/* The suppressed count as a log field value: "0", "41", ... (buf of 24). */
const char *core_ratelimit_fmt(uint64_t suppressed, char buf[24]);

struct core_ratelimit_table {
  int64_t window_ms;
  struct {
    char key[CORE_RATELIMIT_KEY_MAX];
    struct core_ratelimit rl;
  } slot[CORE_RATELIMIT_TABLE_SLOTS];
};

void core_ratelimit_table_init(struct core_ratelimit_table *t, int64_t window_ms);
/* core_ratelimit_hit on key's limiter (a key longer than the slot holds
 * is cut). */
bool core_ratelimit_table_hit(struct core_ratelimit_table *t, const char *key, int64_t now_ms,
                              uint64_t *suppressed);

/* The host of "host:port" or "[v6]:port" into buf (size bytes): the source
 * address a table is keyed by, so that a peer's many ports are one. */
void core_ratelimit_addr_host(const char *addr, char *buf, unsigned size);

#endif
