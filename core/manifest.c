#include "core/manifest.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"

static const char *const level_names[] = {"none", "contained", "isolated"};

const char *sandbox_level_name(enum sandbox_level level) {
  if ((unsigned)level > SANDBOX_LEVEL_ISOLATED)
    return NULL;
  return level_names[level];
}

int sandbox_level_parse(const char *name, enum sandbox_level *out_level) {
  for (unsigned i = 0; i <= SANDBOX_LEVEL_ISOLATED; i++) {
    if (strcmp(name, level_names[i]) == 0) {
      *out_level = (enum sandbox_level)i;
      return 0;
    }
  }
  return CORDON_E_USAGE;
}

static const char *const platform_names[] = {"linux", "windows", "macos"};

unsigned manifest_platform_from_name(const char *name) {
  for (unsigned i = 0; i < 3; i++)
    if (strcmp(name, platform_names[i]) == 0)
      return 1u << i;
  return 0;
}

/* A JSON string with no NUL inside (the parser lets NULs through so that
 * the field holding one can be named). */
static bool clean_string(json_t *v) {
  return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

#define BAD(...) cordon_diag_set(diag, CORDON_E_MANIFEST_INVALID, "manifest: " __VA_ARGS__)

/* A JSON string without NUL bytes and at most max bytes long. */
static int get_string(json_t *v, const char *field, size_t max, const char **out,
                      struct cordon_diag *diag) {
  if (!json_is_string(v))
    return BAD("field '%s': expected a string", field);
  size_t len = json_string_length(v);
  const char *s = json_string_value(v);
  if (len == 0)
    return BAD("field '%s': must not be empty", field);
  if (len > max)
    return BAD("field '%s': longer than %zu bytes", field, max);
  if (strlen(s) != len)
    return BAD("field '%s': contains a NUL byte", field);
  *out = s;
  return 0;
}

static int get_uint(json_t *v, const char *field, uint32_t lo, uint32_t hi, uint32_t *out,
                    struct cordon_diag *diag) {
  if (!json_is_integer(v))
    return BAD("field '%s': expected an integer", field);
  json_int_t n = json_integer_value(v);
  if (n < (json_int_t)lo || n > (json_int_t)hi)
    return BAD("field '%s': %lld is out of range %u..%u", field, (long long)n, lo, hi);
  *out = (uint32_t)n;
  return 0;
}

bool manifest_path_is_windows_absolute(const char *p) {
  return ((p[0] >= 'A' && p[0] <= 'Z') || (p[0] >= 'a' && p[0] <= 'z')) && p[1] == ':' &&
         (p[2] == '\\' || p[2] == '/');
}

/* A relative path inside the package or a grant: no empty, "." or ".."
 * parts, with '\' a separator as well as '/' (it is one on Windows). */
static bool rel_path_ok(const char *p) {
  if (*p == '/' || *p == '\\' || *p == '\0')
    return false;
  const char *s = p;
  while (*s) {
    const char *e = strpbrk(s, "/\\");
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
      return false;
    if (!e)
      break;
    s = e + 1;
    if (*s == '\0') /* trailing slash */
      return false;
  }
  return true;
}

static int parse_argv(json_t *v, const char *field, struct manifest_argv *out,
                      struct cordon_diag *diag) {
  if (!json_is_array(v))
    return BAD("field '%s': expected an array of strings", field);
  size_t n = json_array_size(v);
  if (n == 0)
    return BAD("field '%s': must not be empty", field);
  if (n > MANIFEST_MAX_ARGS)
    return BAD("field '%s': more than %d arguments", field, MANIFEST_MAX_ARGS);
  char **argv = calloc(n + 1, sizeof(*argv));
  if (!argv)
    return -ENOMEM;
  int r = 0;
  for (size_t i = 0; i < n; i++) {
    const char *s = NULL; /* gcc -O3 cannot see that every failure returns < 0 */
    char name[64];
    snprintf(name, sizeof(name), "%s[%zu]", field, i);
    r = get_string(json_array_get(v, i), name, MANIFEST_MAX_ARG_LEN, &s, diag);
    if (r < 0)
      goto out_free;
    /* entry[0]: "/...", a Windows drive path (checked against the
     * platforms in parse_root) or a file of the package */
    if (i == 0 && s[0] != '/' && !manifest_path_is_windows_absolute(s)) {
      if (strpbrk(s, ":\\"))
        r = BAD("field '%s': not a file of the package (a package path has no ':' or '\\') "
                "nor an absolute path (/... or C:\\...)",
                name);
      else if (!rel_path_ok(s))
        r = BAD("field '%s': must be an absolute path or a file of the package", name);
      if (r < 0)
        goto out_free;
    }
    argv[i] = strdup(s);
    if (!argv[i]) {
      r = -ENOMEM;
      goto out_free;
    }
  }
  out->argv = argv;
  out->argc = n;
  return 0;
out_free:
  for (size_t i = 0; i < n; i++)
    free(argv[i]);
  free(argv);
  return r;
}

static int parse_grant(json_t *v, size_t idx, struct manifest_grant *g, struct cordon_diag *diag) {
  char field[64];
  snprintf(field, sizeof(field), "capabilities.fs[%zu]", idx);
  if (!json_is_object(v))
    return BAD("field '%s': expected an object", field);
  const char *key;
  json_t *val;
  const char *path = NULL, *access = NULL;
  int r;
  json_object_foreach(v, key, val) {
    char sub[96];
    snprintf(sub, sizeof(sub), "%s.%s", field, key);
    if (strcmp(key, "path") == 0)
      r = get_string(val, sub, MANIFEST_MAX_PATH, &path, diag);
    else if (strcmp(key, "access") == 0)
      r = get_string(val, sub, 2, &access, diag);
    else
      r = BAD("field '%s': unknown key", sub);
    if (r < 0)
      return r;
  }
  if (!path)
    return BAD("field '%s.path': required", field);
  if (!access)
    return BAD("field '%s.access': required", field);
  if (strcmp(access, "ro") == 0)
    g->rw = false;
  else if (strcmp(access, "rw") == 0)
    g->rw = true;
  else
    return BAD("field '%s.access': must be \"ro\" or \"rw\"", field);

  const char *rest;
  if (path[0] == '~' && (path[1] == '\0' || path[1] == '/')) {
    g->base = MANIFEST_GRANT_HOME;
    rest = path + 1;
  } else if (strncmp(path, "$WORKSPACE", 10) == 0 && (path[10] == '\0' || path[10] == '/')) {
    g->base = MANIFEST_GRANT_WORKSPACE;
    rest = path + 10;
  } else if (path[0] == '/') {
    g->base = MANIFEST_GRANT_ABSOLUTE;
    rest = path;
  } else if (manifest_path_is_windows_absolute(path)) {
    g->base = MANIFEST_GRANT_ABSOLUTE; /* only for windows: checked in parse_root */
    rest = path + 2;
  } else {
    return BAD("field '%s.path': must be absolute, or start with ~ or $WORKSPACE", field);
  }
  while (*rest == '/' || *rest == '\\')
    rest++;
  if (*rest && !rel_path_ok(rest))
    return BAD("field '%s.path': empty, '.' or '..' component", field);
  g->path = strdup(path);
  g->rel = strdup(rest);
  if (!g->path || !g->rel)
    return -ENOMEM;
  return 0;
}

static int parse_capabilities(json_t *v, struct manifest *m, struct cordon_diag *diag) {
  if (!json_is_object(v))
    return BAD("field 'capabilities': expected an object");
  const char *key;
  json_t *val;
  json_object_foreach(v, key, val) {
    if (strcmp(key, "net") == 0) {
      if (!json_is_boolean(val))
        return BAD("field 'capabilities.net': expected a boolean");
      m->net = json_is_true(val);
    } else if (strcmp(key, "fs") == 0) {
      if (!json_is_array(val))
        return BAD("field 'capabilities.fs': expected an array");
      size_t n = json_array_size(val);
      if (n > MANIFEST_MAX_GRANTS)
        return BAD("field 'capabilities.fs': more than %d grants", MANIFEST_MAX_GRANTS);
      m->grants = calloc(n ? n : 1, sizeof(*m->grants));
      if (!m->grants)
        return -ENOMEM;
      for (size_t i = 0; i < n; i++) {
        m->n_grants = i + 1; /* so manifest_free releases partial grants */
        int r = parse_grant(json_array_get(val, i), i, &m->grants[i], diag);
        if (r < 0)
          return r;
      }
      m->n_grants = n;
    } else {
      return BAD("field 'capabilities.%s': unknown key", key);
    }
  }
  return 0;
}

static bool env_name_ok(const char *s) {
  if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
    return false;
  for (s++; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
          *s == '_'))
      return false;
  return true;
}

