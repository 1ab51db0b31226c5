/* cordon-server state in SQLite (server/db.h): opening, migrations, the
 * statement cache, transactions and the helpers the per-table files share
 * (server/db_internal.h). Every statement is prepared once per handle from
 * the constant table; user data is only ever bound, never spliced into SQL. */
#include "server/db.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/id.h"
#include "server/db_internal.h"

#define DB_APPLICATION_ID 0x636f7264 /* "cord" */

/* --- schema --------------------------------------------------------------- */

/* migrations[n] takes the schema from version n to n + 1. Append only: never
 * edit a migration that has shipped. */
static const char *const migrations[] = {
    /* 0 -> 1 */
    "PRAGMA application_id = 1668248164;" /* DB_APPLICATION_ID */
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
    "  BEGIN SELECT RAISE(ABORT, 'a job result is recorded once'); END;",
    /* 1 -> 2: device labels; jobs that wait in the queue for a device */
    "CREATE TABLE device_labels ("
    "  device_id TEXT NOT NULL REFERENCES devices(id),"
    "  key TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 63),"
    "  value TEXT NOT NULL CHECK (length(value) BETWEEN 1 AND 63),"
    "  PRIMARY KEY (device_id, key)) WITHOUT ROWID;"
    "ALTER TABLE jobs ADD COLUMN queue_expires INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN where_labels TEXT;"
    "CREATE INDEX jobs_queued ON jobs (created) WHERE state = 'queued';",
    /* 2 -> 3: why a pairing code's last attempt failed (the agent is told
     * nothing; the operator sees it in pair-code list) */
    "ALTER TABLE pair_codes ADD COLUMN last_failure TEXT;"
    "ALTER TABLE pair_codes ADD COLUMN last_failure_at INTEGER NOT NULL DEFAULT 0;",
    /* 3 -> 4: device names unique per user among devices not revoked; an
     * older duplicate keeps its name, a newer one gets its id's first 8
     * digits appended */
    "UPDATE devices SET name = substr(name, 1, 55) || '-' || substr(id, 1, 8)"
    "  WHERE state <> 'revoked' AND EXISTS (SELECT 1 FROM devices o"
    "    WHERE o.user_id = devices.user_id AND o.name = devices.name"
    "    AND o.state <> 'revoked' AND o.rowid < devices.rowid);"
    "CREATE UNIQUE INDEX devices_user_name ON devices (user_id, name) WHERE state <> 'revoked';",
    /* 4 -> 5: the package's name and version, kept at dispatch (before:
     * only its hash) */
    "ALTER TABLE jobs ADD COLUMN package_name TEXT;"
    "ALTER TABLE jobs ADD COLUMN package_version TEXT;",
    /* 5 -> 6: the address a device last connected from */
    "ALTER TABLE devices ADD COLUMN last_addr TEXT;",
    /* 6 -> 7: enrolment approval (a device waits, pending, until an
     * operator approves it; per user, or for every user by run
     * --require-approval) and removed users (their rows stay: jobs keep
     * their history) */
    "ALTER TABLE devices ADD COLUMN approved INTEGER NOT NULL DEFAULT 1;"
    "ALTER TABLE users ADD COLUMN require_approval INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE users ADD COLUMN removed INTEGER NOT NULL DEFAULT 0;",
    /* 7 -> 8: receipts (docs/protocol/receipt.md): each device's signing
     * key, the ticket each job was sent with, and its signed receipt */
    "ALTER TABLE devices ADD COLUMN sign_key BLOB"
    "  CHECK (sign_key IS NULL OR length(sign_key) = 32);"
    "ALTER TABLE jobs ADD COLUMN ticket BLOB;"
    "ALTER TABLE jobs ADD COLUMN receipt BLOB;",
    /* 8 -> 9: a dispatch's idempotency key, one job per user and key */
    "ALTER TABLE jobs ADD COLUMN idem_key TEXT CHECK (idem_key IS NULL OR"
    "  length(idem_key) BETWEEN 1 AND 128);"
    "CREATE UNIQUE INDEX jobs_idem_key ON jobs (user_id, idem_key) WHERE idem_key IS NOT NULL;",
};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == SERVER_DB_SCHEMA_VERSION,
               "one migration per schema version");

