/* Tests for agent/config.c: the device owner's ceiling (config.json). */
#include "agent/config.h"
#include "core/error.h"
#include "platform/sandbox.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define UNTOUCHED ((struct agent_config *)(uintptr_t)0x5a5a5a5a)

static char tmpdir[64];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/cordon-test-config-XXXXXX");
  cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    cr_log_warn("could not remove %s", tmpdir);
}

TestSuite(config, .init = make_tmpdir, .fini = remove_tmpdir);

static void write_config_len(const char *data, size_t len) {
  char path[128];
  snprintf(path, sizeof(path), "%s/config.json", tmpdir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(write(fd, data, len), (ssize_t)len);
  close(fd);
}

static void write_config(const char *json) {
  write_config_len(json, strlen(json));
}

static struct agent_config *load_ok(const char *dir) {
  struct agent_config *c = NULL;
  struct cordon_diag d = {{0}};
  int r = agent_config_load(dir, &c, &d);
  cr_assert_eq(r, 0, "expected success, got %d (%s): %s", r, cordon_err_name(r), d.msg);
  cr_assert_not_null(c);
  return c;
}

static struct agent_config *load_json_ok(const char *json) {
  write_config(json);
  return load_ok(tmpdir);
}

/* Non-fatal: config_invalid, out untouched, diag contains needle. */
static void expect_invalid_in(const char *needle, const char *what) {
  struct agent_config *c = UNTOUCHED;
  struct cordon_diag d = {{0}};
  int r = agent_config_load(tmpdir, &c, &d);
  cr_expect_eq(r, CORDON_E_CONFIG_INVALID, "expected config_invalid, got %d (%s)\n  input: %.300s",
               r, cordon_err_name(r), what);
  cr_expect_eq(c, UNTOUCHED, "out_config written on failure\n  input: %.300s", what);
  if (r == 0 && c != UNTOUCHED)
    agent_config_free(c);
  cr_expect(strstr(d.msg, needle) != NULL, "diag does not name %s: \"%s\"\n  input: %.300s", needle,
            d.msg, what);
}

struct bad_row {
  const char *json;
  const char *field; /* named in diag as 'field' */
};

static void run_bad_rows(const struct bad_row *rows, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char needle[128];
    snprintf(needle, sizeof(needle), "'%s'", rows[i].field);
    write_config(rows[i].json);
    expect_invalid_in(needle, rows[i].json);
  }
}

#define RUN_BAD(rows) run_bad_rows(rows, sizeof(rows) / sizeof(rows[0]))

static void assert_defaults(const struct agent_config *c) {
  cr_assert_eq(c->net, true);
  cr_assert_eq(c->n_grant_roots, 1);
  cr_assert_str_eq(c->grant_roots[0], "~");
  cr_assert_null(c->grant_roots[1], "the list is NULL-terminated");
  cr_assert_eq(c->lowest_level, SANDBOX_LEVEL_ISOLATED);
  cr_assert_str_eq(c->job_user, "cordon-job");
  cr_assert_str_eq(c->bwrap_path, "/usr/bin/bwrap");
  cr_assert_eq(c->n_trusted_publishers, 0);
  cr_assert_eq(c->max_jobs, 4);
}

/* ---- defaults ---- */

Test(config, missing_directory_means_defaults) {
  char dir[128];
  snprintf(dir, sizeof(dir), "%s/does/not/exist", tmpdir);
  struct agent_config *c = load_ok(dir);
  assert_defaults(c);
  cr_assert_str_eq(c->dir, dir);
  agent_config_free(c);
}

Test(config, missing_file_means_defaults) {
  struct agent_config *c = load_ok(tmpdir);
  assert_defaults(c);
  cr_assert_str_eq(c->dir, tmpdir);
  agent_config_free(c);
}

Test(config, empty_object_means_defaults) {
  struct agent_config *c = load_json_ok("{}");
  assert_defaults(c);
  agent_config_free(c);
}

/* ---- each key ---- */

Test(config, parses_every_key) {
  struct agent_config *c = load_json_ok(
      "{\"net\":false,\"grant_roots\":[\"~/work\",\"/srv/data\",\"~\"],"
      "\"lowest_level\":\"contained\",\"job_user\":\"alice\",\"bwrap_path\":\"/opt/bwrap/bin/"
      "bwrap\","
      "\"trusted_publishers\":[\"/etc/cordon/pub.key\",\"~/keys/p.pub\"],\"max_jobs\":7}");
  cr_assert_eq(c->net, false);
  cr_assert_eq(c->n_grant_roots, 3);
  cr_assert_str_eq(c->grant_roots[0], "~/work");
  cr_assert_str_eq(c->grant_roots[1], "/srv/data");
  cr_assert_str_eq(c->grant_roots[2], "~");
  cr_assert_null(c->grant_roots[3]);
  cr_assert_eq(c->lowest_level, SANDBOX_LEVEL_CONTAINED);
  cr_assert_str_eq(c->job_user, "alice");
  cr_assert_str_eq(c->bwrap_path, "/opt/bwrap/bin/bwrap");
  cr_assert_eq(c->n_trusted_publishers, 2);
  cr_assert_str_eq(c->trusted_publishers[0], "/etc/cordon/pub.key");
  cr_assert_str_eq(c->trusted_publishers[1], "~/keys/p.pub");
  cr_assert_null(c->trusted_publishers[2]);
  cr_assert_eq(c->max_jobs, 7);
  agent_config_free(c);
}

