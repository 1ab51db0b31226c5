/* server/keysync.c, the bundle functions of server/keys.c and
 * server/db_keys.c: a key rotation on one server of a cluster reaches the
 * others through the database, sealed under the cluster's Noise key.
 *
 * Unit level (both passes): a sealed bundle opens with the key it was
 * sealed under and the serial it claims, and with nothing else; cut short
 * or altered it does not open; an opened bundle installs only over a chain
 * it extends. The cluster_keys row is written only upward. End to end
 * (PostgreSQL only, real servers and a real agent): B takes up A's
 * rotation without a copy or a SIGHUP, and a job through B succeeds for an
 * agent that saw the rotation through A; a tampered row is refused with
 * one ERROR line and B keeps its keys and its jobs; an older row is
 * ignored. */
#include <sodium.h>

#include "e2e.h"
#include "e2e_cluster.h"
#include "server/db.h"
#include "server/keys.h"

static const char manifest[] =
    "{\"name\":\"r\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],\"timeout_s\":60}";

static void teardown(void) {
  e2e_stop(&cl_pid_b, SIGKILL);
  if (e2e_dir[0])
    e2e_teardown();
}

TestSuite(keysync, .fini = teardown, .timeout = 180);

/* ---- unit level ---- */

static void unit_setup(void) {
  cr_assert(sodium_init() >= 0);
  e2e_dir_new("cordon-keysync");
}

/* A new SQLite state at dir/name (init), its keys as init makes them. */
static void init_state(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", e2e_dir, name);
  struct out *o = RUN(SERVER, "init", "--state", out);
  cr_assert_eq(o->status, 0, "init %s: %s", name, o->err);
  free(o);
}

static void rotate(const char *state) {
  struct out *o = RUN(SERVER, "keys", "rotate", "--state", state);
  cr_assert_eq(o->status, 0, "keys rotate: %s", o->err);
  free(o);
}

static void copy_state(const char *from, char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", e2e_dir, name);
  char cmd[1000];
  snprintf(cmd, sizeof(cmd), "cp -a %s %s", from, out);
  cr_assert_eq(system(cmd), 0);
}

static uint8_t *noise_of(const char *state) {
  char path[600];
  snprintf(path, sizeof(path), "%s/%s", state, SERVER_NOISE_KEY_FILE);
  uint8_t *k = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(keys_read_file(path, KEYFILE_NOISE_SECRET, &k, &d), 0, "%s", d.msg);
  return k;
}

static char *slurp_file(const char *state, const char *rel) {
  char path[600];
  snprintf(path, sizeof(path), "%s/%s", state, rel);
  FILE *f = fopen(path, "r");
  if (!f)
    return strdup("");
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return strdup(buf);
}

static bool scratch_left(const char *state) {
  char cmd[700];
  snprintf(cmd, sizeof(cmd), "ls -a %s | grep -q keysync", state);
  return system(cmd) == 0;
}

