/* server/db_sessions.c on both backends (the pg pass runs it on
 * PostgreSQL): a newer session takes a device's row and only the session
 * that holds it releases it; an instance renews only its own rows; expiry
 * takes devices offline only when their lease passed (and, at a start,
 * those without a lease); queued packages are kept, read once stored, and
 * go when their job leaves the queue, a large one in parts, all or none; revoked devices and cancelled jobs
 * of an instance's rows are listed; LISTEN hears NOTIFY (PostgreSQL); two
 * servers racing to record one result record it once. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/db.h"
#include "tests/server/pg_test.h"

static char state_dir[256];
static struct server_db *db;
static int64_t user;

static const struct server_db_device_info box = {
    .name = "box",
    .platform = "linux",
    .has_level = true,
    .best_level = SANDBOX_LEVEL_ISOLATED,
    .max_jobs = 4,
};

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  snprintf(state_dir, sizeof(state_dir), "/tmp/cordon-test-dbs-XXXXXX");
  cr_assert_not_null(mkdtemp(state_dir));
  pg_test_attach(state_dir);
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, SERVER_DB_CREATE, &db, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_user_add(db, "alice", &user, &d), 0, "%s", d.msg);
  server_db_set_clock(db, 1000);
}

static void teardown(void) {
  server_db_close(db);
  pg_test_drop();
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state_dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(db_sessions, .init = setup, .fini = teardown);

static void add_device(uint8_t key_byte, char *name, char out_id[CORDON_ID_HEX_SIZE]) {
  uint8_t pk[32];
  memset(pk, key_byte, sizeof(pk));
  struct server_db_device_info info = box;
  info.name = name;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_device_add(db, user, pk, &info, out_id, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_device_set_online(db, out_id, true, NULL), 0);
}

static bool online(const char *id) {
  struct server_db_device dev;
  cr_assert_eq(server_db_device_get(db, id, &dev, NULL), 0);
  bool on = dev.online;
  server_db_device_release(&dev);
  return on;
}

#define INST_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define INST_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define SESS_1 "11111111111111111111111111111111"
#define SESS_2 "22222222222222222222222222222222"

Test(db_sessions, the_backend_says_whether_it_is_shared) {
  cr_expect_eq(server_db_is_shared(db), pg_test_base() != NULL);
}

Test(db_sessions, a_newer_session_takes_the_row_and_only_its_holder_releases_it) {
  char dev[CORDON_ID_HEX_SIZE], inst[CORDON_ID_HEX_SIZE], sid[CORDON_ID_HEX_SIZE];
  add_device(1, "box", dev);
  cr_assert_eq(server_db_session_claim(db, dev, INST_A, SESS_1, 1010, NULL), 0);
  cr_assert_eq(server_db_session_claim(db, dev, INST_B, SESS_2, 1012, NULL), 0);
  int64_t lease = 0;
  cr_assert_eq(server_db_session_get(db, dev, inst, sid, &lease, NULL), 0);
  cr_expect_str_eq(inst, INST_B);
  cr_expect_str_eq(sid, SESS_2);
  cr_expect_eq(lease, 1012);
  cr_expect_eq(server_db_session_release(db, dev, INST_A, SESS_1, NULL), -ENOENT,
               "the older session's close leaves the newer row");
  cr_expect_eq(server_db_session_release(db, dev, INST_B, SESS_1, NULL), -ENOENT,
               "the instance alone is not enough");
  cr_assert_eq(server_db_session_get(db, dev, NULL, NULL, NULL, NULL), 0);
  cr_expect_eq(server_db_session_release(db, dev, INST_B, SESS_2, NULL), 0);
  cr_expect_eq(server_db_session_get(db, dev, NULL, NULL, NULL, NULL), -ENOENT);
}

Test(db_sessions, an_instance_renews_and_lists_only_its_own_rows) {
  char d1[CORDON_ID_HEX_SIZE], d2[CORDON_ID_HEX_SIZE], d3[CORDON_ID_HEX_SIZE];
  add_device(1, "one", d1);
  add_device(2, "two", d2);
  add_device(3, "three", d3);
  cr_assert_eq(server_db_session_claim(db, d1, INST_A, SESS_1, 1010, NULL), 0);
  cr_assert_eq(server_db_session_claim(db, d2, INST_A, SESS_2, 1010, NULL), 0);
  cr_assert_eq(server_db_session_claim(db, d3, INST_B, SESS_1, 1010, NULL), 0);
  size_t n = 0;
  cr_assert_eq(server_db_session_renew(db, INST_A, 1020, &n, NULL), 0);
  cr_expect_eq(n, 2);
  int64_t lease = 0;
  cr_assert_eq(server_db_session_get(db, d3, NULL, NULL, &lease, NULL), 0);
  cr_expect_eq(lease, 1010, "B's row is B's to renew");
  cr_assert_eq(server_db_session_get(db, d2, NULL, NULL, &lease, NULL), 0);
  cr_expect_eq(lease, 1020);
  struct server_db_session_rows rows = {0};
  cr_assert_eq(server_db_session_list(db, INST_A, &rows, NULL), 0);
  cr_assert_eq(rows.count, 2);
  for (size_t i = 0; i < rows.count; i++)
    cr_expect(strcmp(rows.items[i].device_id, d3) != 0);
  server_db_session_rows_release(&rows);
}

Test(db_sessions, expiry_takes_offline_only_the_devices_whose_lease_passed) {
  char live[CORDON_ID_HEX_SIZE], dead[CORDON_ID_HEX_SIZE], none[CORDON_ID_HEX_SIZE];
  add_device(1, "live", live);
  add_device(2, "dead", dead);
  add_device(3, "none", none);
  cr_assert_eq(server_db_session_claim(db, live, INST_A, SESS_1, 1010, NULL), 0);
  cr_assert_eq(server_db_session_claim(db, dead, INST_B, SESS_2, 1005, NULL), 0);
  server_db_set_clock(db, 1005);
  cr_assert_eq(server_db_session_expire(db, false, NULL), 0);
  cr_expect(online(live));
  cr_expect(!online(dead), "its lease ended at 1005");
  cr_expect_eq(server_db_session_get(db, dead, NULL, NULL, NULL, NULL), -ENOENT);
  cr_expect(online(none), "the tick leaves a device without a row alone");
  cr_assert_eq(server_db_session_expire(db, true, NULL), 0);
  cr_expect(!online(none), "a start takes it offline: no server holds it");
  cr_expect(online(live), "nor the device another server holds");
  cr_assert_eq(server_db_session_expire(db, true, NULL), 0);
  cr_expect(online(live), "twice is the same");
}

/* A job queued for device dev until 2000. */
static void queued_job(const char *dev, char out_id[CORDON_ID_HEX_SIZE]) {
  uint8_t hash[32] = {7};
  struct server_db_job_new nj = {.user_id = user,
                                 .device_id = dev,
                                 .package_hash = hash,
                                 .args_json = "[]",
                                 .queue_expires = 2000};
  cr_assert_eq(server_db_job_add(db, &nj, out_id, NULL), 0);
}