Test(config, each_key_alone_changes_only_itself) {
  struct agent_config *c = load_json_ok("{\"net\":false}");
  cr_assert_eq(c->net, false);
  cr_assert_eq(c->max_jobs, 4);
  cr_assert_str_eq(c->grant_roots[0], "~");
  agent_config_free(c);

  c = load_json_ok("{\"job_user\":\"builder\"}");
  cr_assert_str_eq(c->job_user, "builder");
  cr_assert_eq(c->net, true);
  cr_assert_str_eq(c->bwrap_path, "/usr/bin/bwrap");
  agent_config_free(c);

  c = load_json_ok("{\"grant_roots\":[\"/data\"]}");
  cr_assert_eq(c->n_grant_roots, 1, "the list replaces the default");
  cr_assert_str_eq(c->grant_roots[0], "/data");
  agent_config_free(c);
}

Test(config, lowest_level_accepts_each_level) {
  static const struct {
    const char *json;
    enum sandbox_level level;
  } rows[] = {{"{\"lowest_level\":\"none\"}", SANDBOX_LEVEL_NONE},
              {"{\"lowest_level\":\"contained\"}", SANDBOX_LEVEL_CONTAINED},
              {"{\"lowest_level\":\"isolated\"}", SANDBOX_LEVEL_ISOLATED}};
  for (size_t i = 0; i < 3; i++) {
    struct agent_config *c = load_json_ok(rows[i].json);
    cr_expect_eq(c->lowest_level, rows[i].level, "%s", rows[i].json);
    agent_config_free(c);
  }
}

Test(config, max_jobs_accepts_its_bounds) {
  struct agent_config *c = load_json_ok("{\"max_jobs\":1}");
  cr_assert_eq(c->max_jobs, 1);
  agent_config_free(c);
  c = load_json_ok("{\"max_jobs\":64}");
  cr_assert_eq(c->max_jobs, 64);
  agent_config_free(c);
}

Test(config, empty_grant_roots_allows_no_grant_root) {
  struct agent_config *c = load_json_ok("{\"grant_roots\":[]}");
  cr_assert_eq(c->n_grant_roots, 0);
  cr_assert_not_null(c->grant_roots);
  cr_assert_null(c->grant_roots[0]);
  agent_config_free(c);
}

/* ---- rejections ---- */

Test(config, rejects_unknown_keys) {
  static const struct bad_row rows[] = {
      {"{\"netw\":true}", "netw"},
      {"{\"Net\":true}", "Net"},
      {"{\"max_jobs\":2,\"min_jobs\":1}", "min_jobs"},
      {"{\"\":1}", ""},
  };
  RUN_BAD(rows);
}

Test(config, rejects_bad_types_naming_the_field) {
  static const struct bad_row rows[] = {
      {"{\"net\":\"true\"}", "net"},
      {"{\"net\":1}", "net"},
      {"{\"net\":null}", "net"},
      {"{\"grant_roots\":\"~\"}", "grant_roots"},
      {"{\"grant_roots\":null}", "grant_roots"},
      {"{\"grant_roots\":{\"a\":\"~\"}}", "grant_roots"},
      {"{\"grant_roots\":[1]}", "grant_roots[0]"},
      {"{\"grant_roots\":[\"~\",null]}", "grant_roots[1]"},
      {"{\"grant_roots\":[\"\"]}", "grant_roots[0]"},
      {"{\"lowest_level\":2}", "lowest_level"},
      {"{\"lowest_level\":null}", "lowest_level"},
      {"{\"lowest_level\":\"strict\"}", "lowest_level"},
      {"{\"lowest_level\":\"Isolated\"}", "lowest_level"},
      {"{\"job_user\":5}", "job_user"},
      {"{\"job_user\":\"\"}", "job_user"},
      {"{\"job_user\":null}", "job_user"},
      {"{\"job_user\":[\"a\"]}", "job_user"},
      {"{\"bwrap_path\":5}", "bwrap_path"},
      {"{\"bwrap_path\":\"\"}", "bwrap_path"},
      {"{\"bwrap_path\":true}", "bwrap_path"},
      {"{\"trusted_publishers\":\"/k\"}", "trusted_publishers"},
      {"{\"trusted_publishers\":[false]}", "trusted_publishers[0]"},
      {"{\"max_jobs\":\"4\"}", "max_jobs"},
      {"{\"max_jobs\":4.0}", "max_jobs"},
      {"{\"max_jobs\":true}", "max_jobs"},
      {"{\"max_jobs\":null}", "max_jobs"},
  };
  RUN_BAD(rows);
}

