/* libpq loaded at run time: server/pq.h. */
#define CORDON_PQ_NO_MACROS
#include "server/pq.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define PQ_LIBRARY "libpq.so.5"

struct pq_api pq_api;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[256]; /* "" once loaded */

static void load(void) {
  void *h = dlopen(PQ_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(load_error, sizeof(load_error),
             "PostgreSQL needs %s (Debian: apt-get install libpq5): %s", PQ_LIBRARY,
             why ? why : "not found");
    return;
  }
  struct pq_api api;
  memset(&api, 0, sizeof(api));
#define PQ_RESOLVE_(ret, name, params)                                                             \
  *(void **)&api.name = dlsym(h, #name);                                                           \
  if (!api.name && !load_error[0])                                                                 \
    snprintf(load_error, sizeof(load_error), "%s has no %s: too old a libpq", PQ_LIBRARY, #name);
  PQ_FUNCTIONS(PQ_RESOLVE_)
#undef PQ_RESOLVE_
  if (load_error[0]) {
    dlclose(h);
    return;
  }
  pq_api = api; /* h stays open for the life of the process */
}

int pq_load(struct cordon_diag *diag) {
  pthread_once(&once, load);
  if (load_error[0])
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s", load_error);
  return 0;
}
