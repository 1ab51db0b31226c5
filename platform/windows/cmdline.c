#include "platform/windows/cmdline.h"

#include <windows.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "compat/win32.h"

#define CMDLINE_MAX 32767

struct wbuf {
  wchar_t *p;
  size_t n, cap;
  int err;
};

static void wb_put(struct wbuf *b, wchar_t c) {
  if (b->err)
    return;
  if (b->n + 2 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 256;
    wchar_t *p = realloc(b->p, cap * sizeof(wchar_t));
    if (!p) {
      b->err = -ENOMEM;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  b->p[b->n++] = c;
  b->p[b->n] = 0;
}

static void quote_arg(struct wbuf *b, const wchar_t *a) {
  bool need = a[0] == 0 || wcspbrk(a, L" \t\n\v\"") != NULL;
  if (!need) {
    for (; *a; a++)
      wb_put(b, *a);
    return;
  }
  wb_put(b, L'"');
  for (const wchar_t *p = a;; p++) {
    size_t slashes = 0;
    while (*p == L'\\') {
      slashes++;
      p++;
    }
    if (*p == 0) { /* before the closing quote: double them */
      for (size_t i = 0; i < slashes * 2; i++)
        wb_put(b, L'\\');
      break;
    }
    if (*p == L'"') { /* before a quote: double them and escape it */
      for (size_t i = 0; i < slashes * 2 + 1; i++)
        wb_put(b, L'\\');
      wb_put(b, L'"');
    } else {
      for (size_t i = 0; i < slashes; i++)
        wb_put(b, L'\\');
      wb_put(b, *p);
    }
  }
  wb_put(b, L'"');
}

int cmdline_build(char *const *argv, wchar_t **out_cmdline) {
  struct wbuf b = {0};
  for (size_t i = 0; argv[i]; i++) {
    wchar_t *w = win_wide(argv[i]);
    if (!w) {
      free(b.p);
      return -EINVAL;
    }
    if (i)
      wb_put(&b, L' ');
    quote_arg(&b, w);
    free(w);
  }
  if (!b.err && !b.p)
    wb_put(&b, 0), b.n = 0;
  if (b.err) {
    free(b.p);
    return b.err;
  }
  if (b.n > CMDLINE_MAX) {
    free(b.p);
    return -EINVAL;
  }
  *out_cmdline = b.p;
  return 0;
}

static size_t name_len(const wchar_t *e) {
  const wchar_t *eq = wcschr(e + (e[0] == L'=' ? 1 : 0), L'=');
  return eq ? (size_t)(eq - e) : wcslen(e);
}

static int cmp_env(const void *a, const void *b) {
  const wchar_t *x = *(wchar_t *const *)a, *y = *(wchar_t *const *)b;
  size_t lx = name_len(x), ly = name_len(y);
  int c = CompareStringOrdinal(x, (int)lx, y, (int)ly, TRUE);
  return c == CSTR_LESS_THAN ? -1 : c == CSTR_GREATER_THAN ? 1 : 0;
}

int cmdline_env_block(char *const *envp, size_t n, wchar_t **out_block) {
  wchar_t **w = calloc(n + 1, sizeof(*w));
  if (!w)
    return -ENOMEM;
  int r = 0;
  size_t k = 0;
  for (size_t i = 0; i < n && r == 0; i++) {
    wchar_t *e = win_wide(envp[i]);
    if (!e || !wcschr(e, L'=') || e[0] == L'=') {
      free(e);
      r = -EINVAL;
      break;
    }
    /* a later duplicate replaces the earlier one */
    size_t j;
    for (j = 0; j < k; j++)
      if (name_len(w[j]) == name_len(e) &&
          CompareStringOrdinal(w[j], (int)name_len(e), e, (int)name_len(e), TRUE) == CSTR_EQUAL)
        break;
    if (j < k) {
      free(w[j]);
      w[j] = e;
    } else {
      w[k++] = e;
    }
  }
  wchar_t *block = NULL;
  if (r == 0) {
    /* stable order for equal names is not needed: names are unique now */
    qsort(w, k, sizeof(*w), cmp_env);
    size_t total = 1;
    for (size_t i = 0; i < k; i++)
      total += wcslen(w[i]) + 1;
    if (total < 2)
      total = 2;
    block = malloc(total * sizeof(wchar_t));
    if (!block) {
      r = -ENOMEM;
    } else {
      size_t off = 0;
      for (size_t i = 0; i < k; i++) {
        size_t l = wcslen(w[i]) + 1;
        memcpy(block + off, w[i], l * sizeof(wchar_t));
        off += l;
      }
      if (off == 0)
        block[off++] = 0;
      block[off] = 0;
    }
  }
  for (size_t i = 0; i < k; i++)
    free(w[i]);
  free(w);
  if (r == 0)
    *out_block = block;
  return r;
}
