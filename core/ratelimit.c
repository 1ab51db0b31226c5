/* How often a repeated log line is written (core/ratelimit.h). */
#include "core/ratelimit.h"

#include <stdio.h>
#include <string.h>

bool core_ratelimit_hit(struct core_ratelimit *rl, int64_t now_ms, uint64_t *suppressed) {
  if (rl->seen == 0 || (rl->window_ms > 0 && now_ms - rl->window_start >= rl->window_ms)) {
    rl->window_start = now_ms;
    rl->seen = 0;
  }
  uint64_t n = ++rl->seen;
  bool write = n <= CORE_RATELIMIT_BURST || (n & (n - 1)) == 0;
  if (!write) {
    rl->suppressed++;
    return false;
  }
  if (suppressed)
    *suppressed = rl->suppressed;
  rl->suppressed = 0;
  return true;
}

const char *core_ratelimit_fmt(uint64_t suppressed, char buf[24]) {
  snprintf(buf, 24, "%llu", (unsigned long long)suppressed);
  return buf;
}

void core_ratelimit_table_init(struct core_ratelimit_table *t, int64_t window_ms) {
  memset(t, 0, sizeof(*t));
  t->window_ms = window_ms;
}

bool core_ratelimit_table_hit(struct core_ratelimit_table *t, const char *key, int64_t now_ms,
                              uint64_t *suppressed) {
  char k[CORE_RATELIMIT_KEY_MAX];
  snprintf(k, sizeof(k), "%s", key ? key : "");
  size_t oldest = 0;
  for (size_t i = 0; i < CORE_RATELIMIT_TABLE_SLOTS; i++) {
    if (t->slot[i].key[0] && strcmp(t->slot[i].key, k) == 0)
      return core_ratelimit_hit(&t->slot[i].rl, now_ms, suppressed);
    if (!t->slot[i].key[0]) {
      oldest = i;
      break; /* slots fill in order: none is in use past an empty one */
    }
    if (t->slot[i].rl.window_start < t->slot[oldest].rl.window_start)
      oldest = i;
  }
  memcpy(t->slot[oldest].key, k, sizeof(k));
  t->slot[oldest].rl = (struct core_ratelimit){.window_ms = t->window_ms};
  return core_ratelimit_hit(&t->slot[oldest].rl, now_ms, suppressed);
}

void core_ratelimit_addr_host(const char *addr, char *buf, unsigned size) {
  if (size == 0)
    return;
  const char *a = addr ? addr : "";
  size_t n = strlen(a);
  if (a[0] == '[') { /* [v6]:port */
    const char *close = strchr(a, ']');
    if (close) {
      a++;
      n = (size_t)(close - a);
    }
  } else {
    const char *colon = strrchr(a, ':');
    if (colon && strchr(a, ':') == colon) /* v4:port; a bare v6 has several */
      n = (size_t)(colon - a);
  }
  snprintf(buf, size, "%.*s", (int)n, a);
}
