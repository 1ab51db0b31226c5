#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/db.h"
#include "server/db_internal.h" /* the statements, for their query plans */
#include "tests/server/pg_test.h"

static char state_dir[256];

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  snprintf(state_dir, sizeof(state_dir), "/tmp/cordon-test-db-XXXXXX");
  cr_assert_not_null(mkdtemp(state_dir));
  pg_test_attach(state_dir);
}

static void teardown(void) {
  pg_test_drop();
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state_dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(db, .init = setup, .fini = teardown);

#define TICKET_TEST_LEN 161 /* a version-1 ticket body */

static struct server_db *open_db(void) {
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  int err = server_db_open(state_dir, SERVER_DB_CREATE, &db, &d);
  cr_assert_eq(err, 0, "open: %d %s", err, d.msg);
  cr_assert_not_null(db);
  return db;
}

static int64_t add_user(struct server_db *db, const char *name) {
  int64_t id = 0;
  struct cordon_diag d = {{0}};
  int err = server_db_user_add(db, name, &id, &d);
  cr_assert_eq(err, 0, "user add %s: %d %s", name, err, d.msg);
  cr_assert_gt(id, 0);
  return id;
}

static void mint(struct server_db *db, int64_t user, char code[SERVER_DB_CODE_TEXT_SIZE],
                 char id[SERVER_DB_CODE_ID_SIZE]) {
  struct cordon_diag d = {{0}};
  int64_t expires = 0;
  int err = server_db_code_mint(db, user, SERVER_DB_CODE_TTL_DEFAULT, code, &expires, &d);
  cr_assert_eq(err, 0, "mint: %d %s", err, d.msg);
  uint8_t key[SERVER_DB_CODE_KEY_SIZE];
  cr_assert_eq(server_db_code_derive(code, id, key), 0);
}

static const struct server_db_device_info laptop = {
    .name = "laptop",
    .platform = "linux",
    .has_level = true,
    .best_level = SANDBOX_LEVEL_ISOLATED,
    .facts_json = "{\"bwrap\":\"0.8.0\"}",
    .max_jobs = 4,
};

static void add_device(struct server_db *db, int64_t user, uint8_t key_byte,
                       char out_id[CORDON_ID_HEX_SIZE]) {
  uint8_t pk[32];
  memset(pk, key_byte, sizeof(pk));
  struct cordon_diag d = {{0}};
  int err = server_db_device_add(db, user, pk, &laptop, out_id, &d);
  cr_assert_eq(err, 0, "device add: %d %s", err, d.msg);
}

static void add_job(struct server_db *db, int64_t user, const char *device,
                    char out_id[CORDON_ID_HEX_SIZE]) {
  uint8_t hash[32] = {7};
  struct server_db_job_new j = {
      .user_id = user, .device_id = device, .package_hash = hash, .args_json = "[\"world\"]"};
  struct cordon_diag d = {{0}};
  int err = server_db_job_add(db, &j, out_id, &d);
  cr_assert_eq(err, 0, "job add: %d %s", err, d.msg);
}

/* --- open and migrations --- */

Test(db, fresh_dir_migrates_to_current_and_reopens) {
  struct server_db *db = open_db();
  int v = -1;
  cr_assert_eq(server_db_schema_version(db, &v, NULL), 0);
  cr_assert_eq(v, SERVER_DB_SCHEMA_VERSION);
  add_user(db, "alice");
  server_db_close(db);

  struct server_db *again = NULL;
  cr_assert_eq(server_db_open(state_dir, 0, &again, NULL), 0);
  cr_assert_eq(server_db_schema_version(again, &v, NULL), 0);
  cr_assert_eq(v, SERVER_DB_SCHEMA_VERSION);
  struct server_db_user u;
  cr_assert_eq(server_db_user_get_by_name(again, "alice", &u, NULL), 0);
  cr_assert_str_eq(u.name, "alice");
  server_db_close(again);
  /* PostgreSQL numbers its own schema: its version 6 is SQLite's 14 */
  if (pg_test_base())
    cr_assert_eq(pg_test_exec("DO $$BEGIN IF (SELECT version FROM schema_version) <> 6"
                              " THEN RAISE 'not version 6'; END IF; END$$"),
                 0);
}

/* A fresh database, read with SQLite itself. */
static sqlite3 *fresh_db_read_only(void) {
  server_db_close(open_db());
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_DB_FILE);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  return h;
}

Test(db, opens_in_wal_mode) {
  PG_TEST_SQLITE_ONLY();
  sqlite3 *h = fresh_db_read_only();
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "wal");
  sqlite3_finalize(st);
  sqlite3_close(h);
}

Test(db, missing_database_without_create_is_enoent) {
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, 0, &db, &d), -ENOENT);
  cr_assert_null(db);
  cr_assert(strstr(d.msg, "init"), "%s", d.msg);
  char missing[512];
  snprintf(missing, sizeof(missing), "%s/nope", state_dir);
  cr_assert_eq(server_db_open(missing, SERVER_DB_CREATE, &db, &d), -ENOENT);
  cr_assert(strstr(d.msg, "does not exist"), "%s", d.msg);
}

Test(db, refuses_a_newer_schema) {
  server_db_close(open_db());
  if (pg_test_base()) {
    cr_assert_eq(pg_test_exec("UPDATE schema_version SET version = 99"), 0);
    struct server_db *db = NULL;
    struct cordon_diag d = {{0}};
    cr_assert_eq(server_db_open(state_dir, 0, &db, &d), CORDON_E_CONFIG_INVALID);
    cr_assert(strstr(d.msg, "99") && strstr(d.msg, "newer"), "%s", d.msg);
    return;
  }
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_DB_FILE);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(h, "UPDATE schema_version SET version = 99", NULL, NULL, NULL),
               SQLITE_OK);
  sqlite3_close(h);
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, 0, &db, &d), CORDON_E_CONFIG_INVALID);
  cr_assert_null(db);
  cr_assert(strstr(d.msg, "99") && strstr(d.msg, "newer"), "%s", d.msg);
}

Test(db, refuses_a_foreign_database) {
  if (pg_test_base()) {
    cr_assert_eq(pg_test_exec("CREATE TABLE t (x int)"), 0);
    struct server_db *db = NULL;
    struct cordon_diag d = {{0}};
    cr_assert_eq(server_db_open(state_dir, SERVER_DB_CREATE, &db, &d), CORDON_E_CONFIG_INVALID);
    cr_assert(strstr(d.msg, "not a cordon database"), "%s", d.msg);
    return;
  }
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_DB_FILE);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(h, "CREATE TABLE t (x)", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(h);
  chmod(path, 0600);
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, 0, &db, &d), CORDON_E_CONFIG_INVALID);
  cr_assert(strstr(d.msg, "not a cordon database"), "%s", d.msg);
}

Test(db, database_file_is_0600_whatever_the_umask) {
  PG_TEST_SQLITE_ONLY();
  mode_t old = umask(0);
  struct server_db *db = open_db();
  umask(old);
  add_user(db, "alice"); /* makes the -wal file exist too */
  char path[512];
  struct stat st;
  snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_DB_FILE);
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
  snprintf(path, sizeof(path), "%s/%s-wal", state_dir, SERVER_DB_FILE);
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600, "wal mode %o", st.st_mode & 0777);
  server_db_close(db);
}

Test(db, refuses_a_database_readable_by_others) {
  server_db_close(open_db());
  char path[512];
  /* PostgreSQL: the file naming it, which may hold a password */
  snprintf(path, sizeof(path), "%s/%s", state_dir,
           pg_test_base() ? SERVER_DB_URL_FILE : SERVER_DB_FILE);
  cr_assert_eq(chmod(path, 0644), 0);
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, 0, &db, &d), CORDON_E_CONFIG_INVALID);
  cr_assert(strstr(d.msg, "chmod 600"), "%s", d.msg);
}

Test(db, close_accepts_null) {
  server_db_close(NULL);
  server_db_user_list_release(NULL);
  server_db_device_release(NULL);
  server_db_device_list_release(NULL);
  server_db_job_release(NULL);
  server_db_job_list_release(NULL);
  server_db_code_wipe(NULL);
}

/* --- users --- */

Test(db, user_add_refuses_a_duplicate_name) {
  struct server_db *db = open_db();
  add_user(db, "alice");
  int64_t id = 42;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_user_add(db, "alice", &id, &d), -EEXIST);
  cr_assert_eq(id, 42, "out param written on failure");
  cr_assert(strstr(d.msg, "alice"), "%s", d.msg);
  server_db_close(db);
}

Test(db, user_add_refuses_bad_names) {
  struct server_db *db = open_db();
  static const char *const bad[] = {"",
                                    "-alice",
                                    "a b",
                                    "al'ice",
                                    "a;DROP TABLE users",
                                    "\x1b[31m",
                                    ("0123456789012345678901234567890123456789"
                                     "012345678901234567890123456")}; /* one name, 67 bytes */
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    cr_assert_eq(server_db_user_add(db, bad[i], NULL, NULL), -EINVAL, "%s", bad[i]);
  add_user(db, "a.b_c-9");
  server_db_close(db);
}

Test(db, user_list_and_get) {
  struct server_db *db = open_db();
  int64_t a = add_user(db, "alice"), b = add_user(db, "bob");
  struct server_db_user_list l = {0};
  cr_assert_eq(server_db_user_list(db, &l, NULL), 0);
  cr_assert_eq(l.count, 2);
  cr_assert_eq(l.items[0].id, a);
  cr_assert_str_eq(l.items[1].name, "bob");
  server_db_user_list_release(&l);
  server_db_user_list_release(&l);
  struct server_db_user u;
  cr_assert_eq(server_db_user_get(db, b, &u, NULL), 0);
  cr_assert_str_eq(u.name, "bob");
  cr_assert_eq(server_db_user_get(db, 999, &u, NULL), -ENOENT);
  cr_assert_eq(server_db_user_get_by_name(db, "carol", &u, NULL), -ENOENT);
  server_db_close(db);
}

/* --- pairing codes --- */

Test(db, code_format_and_derive) {
  struct server_db *db = open_db();
  int64_t u = add_user(db, "alice");
  char code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
  mint(db, u, code, id);
  cr_assert_eq(strlen(code), 47, "%s", code);
  for (size_t i = 0; i < strlen(code); i++) {
    if (i % 6 == 5)
      cr_assert_eq(code[i], '-', "%s", code);
    else
      cr_assert(strchr("0123456789abcdefghjkmnpqrstvwxyz", code[i]), "%s", code);
  }
  uint8_t k1[32], k2[32];
  char id1[SERVER_DB_CODE_ID_SIZE], id2[SERVER_DB_CODE_ID_SIZE];
  cr_assert_eq(server_db_code_derive(code, id1, k1), 0);
  /* typed in capitals, without dashes, with spaces: the same code */
  char typed[64];
  size_t n = 0;
  for (size_t i = 0; code[i]; i++)
    if (code[i] != '-')
      typed[n++] = (char)(code[i] >= 'a' && code[i] <= 'z' ? code[i] - 32 : code[i]);
  typed[n] = '\0';
  cr_assert_eq(server_db_code_derive(typed, id2, k2), 0);
  cr_assert_str_eq(id1, id2);
  cr_assert_eq(memcmp(k1, k2, 32), 0);
  cr_assert_eq(strncmp(id1, code, 5), 0);
  cr_assert_eq(strncmp(id1 + 5, code + 6, 5), 0);

  struct server_db_code c;
  cr_assert_eq(server_db_code_lookup(db, id1, &c, NULL), 0);
  cr_assert_eq(c.user_id, u);
  cr_assert_eq(memcmp(c.key, k1, 32), 0);
  cr_assert_eq(c.attempts_left, SERVER_DB_CODE_ATTEMPTS);
  cr_assert_eq(c.state, SERVER_DB_CODE_LIVE);
  cr_assert(c.usable);
  cr_assert_not(c.expired);
  cr_assert_eq(c.expires - c.created, SERVER_DB_CODE_TTL_DEFAULT);
  server_db_code_wipe(&c);

  cr_assert_eq(server_db_code_derive("short", id2, k2), -EINVAL);
  cr_assert_eq(server_db_code_derive(NULL, id2, k2), -EINVAL);
  char bad[64];
  snprintf(bad, sizeof(bad), "%su", code); /* 'u' is not in the alphabet */
  cr_assert_eq(server_db_code_derive(bad, id2, k2), -EINVAL);
  server_db_close(db);
}