Test(keysync, a_sealed_bundle_opens_only_with_its_key_and_serial_whole_and_unaltered) {
  unit_setup();
  char a[400];
  init_state(a, sizeof(a), "a");
  rotate(a);
  uint8_t *noise = noise_of(a), *sealed = NULL, *plain = NULL;
  size_t len = 0, plen = 0;
  uint64_t serial = 0;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_keys_bundle_seal(a, noise, &sealed, &len, &serial, &d), 0, "%s", d.msg);
  cr_assert_eq(serial, 1);
  /* the secrets are not in the sealed bytes */
  char *tk = slurp_file(a, SERVER_TICKET_KEY_FILE);
  cr_assert(strlen(tk) > 20);
  bool clear = false;
  for (size_t i = 0; i + 16 <= len && !clear; i++)
    clear = memcmp(sealed + i, tk + strlen(tk) - 20, 16) == 0;
  cr_expect(!clear, "a key file's text in clear");
  free(tk);
  cr_assert_eq(server_keys_bundle_open(noise, 1, sealed, len, &plain, &plen, &d), 0, "%s", d.msg);
  cr_expect(plen > 0 && plen + 40 == len);
  sodium_free(plain);
  /* another cluster's key */
  uint8_t other[32];
  randombytes_buf(other, sizeof(other));
  cr_expect_eq(server_keys_bundle_open(other, 1, sealed, len, &plain, &plen, &d), CORDON_E_CRYPTO);
  cr_expect(strstr(d.msg, "serial 1"), "%s", d.msg);
  /* another serial (the row's column changed) */
  cr_expect_eq(server_keys_bundle_open(noise, 2, sealed, len, &plain, &plen, &d), CORDON_E_CRYPTO);
  /* cut short, by one byte or to nothing */
  cr_expect_eq(server_keys_bundle_open(noise, 1, sealed, len - 1, &plain, &plen, &d),
               CORDON_E_CRYPTO);
  cr_expect_eq(server_keys_bundle_open(noise, 1, sealed, 10, &plain, &plen, &d), CORDON_E_CRYPTO);
  cr_expect(strstr(d.msg, "cut short"), "%s", d.msg);
  /* one bit anywhere: the nonce, the middle, the tag */
  size_t at[] = {3, len / 2, len - 1};
  for (size_t i = 0; i < 3; i++) {
    sealed[at[i]] ^= 1;
    cr_expect_eq(server_keys_bundle_open(noise, 1, sealed, len, &plain, &plen, &d), CORDON_E_CRYPTO,
                 "byte %zu flipped", at[i]);
    sealed[at[i]] ^= 1;
  }
  /* above the limit: refused before anything is allocated or decrypted */
  cr_expect_eq(
      server_keys_bundle_open(noise, 1, sealed, SERVER_KEYS_BUNDLE_MAX + 1, &plain, &plen, &d),
      CORDON_E_LIMIT);
  /* without a rotation there is nothing to seal */
  char fresh[400];
  init_state(fresh, sizeof(fresh), "fresh");
  uint8_t *fn = noise_of(fresh), *s2 = NULL;
  cr_expect_eq(server_keys_bundle_seal(fresh, fn, &s2, &len, &serial, &d), CORDON_E_CONFIG_INVALID);
  sodium_free(fn);
  free(sealed);
  sodium_free(noise);
}

/* Open what a seals (serial 1 or more) for the tests below. */
static void open_of(const char *a, uint8_t **plain, size_t *plen, uint64_t *serial) {
  uint8_t *noise = noise_of(a), *sealed = NULL;
  size_t len = 0;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_keys_bundle_seal(a, noise, &sealed, &len, serial, &d), 0, "%s", d.msg);
  cr_assert_eq(server_keys_bundle_open(noise, *serial, sealed, len, plain, plen, &d), 0, "%s",
               d.msg);
  free(sealed);
  sodium_free(noise);
}