Test(config, rejects_a_relative_bwrap_path) {
  static const struct bad_row rows[] = {
      {"{\"bwrap_path\":\"bwrap\"}", "bwrap_path"},
      {"{\"bwrap_path\":\"./bwrap\"}", "bwrap_path"},
      {"{\"bwrap_path\":\"bin/bwrap\"}", "bwrap_path"},
      {"{\"bwrap_path\":\"~/bin/bwrap\"}", "bwrap_path"},
  };
  RUN_BAD(rows);
}

Test(config, rejects_max_jobs_out_of_range) {
  static const struct bad_row rows[] = {
      {"{\"max_jobs\":0}", "max_jobs"},
      {"{\"max_jobs\":65}", "max_jobs"},
      {"{\"max_jobs\":-1}", "max_jobs"},
      {"{\"max_jobs\":4294967300}", "max_jobs"},
  };
  RUN_BAD(rows);
}

Test(config, rejects_relative_or_dotdot_grant_roots) {
  static const struct bad_row rows[] = {
      {"{\"grant_roots\":[\"work\"]}", "grant_roots[0]"},
      {"{\"grant_roots\":[\"./work\"]}", "grant_roots[0]"},
      {"{\"grant_roots\":[\"~\",\"srv\"]}", "grant_roots[1]"},
      {"{\"grant_roots\":[\"~user\"]}", "grant_roots[0]"},
      {"{\"grant_roots\":[\"~root/x\"]}", "grant_roots[0]"},
      {"{\"grant_roots\":[\"$HOME\"]}", "grant_roots[0]"},
      {"{\"grant_roots\":[\"/a/../b\"]}", "grant_roots[0]"},
      {"{\"grant_roots\":[\"/..\"]}", "grant_roots[0]"},
      {"{\"grant_roots\":[\"/srv/..\"]}", "grant_roots[0]"},
      {"{\"grant_roots\":[\"~/..\"]}", "grant_roots[0]"},
      {"{\"grant_roots\":[\"~/../other\"]}", "grant_roots[0]"},
      {"{\"trusted_publishers\":[\"pub.key\"]}", "trusted_publishers[0]"},
      {"{\"trusted_publishers\":[\"/etc/../k\"]}", "trusted_publishers[0]"},
  };
  RUN_BAD(rows);
}

Test(config, rejects_more_than_64_grant_roots) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  fputs("{\"grant_roots\":[", f);
  for (int i = 0; i < 65; i++)
    fprintf(f, "%s\"/r%d\"", i ? "," : "", i);
  fputs("]}", f);
  fclose(f);
  write_config(buf);
  expect_invalid_in("'grant_roots'", buf);
  /* 64 is fine */
  char *comma = strrchr(buf, ',');
  strcpy(comma, "]}");
  struct agent_config *c = load_json_ok(buf);
  cr_assert_eq(c->n_grant_roots, 64);
  agent_config_free(c);
  free(buf);
}

Test(config, rejects_an_overlong_job_user) {
  char user[300];
  memset(user, 'u', 256);
  user[256] = '\0';
  char json[400];
  snprintf(json, sizeof(json), "{\"job_user\":\"%s\"}", user);
  write_config(json);
  expect_invalid_in("'job_user'", json);
  user[255] = '\0';
  snprintf(json, sizeof(json), "{\"job_user\":\"%s\"}", user);
  struct agent_config *c = load_json_ok(json);
  cr_assert_eq(strlen(c->job_user), 255);
  agent_config_free(c);
}

Test(config, rejects_nul_bytes_in_strings) {
  static const char *const docs[] = {"{\"job_user\":\"a\\u0000b\"}",
                                     "{\"bwrap_path\":\"/x\\u0000y\"}",
                                     "{\"grant_roots\":[\"/a\\u0000\"]}"};
  for (size_t i = 0; i < 3; i++) {
    write_config(docs[i]);
    expect_invalid_in("config.json", docs[i]);
  }
}

Test(config, rejects_duplicate_keys) {
  write_config("{\"net\":false,\"net\":true}");
  expect_invalid_in("\"net\"", "duplicate net");
  write_config("{\"grant_roots\":[\"/a\"],\"grant_roots\":[\"/b\"]}");
  expect_invalid_in("\"grant_roots\"", "duplicate grant_roots");
}