Test(db, code_secret_is_not_stored) {
  struct server_db *db = open_db();
  int64_t u = add_user(db, "alice");
  char code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
  mint(db, u, code, id);
  server_db_close(db);
  char norm[64];
  size_t n = 0;
  for (size_t i = 0; code[i]; i++)
    if (code[i] != '-')
      norm[n++] = code[i];
  norm[n] = '\0';
  if (pg_test_base()) {
    /* the whole row as text (bytea in hex, and as escaped text) */
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT 1 FROM pair_codes p WHERE p::text LIKE '%%%.10s%%'"
             " OR encode(p.key, 'escape') LIKE '%%%.10s%%'",
             norm + SERVER_DB_CODE_ID_CHARS, norm + SERVER_DB_CODE_ID_CHARS);
    char probe[400];
    snprintf(probe, sizeof(probe), "DO $$BEGIN IF EXISTS (%s) THEN RAISE 'secret'; END IF; END$$",
             sql);
    cr_assert_eq(pg_test_exec(probe), 0, "a column holds the secret");
    return;
  }
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_DB_FILE);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(h, "SELECT * FROM pair_codes", -1, &st, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  for (int i = 0; i < sqlite3_column_count(st); i++) {
    const void *b = sqlite3_column_blob(st, i);
    int len = sqlite3_column_bytes(st, i);
    cr_assert(!b || !memmem(b, (size_t)len, norm + SERVER_DB_CODE_ID_CHARS, 10),
              "column %d holds the secret", i);
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
}

Test(db, code_expires) {
  struct server_db *db = open_db();
  int64_t u = add_user(db, "alice");
  server_db_set_clock(db, 1000000);
  char code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
  int64_t expires = 0;
  cr_assert_eq(server_db_code_mint(db, u, 60, code, &expires, NULL), 0);
  cr_assert_eq(expires, 1000060);
  uint8_t key[32];
  cr_assert_eq(server_db_code_derive(code, id, key), 0);
  server_db_set_clock(db, 1000060);
  struct server_db_code c;
  cr_assert_eq(server_db_code_lookup(db, id, &c, NULL), 0);
  cr_assert(c.expired);
  cr_assert_not(c.usable);
  int64_t who = 0;
  cr_assert_eq(server_db_code_consume(db, id, &who, NULL), -EACCES);
  cr_assert_eq(who, 0);
  server_db_set_clock(db, 1000059);
  cr_assert_eq(server_db_code_consume(db, id, &who, NULL), 0);
  cr_assert_eq(who, u);
  cr_assert_eq(server_db_code_consume(db, id, &who, NULL), -EACCES, "single use");
  cr_assert_eq(server_db_code_lookup(db, id, &c, NULL), 0);
  cr_assert_eq(c.state, SERVER_DB_CODE_USED);
  static const uint8_t zero[32];
  cr_assert_eq(memcmp(c.key, zero, 32), 0, "key dropped once used");
  cr_assert_eq(server_db_code_mint(db, u, 0, code, NULL, NULL), -EINVAL);
  cr_assert_eq(server_db_code_mint(db, u, SERVER_DB_CODE_TTL_MAX + 1, code, NULL, NULL), -EINVAL);
  server_db_close(db);
}

Test(db, code_burns_after_five_failed_attempts) {
  struct server_db *db = open_db();
  int64_t u = add_user(db, "alice");
  char code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
  mint(db, u, code, id);
  for (int i = SERVER_DB_CODE_ATTEMPTS - 1; i >= 0; i--) {
    int left = -1;
    cr_assert_eq(server_db_code_fail(db, id, &left, NULL), 0);
    cr_assert_eq(left, i);
  }
  struct server_db_code c;
  cr_assert_eq(server_db_code_lookup(db, id, &c, NULL), 0);
  cr_assert_eq(c.state, SERVER_DB_CODE_BURNED);
  cr_assert_eq(c.attempts_left, 0);
  cr_assert_not(c.usable);
  int left = 99;
  cr_assert_eq(server_db_code_fail(db, id, &left, NULL), -EACCES);
  cr_assert_eq(left, 99);
  cr_assert_eq(server_db_code_consume(db, id, NULL, NULL), -EACCES);
  cr_assert_eq(server_db_code_lookup(db, "0000000000", &c, NULL), -ENOENT);
  cr_assert_eq(server_db_code_lookup(db, "x'; --", &c, NULL), -ENOENT);
  server_db_close(db);
}

Test(db, live_code_cap_per_user) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice"), bob = add_user(db, "bob");
  char code[SERVER_DB_CODE_TEXT_SIZE], ids[SERVER_DB_CODE_LIVE_MAX][SERVER_DB_CODE_ID_SIZE];
  server_db_set_clock(db, 5000);
  for (int i = 0; i < SERVER_DB_CODE_LIVE_MAX; i++)
    mint(db, alice, code, ids[i]);
  struct cordon_diag d = {{0}};
  char untouched[SERVER_DB_CODE_TEXT_SIZE] = "untouched";
  cr_assert_eq(server_db_code_mint(db, alice, 600, untouched, NULL, &d), CORDON_E_LIMIT);
  cr_assert_str_eq(untouched, "untouched");
  cr_assert(strstr(d.msg, "alice"), "%s", d.msg);
  char bob_id[SERVER_DB_CODE_ID_SIZE];
  mint(db, bob, code, bob_id); /* the cap is per user */
  /* a used code frees a slot */
  cr_assert_eq(server_db_code_consume(db, ids[0], NULL, NULL), 0);
  mint(db, alice, code, ids[0]);
  cr_assert_eq(server_db_code_mint(db, alice, 600, code, NULL, NULL), CORDON_E_LIMIT);
  /* so does a burned one */
  for (int i = 0; i < SERVER_DB_CODE_ATTEMPTS; i++)
    cr_assert_eq(server_db_code_fail(db, ids[1], NULL, NULL), 0);
  mint(db, alice, code, ids[1]);
  cr_assert_eq(server_db_code_mint(db, alice, 600, code, NULL, NULL), CORDON_E_LIMIT);
  /* and expired ones */
  server_db_set_clock(db, 5000 + 601);
  for (int i = 0; i < SERVER_DB_CODE_LIVE_MAX; i++)
    mint(db, alice, code, ids[i]);
  cr_assert_eq(server_db_code_mint(db, 999, 600, code, NULL, NULL), -ENOENT);
  /* codes expired more than a week ago are purged at the next mint */
  struct server_db_code c;
  cr_assert_eq(server_db_code_lookup(db, ids[0], &c, NULL), 0);
  server_db_set_clock(db, 5000 + 601 + 600 + 7 * 24 * 3600 + 1);
  mint(db, alice, code, ids[1]);
  cr_assert_eq(server_db_code_lookup(db, ids[0], &c, NULL), -ENOENT);
  cr_assert_eq(server_db_code_lookup(db, bob_id, &c, NULL), 0, "only the minting user's");
  server_db_close(db);
}

struct race {
  const char *code_id;
  pthread_barrier_t *barrier;
  bool pair; /* pair_complete instead of consume */
  uint8_t key_byte;
  int result;
};

static void *race_consume(void *arg) {
  struct race *r = arg;
  struct server_db *db = NULL;
  if (server_db_open(state_dir, 0, &db, NULL) != 0) {
    r->result = -9999;
    pthread_barrier_wait(r->barrier);
    return NULL;
  }
  pthread_barrier_wait(r->barrier);
  if (r->pair) {
    uint8_t pk[32];
    memset(pk, r->key_byte, sizeof(pk));
    char dev[CORDON_ID_HEX_SIZE];
    r->result = server_db_pair_complete(db, r->code_id, pk, &laptop, dev, NULL, NULL);
  } else {
    int64_t who;
    r->result = server_db_code_consume(db, r->code_id, &who, NULL);
  }
  server_db_close(db);
  return NULL;
}

static void run_race(bool pair) {
  enum { THREADS = 6, ROUNDS = 10 };
  struct server_db *db = open_db();
  for (int round = 0; round < ROUNDS; round++) {
    char name[32], code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
    snprintf(name, sizeof(name), "user%d", round);
    int64_t u = add_user(db, name);
    mint(db, u, code, id);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, THREADS);
    pthread_t t[THREADS];
    struct race r[THREADS];
    for (int i = 0; i < THREADS; i++) {
      r[i] = (struct race){.code_id = id,
                           .barrier = &barrier,
                           .pair = pair,
                           .key_byte = (uint8_t)(round * THREADS + i + 1)};
      cr_assert_eq(pthread_create(&t[i], NULL, race_consume, &r[i]), 0);
    }
    int winners = 0;
    for (int i = 0; i < THREADS; i++) {
      pthread_join(t[i], NULL);
      if (r[i].result == 0)
        winners++;
      else
        cr_assert_eq(r[i].result, -EACCES, "loser got %d", r[i].result);
    }
    pthread_barrier_destroy(&barrier);
    cr_assert_eq(winners, 1, "round %d: %d winners", round, winners);
    if (pair) {
      struct server_db_device_list l = {0};
      cr_assert_eq(server_db_device_list(db, u, &l, NULL), 0);
      cr_assert_eq(l.count, 1, "exactly one device paired");
      server_db_device_list_release(&l);
    }
  }
  server_db_close(db);
}

Test(db, racing_consumers_exactly_one_wins) {
  run_race(false);
}

Test(db, racing_pairings_exactly_one_device) {
  run_race(true);
}

Test(db, racing_processes_exactly_one_pairs) {
  enum { PROCS = 4, ROUNDS = 5 };
  struct server_db *db = open_db();
  for (int round = 0; round < ROUNDS; round++) {
    char name[32], code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
    snprintf(name, sizeof(name), "user%d", round);
    int64_t u = add_user(db, name);
    mint(db, u, code, id);
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
      pids[i] = fork();
      cr_assert_neq(pids[i], -1);
      if (pids[i] == 0) {
        /* a separate process with its own connection */
        close(go[1]);
        struct server_db *mine = NULL;
        if (server_db_open(state_dir, 0, &mine, NULL) != 0)
          _exit(3);
        char c;
        if (read(go[0], &c, 1) != 0) /* released when the parent closes the pipe */
          _exit(3);
        uint8_t pk[32];
        memset(pk, round * PROCS + i + 1, sizeof(pk));
        char dev[CORDON_ID_HEX_SIZE];
        int err = server_db_pair_complete(mine, id, pk, &laptop, dev, NULL, NULL);
        server_db_close(mine);
        _exit(err == 0 ? 0 : err == -EACCES ? 1 : 2);
      }
    }
    close(go[0]);
    usleep(50000);
    close(go[1]);
    int winners = 0;
    for (int i = 0; i < PROCS; i++) {
      int st = 0;
      cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
      cr_assert(WIFEXITED(st));
      cr_assert(WEXITSTATUS(st) <= 1, "child status %d", WEXITSTATUS(st));
      winners += WEXITSTATUS(st) == 0;
    }
    cr_assert_eq(winners, 1, "round %d: %d winners", round, winners);
    struct server_db_device_list l = {0};
    cr_assert_eq(server_db_device_list(db, u, &l, NULL), 0);
    cr_assert_eq(l.count, 1);
    server_db_device_list_release(&l);
  }
  server_db_close(db);
}