Test(db_sessions, a_queued_package_is_kept_until_its_job_leaves_the_queue) {
  char dev[CORDON_ID_HEX_SIZE], job[CORDON_ID_HEX_SIZE];
  add_device(1, "box", dev);
  queued_job(dev, job);
  uint8_t bytes[3000];
  for (size_t i = 0; i < sizeof(bytes); i++)
    bytes[i] = (uint8_t)(i * 7);
  bytes[5] = 0;
  cr_assert_eq(server_db_job_package_put(db, job, bytes, sizeof(bytes), NULL), 0);
  cr_assert_eq(server_db_job_package_put(db, job, "x", 1, NULL), 0, "a second put: nothing");
  uint8_t *got = NULL;
  size_t len = 0;
  cr_assert_eq(server_db_job_package_get(db, job, &got, &len, NULL), 0);
  cr_assert_eq(len, sizeof(bytes));
  cr_expect_eq(memcmp(got, bytes, len), 0, "the bytes, NULs included");
  free(got);
  cr_assert_eq(server_db_job_package_purge(db, NULL), 0);
  cr_assert_eq(server_db_job_package_get(db, job, &got, &len, NULL), 0, "still queued: kept");
  free(got);
  cr_assert_eq(server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_CANCELLED,
                                        "cancelled", NULL),
               0);
  cr_assert_eq(server_db_job_package_purge(db, NULL), 0);
  cr_expect_eq(server_db_job_package_get(db, job, &got, &len, NULL), -ENOENT);
  cr_expect_eq(server_db_job_package_put(db, job, bytes, SERVER_DB_PACKAGE_STORE_MAX + 1ul, NULL),
               -EFBIG);
}

