/* Manifest paths written the Windows way, end to end under Wine: an
 * entry[0] or grant with a drive letter (C:\... or C:/...) is that absolute
 * path (docs/PROTOCOL.md, "Paths in entry[0] and fs grants"); an entry[0]
 * with '\' that is no drive path is refused before anything is staged. */
#include <windows.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/job.h"
#include "platform/sandbox.h"
#include "tests/windows/wintest.h"

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  WT_CHECK(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

/* s as the inside of a JSON string ('\' and '"' escaped); never freed */
static const char *json_text(const char *s) {
  char *out = malloc(strlen(s) * 2 + 1), *o = out;
  WT_CHECK(out != NULL, "out of memory");
  for (; *s; s++) {
    if (*s == '\\' || *s == '"')
      *o++ = '\\';
    *o++ = *s;
  }
  *o = '\0';
  return out;
}

/* A package dir holding only a manifest for windows with this entry
 * (a JSON array's members) and more members (with a leading comma). */
static const char *make_pkg(const char *entry_json, const char *extra) {
  const char *dir = wt_tmpdir();
  char manifest[8192], mpath[MAX_PATH * 3 + 32];
  snprintf(manifest, sizeof(manifest),
           "{\"name\": \"drive\", \"version\": \"1.0.0\", \"platforms\": [\"windows\"], "
           "\"min_sandbox\": \"contained\", \"entry\": {\"windows\": [%s]}%s}",
           entry_json, extra);
  snprintf(mpath, sizeof(mpath), "%s\\manifest.json", dir);
  write_file(mpath, manifest);
  return dir;
}

struct ran {
  struct agent_config *cfg;
  struct agent_job job;
  int prepare, plan, run;
  char diag[sizeof(((struct cordon_diag *)0)->msg)];
};

static void run_pkg(struct ran *r, const char *pkg) {
  memset(r, 0, sizeof(*r));
  struct cordon_diag diag = {{0}};
  WT_CHECK(agent_config_load(wt_tmpdir(), &r->cfg, &diag) == 0, "config: %s", diag.msg);
  r->prepare = agent_job_prepare(&r->job, r->cfg, pkg, NULL, &diag);
  snprintf(r->diag, sizeof(r->diag), "%s", diag.msg);
  if (r->prepare != 0)
    return;
  r->plan = agent_job_plan(&r->job, NULL, 0, false);
  if (r->plan == 0)
    r->run = sandbox_run(r->job.plan, &r->job.result);
}

static void ran_release(struct ran *r) {
  agent_job_release(&r->job);
  agent_config_free(r->cfg);
}

static const char *out_text(const struct job_result *res) {
  static char buf[65536];
  size_t n = res->out.len < sizeof(buf) - 1 ? res->out.len : sizeof(buf) - 1;
  memcpy(buf, res->out.data ? (const char *)res->out.data : "", n);
  buf[n] = '\0';
  return buf;
}

/* The plan's argv[0], as sandbox_plan_explain reports it (never freed). */
static const char *planned_app(const struct ran *r) {
  json_t *j = sandbox_plan_explain(r->job.plan);
  WT_CHECK(j != NULL, "no explain");
  const char *a = json_string_value(json_array_get(json_object_get(j, "argv"), 0));
  char *dup = strdup(a ? a : "(none)");
  json_decref(j);
  return dup;
}

/* Is `path` among the plan's grants (contained: "grants"; isolated:
 * appcontainer.acl_grants[].path)? */
static bool plan_grants(const struct ran *r, const char *path) {
  json_t *j = sandbox_plan_explain(r->job.plan);
  WT_CHECK(j != NULL, "no explain");
  bool found = false;
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(j, "grants"), i, v) {
    found |= json_is_string(v) && strcmp(json_string_value(v), path) == 0;
  }
  json_array_foreach(json_object_get(json_object_get(j, "appcontainer"), "acl_grants"), i, v) {
    const char *p = json_string_value(json_object_get(v, "path"));
    found |= p && strcmp(p, path) == 0;
  }
  json_decref(j);
  return found;
}