static const char *const stmt_sql[] = {
#define DB_STMT_SQL_(name, sql) sql,
    DB_STATEMENTS(DB_STMT_SQL_)
#undef DB_STMT_SQL_
};

/* --- errors --------------------------------------------------------------- */

int db_map_rc(sqlite3 *h, int rc) {
  switch (rc & 0xff) {
  case SQLITE_OK:
  case SQLITE_DONE:
  case SQLITE_ROW:
    return 0;
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    return -EBUSY;
  case SQLITE_NOMEM:
    return -ENOMEM;
  case SQLITE_FULL:
    return -ENOSPC;
  case SQLITE_READONLY:
    return -EROFS;
  case SQLITE_PERM:
  case SQLITE_AUTH:
    return -EACCES;
  case SQLITE_IOERR:
  case SQLITE_CANTOPEN: {
    int e = h ? sqlite3_system_errno(h) : 0;
    return e > 0 ? -e : -EIO;
  }
  case SQLITE_CONSTRAINT:
    switch (rc) {
    case SQLITE_CONSTRAINT_UNIQUE:
    case SQLITE_CONSTRAINT_PRIMARYKEY:
      return -EEXIST;
    case SQLITE_CONSTRAINT_FOREIGNKEY:
      return -ENOENT;
    case SQLITE_CONSTRAINT_TRIGGER:
      return -EPERM;
    default:
      return -EINVAL;
    }
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB:
    return CORDON_E_CONFIG_INVALID;
  default:
    return CORDON_E_INTERNAL;
  }
}

/* Map rc to an error and describe it: "<path>: <what>: <sqlite message>". */
int db_fail(struct server_db *db, int rc, const char *what, struct cordon_diag *diag) {
  int err = db_map_rc(db->h, rc);
  if (err == 0)
    err = CORDON_E_INTERNAL;
  return cordon_diag_set(diag, err, "%s: %s: %s", db->path, what,
                         db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc));
}

int64_t server_db_now(const struct server_db *db) {
  if (db && db->fixed_now)
    return db->fixed_now;
  return (int64_t)(core_wall_ms() / 1000);
}

void server_db_set_clock(struct server_db *db, int64_t now) {
  if (db)
    db->fixed_now = now;
}

/* --- statements ----------------------------------------------------------- */

/* The cached statement for q, reset and without bindings. */
static int group_before_stmt(struct server_db *db, sqlite3_stmt *st, struct cordon_diag *diag);

int db_stmt(struct server_db *db, enum db_stmt q, sqlite3_stmt **out_st, struct cordon_diag *diag) {
  if (!db->stmts[q]) {
    int rc =
        sqlite3_prepare_v3(db->h, stmt_sql[q], -1, SQLITE_PREPARE_PERSISTENT, &db->stmts[q], NULL);
    if (rc != SQLITE_OK)
      return db_fail(db, rc, "prepare", diag);
  }
  int err = group_before_stmt(db, db->stmts[q], diag); /* group commit */
  if (err)
    return err;
  *out_st = db->stmts[q];
  return 0;
}

/* Done with a statement: reset it so it holds no locks, drop bindings. */
void db_done(sqlite3_stmt *st) {
  if (st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
}

/* Run a statement that returns no rows (or whose rows do not matter). */
int db_exec_stmt(struct server_db *db, sqlite3_stmt *st, const char *what,
                 struct cordon_diag *diag) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    ;
  int err = rc == SQLITE_DONE ? 0 : db_fail(db, rc, what, diag);
  db_done(st);
  return err;
}

int db_simple(struct server_db *db, enum db_stmt q, const char *what, struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  return db_exec_stmt(db, st, what, diag);
}

