/* Tests for core/manifest.c: the strict manifest parser (docs/DESIGN.md §3).
 *
 * Tables of JSON documents, each either accepted with known values or
 * rejected with CORDON_E_MANIFEST_INVALID and a diag that names the field.
 * Rows are checked with cr_expect so one run reports every failing row. */
#include "core/error.h"
#include "core/manifest.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* name and version, without entry */
#define NV "\"name\":\"t\",\"version\":\"1\""
/* a minimal valid manifest's members */
#define BASE NV ",\"entry\":[\"/bin/true\"]"

/* A pointer value that manifest_parse must not overwrite on failure. */
#define UNTOUCHED ((struct manifest *)(uintptr_t)0x5a5a5a5a)

static struct manifest *parse_ok_len(const char *json, size_t len) {
  struct manifest *m = NULL;
  struct cordon_diag d = {{0}};
  int r = manifest_parse(json, len, &m, &d);
  cr_assert_eq(r, 0, "expected success, got %d (%s): %s\n  input: %.200s", r, cordon_err_name(r),
               d.msg, json);
  cr_assert_not_null(m);
  return m;
}

static struct manifest *parse_ok(const char *json) {
  return parse_ok_len(json, strlen(json));
}

/* Non-fatal: the input is rejected as manifest_invalid, out is untouched and
 * the diag contains `needle` (usually 'field', quoted as the parser does). */
static void expect_invalid_len(const char *json, size_t len, const char *needle) {
  struct manifest *m = UNTOUCHED;
  struct cordon_diag d = {{0}};
  int r = manifest_parse(json, len, &m, &d);
  cr_expect_eq(r, CORDON_E_MANIFEST_INVALID,
               "expected manifest_invalid, got %d (%s)\n  input: %.300s", r, cordon_err_name(r),
               json);
  cr_expect_eq(m, UNTOUCHED, "out_manifest written on failure\n  input: %.300s", json);
  if (r == 0 && m != UNTOUCHED)
    manifest_free(m);
  cr_expect(d.msg[0] != '\0', "diag empty\n  input: %.300s", json);
  cr_expect(strstr(d.msg, needle) != NULL, "diag does not name %s: \"%s\"\n  input: %.300s", needle,
            d.msg, json);
}

static void expect_invalid(const char *json, const char *field) {
  char needle[256];
  snprintf(needle, sizeof(needle), "'%s'", field);
  expect_invalid_len(json, strlen(json), needle);
}

struct bad_row {
  const char *json;
  const char *field; /* as named in diag, without quotes */
};

static void run_bad_rows(const struct bad_row *rows, size_t n) {
  for (size_t i = 0; i < n; i++)
    expect_invalid(rows[i].json, rows[i].field);
}

#define RUN_BAD(rows) run_bad_rows(rows, sizeof(rows) / sizeof(rows[0]))

/* A heap string built by printf; the test owns it. */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  char *s = NULL;
  int n = vasprintf(&s, f, ap);
  va_end(ap);
  cr_assert_geq(n, 0);
  return s;
}

/* n copies of c */
static char *repeat(char c, size_t n) {
  char *s = malloc(n + 1);
  cr_assert_not_null(s);
  memset(s, c, n);
  s[n] = '\0';
  return s;
}

/* ---- defaults ---- */

Test(manifest, minimal_manifest_gets_every_default) {
  struct manifest *m = parse_ok("{" BASE "}");
  cr_assert_str_eq(m->name, "t");
  cr_assert_str_eq(m->version, "1");
  cr_assert_eq(m->timeout_s, 60);
  cr_assert_eq(m->memory_mb, 512);
  cr_assert_eq(m->processes, 64);
  cr_assert_eq(m->cpu_s, 60, "cpu_s defaults to the timeout");
  cr_assert_eq(m->output_kb, 256);
  cr_assert_eq(m->disk_mb, 64);
  cr_assert_eq(m->net, false);
  cr_assert_eq(m->min_sandbox, SANDBOX_LEVEL_ISOLATED);
  cr_assert_eq(m->platforms, MANIFEST_PLATFORM_ALL);
  cr_assert_eq(m->n_grants, 0);
  cr_assert_eq(m->n_env, 0);
  for (unsigned i = 0; i < 3; i++) {
    cr_assert_eq(m->entry[i].argc, 1, "platform %u", i);
    cr_assert_str_eq(m->entry[i].argv[0], "/bin/true");
    cr_assert_null(m->entry[i].argv[1], "argv is NULL-terminated");
  }
  manifest_free(m);
}

Test(manifest, cpu_defaults_to_the_given_timeout) {
  struct manifest *m = parse_ok("{" BASE ",\"timeout_s\":30}");
  cr_assert_eq(m->timeout_s, 30);
  cr_assert_eq(m->cpu_s, 30);
  manifest_free(m);
  /* the order of keys does not matter */
  m = parse_ok("{\"timeout_s\":77," BASE ",\"limits\":{\"memory_mb\":64}}");
  cr_assert_eq(m->cpu_s, 77);
  manifest_free(m);
}

Test(manifest, explicit_cpu_is_kept_whatever_the_timeout) {
  struct manifest *m = parse_ok("{\"limits\":{\"cpu_s\":5}," BASE ",\"timeout_s\":300}");
  cr_assert_eq(m->cpu_s, 5);
  cr_assert_eq(m->timeout_s, 300);
  manifest_free(m);
  m = parse_ok("{" BASE ",\"timeout_s\":10,\"limits\":{\"cpu_s\":600}}");
  cr_assert_eq(m->cpu_s, 600);
  manifest_free(m);
}

Test(manifest, design_example_parses_with_its_values) {
  const char *json =
      "{\"name\":\"disk-report\",\"version\":\"1.2.0\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
      "\"platforms\":[\"linux\",\"macos\"],\"min_sandbox\":\"isolated\",\"timeout_s\":30,"
      "\"limits\":{\"memory_mb\":256,\"processes\":32,\"cpu_s\":30,\"output_kb\":256,\"disk_mb\":"
      "64},"
      "\"capabilities\":{\"net\":false,\"fs\":[{\"path\":\"~/Documents\",\"access\":\"ro\"},"
      "{\"path\":\"$WORKSPACE\",\"access\":\"rw\"}]},\"env\":{\"LANG\":\"C.UTF-8\"}}";
  struct manifest *m = parse_ok(json);
  cr_assert_str_eq(m->name, "disk-report");
  cr_assert_str_eq(m->version, "1.2.0");
  cr_assert_eq(m->platforms, MANIFEST_PLATFORM_LINUX | MANIFEST_PLATFORM_MACOS);
  cr_assert_eq(m->timeout_s, 30);
  cr_assert_eq(m->memory_mb, 256);
  cr_assert_eq(m->processes, 32);
  cr_assert_eq(m->cpu_s, 30);
  cr_assert_eq(m->output_kb, 256);
  cr_assert_eq(m->disk_mb, 64);
  cr_assert_eq(m->n_grants, 2);
  cr_assert_str_eq(m->grants[0].path, "~/Documents");
  cr_assert_eq(m->grants[0].base, MANIFEST_GRANT_HOME);
  cr_assert_str_eq(m->grants[0].rel, "Documents");
  cr_assert_eq(m->grants[0].rw, false);
  cr_assert_eq(m->grants[1].base, MANIFEST_GRANT_WORKSPACE);
  cr_assert_str_eq(m->grants[1].rel, "");
  cr_assert_eq(m->grants[1].rw, true);
  cr_assert_eq(m->n_env, 1);
  cr_assert_str_eq(m->env[0].name, "LANG");
  cr_assert_str_eq(m->env[0].value, "C.UTF-8");
  const struct manifest_argv *e = manifest_entry_for(m, MANIFEST_PLATFORM_LINUX);
  cr_assert_not_null(e);
  cr_assert_eq(e->argc, 2);
  cr_assert_str_eq(e->argv[1], "run.sh");
  cr_assert_null(manifest_entry_for(m, MANIFEST_PLATFORM_WINDOWS), "not a listed platform");
  manifest_free(m);
}

/* ---- numeric ranges ---- */

struct range_row {
  const char *json;
  size_t offset; /* of the uint32_t member */
  uint32_t want;
};

