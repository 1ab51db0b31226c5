/* libFuzzer target for the manifest parser (core/manifest.c).
 *
 * Input: the raw bytes handed to manifest_parse(). A parsed manifest must
 * satisfy every rule of docs/DESIGN.md §3 (ranges, paths, env names), a refusal
 * must be manifest_invalid with a diag and leave the output untouched. */
#include "core/error.h"
#include "core/manifest.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      abort();                                                                                     \
  } while (0)

#define UNTOUCHED ((struct manifest *)(uintptr_t)0x5a5a5a5a)

/* no empty, "." or ".." component */
static int components_ok(const char *p) {
  if (*p == '\0')
    return 1;
  const char *s = p;
  for (;;) {
    const char *e = strchr(s, '/');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
      return 0;
    if (!e)
      return 1;
    s = e + 1;
  }
}

static void check_manifest(const struct manifest *m) {
  CHECK(m->name && m->name[0] && strlen(m->name) <= MANIFEST_MAX_NAME);
  CHECK(m->version && m->version[0]);
  CHECK(m->platforms != 0 && (m->platforms & ~(unsigned)MANIFEST_PLATFORM_ALL) == 0);
  CHECK(m->min_sandbox <= SANDBOX_LEVEL_ISOLATED);
  CHECK(m->timeout_s >= 1 && m->timeout_s <= 86400);
  CHECK(m->memory_mb >= 16 && m->memory_mb <= 65536);
  CHECK(m->processes >= 1 && m->processes <= 4096);
  CHECK(m->cpu_s >= 1 && m->cpu_s <= 86400);
  CHECK(m->output_kb >= 1 && m->output_kb <= 1024);
  CHECK(m->disk_mb >= 1 && m->disk_mb <= 16384);
  for (unsigned i = 0; i < 3; i++) {
    const struct manifest_argv *a = &m->entry[i];
    if (m->platforms & (1u << i)) {
      CHECK(manifest_entry_for(m, 1u << i) == a);
      CHECK(a->argc >= 1);
    }
    CHECK(a->argc <= MANIFEST_MAX_ARGS);
    for (size_t k = 0; k < a->argc; k++)
      CHECK(a->argv[k] && a->argv[k][0] && strlen(a->argv[k]) <= MANIFEST_MAX_ARG_LEN);
    if (a->argc) {
      CHECK(a->argv[a->argc] == NULL);
      if (a->argv[0][0] != '/')
        CHECK(components_ok(a->argv[0]));
    }
  }
  CHECK(m->n_grants <= MANIFEST_MAX_GRANTS);
  for (size_t i = 0; i < m->n_grants; i++) {
    const struct manifest_grant *g = &m->grants[i];
    CHECK(g->path && g->rel);
    CHECK(g->rel[0] != '/');
    CHECK(components_ok(g->rel));
    switch (g->base) {
    case MANIFEST_GRANT_ABSOLUTE:
      CHECK(g->path[0] == '/');
      break;
    case MANIFEST_GRANT_HOME:
      CHECK(g->path[0] == '~' && (g->path[1] == '\0' || g->path[1] == '/'));
      break;
    case MANIFEST_GRANT_WORKSPACE:
      CHECK(strncmp(g->path, "$WORKSPACE", 10) == 0 && (g->path[10] == '\0' || g->path[10] == '/'));
      break;
    default:
      CHECK(0);
    }
  }
  CHECK(m->n_env <= MANIFEST_MAX_ENV);
  for (size_t i = 0; i < m->n_env; i++) {
    const char *n = m->env[i].name;
    CHECK(n && m->env[i].value);
    CHECK(n[0] && !(n[0] >= '0' && n[0] <= '9') && strlen(n) <= MANIFEST_MAX_NAME);
    for (const char *p = n; *p; p++)
      CHECK((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            *p == '_');
    CHECK(strcmp(n, "PACKAGE") != 0 && strcmp(n, "WORKSPACE") != 0 && strcmp(n, "HOME") != 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct manifest *m = UNTOUCHED;
  struct cordon_diag diag = {{0}};
  int r = manifest_parse((const char *)data, size, &m, &diag);
  if (r == 0) {
    CHECK(m != UNTOUCHED && m != NULL);
    check_manifest(m);
    manifest_free(m);
  } else {
    CHECK(r == CORDON_E_MANIFEST_INVALID || r == -ENOMEM);
    CHECK(m == UNTOUCHED);
    CHECK(r == -ENOMEM || diag.msg[0] != '\0');
  }
  return 0;
}