static void *open_fresh(void *arg) {
  pthread_barrier_t *barrier = arg;
  struct server_db *db = NULL;
  pthread_barrier_wait(barrier);
  intptr_t err = server_db_open(state_dir, SERVER_DB_CREATE, &db, NULL);
  server_db_close(db);
  return (void *)err;
}

Test(db, concurrent_first_opens_all_migrate_once) {
  enum { THREADS = 6 };
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, THREADS);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, open_fresh, &barrier), 0);
  for (int i = 0; i < THREADS; i++) {
    void *ret = NULL;
    pthread_join(t[i], &ret);
    cr_assert_eq((intptr_t)ret, 0, "open %d: %d", i, (int)(intptr_t)ret);
  }
  pthread_barrier_destroy(&barrier);
  struct server_db *db = open_db();
  int v = 0;
  cr_assert_eq(server_db_schema_version(db, &v, NULL), 0);
  cr_assert_eq(v, SERVER_DB_SCHEMA_VERSION);
  server_db_close(db);
}

Test(db, pair_complete_binds_the_device_to_the_code_minter) {
  struct server_db *db = open_db();
  add_user(db, "mallory");
  int64_t alice = add_user(db, "alice");
  char code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
  mint(db, alice, code, id);
  uint8_t pk[32] = {1};
  char dev[CORDON_ID_HEX_SIZE];
  int64_t owner = 0;
  cr_assert_eq(server_db_pair_complete(db, id, pk, &laptop, dev, &owner, NULL), 0);
  cr_assert_eq(owner, alice);
  struct server_db_device d;
  cr_assert_eq(server_db_device_get(db, dev, &d, NULL), 0);
  cr_assert_eq(d.user_id, alice);
  cr_assert_str_eq(d.owner, "alice");
  server_db_device_release(&d);
  server_db_close(db);
}

Test(db, failed_pair_complete_leaves_the_code_live) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 0x11, dev);
  char code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
  mint(db, alice, code, id);
  uint8_t pk[32];
  memset(pk, 0x11, sizeof(pk)); /* already paired key */
  char dev2[CORDON_ID_HEX_SIZE] = "untouched";
  cr_assert_eq(server_db_pair_complete(db, id, pk, &laptop, dev2, NULL, NULL), -EEXIST);
  cr_assert_str_eq(dev2, "untouched");
  struct server_db_code c;
  cr_assert_eq(server_db_code_lookup(db, id, &c, NULL), 0);
  cr_assert(c.usable, "rolled back: still usable");
  struct server_db_device_info bad = laptop;
  bad.name = "evil\x1b]0;title\x07";
  pk[0] = 0x22;
  cr_assert_eq(server_db_pair_complete(db, id, pk, &bad, dev2, NULL, NULL), -EINVAL);
  cr_assert_eq(server_db_code_lookup(db, id, &c, NULL), 0);
  cr_assert(c.usable);
  server_db_close(db);
}

/* --- devices --- */

Test(db, device_add_get_and_fields) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  server_db_set_clock(db, 777);
  char id[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 0x33, id);
  cr_assert_eq(strlen(id), 32);
  struct server_db_device d;
  cr_assert_eq(server_db_device_get(db, id, &d, NULL), 0);
  cr_assert_str_eq(d.id, id);
  cr_assert_str_eq(d.name, "laptop");
  cr_assert_str_eq(d.platform, "linux");
  cr_assert(d.has_level);
  cr_assert_eq(d.best_level, SANDBOX_LEVEL_ISOLATED);
  cr_assert_str_eq(d.downgrade_reason, "");
  cr_assert_str_eq(d.facts_json, "{\"bwrap\":\"0.8.0\"}");
  cr_assert_eq(d.max_jobs, 4);
  cr_assert_eq(d.state, SERVER_DB_DEVICE_ACTIVE);
  cr_assert_not(d.online);
  cr_assert_eq(d.last_seen, 0);
  cr_assert_eq(d.created, 777);
  server_db_device_release(&d);
  server_db_device_release(&d);

  uint8_t pk[32];
  memset(pk, 0x33, sizeof(pk));
  cr_assert_eq(server_db_device_get_by_key(db, pk, &d, NULL), 0);
  cr_assert_str_eq(d.id, id);
  server_db_device_release(&d);
  char other[CORDON_ID_HEX_SIZE];
  cr_assert_eq(server_db_device_add(db, alice, pk, &laptop, other, NULL), -EEXIST);
  pk[0] = 0;
  cr_assert_eq(server_db_device_get_by_key(db, pk, &d, NULL), -ENOENT);
  cr_assert_eq(server_db_device_get(db, "00000000000000000000000000000000", &d, NULL), -ENOENT);
  cr_assert_eq(server_db_device_get(db, "nope", &d, NULL), -ENOENT);
  cr_assert_eq(server_db_device_add(db, 999, pk, &laptop, other, NULL), -ENOENT);
  server_db_close(db);
}

Test(db, device_info_is_validated) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  uint8_t pk[32] = {9};
  char id[CORDON_ID_HEX_SIZE];
  struct server_db_device_info i = laptop;
  i.name = "";
  cr_assert_eq(server_db_device_add(db, alice, pk, &i, id, NULL), -EINVAL);
  i.name = "\xc2\x9b"; /* C1 CSI */
  cr_assert_eq(server_db_device_add(db, alice, pk, &i, id, NULL), -EINVAL);
  i.name = "\xff";
  cr_assert_eq(server_db_device_add(db, alice, pk, &i, id, NULL), -EINVAL);
  i.name = "caf\xc3\xa9 laptop";
  cr_assert_eq(server_db_device_add(db, alice, pk, &i, id, NULL), 0);
  i.platform = "Linux!";
  cr_assert_eq(server_db_device_update_info(db, id, &i, NULL), -EINVAL);
  i.platform = "linux";
  i.facts_json = "[1]";
  cr_assert_eq(server_db_device_update_info(db, id, &i, NULL), -EINVAL);
  i.facts_json = NULL;
  i.max_jobs = 5000;
  cr_assert_eq(server_db_device_update_info(db, id, &i, NULL), -EINVAL);
  server_db_close(db);
}

Test(db, device_online_seen_and_info) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char id[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 0x44, id);
  server_db_set_clock(db, 1234);
  cr_assert_eq(server_db_device_set_online(db, id, true, NULL), 0);
  server_db_set_clock(db, 1300);
  cr_assert_eq(server_db_device_touch(db, id, NULL), 0);
  struct server_db_device_info i = {.platform = "windows",
                                    .has_level = true,
                                    .best_level = SANDBOX_LEVEL_CONTAINED,
                                    .downgrade_reason = "appcontainer_unavailable",
                                    .facts_json = "{}",
                                    .max_jobs = 2};
  cr_assert_eq(server_db_device_update_info(db, id, &i, NULL), 0);
  struct server_db_device d;
  cr_assert_eq(server_db_device_get(db, id, &d, NULL), 0);
  cr_assert(d.online);
  cr_assert_eq(d.last_seen, 1300);
  cr_assert_str_eq(d.name, "laptop", "NULL name keeps the name");
  cr_assert_str_eq(d.platform, "windows");
  cr_assert_eq(d.best_level, SANDBOX_LEVEL_CONTAINED);
  cr_assert_str_eq(d.downgrade_reason, "appcontainer_unavailable");
  cr_assert_eq(d.max_jobs, 2);
  server_db_device_release(&d);
  cr_assert_eq(server_db_device_set_all_offline(db, NULL), 0);
  cr_assert_eq(server_db_device_get(db, id, &d, NULL), 0);
  cr_assert_not(d.online);
  server_db_device_release(&d);
  cr_assert_eq(server_db_device_touch(db, "00000000000000000000000000000000", NULL), -ENOENT);
  server_db_close(db);
}

Test(db, revoke_is_terminal) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char id[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 0x55, id);
  cr_assert_eq(server_db_device_set_online(db, id, true, NULL), 0);
  cr_assert_eq(server_db_device_revoke(db, id, NULL), 0);
  struct server_db_device d;
  cr_assert_eq(server_db_device_get(db, id, &d, NULL), 0);
  cr_assert_eq(d.state, SERVER_DB_DEVICE_REVOKED);
  cr_assert_not(d.online);
  server_db_device_release(&d);
  cr_assert_eq(server_db_device_revoke(db, id, NULL), -EALREADY);
  cr_assert_eq(server_db_device_set_online(db, id, true, NULL), -EPERM);
  cr_assert_eq(server_db_device_set_online(db, id, false, NULL), 0);
  cr_assert_eq(server_db_device_revoke(db, "ffffffffffffffffffffffffffffffff", NULL), -ENOENT);
  /* its key stays known: pairing it again is refused */
  uint8_t pk[32];
  memset(pk, 0x55, sizeof(pk));
  char again[CORDON_ID_HEX_SIZE];
  cr_assert_eq(server_db_device_add(db, alice, pk, &laptop, again, NULL), -EEXIST);
  server_db_close(db);

  /* even raw SQL cannot bring it back */
  if (pg_test_base()) {
    cr_assert_neq(pg_test_exec("UPDATE devices SET state = 'active'"), 0);
    return;
  }
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_DB_FILE);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
  cr_assert_neq(sqlite3_exec(h, "UPDATE devices SET state = 'active'", NULL, NULL, NULL),
                SQLITE_OK);
  sqlite3_close(h);
}

Test(db, device_list_all_and_by_user) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice"), bob = add_user(db, "bob");
  char id[CORDON_ID_HEX_SIZE];
  add_device(db, bob, 1, id);
  add_device(db, alice, 2, id);
  add_device(db, alice, 3, id);
  struct server_db_device_list l = {0};
  cr_assert_eq(server_db_device_list(db, 0, &l, NULL), 0);
  cr_assert_eq(l.count, 3);
  cr_assert_str_eq(l.items[0].owner, "alice");
  cr_assert_str_eq(l.items[2].owner, "bob");
  server_db_device_list_release(&l);
  cr_assert_eq(server_db_device_list(db, bob, &l, NULL), 0);
  cr_assert_eq(l.count, 1);
  server_db_device_list_release(&l);
  cr_assert_eq(server_db_device_list(db, alice, &l, NULL), 0);
  cr_assert_eq(l.count, 2);
  server_db_device_list_release(&l);
  server_db_close(db);
}

/* --- jobs --- */

Test(db, job_add_and_get) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], job[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  add_job(db, alice, dev, job);
  struct server_db_job j;
  cr_assert_eq(server_db_job_get(db, job, &j, NULL), 0);
  cr_assert_str_eq(j.id, job);
  cr_assert_str_eq(j.user, "alice");
  cr_assert_str_eq(j.device_id, dev);
  cr_assert_eq(j.package_hash[0], 7);
  cr_assert_str_eq(j.args_json, "[\"world\"]");
  cr_assert_eq(j.state, SERVER_DB_JOB_QUEUED);
  cr_assert_null(j.result_json);
  cr_assert_str_eq(j.error, "");
  server_db_job_release(&j);
  uint8_t hash[32] = {0};
  struct server_db_job_new bad = {.user_id = alice, .package_hash = hash, .args_json = "{}"};
  char out[CORDON_ID_HEX_SIZE];
  cr_assert_eq(server_db_job_add(db, &bad, out, NULL), -EINVAL);
  bad.args_json = NULL;
  bad.device_id = "ffffffffffffffffffffffffffffffff";
  cr_assert_eq(server_db_job_add(db, &bad, out, NULL), -ENOENT);
  bad.device_id = NULL; /* no device chosen */
  cr_assert_eq(server_db_job_add(db, &bad, out, NULL), 0);
  cr_assert_eq(server_db_job_get(db, out, &j, NULL), 0);
  cr_assert_str_eq(j.device_id, "");
  cr_assert_str_eq(j.args_json, "[]");
  server_db_job_release(&j);
  cr_assert_eq(server_db_job_get(db, "0123456789abcdef0123456789abcdef", &j, NULL), -ENOENT);
  server_db_close(db);
}

/* The live count (the STATUS line, each scrape) sees queued, sent and
 * running as the full count does, and nothing else. */