Test(keysync, a_bundle_installs_over_the_chain_it_extends_and_nothing_else) {
  unit_setup();
  char a[400], b[400], c[400], e[400];
  init_state(a, sizeof(a), "a");
  copy_state(a, b, sizeof(b), "b"); /* init --keys-from, before any rotation */
  copy_state(a, c, sizeof(c), "c");
  copy_state(a, e, sizeof(e), "e");
  rotate(a);
  rotate(a);
  uint8_t *plain = NULL;
  size_t plen = 0;
  uint64_t serial = 0;
  open_of(a, &plain, &plen, &serial);
  cr_assert_eq(serial, 2);
  struct server_keyring own, ka, kb;
  struct cordon_diag d = {{0}};
  /* b (serial 0) takes it: the same keys and chain as a, the files' modes */
  cr_assert_eq(server_keyring_load(b, &own, &d), 0, "%s", d.msg);
  cr_assert_eq(server_keys_bundle_install(b, plain, plen, serial, &own, &d), 0, "%s", d.msg);
  server_keyring_release(&own);
  cr_assert_eq(server_keyring_load(a, &ka, &d), 0, "%s", d.msg);
  cr_assert_eq(server_keyring_load(b, &kb, &d), 0, "%s", d.msg);
  cr_expect_eq(kb.n_chain, 2);
  cr_expect(memcmp(ka.ticket_pk, kb.ticket_pk, 32) == 0, "b signs with a's new ticket key");
  cr_expect(memcmp(ka.publisher_pk, kb.publisher_pk, sizeof(ka.publisher_pk)) == 0);
  const char *same[] = {SERVER_KEYS_FILE, SERVER_TICKET_KEY_FILE, SERVER_PUBLISHER_KEY_FILE,
                        SERVER_PUBLISHER_PUB_FILE};
  for (size_t i = 0; i < 4; i++) {
    char *x = slurp_file(a, same[i]), *y = slurp_file(b, same[i]);
    cr_expect_str_eq(x, y, "%s", same[i]);
    free(x);
    free(y);
    char p[600];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", b, same[i]);
    cr_assert_eq(lstat(p, &st), 0);
    cr_expect_eq(st.st_mode & 0777, strstr(same[i], ".pub") ? 0644u : 0600u, "%s: %o", same[i],
                 st.st_mode & 0777);
  }
  cr_expect(!scratch_left(b), "the scratch directory went");
  /* once more over b (now at 2): not newer, refused, nothing written */
  cr_expect_eq(server_keys_bundle_install(b, plain, plen, serial, &kb, &d),
               CORDON_E_CONFIG_INVALID);
  cr_expect(strstr(d.msg, "not newer"), "%s", d.msg);
  server_keyring_release(&ka);
  server_keyring_release(&kb);
  /* c rotated on its own (a fork): a's bundle does not extend its chain */
  rotate(c);
  char *before = slurp_file(c, SERVER_KEYS_FILE);
  cr_assert_eq(server_keyring_load(c, &own, &d), 0, "%s", d.msg);
  cr_expect_eq(server_keys_bundle_install(c, plain, plen, serial, &own, &d),
               CORDON_E_CONFIG_INVALID);
  cr_expect(strstr(d.msg, "does not extend"), "%s", d.msg);
  /* a bundle claiming another serial than its chain's */
  cr_expect_eq(server_keys_bundle_install(c, plain, plen, 3, &own, &d), CORDON_E_CONFIG_INVALID);
  server_keyring_release(&own);
  char *after = slurp_file(c, SERVER_KEYS_FILE);
  cr_expect_str_eq(before, after, "c's keys.json unchanged");
  cr_expect(!scratch_left(c));
  free(before);
  free(after);
  /* malformed plaintext (a bundle sealed by a buggy or hostile member) */
  cr_assert_eq(server_keyring_load(b, &own, &d), 0);
  uint8_t junk[64] = "CKB1";
  cr_expect_eq(server_keys_bundle_install(b, junk, sizeof(junk), 3, &own, &d),
               CORDON_E_CONFIG_INVALID);
  cr_expect_eq(server_keys_bundle_install(b, plain, plen - 1, serial, &own, &d),
               CORDON_E_CONFIG_INVALID);
  server_keyring_release(&own);
  /* a keys.json naming key files the bundle does not carry (its format:
   * "CKB1", u32 count, then u16 name length, name, u32 length, bytes) */
  char *reg = slurp_file(a, SERVER_KEYS_FILE);
  size_t rl = strlen(reg);
  uint8_t *hand = calloc(1, 23 + rl);
  memcpy(hand, "CKB1\0\0\0\1\0\x09keys.json", 19);
  hand[19] = (uint8_t)(rl >> 24), hand[20] = (uint8_t)(rl >> 16), hand[21] = (uint8_t)(rl >> 8);
  hand[22] = (uint8_t)rl;
  memcpy(hand + 23, reg, rl);
  cr_assert_eq(server_keyring_load(e, &own, &d), 0);
  cr_expect_eq(server_keys_bundle_install(e, hand, 23 + rl, 2, &own, &d), CORDON_E_CONFIG_INVALID);
  cr_expect(strstr(d.msg, "not in it"), "%s", d.msg);
  server_keyring_release(&own);
  char p[600];
  snprintf(p, sizeof(p), "%s/%s", e, SERVER_KEYS_FILE);
  cr_expect_neq(access(p, F_OK), 0, "nothing installed in e");
  cr_expect(!scratch_left(e));
  free(hand);
  free(reg);
  /* a daemon whose memory is older than its own disk (its rotation just
   * committed, the SIGHUP on its way): nothing written, it reloads */
  cr_assert_eq(server_keyring_load(e, &own, &d), 0);
  char *a_before = slurp_file(a, SERVER_KEYS_FILE);
  cr_expect_eq(server_keys_bundle_install(a, plain, plen, serial, &own, &d), -EALREADY);
  char *a_after = slurp_file(a, SERVER_KEYS_FILE);
  cr_expect_str_eq(a_before, a_after);
  cr_expect(!scratch_left(a));
  free(a_before);
  free(a_after);
  server_keyring_release(&own);
  sodium_free(plain);
}

