/* End to end, the real daemon and a real agent on loopback: every result
 * is recorded (docs/DESIGN.md section 5.2, docs/PROTOCOL.md "Result").
 * Output at the largest output_kb a manifest allows, of the bytes whose
 * JSON is longest (control bytes; quotes and backslashes), is stored with
 * a receipt that verifies and reads back byte for byte; a result the
 * store cannot take (its cap lowered for the test) is recorded without
 * its output, the job failed with result_unstorable and a receipt that
 * verifies, and the agent's spool lets it go (it is never sent again). */
#include "e2e.h"

#include <sodium.h>

#include "core/result.h"

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  e2e_setup();
}

/* The daemon with a store that takes results of at most 64 KiB of JSON. */
static void setup_small_store(void) {
  setenv("CORDON_RESULT_STORE_MAX", "65536", 1);
  setup();
}

TestSuite(result_store, .init = setup, .fini = e2e_teardown, .timeout = 240);

#define MIB (1024 * 1024)

/* Run argv to its end, its stdout into the file out (no size limit, unlike
 * e2e.h's run); its stderr into *err_out when not NULL (malloc'd). */
static int run_to_file(const char *const *argv, const char *out, char **err_out) {
  char errp[400];
  snprintf(errp, sizeof(errp), "%s/run_to_file.err", e2e_dir);
  int status = run_into(argv, out, errp);
  if (err_out) {
    FILE *f = fopen(errp, "r");
    char *buf = calloc(1, 1 << 16);
    size_t n = f ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    buf[n] = '\0';
    if (f)
      fclose(f);
    *err_out = buf;
  }
  return status;
}

/* The JSON of the file (its whole text). */
static json_t *load_json(const char *path) {
  json_error_t e;
  json_t *j = json_load_file(path, JSON_ALLOW_NUL, &e);
  cr_assert_not_null(j, "%s: %s", path, e.text);
  return j;
}

/* `job ID --json`, however long. */
static json_t *job_json(const char *id) {
  char path[400];
  snprintf(path, sizeof(path), "%s/job.json", e2e_dir);
  int st = run_to_file(
      (const char *const[]){SERVER, "job", id, "--json", "--state", e2e_state, NULL}, path, NULL);
  cr_assert_eq(st, 0, "job %s --json", id);
  return load_json(path);
}

/* The bytes of stream name of result are exactly want. */
static void assert_output(const json_t *result, const char *name, const uint8_t *want, size_t len) {
  uint8_t *got = NULL;
  size_t n = 0;
  int r = job_result_output_decode(result, name, RESULT_OUTPUT_MAX, &got, &n);
  cr_assert_eq(r, 0, "%s decodes: %s", name, strerror(-r));
  cr_assert_eq(n, len, "%s: %zu bytes, not %zu", name, n, len);
  cr_assert(memcmp(got, want, len) == 0, "%s is the job's bytes", name);
  free(got);
}

/* The receipt of job id, written by `job ID --receipt`, verifies offline
 * under the key `keys export-public` prints, and names the BLAKE2b-256 of
 * these stdout and stderr bytes. The receipt's text (verify-receipt's
 * stdout) goes to text (4096). */
static void assert_receipt_verifies(const char *id, const uint8_t *out, size_t out_len,
                                    const uint8_t *err, size_t err_len, char *text) {
  char trust[400], file[400];
  snprintf(trust, sizeof(trust), "%s/server.pub", e2e_dir);
  struct out *o = RUN(SERVER, "keys", "export-public", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "keys export-public: %s", o->err);
  FILE *f = fopen(trust, "w");
  fputs(o->out, f);
  fclose(f);
  free(o);
  snprintf(file, sizeof(file), "%s/%s.receipt", e2e_dir, id);
  o = RUN(SERVER, "job", id, "--receipt", file, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "job --receipt: %s", o->err);
  free(o);
  o = RUN(SERVER, "verify-receipt", file, "--trust", trust);
  cr_assert_eq(o->status, 0, "verify-receipt: %s", o->err);
  cr_assert_lt(strlen(o->out), 4096);
  memcpy(text, o->out, strlen(o->out) + 1);
  free(o);
  const uint8_t *bytes[2] = {out, err};
  size_t lens[2] = {out_len, err_len};
  const char *labels[2] = {"stdout:    blake2b-256 ", "stderr:    blake2b-256 "};
  for (int i = 0; i < 2; i++) {
    uint8_t h[32];
    char hex[65], line[128];
    crypto_generichash(h, sizeof(h), bytes[i], lens[i], NULL, 0);
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    snprintf(line, sizeof(line), "%s%s\n", labels[i], hex);
    cr_assert(strstr(text, line), "the receipt names the job's %.6s: %s", labels[i], text);
  }
}

