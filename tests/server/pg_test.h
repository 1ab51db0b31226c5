/* The PostgreSQL pass of the server tests: when CORDON_TEST_DB is set (a
 * base URL such as scripts/pg-temp.sh prints), each test's state directory
 * gets a database of its own on that server — created with a unique name,
 * named in STATE/db-url (server/db.h), dropped at the end — so every
 * server_db_open and every cordon-server command of the test runs on
 * PostgreSQL. Unset: nothing happens, the tests run on SQLite. */
#ifndef CORDON_TESTS_SERVER_PG_TEST_H
#define CORDON_TESTS_SERVER_PG_TEST_H

#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/db.h"

#define PG_TEST_FN static __attribute__((unused))

static char pg_test_name[64];      /* the test's database, "" when none */
static char pg_test_url_buf[1100]; /* its URL */

/* The base URL, or NULL when the tests run on SQLite. */
PG_TEST_FN const char *pg_test_base(void) {
  const char *u = getenv("CORDON_TEST_DB");
  return u && *u ? u : NULL;
}

/* base with its database name replaced by name. */
PG_TEST_FN void pg_test_url_for(const char *name, char *out, size_t size) {
  const char *base = pg_test_base();
  const char *auth = strstr(base, "://");
  const char *slash = strchr(auth ? auth + 3 : base, '/');
  const char *query = strchr(base, '?');
  if (!slash || (query && slash > query)) { /* no path: add one */
    size_t head = query ? (size_t)(query - base) : strlen(base);
    snprintf(out, size, "%.*s/%s%s", (int)head, base, name, query ? query : "");
    return;
  }
  snprintf(out, size, "%.*s/%s%s", (int)(slash - base), base, name, query ? query : "");
}

/* Run sql on the database (name NULL: the base one); 0 or -1. */
PG_TEST_FN int pg_test_exec_on(const char *name, const char *sql) {
  char url[1100];
  if (name)
    pg_test_url_for(name, url, sizeof(url));
  else
    snprintf(url, sizeof(url), "%s", pg_test_base());
  PGconn *c = PQconnectdb(url);
  int rc = -1;
  if (PQstatus(c) == CONNECTION_OK) {
    PGresult *r = PQexec(c, sql);
    ExecStatusType s = PQresultStatus(r);
    rc = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? 0 : -1;
    PQclear(r);
  }
  PQfinish(c);
  return rc;
}

/* Run sql on the test's own database. */
PG_TEST_FN int pg_test_exec(const char *sql) {
  return pg_test_exec_on(pg_test_name, sql);
}

/* A new database on the server, for this test: its URL (static storage),
 * NULL when the tests run on SQLite. */
PG_TEST_FN const char *pg_test_new_db(void) {
  if (!pg_test_base())
    return NULL;
  unsigned r = 0;
  FILE *f = fopen("/dev/urandom", "rb");
  if (f) {
    if (fread(&r, sizeof(r), 1, f) != 1)
      r = 0;
    fclose(f);
  }
  snprintf(pg_test_name, sizeof(pg_test_name), "cordon_t_%d_%08x", (int)getpid(), r);
  char sql[128];
  snprintf(sql, sizeof(sql), "CREATE DATABASE %s", pg_test_name);
  cr_assert_eq(pg_test_exec_on(NULL, sql), 0, "cannot create database %s on %s", pg_test_name,
               pg_test_base());
  pg_test_url_for(pg_test_name, pg_test_url_buf, sizeof(pg_test_url_buf));
  return pg_test_url_buf;
}

/* A new database for state_dir (which must exist), named in STATE/db-url. */
PG_TEST_FN void pg_test_attach(const char *state_dir) {
  const char *url = pg_test_new_db();
  if (!url)
    return;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_save_url(state_dir, url, &d), 0, "%s", d.msg);
}

/* Drop the test's database (its connections closed first). */
PG_TEST_FN void pg_test_drop(void) {
  if (!pg_test_base() || !pg_test_name[0])
    return;
  char sql[128];
  snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s WITH (FORCE)", pg_test_name);
  (void)pg_test_exec_on(NULL, sql);
  pg_test_name[0] = '\0';
}

/* What a test that skips itself from its body undoes first: criterion
 * runs no .fini after a skip, so the database (and, with e2e.h, which
 * points this at e2e_teardown, the daemons and the directory) would stay. */
static __attribute__((unused)) void (*pg_test_before_skip)(void) = pg_test_drop;
#define PG_TEST_SKIP(...)                                                                          \
  do {                                                                                             \
    if (pg_test_before_skip)                                                                       \
      pg_test_before_skip();                                                                       \
    cr_skip_test(__VA_ARGS__);                                                                     \
  } while (0)

/* Tests of SQLite's file itself: skipped on the PostgreSQL pass. */
#define PG_TEST_SQLITE_ONLY()                                                                      \
  do {                                                                                             \
    if (pg_test_base())                                                                            \
      PG_TEST_SKIP("SQLite's database file only");                                                 \
  } while (0)

#endif