static int parse_env(json_t *v, struct manifest *m, struct cordon_diag *diag) {
  if (!json_is_object(v))
    return BAD("field 'env': expected an object");
  size_t n = json_object_size(v);
  if (n > MANIFEST_MAX_ENV)
    return BAD("field 'env': more than %d variables", MANIFEST_MAX_ENV);
  m->env = calloc(n ? n : 1, sizeof(*m->env));
  if (!m->env)
    return -ENOMEM;
  const char *key;
  json_t *val;
  json_object_foreach(v, key, val) {
    char field[96];
    snprintf(field, sizeof(field), "env.%.64s", key);
    if (!env_name_ok(key) || strlen(key) > MANIFEST_MAX_NAME)
      return BAD("field '%s': not a valid variable name", field);
    if (strcmp(key, "PACKAGE") == 0 || strcmp(key, "WORKSPACE") == 0 || strcmp(key, "HOME") == 0)
      return BAD("field '%s': reserved; set by the agent", field);
    const char *s;
    if (json_is_string(val) && json_string_length(val) == 0)
      s = "";
    else {
      int r = get_string(val, field, MANIFEST_MAX_ARG_LEN, &s, diag);
      if (r < 0)
        return r;
    }
    struct manifest_env *e = &m->env[m->n_env++];
    e->name = strdup(key);
    e->value = strdup(s);
    if (!e->name || !e->value)
      return -ENOMEM;
  }
  return 0;
}