int db_stmt_text(struct server_db *db, enum db_stmt q, const char *text, sqlite3_stmt **out_st,
                 struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  db_bind_text(st, 1, text, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  *out_st = st;
  return 0;
}

/* --- transactions and group commit --------------------------------------- */

/* The group's transaction ended: committed (err 0) or rolled back. */
static void group_ended(struct server_db *db, int err) {
  struct db_group *g = &db->group;
  g->open = false;
  g->ops = 0;
  if (g->ended)
    g->ended(g->ended_arg, err);
}

/* SQLite rolls a transaction back by itself after some errors (disk full,
 * I/O, out of memory): then the ops still open fail too. */
static bool group_check_lost(struct server_db *db) {
  struct db_group *g = &db->group;
  if (!g->open || !sqlite3_get_autocommit(db->h))
    return false;
  int err = db_map_rc(db->h, sqlite3_extended_errcode(db->h));
  g->lost = g->depth > 0;
  g->lost_err = err ? err : -EIO;
  g->tx_nested = 0;
  group_ended(db, g->lost_err);
  return true;
}

/* Before each statement: a write outside an op commits the open group
 * first (it keeps db.h's contract: committed when it returns); inside an
 * op whose group was rolled back, nothing more runs. */
static int group_before_stmt(struct server_db *db, sqlite3_stmt *st, struct cordon_diag *diag) {
  struct db_group *g = &db->group;
  if (g->open && g->depth == 0 && !sqlite3_stmt_readonly(st))
    server_db_group_commit(db, NULL);
  else if (g->open && g->depth > 0)
    group_check_lost(db);
  if (g->lost)
    return cordon_diag_set(diag, g->lost_err, "%s: the group transaction was rolled back: %s",
                           db->path, cordon_err_message(g->lost_err));
  return 0;
}

static int count_commit(void *arg) {
  ((struct server_db *)arg)->commits++;
  return 0; /* go on with the commit */
}

void server_db_group_enable(struct server_db *db, server_db_group_fn *ended, void *arg) {
  db->group.ended = ended;
  db->group.ended_arg = arg;
}

bool server_db_group_pending(const struct server_db *db) {
  return db->group.open;
}

uint64_t server_db_commit_count(const struct server_db *db) {
  return db->commits;
}

int server_db_group_commit(struct server_db *db, struct cordon_diag *diag) {
  struct db_group *g = &db->group;
  if (!g->open || g->depth > 0)
    return 0;
  int err = db_simple(db, Q_COMMIT, "commit", diag);
  if (err && !sqlite3_get_autocommit(db->h))
    db_simple(db, Q_ROLLBACK, "rollback", NULL);
  group_ended(db, err);
  return err;
}

int server_db_group_op_begin(struct server_db *db, struct cordon_diag *diag) {
  struct db_group *g = &db->group;
  if (g->lost)
    return cordon_diag_set(diag, g->lost_err, "%s: the group transaction was rolled back",
                           db->path);
  if (g->open && g->depth == 0 &&
      (g->ops >= SERVER_DB_GROUP_OPS_MAX ||
       (int64_t)core_mono_ms() - g->opened_ms >= SERVER_DB_GROUP_MS_MAX))
    server_db_group_commit(db, NULL); /* full: its ops are durable sooner */
  int err;
  if (!g->open) {
    if ((err = db_simple(db, Q_BEGIN_IMMEDIATE, "begin", diag)))
      return err;
    g->open = true;
    g->opened_ms = (int64_t)core_mono_ms();
  }
  if ((err = db_simple(db, Q_GROUP_SAVEPOINT, "savepoint", diag))) {
    group_check_lost(db);
    return err;
  }
  g->depth++;
  g->ops++;
  return 0;
}

int server_db_group_op_end(struct server_db *db, int err) {
  struct db_group *g = &db->group;
  if (g->depth == 0)
    return err;
  if (!g->lost)
    group_check_lost(db);
  if (g->lost) {
    if (!err)
      err = g->lost_err;
    if (--g->depth == 0)
      g->lost = false;
    return err;
  }
  if (err)
    db_simple(db, Q_GROUP_ROLLBACK_TO, "rollback to", NULL);
  int rerr = db_simple(db, Q_GROUP_RELEASE, "release", NULL);
  g->depth--;
  if (rerr && !err) {
    err = rerr;
    if (!group_check_lost(db))
      db_simple(db, Q_GROUP_ROLLBACK_TO, "rollback to", NULL);
  }
  return err;
}

int db_tx_begin(struct server_db *db, struct cordon_diag *diag) {
  if (db->group.depth > 0) { /* inside an op: a part of the group's transaction */
    int err = db_simple(db, Q_TX_SAVEPOINT, "savepoint", diag);
    if (!err)
      db->group.tx_nested++;
    return err;
  }
  if (db->group.open)
    server_db_group_commit(db, NULL);
  return db_simple(db, Q_BEGIN_IMMEDIATE, "begin", diag);
}

int db_tx_commit(struct server_db *db, struct cordon_diag *diag) {
  if (db->group.depth > 0) {
    if (db->group.tx_nested == 0)
      return cordon_diag_set(diag, db->group.lost ? db->group.lost_err : CORDON_E_INTERNAL,
                             "%s: commit: no transaction", db->path);
    db->group.tx_nested--;
    int err = db_simple(db, Q_TX_RELEASE, "release", diag);
    if (err) {
      db_simple(db, Q_TX_ROLLBACK_TO, "rollback to", NULL);
      db_simple(db, Q_TX_RELEASE, "release", NULL);
    }
    return err;
  }
  int err = db_simple(db, Q_COMMIT, "commit", diag);
  if (err && !sqlite3_get_autocommit(db->h))
    db_simple(db, Q_ROLLBACK, "rollback", NULL);
  return err;
}

void db_tx_rollback(struct server_db *db) {
  if (db->group.depth > 0) {
    if (db->group.tx_nested == 0)
      return; /* a failed commit ended it already */
    db->group.tx_nested--;
    db_simple(db, Q_TX_ROLLBACK_TO, "rollback to", NULL);
    db_simple(db, Q_TX_RELEASE, "release", NULL);
    return;
  }
  if (!sqlite3_get_autocommit(db->h))
    db_simple(db, Q_ROLLBACK, "rollback", NULL);
}

/* Setting this pragma does no I/O; it fails only when out of memory. In a
 * transaction SQLite refuses it, and the group's commit is synced anyway. */
void db_sync_relax(struct server_db *db) {
  if (sqlite3_get_autocommit(db->h))
    (void)sqlite3_exec(db->h, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL);
}

void db_sync_restore(struct server_db *db) {
  if (sqlite3_get_autocommit(db->h))
    (void)sqlite3_exec(db->h, "PRAGMA synchronous = FULL", NULL, NULL, NULL);
}

/* --- end of transactions and group commit --------------------------------- */

/* Bind helpers: any failure is remembered and reported by db_bind_check. */
void db_bind_text(sqlite3_stmt *st, int i, const char *s, int *rc) {
  int r = s ? sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, i);
  if (r != SQLITE_OK && *rc == SQLITE_OK)
    *rc = r;
}