#define OFF(member) offsetof(struct manifest, member)

Test(manifest, accepts_every_range_bound) {
  static const struct range_row rows[] = {
      {"{" BASE ",\"timeout_s\":1}", OFF(timeout_s), 1},
      {"{" BASE ",\"timeout_s\":86400}", OFF(timeout_s), 86400},
      {"{" BASE ",\"limits\":{\"memory_mb\":16}}", OFF(memory_mb), 16},
      {"{" BASE ",\"limits\":{\"memory_mb\":65536}}", OFF(memory_mb), 65536},
      {"{" BASE ",\"limits\":{\"processes\":1}}", OFF(processes), 1},
      {"{" BASE ",\"limits\":{\"processes\":4096}}", OFF(processes), 4096},
      {"{" BASE ",\"limits\":{\"cpu_s\":1}}", OFF(cpu_s), 1},
      {"{" BASE ",\"limits\":{\"cpu_s\":86400}}", OFF(cpu_s), 86400},
      {"{" BASE ",\"limits\":{\"output_kb\":1}}", OFF(output_kb), 1},
      {"{" BASE ",\"limits\":{\"output_kb\":1024}}", OFF(output_kb), 1024},
      {"{" BASE ",\"limits\":{\"disk_mb\":1}}", OFF(disk_mb), 1},
      {"{" BASE ",\"limits\":{\"disk_mb\":16384}}", OFF(disk_mb), 16384},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    struct manifest *m = parse_ok(rows[i].json);
    uint32_t got;
    memcpy(&got, (const char *)m + rows[i].offset, sizeof(got));
    cr_expect_eq(got, rows[i].want, "%s: got %u", rows[i].json, got);
    manifest_free(m);
  }
}

Test(manifest, rejects_every_value_just_outside_its_range) {
  static const struct bad_row rows[] = {
      {"{" BASE ",\"timeout_s\":0}", "timeout_s"},
      {"{" BASE ",\"timeout_s\":86401}", "timeout_s"},
      {"{" BASE ",\"timeout_s\":-1}", "timeout_s"},
      {"{" BASE ",\"limits\":{\"memory_mb\":15}}", "limits.memory_mb"},
      {"{" BASE ",\"limits\":{\"memory_mb\":65537}}", "limits.memory_mb"},
      {"{" BASE ",\"limits\":{\"processes\":0}}", "limits.processes"},
      {"{" BASE ",\"limits\":{\"processes\":4097}}", "limits.processes"},
      {"{" BASE ",\"limits\":{\"cpu_s\":0}}", "limits.cpu_s"},
      {"{" BASE ",\"limits\":{\"cpu_s\":86401}}", "limits.cpu_s"},
      {"{" BASE ",\"limits\":{\"output_kb\":0}}", "limits.output_kb"},
      {"{" BASE ",\"limits\":{\"output_kb\":1025}}", "limits.output_kb"},
      {"{" BASE ",\"limits\":{\"disk_mb\":0}}", "limits.disk_mb"},
      {"{" BASE ",\"limits\":{\"disk_mb\":16385}}", "limits.disk_mb"},
  };
  RUN_BAD(rows);
}

Test(manifest, rejects_values_that_wrap_in_32_bits) {
  /* 2^32 + 60 would be 60 if truncated; -2^32 + 1 would be 1 */
  static const struct bad_row rows[] = {
      {"{" BASE ",\"timeout_s\":4294967356}", "timeout_s"},
      {"{" BASE ",\"limits\":{\"memory_mb\":4294967808}}", "limits.memory_mb"},
      {"{" BASE ",\"limits\":{\"processes\":-4294967295}}", "limits.processes"},
      {"{" BASE ",\"limits\":{\"disk_mb\":9223372036854775807}}", "limits.disk_mb"},
      {"{" BASE ",\"limits\":{\"cpu_s\":-9223372036854775807}}", "limits.cpu_s"},
  };
  RUN_BAD(rows);
}

/* ---- unknown keys ---- */

Test(manifest, rejects_unknown_keys_at_every_level) {
  static const struct bad_row rows[] = {
      {"{" BASE ",\"nmae\":\"x\"}", "nmae"},
      {"{" BASE ",\"Name\":\"x\"}", "Name"},
      {"{" BASE ",\"timeout\":5}", "timeout"},
      {"{" BASE ",\"\":5}", ""},
      {"{" BASE ",\"limits\":{\"memory\":64}}", "limits.memory"},
      {"{" BASE ",\"limits\":{\"memory_mb\":64,\"swap_mb\":1}}", "limits.swap_mb"},
      {"{" BASE ",\"capabilities\":{\"network\":true}}", "capabilities.network"},
      {"{" BASE ",\"capabilities\":{\"net\":false,\"fs\":[],\"gpu\":true}}", "capabilities.gpu"},
      {"{" BASE
       ",\"capabilities\":{\"fs\":[{\"path\":\"/tmp\",\"access\":\"ro\",\"mode\":\"x\"}]}}",
       "capabilities.fs[0].mode"},
      {"{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/a\",\"access\":\"ro\"},"
       "{\"path\":\"/b\",\"access\":\"rw\",\"follow\":true}]}}",
       "capabilities.fs[1].follow"},
      {"{" NV ",\"entry\":{\"beos\":[\"/bin/true\"]}}", "entry.beos"},
      {"{" NV ",\"entry\":{\"Linux\":[\"/bin/true\"]}}", "entry.Linux"},
  };
  RUN_BAD(rows);
}

/* ---- types ---- */

