#include "core/error.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

struct err_entry {
  int code;
  const char *name;
  const char *message;
};

static const struct err_entry err_table[] = {
#define CORDON_ERR_ROW_(name, str, msg) {CORDON_E_##name, str, msg},
    CORDON_ERR_MAP(CORDON_ERR_ROW_)
#undef CORDON_ERR_ROW_
};

static const struct err_entry *err_find(int err) {
  for (size_t i = 0; i < sizeof(err_table) / sizeof(err_table[0]); i++)
    if (err_table[i].code == err)
      return &err_table[i];
  return NULL;
}

const char *cordon_err_name(int err) {
  const struct err_entry *e = err_find(err);
  if (e)
    return e->name;
  return err < 0 && err > CORDON_E_BASE_ ? "io_error" : "internal_error";
}

const char *cordon_err_message(int err) {
  const struct err_entry *e = err_find(err);
  if (e)
    return e->message;
  if (err < 0 && err > CORDON_E_BASE_)
    return strerror(-err);
  return "internal error";
}

int cordon_err_from_name(const char *name) {
  for (size_t i = 0; i < sizeof(err_table) / sizeof(err_table[0]); i++)
    if (strcmp(err_table[i].name, name) == 0)
      return err_table[i].code;
  return 0;
}

/* A C1 control (U+0080..U+009F, UTF-8 c2 80..c2 9f) starts at buf[i]. */
static bool c1_at(const char *buf, size_t i, size_t len) {
  return (unsigned char)buf[i] == 0xc2 && i + 1 < len && (unsigned char)buf[i + 1] >= 0x80 &&
         (unsigned char)buf[i + 1] <= 0x9f;
}

void cordon_escape_controls(char *buf, size_t size) {
  if (size == 0)
    return;
  size_t len = strnlen(buf, size - 1), ctl = 0;
  buf[len] = '\0';
  for (size_t i = 0; i < len; i++)
    ctl += (unsigned char)buf[i] < 0x20 || buf[i] == 0x7f || c1_at(buf, i, len);
  if (ctl == 0)
    return;
  /* from the end: each control byte becomes \xNN; what does not fit in
   * size - 1 bytes is cut, never half an escape */
  static const char hex[] = "0123456789abcdef";
  char tmp[1024];
  char *out = size <= sizeof(tmp) ? tmp : NULL;
  if (!out) { /* larger buffers than any message cordon keeps: cut them */
    size = sizeof(tmp);
    out = tmp;
    buf[size - 1] = '\0';
    len = strnlen(buf, size - 1);
  }
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)buf[i];
    bool c1 = c1_at(buf, i, len);
    if (c1) /* the two bytes of U+0080..U+009F become \x80..\x9f */
      c = (unsigned char)buf[++i];
    bool esc = c < 0x20 || c == 0x7f || c1;
    size_t need = esc ? 4 : 1;
    if (o + need > size - 1)
      break;
    if (esc) {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    } else {
      out[o++] = (char)c;
    }
  }
  out[o] = '\0';
  memcpy(buf, out, o + 1);
}

int cordon_diag_set(struct cordon_diag *diag, int err, const char *fmt, ...) {
  if (diag) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(diag->msg, sizeof(diag->msg), fmt, ap);
    va_end(ap);
    /* details name what a package or a peer sent: never raw to a terminal */
    cordon_escape_controls(diag->msg, sizeof(diag->msg));
  }
  return err;
}