/* SQL on the test's database, whichever backend holds it. */
static void exec_sql(const char *sql) {
  if (pg_test_base()) {
    cr_assert_eq(pg_test_exec(sql), 0, "%s", sql);
    return;
  }
  char path[400];
  snprintf(path, sizeof(path), "%s/cordon.db", state_dir);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
  char *err = NULL;
  cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, &err), SQLITE_OK, "%s: %s", sql, err);
  sqlite3_close(h);
}

/* A file of size bytes that differ from part to part. */
static int pattern_file(const char *path, uint64_t size) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert(fd >= 0);
  static uint8_t buf[1 << 16];
  for (uint64_t off = 0; off < size;) {
    size_t n = size - off < sizeof(buf) ? (size_t)(size - off) : sizeof(buf);
    for (size_t i = 0; i < n; i++)
      buf[i] = (uint8_t)((off + i) * 31 + ((off + i) >> 20));
    cr_assert_eq(write(fd, buf, n), (ssize_t)n);
    off += n;
  }
  return fd;
}

static bool same_files(int a, int b) {
  off_t sa = lseek(a, 0, SEEK_END), sb = lseek(b, 0, SEEK_END);
  if (sa != sb)
    return false;
  static uint8_t x[1 << 16], y[1 << 16];
  for (off_t off = 0; off < sa;) {
    ssize_t n = pread(a, x, sizeof(x), off);
    if (n <= 0 || pread(b, y, (size_t)n, off) != n || memcmp(x, y, (size_t)n) != 0)
      return false;
    off += n;
  }
  return true;
}