static bool name_ok(const char *s) {
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '-' || *s == '_' || *s == '.'))
      return false;
  return true;
}

static int parse_limits(json_t *v, struct manifest *m, bool *cpu_set, struct cordon_diag *diag) {
  if (!json_is_object(v))
    return BAD("field 'limits': expected an object");
  const char *key;
  json_t *val;
  json_object_foreach(v, key, val) {
    int r;
    if (strcmp(key, "memory_mb") == 0)
      r = get_uint(val, "limits.memory_mb", 16, 65536, &m->memory_mb, diag);
    else if (strcmp(key, "processes") == 0)
      r = get_uint(val, "limits.processes", 1, 4096, &m->processes, diag);
    else if (strcmp(key, "cpu_s") == 0) {
      r = get_uint(val, "limits.cpu_s", 1, 86400, &m->cpu_s, diag);
      *cpu_set = true;
    } else if (strcmp(key, "output_kb") == 0)
      r = get_uint(val, "limits.output_kb", 1, MANIFEST_OUTPUT_KB_MAX, &m->output_kb, diag);
    else if (strcmp(key, "disk_mb") == 0)
      r = get_uint(val, "limits.disk_mb", 1, 16384, &m->disk_mb, diag);
    else
      r = BAD("field 'limits.%s': unknown key", key);
    if (r < 0)
      return r;
  }
  return 0;
}