static uint8_t *filled(uint8_t byte, size_t len) {
  uint8_t *b = malloc(len);
  cr_assert_not_null(b);
  memset(b, byte, len);
  return b;
}

Test(result_store, output_of_the_longest_json_at_the_largest_output_kb_is_recorded_and_verifies) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  /* 1 MiB per stream (output_kb 1024, the largest a manifest allows) of:
   * 0x01 (valid UTF-8, six characters each as a JSON string: 12 MiB
   * before it went to base64), and " and \ (two characters each: text,
   * 4 MiB and 4 bytes of strings together, above the old 4 MiB cap) */
  static const struct {
    const char *name;
    uint8_t out, err;
    const char *script;
  } rows[] = {
      {"controls", 0x01, 0x01,
       "head -c 1048576 /dev/zero | tr '\\000' '\\001'\n"
       "head -c 1048576 /dev/zero | tr '\\000' '\\001' >&2\n"},
      {"quotes", '"', '\\',
       "head -c 1048576 /dev/zero | tr '\\000' '\"'\n"
       "head -c 1048576 /dev/zero | tr '\\000' '\\\\' >&2\n"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    char manifest[300];
    snprintf(manifest, sizeof(manifest),
             "{\"name\":\"%s\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
             "\"limits\":{\"output_kb\":%d}}",
             rows[i].name, MANIFEST_OUTPUT_KB_MAX);
    char *pkg = pack(rows[i].name, manifest, rows[i].script);
    /* dispatch --wait prints the stored result */
    char path[400], *err = NULL;
    snprintf(path, sizeof(path), "%s/%s.wait.json", e2e_dir, rows[i].name);
    int st = run_to_file((const char *const[]){SERVER, "dispatch", "--user", "alice", "--device",
                                               a->id, pkg, "--wait", "--state", e2e_state, NULL},
                         path, &err);
    cr_assert_eq(st, 0, "%s: dispatch --wait: %s", rows[i].name, err);
    char id[33];
    const char *p = strstr(err, "job ");
    cr_assert(p, "%s", err);
    snprintf(id, sizeof(id), "%.32s", p + 4);
    free(err);
    uint8_t *out = filled(rows[i].out, MIB), *errb = filled(rows[i].err, MIB);
    json_t *waited = load_json(path);
    assert_output(waited, "stdout", out, MIB);
    assert_output(waited, "stderr", errb, MIB);
    json_decref(waited);
    /* the stored one, as `job --json` reads it */
    json_t *job = job_json(id);
    cr_assert_str_eq(json_string_value(json_object_get(job, "state")), "done", "%s", rows[i].name);
    json_t *res = json_object_get(job, "result");
    cr_assert(json_is_false(json_object_get(res, "stdout_truncated")));
    cr_assert(json_is_null(json_object_get(res, "error")));
    assert_output(res, "stdout", out, MIB);
    assert_output(res, "stderr", errb, MIB);
    char *text = json_dumps(res, JSON_COMPACT);
    cr_assert_leq(strlen(text), RESULT_JSON_MAX);
    free(text);
    json_decref(job);
    char receipt[4096];
    assert_receipt_verifies(id, out, MIB, errb, MIB, receipt);
    /* `job ID --follow` of a job that is over writes its bytes as they were */
    char followed[400];
    snprintf(followed, sizeof(followed), "%s/%s.followed", e2e_dir, rows[i].name);
    st = run_to_file(
        (const char *const[]){SERVER, "job", id, "--follow", "--state", e2e_state, NULL}, followed,
        NULL);
    cr_assert_eq(st, 0, "job --follow");
    FILE *f = fopen(followed, "r");
    uint8_t *back = malloc(MIB + 1);
    size_t got = fread(back, 1, MIB + 1, f);
    fclose(f);
    cr_assert(got == MIB && memcmp(back, out, MIB) == 0, "%s: --follow wrote %zu bytes",
              rows[i].name, got);
    free(back);
    free(out);
    free(errb);
    free(pkg);
  }
  cr_assert_eq(count_in(e2e_server_log, "result refused"), 0, "every result was recorded");
}