Test(db_sessions, a_large_queued_package_is_kept_in_parts_all_or_none, .timeout = 120) {
  char dev[CORDON_ID_HEX_SIZE], job[CORDON_ID_HEX_SIZE], small[CORDON_ID_HEX_SIZE];
  add_device(1, "box", dev);
  queued_job(dev, job);
  queued_job(dev, small);
  char src[320], dst[320];
  snprintf(src, sizeof(src), "%s/pkg", state_dir);
  snprintf(dst, sizeof(dst), "%s/back", state_dir);
  /* above what one row keeps: three parts, the last a short one */
  uint64_t size = SERVER_DB_PACKAGE_STORE_MAX + SERVER_DB_PACKAGE_PART + 12345;
  int in = pattern_file(src, size);
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_job_package_store(db, job, in, size, &d), 0, "%s", d.msg);
  uint8_t *got = NULL;
  size_t len = 0;
  cr_expect_eq(server_db_job_package_get(db, job, &got, &len, NULL), -ENOENT,
               "not in one row: servers before schema 12 read that and would take it whole");
  int out = open(dst, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert(out >= 0);
  uint64_t back = 0;
  cr_assert_eq(server_db_job_package_load(db, job, out, &back, &d), 0, "%s", d.msg);
  cr_expect_eq(back, size);
  cr_expect(same_files(in, out), "the same bytes back");
  /* a second store adds nothing */
  cr_assert_eq(server_db_job_package_store(db, job, in, size, &d), 0, "%s", d.msg);
  cr_assert_eq(ftruncate(out, 0), 0);
  cr_assert_eq(lseek(out, 0, SEEK_SET), 0);
  cr_assert_eq(server_db_job_package_load(db, job, out, &back, &d), 0, "%s", d.msg);
  cr_expect_eq(back, size, "still once");
  /* a small one: one row, read back the same way */
  uint64_t small_size = 5000;
  cr_assert_eq(server_db_job_package_store(db, small, in, small_size, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_job_package_get(db, small, &got, &len, NULL), 0, "one row");
  cr_expect_eq(len, small_size);
  free(got);
  /* a part that went (a purge racing the read) is no package, never a
   * shorter one */
  exec_sql("DELETE FROM job_package_parts WHERE part = 1");
  cr_assert_eq(ftruncate(out, 0), 0);
  cr_assert_eq(lseek(out, 0, SEEK_SET), 0);
  cr_expect_eq(server_db_job_package_load(db, job, out, &back, NULL), -ENOENT);
  /* a store that fails half-way keeps nothing (here: the file is shorter
   * than it is said to be, after the first part) */
  exec_sql("DELETE FROM job_package_parts");
  cr_expect_lt(server_db_job_package_store(db, job, in, size + SERVER_DB_PACKAGE_PART, NULL), 0);
  cr_expect_eq(server_db_job_package_load(db, job, out, &back, NULL), -ENOENT,
               "no part of a failed store stays");
  cr_expect_eq(server_db_job_package_store(db, job, in, SERVER_DB_PACKAGE_MAX + 1, NULL), -EFBIG);
  /* the parts go when the job leaves the queue */
  cr_assert_eq(server_db_job_package_store(db, job, in, size, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_job_package_purge(db, NULL), 0);
  cr_assert_eq(ftruncate(out, 0), 0);
  cr_assert_eq(lseek(out, 0, SEEK_SET), 0);
  cr_assert_eq(server_db_job_package_load(db, job, out, &back, NULL), 0, "still queued: kept");
  cr_assert_eq(server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_CANCELLED,
                                        "cancelled", NULL),
               0);
  cr_assert_eq(server_db_job_package_purge(db, NULL), 0);
  cr_expect_eq(server_db_job_package_load(db, job, out, &back, NULL), -ENOENT);
  close(in);
  close(out);
}

Test(db_sessions, an_instance_lists_its_revoked_devices_and_cancelled_jobs) {
  char dev[CORDON_ID_HEX_SIZE], other[CORDON_ID_HEX_SIZE], job[CORDON_ID_HEX_SIZE];
  add_device(1, "box", dev);
  add_device(2, "other", other);
  cr_assert_eq(server_db_session_claim(db, dev, INST_A, SESS_1, 1010, NULL), 0);
  cr_assert_eq(server_db_session_claim(db, other, INST_B, SESS_2, 1010, NULL), 0);
  uint8_t hash[32] = {7};
  struct server_db_job_new nj = {
      .user_id = user, .device_id = dev, .package_hash = hash, .args_json = "[]"};
  cr_assert_eq(server_db_job_add(db, &nj, job, NULL), 0);
  struct server_db_session_rows rows = {0};
  cr_assert_eq(server_db_session_list_cancelled(db, INST_A, 0, &rows, NULL), 0);
  cr_expect_eq(rows.count, 0);
  server_db_session_rows_release(&rows);
  cr_assert_eq(server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_CANCELLED,
                                        "cancelled", NULL),
               0);
  cr_assert_eq(server_db_session_list_cancelled(db, INST_A, 1000, &rows, NULL), 0);
  cr_assert_eq(rows.count, 1);
  cr_expect_str_eq(rows.items[0].job_id, job);
  cr_expect_str_eq(rows.items[0].device_id, dev);
  server_db_session_rows_release(&rows);
  cr_assert_eq(server_db_session_list_cancelled(db, INST_A, 1001, &rows, NULL), 0);
  cr_expect_eq(rows.count, 0, "cancelled before since");
  server_db_session_rows_release(&rows);
  cr_assert_eq(server_db_session_list_cancelled(db, INST_B, 0, &rows, NULL), 0);
  cr_expect_eq(rows.count, 0, "another instance's device");
  server_db_session_rows_release(&rows);

  cr_assert_eq(server_db_session_list_revoked(db, INST_A, &rows, NULL), 0);
  cr_expect_eq(rows.count, 0);
  server_db_session_rows_release(&rows);
  cr_assert_eq(server_db_device_revoke(db, dev, NULL), 0);
  cr_assert_eq(server_db_session_list_revoked(db, INST_A, &rows, NULL), 0);
  cr_assert_eq(rows.count, 1);
  cr_expect_str_eq(rows.items[0].device_id, dev);
  server_db_session_rows_release(&rows);
  cr_assert_eq(server_db_session_list_revoked(db, INST_B, &rows, NULL), 0);
  cr_expect_eq(rows.count, 0);
  server_db_session_rows_release(&rows);
}