void db_bind_int(sqlite3_stmt *st, int i, int64_t v, int *rc) {
  int r = sqlite3_bind_int64(st, i, v);
  if (r != SQLITE_OK && *rc == SQLITE_OK)
    *rc = r;
}

void db_bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n, int *rc) {
  int r = sqlite3_bind_blob(st, i, p, (int)n, SQLITE_TRANSIENT);
  if (r != SQLITE_OK && *rc == SQLITE_OK)
    *rc = r;
}

int db_bind_check(struct server_db *db, sqlite3_stmt *st, int rc, struct cordon_diag *diag) {
  if (rc == SQLITE_OK)
    return 0;
  int err = db_fail(db, rc, "bind", diag);
  db_done(st);
  return err;
}

void db_col_text(sqlite3_stmt *st, int i, char *dst, size_t size) {
  const unsigned char *s = sqlite3_column_text(st, i);
  snprintf(dst, size, "%s", s ? (const char *)s : "");
}

int db_col_dup(sqlite3_stmt *st, int i, char **out) {
  const unsigned char *s = sqlite3_column_text(st, i);
  if (!s) {
    *out = NULL;
    return 0;
  }
  char *d = strdup((const char *)s);
  if (!d)
    return -ENOMEM;
  *out = d;
  return 0;
}

void db_col_blob(sqlite3_stmt *st, int i, uint8_t *dst, size_t size) {
  const void *p = sqlite3_column_blob(st, i);
  int n = sqlite3_column_bytes(st, i);
  memset(dst, 0, size);
  if (p && n == (int)size)
    memcpy(dst, p, size);
}

/* Grow an array by one zeroed element; NULL when out of memory. */
void *db_list_push(void **items, size_t *count, size_t *cap, size_t elem) {
  if (*count == *cap) {
    size_t ncap = *cap ? *cap * 2 : 8;
    void *n = realloc(*items, ncap * elem);
    if (!n)
      return NULL;
    *items = n;
    *cap = ncap;
  }
  void *slot = (char *)*items + *count * elem;
  memset(slot, 0, elem);
  (*count)++;
  return slot;
}