Test(db, job_count_live_counts_the_live_states_only) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], job[5][CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  for (int i = 0; i < 5; i++)
    add_job(db, alice, dev, job[i]);
  /* 0 stays queued; 1 sent; 2 running; 3 done; 4 cancelled */
  for (int i = 1; i < 5; i++)
    cr_assert_eq(
        server_db_job_transition(db, job[i], SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL, NULL),
        0);
  for (int i = 2; i < 4; i++)
    cr_assert_eq(
        server_db_job_transition(db, job[i], SERVER_DB_JOB_SENT, SERVER_DB_JOB_RUNNING, NULL, NULL),
        0);
  cr_assert_eq(
      server_db_job_transition(db, job[3], SERVER_DB_JOB_RUNNING, SERVER_DB_JOB_DONE, NULL, NULL),
      0);
  cr_assert_eq(server_db_job_transition(db, job[4], SERVER_DB_JOB_SENT, SERVER_DB_JOB_CANCELLED,
                                        "cancelled", NULL),
               0);
  size_t live[SERVER_DB_JOB_STATE_COUNT], all[SERVER_DB_JOB_STATE_COUNT];
  cr_assert_eq(server_db_job_count_live(db, live, NULL), 0);
  cr_assert_eq(server_db_job_count_by_state(db, all, NULL), 0);
  for (int s = 0; s < SERVER_DB_JOB_STATE_COUNT; s++) {
    bool is_live =
        s == SERVER_DB_JOB_QUEUED || s == SERVER_DB_JOB_SENT || s == SERVER_DB_JOB_RUNNING;
    cr_assert_eq(live[s], is_live ? all[s] : 0, "state %s", server_db_job_state_name(s));
    cr_assert_eq(all[s], s <= SERVER_DB_JOB_DONE || s == SERVER_DB_JOB_CANCELLED ? 1u : 0u,
                 "state %s", server_db_job_state_name(s));
  }
  server_db_close(db);
}

Test(db, job_transition_table) {
  for (int f = 0; f <= SERVER_DB_JOB_CANCELLED; f++)
    for (int t = 0; t <= SERVER_DB_JOB_CANCELLED; t++) {
      bool final = f >= SERVER_DB_JOB_DONE;
      bool want = !final && ((f == SERVER_DB_JOB_QUEUED && t == SERVER_DB_JOB_SENT) ||
                             (f == SERVER_DB_JOB_SENT && t == SERVER_DB_JOB_RUNNING) ||
                             (f == SERVER_DB_JOB_RUNNING && t == SERVER_DB_JOB_DONE) ||
                             t == SERVER_DB_JOB_FAILED || t == SERVER_DB_JOB_EXPIRED ||
                             t == SERVER_DB_JOB_CANCELLED);
      cr_assert_eq(server_db_job_transition_is_legal(f, t), want, "%d -> %d", f, t);
    }
  for (int s = 0; s <= SERVER_DB_JOB_CANCELLED; s++) {
    enum server_db_job_state back;
    cr_assert_eq(server_db_job_state_parse(server_db_job_state_name(s), &back), 0);
    cr_assert_eq((int)back, s);
  }
  cr_assert_null(server_db_job_state_name(99));
}

Test(db, job_transitions_legal_and_illegal) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], job[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  add_job(db, alice, dev, job);
  cr_assert_eq(
      server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_RUNNING, NULL, NULL),
      -EPERM);
  cr_assert_eq(
      server_db_job_transition(db, job, SERVER_DB_JOB_SENT, SERVER_DB_JOB_RUNNING, NULL, NULL),
      -ESTALE, "expected from-state does not hold");
  cr_assert_eq(
      server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL, NULL), 0);
  cr_assert_eq(
      server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL, NULL),
      -ESTALE, "only once");
  cr_assert_eq(
      server_db_job_transition(db, job, SERVER_DB_JOB_SENT, SERVER_DB_JOB_RUNNING, NULL, NULL), 0);
  cr_assert_eq(server_db_job_transition(db, job, SERVER_DB_JOB_RUNNING, SERVER_DB_JOB_CANCELLED,
                                        "cancelled", NULL),
               0);
  struct server_db_job j;
  cr_assert_eq(server_db_job_get(db, job, &j, NULL), 0);
  cr_assert_eq(j.state, SERVER_DB_JOB_CANCELLED);
  cr_assert_str_eq(j.error, "cancelled");
  server_db_job_release(&j);
  cr_assert_eq(
      server_db_job_transition(db, job, SERVER_DB_JOB_CANCELLED, SERVER_DB_JOB_FAILED, NULL, NULL),
      -EPERM, "final is final");
  cr_assert_eq(server_db_job_transition(db, "ffffffffffffffffffffffffffffffff",
                                        SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL, NULL),
               -ENOENT);
  server_db_close(db);
}

Test(db, result_is_recorded_exactly_once) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], other[CORDON_ID_HEX_SIZE], job[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  add_device(db, alice, 2, other);
  add_job(db, alice, dev, job);
  const char *res = "{\"exit_code\":0,\"error\":null}";
  cr_assert_eq(server_db_job_record_result(db, job, dev, SERVER_DB_JOB_DONE, NULL, res, NULL, NULL),
               -ESTALE, "queued: never sent");
  server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL, NULL);
  server_db_job_transition(db, job, SERVER_DB_JOB_SENT, SERVER_DB_JOB_RUNNING, NULL, NULL);
  cr_assert_eq(
      server_db_job_record_result(db, job, other, SERVER_DB_JOB_DONE, NULL, res, NULL, NULL),
      -ENOENT, "another device's result");
  cr_assert_eq(
      server_db_job_record_result(db, job, dev, SERVER_DB_JOB_DONE, NULL, "[]", NULL, NULL),
      -EINVAL);
  enum server_db_job_state after = SERVER_DB_JOB_QUEUED;
  cr_assert_eq(
      server_db_job_record_result(db, job, dev, SERVER_DB_JOB_DONE, NULL, res, &after, NULL), 0);
  cr_assert_eq(after, SERVER_DB_JOB_DONE);
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_job_record_result(db, job, dev, SERVER_DB_JOB_FAILED, "spawn_failed",
                                           "{\"exit_code\":1}", NULL, &d),
               -EALREADY);
  struct server_db_job j;
  cr_assert_eq(server_db_job_get(db, job, &j, NULL), 0);
  cr_assert_eq(j.state, SERVER_DB_JOB_DONE);
  cr_assert_str_eq(j.result_json, res);
  cr_assert_str_eq(j.error, "");
  server_db_job_release(&j);
  server_db_close(db);
}

Test(db, result_after_cancel_keeps_the_final_state) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], job[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  add_job(db, alice, dev, job);
  server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL, NULL);
  server_db_job_transition(db, job, SERVER_DB_JOB_SENT, SERVER_DB_JOB_CANCELLED, "cancelled", NULL);
  enum server_db_job_state after;
  cr_assert_eq(server_db_job_record_result(db, job, dev, SERVER_DB_JOB_FAILED, "cancelled",
                                           "{\"error\":{\"code\":\"cancelled\"}}", &after, NULL),
               0);
  cr_assert_eq(after, SERVER_DB_JOB_CANCELLED);
  server_db_close(db);
}

struct result_race {
  const char *job, *dev;
  pthread_barrier_t *barrier;
  int result;
};

static void *race_result(void *arg) {
  struct result_race *r = arg;
  struct server_db *db = NULL;
  int err = server_db_open(state_dir, 0, &db, NULL);
  pthread_barrier_wait(r->barrier);
  r->result = err ? err
                  : server_db_job_record_result(db, r->job, r->dev, SERVER_DB_JOB_DONE, NULL,
                                                "{\"exit_code\":0}", NULL, NULL);
  server_db_close(db);
  return NULL;
}

Test(db, racing_results_exactly_one_recorded) {
  enum { THREADS = 6 };
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], job[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  add_job(db, alice, dev, job);
  server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL, NULL);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, THREADS);
  pthread_t t[THREADS];
  struct result_race r[THREADS];
  for (int i = 0; i < THREADS; i++) {
    r[i] = (struct result_race){.job = job, .dev = dev, .barrier = &barrier};
    pthread_create(&t[i], NULL, race_result, &r[i]);
  }
  int ok = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    if (r[i].result == 0)
      ok++;
    else
      cr_assert_eq(r[i].result, -EALREADY, "%d", r[i].result);
  }
  pthread_barrier_destroy(&barrier);
  cr_assert_eq(ok, 1);
  server_db_close(db);
}

Test(db, job_lists) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice"), bob = add_user(db, "bob");
  char dev[CORDON_ID_HEX_SIZE], j1[CORDON_ID_HEX_SIZE], j2[CORDON_ID_HEX_SIZE],
      j3[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  server_db_set_clock(db, 100);
  add_job(db, alice, dev, j1);
  server_db_set_clock(db, 200);
  add_job(db, alice, dev, j2);
  uint8_t hash[32] = {0};
  struct server_db_job_new b = {.user_id = bob, .package_hash = hash, .deadline = 250};
  server_db_set_clock(db, 300);
  cr_assert_eq(server_db_job_add(db, &b, j3, NULL), 0);
  server_db_job_transition(db, j1, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL, NULL);
  server_db_job_transition(db, j2, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_FAILED, "device_lost", NULL);

  struct server_db_job_list l = {0};
  cr_assert_eq(server_db_job_list(db, 0, 0, &l, NULL), 0);
  cr_assert_eq(l.count, 3);
  cr_assert_str_eq(l.items[0].id, j3, "newest first");
  server_db_job_list_release(&l);
  cr_assert_eq(server_db_job_list(db, alice, 1, &l, NULL), 0);
  cr_assert_eq(l.count, 1);
  cr_assert_str_eq(l.items[0].id, j2);
  server_db_job_list_release(&l);
  cr_assert_eq(server_db_job_list_active_on_device(db, dev, &l, NULL), 0);
  cr_assert_eq(l.count, 1);
  cr_assert_str_eq(l.items[0].id, j1);
  server_db_job_list_release(&l);
  size_t n = 99;
  cr_assert_eq(server_db_job_count_in_flight(db, dev, &n, NULL), 0);
  cr_assert_eq(n, 1);
  cr_assert_eq(server_db_job_list_overdue(db, &l, NULL), 0);
  cr_assert_eq(l.count, 1);
  cr_assert_str_eq(l.items[0].id, j3);
  server_db_job_list_release(&l);
  server_db_close(db);
}

/* The jobs table only grows (one row per job, thousands a second), and
 * the daemon runs its statements on its one loop thread: none may read
 * the whole table, and the lists (newest first, with a limit) may not sort
 * it. SQLite plans without statistics here as in the daemon (it never runs
 * ANALYZE). */
Test(db, no_statement_reads_or_sorts_the_whole_job_history) {
  PG_TEST_SQLITE_ONLY();
  sqlite3 *h = fresh_db_read_only();
#define PLAN_Q(name, sql) {#name, sql},
  static const struct {
    const char *name, *sql;
  } qs[] = {DB_JOB_STATEMENTS(PLAN_Q) DB_SESSION_STATEMENTS(PLAN_Q) DB_CLOCK_STATEMENTS(PLAN_Q)};
#undef PLAN_Q
  size_t lists = 0;
  for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
    /* the finished jobs' counts for the metrics: every job once a minute
     * at most (daemon.c), by the smallest index */
    bool whole_ok = strcmp(qs[i].name, "JOB_COUNT_BY_STATE") == 0;
    bool list = strncmp(qs[i].name, "JOB_LIST", 8) == 0 && strstr(qs[i].sql, "DESC LIMIT");
    lists += list;
    char sql[8192];
    snprintf(sql, sizeof(sql), "EXPLAIN QUERY PLAN %s", qs[i].sql);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", qs[i].name,
                 sqlite3_errmsg(h));
    while (sqlite3_step(st) == SQLITE_ROW) {
      const char *d = (const char *)sqlite3_column_text(st, 3);
      /* "SCAN j USING INDEX jobs_created": a list walks back from the
       * newest and stops at its limit */
      size_t n = strncmp(d, "SCAN ", 5) == 0 ? strcspn(d + 5, " ") : 0;
      bool of_jobs = (n == 4 && strncmp(d + 5, "jobs", 4) == 0) || (n == 1 && d[5] == 'j');
      bool scans = of_jobs && (d[5 + n] == '\0' || (!whole_ok && !list));
      cr_assert(!scans, "%s reads every job: %s", qs[i].name, d);
      cr_assert(!(list && strstr(d, "TEMP B-TREE")), "%s sorts the jobs it lists: %s", qs[i].name,
                d);
    }
    sqlite3_finalize(st);
  }
  cr_assert_eq(lists, 4, "the four lists, newest first");
  sqlite3_close(h);
}