static int parse_root(json_t *root, struct manifest *m, struct cordon_diag *diag) {
  if (!json_is_object(root))
    return BAD("the top level must be an object");
  bool cpu_set = false, have_entry = false, entry_is_array = false;
  const char *key;
  json_t *val;
  int r = 0;
  json_object_foreach(root, key, val) {
    const char *s;
    if (strcmp(key, "name") == 0) {
      r = get_string(val, "name", MANIFEST_MAX_NAME, &s, diag);
      if (r == 0 && !name_ok(s))
        r = BAD("field 'name': only letters, digits, '-', '_' and '.' are allowed");
      if (r == 0 && !(m->name = strdup(s)))
        r = -ENOMEM;
    } else if (strcmp(key, "version") == 0) {
      r = get_string(val, "version", 64, &s, diag);
      if (r == 0 && !name_ok(s))
        r = BAD("field 'version': only letters, digits, '-', '_' and '.' are allowed");
      if (r == 0 && !(m->version = strdup(s)))
        r = -ENOMEM;
    } else if (strcmp(key, "entry") == 0) {
      have_entry = true;
      entry_is_array = json_is_array(val);
      if (json_is_array(val)) {
        /* one argv for every platform */
        for (unsigned i = 0; i < 3 && r == 0; i++)
          r = parse_argv(val, "entry", &m->entry[i], diag);
      } else if (json_is_object(val)) {
        const char *pk;
        json_t *pv;
        if (json_object_size(val) == 0)
          r = BAD("field 'entry': must name at least one platform");
        json_object_foreach(val, pk, pv) {
          if (r < 0)
            break;
          unsigned bit = manifest_platform_from_name(pk);
          char field[64];
          snprintf(field, sizeof(field), "entry.%.32s", pk);
          if (!bit)
            r = BAD("field '%s': unknown platform", field);
          else
            r = parse_argv(pv, field, &m->entry[__builtin_ctz(bit)], diag);
        }
      } else {
        r = BAD("field 'entry': expected an array or an object keyed by platform");
      }
    } else if (strcmp(key, "platforms") == 0) {
      if (!json_is_array(val) || json_array_size(val) == 0 || json_array_size(val) > 3) {
        r = BAD("field 'platforms': expected a non-empty array of platform names");
      } else {
        m->platforms = 0;
        for (size_t i = 0; i < json_array_size(val) && r == 0; i++) {
          json_t *pv = json_array_get(val, i);
          unsigned bit = clean_string(pv) ? manifest_platform_from_name(json_string_value(pv)) : 0;
          if (!bit)
            r = BAD("field 'platforms[%zu]': expected \"linux\", \"windows\" or \"macos\"", i);
          else if (m->platforms & bit)
            r = BAD("field 'platforms[%zu]': duplicate", i);
          m->platforms |= bit;
        }
      }
    } else if (strcmp(key, "min_sandbox") == 0) {
      if (!clean_string(val) || sandbox_level_parse(json_string_value(val), &m->min_sandbox) < 0)
        r = BAD("field 'min_sandbox': expected \"isolated\", \"contained\" or \"none\"");
    } else if (strcmp(key, "timeout_s") == 0) {
      r = get_uint(val, "timeout_s", 1, 86400, &m->timeout_s, diag);
    } else if (strcmp(key, "limits") == 0) {
      r = parse_limits(val, m, &cpu_set, diag);
    } else if (strcmp(key, "capabilities") == 0) {
      r = parse_capabilities(val, m, diag);
    } else if (strcmp(key, "env") == 0) {
      r = parse_env(val, m, diag);
    } else {
      r = BAD("field '%.64s': unknown key", key);
    }
    if (r < 0)
      return r;
  }
  if (!m->name)
    return BAD("field 'name': required");
  if (!m->version)
    return BAD("field 'version': required");
  if (!have_entry)
    return BAD("field 'entry': required");
  for (unsigned i = 0; i < 3; i++)
    if ((m->platforms & (1u << i)) && m->entry[i].argc == 0)
      return BAD("field 'entry': no entry for platform '%s'", platform_names[i]);
  /* A drive letter names a Windows path; on another OS it would be taken
   * as a file of the package, which it cannot be. */
  for (unsigned i = 0; i < 3; i++) {
    if (1u << i == MANIFEST_PLATFORM_WINDOWS || m->entry[i].argc == 0 ||
        !manifest_path_is_windows_absolute(m->entry[i].argv[0]))
      continue;
    if (!entry_is_array)
      return BAD("field 'entry.%s[0]': a Windows path (drive letter) in the %s entry",
                 platform_names[i], platform_names[i]);
    if (m->platforms & (1u << i))
      return BAD("field 'entry[0]': a Windows path (drive letter), but the package is also for "
                 "%s (list only \"windows\" in 'platforms', or use entry.windows)",
                 platform_names[i]);
  }
  for (size_t i = 0; i < m->n_grants; i++)
    if (m->platforms != MANIFEST_PLATFORM_WINDOWS &&
        manifest_path_is_windows_absolute(m->grants[i].path))
      return BAD("field 'capabilities.fs[%zu].path': a Windows path (drive letter), but the "
                 "package is not only for windows",
                 i);
  if (!cpu_set)
    m->cpu_s = m->timeout_s;
  return 0;
}