/* --- validation and ids --------------------------------------------------- */

bool db_valid_token(const char *s, size_t max) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > max)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  }
  return true;
}

bool db_valid_json(const char *s, size_t max, bool want_object) {
  size_t n = strnlen(s, max + 1);
  if (n > max)
    return false;
  json_error_t jerr;
  json_t *j = json_loadb(s, n, JSON_REJECT_DUPLICATES, &jerr);
  bool ok = j && (want_object ? json_is_object(j) : json_is_array(j));
  json_decref(j);
  return ok;
}

void db_new_id(char out[CORDON_ID_HEX_SIZE]) {
  uint8_t b[CORDON_ID_LEN];
  cordon_id_random(b);
  cordon_id_to_hex(b, out);
}

/* --- open and migrate ----------------------------------------------------- */

static int read_schema_version(struct server_db *db, int *out_version, struct cordon_diag *diag) {
  /* No schema_version table: an empty database is version 0, anything else
   * is not ours. */
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db->h,
                              "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                              " AND name = 'schema_version'), (SELECT count(*) FROM sqlite_master),"
                              " (SELECT application_id FROM pragma_application_id)",
                              -1, &st, NULL);
  if (rc != SQLITE_OK)
    return db_fail(db, rc, "read schema", diag);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    int err = db_fail(db, rc, "read schema", diag);
    sqlite3_finalize(st);
    return err;
  }
  int64_t has_table = sqlite3_column_int64(st, 0), objects = sqlite3_column_int64(st, 1);
  int64_t app_id = sqlite3_column_int64(st, 2);
  sqlite3_finalize(st);
  if (app_id != 0 && app_id != DB_APPLICATION_ID)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not a cordon database", db->path);
  if (!has_table) {
    if (objects != 0)
      return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                             "%s: not a cordon database (no schema_version table)", db->path);
    *out_version = 0;
    return 0;
  }
  int err = db_stmt(db, Q_SCHEMA_VERSION, &st, diag);
  if (err)
    return err;
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    err = rc == SQLITE_DONE ? cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                                              "%s: schema_version is empty", db->path)
                            : db_fail(db, rc, "read schema version", diag);
    db_done(st);
    return err;
  }
  int64_t v = sqlite3_column_int64(st, 0);
  db_done(st);
  if (v < 0 || v > 1000000)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: bad schema version %lld", db->path,
                           (long long)v);
  *out_version = (int)v;
  return 0;
}

static int refuse_newer(struct server_db *db, int version, struct cordon_diag *diag) {
  return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                         "%s: database schema version %d is newer than this cordon-server knows "
                         "(%d); use the cordon-server that wrote it or a newer one",
                         db->path, version, SERVER_DB_SCHEMA_VERSION);
}

static int migrate(struct server_db *db, struct cordon_diag *diag) {
  int version;
  int err = read_schema_version(db, &version, diag);
  if (err)
    return err;
  if (version > SERVER_DB_SCHEMA_VERSION)
    return refuse_newer(db, version, diag);
  while (version < SERVER_DB_SCHEMA_VERSION) {
    /* One step per transaction; re-read under the write lock, another
     * process may have migrated meanwhile. */
    err = db_tx_begin(db, diag);
    if (err)
      return err;
    err = read_schema_version(db, &version, diag);
    if (err)
      goto out_rollback;
    if (version > SERVER_DB_SCHEMA_VERSION) {
      err = refuse_newer(db, version, diag);
      goto out_rollback;
    }
    if (version == SERVER_DB_SCHEMA_VERSION) {
      db_tx_rollback(db);
      break;
    }
    char *msg = NULL;
    int rc = sqlite3_exec(db->h, migrations[version], NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
      err = cordon_diag_set(diag, db_map_rc(db->h, rc) ? db_map_rc(db->h, rc) : CORDON_E_INTERNAL,
                            "%s: migration %d -> %d: %s", db->path, version, version + 1,
                            msg ? msg : sqlite3_errstr(rc));
      sqlite3_free(msg);
      goto out_rollback;
    }
    sqlite3_stmt *st = NULL;
    err = db_stmt(db, Q_SET_SCHEMA_VERSION, &st, diag);
    if (err)
      goto out_rollback;
    int brc = SQLITE_OK;
    db_bind_int(st, 1, version + 1, &brc);
    err = db_bind_check(db, st, brc, diag);
    if (!err)
      err = db_exec_stmt(db, st, "set schema version", diag);
    if (err)
      goto out_rollback;
    err = db_tx_commit(db, diag);
    if (err)
      return err;
    version++;
  }
  return 0;
out_rollback:
  db_tx_rollback(db);
  return err;
}