/* The WAL's checkpoints on a thread of their own (db_sqlite.c): the WAL is
 * still restarted every few thousand pages, as by SQLite's own checkpoint;
 * were it not, it would grow to the writer's fallback (16,000 pages) and
 * past this test's bound. What was committed is all there after. */
Test(db, checkpoints_on_their_thread_keep_the_wal_short_and_lose_nothing) {
  PG_TEST_SQLITE_ONLY();
  struct server_db *db = open_db();
  cr_assert_eq(server_db_checkpoint_behind(db, NULL), 0);
  cr_assert_eq(server_db_checkpoint_behind(db, NULL), 0, "a second call changes nothing");
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], id[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  char wal[512];
  snprintf(wal, sizeof(wal), "%s/%s-wal", state_dir, SERVER_DB_FILE);
  enum { JOBS = 6000, PAGE = 4096 + 24, BOUND = 8000 };
  off_t most = 0;
  for (int i = 0; i < JOBS; i++) {
    add_job(db, alice, dev, id);
    struct stat st;
    if (i % 100 == 0 && stat(wal, &st) == 0 && st.st_size > most)
      most = st.st_size;
  }
  struct stat st;
  cr_assert_eq(stat(wal, &st), 0);
  if (st.st_size > most)
    most = st.st_size;
  cr_assert_lt(most / PAGE, BOUND, "the WAL grew to %lld pages", (long long)(most / PAGE));
  server_db_close(db);
  db = open_db();
  struct server_db_job_list l = {0};
  cr_assert_eq(server_db_job_list(db, alice, 0, &l, NULL), 0);
  cr_assert_eq(l.count, JOBS);
  cr_assert_str_eq(l.items[0].id, id, "the last one too");
  server_db_job_list_release(&l);
  server_db_close(db);
}

Test(db, job_lists_filtered_by_user_device_state_and_time) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice"), bob = add_user(db, "bob");
  char d1[CORDON_ID_HEX_SIZE], d2[CORDON_ID_HEX_SIZE], j[5][CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, d1);
  add_device(db, bob, 2, d2);
  for (int i = 0; i < 5; i++) {
    server_db_set_clock(db, 100 * (i + 1));
    add_job(db, i == 3 ? bob : alice, i == 3 ? d2 : d1, j[i]);
  }
  cr_assert_eq(
      server_db_job_transition(db, j[1], SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_CANCELLED, NULL, NULL),
      0);
  struct {
    struct server_db_job_filter f;
    size_t n;
    int ids[5]; /* newest first */
  } cases[] = {
      {{0}, 5, {4, 3, 2, 1, 0}},
      {{.user_id = alice}, 4, {4, 2, 1, 0}},
      {{.user_id = bob}, 1, {3}},
      {{.device_id = d1}, 4, {4, 2, 1, 0}},
      {{.user_id = bob, .device_id = d1}, 0, {0}},
      {{.has_state = true, .state = SERVER_DB_JOB_CANCELLED}, 1, {1}},
      {{.user_id = alice, .has_state = true, .state = SERVER_DB_JOB_QUEUED}, 3, {4, 2, 0}},
      {{.since = 300}, 3, {4, 3, 2}},
      {{.user_id = alice, .since = 200, .limit = 2}, 2, {4, 2}},
      {{.limit = 1}, 1, {4}},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    struct server_db_job_list l = {0};
    struct cordon_diag d = {{0}};
    cr_assert_eq(server_db_job_list_filtered(db, &cases[c].f, &l, &d), 0, "case %zu: %s", c, d.msg);
    cr_assert_eq(l.count, cases[c].n, "case %zu: %zu jobs", c, l.count);
    for (size_t k = 0; k < l.count; k++)
      cr_assert_str_eq(l.items[k].id, j[cases[c].ids[k]], "case %zu, job %zu", c, k);
    server_db_job_list_release(&l);
  }
  server_db_close(db);
}

Test(db, two_handles_see_each_others_commits) {
  struct server_db *a = open_db(), *b = NULL;
  cr_assert_eq(server_db_open(state_dir, 0, &b, NULL), 0);
  int64_t alice = add_user(a, "alice");
  struct server_db_user u;
  cr_assert_eq(server_db_user_get(b, alice, &u, NULL), 0);
  char dev[CORDON_ID_HEX_SIZE];
  add_device(b, alice, 1, dev);
  cr_assert_eq(server_db_device_revoke(a, dev, NULL), 0);
  cr_assert_eq(server_db_device_set_online(b, dev, true, NULL), -EPERM);
  server_db_close(a);
  server_db_close(b);
}

/* --- schema 1 -> 2: labels and the queue ---------------------------------- */

/* The schema as version 1 of cordon-server wrote it (frozen: migrations are
 * append-only), to check that version 2 migrates an old database. */
static const char schema_v1[] =
    "PRAGMA application_id = 1668248164;"
    "CREATE TABLE schema_version (version INTEGER NOT NULL);"
    "INSERT INTO schema_version (version) VALUES (0);"
    "CREATE TABLE users ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name TEXT NOT NULL UNIQUE,"
    "  created INTEGER NOT NULL);"
    "CREATE TABLE pair_codes ("
    "  id TEXT PRIMARY KEY,"
    "  user_id INTEGER NOT NULL REFERENCES users(id),"
    "  key BLOB CHECK (key IS NULL OR length(key) = 32),"
    "  created INTEGER NOT NULL,"
    "  expires INTEGER NOT NULL,"
    "  attempts INTEGER NOT NULL CHECK (attempts >= 0),"
    "  state TEXT NOT NULL CHECK (state IN ('live','used','burned')),"
    "  used_at INTEGER);"
    "CREATE INDEX pair_codes_user ON pair_codes (user_id, state);"
    "CREATE TABLE devices ("
    "  id TEXT PRIMARY KEY,"
    "  user_id INTEGER NOT NULL REFERENCES users(id),"
    "  name TEXT NOT NULL,"
    "  platform TEXT,"
    "  public_key BLOB NOT NULL UNIQUE CHECK (length(public_key) = 32),"
    "  best_level TEXT CHECK (best_level IN ('none','contained','isolated')),"
    "  downgrade_reason TEXT,"
    "  facts TEXT,"
    "  max_jobs INTEGER NOT NULL DEFAULT 0,"
    "  state TEXT NOT NULL CHECK (state IN ('active','revoked')),"
    "  online INTEGER NOT NULL DEFAULT 0,"
    "  last_seen INTEGER NOT NULL DEFAULT 0,"
    "  created INTEGER NOT NULL);"
    "CREATE INDEX devices_user ON devices (user_id);"
    "CREATE TRIGGER devices_revoked_is_terminal BEFORE UPDATE OF state ON devices"
    "  WHEN OLD.state = 'revoked' AND NEW.state <> 'revoked'"
    "  BEGIN SELECT RAISE(ABORT, 'a revoked device stays revoked'); END;"
    "CREATE TABLE jobs ("
    "  id TEXT PRIMARY KEY,"
    "  user_id INTEGER NOT NULL REFERENCES users(id),"
    "  device_id TEXT REFERENCES devices(id),"
    "  package_hash BLOB NOT NULL CHECK (length(package_hash) = 32),"
    "  args TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN"
    "    ('queued','sent','running','done','failed','expired','cancelled')),"
    "  error TEXT,"
    "  result TEXT,"
    "  created INTEGER NOT NULL,"
    "  updated INTEGER NOT NULL,"
    "  deadline INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX jobs_user ON jobs (user_id, created);"
    "CREATE INDEX jobs_device_state ON jobs (device_id, state);"
    "CREATE TRIGGER jobs_result_once BEFORE UPDATE OF result ON jobs"
    "  WHEN OLD.result IS NOT NULL"
    "  BEGIN SELECT RAISE(ABORT, 'a job result is recorded once'); END;";

