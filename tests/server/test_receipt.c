/* End to end, the real daemon and a real agent on loopback: device-signed
 * receipts (docs/protocol/receipt.md). A dispatched job's receipt, written
 * by `job ID --receipt`, verifies offline with `verify-receipt --trust` and
 * the key `keys export-public` prints; a file with any byte changed does
 * not; a device whose signing key the server does not know registers one
 * at its next connection. */
#include "e2e.h"

#include <sodium.h>
#include <sqlite3.h>

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  e2e_setup();
}

TestSuite(receipt, .init = setup, .fini = e2e_teardown, .timeout = 180);

static const char hello_manifest[] =
    "{\"name\":\"hello\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

static void write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "w");
  cr_assert(f, "%s", path);
  cr_assert_eq(fwrite(data, 1, len, f), len);
  fclose(f);
}

static size_t read_file(const char *path, uint8_t *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  cr_assert(f, "%s", path);
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

/* The server's ticket public key, as an operator exports it. */
static void export_trust(char path[400]) {
  snprintf(path, 400, "%s/server.pub", e2e_dir);
  struct out *o = RUN(SERVER, "keys", "export-public", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "keys export-public: %s", o->err);
  cr_assert(strncmp(o->out, "cordon-ticket-v1 ", 17) == 0, "%s", o->out);
  write_file(path, o->out, strlen(o->out));
  free(o);
}

/* Dispatch the hello package to a and wait until it is done. */
static void run_job(const struct e2e_agent *a, char id[33]) {
  char *pkg = pack("hello", hello_manifest, "echo \"hi $1\"\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", "--device", a->id, pkg, "--state",
                      e2e_state, "--", "there");
  job_id_of(o, id);
  free(o);
  free(pkg);
  cr_assert(wait_state(id, "done", 20000), "state %s", job_state(id, NULL));
}

static void export_receipt(const char *id, char path[400]) {
  snprintf(path, 400, "%s/%s.receipt", e2e_dir, id);
  struct out *o = RUN(SERVER, "job", id, "--receipt", path, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "job --receipt: %s", o->err);
  free(o);
}

static struct out *verify(const char *file, const char *trust) {
  return RUN(SERVER, "verify-receipt", file, "--trust", trust);
}

Test(receipt, a_dispatched_jobs_receipt_verifies_offline_and_a_changed_byte_does_not) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char id[33], trust[400], file[400];
  run_job(a, id);
  export_trust(trust);
  export_receipt(id, file);
  /* offline: the daemon and the agent are gone */
  e2e_stop(&a->pid, SIGKILL);
  e2e_stop(&e2e_server_pid, SIGKILL);
  struct out *o = verify(file, trust);
  cr_assert_eq(o->status, 0, "verify-receipt: %s", o->err);
  char want[128];
  snprintf(want, sizeof(want), "valid: receipt of job %s\n", id);
  cr_assert(strstr(o->out, want), "%s", o->out);
  snprintf(want, sizeof(want), "device:    %s\nuser:      alice\n", a->id);
  cr_assert(strstr(o->out, want), "%s", o->out);
  cr_assert(strstr(o->out, "exit_code: 0\n"), "%s", o->out);
  uint8_t h[32];
  char hex[65];
  crypto_generichash(h, sizeof(h), (const uint8_t *)"hi there\n", 9, NULL, 0);
  sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
  cr_assert(strstr(o->out, hex), "stdout's hash is the output's: %s", o->out);
  cr_assert(strstr(o->out, "sandbox:   requested isolated, level "), "%s", o->out);
  free(o);

  uint8_t buf[4096];
  size_t n = read_file(file, buf, sizeof(buf));
  cr_assert(n > 400 && n < 1200, "a receipt file is %zu bytes", n);
  char bad[420];
  snprintf(bad, sizeof(bad), "%s.bad", file);
  for (size_t i = 0; i < n; i++) {
    buf[i] ^= (uint8_t)(1u << (i % 8));
    write_file(bad, buf, n);
    buf[i] ^= (uint8_t)(1u << (i % 8));
    o = verify(bad, trust);
    cr_assert_eq(o->status, 1, "byte %zu changed: exit %d", i, o->status);
    cr_assert(strncmp(o->err, "cordon-server: receipt invalid: ", 32) == 0, "%s", o->err);
    cr_assert_eq(strchr(o->err, '\n'), o->err + strlen(o->err) - 1, "one line: %s", o->err);
    free(o);
  }
  /* cut short, and one byte more */
  write_file(bad, buf, n - 1);
  o = verify(bad, trust);
  cr_assert_eq(o->status, 1);
  free(o);
  buf[n] = 0;
  write_file(bad, buf, n + 1);
  o = verify(bad, trust);
  cr_assert_eq(o->status, 1);
  free(o);
  /* the right file under another server's key */
  uint8_t pk[32], sk[64];
  crypto_sign_keypair(pk, sk);
  char line[200], other[420];
  char b64[sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_ORIGINAL)];
  sodium_bin2base64(b64, sizeof(b64), pk, sizeof(pk), sodium_base64_VARIANT_ORIGINAL);
  snprintf(line, sizeof(line), "cordon-ticket-v1 %s\n", b64);
  snprintf(other, sizeof(other), "%s/other.pub", e2e_dir);
  write_file(other, line, strlen(line));
  o = verify(file, other);
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "statement"), "%s", o->err);
  free(o);
  o = verify(file, trust);
  cr_assert_eq(o->status, 0, "the original still verifies: %s", o->err);
  free(o);
}