Test(config, rejects_malformed_json_and_non_objects) {
  static const char *const docs[] = {"",          "{", "[]", "\"~\"", "null", "{\"net\":true} x",
                                     "{net:true}"};
  for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
    write_config(docs[i]);
    expect_invalid_in("config.json", docs[i]);
  }
}

Test(config, rejects_a_config_that_is_a_directory) {
  char path[128];
  snprintf(path, sizeof(path), "%s/config.json", tmpdir);
  cr_assert_eq(mkdir(path, 0700), 0);
  expect_invalid_in("config.json", "config.json is a directory");
}

Test(config, rejects_an_oversize_config) {
  size_t len = AGENT_CONFIG_MAX_BYTES + 1;
  char *s = malloc(len);
  cr_assert_not_null(s);
  memset(s, ' ', len);
  memcpy(s, "{}", 2);
  write_config_len(s, len);
  expect_invalid_in("config.json", "oversize");
  /* exactly the cap is fine */
  write_config_len(s, len - 1);
  struct agent_config *c = load_ok(tmpdir);
  assert_defaults(c);
  agent_config_free(c);
  free(s);
}

Test(config, refuses_a_symlinked_config) {
  /* opened with O_NOFOLLOW: a link planted in place of config.json fails closed */
  char target[128], link[128];
  snprintf(target, sizeof(target), "%s/real.json", tmpdir);
  snprintf(link, sizeof(link), "%s/config.json", tmpdir);
  int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, "{}", 2), 2);
  close(fd);
  cr_assert_eq(symlink(target, link), 0);
  struct agent_config *c = UNTOUCHED;
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_config_load(tmpdir, &c, &d), CORDON_E_CONFIG_INVALID);
  cr_assert_eq(c, UNTOUCHED);
  cr_assert(strstr(d.msg, "config.json") != NULL, "%s", d.msg);
}

/* Regression (was a bug, fixed): agent_config_load() opens config.json with a blocking open()
 * before checking S_ISREG, so a FIFO there hangs the agent at start instead of failing with
 * config_invalid ("not a regular file"). Same shape as the manifest_load_file FIFO bug. */
Test(config, fifo_config_is_refused_without_blocking, .timeout = 3) {
  char path[128];
  snprintf(path, sizeof(path), "%s/config.json", tmpdir);
  cr_assert_eq(mkfifo(path, 0600), 0);
  expect_invalid_in("config.json", "config.json is a FIFO");
}

Test(config, failure_late_in_the_file_leaks_nothing) {
  /* grant_roots and publishers already built when max_jobs fails (ASan) */
  write_config("{\"grant_roots\":[\"/a\",\"/b\"],\"trusted_publishers\":[\"/k\"],"
               "\"job_user\":\"x\",\"bwrap_path\":\"/b\",\"max_jobs\":0}");
  expect_invalid_in("'max_jobs'", "late failure");
  write_config("{\"grant_roots\":[\"/a\",\"/b\",\"rel\"]}");
  expect_invalid_in("'grant_roots[2]'", "late list failure");
}

/* ---- policy ---- */

Test(config, policy_maps_every_field) {
  struct agent_config *c = load_json_ok("{\"net\":false,\"grant_roots\":[\"~/w\",\"/d\"],"
                                        "\"lowest_level\":\"none\",\"job_user\":\"jobs\","
                                        "\"bwrap_path\":\"/opt/bwrap\"}");
  struct sandbox_policy p;
  memset(&p, 0xa5, sizeof(p));
  agent_config_policy(c, &p);
  cr_assert_eq(p.net_allowed, false);
  cr_assert_eq(p.n_grant_roots, 2);
  cr_assert_eq((const void *)p.grant_roots, (const void *)c->grant_roots, "borrowed, not copied");
  cr_assert_str_eq(p.grant_roots[0], "~/w");
  cr_assert_str_eq(p.grant_roots[1], "/d");
  cr_assert_eq(p.lowest_level, SANDBOX_LEVEL_NONE);
  cr_assert_str_eq(p.job_user, "jobs");
  cr_assert_str_eq(p.bwrap_path, "/opt/bwrap");
  cr_assert_str_eq(p.state_dir, tmpdir, "the config dir is the agent's state: always forbidden");
  agent_config_free(c);
}

Test(config, policy_of_defaults) {
  struct agent_config *c = load_ok(tmpdir);
  struct sandbox_policy p;
  memset(&p, 0, sizeof(p));
  agent_config_policy(c, &p);
  cr_assert_eq(p.net_allowed, true);
  cr_assert_eq(p.n_grant_roots, 1);
  cr_assert_str_eq(p.grant_roots[0], "~");
  cr_assert_eq(p.lowest_level, SANDBOX_LEVEL_ISOLATED);
  cr_assert_str_eq(p.job_user, "cordon-job");
  cr_assert_str_eq(p.bwrap_path, "/usr/bin/bwrap");
  agent_config_free(c);
  agent_config_free(NULL);
}