Test(db, migrates_a_version_1_database_and_keeps_its_rows) {
  PG_TEST_SQLITE_ONLY();
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_DB_FILE);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
  char *err = NULL;
  int rc = sqlite3_exec(h, schema_v1, NULL, NULL, &err);
  cr_assert_eq(rc, SQLITE_OK, "%s", err ? err : "");
  rc = sqlite3_exec(
      h,
      "UPDATE schema_version SET version = 1;"
      "INSERT INTO users (name, created) VALUES ('alice', 1);"
      "INSERT INTO devices (id, user_id, name, platform, public_key, best_level, max_jobs,"
      " state, online, last_seen, created) VALUES ('00112233445566778899aabbccddeeff', 1,"
      " 'laptop', 'linux', zeroblob(32), 'isolated', 2, 'active', 0, 5, 1);"
      "INSERT INTO jobs (id, user_id, device_id, package_hash, args, state, created, updated,"
      " deadline) VALUES ('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 1,"
      " '00112233445566778899aabbccddeeff', zeroblob(32), '[\"x\"]', 'sent', 10, 10, 500),"
      " ('bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 1, NULL, zeroblob(32), '[]', 'queued', 11, 11, 0);",
      NULL, NULL, &err);
  cr_assert_eq(rc, SQLITE_OK, "%s", err ? err : "");
  sqlite3_close(h);
  chmod(path, 0600);

  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, 0, &db, &d), 0, "%s", d.msg);
  int v = 0;
  cr_assert_eq(server_db_schema_version(db, &v, NULL), 0);
  cr_assert_eq(v, SERVER_DB_SCHEMA_VERSION, "migrated all the way up");
  struct server_db_device dev;
  cr_assert_eq(server_db_device_get(db, "00112233445566778899aabbccddeeff", &dev, NULL), 0);
  cr_assert_str_eq(dev.name, "laptop");
  cr_assert_eq(dev.labels.count, 0, "old devices have no labels");
  /* v3: an old device has no signing key until it registers one, once */
  uint8_t key[SERVER_DB_SIGN_KEY_SIZE], k1[SERVER_DB_SIGN_KEY_SIZE], k2[SERVER_DB_SIGN_KEY_SIZE];
  memset(k1, 1, sizeof(k1));
  memset(k2, 2, sizeof(k2));
  cr_assert_eq(server_db_device_sign_key(db, dev.id, key, NULL), -ENODATA);
  cr_assert_eq(server_db_device_register_sign_key(db, dev.id, k1, NULL), 0);
  cr_assert_eq(server_db_device_register_sign_key(db, dev.id, k1, NULL), -EALREADY);
  cr_assert_eq(server_db_device_register_sign_key(db, dev.id, k2, NULL), -EEXIST);
  cr_assert_eq(server_db_device_sign_key(db, dev.id, key, NULL), 0);
  cr_assert_eq(memcmp(key, k1, sizeof(key)), 0, "the first key stays");
  uint8_t buf[64];
  size_t n;
  cr_assert_eq(
      server_db_job_ticket(db, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", buf, sizeof(buf), &n, NULL),
      -ENODATA, "a job sent before receipts has no ticket");
  cr_assert_eq(server_db_job_set_ticket(db, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", buf, 8, NULL),
               -ESTALE, "only a queued job gets its ticket");
  cr_assert_eq(server_db_job_set_ticket(db, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
                                        (const uint8_t *)"ticket!!", 8, NULL),
               0);
  cr_assert_eq(
      server_db_job_ticket(db, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", buf, sizeof(buf), &n, NULL), 0);
  cr_assert_eq(n, 8);
  cr_assert_eq(memcmp(buf, "ticket!!", 8), 0);
  cr_assert_eq(server_db_job_ticket(db, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", buf, 4, &n, NULL),
               -ENOBUFS);

  server_db_device_release(&dev);
  struct server_db_job j;
  cr_assert_eq(server_db_job_get(db, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", &j, NULL), 0);
  cr_assert_eq(j.state, SERVER_DB_JOB_SENT);
  cr_assert_eq(j.deadline, 500);
  cr_assert_eq(j.queue_expires, 0);
  cr_assert_eq(j.where.count, 0);
  server_db_job_release(&j);
  /* an old queued job was being dispatched, not waiting: not in the queue */
  struct server_db_job_list l = {0};
  cr_assert_eq(server_db_job_list_queued(db, &l, NULL), 0);
  cr_assert_eq(l.count, 0);
  server_db_job_list_release(&l);
  /* the new parts work on the migrated database */
  struct server_db_label gpu = {"gpu", "yes"};
  struct server_db_labels after;
  cr_assert_eq(
      server_db_device_label(db, "00112233445566778899aabbccddeeff", &gpu, 1, NULL, 0, &after, &d),
      0, "%s", d.msg);
  cr_assert_eq(after.count, 1);
  cr_assert_eq(
      server_db_job_receipt(db, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", buf, sizeof(buf), &n, NULL),
      -ENODATA);
  cr_assert_eq(server_db_job_record_signed_result(
                   db, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "00112233445566778899aabbccddeeff",
                   SERVER_DB_JOB_DONE, NULL, "{}", (const uint8_t *)"receipt", 7, NULL, NULL),
               0);
  cr_assert_eq(
      server_db_job_receipt(db, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", buf, sizeof(buf), &n, NULL), 0);
  cr_assert_eq(n, 7);
  cr_assert_eq(memcmp(buf, "receipt", 7), 0, "stored with the result");
  server_db_close(db);
  /* and it opens again, untouched */
  cr_assert_eq(server_db_open(state_dir, 0, &db, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_device_get(db, "00112233445566778899aabbccddeeff", &dev, NULL), 0);
  cr_assert_str_eq(server_db_labels_get(&dev.labels, "gpu"), "yes");
  server_db_device_release(&dev);
  server_db_close(db);
}

Test(db, label_syntax) {
  static const struct {
    const char *text;
    bool ok;
  } cases[] = {
      {"gpu=yes", true},
      {"zone=eu-west-1", true},
      {"os.version=13.2_b", true},
      {"9lives=Cat.9", true},
      {"k=V", true},
      {"gpu", false},
      {"=yes", false},
      {"gpu=", false},
      {"GPU=yes", false},
      {"-gpu=yes", false},
      {"gpu=y es", false},
      {"gpu=y=s", false},
      {"gpu/x=yes", false},
      {"g\xc3\xa9=yes", false},
      {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=x", true},   /* 63 */
      {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=x", false}, /* 64 */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct server_db_label l;
    struct cordon_diag d = {{0}};
    int r = server_db_label_parse(cases[i].text, &l, &d);
    cr_expect_eq(r == 0, cases[i].ok, "'%s': %d %s", cases[i].text, r, d.msg);
    if (!cases[i].ok) {
      cr_expect_eq(r, -EINVAL);
      cr_expect(strstr(d.msg, "KEY=VALUE") && !strchr(d.msg, '\n'), "one clear line: %s", d.msg);
    }
  }
  struct server_db_label l;
  cr_assert_eq(server_db_label_parse("zone=eu", &l, NULL), 0);
  cr_assert_str_eq(l.key, "zone");
  cr_assert_str_eq(l.value, "eu");
  cr_assert(server_db_label_key_valid("a.b-c_d"));
  cr_assert(!server_db_label_key_valid(""));
  cr_assert(!server_db_label_key_valid("a=b"));
}

Test(db, labels_match_all_of_the_wanted_ones) {
  struct server_db_labels have = {0}, want = {0};
  struct server_db_label a = {"gpu", "yes"}, b = {"zone", "eu"}, c = {"zone", "us"};
  cr_assert_eq(server_db_labels_put(&have, &b, NULL), 0);
  cr_assert_eq(server_db_labels_put(&have, &a, NULL), 0);
  cr_assert_str_eq(have.items[0].key, "gpu", "kept sorted");
  cr_assert(server_db_labels_match(&have, &want, NULL), "nothing wanted: anything matches");
  cr_assert_eq(server_db_labels_put(&want, &a, NULL), 0);
  cr_assert(server_db_labels_match(&have, &want, NULL));
  cr_assert_eq(server_db_labels_put(&want, &c, NULL), 0);
  const struct server_db_label *miss = NULL;
  cr_assert(!server_db_labels_match(&have, &want, &miss));
  cr_assert_str_eq(miss->key, "zone");
  cr_assert_str_eq(miss->value, "us");
  cr_assert_eq(server_db_labels_put(&want, &b, NULL), 0); /* replaces zone=us */
  cr_assert_eq(want.count, 2);
  cr_assert(server_db_labels_match(&have, &want, NULL));
  char buf[64];
  server_db_labels_format(&have, buf, sizeof(buf));
  cr_assert_str_eq(buf, "gpu=yes,zone=eu");
  struct server_db_labels full = {0};
  for (int i = 0; i < SERVER_DB_LABELS_MAX; i++) {
    struct server_db_label x;
    snprintf(x.key, sizeof(x.key), "k%02d", i);
    snprintf(x.value, sizeof(x.value), "v");
    cr_assert_eq(server_db_labels_put(&full, &x, NULL), 0);
  }
  struct server_db_label one_more = {"zz", "v"};
  cr_assert_eq(server_db_labels_put(&full, &one_more, NULL), CORDON_E_LIMIT);
}

Test(db, device_labels_set_replace_remove_and_are_read_back) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], other[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  add_device(db, alice, 2, other);
  struct server_db_label set[] = {{"gpu", "yes"}, {"zone", "eu"}};
  struct server_db_labels after;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_device_label(db, dev, set, 2, NULL, 0, &after, &d), 0, "%s", d.msg);
  cr_assert_eq(after.count, 2);
  struct server_db_label us = {"zone", "us"};
  const char *rm[] = {"gpu", "absent"};
  cr_assert_eq(server_db_device_label(db, dev, &us, 1, rm, 2, &after, &d), 0, "%s", d.msg);
  cr_assert_eq(after.count, 1);
  cr_assert_str_eq(server_db_labels_get(&after, "zone"), "us");
  struct server_db_device got;
  cr_assert_eq(server_db_device_get(db, dev, &got, NULL), 0);
  cr_assert_eq(got.labels.count, 1);
  cr_assert_str_eq(got.labels.items[0].value, "us");
  server_db_device_release(&got);
  struct server_db_device_list l = {0};
  cr_assert_eq(server_db_device_list(db, alice, &l, NULL), 0);
  cr_assert_eq(l.count, 2);
  for (size_t i = 0; i < l.count; i++)
    cr_assert_eq(l.items[i].labels.count, strcmp(l.items[i].id, dev) == 0 ? 1u : 0u);
  server_db_device_list_release(&l);
  /* refusals change nothing */
  struct server_db_label bad = {"Bad", "x"};
  cr_assert_eq(server_db_device_label(db, dev, &bad, 1, NULL, 0, NULL, &d), -EINVAL);
  const char *badrm[] = {"a b"};
  cr_assert_eq(server_db_device_label(db, dev, NULL, 0, badrm, 1, NULL, &d), -EINVAL);
  cr_assert_eq(
      server_db_device_label(db, "ffffffffffffffffffffffffffffffff", set, 1, NULL, 0, NULL, &d),
      -ENOENT);
  struct server_db_label many[SERVER_DB_LABELS_MAX];
  for (int i = 0; i < SERVER_DB_LABELS_MAX; i++) {
    snprintf(many[i].key, sizeof(many[i].key), "k%02d", i);
    snprintf(many[i].value, sizeof(many[i].value), "v");
  }
  cr_assert_eq(server_db_device_label(db, dev, many, SERVER_DB_LABELS_MAX, NULL, 0, NULL, &d),
               CORDON_E_LIMIT, "zone + 32 more is over the cap");
  cr_assert_eq(server_db_device_label(db, dev, NULL, 0, NULL, 0, &after, &d), 0);
  cr_assert_eq(after.count, 1, "the refused change was rolled back");
  server_db_close(db);
}

Test(db, a_job_added_sent_has_its_ticket_device_and_deadline_in_one_statement) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], id[CORDON_ID_HEX_SIZE] = "0123456789abcdef0123456789abcdef",
                                got_id[CORDON_ID_HEX_SIZE] = "";
  add_device(db, alice, 1, dev);
  uint8_t hash[32] = {3}, tk[TICKET_TEST_LEN], got[16 + TICKET_TEST_LEN];
  memset(tk, 0x5a, sizeof(tk));
  server_db_set_clock(db, 1000);
  struct server_db_job_new n = {.user_id = alice,
                                .device_id = dev,
                                .package_hash = hash,
                                .deadline = 1600,
                                .ticket = tk,
                                .ticket_len = sizeof(tk),
                                .id = id};
  uint64_t commits = server_db_commit_count(db);
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_job_add(db, &n, got_id, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_commit_count(db), commits + 1, "one write");
  cr_assert_str_eq(got_id, id, "the id the ticket names");
  struct server_db_job j;
  cr_assert_eq(server_db_job_get(db, id, &j, NULL), 0);
  cr_assert_eq(j.state, SERVER_DB_JOB_SENT);
  cr_assert_str_eq(j.device_id, dev);
  cr_assert_eq(j.deadline, 1600);
  cr_assert_eq(j.queue_expires, 0);
  server_db_job_release(&j);
  size_t tk_n = 0;
  cr_assert_eq(server_db_job_ticket(db, id, got, sizeof(got), &tk_n, NULL), 0);
  cr_assert(tk_n == sizeof(tk) && memcmp(got, tk, sizeof(tk)) == 0);
  cr_assert_eq(server_db_job_send(db, id, dev, 2000, &d), -ESTALE, "sent already");
  /* it is on its way: its result is taken, as a sent job's */
  enum server_db_job_state after;
  cr_assert_eq(server_db_job_record_result(db, id, dev, SERVER_DB_JOB_DONE, NULL, "{}", &after, &d),
               0, "%s", d.msg);
  cr_assert_eq(after, SERVER_DB_JOB_DONE);

  /* the same id twice, a sent job without a device, deadline or id, a
   * ticket of no bytes: refused, nothing added */
  cr_assert_lt(server_db_job_add(db, &n, got_id, &d), 0);
  struct server_db_job_new bad = n;
  bad.id = "0123456789abcdef0123456789abcdee";
  bad.device_id = NULL;
  cr_assert_eq(server_db_job_add(db, &bad, got_id, &d), -EINVAL);
  bad.device_id = dev;
  bad.deadline = 0;
  cr_assert_eq(server_db_job_add(db, &bad, got_id, &d), -EINVAL);
  bad.deadline = 1600;
  bad.ticket_len = 0;
  cr_assert_eq(server_db_job_add(db, &bad, got_id, &d), -EINVAL);
  bad.ticket_len = sizeof(tk);
  bad.id = "not an id";
  cr_assert_eq(server_db_job_add(db, &bad, got_id, &d), -EINVAL);
  bad.id = NULL;
  cr_assert_eq(server_db_job_add(db, &bad, got_id, &d), -EINVAL);
  cr_assert_eq(server_db_job_get(db, "0123456789abcdef0123456789abcdee", &j, NULL), -ENOENT);
  server_db_close(db);
}

Test(db, a_result_object_is_stored_as_its_text_and_a_non_object_or_too_large_one_is_refused) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], id[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  add_job(db, alice, dev, id);
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_job_send(db, id, dev, 100, &d), 0, "%s", d.msg);
  enum server_db_job_state after;
  json_t *arr = json_array();
  cr_assert_eq(server_db_job_record_signed_result_obj(db, id, dev, SERVER_DB_JOB_DONE, NULL, arr, 0,
                                                      NULL, 0, &after, &d),
               -EINVAL, "not an object");
  json_decref(arr);
  char *big = malloc(SERVER_DB_RESULT_MAX + 1);
  memset(big, 'x', SERVER_DB_RESULT_MAX);
  big[SERVER_DB_RESULT_MAX] = '\0';
  json_t *o = json_pack("{s:s}", "stdout", big);
  free(big);
  /* a larger max is the store's own */
  cr_assert_eq(server_db_job_record_signed_result_obj(db, id, dev, SERVER_DB_JOB_DONE, NULL, o,
                                                      2 * SERVER_DB_RESULT_MAX, NULL, 0, &after,
                                                      &d),
               -E2BIG, "its text is over SERVER_DB_RESULT_MAX");
  json_decref(o);
  o = json_pack("{s:s}", "stdout", "0123456789");
  cr_assert_eq(server_db_job_record_signed_result_obj(db, id, dev, SERVER_DB_JOB_DONE, NULL, o, 20,
                                                      NULL, 0, &after, &d),
               -E2BIG, "its text is over the max asked for");
  json_decref(o);
  o = json_pack("{s:i, s:s}", "exit_code", 0, "stdout", "hi \"there\"\n");
  uint8_t receipt[200];
  memset(receipt, 7, sizeof(receipt));
  cr_assert_eq(server_db_job_record_signed_result_obj(db, id, dev, SERVER_DB_JOB_DONE, NULL, o, 0,
                                                      receipt, sizeof(receipt), &after, &d),
               0, "%s", d.msg);
  cr_assert_eq(after, SERVER_DB_JOB_DONE);
  struct server_db_job j;
  cr_assert_eq(server_db_job_get(db, id, &j, NULL), 0);
  json_t *back = server_db_job_result_to_json(&j);
  cr_assert(json_equal(back, o), "%s", j.result_json);
  json_decref(back);
  server_db_job_release(&j);
  uint8_t got[SERVER_DB_RECEIPT_MAX];
  size_t n = 0;
  cr_assert_eq(server_db_job_receipt(db, id, got, sizeof(got), &n, NULL), 0);
  cr_assert(n == sizeof(receipt) && memcmp(got, receipt, n) == 0);
  cr_assert_eq(server_db_job_record_signed_result_obj(db, id, dev, SERVER_DB_JOB_DONE, NULL, o, 0,
                                                      NULL, 0, &after, &d),
               -EALREADY, "recorded once");
  json_decref(o);
  server_db_close(db);
}

/* A server before control bytes went to base64 stored a NUL in an
 * output's string as \u0000: such a row reads back whole, not as null. */
Test(db, a_stored_result_with_a_nul_in_its_output_string_reads_back) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], id[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  add_job(db, alice, dev, id);
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_job_send(db, id, dev, 100, &d), 0, "%s", d.msg);
  json_t *o = json_pack("{s:i, s:s%}", "exit_code", 0, "stdout", "a\0b", (size_t)3);
  enum server_db_job_state after;
  cr_assert_eq(server_db_job_record_signed_result_obj(db, id, dev, SERVER_DB_JOB_DONE, NULL, o, 0,
                                                      NULL, 0, &after, &d),
               0, "%s", d.msg);
  struct server_db_job j;
  cr_assert_eq(server_db_job_get(db, id, &j, NULL), 0);
  cr_assert(strstr(j.result_json, "\\u0000"), "%s", j.result_json);
  json_t *back = server_db_job_result_to_json(&j);
  cr_assert(json_equal(back, o), "%s", j.result_json);
  uint8_t *out;
  size_t n;
  cr_assert_eq(job_result_output_decode(back, "stdout", RESULT_OUTPUT_MAX, &out, &n), 0);
  cr_assert(n == 3 && memcmp(out, "a\0b", 3) == 0);
  free(out);
  json_decref(back);
  json_decref(o);
  server_db_job_release(&j);
  server_db_close(db);
}

Test(db, queued_jobs_wait_in_order_expire_and_go_to_one_device) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE], dev2[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  add_device(db, alice, 2, dev2);
  uint8_t hash[32] = {3};
  struct server_db_labels where = {0};
  struct server_db_label gpu = {"gpu", "yes"};
  cr_assert_eq(server_db_labels_put(&where, &gpu, NULL), 0);
  char any[CORDON_ID_HEX_SIZE], pinned[CORDON_ID_HEX_SIZE], soon[CORDON_ID_HEX_SIZE];
  server_db_set_clock(db, 1000);
  struct server_db_job_new n = {
      .user_id = alice, .package_hash = hash, .queue_expires = 5000, .where = &where};
  cr_assert_eq(server_db_job_add(db, &n, any, NULL), 0);
  server_db_set_clock(db, 1001);
  struct server_db_job_new p = {
      .user_id = alice, .device_id = dev2, .package_hash = hash, .queue_expires = 5000};
  cr_assert_eq(server_db_job_add(db, &p, pinned, NULL), 0);
  server_db_set_clock(db, 1002);
  struct server_db_job_new s = {.user_id = alice, .package_hash = hash, .queue_expires = 1500};
  cr_assert_eq(server_db_job_add(db, &s, soon, NULL), 0);
  /* being dispatched now, not waiting: not in the queue */
  char now_job[CORDON_ID_HEX_SIZE];
  add_job(db, alice, dev, now_job);

  struct server_db_job_list l = {0};
  cr_assert_eq(server_db_job_list_queued(db, &l, NULL), 0);
  cr_assert_eq(l.count, 3);
  cr_assert_str_eq(l.items[0].id, any, "oldest first");
  cr_assert_str_eq(l.items[1].id, pinned);
  cr_assert_str_eq(l.items[2].id, soon);
  cr_assert_eq(l.items[0].queue_expires, 5000);
  cr_assert_eq(l.items[0].where.count, 1);
  cr_assert_str_eq(server_db_labels_get(&l.items[0].where, "gpu"), "yes");
  cr_assert_str_eq(l.items[1].device_id, dev2);
  server_db_job_list_release(&l);

  server_db_set_clock(db, 1499);
  cr_assert_eq(server_db_job_list_queue_expired(db, &l, NULL), 0);
  cr_assert_eq(l.count, 0);
  server_db_job_list_release(&l);
  server_db_set_clock(db, 1500);
  cr_assert_eq(server_db_job_list_queue_expired(db, &l, NULL), 0);
  cr_assert_eq(l.count, 1);
  cr_assert_str_eq(l.items[0].id, soon);
  server_db_job_list_release(&l);
  cr_assert_eq(server_db_job_transition(db, soon, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_EXPIRED,
                                        "queue_expired", NULL),
               0);

  /* a pinned job goes only to its device; with its ticket, in one
   * transaction: a refused send stores no ticket either */
  struct cordon_diag d = {{0}};
  uint8_t tk[8] = "ticket!", got[16];
  size_t tk_n = 0;
  cr_assert_eq(server_db_job_send_with_ticket(db, pinned, dev, 2000, tk, sizeof(tk), &d), -EPERM);
  cr_assert_eq(server_db_job_ticket(db, pinned, got, sizeof(got), &tk_n, NULL), -ENODATA,
               "rolled back with the refused send");
  cr_assert_eq(server_db_job_send(db, pinned, dev, 2000, &d), -EPERM);
  cr_assert_eq(server_db_job_send_with_ticket(db, pinned, dev2, 2000, tk, sizeof(tk), &d), 0, "%s",
               d.msg);
  cr_assert_eq(server_db_job_ticket(db, pinned, got, sizeof(got), &tk_n, NULL), 0);
  cr_assert(tk_n == sizeof(tk) && memcmp(got, tk, sizeof(tk)) == 0);
  cr_assert_eq(server_db_job_send(db, pinned, dev2, 2000, &d), -ESTALE, "sent once");
  cr_assert_eq(server_db_job_send(db, soon, dev, 2000, &d), -ESTALE, "expired: never sent");
  /* any device of the user: the first send wins, the device and deadline stick */
  cr_assert_eq(server_db_job_send(db, any, dev, 2100, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_job_send(db, any, dev2, 2100, &d), -ESTALE);
  cr_assert_eq(server_db_job_send(db, "ffffffffffffffffffffffffffffffff", dev, 1, &d), -ENOENT);
  struct server_db_job j;
  cr_assert_eq(server_db_job_get(db, any, &j, NULL), 0);
  cr_assert_eq(j.state, SERVER_DB_JOB_SENT);
  cr_assert_str_eq(j.device_id, dev);
  cr_assert_eq(j.deadline, 2100);
  json_t *o = server_db_job_to_json(&j);
  cr_assert(json_is_null(json_object_get(o, "error")));
  json_decref(o);
  server_db_job_release(&j);
  cr_assert_eq(server_db_job_get(db, soon, &j, NULL), 0);
  o = server_db_job_to_json(&j);
  cr_assert_str_eq(json_string_value(json_object_get(o, "error")), "queue_expired");
  json_decref(o);
  server_db_job_release(&j);
  size_t in_flight = 0;
  cr_assert_eq(server_db_job_count_in_flight(db, dev, &in_flight, NULL), 0);
  cr_assert_eq(in_flight, 1);
  cr_assert_eq(server_db_job_list_queued(db, &l, NULL), 0);
  cr_assert_eq(l.count, 0, "nothing waits any more");
  server_db_job_list_release(&l);
  server_db_close(db);
}

Test(db, a_code_keeps_why_its_last_attempt_failed) {
  struct server_db *db = open_db();
  int64_t uid;
  cr_assert_eq(server_db_user_add(db, "alice", &uid, NULL), 0);
  char code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
  uint8_t key[SERVER_DB_CODE_KEY_SIZE];
  cr_assert_eq(server_db_code_mint(db, uid, 60, code, NULL, NULL), 0);
  cr_assert_eq(server_db_code_derive(code, id, key), 0);
  struct server_db_code c;
  cr_assert_eq(server_db_code_lookup(db, id, &c, NULL), 0);
  cr_assert_str_eq(c.last_failure, "");
  cr_assert_eq(c.last_failure_at, 0);
  server_db_set_clock(db, 1000);
  cr_assert_eq(server_db_code_note_failure(db, id, "code_expired", NULL), 0);
  cr_assert_eq(server_db_code_lookup(db, id, &c, NULL), 0);
  cr_assert_str_eq(c.last_failure, "code_expired");
  cr_assert_eq(c.last_failure_at, 1000);
  server_db_code_wipe(&c);
  cr_assert_eq(server_db_code_note_failure(db, "0000000000", "bad_proof", NULL), -ENOENT);
  cr_assert_eq(server_db_code_note_failure(db, id, "not a token", NULL), -EINVAL);
  server_db_close(db);
}

Test(db, migration_4_renames_duplicate_device_names_of_a_user) {
  PG_TEST_SQLITE_ONLY();
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_DB_FILE);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
  char *err = NULL;
  int rc = sqlite3_exec(h, schema_v1, NULL, NULL, &err);
  cr_assert_eq(rc, SQLITE_OK, "%s", err ? err : "");
  rc = sqlite3_exec(
      h,
      "UPDATE schema_version SET version = 1;"
      "INSERT INTO users (name, created) VALUES ('alice', 1), ('bob', 1);"
      "INSERT INTO devices (id, user_id, name, public_key, state, created) VALUES"
      " ('00000000000000000000000000000001', 1, 'laptop', zeroblob(32), 'active', 1),"
      " ('aaaaaaaa000000000000000000000002', 1, 'laptop', randomblob(32), 'active', 2),"
      " ('00000000000000000000000000000003', 1, 'laptop', randomblob(32), 'revoked', 3),"
      " ('00000000000000000000000000000004', 2, 'laptop', randomblob(32), 'active', 4);",
      NULL, NULL, &err);
  cr_assert_eq(rc, SQLITE_OK, "%s", err ? err : "");
  sqlite3_close(h);
  chmod(path, 0600);
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, 0, &db, &d), 0, "%s", d.msg);
  static const char *const want[][2] = {
      {"00000000000000000000000000000001", "laptop"},          /* the older keeps it */
      {"aaaaaaaa000000000000000000000002", "laptop-aaaaaaaa"}, /* the newer gets its id */
      {"00000000000000000000000000000003", "laptop"},          /* revoked: not counted */
      {"00000000000000000000000000000004", "laptop"},          /* another user's */
  };
  for (size_t i = 0; i < 4; i++) {
    struct server_db_device dev;
    cr_assert_eq(server_db_device_get(db, want[i][0], &dev, NULL), 0);
    cr_assert_str_eq(dev.name, want[i][1], "%s", want[i][0]);
    server_db_device_release(&dev);
  }
  /* and from now on the database itself refuses a duplicate */
  struct server_db_device_info info = {.name = "laptop"};
  uint8_t pk[32];
  memset(pk, 9, sizeof(pk));
  char id[CORDON_ID_HEX_SIZE];
  cr_assert_eq(server_db_device_add(db, 1, pk, &info, id, NULL), 0);
  struct server_db_device dev;
  cr_assert_eq(server_db_device_get(db, id, &dev, NULL), 0);
  cr_assert_str_eq(dev.name, "laptop-2");
  server_db_device_release(&dev);
  server_db_close(db);
}

Test(db, a_key_makes_one_job_per_user_and_finds_it_again) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice"), bob = add_user(db, "bob");
  uint8_t hash[32] = {7};
  struct server_db_job_new j = {.user_id = alice, .package_hash = hash, .key = "release-1"};
  char a1[CORDON_ID_HEX_SIZE], a2[CORDON_ID_HEX_SIZE] = "", b1[CORDON_ID_HEX_SIZE];
  cr_assert_eq(server_db_job_add(db, &j, a1, NULL), 0);
  cr_assert_eq(server_db_job_add(db, &j, a2, NULL), -EEXIST, "one job per user and key");
  cr_assert_str_eq(a2, "", "no id for a refused add");
  j.user_id = bob;
  cr_assert_eq(server_db_job_add(db, &j, b1, NULL), 0, "another user's key is its own");
  struct server_db_job got;
  cr_assert_eq(server_db_job_get_by_key(db, alice, "release-1", &got, NULL), 0);
  cr_assert_str_eq(got.id, a1);
  server_db_job_release(&got);
  cr_assert_eq(server_db_job_get_by_key(db, alice, "release-2", &got, NULL), -ENOENT);
  j.user_id = alice;
  j.key = "with space";
  cr_assert_eq(server_db_job_add(db, &j, a2, NULL), -EINVAL);
  j.key = NULL; /* no key: as many jobs as asked */
  cr_assert_eq(server_db_job_add(db, &j, a2, NULL), 0);
  cr_assert_eq(server_db_job_add(db, &j, a2, NULL), 0);
  server_db_close(db);
}