Test(keysync, the_row_is_written_only_upward) {
  unit_setup();
  char s[400];
  snprintf(s, sizeof(s), "%s/db", e2e_dir);
  cr_assert_eq(mkdir(s, 0700), 0);
  pg_test_attach(s);
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(s, SERVER_DB_CREATE, &db, &d), 0, "%s", d.msg);
  uint64_t serial = 0;
  uint8_t *got = NULL;
  size_t len = 0;
  cr_expect_eq(server_db_cluster_keys_serial(db, &serial, &d), -ENOENT);
  cr_expect_eq(server_db_cluster_keys_get(db, &serial, &got, &len, &d), -ENOENT);
  const uint8_t two[] = "two", one[] = "one", three[] = "three";
  cr_expect_eq(server_db_cluster_keys_put(db, 2, two, sizeof(two), &d), 0, "%s", d.msg);
  cr_expect_eq(server_db_cluster_keys_put(db, 1, one, sizeof(one), &d), -EEXIST);
  cr_expect_eq(server_db_cluster_keys_put(db, 2, one, sizeof(one), &d), -EEXIST);
  cr_assert_eq(server_db_cluster_keys_get(db, &serial, &got, &len, &d), 0, "%s", d.msg);
  cr_expect_eq(serial, 2);
  cr_expect(len == sizeof(two) && memcmp(got, two, len) == 0, "the first write of 2 stayed");
  free(got);
  cr_expect_eq(server_db_cluster_keys_put(db, 3, three, sizeof(three), &d), 0, "%s", d.msg);
  cr_expect_eq(server_db_cluster_keys_serial(db, &serial, &d), 0);
  cr_expect_eq(serial, 3);
  cr_expect_eq(server_db_cluster_keys_put(db, 4, three, SERVER_DB_CLUSTER_KEYS_MAX + 1, &d),
               -EINVAL);
  if (pg_test_base()) { /* a row above the limit (written by hand): not sent, refused */
    cr_assert_eq(pg_test_exec("UPDATE cluster_keys SET sealed = decode(repeat('00', 4194305),"
                              " 'hex')"),
                 0);
    got = NULL;
    cr_expect_eq(server_db_cluster_keys_get(db, &serial, &got, &len, &d), CORDON_E_LIMIT);
    cr_expect(got == NULL);
  }
  server_db_close(db);
  pg_test_drop();
}

/* ---- two servers on one PostgreSQL database ---- */

