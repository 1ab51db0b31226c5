/* Executor package manifests (docs/DESIGN.md section 3).
 *
 * manifest_parse() validates strictly: unknown keys, bad types, relative or
 * `..` paths and out-of-range values are rejected with the field named in
 * diag. The input is capped at MANIFEST_MAX_BYTES before anything is parsed.
 * A parsed manifest owns all its strings; manifest_free() releases them.
 */
#ifndef CORDON_CORE_MANIFEST_H
#define CORDON_CORE_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define MANIFEST_MAX_BYTES (64 * 1024)
/* The largest limits.output_kb (per stream): what sizes every result
 * (core/result.h RESULT_OUTPUT_MAX, RESULT_JSON_MAX). */
#define MANIFEST_OUTPUT_KB_MAX 1024
#define MANIFEST_MAX_ARGS 256
#define MANIFEST_MAX_ARG_LEN 4096
#define MANIFEST_MAX_GRANTS 64
#define MANIFEST_MAX_ENV 128
#define MANIFEST_MAX_PATH 4096
#define MANIFEST_MAX_NAME 128

enum sandbox_level {
  SANDBOX_LEVEL_NONE = 0,
  SANDBOX_LEVEL_CONTAINED = 1,
  SANDBOX_LEVEL_ISOLATED = 2,
};

/* "none", "contained", "isolated"; NULL for an invalid value. */
const char *sandbox_level_name(enum sandbox_level level);
/* 0 and *out_level on success, CORDON_E_USAGE for an unknown name. */
int sandbox_level_parse(const char *name, enum sandbox_level *out_level);

enum manifest_platform {
  MANIFEST_PLATFORM_LINUX = 1u << 0,
  MANIFEST_PLATFORM_WINDOWS = 1u << 1,
  MANIFEST_PLATFORM_MACOS = 1u << 2,
  MANIFEST_PLATFORM_ALL = 7u,
};

/* "linux" -> MANIFEST_PLATFORM_LINUX, 0 if unknown. */
unsigned manifest_platform_from_name(const char *name);

struct manifest_argv {
  char **argv; /* NULL-terminated */
  size_t argc;
};

enum manifest_grant_base {
  MANIFEST_GRANT_ABSOLUTE, /* "/x/y" */
  MANIFEST_GRANT_HOME,     /* "~" or "~/x" */
  MANIFEST_GRANT_WORKSPACE /* "$WORKSPACE" or "$WORKSPACE/x" */
};

/* ABSOLUTE is "/x/y" or, in a package only for windows, a drive path
 * "C:\x" or "C:/x". Components are separated by '/' or '\' alike. */
struct manifest_grant {
  char *path; /* as written */
  enum manifest_grant_base base;
  char *rel; /* path below the base (or drive), without leading separators; "" for the base */
  bool rw;
};

struct manifest_env {
  char *name;
  char *value;
};

struct manifest {
  char *name;
  char *version;
  /* entry per platform bit index (0 linux, 1 windows, 2 macos); argc 0 = none */
  struct manifest_argv entry[3];
  unsigned platforms; /* MANIFEST_PLATFORM_* bits */
  enum sandbox_level min_sandbox;
  uint32_t timeout_s;
  uint32_t memory_mb;
  uint32_t processes;
  uint32_t cpu_s;
  uint32_t output_kb;
  uint32_t disk_mb;
  bool net;
  struct manifest_grant *grants;
  size_t n_grants;
  struct manifest_env *env;
  size_t n_env;
};

/* Parse and validate len bytes of JSON. Errors: CORDON_E_MANIFEST_INVALID
 * (diag names the field), -ENOMEM. */
int manifest_parse(const char *json, size_t len, struct manifest **out_manifest,
                   struct cordon_diag *diag);

/* Read and parse a manifest file (refuses files over MANIFEST_MAX_BYTES
 * before reading them). Errors as manifest_parse, or a negated errno. */
int manifest_load_file(const char *path, struct manifest **out_manifest, struct cordon_diag *diag);

/* Does p start with a drive letter, ':' and a separator ("C:\", "c:/")? Such
 * an entry[0] or grant is an absolute Windows path, valid only for windows. */
bool manifest_path_is_windows_absolute(const char *p);

/* The entry argv for one platform (MANIFEST_PLATFORM_* bit), or NULL. */
const struct manifest_argv *manifest_entry_for(const struct manifest *m, unsigned platform);

/* The part of judging a grant that needs no device: a grant of "/" (or a
 * drive root) or of "~" is too broad on every agent, whatever its owner
 * allows. 0, or CORDON_E_SCOPE_TOO_BROAD with the reason in diag.
 * platform/grants.c applies it first; `cordon-server pack` refuses such a
 * package. */
int manifest_grant_scope_check(const struct manifest_grant *g, struct cordon_diag *diag);

void manifest_free(struct manifest *m);

#endif