/* A name that is also the start of another device's id: an operator who
 * gives the prefix (revoke, approve, label) must not get the device that
 * chose that name at pairing; it is ambiguous, and the full id decides. */
Test(db, a_name_that_is_another_devices_id_prefix_is_ambiguous) {
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice"), mallory = add_user(db, "mallory");
  char victim[CORDON_ID_HEX_SIZE], decoy[CORDON_ID_HEX_SIZE], self[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 0x61, victim);
  char prefix[9];
  snprintf(prefix, sizeof(prefix), "%.8s", victim);
  struct server_db_device_info named = laptop;
  named.name = prefix;
  uint8_t pk[32];
  memset(pk, 0x62, sizeof(pk));
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_device_add(db, mallory, pk, &named, decoy, &d), 0, "%s", d.msg);
  struct server_db_device got;
  cr_assert_eq(server_db_device_resolve(db, prefix, 0, &got, &d), -ENOTUNIQ,
               "the prefix resolved to one device: %s", d.msg);
  cr_assert(strstr(d.msg, victim) && strstr(d.msg, decoy), "both named: %s", d.msg);
  cr_assert_eq(server_db_device_resolve(db, victim, 0, &got, &d), 0, "%s", d.msg);
  cr_assert_str_eq(got.id, victim);
  server_db_device_release(&got);
  /* the user's own scope: mallory's name, alice's id is not hers */
  cr_assert_eq(server_db_device_resolve(db, prefix, mallory, &got, &d), 0, "%s", d.msg);
  cr_assert_str_eq(got.id, decoy);
  server_db_device_release(&got);
  /* a device named after its own id prefix is still that one device */
  memset(pk, 0x63, sizeof(pk));
  named.name = "self";
  cr_assert_eq(server_db_device_add(db, alice, pk, &named, self, &d), 0, "%s", d.msg);
  char own[9];
  snprintf(own, sizeof(own), "%.8s", self);
  cr_assert_eq(server_db_device_rename(db, self, own, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_device_resolve(db, own, 0, &got, &d), 0, "%s", d.msg);
  cr_assert_str_eq(got.id, self);
  server_db_device_release(&got);
  server_db_close(db);
}