static int pragma(struct server_db *db, const char *sql, const char *expect,
                  struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db->h, sql, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return db_fail(db, rc, sql, diag);
  int err = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const unsigned char *v = sqlite3_column_text(st, 0);
    if (expect && (!v || strcmp((const char *)v, expect) != 0))
      err = cordon_diag_set(diag, CORDON_E_INTERNAL, "%s: %s gave '%s', wanted '%s'", db->path, sql,
                            v ? (const char *)v : "", expect);
  }
  if (rc != SQLITE_DONE && !err)
    err = db_fail(db, rc, sql, diag);
  sqlite3_finalize(st);
  return err;
}

/* Make sure STATE/cordon.db exists (when asked) as a regular 0600 file, so
 * that SQLite, which copies the database's mode to its -wal and -shm files,
 * never makes a world-readable one. */
static int prepare_file(const char *state_dir, const char *path, unsigned flags,
                        struct cordon_diag *diag) {
  struct stat st;
  if (stat(state_dir, &st) < 0) {
    int e = errno;
    if (e == ENOENT)
      return cordon_diag_set(
          diag, -ENOENT, "state directory %s does not exist (run cordon-server init)", state_dir);
    return cordon_diag_set(diag, -e, "%s: %s", state_dir, strerror(e));
  }
  if (!S_ISDIR(st.st_mode))
    return cordon_diag_set(diag, -ENOTDIR, "%s is not a directory", state_dir);
  int oflags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY;
  if (flags & SERVER_DB_CREATE)
    oflags |= O_CREAT;
  int fd = open(path, oflags, 0600);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT)
      return cordon_diag_set(diag, -ENOENT, "no database %s (run cordon-server init)", path);
    return cordon_diag_set(diag, -e, "%s: %s", path, strerror(e));
  }
  int err = 0;
  if (fstat(fd, &st) < 0) {
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s is not a regular file", path);
  } else if (st.st_size == 0 && (st.st_mode & 07777) != 0600) {
    /* new (or never written): exactly 0600 whatever the umask */
    if (fchmod(fd, 0600) < 0)
      err = cordon_diag_set(diag, -errno, "%s: chmod: %s", path, strerror(errno));
  } else if (st.st_mode & 077) {
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                          "%s is accessible by group or others (mode %03o); chmod 600 it", path,
                          (unsigned)(st.st_mode & 0777));
  }
  close(fd);
  return err;
}

int server_db_open(const char *state_dir, unsigned flags, struct server_db **out_db,
                   struct cordon_diag *diag) {
  if (!state_dir || !out_db)
    return cordon_diag_set(diag, -EINVAL, "server_db_open: missing argument");
  if (sodium_init() < 0)
    return cordon_diag_set(diag, CORDON_E_CRYPTO, "libsodium failed to initialise");
  struct server_db *db = calloc(1, sizeof(*db));
  if (!db)
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  int err;
  int n = snprintf(db->path, sizeof(db->path), "%s/%s", state_dir, SERVER_DB_FILE);
  if (n < 0 || (size_t)n >= sizeof(db->path)) {
    err = cordon_diag_set(diag, -ENAMETOOLONG, "state directory path too long");
    goto out_free;
  }
  err = prepare_file(state_dir, db->path, flags, diag);
  if (err)
    goto out_free;
  int rc = sqlite3_open_v2(
      db->path, &db->h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_EXRESCODE, NULL);
  if (rc != SQLITE_OK) {
    err = db_fail(db, rc, "open", diag);
    goto out_free;
  }
  sqlite3_extended_result_codes(db->h, 1);
  sqlite3_busy_timeout(db->h, SERVER_DB_BUSY_TIMEOUT_MS);
  sqlite3_commit_hook(db->h, count_commit, db);
  /* These take no user data. */
  if ((err = pragma(db, "PRAGMA journal_mode = WAL", "wal", diag)) ||
      (err = pragma(db, "PRAGMA synchronous = FULL", NULL, diag)) ||
      (err = pragma(db, "PRAGMA foreign_keys = ON", NULL, diag)) ||
      (err = pragma(db, "PRAGMA trusted_schema = OFF", NULL, diag)) ||
      (err = pragma(db, "PRAGMA secure_delete = ON", NULL, diag)))
    goto out_free;
  err = migrate(db, diag);
  if (err)
    goto out_free;
  *out_db = db;
  return 0;
out_free:
  server_db_close(db);
  return err;
}

