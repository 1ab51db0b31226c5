#include "core/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"

#define LOG_MAX_PAIRS 16
#define LOG_LINE_MAX 4096

static const char *log_program = "cordon";
static enum core_log_level log_min = CORE_LOG_INFO;
static core_log_writer_fn log_writer;
static void *log_writer_ctx;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void core_log_set_program(const char *name) {
  log_program = name ? name : "cordon";
}
void core_log_set_level(enum core_log_level min) {
  log_min = min;
}
bool core_log_enabled(enum core_log_level level) {
  return level >= log_min;
}

int core_log_level_parse(const char *name, enum core_log_level *out_level) {
  for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
    if (name && strcmp(name, level_names[i]) == 0) {
      *out_level = (enum core_log_level)i;
      return 0;
    }
  return -EINVAL;
}

const char *core_log_level_name(enum core_log_level level) {
  return (unsigned)level < 4 ? level_names[level] : "info";
}

void core_log_set_writer(core_log_writer_fn fn, void *ctx) {
  log_writer = fn;
  log_writer_ctx = ctx;
}

/* Appending with a hard end: o never passes size - 1. */
struct out {
  char *buf;
  size_t size, o;
};

static void put_c(struct out *w, char c) {
  if (w->o + 1 < w->size)
    w->buf[w->o++] = c;
}

static void put_s(struct out *w, const char *s) {
  while (*s)
    put_c(w, *s++);
}

static bool needs_quotes(const char *v) {
  if (!*v)
    return true;
  for (const unsigned char *p = (const unsigned char *)v; *p; p++)
    if (*p <= ' ' || *p == '=' || *p == '"' || *p == 0x7f ||
        (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f))
      return true;
  return false;
}

static void put_value(struct out *w, const char *v) {
  static const char hex[] = "0123456789abcdef";
  bool q = needs_quotes(v);
  if (q)
    put_c(w, '"');
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    if (*p == '"' || *p == '\\') {
      put_c(w, '\\');
      put_c(w, (char)*p);
    } else if (*p < 0x20 || *p == 0x7f || (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)) {
      /* C0, DEL, and the C1 controls U+0080..U+009F (both bytes) */
      for (int b = 0; b < (*p == 0xc2 ? 2 : 1); b++) {
        put_c(w, '\\');
        put_c(w, 'x');
        put_c(w, hex[p[b] >> 4]);
        put_c(w, hex[p[b] & 15]);
      }
      p += *p == 0xc2;
    } else {
      put_c(w, (char)*p);
    }
  }
  if (q)
    put_c(w, '"');
}

/* A key is [a-z0-9_.]: anything else becomes '_' so the line stays logfmt. */
static void put_key(struct out *w, const char *k) {
  if (!*k)
    put_c(w, '_');
  for (; *k; k++) {
    char c = *k;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.';
    put_c(w, ok ? c : '_');
  }
}

/* Days since 1970-01-01 to a civil date (proleptic Gregorian). */
static void civil_from_days(long long z, int *y, unsigned *m, unsigned *d) {
  z += 719468;
  long long era = (z >= 0 ? z : z - 146096) / 146097;
  unsigned doe = (unsigned)(z - era * 146097);
  unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  long long yy = (long long)yoe + era * 400;
  unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = (int)(yy + (*m <= 2));
}

size_t core_log_format(char *buf, size_t size, unsigned long long ms, enum core_log_level level,
                       const char *program, const char *msg, const char *const *kv, size_t n_kv) {
  if (size == 0)
    return 0;
  struct out w = {buf, size, 0};
  unsigned long long secs = ms / 1000;
  int y;
  unsigned mo, d;
  civil_from_days((long long)(secs / 86400), &y, &mo, &d);
  unsigned sod = (unsigned)(secs % 86400);
  char ts[40];
  snprintf(ts, sizeof(ts), "%04d-%02u-%02uT%02u:%02u:%02u.%03uZ", y, mo, d, sod / 3600,
           sod / 60 % 60, sod % 60, (unsigned)(ms % 1000));
  put_s(&w, "ts=");
  put_s(&w, ts);
  put_s(&w, " level=");
  put_s(&w, core_log_level_name(level));
  put_s(&w, " prog=");
  put_value(&w, program ? program : "cordon");
  put_s(&w, " msg=");
  put_value(&w, msg ? msg : "");
  for (size_t i = 0; i < n_kv; i++) {
    put_c(&w, ' ');
    put_key(&w, kv[2 * i]);
    put_c(&w, '=');
    put_value(&w, kv[2 * i + 1]);
  }
  w.buf[w.o] = '\0';
  return w.o;
}

static void emit(enum core_log_level level, const char *msg, const char *const *kv, size_t n_kv) {
  char line[LOG_LINE_MAX];
  size_t n = core_log_format(line, sizeof(line), core_wall_ms(), level, log_program, msg, kv, n_kv);
  if (log_writer) {
    struct core_log_event ev = {level, log_program, msg, kv, n_kv, line};
    log_writer(&ev, log_writer_ctx);
    return;
  }
  /* one write per line, so lines of two threads do not interleave */
  line[n < sizeof(line) - 1 ? n : sizeof(line) - 2] = '\0';
  fprintf(stderr, "%s\n", line);
}

void core_log_kv(enum core_log_level level, const char *msg, ...) {
  if (!core_log_enabled(level))
    return;
  const char *kv[2 * LOG_MAX_PAIRS];
  size_t n = 0;
  va_list ap;
  va_start(ap, msg);
  while (n < LOG_MAX_PAIRS) {
    const char *k = va_arg(ap, const char *);
    if (!k)
      break;
    const char *v = va_arg(ap, const char *);
    if (!v)
      break;
    kv[2 * n] = k;
    kv[2 * n + 1] = v;
    n++;
  }
  va_end(ap);
  emit(level, msg, kv, n);
}

__attribute__((format(printf, 2, 0))) static void vlogl(enum core_log_level level, const char *fmt,
                                                        va_list ap) {
  if (!core_log_enabled(level))
    return;
  char msg[2048];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  emit(level, msg, NULL, 0);
}

void core_logl(enum core_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlogl(level, fmt, ap);
  va_end(ap);
}

void core_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlogl(CORE_LOG_INFO, fmt, ap);
  va_end(ap);
}