/* --- the database's URL (PostgreSQL) --- */

Test(db, an_unreachable_postgresql_is_one_line_naming_the_host_never_the_password) {
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  /* port 1 on loopback: nothing listens there */
  int err =
      server_db_open_url(state_dir, "postgresql://cordon:s3cret-pw@127.0.0.1:1/cordon", 0, &db, &d);
  cr_assert_eq(err, -ECONNREFUSED, "%d %s", err, d.msg);
  cr_assert_null(db);
  cr_assert(strstr(d.msg, "127.0.0.1") && strstr(d.msg, "cannot connect"), "%s", d.msg);
  cr_assert_null(strstr(d.msg, "s3cret"), "the password is in the message: %s", d.msg);
  cr_assert_null(strchr(d.msg, '\n'), "%s", d.msg);
}

Test(db, a_malformed_postgresql_url_is_refused_without_quoting_it) {
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  /* a bad percent-escape in the password: libpq's message would quote it */
  int err = server_db_open_url(state_dir, "postgresql://cordon:pw%zzs3cret@127.0.0.1:1/cordon", 0,
                               &db, &d);
  cr_assert_eq(err, -EINVAL, "%d %s", err, d.msg);
  cr_assert_null(db);
  cr_assert_null(strstr(d.msg, "s3cret"), "the password is in the message: %s", d.msg);
}

Test(db, the_url_file_is_0600_and_takes_only_postgresql_urls) {
  char dir[300];
  snprintf(dir, sizeof(dir), "%s/other", state_dir);
  cr_assert_eq(mkdir(dir, 0700), 0);
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_save_url(dir, "mysql://x/y", &d), -EINVAL);
  cr_assert_eq(server_db_save_url(dir, "postgresql://a@b/c\nx", &d), -EINVAL);
  mode_t old = umask(0);
  cr_assert_eq(server_db_save_url(dir, "postgresql://a:pw@127.0.0.1:1/c", &d), 0, "%s", d.msg);
  umask(old);
  cr_assert_eq(server_db_save_url(dir, "postgresql://a@127.0.0.1:1/c", &d), -EEXIST);
  char path[400];
  snprintf(path, sizeof(path), "%s/%s", dir, SERVER_DB_URL_FILE);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
  /* the state directory's URL is what server_db_open opens: no SQLite file */
  struct server_db *db = NULL;
  cr_assert_eq(server_db_open(dir, SERVER_DB_CREATE, &db, &d), -ECONNREFUSED, "%s", d.msg);
  snprintf(path, sizeof(path), "%s/%s", dir, SERVER_DB_FILE);
  cr_assert_neq(access(path, F_OK), 0, "a SQLite file was made");
}

Test(db, backup_and_restore_refuse_on_postgresql_pointing_to_pg_dump) {
  if (!pg_test_base())
    cr_skip_test("the PostgreSQL pass only");
  struct server_db *db = open_db();
  cr_assert_str_eq(server_db_backend(db), "postgresql");
  char path[400];
  snprintf(path, sizeof(path), "%s/backup.db", state_dir);
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_backup(db, path, &d), -EOPNOTSUPP);
  cr_assert(strstr(d.msg, "pg_dump") && !strchr(d.msg, '\n'), "%s", d.msg);
  cr_assert_neq(access(path, F_OK), 0, "nothing is written");
  cr_assert_eq(server_db_restore(db, path, &d), -EOPNOTSUPP);
  cr_assert(strstr(d.msg, "pg_dump"), "%s", d.msg);
  server_db_close(db);
}

Test(db, a_job_result_recorded_by_two_processes_at_once_is_recorded_once) {
  /* two handles in two processes (two servers on one database), released
   * together, record the same job's result: exactly one gets 0 */
  enum { ROUNDS = 10 };
  struct server_db *db = open_db();
  int64_t alice = add_user(db, "alice");
  char dev[CORDON_ID_HEX_SIZE];
  add_device(db, alice, 1, dev);
  for (int round = 0; round < ROUNDS; round++) {
    char job[CORDON_ID_HEX_SIZE];
    add_job(db, alice, dev, job);
    cr_assert_eq(
        server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL, NULL), 0);
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
      pids[i] = fork();
      cr_assert_neq(pids[i], -1);
      if (pids[i] == 0) {
        close(go[1]);
        struct server_db *mine = NULL;
        if (server_db_open(state_dir, 0, &mine, NULL) != 0)
          _exit(3);
        char c;
        if (read(go[0], &c, 1) != 0)
          _exit(3);
        char result[64];
        snprintf(result, sizeof(result), "{\"by\": %d}", i);
        int err = server_db_job_record_result(mine, job, dev, SERVER_DB_JOB_DONE, NULL, result,
                                              NULL, NULL);
        server_db_close(mine);
        _exit(err == 0 ? 0 : err == -EALREADY ? 1 : 2);
      }
    }
    close(go[0]);
    usleep(50000);
    close(go[1]);
    int winners = 0, winner = -1;
    for (int i = 0; i < 2; i++) {
      int st = 0;
      cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
      cr_assert(WIFEXITED(st) && WEXITSTATUS(st) <= 1, "child status %d", WEXITSTATUS(st));
      if (WEXITSTATUS(st) == 0) {
        winners++;
        winner = i;
      }
    }
    cr_assert_eq(winners, 1, "round %d: %d winners", round, winners);
    struct server_db_job j;
    cr_assert_eq(server_db_job_get(db, job, &j, NULL), 0);
    cr_assert_eq(j.state, SERVER_DB_JOB_DONE);
    char want[64];
    snprintf(want, sizeof(want), "{\"by\": %d}", winner);
    cr_assert_str_eq(j.result_json, want, "the winner's result is the one kept");
    server_db_job_release(&j);
  }
  server_db_close(db);
}

Test(db, a_handle_whose_postgresql_connection_was_killed_connects_again) {
  if (!pg_test_base())
    cr_skip_test("the PostgreSQL pass only");
  struct server_db *db = open_db();
  add_user(db, "alice");
  /* the server ends the handle's session, as a restart would */
  cr_assert_eq(pg_test_exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND pid <> pg_backend_pid()"),
               0);
  usleep(100000);
  struct server_db_user u;
  struct cordon_diag d = {{0}};
  int err = server_db_user_get_by_name(db, "alice", &u, &d);
  cr_assert(err == 0 || err == -EIO, "the statement that met the dead connection: %d %s", err,
            d.msg);
  cr_assert_eq(server_db_user_get_by_name(db, "alice", &u, &d), 0, "%s", d.msg);
  add_user(db, "bob");
  server_db_close(db);
}
