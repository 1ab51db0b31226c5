#include "core/error.h"

#include <stdarg.h>
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

int cordon_diag_set(struct cordon_diag *diag, int err, const char *fmt, ...) {
  if (diag) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(diag->msg, sizeof(diag->msg), fmt, ap);
    va_end(ap);
  }
  return err;
}
