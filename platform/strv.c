#include "platform/strv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void strv_init(struct strv *s) {
  memset(s, 0, sizeof(*s));
}

void strv_release(struct strv *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
  strv_init(s);
}

static void strv_push(struct strv *s, char *owned) {
  if (s->err || !owned) {
    free(owned);
    s->err = -ENOMEM;
    return;
  }
  if (s->n + 2 > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 32;
    char **v = realloc(s->v, cap * sizeof(*v));
    if (!v) {
      free(owned);
      s->err = -ENOMEM;
      return;
    }
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = owned;
  s->v[s->n] = NULL;
}

void strv_add(struct strv *s, const char *str) {
  strv_push(s, strdup(str));
}

void strv_addf(struct strv *s, const char *fmt, ...) {
  char *p = NULL;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&p, fmt, ap) < 0)
    p = NULL;
  va_end(ap);
  strv_push(s, p);
}

void strv_addv(struct strv *s, ...) {
  va_list ap;
  va_start(ap, s);
  for (const char *a = va_arg(ap, const char *); a; a = va_arg(ap, const char *))
    strv_add(s, a);
  va_end(ap);
}
