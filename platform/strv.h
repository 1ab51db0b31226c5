/* A growable NULL-terminated vector of owned strings (argv/envp building). */
#ifndef CORDON_PLATFORM_STRV_H
#define CORDON_PLATFORM_STRV_H

#include <stddef.h>

struct strv {
  char **v; /* NULL-terminated once anything was added */
  size_t n, cap;
  int err; /* sticky: -ENOMEM after any failed add */
};

void strv_init(struct strv *s);
void strv_release(struct strv *s);
/* Append a copy; on failure sets s->err and later adds are no-ops. */
void strv_add(struct strv *s, const char *str);
void strv_addf(struct strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append several strings, the list ends with NULL. */
void strv_addv(struct strv *s, ...) __attribute__((sentinel));

#endif