/* The server keeps each session's signing key once read and each job's
 * ticket while it is in flight: two devices' jobs, one after the other on
 * the same sessions, are each checked with their own device's key and
 * ticket, and every receipt verifies as that device's. */
Test(receipt, each_devices_results_are_checked_with_its_own_key_and_ticket) {
  struct e2e_agent *a = pair_agent(0, "one", NULL), *b = pair_agent(1, "two", NULL);
  start_agent(a);
  start_agent(b);
  char ids[4][33], trust[400], file[400];
  run_job(a, ids[0]);
  run_job(b, ids[1]);
  run_job(a, ids[2]); /* the key read for the first result, kept */
  run_job(b, ids[3]);
  export_trust(trust);
  for (int i = 0; i < 4; i++) {
    export_receipt(ids[i], file);
    struct out *o = verify(file, trust);
    cr_assert_eq(o->status, 0, "job %d: verify-receipt: %s", i, o->err);
    char want[128];
    snprintf(want, sizeof(want), "device:    %s\n", (i % 2 ? b : a)->id);
    cr_assert(strstr(o->out, want), "job %d: %s", i, o->out);
    free(o);
  }
  cr_assert_eq(count_in(e2e_server_log, "msg=\"result refused\""), 0);
}

Test(receipt, a_device_without_a_registered_key_registers_one_at_its_next_connection) {
  struct e2e_agent *a = pair_agent(0, "old", NULL);
  start_agent(a);
  e2e_stop(&a->pid, SIGTERM);
  /* as a device paired before receipts: no key on either side */
  char path[600];
  sqlite3 *h = NULL;
  sqlite3_stmt *st;
  if (pg_test_base()) {
    cr_assert_eq(pg_test_exec("UPDATE devices SET sign_key = NULL"), 0);
    cr_assert_eq(pg_test_exec("DO $$BEGIN IF (SELECT count(*) FROM devices WHERE sign_key IS NULL)"
                              " <> 1 THEN RAISE 'not one'; END IF; END$$"),
                 0);
  } else {
    snprintf(path, sizeof(path), "%s/cordon.db", e2e_state);
    cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    cr_assert_eq(sqlite3_exec(h, "UPDATE devices SET sign_key = NULL", NULL, NULL, NULL),
                 SQLITE_OK);
    cr_assert_eq(
        sqlite3_prepare_v2(h, "SELECT count(*) FROM devices WHERE sign_key IS NULL", -1, &st, NULL),
        SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
  }
  snprintf(path, sizeof(path), "%s/signing.key", a->dir);
  cr_assert_eq(unlink(path), 0);

  e2e_log_restart(e2e_server_log);
  start_agent(a);
  char want[128];
  snprintf(want, sizeof(want), "msg=\"device signing key registered\" device=%s", a->id);
  cr_assert(wait_in(e2e_server_log, want, 5000), "registered at the next connection");
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0, "the agent made a new key");
  cr_assert_eq(sb.st_mode & 0777, 0600);
  if (pg_test_base()) {
    cr_assert_eq(pg_test_exec("DO $$BEGIN IF (SELECT length(sign_key) FROM devices) <> 32"
                              " THEN RAISE 'no key'; END IF; END$$"),
                 0);
  } else {
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT length(sign_key) FROM devices", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 32);
    sqlite3_finalize(st);
    sqlite3_close(h);
  }

  /* and its receipts verify */
  char id[33], trust[400], file[400];
  run_job(a, id);
  export_trust(trust);
  export_receipt(id, file);
  struct out *o = verify(file, trust);
  cr_assert_eq(o->status, 0, "verify-receipt: %s", o->err);
  free(o);
  /* a reconnect offers the same key: nothing to register again */
  e2e_stop(&a->pid, SIGTERM);
  start_agent(a);
  msleep(500);
  cr_assert_eq(count_in(e2e_server_log, want), 1);
}

Test(receipt, a_job_lost_in_an_agent_restart_gets_an_unbound_receipt) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *pkg = pack("slow", hello_manifest, "sleep 30\n");
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", "--device", a->id, pkg, "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  free(pkg);
  cr_assert(wait_state(id, "running", 20000), "state %s", job_state(id, NULL));
  e2e_stop(&a->pid, SIGKILL); /* the agent loses the job, and its ticket */
  start_agent(a);
  json_t *job = NULL;
  for (int i = 0; i < 200; i++) {
    json_decref(job);
    job_state(id, &job);
    if (json_is_object(json_object_get(job, "result")))
      break;
    msleep(50);
  }
  cr_assert(json_is_object(json_object_get(job, "result")), "the agent's result was recorded");
  json_decref(job);
  char trust[400], file[400];
  export_trust(trust);
  export_receipt(id, file);
  o = verify(file, trust);
  cr_assert_eq(o->status, 0, "verify-receipt: %s", o->err);
  cr_assert(strstr(o->out, "ticket:    none"), "%s", o->out);
  cr_assert(strstr(o->out, "ran:       no\n"), "%s", o->out);
  cr_assert(strstr(o->out, "error:     agent_restarted\n"), "%s", o->out);
  free(o);
}