int manifest_parse(const char *json, size_t len, struct manifest **out_manifest,
                   struct cordon_diag *diag) {
  if (len > MANIFEST_MAX_BYTES)
    return BAD("larger than %d bytes", MANIFEST_MAX_BYTES);
  json_error_t jerr;
  /* NULs are allowed through so that the field holding one is named */
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
  if (!root) {
    /* jansson's text quotes the input ("near '...'"): kept where it names
     * a key, cut otherwise, so an error never echoes the bytes of a file
     * that is not a manifest (a root agent reading what a package chose) */
    char *near = strstr(jerr.text, " near ");
    if (near && strncmp(jerr.text, "duplicate object key", 20) != 0 &&
        strncmp(jerr.text, "NUL byte in object key", 22) != 0)
      *near = '\0';
    return BAD("not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
  }
  struct manifest *m = calloc(1, sizeof(*m));
  int r = -ENOMEM;
  if (!m)
    goto out_put;
  m->platforms = MANIFEST_PLATFORM_ALL;
  m->min_sandbox = SANDBOX_LEVEL_ISOLATED;
  m->timeout_s = 60;
  m->memory_mb = 512;
  m->processes = 64;
  m->output_kb = 256;
  m->disk_mb = 64;
  r = parse_root(root, m, diag);
  if (r < 0) {
    manifest_free(m);
    goto out_put;
  }
  *out_manifest = m;
out_put:
  json_decref(root);
  return r;
}

int manifest_load_file(const char *path, struct manifest **out_manifest, struct cordon_diag *diag) {
  char *buf;
  size_t len;
  int r = core_read_file(path, MANIFEST_MAX_BYTES, CORDON_E_MANIFEST_INVALID, "manifest", &buf,
                         &len, diag);
  if (r < 0)
    return r;
  r = manifest_parse(buf, len, out_manifest, diag);
  free(buf);
  return r;
}

const struct manifest_argv *manifest_entry_for(const struct manifest *m, unsigned platform) {
  if (!(m->platforms & platform) || platform == 0 || (platform & (platform - 1)))
    return NULL;
  const struct manifest_argv *a = &m->entry[__builtin_ctz(platform)];
  return a->argc ? a : NULL;
}

void manifest_free(struct manifest *m) {
  if (!m)
    return;
  free(m->name);
  free(m->version);
  for (unsigned i = 0; i < 3; i++) {
    for (size_t j = 0; j < m->entry[i].argc; j++)
      free(m->entry[i].argv[j]);
    free(m->entry[i].argv);
  }
  for (size_t i = 0; i < m->n_grants; i++) {
    free(m->grants[i].path);
    free(m->grants[i].rel);
  }
  free(m->grants);
  for (size_t i = 0; i < m->n_env; i++) {
    free(m->env[i].name);
    free(m->env[i].value);
  }
  free(m->env);
  free(m);
}

int manifest_grant_scope_check(const struct manifest_grant *g, struct cordon_diag *diag) {
  if (g->base == MANIFEST_GRANT_ABSOLUTE && g->rel[0] == '\0')
    return cordon_diag_set(diag, CORDON_E_SCOPE_TOO_BROAD, "a grant of / is too broad");
  if (g->base == MANIFEST_GRANT_HOME && g->rel[0] == '\0')
    return cordon_diag_set(diag, CORDON_E_SCOPE_TOO_BROAD, "a grant of ~ is too broad");
  return 0;
}