/* A and B (init --keys-from A) on one new database; nothing runs yet. */
static void cluster_setup(void) {
  if (!pg_test_base())
    cr_skip_test("a cluster needs PostgreSQL (CORDON_TEST_PG)");
  unit_setup();
  cl_make();
}

/* The agent, A stopped, on B. */
static void agent_to_b(struct e2e_agent *a) {
  int before = count_in(cl_log_b, "msg=\"device connected\"");
  e2e_stop(&e2e_server_pid, SIGTERM);
  if (a->pid < 0) {
    const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
    a->pid = spawn_logged(a->log, argv);
  }
  cr_assert(cl_wait_count(cl_log_b, "msg=\"device connected\"", before + 1, 20000),
            "the agent reached B");
}

/* A job through B, waited for: its final state. */
static void job_through_b_is(const char *want, const char *what) {
  snprintf(e2e_state, sizeof(e2e_state), "%.290s", cl_state_b); /* B's key signs, B is asked */
  char *pkg = pack("r", manifest, "echo through-b\n");
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state", cl_state_b);
  cr_assert_eq(o->status, 0, "dispatch through B: %s", o->err);
  char id[33];
  job_id_of(o, id);
  free(o);
  bool ok = wait_state(id, want, 20000);
  json_t *job = NULL;
  const char *st = job_state(id, &job);
  cr_assert(ok, "%s: the job through B is %s (%s), not %s", what, st,
            json_string_value(json_object_get(job, "error")), want);
  json_decref(job);
  snprintf(e2e_state, sizeof(e2e_state), "%s/state-a", e2e_dir);
  free(pkg);
}

#define INSTALLED "msg=\"cluster: keys of another server installed from the database\""
#define REFUSED "msg=\"cluster: the keys in the database were refused; this server keeps its own\""

Test(keysync, a_rotation_on_one_server_reaches_the_other_and_its_jobs_succeed) {
  cluster_setup();
  cl_start_a();
  cl_start_b();
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  start_agent(a);
  cr_assert(wait_in(e2e_server_log, "msg=\"device connected\"", 15000));
  struct out *o = RUN(SERVER, "keys", "rotate", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "keys rotate on A: %s", o->err);
  cr_expect(strstr(o->err, "other servers install announcement 1"), "%s", o->err);
  free(o);
  cr_assert(wait_in(a->log, "server keys updated", 10000), "the agent saw the rotation through A");
  /* no copy, no SIGHUP: B reads it from the database at its next check */
  cr_assert(wait_in(cl_log_b, INSTALLED, 3 * 3000 + 2000), "B installed A's rotation");
  cr_expect(wait_in(cl_log_b, "serial=1", 100));
  char *ja = slurp_file(e2e_state, SERVER_KEYS_FILE),
       *jb = slurp_file(cl_state_b, SERVER_KEYS_FILE);
  cr_expect_str_eq(ja, jb, "B's keys.json is A's");
  free(ja);
  free(jb);
  cr_expect_eq(count_in(cl_log_b, REFUSED), 0);
  cr_expect(!scratch_left(cl_state_b));
  /* the agent, which now trusts only the new ticket key, moves to B */
  e2e_stop(&a->pid, SIGKILL);
  agent_to_b(a);
  job_through_b_is("done", "after the rotation through A");
}