Test(result_store, a_result_the_store_cannot_take_is_recorded_without_its_output_and_not_resent,
     .init = setup_small_store) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  /* 100 KB of text: above the 64 KiB this daemon's store takes */
  char *pkg = pack("big",
                   "{\"name\":\"big\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"timeout_s\":3}",
                   "head -c 100000 /dev/zero | tr '\\000' x\necho to stderr >&2\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", "--device", a->id, pkg, "--wait",
                      "--state", e2e_state);
  /* the job failed, for that reason, and dispatch --wait says so */
  cr_assert_neq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->err, "result_unstorable"), "%s", o->err);
  char id[33];
  const char *p = strstr(o->err, "job ");
  cr_assert(p, "%s", o->err);
  snprintf(id, sizeof(id), "%.32s", p + 4);
  free(o);
  json_t *job = job_json(id);
  cr_assert_str_eq(json_string_value(json_object_get(job, "state")), "failed");
  cr_assert_str_eq(json_string_value(json_object_get(job, "error")), "result_unstorable");
  json_t *res = json_object_get(job, "result");
  cr_assert(json_is_object(res), "a result is stored");
  json_t *e = json_object_get(res, "error");
  cr_assert_str_eq(json_string_value(json_object_get(e, "code")), "result_unstorable");
  cr_assert(strstr(json_string_value(json_object_get(e, "message")), "65536"), "the message says "
                                                                               "why");
  /* the device's word is kept, its output is not */
  cr_assert_eq(json_integer_value(json_object_get(res, "exit_code")), 0);
  cr_assert(json_is_null(json_object_get(res, "stdout")));
  cr_assert(json_is_null(json_object_get(res, "stderr")));
  cr_assert_null(json_object_get(res, "stdout_base64"));
  cr_assert_null(json_object_get(res, "device_error"), "the device had no error");
  uint8_t *none;
  size_t n;
  cr_assert_eq(job_result_output_decode(res, "stdout", RESULT_OUTPUT_MAX, &none, &n), -ENODATA);
  json_decref(job);
  /* the receipt verifies and is the device's word on the output */
  uint8_t *out = filled('x', 100000);
  char receipt[4096];
  assert_receipt_verifies(id, out, 100000, (const uint8_t *)"to stderr\n", 10, receipt);
  cr_assert(strstr(receipt, "exit_code: 0\n"), "%s", receipt);
  free(out);
  /* the agent was told, and its spool let the result go */
  cr_assert(wait_in(a->log, "code=result_unstorable", 5000), "the agent was told why");
  char spooled[600];
  snprintf(spooled, sizeof(spooled), "%s/spool/%s.result", a->dir, id);
  bool gone = false;
  for (int t = 0; t < 5000 && !gone; t += 50) {
    gone = access(spooled, F_OK) != 0;
    if (!gone)
      msleep(50);
  }
  cr_assert(gone, "%s is gone from the spool", spooled);
  /* never sent again: not on a new session either, and past the job's
   * deadline (timeout 3 s + grace 5 s) it is still failed, not expired */
  e2e_stop(&a->pid, SIGTERM);
  start_agent(a);
  msleep(9000);
  cr_assert_eq(count_in(e2e_server_log, "result recorded without its output"), 1, "once");
  cr_assert_eq(count_in(e2e_server_log, "result refused"), 0);
  cr_assert_str_eq(job_state(id, NULL), "failed");
  free(pkg);
}