static void expect_cmd_echo(const char *argv0_json) {
  char entry[512];
  snprintf(entry, sizeof(entry), "\"%s\", \"/c\", \"echo\", \"drive-path-ok\"", argv0_json);
  struct ran r;
  run_pkg(&r, make_pkg(entry, ""));
  WT_CHECK(r.prepare == 0, "prepare %d: %s", r.prepare, r.diag);
  WT_EQ_INT(r.plan, 0);
  WT_EQ_STR(planned_app(&r), "C:\\Windows\\System32\\cmd.exe");
  WT_EQ_INT(r.run, 0);
  WT_CHECK(r.job.result.ran, "did not run: %s", r.job.result.error_message);
  WT_EQ_INT(r.job.result.exit_code, 0);
  WT_CHECK(strstr(out_text(&r.job.result), "drive-path-ok") != NULL, "stdout: %s",
           out_text(&r.job.result));
  ran_release(&r);
}

WT_TEST(drive_paths, cmd_exe_by_its_drive_path_runs) {
  expect_cmd_echo("C:\\\\Windows\\\\System32\\\\cmd.exe");
}

WT_TEST(drive_paths, forward_slashes_after_the_drive_letter_run_too) {
  expect_cmd_echo("C:/Windows/System32/cmd.exe");
}

WT_TEST(drive_paths, a_drive_path_grant_is_that_directory) {
  /* the job user's profile (a grant root by default), from the probe */
  struct ran r;
  run_pkg(&r, make_pkg("\"C:/Windows/System32/cmd.exe\", \"/c\", \"exit\", \"0\"", ""));
  WT_EQ_INT(r.plan, 0);
  json_t *pj = sandbox_probe_json(r.job.probe);
  const char *h = json_string_value(json_object_get(json_object_get(pj, "job_user"), "home"));
  WT_CHECK(h && h[1] == ':', "no profile directory with a drive letter: %s", h ? h : "(null)");
  char dir[MAX_PATH * 3], file[MAX_PATH * 3 + 16];
  snprintf(dir, sizeof(dir), "%s\\cordon-wintest-drive-%lu-%lu", h, GetCurrentProcessId(),
           GetTickCount());
  json_decref(pj);
  ran_release(&r);
  WT_CHECK(CreateDirectoryA(dir, NULL), "mkdir %s: error %lu", dir, GetLastError());
  snprintf(file, sizeof(file), "%s\\greeting.txt", dir);
  write_file(file, "hello through a drive-path grant\r\n");

  /* the grant written with '/', the file named with '\' */
  char slashed[sizeof(dir)], entry[4096], extra[4096];
  snprintf(slashed, sizeof(slashed), "%s", dir);
  for (char *c = slashed; *c; c++)
    if (*c == '\\')
      *c = '/';
  snprintf(entry, sizeof(entry),
           "\"C:\\\\Windows\\\\System32\\\\cmd.exe\", \"/c\", \"type\", \"%s\"", json_text(file));
  snprintf(extra, sizeof(extra),
           ", \"capabilities\": {\"fs\": [{\"path\": \"%s\", \"access\": \"ro\"}]}", slashed);
  run_pkg(&r, make_pkg(entry, extra));
  WT_CHECK(r.prepare == 0, "prepare %d: %s", r.prepare, r.diag);
  WT_CHECK(r.plan == 0, "plan %d: %s", r.plan, r.job.result.error_message);
  WT_CHECK(plan_grants(&r, dir), "%s is not among the plan's grants", dir);
  WT_EQ_INT(r.run, 0);
  WT_EQ_INT(r.job.result.exit_code, 0);
  WT_CHECK(strstr(out_text(&r.job.result), "hello through a drive-path grant") != NULL,
           "stdout: %s", out_text(&r.job.result));
  ran_release(&r);
  DeleteFileA(file);
  RemoveDirectoryA(dir);
}

WT_TEST(drive_paths, an_entry_with_a_backslash_but_no_drive_is_refused_at_validation) {
  struct ran r;
  run_pkg(&r, make_pkg("\"bin\\\\helper.exe\"", ""));
  WT_EQ_INT(r.prepare, CORDON_E_MANIFEST_INVALID);
  WT_CHECK(strstr(r.diag, "'entry.windows[0]'") != NULL, "diag: %s", r.diag);
  ran_release(&r);
}