Test(db_sessions, a_listening_handle_hears_a_notify) {
  int fd = -1;
  if (!pg_test_base()) {
    cr_expect_eq(server_db_queue_listen(db, &fd, NULL), -EOPNOTSUPP);
    cr_expect_eq(server_db_queue_notify(db, NULL), 0, "nothing to tell");
    return;
  }
  struct server_db *ear = NULL;
  cr_assert_eq(server_db_open(state_dir, 0, &ear, NULL), 0);
  cr_assert_eq(server_db_queue_listen(ear, &fd, NULL), 0);
  cr_assert_geq(fd, 0);
  cr_expect_eq(server_db_queue_notifications(ear), 0, "nothing yet");
  cr_assert_eq(server_db_queue_notify(db, NULL), 0);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  cr_assert_eq(poll(&p, 1, 5000), 1, "the socket became readable");
  int n = 0;
  for (int i = 0; i < 50 && (n = server_db_queue_notifications(ear)) == 0; i++)
    usleep(10000);
  cr_expect_eq(n, 1);
  server_db_close(ear);
}

/* Two servers (two handles, two threads) recording one job's result at
 * the same moment: one records it, the other is told it was (-EALREADY). */
struct racer {
  struct server_db *h;
  const char *job, *dev, *text;
  int rc;
};

static void *record(void *arg) {
  struct racer *r = arg;
  enum server_db_job_state after;
  r->rc = server_db_job_record_result(r->h, r->job, r->dev, SERVER_DB_JOB_DONE, NULL, r->text,
                                      &after, NULL);
  return NULL;
}

Test(db_sessions, two_servers_racing_to_record_a_result_record_it_once) {
  char dev[CORDON_ID_HEX_SIZE];
  add_device(1, "box", dev);
  for (int round = 0; round < 20; round++) {
    char job[CORDON_ID_HEX_SIZE];
    uint8_t hash[32] = {7};
    struct server_db_job_new nj = {
        .user_id = user, .device_id = dev, .package_hash = hash, .args_json = "[]"};
    cr_assert_eq(server_db_job_add(db, &nj, job, NULL), 0);
    uint8_t ticket[8] = {1};
    cr_assert_eq(server_db_job_send_with_ticket(db, job, dev, 5000, ticket, sizeof(ticket), NULL),
                 0);
    struct racer r[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
      r[i] = (struct racer){.job = job, .dev = dev, .text = i ? "{\"b\":1}" : "{\"a\":1}"};
      cr_assert_eq(server_db_open(state_dir, 0, &r[i].h, NULL), 0);
    }
    for (int i = 0; i < 2; i++)
      cr_assert_eq(pthread_create(&t[i], NULL, record, &r[i]), 0);
    for (int i = 0; i < 2; i++) {
      pthread_join(t[i], NULL);
      server_db_close(r[i].h);
    }
    cr_assert((r[0].rc == 0 && r[1].rc == -EALREADY) || (r[1].rc == 0 && r[0].rc == -EALREADY),
              "round %d: %d and %d", round, r[0].rc, r[1].rc);
    struct server_db_job j;
    cr_assert_eq(server_db_job_get(db, job, &j, NULL), 0);
    cr_expect_str_eq(j.result_json, r[0].rc == 0 ? r[0].text : r[1].text, "the winner's result");
    cr_expect_eq(j.state, SERVER_DB_JOB_DONE);
    server_db_job_release(&j);
  }
}