Test(manifest, rejects_bad_types_naming_the_field) {
  static const struct bad_row rows[] = {
      /* string fields */
      {"{\"name\":5,\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "name"},
      {"{\"name\":null,\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "name"},
      {"{\"name\":true,\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "name"},
      {"{\"name\":[\"t\"],\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "name"},
      {"{\"name\":\"t\",\"version\":1.0,\"entry\":[\"/bin/true\"]}", "version"},
      {"{\"name\":\"t\",\"version\":1,\"entry\":[\"/bin/true\"]}", "version"},
      {"{\"name\":\"t\",\"version\":false,\"entry\":[\"/bin/true\"]}", "version"},
      {"{" NV ",\"entry\":\"/bin/true\"}", "entry"},
      {"{" NV ",\"entry\":null}", "entry"},
      {"{" NV ",\"entry\":7}", "entry"},
      {"{" NV ",\"entry\":[1]}", "entry[0]"},
      {"{" NV ",\"entry\":[null]}", "entry[0]"},
      {"{" NV ",\"entry\":[\"/bin/echo\",false]}", "entry[1]"},
      {"{" NV ",\"entry\":[\"/bin/echo\",\"a\",[\"b\"]]}", "entry[2]"},
      {"{" NV ",\"entry\":{\"linux\":\"/bin/true\"},\"platforms\":[\"linux\"]}", "entry.linux"},
      {"{" NV ",\"entry\":{\"linux\":[2]},\"platforms\":[\"linux\"]}", "entry.linux[0]"},
      /* integers */
      {"{" BASE ",\"timeout_s\":\"60\"}", "timeout_s"},
      {"{" BASE ",\"timeout_s\":60.0}", "timeout_s"},
      {"{" BASE ",\"timeout_s\":60.5}", "timeout_s"},
      {"{" BASE ",\"timeout_s\":1e2}", "timeout_s"},
      {"{" BASE ",\"timeout_s\":true}", "timeout_s"},
      {"{" BASE ",\"timeout_s\":null}", "timeout_s"},
      {"{" BASE ",\"limits\":{\"memory_mb\":\"512\"}}", "limits.memory_mb"},
      {"{" BASE ",\"limits\":{\"memory_mb\":null}}", "limits.memory_mb"},
      {"{" BASE ",\"limits\":{\"processes\":true}}", "limits.processes"},
      {"{" BASE ",\"limits\":{\"cpu_s\":1.5}}", "limits.cpu_s"},
      {"{" BASE ",\"limits\":{\"output_kb\":[1]}}", "limits.output_kb"},
      {"{" BASE ",\"limits\":{\"disk_mb\":{}}}", "limits.disk_mb"},
      /* objects and arrays */
      {"{" BASE ",\"limits\":[]}", "limits"},
      {"{" BASE ",\"limits\":null}", "limits"},
      {"{" BASE ",\"capabilities\":true}", "capabilities"},
      {"{" BASE ",\"capabilities\":[]}", "capabilities"},
      {"{" BASE ",\"capabilities\":{\"net\":\"false\"}}", "capabilities.net"},
      {"{" BASE ",\"capabilities\":{\"net\":0}}", "capabilities.net"},
      {"{" BASE ",\"capabilities\":{\"net\":null}}", "capabilities.net"},
      {"{" BASE ",\"capabilities\":{\"fs\":{}}}", "capabilities.fs"},
      {"{" BASE ",\"capabilities\":{\"fs\":\"~\"}}", "capabilities.fs"},
      {"{" BASE ",\"capabilities\":{\"fs\":null}}", "capabilities.fs"},
      {"{" BASE ",\"capabilities\":{\"fs\":[\"~\"]}}", "capabilities.fs[0]"},
      {"{" BASE ",\"capabilities\":{\"fs\":[{\"path\":5,\"access\":\"ro\"}]}}",
       "capabilities.fs[0].path"},
      {"{" BASE ",\"capabilities\":{\"fs\":[{\"path\":null,\"access\":\"ro\"}]}}",
       "capabilities.fs[0].path"},
      {"{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/a\",\"access\":true}]}}",
       "capabilities.fs[0].access"},
      {"{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/a\",\"access\":null}]}}",
       "capabilities.fs[0].access"},
      {"{" BASE ",\"env\":[]}", "env"},
      {"{" BASE ",\"env\":\"LANG=C\"}", "env"},
      {"{" BASE ",\"env\":{\"A\":1}}", "env.A"},
      {"{" BASE ",\"env\":{\"A\":null}}", "env.A"},
      {"{" BASE ",\"env\":{\"A\":true}}", "env.A"},
      {"{" BASE ",\"env\":{\"A\":[\"x\"]}}", "env.A"},
      {"{" BASE ",\"platforms\":\"linux\"}", "platforms"},
      {"{" BASE ",\"platforms\":[]}", "platforms"},
      {"{" BASE ",\"platforms\":null}", "platforms"},
      {"{" BASE ",\"platforms\":[1]}", "platforms[0]"},
      {"{" BASE ",\"platforms\":[\"linux\",null]}", "platforms[1]"},
      {"{" BASE ",\"min_sandbox\":2}", "min_sandbox"},
      {"{" BASE ",\"min_sandbox\":null}", "min_sandbox"},
      {"{" BASE ",\"min_sandbox\":true}", "min_sandbox"},
  };
  RUN_BAD(rows);
}

Test(manifest, rejects_a_top_level_that_is_not_an_object) {
  static const char *const docs[] = {"[]", "[1,2]", "\"x\"", "42",           "null",
                                     "",   "{",     "{}}",   "{" BASE "} x", "{" BASE ",}"};
  for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
    expect_invalid_len(docs[i], strlen(docs[i]), "manifest");
}

/* ---- values ---- */

Test(manifest, rejects_bad_values_naming_the_field) {
  static const struct bad_row rows[] = {
      {"{\"name\":\"\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "name"},
      {"{\"name\":\"hello world\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "name"},
      {"{\"name\":\"a/b\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "name"},
      {"{\"name\":\"caf\\u00e9\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "name"},
      {"{\"name\":\"t\",\"version\":\"\",\"entry\":[\"/bin/true\"]}", "version"},
      {"{\"name\":\"t\",\"version\":\"1.0 beta\",\"entry\":[\"/bin/true\"]}", "version"},
      {"{\"name\":\"t\",\"version\":\"1;rm\",\"entry\":[\"/bin/true\"]}", "version"},
      {"{" BASE ",\"platforms\":[\"linux\",\"beos\"]}", "platforms[1]"},
      {"{" BASE ",\"platforms\":[\"Linux\"]}", "platforms[0]"},
      {"{" BASE ",\"platforms\":[\"linux\",\"linux\"]}", "platforms[1]"},
      {"{" BASE ",\"platforms\":[\"linux\",\"macos\",\"windows\",\"linux\"]}", "platforms"},
      {"{" BASE ",\"min_sandbox\":\"strict\"}", "min_sandbox"},
      {"{" BASE ",\"min_sandbox\":\"Isolated\"}", "min_sandbox"},
      {"{" BASE ",\"min_sandbox\":\"\"}", "min_sandbox"},
  };
  RUN_BAD(rows);
}

Test(manifest, name_and_version_accept_their_whole_alphabet) {
  struct manifest *m = parse_ok("{\"name\":\"Ab-9_x.y\",\"version\":\"2.0.1-rc_1\","
                                "\"entry\":[\"/bin/true\"]}");
  cr_assert_str_eq(m->name, "Ab-9_x.y");
  cr_assert_str_eq(m->version, "2.0.1-rc_1");
  manifest_free(m);
}

Test(manifest, name_length_is_capped_at_128) {
  char *n128 = repeat('n', 128), *n129 = repeat('n', 129);
  char *ok = fmt("{\"name\":\"%s\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}", n128);
  char *bad = fmt("{\"name\":\"%s\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}", n129);
  struct manifest *m = parse_ok(ok);
  cr_assert_eq(strlen(m->name), 128);
  manifest_free(m);
  expect_invalid(bad, "name");
  free(n128);
  free(n129);
  free(ok);
  free(bad);
}

Test(manifest, version_length_is_capped_at_64) {
  char *v64 = repeat('1', 64), *v65 = repeat('1', 65);
  char *ok = fmt("{\"name\":\"t\",\"version\":\"%s\",\"entry\":[\"/bin/true\"]}", v64);
  char *bad = fmt("{\"name\":\"t\",\"version\":\"%s\",\"entry\":[\"/bin/true\"]}", v65);
  struct manifest *m = parse_ok(ok);
  cr_assert_eq(strlen(m->version), 64);
  manifest_free(m);
  expect_invalid(bad, "version");
  free(v64);
  free(v65);
  free(ok);
  free(bad);
}

Test(manifest, min_sandbox_accepts_each_level) {
  static const struct {
    const char *name;
    enum sandbox_level level;
  } rows[] = {{"none", SANDBOX_LEVEL_NONE},
              {"contained", SANDBOX_LEVEL_CONTAINED},
              {"isolated", SANDBOX_LEVEL_ISOLATED}};
  for (size_t i = 0; i < 3; i++) {
    char *json = fmt("{" BASE ",\"min_sandbox\":\"%s\"}", rows[i].name);
    struct manifest *m = parse_ok(json);
    cr_expect_eq(m->min_sandbox, rows[i].level, "%s", rows[i].name);
    manifest_free(m);
    free(json);
  }
}

Test(manifest, platforms_are_a_set_of_bits) {
  struct manifest *m = parse_ok("{" BASE ",\"platforms\":[\"windows\"]}");
  cr_assert_eq(m->platforms, MANIFEST_PLATFORM_WINDOWS);
  cr_assert_null(manifest_entry_for(m, MANIFEST_PLATFORM_LINUX));
  cr_assert_not_null(manifest_entry_for(m, MANIFEST_PLATFORM_WINDOWS));
  manifest_free(m);
  m = parse_ok("{" BASE ",\"platforms\":[\"macos\",\"linux\",\"windows\"]}");
  cr_assert_eq(m->platforms, MANIFEST_PLATFORM_ALL);
  manifest_free(m);
}

/* ---- duplicates and required fields ---- */

Test(manifest, rejects_duplicate_keys_naming_the_key) {
  /* jansson's error names the duplicated key ("near '\"name\"'") */
  static const struct {
    const char *json;
    const char *key;
  } rows[] = {
      {"{" BASE ",\"name\":\"u\"}", "\"name\""},
      {"{" BASE ",\"timeout_s\":5,\"timeout_s\":6}", "\"timeout_s\""},
      {"{" NV ",\"entry\":[\"/bin/true\"],\"entry\":[\"/bin/false\"]}", "\"entry\""},
      {"{" BASE ",\"limits\":{\"memory_mb\":64,\"memory_mb\":65536}}", "\"memory_mb\""},
      {"{" BASE ",\"capabilities\":{\"net\":false,\"net\":true}}", "\"net\""},
      {"{" BASE
       ",\"capabilities\":{\"fs\":[{\"path\":\"/a\",\"access\":\"ro\",\"access\":\"rw\"}]}}",
       "\"access\""},
      {"{" BASE ",\"env\":{\"A\":\"1\",\"A\":\"2\"}}", "\"A\""},
      {"{" NV ",\"entry\":{\"linux\":[\"/a\"],\"linux\":[\"/b\"]},\"platforms\":[\"linux\"]}",
       "\"linux\""},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    expect_invalid_len(rows[i].json, strlen(rows[i].json), rows[i].key);
}

Test(manifest, rejects_missing_required_fields) {
  static const struct bad_row rows[] = {
      {"{\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "name"},
      {"{\"name\":\"t\",\"entry\":[\"/bin/true\"]}", "version"},
      {"{" NV "}", "entry"},
      {"{}", "name"},
      {"{" NV ",\"timeout_s\":5,\"limits\":{}}", "entry"},
  };
  RUN_BAD(rows);
}

/* ---- entry ---- */

Test(manifest, entry_object_sets_one_argv_per_platform) {
  struct manifest *m = parse_ok("{" NV ",\"platforms\":[\"linux\",\"windows\"],"
                                "\"entry\":{\"linux\":[\"/bin/sh\",\"run.sh\"],"
                                "\"windows\":[\"run.cmd\",\"/x\"]}}");
  const struct manifest_argv *l = manifest_entry_for(m, MANIFEST_PLATFORM_LINUX);
  const struct manifest_argv *w = manifest_entry_for(m, MANIFEST_PLATFORM_WINDOWS);
  cr_assert_not_null(l);
  cr_assert_not_null(w);
  cr_assert_eq(l->argc, 2);
  cr_assert_str_eq(l->argv[0], "/bin/sh");
  cr_assert_str_eq(l->argv[1], "run.sh");
  cr_assert_null(l->argv[2]);
  cr_assert_eq(w->argc, 2);
  cr_assert_str_eq(w->argv[0], "run.cmd");
  cr_assert_null(manifest_entry_for(m, MANIFEST_PLATFORM_MACOS));
  cr_assert_eq(m->entry[2].argc, 0);
  manifest_free(m);
}

Test(manifest, entry_object_may_hold_unlisted_platforms) {
  /* an entry for a platform the package does not list is parsed but unused */
  struct manifest *m =
      parse_ok("{" NV ",\"platforms\":[\"linux\"],"
               "\"entry\":{\"linux\":[\"/bin/true\"],\"macos\":[\"/usr/bin/true\"]}}");
  cr_assert_not_null(manifest_entry_for(m, MANIFEST_PLATFORM_LINUX));
  cr_assert_null(manifest_entry_for(m, MANIFEST_PLATFORM_MACOS));
  manifest_free(m);
}

Test(manifest, rejects_entry_object_missing_a_listed_platform) {
  static const struct {
    const char *json;
    const char *platform;
  } rows[] = {
      /* platforms defaults to all three */
      {"{" NV ",\"entry\":{\"linux\":[\"/bin/true\"]}}", "windows"},
      {"{" NV ",\"entry\":{\"linux\":[\"/bin/true\"],\"windows\":[\"x.exe\"]}}", "macos"},
      {"{" NV ",\"platforms\":[\"linux\",\"macos\"],\"entry\":{\"linux\":[\"/bin/true\"]}}",
       "macos"},
      {"{" NV ",\"entry\":{\"macos\":[\"/bin/true\"]},\"platforms\":[\"linux\"]}", "linux"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    expect_invalid(rows[i].json, "entry");
    char needle[32];
    snprintf(needle, sizeof(needle), "'%s'", rows[i].platform);
    expect_invalid_len(rows[i].json, strlen(rows[i].json), needle);
  }
}

Test(manifest, rejects_an_empty_entry) {
  static const struct bad_row rows[] = {
      {"{" NV ",\"entry\":[]}", "entry"},
      {"{" NV ",\"entry\":{}}", "entry"},
      {"{" NV ",\"entry\":[\"\"]}", "entry[0]"},
      {"{" NV ",\"entry\":{\"linux\":[]},\"platforms\":[\"linux\"]}", "entry.linux"},
  };
  RUN_BAD(rows);
}

Test(manifest, entry0_may_be_absolute_or_a_package_file) {
  static const char *const ok[] = {"/bin/sh", "run.sh", "bin/run", "a/b/c.py",
                                   ".hidden", "..x",    "x..",     "a/.b"};
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    char *json = fmt("{" NV ",\"entry\":[\"%s\",\"arg\"]}", ok[i]);
    struct manifest *m = parse_ok(json);
    cr_expect_str_eq(m->entry[0].argv[0], ok[i]);
    manifest_free(m);
    free(json);
  }
}

Test(manifest, rejects_entry0_with_dot_components) {
  static const struct bad_row rows[] = {
      {"{" NV ",\"entry\":[\"../run.sh\"]}", "entry[0]"},
      {"{" NV ",\"entry\":[\"..\"]}", "entry[0]"},
      {"{" NV ",\"entry\":[\"a/../../b\"]}", "entry[0]"},
      {"{" NV ",\"entry\":[\"a/..\"]}", "entry[0]"},
      {"{" NV ",\"entry\":[\"./run.sh\"]}", "entry[0]"},
      {"{" NV ",\"entry\":[\".\"]}", "entry[0]"},
      {"{" NV ",\"entry\":[\"a//b\"]}", "entry[0]"},
      {"{" NV ",\"entry\":[\"bin/\"]}", "entry[0]"},
      {"{" NV ",\"entry\":{\"linux\":[\"../x\"]},\"platforms\":[\"linux\"]}", "entry.linux[0]"},
  };
  RUN_BAD(rows);
}

Test(manifest, later_entry_arguments_are_not_paths) {
  struct manifest *m = parse_ok("{" NV ",\"entry\":[\"/bin/echo\",\"../x\",\"~user\",\"a b\"]}");
  cr_assert_eq(m->entry[0].argc, 4);
  cr_assert_str_eq(m->entry[0].argv[1], "../x");
  cr_assert_str_eq(m->entry[0].argv[2], "~user");
  manifest_free(m);
}

Test(manifest, rejects_empty_later_arguments) {
  expect_invalid("{" NV ",\"entry\":[\"/bin/echo\",\"\"]}", "entry[1]");
}

/* JSON text for a Windows path: each '\' doubled. */
#define WIN_CMD "C:\\\\Windows\\\\System32\\\\cmd.exe"

Test(manifest, entry0_with_a_drive_letter_is_an_absolute_windows_path) {
  static const struct {
    const char *json;
    const char *argv0; /* the windows entry[0], as written */
  } rows[] = {
      {"{" NV ",\"platforms\":[\"windows\"],\"entry\":[\"" WIN_CMD "\",\"/c\",\"echo\"]}",
       "C:\\Windows\\System32\\cmd.exe"},
      {"{" NV
       ",\"platforms\":[\"windows\"],\"entry\":{\"windows\":[\"C:/Windows/System32/cmd.exe\"]}}",
       "C:/Windows/System32/cmd.exe"},
      {"{" NV ",\"platforms\":[\"windows\"],\"entry\":[\"d:\\\\tools\\\\x.exe\"]}",
       "d:\\tools\\x.exe"},
      /* another platform's entry beside it is a path of its own kind */
      {"{" NV ",\"platforms\":[\"linux\",\"windows\"],"
       "\"entry\":{\"linux\":[\"/bin/sh\"],\"windows\":[\"" WIN_CMD "\"]}}",
       "C:\\Windows\\System32\\cmd.exe"},
      /* platforms after entry: the check waits for the whole document */
      {"{" NV ",\"entry\":[\"Z:/x.exe\"],\"platforms\":[\"windows\"]}", "Z:/x.exe"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    struct manifest *m = parse_ok(rows[i].json);
    const struct manifest_argv *w = manifest_entry_for(m, MANIFEST_PLATFORM_WINDOWS);
    cr_assert_not_null(w, "%s", rows[i].json);
    cr_expect_str_eq(w->argv[0], rows[i].argv0);
    cr_expect(manifest_path_is_windows_absolute(w->argv[0]));
    manifest_free(m);
  }
}

Test(manifest, rejects_a_drive_letter_entry0_that_another_platform_would_run) {
  static const struct bad_row rows[] = {
      /* platforms defaults to all three */
      {"{" NV ",\"entry\":[\"" WIN_CMD "\"]}", "entry[0]"},
      {"{" NV ",\"platforms\":[\"windows\",\"linux\"],\"entry\":[\"" WIN_CMD "\"]}", "entry[0]"},
      {"{" NV ",\"platforms\":[\"macos\",\"windows\"],\"entry\":[\"C:/x.exe\"]}", "entry[0]"},
      {"{" NV ",\"platforms\":[\"linux\"],\"entry\":{\"linux\":[\"" WIN_CMD "\"]}}",
       "entry.linux[0]"},
      /* even in an entry the package does not list */
      {"{" NV ",\"platforms\":[\"windows\"],"
       "\"entry\":{\"windows\":[\"" WIN_CMD "\"],\"macos\":[\"C:/bin/true\"]}}",
       "entry.macos[0]"},
  };
  RUN_BAD(rows);
}

Test(manifest, rejects_entry0_with_a_colon_or_backslash_on_every_platform) {
  /* such a name is taken as a file of the package, and no package file has
   * ':' or '\' (docs/protocol/package.md, Paths) */
  static const char *const bad[] = {
      "run:me.sh",
      "bin\\\\run.exe",
      ".\\\\run.cmd",
      "..\\\\x.exe",
      "C:run.exe",
      "C:",
      "\\\\Windows\\\\cmd.exe",
      "\\\\\\\\server\\\\share\\\\x.exe",
      "1:\\\\x.exe",
      "a/b:c",
      "::",
      "CC:\\\\x.exe",
  };
  static const struct {
    const char *before, *after, *field;
  } where[] = {
      {"\"platforms\":[\"windows\"],\"entry\":[\"", "\"]", "entry[0]"},
      {"\"platforms\":[\"windows\"],\"entry\":{\"windows\":[\"", "\"]}", "entry.windows[0]"},
      {"\"platforms\":[\"linux\"],\"entry\":{\"linux\":[\"", "\"]}", "entry.linux[0]"},
      {"\"entry\":[\"", "\"]", "entry[0]"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    for (size_t j = 0; j < sizeof(where) / sizeof(where[0]); j++) {
      char *json = fmt("{" NV ",%s%s%s}", where[j].before, bad[i], where[j].after);
      expect_invalid(json, where[j].field);
      free(json);
    }
  }
}

Test(manifest, drive_letter_later_arguments_are_not_paths) {
  struct manifest *m = parse_ok("{" NV ",\"entry\":[\"/bin/echo\",\"C:\\\\x\",\"a:b\"]}");
  cr_assert_str_eq(m->entry[0].argv[1], "C:\\x");
  cr_assert_str_eq(m->entry[0].argv[2], "a:b");
  manifest_free(m);
}

/* ---- capabilities.fs ---- */

struct grant_row {
  const char *path;
  enum manifest_grant_base base;
  const char *rel;
};

Test(manifest, grant_paths_are_split_into_base_and_rest) {
  static const struct grant_row rows[] = {
      {"/", MANIFEST_GRANT_ABSOLUTE, ""},
      {"/data", MANIFEST_GRANT_ABSOLUTE, "data"},
      {"/srv/a b/c", MANIFEST_GRANT_ABSOLUTE, "srv/a b/c"},
      {"/a/..b/c..", MANIFEST_GRANT_ABSOLUTE, "a/..b/c.."},
      {"~", MANIFEST_GRANT_HOME, ""},
      {"~/", MANIFEST_GRANT_HOME, ""},
      {"~/Documents", MANIFEST_GRANT_HOME, "Documents"},
      {"~/.config/app", MANIFEST_GRANT_HOME, ".config/app"},
      {"$WORKSPACE", MANIFEST_GRANT_WORKSPACE, ""},
      {"$WORKSPACE/", MANIFEST_GRANT_WORKSPACE, ""},
      {"$WORKSPACE/out/x", MANIFEST_GRANT_WORKSPACE, "out/x"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    char *json = fmt("{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"%s\",\"access\":\"rw\"}]}}",
                     rows[i].path);
    struct manifest *m = parse_ok(json);
    cr_assert_eq(m->n_grants, 1);
    cr_expect_str_eq(m->grants[0].path, rows[i].path);
    cr_expect_eq(m->grants[0].base, rows[i].base, "%s", rows[i].path);
    cr_expect_str_eq(m->grants[0].rel, rows[i].rel, "%s", rows[i].path);
    cr_expect_eq(m->grants[0].rw, true);
    manifest_free(m);
    free(json);
  }
}

Test(manifest, rejects_relative_dotdot_and_foreign_home_grant_paths) {
#define FS(p) "{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"" p "\",\"access\":\"ro\"}]}}"
  static const struct bad_row rows[] = {
      /* relative */
      {FS("data"), "capabilities.fs[0].path"},
      {FS("./data"), "capabilities.fs[0].path"},
      {FS("../data"), "capabilities.fs[0].path"},
      {FS("Documents/x"), "capabilities.fs[0].path"},
      {FS(""), "capabilities.fs[0].path"},
      /* another user's home */
      {FS("~user"), "capabilities.fs[0].path"},
      {FS("~root/.ssh"), "capabilities.fs[0].path"},
      {FS("~~"), "capabilities.fs[0].path"},
      {FS("~."), "capabilities.fs[0].path"},
      /* $WORKSPACE look-alikes */
      {FS("$WORKSPACEx"), "capabilities.fs[0].path"},
      {FS("$WORKSPACE_2/x"), "capabilities.fs[0].path"},
      {FS("${WORKSPACE}"), "capabilities.fs[0].path"},
      {FS("$workspace"), "capabilities.fs[0].path"},
      {FS("$HOME/x"), "capabilities.fs[0].path"},
      {FS("$PACKAGE"), "capabilities.fs[0].path"},
      /* '..', '.' and empty components */
      {FS("/a/../b"), "capabilities.fs[0].path"},
      {FS("/a/.."), "capabilities.fs[0].path"},
      {FS("/.."), "capabilities.fs[0].path"},
      {FS("~/.."), "capabilities.fs[0].path"},
      {FS("~/../other"), "capabilities.fs[0].path"},
      {FS("~/x/../../root"), "capabilities.fs[0].path"},
      {FS("$WORKSPACE/.."), "capabilities.fs[0].path"},
      {FS("$WORKSPACE/../etc"), "capabilities.fs[0].path"},
      {FS("/a/./b"), "capabilities.fs[0].path"},
      {FS("/a//b"), "capabilities.fs[0].path"},
      {FS("/a/"), "capabilities.fs[0].path"},
      {FS("~/x/"), "capabilities.fs[0].path"},
      {FS("/."), "capabilities.fs[0].path"},
  };
#undef FS
  RUN_BAD(rows);
}

Test(manifest, drive_letter_grants_are_absolute_in_a_package_only_for_windows) {
  static const struct grant_row rows[] = {
      {"C:\\\\Users\\\\me\\\\data", MANIFEST_GRANT_ABSOLUTE, "Users\\me\\data"},
      {"c:/data/in", MANIFEST_GRANT_ABSOLUTE, "data/in"},
      {"D:\\\\", MANIFEST_GRANT_ABSOLUTE, ""},
      {"E:/a b/c..", MANIFEST_GRANT_ABSOLUTE, "a b/c.."},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    char *json = fmt("{" NV ",\"platforms\":[\"windows\"],\"entry\":[\"" WIN_CMD "\"],"
                     "\"capabilities\":{\"fs\":[{\"path\":\"%s\",\"access\":\"ro\"}]}}",
                     rows[i].path);
    struct manifest *m = parse_ok(json);
    cr_assert_eq(m->n_grants, 1);
    cr_expect_eq(m->grants[0].base, rows[i].base, "%s", rows[i].path);
    cr_expect_str_eq(m->grants[0].rel, rows[i].rel, "%s", rows[i].path);
    cr_expect(manifest_path_is_windows_absolute(m->grants[0].path), "%s", m->grants[0].path);
    manifest_free(m);
    free(json);
  }
}

Test(manifest, rejects_drive_letter_grants_outside_windows_and_backslash_dotdot) {
#define WFS(p)                                                                                     \
  "{" NV ",\"platforms\":[\"windows\"],\"entry\":[\"" WIN_CMD "\"],"                               \
  "\"capabilities\":{\"fs\":[{\"path\":\"" p "\",\"access\":\"ro\"}]}}"
#define FS(p) "{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"" p "\",\"access\":\"ro\"}]}}"
  static const struct bad_row rows[] = {
      /* a Windows path in a package for other platforms too */
      {FS("C:\\\\Users"), "capabilities.fs[0].path"},
      {"{" NV ",\"platforms\":[\"windows\",\"linux\"],\"entry\":[\"/bin/x\"],"
       "\"capabilities\":{\"fs\":[{\"path\":\"C:/data\",\"access\":\"ro\"}]}}",
       "capabilities.fs[0].path"},
      /* '\' separates components: no '..', '.' or empty ones that way either */
      {WFS("C:\\\\Users\\\\..\\\\Admin"), "capabilities.fs[0].path"},
      {WFS("C:/Users/.."), "capabilities.fs[0].path"},
      {WFS("C:\\\\a\\\\.\\\\b"), "capabilities.fs[0].path"},
      {WFS("C:\\\\a\\\\\\\\b"), "capabilities.fs[0].path"},
      {WFS("C:\\\\a\\\\"), "capabilities.fs[0].path"},
      {WFS("/a\\\\..\\\\b"), "capabilities.fs[0].path"},
      {WFS("~/x\\\\..\\\\..\\\\y"), "capabilities.fs[0].path"},
      {FS("/a\\\\..\\\\b"), "capabilities.fs[0].path"},
      {FS("$WORKSPACE/..\\\\x"), "capabilities.fs[0].path"},
      /* not a drive path: relative */
      {WFS("C:"), "capabilities.fs[0].path"},
      {WFS("C:data"), "capabilities.fs[0].path"},
      {WFS("\\\\Users"), "capabilities.fs[0].path"},
  };
#undef WFS
#undef FS
  RUN_BAD(rows);
}

Test(manifest, names_the_index_of_the_bad_grant) {
  expect_invalid("{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/a\",\"access\":\"ro\"},"
                 "{\"path\":\"/b\",\"access\":\"rw\"},{\"path\":\"c\",\"access\":\"ro\"}]}}",
                 "capabilities.fs[2].path");
}

Test(manifest, rejects_grant_paths_longer_than_the_cap) {
  char *p4096 = repeat('a', MANIFEST_MAX_PATH - 1), *p4097 = repeat('a', MANIFEST_MAX_PATH);
  char *ok =
      fmt("{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/%s\",\"access\":\"ro\"}]}}", p4096);
  char *bad =
      fmt("{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/%s\",\"access\":\"ro\"}]}}", p4097);
  struct manifest *m = parse_ok(ok);
  cr_assert_eq(strlen(m->grants[0].path), MANIFEST_MAX_PATH);
  manifest_free(m);
  expect_invalid(bad, "capabilities.fs[0].path");
  free(p4096);
  free(p4097);
  free(ok);
  free(bad);
}

Test(manifest, access_is_ro_or_rw) {
  struct manifest *m =
      parse_ok("{" BASE ",\"capabilities\":{\"fs\":[{\"access\":\"ro\",\"path\":\"/a\"},"
               "{\"path\":\"/b\",\"access\":\"rw\"}]}}");
  cr_assert_eq(m->n_grants, 2);
  cr_assert_eq(m->grants[0].rw, false);
  cr_assert_eq(m->grants[1].rw, true);
  manifest_free(m);

#define ACC(a) "{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/a\",\"access\":\"" a "\"}]}}"
  static const struct bad_row rows[] = {
      {ACC("RO"), "capabilities.fs[0].access"},  {ACC("Rw"), "capabilities.fs[0].access"},
      {ACC("r"), "capabilities.fs[0].access"},   {ACC("w"), "capabilities.fs[0].access"},
      {ACC("wr"), "capabilities.fs[0].access"},  {ACC(""), "capabilities.fs[0].access"},
      {ACC("rwx"), "capabilities.fs[0].access"}, {ACC("read"), "capabilities.fs[0].access"},
      {ACC("ro "), "capabilities.fs[0].access"}, {ACC("none"), "capabilities.fs[0].access"},
  };
#undef ACC
  RUN_BAD(rows);
}

Test(manifest, grant_needs_path_and_access) {
  static const struct bad_row rows[] = {
      {"{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/a\"}]}}", "capabilities.fs[0].access"},
      {"{" BASE ",\"capabilities\":{\"fs\":[{\"access\":\"ro\"}]}}", "capabilities.fs[0].path"},
      {"{" BASE ",\"capabilities\":{\"fs\":[{}]}}", "capabilities.fs[0].path"},
  };
  RUN_BAD(rows);
}

Test(manifest, net_true_is_kept) {
  struct manifest *m = parse_ok("{" BASE ",\"capabilities\":{\"net\":true,\"fs\":[]}}");
  cr_assert_eq(m->net, true);
  cr_assert_eq(m->n_grants, 0);
  manifest_free(m);
}

/* ---- env ---- */

Test(manifest, env_names_follow_the_shell_rules) {
  struct manifest *m = parse_ok("{" BASE ",\"env\":{\"LANG\":\"C.UTF-8\",\"_x\":\"1\",\"a1\":\"\","
                                "\"A_B_9\":\"x=y\",\"PATH\":\"/opt/bin\"}}");
  cr_assert_eq(m->n_env, 5);
  cr_assert_str_eq(m->env[0].name, "LANG");
  cr_assert_str_eq(m->env[0].value, "C.UTF-8");
  cr_assert_str_eq(m->env[1].name, "_x");
  cr_assert_str_eq(m->env[2].name, "a1");
  cr_assert_str_eq(m->env[2].value, "", "an empty value is allowed");
  cr_assert_str_eq(m->env[3].value, "x=y");
  manifest_free(m);

  static const struct bad_row rows[] = {
      {"{" BASE ",\"env\":{\"1A\":\"x\"}}", "env.1A"},
      {"{" BASE ",\"env\":{\"A-B\":\"x\"}}", "env.A-B"},
      {"{" BASE ",\"env\":{\"A B\":\"x\"}}", "env.A B"},
      {"{" BASE ",\"env\":{\"A=B\":\"x\"}}", "env.A=B"},
      {"{" BASE ",\"env\":{\"A.B\":\"x\"}}", "env.A.B"},
      {"{" BASE ",\"env\":{\"\":\"x\"}}", "env."},
      {"{" BASE ",\"env\":{\"\\u00c9T\\u00c9\":\"x\"}}", "env.\xc3\x89T\xc3\x89"},
  };
  RUN_BAD(rows);
}

Test(manifest, rejects_reserved_env_names) {
  static const struct bad_row rows[] = {
      {"{" BASE ",\"env\":{\"PACKAGE\":\"/x\"}}", "env.PACKAGE"},
      {"{" BASE ",\"env\":{\"WORKSPACE\":\"/x\"}}", "env.WORKSPACE"},
      {"{" BASE ",\"env\":{\"HOME\":\"/root\"}}", "env.HOME"},
      {"{" BASE ",\"env\":{\"LANG\":\"C\",\"HOME\":\"/root\"}}", "env.HOME"},
  };
  RUN_BAD(rows);
}

Test(manifest, env_name_length_is_capped_at_128) {
  char *n128 = repeat('V', 128), *n129 = repeat('V', 129);
  char *ok = fmt("{" BASE ",\"env\":{\"%s\":\"x\"}}", n128);
  char *bad = fmt("{" BASE ",\"env\":{\"%s\":\"x\"}}", n129);
  struct manifest *m = parse_ok(ok);
  cr_assert_eq(strlen(m->env[0].name), 128);
  manifest_free(m);
  /* the diag shortens the name; it still starts with env.VVV */
  expect_invalid_len(bad, strlen(bad), "'env.VVVV");
  free(n128);
  free(n129);
  free(ok);
  free(bad);
}

Test(manifest, env_value_length_is_capped) {
  char *v_ok = repeat('v', MANIFEST_MAX_ARG_LEN), *v_bad = repeat('v', MANIFEST_MAX_ARG_LEN + 1);
  char *ok = fmt("{" BASE ",\"env\":{\"A\":\"%s\"}}", v_ok);
  char *bad = fmt("{" BASE ",\"env\":{\"A\":\"%s\"}}", v_bad);
  struct manifest *m = parse_ok(ok);
  cr_assert_eq(strlen(m->env[0].value), MANIFEST_MAX_ARG_LEN);
  manifest_free(m);
  expect_invalid(bad, "env.A");
  free(v_ok);
  free(v_bad);
  free(ok);
  free(bad);
}

/* ---- NUL bytes ---- */

static const struct bad_row nul_rows[] = {
    {"{\"name\":\"a\\u0000b\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "name"},
    {"{\"name\":\"t\",\"version\":\"1\\u0000\",\"entry\":[\"/bin/true\"]}", "version"},
    {"{" NV ",\"entry\":[\"/bin/t\\u0000rue\"]}", "entry[0]"},
    {"{" NV ",\"entry\":[\"/bin/echo\",\"a\\u0000b\"]}", "entry[1]"},
    {"{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/tmp\\u0000/x\",\"access\":\"ro\"}]}}",
     "capabilities.fs[0].path"},
    {"{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/tmp\",\"access\":\"r\\u0000\"}]}}",
     "capabilities.fs[0].access"},
    {"{" BASE ",\"env\":{\"A\":\"x\\u0000y\"}}", "env.A"},
    {"{" BASE ",\"min_sandbox\":\"none\\u0000x\"}", "min_sandbox"},
    {"{" BASE ",\"platforms\":[\"linux\\u0000\"]}", "platforms[0]"},
};

Test(manifest, rejects_nul_bytes_inside_strings) {
  for (size_t i = 0; i < sizeof(nul_rows) / sizeof(nul_rows[0]); i++)
    expect_invalid_len(nul_rows[i].json, strlen(nul_rows[i].json), "manifest");
  /* jansson refuses a NUL in a key itself, and its message quotes the key */
  const char *key = "{" BASE ",\"env\":{\"A\\u0000B\":\"x\"}}";
  expect_invalid_len(key, strlen(key), "A\\u0000B");
}

/* Regression: a \u0000 inside a string used to be refused by jansson before
 * the parser's own checks ran, so diag quoted the value, never the field;
 * "platforms":["linux\u0000"] must not be read as "linux" either. */
Test(manifest, nul_byte_rejection_names_the_field) {
  RUN_BAD(nul_rows);
}

Test(manifest, rejects_invalid_utf8) {
  expect_invalid_len("{\"name\":\"\xff\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}",
                     strlen("{\"name\":\"\xff\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}"),
                     "manifest");
}

/* ---- sizes and counts ---- */

/* A valid manifest padded with spaces to exactly len bytes. */
static char *padded_manifest(size_t len) {
  static const char body[] = "{" BASE "}";
  cr_assert_gt(len, sizeof(body));
  char *s = malloc(len);
  cr_assert_not_null(s);
  memset(s, ' ', len);
  memcpy(s, body, sizeof(body) - 1);
  return s;
}

Test(manifest, accepts_exactly_64_kib) {
  char *s = padded_manifest(MANIFEST_MAX_BYTES);
  struct manifest *m = parse_ok_len(s, MANIFEST_MAX_BYTES);
  manifest_free(m);
  free(s);
}

Test(manifest, rejects_a_manifest_over_64_kib_before_parsing) {
  char *s = padded_manifest(MANIFEST_MAX_BYTES + 1);
  expect_invalid_len(s, MANIFEST_MAX_BYTES + 1, "65536");
  free(s);
  /* even when the extra bytes would be invalid JSON: the cap comes first */
  s = padded_manifest(MANIFEST_MAX_BYTES + 100);
  s[MANIFEST_MAX_BYTES + 50] = '{';
  struct cordon_diag d = {{0}};
  struct manifest *m = UNTOUCHED;
  cr_assert_eq(manifest_parse(s, MANIFEST_MAX_BYTES + 100, &m, &d), CORDON_E_MANIFEST_INVALID);
  cr_assert(strstr(d.msg, "larger than") != NULL, "%s", d.msg);
  cr_assert_eq(m, UNTOUCHED);
  free(s);
}

/* {"name":"t","version":"1","entry":["/bin/echo","a","a",...]} with n entries */
static char *entry_with_args(size_t n) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  fputs("{" NV ",\"entry\":[\"/bin/echo\"", f);
  for (size_t i = 1; i < n; i++)
    fputs(",\"a\"", f);
  fputs("]}", f);
  fclose(f);
  return buf;
}

Test(manifest, entry_argument_count_is_capped) {
  char *ok = entry_with_args(MANIFEST_MAX_ARGS);
  char *bad = entry_with_args(MANIFEST_MAX_ARGS + 1);
  struct manifest *m = parse_ok(ok);
  cr_assert_eq(m->entry[0].argc, MANIFEST_MAX_ARGS);
  manifest_free(m);
  expect_invalid(bad, "entry");
  free(ok);
  free(bad);
}

Test(manifest, entry_argument_length_is_capped) {
  char *a_ok = repeat('a', MANIFEST_MAX_ARG_LEN), *a_bad = repeat('a', MANIFEST_MAX_ARG_LEN + 1);
  char *ok = fmt("{" NV ",\"entry\":[\"/bin/echo\",\"%s\"]}", a_ok);
  char *bad = fmt("{" NV ",\"entry\":[\"/bin/echo\",\"%s\"]}", a_bad);
  struct manifest *m = parse_ok(ok);
  cr_assert_eq(strlen(m->entry[0].argv[1]), MANIFEST_MAX_ARG_LEN);
  manifest_free(m);
  expect_invalid(bad, "entry[1]");
  free(a_ok);
  free(a_bad);
  free(ok);
  free(bad);
}

static char *manifest_with_grants(size_t n) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  fputs("{" BASE ",\"capabilities\":{\"fs\":[", f);
  for (size_t i = 0; i < n; i++)
    fprintf(f, "%s{\"path\":\"/g%zu\",\"access\":\"%s\"}", i ? "," : "", i, i % 2 ? "rw" : "ro");
  fputs("]}}", f);
  fclose(f);
  return buf;
}

Test(manifest, grant_count_is_capped) {
  char *ok = manifest_with_grants(MANIFEST_MAX_GRANTS);
  char *bad = manifest_with_grants(MANIFEST_MAX_GRANTS + 1);
  struct manifest *m = parse_ok(ok);
  cr_assert_eq(m->n_grants, MANIFEST_MAX_GRANTS);
  cr_assert_str_eq(m->grants[MANIFEST_MAX_GRANTS - 1].path, "/g63");
  cr_assert_eq(m->grants[MANIFEST_MAX_GRANTS - 1].rw, true);
  manifest_free(m);
  expect_invalid(bad, "capabilities.fs");
  free(ok);
  free(bad);
}

static char *manifest_with_env(size_t n) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  fputs("{" BASE ",\"env\":{", f);
  for (size_t i = 0; i < n; i++)
    fprintf(f, "%s\"V%zu\":\"%zu\"", i ? "," : "", i, i);
  fputs("}}", f);
  fclose(f);
  return buf;
}

Test(manifest, env_count_is_capped) {
  char *ok = manifest_with_env(MANIFEST_MAX_ENV);
  char *bad = manifest_with_env(MANIFEST_MAX_ENV + 1);
  struct manifest *m = parse_ok(ok);
  cr_assert_eq(m->n_env, MANIFEST_MAX_ENV);
  manifest_free(m);
  expect_invalid(bad, "env");
  free(ok);
  free(bad);
}

/* ---- partial failures free what they built (ASan run catches leaks) ---- */

Test(manifest, failure_after_partial_parse_leaks_nothing) {
  static const char *const docs[] = {
      "{" BASE ",\"capabilities\":{\"fs\":[{\"path\":\"/"
      "a\",\"access\":\"ro\"},{\"path\":\"x\",\"access\":\"ro\"}]}}",
      "{" BASE ",\"env\":{\"A\":\"1\",\"B\":\"2\",\"HOME\":\"/\"}}",
      "{" NV ",\"entry\":{\"linux\":[\"/a\",\"b\"],\"windows\":[\"/c\",5]}}",
      "{" BASE ",\"platforms\":[\"linux\"],\"timeout_s\":0}",
  };
  for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
    expect_invalid_len(docs[i], strlen(docs[i]), "field");
}

/* ---- helpers of the header ---- */

Test(manifest, level_names_round_trip) {
  for (unsigned i = SANDBOX_LEVEL_NONE; i <= SANDBOX_LEVEL_ISOLATED; i++) {
    enum sandbox_level l = SANDBOX_LEVEL_NONE;
    const char *n = sandbox_level_name((enum sandbox_level)i);
    cr_assert_not_null(n);
    cr_assert_eq(sandbox_level_parse(n, &l), 0);
    cr_assert_eq(l, (enum sandbox_level)i);
  }
  cr_assert_null(sandbox_level_name((enum sandbox_level)3));
  enum sandbox_level l = SANDBOX_LEVEL_CONTAINED;
  cr_assert_eq(sandbox_level_parse("ISOLATED", &l), CORDON_E_USAGE);
  cr_assert_eq(sandbox_level_parse("", &l), CORDON_E_USAGE);
  cr_assert_eq(l, SANDBOX_LEVEL_CONTAINED, "out untouched on failure");
}

Test(manifest, platform_names_map_to_bits) {
  cr_assert_eq(manifest_platform_from_name("linux"), MANIFEST_PLATFORM_LINUX);
  cr_assert_eq(manifest_platform_from_name("windows"), MANIFEST_PLATFORM_WINDOWS);
  cr_assert_eq(manifest_platform_from_name("macos"), MANIFEST_PLATFORM_MACOS);
  cr_assert_eq(manifest_platform_from_name("darwin"), 0);
  cr_assert_eq(manifest_platform_from_name(""), 0);
}

Test(manifest, entry_for_refuses_zero_or_several_platform_bits) {
  struct manifest *m = parse_ok("{" BASE "}");
  cr_assert_null(manifest_entry_for(m, 0));
  cr_assert_null(manifest_entry_for(m, MANIFEST_PLATFORM_LINUX | MANIFEST_PLATFORM_MACOS));
  cr_assert_null(manifest_entry_for(m, MANIFEST_PLATFORM_ALL));
  cr_assert_eq(manifest_entry_for(m, MANIFEST_PLATFORM_MACOS), &m->entry[2]);
  manifest_free(m);
  manifest_free(NULL);
}

/* ---- manifest_load_file ---- */

static char tmpdir[64];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/cordon-test-manifest-XXXXXX");
  cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    cr_log_warn("could not remove %s", tmpdir);
}

static void write_file(const char *path, const char *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(write(fd, data, len), (ssize_t)len);
  close(fd);
}

TestSuite(manifest_file, .init = make_tmpdir, .fini = remove_tmpdir);

Test(manifest_file, loads_the_hello_example) {
  struct manifest *m = NULL;
  struct cordon_diag d = {{0}};
  int r = manifest_load_file(CORDON_SOURCE_DIR "/examples/hello/manifest.json", &m, &d);
  cr_assert_eq(r, 0, "%s", d.msg);
  cr_assert_str_eq(m->name, "hello");
  cr_assert_str_eq(m->version, "1.0.0");
  cr_assert_eq(m->platforms, MANIFEST_PLATFORM_LINUX | MANIFEST_PLATFORM_MACOS);
  cr_assert_eq(m->timeout_s, 10);
  cr_assert_eq(m->cpu_s, 10);
  cr_assert_eq(m->memory_mb, 128);
  cr_assert_eq(m->processes, 16);
  cr_assert_eq(m->output_kb, 64);
  cr_assert_eq(m->disk_mb, 16);
  cr_assert_eq(m->n_env, 1);
  cr_assert_str_eq(m->env[0].name, "GREETING");
  cr_assert_str_eq(m->env[0].value, "hello");
  const struct manifest_argv *e = manifest_entry_for(m, MANIFEST_PLATFORM_LINUX);
  cr_assert_not_null(e);
  cr_assert_str_eq(e->argv[0], "/bin/sh");
  cr_assert_str_eq(e->argv[1], "run.sh");
  manifest_free(m);
}

Test(manifest_file, missing_file_is_a_negated_errno) {
  char path[128];
  snprintf(path, sizeof(path), "%s/nope.json", tmpdir);
  struct manifest *m = UNTOUCHED;
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_load_file(path, &m, &d), -ENOENT);
  cr_assert_eq(m, UNTOUCHED);
  cr_assert(strstr(d.msg, path) != NULL, "diag names the path: %s", d.msg);
  cr_assert_str_eq(cordon_err_name(-ENOENT), "io_error");
}

Test(manifest_file, directory_is_refused) {
  struct manifest *m = UNTOUCHED;
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_load_file(tmpdir, &m, &d), CORDON_E_MANIFEST_INVALID);
  cr_assert_eq(m, UNTOUCHED);
  cr_assert(strstr(d.msg, tmpdir) != NULL, "diag names the path: %s", d.msg);
  cr_assert(strstr(d.msg, "regular file") != NULL, "%s", d.msg);
}

Test(manifest_file, oversize_file_is_refused) {
  char path[128];
  snprintf(path, sizeof(path), "%s/big.json", tmpdir);
  char *s = padded_manifest(MANIFEST_MAX_BYTES + 1);
  write_file(path, s, MANIFEST_MAX_BYTES + 1);
  free(s);
  struct manifest *m = UNTOUCHED;
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_load_file(path, &m, &d), CORDON_E_MANIFEST_INVALID);
  cr_assert_eq(m, UNTOUCHED);
  cr_assert(strstr(d.msg, "65536") != NULL, "%s", d.msg);
}

Test(manifest_file, file_of_exactly_64_kib_loads) {
  char path[128];
  snprintf(path, sizeof(path), "%s/edge.json", tmpdir);
  char *s = padded_manifest(MANIFEST_MAX_BYTES);
  write_file(path, s, MANIFEST_MAX_BYTES);
  free(s);
  struct manifest *m = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_load_file(path, &m, &d), 0, "%s", d.msg);
  cr_assert_str_eq(m->name, "t");
  manifest_free(m);
}

Test(manifest_file, invalid_content_names_the_field) {
  char path[128];
  snprintf(path, sizeof(path), "%s/bad.json", tmpdir);
  const char *json = "{" BASE ",\"limits\":{\"memory_mb\":15}}";
  write_file(path, json, strlen(json));
  struct manifest *m = UNTOUCHED;
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_load_file(path, &m, &d), CORDON_E_MANIFEST_INVALID);
  cr_assert(strstr(d.msg, "'limits.memory_mb'") != NULL, "%s", d.msg);
  cr_assert_eq(m, UNTOUCHED);
}

Test(manifest_file, empty_file_is_invalid) {
  char path[128];
  snprintf(path, sizeof(path), "%s/empty.json", tmpdir);
  write_file(path, "", 0);
  struct manifest *m = UNTOUCHED;
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_load_file(path, &m, &d), CORDON_E_MANIFEST_INVALID);
  cr_assert_eq(m, UNTOUCHED);
}

/* Regression (was a bug, fixed): manifest_load_file() opens the path with a blocking open() and
 * only then checks S_ISREG, so a FIFO named manifest.json blocks forever instead of being refused
 * as "not a regular file". Reproduced end to end: `mkfifo DIR/manifest.json; cordon-agent exec DIR`
 * hangs (killed by timeout(1) after 5 s). Expected: CORDON_E_MANIFEST_INVALID at once (e.g. open
 * with O_NONBLOCK, or fstat before reading). */
Test(manifest_file, fifo_is_refused_without_blocking, .timeout = 3) {
  char path[128];
  snprintf(path, sizeof(path), "%s/fifo.json", tmpdir);
  cr_assert_eq(mkfifo(path, 0600), 0);
  struct manifest *m = UNTOUCHED;
  struct cordon_diag d = {{0}};
  cr_assert_eq(manifest_load_file(path, &m, &d), CORDON_E_MANIFEST_INVALID);
  cr_assert_eq(m, UNTOUCHED);
}