void server_db_close(struct server_db *db) {
  if (!db)
    return;
  for (size_t i = 0; i < Q_COUNT_; i++)
    sqlite3_finalize(db->stmts[i]);
  sqlite3_close(db->h);
  free(db);
}

int server_db_schema_version(struct server_db *db, int *out_version, struct cordon_diag *diag) {
  int v = 0; /* gcc -O3 cannot see that every failure returns nonzero */
  int err = read_schema_version(db, &v, diag);
  if (err)
    return err;
  *out_version = v;
  return 0;
}

/* --- backup and restore --------------------------------------------------- */

/* Copy all of src into dst with SQLite's online backup API, waiting out a
 * writer that holds the lock (up to the busy timeout). */
static int copy_database(sqlite3 *dst, sqlite3 *src, const char *what, struct cordon_diag *diag) {
  sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
  if (!b)
    return cordon_diag_set(diag, db_map_rc(dst, sqlite3_errcode(dst)), "%s: %s", what,
                           sqlite3_errmsg(dst));
  int rc, waited_ms = 0;
  while ((rc = sqlite3_backup_step(b, -1)) == SQLITE_BUSY || rc == SQLITE_LOCKED) {
    if (waited_ms >= SERVER_DB_BUSY_TIMEOUT_MS)
      break;
    sqlite3_sleep(50);
    waited_ms += 50;
  }
  sqlite3_backup_finish(b);
  if (rc != SQLITE_DONE)
    return cordon_diag_set(diag, db_map_rc(dst, rc) ? db_map_rc(dst, rc) : CORDON_E_INTERNAL,
                           "%s: %s", what, sqlite3_errstr(rc));
  return 0;
}

int server_db_backup(struct server_db *db, const char *path, struct cordon_diag *diag) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  close(fd);
  sqlite3 *dst = NULL;
  int rc = sqlite3_open_v2(path, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL);
  int err = rc == SQLITE_OK ? 0
                            : cordon_diag_set(diag, db_map_rc(dst, rc), "%s: %s", path,
                                              dst ? sqlite3_errmsg(dst) : sqlite3_errstr(rc));
  if (!err)
    err = copy_database(dst, db->h, path, diag);
  if (sqlite3_close(dst) != SQLITE_OK && !err)
    err = cordon_diag_set(diag, -EIO, "%s: close failed", path);
  if (err)
    unlink(path);
  return err;
}

int server_db_restore(struct server_db *db, const char *path, struct cordon_diag *diag) {
  struct server_db *src = calloc(1, sizeof(*src));
  if (!src)
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  snprintf(src->path, sizeof(src->path), "%s", path);
  int err = 0, version = 0;
  struct stat st;
  if (stat(path, &st) < 0)
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s is not a regular file", path);
  int rc = err ? SQLITE_OK
               : sqlite3_open_v2(path, &src->h, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, NULL);
  if (!err && rc != SQLITE_OK)
    err = db_fail(src, rc, "open", diag);
  if (!err)
    err = read_schema_version(src, &version, diag);
  if (!err && version == 0)
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: an empty database", path);
  if (!err && version > SERVER_DB_SCHEMA_VERSION)
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                          "%s: schema version %d is newer than this cordon-server knows (%d)", path,
                          version, SERVER_DB_SCHEMA_VERSION);
  if (!err) {
    /* the prepared statements of db refer to the schema being replaced */
    for (size_t i = 0; i < Q_COUNT_; i++) {
      sqlite3_finalize(db->stmts[i]);
      db->stmts[i] = NULL;
    }
    err = copy_database(db->h, src->h, db->path, diag);
  }
  server_db_close(src);
  if (!err)
    err = migrate(db, diag); /* an older backup comes up to this schema */
  return err;
}