Test(keysync, a_tampered_row_is_refused_and_the_server_keeps_its_keys) {
  cluster_setup();
  cl_start_a();
  struct e2e_agent *a = pair_agent(0, "box", NULL); /* not running: it keeps the keys of init */
  struct out *o = RUN(SERVER, "keys", "rotate", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "keys rotate on A: %s", o->err);
  free(o);
  /* one bit of the sealed bytes: a database writer's edit */
  cr_assert_eq(pg_test_exec("UPDATE cluster_keys SET sealed = set_byte(sealed, 40,"
                            " get_byte(sealed, 40) # 1)"),
               0);
  cl_start_b(); /* B checks at its start, before it listens */
  cr_assert(wait_in(cl_log_b, REFUSED, 2000), "B refused the tampered row");
  cr_expect(wait_in(cl_log_b, "does not open", 100));
  cr_expect(wait_in(cl_log_b, "serial=1", 100));
  char p[600];
  snprintf(p, sizeof(p), "%s/%s", cl_state_b, SERVER_KEYS_FILE);
  cr_expect_neq(access(p, F_OK), 0, "nothing written: B has no keys.json");
  cr_expect(!scratch_left(cl_state_b));
  /* B keeps working with its keys, for an agent that has the same */
  agent_to_b(a);
  job_through_b_is("done", "with B's own keys");
  msleep(2 * 3000 + 500);
  cr_expect_eq(count_in(cl_log_b, REFUSED), 1, "refused once, not at every check");
  cr_expect_eq(count_in(cl_log_b, INSTALLED), 0);
  /* the row made whole again is taken at the next check, and announced */
  cr_assert_eq(pg_test_exec("UPDATE cluster_keys SET sealed = set_byte(sealed, 40,"
                            " get_byte(sealed, 40) # 1)"),
               0);
  cr_assert(wait_in(cl_log_b, INSTALLED, 3000 + 2000), "B installed the whole row");
  cr_assert(wait_in(a->log, "server keys updated", 5000), "B announced it to its agent");
  job_through_b_is("done", "with the rotated keys");
}

Test(keysync, an_older_row_is_ignored) {
  cluster_setup();
  char c[400], cmd_path[600];
  copy_state(e2e_state, c, sizeof(c), "state-c"); /* A's keys before any rotation */
  cl_start_a();
  cl_start_b();
  struct out *o = RUN(SERVER, "keys", "rotate", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  cr_assert_eq(pg_test_exec("CREATE TABLE old_keys AS SELECT * FROM cluster_keys"), 0);
  o = RUN(SERVER, "keys", "rotate", "--ticket", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  cr_assert(wait_in(cl_log_b, "serial=2", 3 * 3000 + 2000), "B installed announcement 2");
  char *before = slurp_file(cl_state_b, SERVER_KEYS_FILE);
  int installed = count_in(cl_log_b, INSTALLED);
  /* an authentic but older row (a replay of serial 1) */
  cr_assert_eq(pg_test_exec("UPDATE cluster_keys SET serial = o.serial, sealed = o.sealed"
                            " FROM old_keys o"),
               0);
  /* a server whose chain is newer writes its own back */
  bool back = false;
  for (int t = 0; t < 3 * 3000 + 2000 && !back; t += 100) {
    back = pg_test_exec("DO $$BEGIN IF (SELECT serial FROM cluster_keys) <> 2"
                        " THEN RAISE 'not 2'; END IF; END$$") == 0;
    msleep(100);
  }
  cr_expect(back, "the row is at 2 again");
  cr_expect(count_in(cl_log_b, "written to the database") +
                count_in(e2e_server_log, "written to the database") >=
            1);
  char *after = slurp_file(cl_state_b, SERVER_KEYS_FILE);
  cr_expect_str_eq(before, after, "B's keys are unchanged");
  cr_expect_eq(count_in(cl_log_b, INSTALLED), installed, "nothing installed");
  cr_expect_eq(count_in(cl_log_b, REFUSED), 0, "nor refused");
  free(before);
  free(after);
  /* a rotation from a state behind the database is refused: its chain
   * would fork the cluster's */
  o = RUN(SERVER, "keys", "rotate", "--state", c);
  cr_expect_neq(o->status, 0);
  cr_expect(strstr(o->err, "older than the cluster's"), "%s", o->err);
  free(o);
  snprintf(cmd_path, sizeof(cmd_path), "%s/%s", c, SERVER_KEYS_FILE);
  cr_expect_neq(access(cmd_path, F_OK), 0, "nothing rotated in C");
}
