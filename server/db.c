/* cordon-server state in SQLite (server/db.h). Every statement is prepared
 * once per handle from the constant table below; user data is only ever
 * bound, never spliced into SQL. */
#include "server/db.h"

#include "proto/pairing.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DB_APPLICATION_ID 0x636f7264 /* "cord" */
#define DB_ID_BYTES 16
#define DB_CODE_BYTES 25 /* 200 bits = 40 base32 characters */
#define DB_CODE_GROUP 5
#define DB_CODE_KEEP_S (7 * 24 * 3600) /* expired codes are kept this long, then purged */
#define DB_LIVE_STATES "('queued','sent','running')"

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
};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == SERVER_DB_SCHEMA_VERSION,
               "one migration per schema version");

/* --- prepared statements -------------------------------------------------- */

#define DEVICE_COLUMNS                                                                             \
  "d.id, d.user_id, u.name, d.name, d.platform, d.public_key, d.best_level,"                       \
  " d.downgrade_reason, d.facts, d.max_jobs, d.state, d.online, d.last_seen, d.created"            \
  " FROM devices d JOIN users u ON u.id = d.user_id"
#define JOB_COLUMNS                                                                                \
  "j.id, j.user_id, u.name, j.device_id, j.package_hash, j.args, j.state, j.error, j.result,"      \
  " j.created, j.updated, j.deadline FROM jobs j JOIN users u ON u.id = j.user_id"

#define DB_STATEMENTS(X)                                                                           \
  X(BEGIN_IMMEDIATE, "BEGIN IMMEDIATE")                                                            \
  X(COMMIT, "COMMIT")                                                                              \
  X(ROLLBACK, "ROLLBACK")                                                                          \
  X(SCHEMA_VERSION, "SELECT version FROM schema_version")                                          \
  X(SET_SCHEMA_VERSION, "UPDATE schema_version SET version = ?1")                                  \
  X(USER_ADD, "INSERT INTO users (name, created) VALUES (?1, ?2)")                                 \
  X(USER_GET, "SELECT id, name, created FROM users WHERE id = ?1")                                 \
  X(USER_GET_BY_NAME, "SELECT id, name, created FROM users WHERE name = ?1")                       \
  X(USER_LIST, "SELECT id, name, created FROM users ORDER BY id")                                  \
  X(CODE_COUNT_USABLE, "SELECT count(*) FROM pair_codes WHERE user_id = ?1 AND state = 'live'"     \
                       " AND attempts > 0 AND expires > ?2")                                       \
  X(CODE_PURGE, "DELETE FROM pair_codes WHERE user_id = ?1 AND expires < ?2")                      \
  X(CODE_ADD, "INSERT INTO pair_codes (id, user_id, key, created, expires, attempts, state)"       \
              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'live')")                                          \
  X(CODE_LOOKUP, "SELECT user_id, key, attempts, state, created, expires FROM pair_codes"          \
                 " WHERE id = ?1")                                                                 \
  X(CODE_FAIL, "UPDATE pair_codes SET attempts = attempts - 1,"                                    \
               " state = CASE WHEN attempts <= 1 THEN 'burned' ELSE state END,"                    \
               " key = CASE WHEN attempts <= 1 THEN NULL ELSE key END"                             \
               " WHERE id = ?1 AND state = 'live' AND attempts > 0 RETURNING attempts")            \
  X(CODE_CONSUME, "UPDATE pair_codes SET state = 'used', used_at = ?2, key = NULL"                 \
                  " WHERE id = ?1 AND state = 'live' AND attempts > 0 AND expires > ?2"            \
                  " RETURNING user_id")                                                            \
  X(DEVICE_ADD, "INSERT INTO devices (id, user_id, name, platform, public_key, best_level,"        \
                " downgrade_reason, facts, max_jobs, state, online, last_seen, created)"           \
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'active', 0, 0, ?10)")               \
  X(DEVICE_GET, "SELECT " DEVICE_COLUMNS " WHERE d.id = ?1")                                       \
  X(DEVICE_GET_BY_KEY, "SELECT " DEVICE_COLUMNS " WHERE d.public_key = ?1")                        \
  X(DEVICE_LIST, "SELECT " DEVICE_COLUMNS " WHERE (?1 = 0 OR d.user_id = ?1)"                      \
                 " ORDER BY u.name, d.name, d.id")                                                 \
  X(DEVICE_STATE, "SELECT state FROM devices WHERE id = ?1")                                       \
  X(DEVICE_SET_ONLINE, "UPDATE devices SET online = ?2, last_seen = ?3"                            \
                       " WHERE id = ?1 AND (state = 'active' OR ?2 = 0)")                          \
  X(DEVICE_TOUCH, "UPDATE devices SET last_seen = ?2 WHERE id = ?1")                               \
  X(DEVICE_UPDATE_INFO, "UPDATE devices SET name = coalesce(?2, name), platform = ?3,"             \
                        " best_level = ?4, downgrade_reason = ?5, facts = ?6, max_jobs = ?7"       \
                        " WHERE id = ?1")                                                          \
  X(DEVICE_ALL_OFFLINE, "UPDATE devices SET online = 0 WHERE online <> 0")                         \
  X(DEVICE_REVOKE, "UPDATE devices SET state = 'revoked', online = 0"                              \
                   " WHERE id = ?1 AND state = 'active'")                                          \
  X(JOB_ADD, "INSERT INTO jobs (id, user_id, device_id, package_hash, args, state, created,"       \
             " updated, deadline) VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?6, ?7)")              \
  X(JOB_TRANSITION, "UPDATE jobs SET state = ?3, error = coalesce(?4, error), updated = ?5"        \
                    " WHERE id = ?1 AND state = ?2")                                               \
  X(JOB_RECORD_RESULT,                                                                             \
    "UPDATE jobs SET result = ?3,"                                                                 \
    " error = CASE WHEN state IN ('sent','running') THEN ?5 ELSE error END,"                       \
    " state = CASE WHEN state IN ('sent','running') THEN ?4 ELSE state END, updated = ?6"          \
    " WHERE id = ?1 AND device_id = ?2 AND result IS NULL AND state <> 'queued'"                   \
    " RETURNING state")                                                                            \
  X(JOB_PEEK, "SELECT state, device_id, result IS NOT NULL FROM jobs WHERE id = ?1")               \
  X(JOB_GET, "SELECT " JOB_COLUMNS " WHERE j.id = ?1")                                             \
  X(JOB_LIST, "SELECT " JOB_COLUMNS " WHERE (?1 = 0 OR j.user_id = ?1)"                            \
              " ORDER BY j.created DESC, j.rowid DESC LIMIT ?2")                                   \
  X(JOB_LIST_ACTIVE_ON_DEVICE, "SELECT " JOB_COLUMNS " WHERE j.device_id = ?1"                     \
                               " AND j.state IN " DB_LIVE_STATES " ORDER BY j.created, j.rowid")   \
  X(JOB_LIST_OVERDUE, "SELECT " JOB_COLUMNS " WHERE j.deadline <> 0 AND j.deadline <= ?1"          \
                      " AND j.state IN " DB_LIVE_STATES " ORDER BY j.created, j.rowid")            \
  X(JOB_COUNT_IN_FLIGHT, "SELECT count(*) FROM jobs WHERE device_id = ?1"                          \
                         " AND state IN ('sent','running')")

enum db_stmt {
#define DB_STMT_ENUM_(name, sql) Q_##name,
  DB_STATEMENTS(DB_STMT_ENUM_)
#undef DB_STMT_ENUM_
      Q_COUNT_
};

static const char *const stmt_sql[] = {
#define DB_STMT_SQL_(name, sql) sql,
    DB_STATEMENTS(DB_STMT_SQL_)
#undef DB_STMT_SQL_
};

struct server_db {
  sqlite3 *h;
  sqlite3_stmt *stmts[Q_COUNT_];
  int64_t fixed_now;
  char path[4096];
};

/* --- errors --------------------------------------------------------------- */

static int db_map_rc(sqlite3 *h, int rc) {
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
static int db_fail(struct server_db *db, int rc, const char *what, struct cordon_diag *diag) {
  int err = db_map_rc(db->h, rc);
  if (err == 0)
    err = CORDON_E_INTERNAL;
  return cordon_diag_set(diag, err, "%s: %s: %s", db->path, what,
                         db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc));
}

int64_t server_db_now(const struct server_db *db) {
  if (db && db->fixed_now)
    return db->fixed_now;
  return (int64_t)time(NULL);
}

void server_db_set_clock(struct server_db *db, int64_t now) {
  if (db)
    db->fixed_now = now;
}

/* --- statements ----------------------------------------------------------- */

/* The cached statement for q, reset and without bindings. */
static int db_stmt(struct server_db *db, enum db_stmt q, sqlite3_stmt **out_st,
                   struct cordon_diag *diag) {
  if (!db->stmts[q]) {
    int rc =
        sqlite3_prepare_v3(db->h, stmt_sql[q], -1, SQLITE_PREPARE_PERSISTENT, &db->stmts[q], NULL);
    if (rc != SQLITE_OK)
      return db_fail(db, rc, "prepare", diag);
  }
  *out_st = db->stmts[q];
  return 0;
}

/* Done with a statement: reset it so it holds no locks, drop bindings. */
static void db_done(sqlite3_stmt *st) {
  if (st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
}

/* Run a statement that returns no rows (or whose rows do not matter). */
static int db_exec_stmt(struct server_db *db, sqlite3_stmt *st, const char *what,
                        struct cordon_diag *diag) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    ;
  int err = rc == SQLITE_DONE ? 0 : db_fail(db, rc, what, diag);
  db_done(st);
  return err;
}

static int db_simple(struct server_db *db, enum db_stmt q, const char *what,
                     struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  return db_exec_stmt(db, st, what, diag);
}

static int tx_begin(struct server_db *db, struct cordon_diag *diag) {
  return db_simple(db, Q_BEGIN_IMMEDIATE, "begin", diag);
}

static int tx_commit(struct server_db *db, struct cordon_diag *diag) {
  int err = db_simple(db, Q_COMMIT, "commit", diag);
  if (err && !sqlite3_get_autocommit(db->h))
    db_simple(db, Q_ROLLBACK, "rollback", NULL);
  return err;
}

static void tx_rollback(struct server_db *db) {
  if (!sqlite3_get_autocommit(db->h))
    db_simple(db, Q_ROLLBACK, "rollback", NULL);
}

/* Bind helpers: any failure is remembered and reported by db_bind_check. */
static void bind_text(sqlite3_stmt *st, int i, const char *s, int *rc) {
  int r = s ? sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, i);
  if (r != SQLITE_OK && *rc == SQLITE_OK)
    *rc = r;
}

static void bind_int(sqlite3_stmt *st, int i, int64_t v, int *rc) {
  int r = sqlite3_bind_int64(st, i, v);
  if (r != SQLITE_OK && *rc == SQLITE_OK)
    *rc = r;
}

static void bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n, int *rc) {
  int r = sqlite3_bind_blob(st, i, p, (int)n, SQLITE_TRANSIENT);
  if (r != SQLITE_OK && *rc == SQLITE_OK)
    *rc = r;
}

static int bind_check(struct server_db *db, sqlite3_stmt *st, int rc, struct cordon_diag *diag) {
  if (rc == SQLITE_OK)
    return 0;
  int err = db_fail(db, rc, "bind", diag);
  db_done(st);
  return err;
}

static void col_text(sqlite3_stmt *st, int i, char *dst, size_t size) {
  const unsigned char *s = sqlite3_column_text(st, i);
  snprintf(dst, size, "%s", s ? (const char *)s : "");
}

static int col_dup(sqlite3_stmt *st, int i, char **out) {
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

static void col_blob(sqlite3_stmt *st, int i, uint8_t *dst, size_t size) {
  const void *p = sqlite3_column_blob(st, i);
  int n = sqlite3_column_bytes(st, i);
  memset(dst, 0, size);
  if (p && n == (int)size)
    memcpy(dst, p, size);
}

/* Grow an array by one zeroed element; NULL when out of memory. */
static void *list_push(void **items, size_t *count, size_t *cap, size_t elem) {
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

/* --- validation ----------------------------------------------------------- */

static bool valid_user_name(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > SERVER_DB_NAME_MAX)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
      return false;
  }
  return true;
}

/* UTF-8 without C0/C1 controls, DEL, overlongs or surrogates, 1..max bytes. */
static bool valid_display_text(const char *s, size_t max) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > max)
    return false;
  const unsigned char *p = (const unsigned char *)s, *end = p + n;
  while (p < end) {
    uint32_t cp;
    size_t len;
    if (*p < 0x80) {
      cp = *p;
      len = 1;
    } else if ((*p & 0xe0) == 0xc0) {
      cp = *p & 0x1f;
      len = 2;
    } else if ((*p & 0xf0) == 0xe0) {
      cp = *p & 0x0f;
      len = 3;
    } else if ((*p & 0xf8) == 0xf0) {
      cp = *p & 0x07;
      len = 4;
    } else {
      return false;
    }
    if ((size_t)(end - p) < len)
      return false;
    for (size_t i = 1; i < len; i++) {
      if ((p[i] & 0xc0) != 0x80)
        return false;
      cp = (cp << 6) | (p[i] & 0x3f);
    }
    static const uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_len[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0) || cp == 0x2028 || cp == 0x2029)
      return false;
    p += len;
  }
  return true;
}

/* [a-z0-9_-]{1,max} */
static bool valid_token(const char *s, size_t max) {
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

/* JSON text of the wanted kind (object or array), at most max bytes. */
static bool valid_json(const char *s, size_t max, bool want_object) {
  size_t n = strnlen(s, max + 1);
  if (n > max)
    return false;
  json_error_t jerr;
  json_t *j = json_loadb(s, n, JSON_REJECT_DUPLICATES, &jerr);
  bool ok = j && (want_object ? json_is_object(j) : json_is_array(j));
  json_decref(j);
  return ok;
}

static int check_device_info(const struct server_db_device_info *info, bool need_name,
                             struct cordon_diag *diag) {
  if (!info)
    return cordon_diag_set(diag, -EINVAL, "device info missing");
  if ((need_name || info->name) && !valid_display_text(info->name, SERVER_DB_NAME_MAX))
    return cordon_diag_set(diag, -EINVAL,
                           "device name must be 1..%d bytes of UTF-8 without control characters",
                           SERVER_DB_NAME_MAX);
  if (info->platform && !valid_token(info->platform, SERVER_DB_PLATFORM_MAX))
    return cordon_diag_set(diag, -EINVAL, "platform must be 1..%d of [a-z0-9_-]",
                           SERVER_DB_PLATFORM_MAX);
  if (info->has_level && !sandbox_level_name(info->best_level))
    return cordon_diag_set(diag, -EINVAL, "unknown sandbox level %d", (int)info->best_level);
  if (info->downgrade_reason && !valid_token(info->downgrade_reason, SERVER_DB_CODE_MAX))
    return cordon_diag_set(diag, -EINVAL, "downgrade reason must be 1..%d of [a-z0-9_-]",
                           SERVER_DB_CODE_MAX);
  if (info->facts_json && !valid_json(info->facts_json, SERVER_DB_FACTS_MAX, true))
    return cordon_diag_set(diag, -EINVAL, "device facts must be a JSON object of at most %d bytes",
                           SERVER_DB_FACTS_MAX);
  if (info->max_jobs < 0 || info->max_jobs > 1024)
    return cordon_diag_set(diag, -EINVAL, "max_jobs %d out of range 0..1024", info->max_jobs);
  return 0;
}

static bool valid_hex_id(const char *id) {
  if (!id || strlen(id) != CORDON_ID_HEX_LEN)
    return false;
  for (size_t i = 0; i < CORDON_ID_HEX_LEN; i++)
    if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
      return false;
  return true;
}

static void random_id(char out[CORDON_ID_HEX_SIZE]) {
  uint8_t b[DB_ID_BYTES];
  randombytes_buf(b, sizeof(b));
  sodium_bin2hex(out, CORDON_ID_HEX_SIZE, b, sizeof(b));
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
    err = tx_begin(db, diag);
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
      tx_rollback(db);
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
    bind_int(st, 1, version + 1, &brc);
    err = bind_check(db, st, brc, diag);
    if (!err)
      err = db_exec_stmt(db, st, "set schema version", diag);
    if (err)
      goto out_rollback;
    err = tx_commit(db, diag);
    if (err)
      return err;
    version++;
  }
  return 0;
out_rollback:
  tx_rollback(db);
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

/* --- users ---------------------------------------------------------------- */

static void read_user(sqlite3_stmt *st, struct server_db_user *u) {
  u->id = sqlite3_column_int64(st, 0);
  col_text(st, 1, u->name, sizeof(u->name));
  u->created = sqlite3_column_int64(st, 2);
}

int server_db_user_add(struct server_db *db, const char *name, int64_t *out_id,
                       struct cordon_diag *diag) {
  if (!valid_user_name(name))
    return cordon_diag_set(diag, -EINVAL,
                           "user name must be 1..%d of [A-Za-z0-9._-], starting with a letter "
                           "or digit",
                           SERVER_DB_NAME_MAX);
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_USER_ADD, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, name, &rc);
  bind_int(st, 2, server_db_now(db), &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  if (rc != SQLITE_DONE) {
    err = db_map_rc(db->h, rc) == -EEXIST
              ? cordon_diag_set(diag, -EEXIST, "user '%s' already exists", name)
              : db_fail(db, rc, "add user", diag);
    db_done(st);
    return err;
  }
  int64_t id = sqlite3_last_insert_rowid(db->h);
  db_done(st);
  if (out_id)
    *out_id = id;
  return 0;
}

static int user_get(struct server_db *db, enum db_stmt q, int64_t id, const char *name,
                    struct server_db_user *out_user, struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  if (name)
    bind_text(st, 1, name, &rc);
  else
    bind_int(st, 1, id, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    read_user(st, out_user);
  } else if (rc == SQLITE_DONE) {
    err = name ? cordon_diag_set(diag, -ENOENT, "no user '%s'", name)
               : cordon_diag_set(diag, -ENOENT, "no user with id %lld", (long long)id);
  } else {
    err = db_fail(db, rc, "get user", diag);
  }
  db_done(st);
  return err;
}

int server_db_user_get(struct server_db *db, int64_t id, struct server_db_user *out_user,
                       struct cordon_diag *diag) {
  return user_get(db, Q_USER_GET, id, NULL, out_user, diag);
}

int server_db_user_get_by_name(struct server_db *db, const char *name,
                               struct server_db_user *out_user, struct cordon_diag *diag) {
  if (!name)
    return cordon_diag_set(diag, -EINVAL, "no user name");
  return user_get(db, Q_USER_GET_BY_NAME, 0, name, out_user, diag);
}

int server_db_user_list(struct server_db *db, struct server_db_user_list *out_list,
                        struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_USER_LIST, &st, diag);
  if (err)
    return err;
  struct server_db_user_list l = {0};
  size_t cap = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    struct server_db_user *u = list_push((void **)&l.items, &l.count, &cap, sizeof(*u));
    if (!u) {
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
      break;
    }
    read_user(st, u);
  }
  if (!err && rc != SQLITE_DONE)
    err = db_fail(db, rc, "list users", diag);
  db_done(st);
  if (err) {
    server_db_user_list_release(&l);
    return err;
  }
  *out_list = l;
  return 0;
}

void server_db_user_list_release(struct server_db_user_list *list) {
  if (!list)
    return;
  free(list->items);
  list->items = NULL;
  list->count = 0;
}

/* --- pairing codes -------------------------------------------------------- */

static const char code_alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";

/* The code text rules and the derivation live in proto/pairing.c: the agent
 * needs the very same function. */
int server_db_code_derive(const char *code, char out_id[SERVER_DB_CODE_ID_SIZE],
                          uint8_t out_key[SERVER_DB_CODE_KEY_SIZE]) {
  return pairing_code_derive(code, out_id, out_key);
}

/* 25 random bytes -> 40 characters in groups of 5. */
static void code_generate(char out[SERVER_DB_CODE_TEXT_SIZE]) {
  uint8_t b[DB_CODE_BYTES];
  randombytes_buf(b, sizeof(b));
  size_t o = 0;
  for (size_t i = 0; i < SERVER_DB_CODE_CHARS; i++) {
    size_t bit = i * 5, byte = bit / 8, shift = bit % 8;
    unsigned v = (unsigned)b[byte] << 8 | (byte + 1 < sizeof(b) ? b[byte + 1] : 0);
    unsigned c = (v >> (11 - shift)) & 0x1f;
    if (i && i % DB_CODE_GROUP == 0)
      out[o++] = '-';
    out[o++] = code_alphabet[c];
  }
  out[o] = '\0';
  sodium_memzero(b, sizeof(b));
}

int server_db_code_mint(struct server_db *db, int64_t user_id, int64_t ttl_s,
                        char out_code[SERVER_DB_CODE_TEXT_SIZE], int64_t *out_expires,
                        struct cordon_diag *diag) {
  if (ttl_s < 1 || ttl_s > SERVER_DB_CODE_TTL_MAX)
    return cordon_diag_set(diag, -EINVAL, "code lifetime must be 1..%d seconds",
                           SERVER_DB_CODE_TTL_MAX);
  char code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
  uint8_t key[SERVER_DB_CODE_KEY_SIZE];
  int64_t now = server_db_now(db), expires = now + ttl_s;
  int err = tx_begin(db, diag);
  if (err)
    return err;
  struct server_db_user u;
  if ((err = server_db_user_get(db, user_id, &u, diag)))
    goto out_rollback;
  sqlite3_stmt *st = NULL;
  if ((err = db_stmt(db, Q_CODE_COUNT_USABLE, &st, diag)))
    goto out_rollback;
  int rc = SQLITE_OK;
  bind_int(st, 1, user_id, &rc);
  bind_int(st, 2, now, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    goto out_rollback;
  rc = sqlite3_step(st);
  int64_t live = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  if (rc != SQLITE_ROW)
    err = db_fail(db, rc, "count codes", diag);
  db_done(st);
  if (err)
    goto out_rollback;
  /* Forget the user's codes that expired long ago: the table stays small. */
  if ((err = db_stmt(db, Q_CODE_PURGE, &st, diag)))
    goto out_rollback;
  rc = SQLITE_OK;
  bind_int(st, 1, user_id, &rc);
  bind_int(st, 2, now - DB_CODE_KEEP_S, &rc);
  if ((err = bind_check(db, st, rc, diag)) || (err = db_exec_stmt(db, st, "purge codes", diag)))
    goto out_rollback;
  if (live >= SERVER_DB_CODE_LIVE_MAX) {
    err = cordon_diag_set(diag, CORDON_E_LIMIT,
                          "user '%s' already has %lld live pairing codes (at most %d)", u.name,
                          (long long)live, SERVER_DB_CODE_LIVE_MAX);
    goto out_rollback;
  }
  for (int tries = 0;; tries++) {
    code_generate(code);
    if ((err = server_db_code_derive(code, id, key)))
      break;
    if ((err = db_stmt(db, Q_CODE_ADD, &st, diag)))
      break;
    rc = SQLITE_OK;
    bind_text(st, 1, id, &rc);
    bind_int(st, 2, user_id, &rc);
    bind_blob(st, 3, key, sizeof(key), &rc);
    bind_int(st, 4, now, &rc);
    bind_int(st, 5, expires, &rc);
    bind_int(st, 6, SERVER_DB_CODE_ATTEMPTS, &rc);
    if ((err = bind_check(db, st, rc, diag)))
      break;
    rc = sqlite3_step(st);
    err = rc == SQLITE_DONE ? 0 : db_fail(db, rc, "add code", diag);
    db_done(st);
    if (err != -EEXIST || tries == 4) /* an id collision (2^-50): draw again */
      break;
  }
  if (err)
    goto out_rollback;
  if ((err = tx_commit(db, diag)))
    goto out_wipe;
  memcpy(out_code, code, SERVER_DB_CODE_TEXT_SIZE);
  if (out_expires)
    *out_expires = expires;
  goto out_wipe;
out_rollback:
  tx_rollback(db);
out_wipe:
  sodium_memzero(code, sizeof(code));
  sodium_memzero(key, sizeof(key));
  return err;
}

static enum server_db_code_state code_state_parse(const char *s) {
  if (s && strcmp(s, "live") == 0)
    return SERVER_DB_CODE_LIVE;
  if (s && strcmp(s, "used") == 0)
    return SERVER_DB_CODE_USED;
  return SERVER_DB_CODE_BURNED;
}

static bool valid_code_id(const char *id) {
  if (!id || strlen(id) != SERVER_DB_CODE_ID_CHARS)
    return false;
  for (size_t i = 0; i < SERVER_DB_CODE_ID_CHARS; i++)
    if (!memchr(code_alphabet, id[i], sizeof(code_alphabet) - 1) || id[i] == '\0')
      return false;
  return true;
}

int server_db_code_lookup(struct server_db *db, const char *code_id,
                          struct server_db_code *out_code, struct cordon_diag *diag) {
  if (!valid_code_id(code_id))
    return cordon_diag_set(diag, -ENOENT, "no such pairing code");
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_CODE_LOOKUP, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, code_id, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    struct server_db_code *c = out_code;
    memcpy(c->id, code_id, SERVER_DB_CODE_ID_SIZE);
    c->user_id = sqlite3_column_int64(st, 0);
    col_blob(st, 1, c->key, sizeof(c->key));
    c->attempts_left = sqlite3_column_int(st, 2);
    c->state = code_state_parse((const char *)sqlite3_column_text(st, 3));
    c->created = sqlite3_column_int64(st, 4);
    c->expires = sqlite3_column_int64(st, 5);
    c->expired = c->expires <= server_db_now(db);
    c->usable = c->state == SERVER_DB_CODE_LIVE && c->attempts_left > 0 && !c->expired;
    if (c->state != SERVER_DB_CODE_LIVE)
      sodium_memzero(c->key, sizeof(c->key));
  } else if (rc == SQLITE_DONE) {
    err = cordon_diag_set(diag, -ENOENT, "no such pairing code");
  } else {
    err = db_fail(db, rc, "look up code", diag);
  }
  db_done(st);
  return err;
}

void server_db_code_wipe(struct server_db_code *code) {
  if (code)
    sodium_memzero(code, sizeof(*code));
}

int server_db_code_fail(struct server_db *db, const char *code_id, int *out_attempts_left,
                        struct cordon_diag *diag) {
  if (!valid_code_id(code_id))
    return cordon_diag_set(diag, -ENOENT, "no such pairing code");
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_CODE_FAIL, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, code_id, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  int left = 0;
  if (rc == SQLITE_ROW) {
    left = sqlite3_column_int(st, 0);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
      ;
  } else if (rc == SQLITE_DONE) {
    err = cordon_diag_set(diag, -EACCES, "pairing code is not live");
  }
  if (!err && rc != SQLITE_DONE)
    err = db_fail(db, rc, "record failed attempt", diag);
  db_done(st);
  if (!err && out_attempts_left)
    *out_attempts_left = left;
  return err;
}

/* The consuming UPDATE, inside or outside a transaction. */
static int code_consume(struct server_db *db, const char *code_id, int64_t *out_user_id,
                        struct cordon_diag *diag) {
  if (!valid_code_id(code_id))
    return cordon_diag_set(diag, -EACCES, "pairing code is not usable");
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_CODE_CONSUME, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, code_id, &rc);
  bind_int(st, 2, server_db_now(db), &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  int64_t user = 0;
  if (rc == SQLITE_ROW) {
    user = sqlite3_column_int64(st, 0);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
      ;
  } else if (rc == SQLITE_DONE) {
    err = cordon_diag_set(diag, -EACCES, "pairing code is not usable");
  }
  if (!err && rc != SQLITE_DONE)
    err = db_fail(db, rc, "consume code", diag);
  db_done(st);
  if (!err)
    *out_user_id = user;
  return err;
}

int server_db_code_consume(struct server_db *db, const char *code_id, int64_t *out_user_id,
                           struct cordon_diag *diag) {
  int64_t user;
  int err = code_consume(db, code_id, &user, diag);
  if (!err && out_user_id)
    *out_user_id = user;
  return err;
}

/* --- devices -------------------------------------------------------------- */

static int read_device(sqlite3_stmt *st, struct server_db_device *d) {
  memset(d, 0, sizeof(*d));
  col_text(st, 0, d->id, sizeof(d->id));
  d->user_id = sqlite3_column_int64(st, 1);
  col_text(st, 2, d->owner, sizeof(d->owner));
  col_text(st, 3, d->name, sizeof(d->name));
  col_text(st, 4, d->platform, sizeof(d->platform));
  col_blob(st, 5, d->public_key, sizeof(d->public_key));
  const char *level = (const char *)sqlite3_column_text(st, 6);
  enum sandbox_level lv;
  if (level && sandbox_level_parse(level, &lv) == 0) {
    d->has_level = true;
    d->best_level = lv;
  }
  col_text(st, 7, d->downgrade_reason, sizeof(d->downgrade_reason));
  d->max_jobs = sqlite3_column_int(st, 9);
  const char *state = (const char *)sqlite3_column_text(st, 10);
  d->state =
      state && strcmp(state, "active") == 0 ? SERVER_DB_DEVICE_ACTIVE : SERVER_DB_DEVICE_REVOKED;
  d->online = sqlite3_column_int(st, 11) != 0;
  d->last_seen = sqlite3_column_int64(st, 12);
  d->created = sqlite3_column_int64(st, 13);
  return col_dup(st, 8, &d->facts_json);
}

void server_db_device_release(struct server_db_device *dev) {
  if (!dev)
    return;
  free(dev->facts_json);
  dev->facts_json = NULL;
}

void server_db_device_list_release(struct server_db_device_list *list) {
  if (!list)
    return;
  for (size_t i = 0; i < list->count; i++)
    server_db_device_release(&list->items[i]);
  free(list->items);
  list->items = NULL;
  list->count = 0;
}

static int device_insert(struct server_db *db, int64_t user_id,
                         const uint8_t public_key[SERVER_DB_PUBKEY_SIZE],
                         const struct server_db_device_info *info, char out_id[CORDON_ID_HEX_SIZE],
                         struct cordon_diag *diag) {
  char id[CORDON_ID_HEX_SIZE];
  random_id(id);
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_DEVICE_ADD, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, id, &rc);
  bind_int(st, 2, user_id, &rc);
  bind_text(st, 3, info->name, &rc);
  bind_text(st, 4, info->platform, &rc);
  bind_blob(st, 5, public_key, SERVER_DB_PUBKEY_SIZE, &rc);
  bind_text(st, 6, info->has_level ? sandbox_level_name(info->best_level) : NULL, &rc);
  bind_text(st, 7, info->downgrade_reason, &rc);
  bind_text(st, 8, info->facts_json, &rc);
  bind_int(st, 9, info->max_jobs, &rc);
  bind_int(st, 10, server_db_now(db), &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  if (rc != SQLITE_DONE) {
    err = db_map_rc(db->h, rc);
    if (err == -EEXIST)
      err = cordon_diag_set(diag, -EEXIST, "a device with this public key is already paired");
    else if (err == -ENOENT)
      err = cordon_diag_set(diag, -ENOENT, "no user with id %lld", (long long)user_id);
    else
      err = db_fail(db, rc, "add device", diag);
  }
  db_done(st);
  if (!err)
    memcpy(out_id, id, CORDON_ID_HEX_SIZE);
  return err;
}

int server_db_device_add(struct server_db *db, int64_t user_id,
                         const uint8_t public_key[SERVER_DB_PUBKEY_SIZE],
                         const struct server_db_device_info *info, char out_id[CORDON_ID_HEX_SIZE],
                         struct cordon_diag *diag) {
  if (!public_key)
    return cordon_diag_set(diag, -EINVAL, "no public key");
  int err = check_device_info(info, true, diag);
  if (err)
    return err;
  return device_insert(db, user_id, public_key, info, out_id, diag);
}

int server_db_pair_complete(struct server_db *db, const char *code_id,
                            const uint8_t public_key[SERVER_DB_PUBKEY_SIZE],
                            const struct server_db_device_info *info,
                            char out_device_id[CORDON_ID_HEX_SIZE], int64_t *out_user_id,
                            struct cordon_diag *diag) {
  if (!public_key)
    return cordon_diag_set(diag, -EINVAL, "no public key");
  int err = check_device_info(info, true, diag);
  if (err)
    return err;
  if ((err = tx_begin(db, diag)))
    return err;
  int64_t user;
  char id[CORDON_ID_HEX_SIZE];
  if ((err = code_consume(db, code_id, &user, diag)) ||
      (err = device_insert(db, user, public_key, info, id, diag)) || (err = tx_commit(db, diag))) {
    tx_rollback(db);
    return err;
  }
  memcpy(out_device_id, id, CORDON_ID_HEX_SIZE);
  if (out_user_id)
    *out_user_id = user;
  return 0;
}

static int device_get(struct server_db *db, enum db_stmt q, const char *id, const uint8_t *key,
                      struct server_db_device *out_dev, struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  if (id)
    bind_text(st, 1, id, &rc);
  else
    bind_blob(st, 1, key, SERVER_DB_PUBKEY_SIZE, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  struct server_db_device d;
  if (rc == SQLITE_ROW) {
    if (read_device(st, &d) < 0) {
      server_db_device_release(&d);
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
    }
  } else if (rc == SQLITE_DONE) {
    err = id ? cordon_diag_set(diag, -ENOENT, "no device '%.*s'", CORDON_ID_HEX_LEN, id)
             : cordon_diag_set(diag, -ENOENT, "no device with this public key");
  } else {
    err = db_fail(db, rc, "get device", diag);
  }
  db_done(st);
  if (!err)
    *out_dev = d;
  return err;
}

int server_db_device_get(struct server_db *db, const char *id, struct server_db_device *out_dev,
                         struct cordon_diag *diag) {
  if (!valid_hex_id(id))
    return cordon_diag_set(diag, -ENOENT, "no device '%.*s' (ids are %d hex digits)",
                           CORDON_ID_HEX_LEN, id ? id : "", CORDON_ID_HEX_LEN);
  return device_get(db, Q_DEVICE_GET, id, NULL, out_dev, diag);
}

int server_db_device_get_by_key(struct server_db *db,
                                const uint8_t public_key[SERVER_DB_PUBKEY_SIZE],
                                struct server_db_device *out_dev, struct cordon_diag *diag) {
  if (!public_key)
    return cordon_diag_set(diag, -EINVAL, "no public key");
  return device_get(db, Q_DEVICE_GET_BY_KEY, NULL, public_key, out_dev, diag);
}

/* After an UPDATE by device id changed nothing: why. */
static int device_why_unchanged(struct server_db *db, const char *id, bool *out_revoked,
                                struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_DEVICE_STATE, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, id, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    const char *s = (const char *)sqlite3_column_text(st, 0);
    *out_revoked = s && strcmp(s, "revoked") == 0;
  } else if (rc == SQLITE_DONE) {
    err = cordon_diag_set(diag, -ENOENT, "no device '%.*s'", CORDON_ID_HEX_LEN, id);
  } else {
    err = db_fail(db, rc, "get device", diag);
  }
  db_done(st);
  return err;
}

/* Run an UPDATE keyed by device id (?1) whose other bindings are set. */
static int device_update(struct server_db *db, sqlite3_stmt *st, const char *what, int *out_changes,
                         struct cordon_diag *diag) {
  int err = db_exec_stmt(db, st, what, diag);
  if (err)
    return err;
  *out_changes = sqlite3_changes(db->h);
  return 0;
}

int server_db_device_set_online(struct server_db *db, const char *id, bool online,
                                struct cordon_diag *diag) {
  if (!valid_hex_id(id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_DEVICE_SET_ONLINE, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK, changes = 0;
  bind_text(st, 1, id, &rc);
  bind_int(st, 2, online ? 1 : 0, &rc);
  bind_int(st, 3, server_db_now(db), &rc);
  if ((err = bind_check(db, st, rc, diag)) ||
      (err = device_update(db, st, "set online", &changes, diag)))
    return err;
  if (changes == 1)
    return 0;
  bool revoked = false;
  if ((err = device_why_unchanged(db, id, &revoked, diag)))
    return err;
  return cordon_diag_set(diag, -EPERM, "device %s is revoked", id);
}

int server_db_device_touch(struct server_db *db, const char *id, struct cordon_diag *diag) {
  if (!valid_hex_id(id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_DEVICE_TOUCH, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK, changes = 0;
  bind_text(st, 1, id, &rc);
  bind_int(st, 2, server_db_now(db), &rc);
  if ((err = bind_check(db, st, rc, diag)) ||
      (err = device_update(db, st, "touch device", &changes, diag)))
    return err;
  return changes == 1 ? 0 : cordon_diag_set(diag, -ENOENT, "no device '%s'", id);
}

int server_db_device_update_info(struct server_db *db, const char *id,
                                 const struct server_db_device_info *info,
                                 struct cordon_diag *diag) {
  if (!valid_hex_id(id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  int err = check_device_info(info, false, diag);
  if (err)
    return err;
  sqlite3_stmt *st = NULL;
  if ((err = db_stmt(db, Q_DEVICE_UPDATE_INFO, &st, diag)))
    return err;
  int rc = SQLITE_OK, changes = 0;
  bind_text(st, 1, id, &rc);
  bind_text(st, 2, info->name, &rc);
  bind_text(st, 3, info->platform, &rc);
  bind_text(st, 4, info->has_level ? sandbox_level_name(info->best_level) : NULL, &rc);
  bind_text(st, 5, info->downgrade_reason, &rc);
  bind_text(st, 6, info->facts_json, &rc);
  bind_int(st, 7, info->max_jobs, &rc);
  if ((err = bind_check(db, st, rc, diag)) ||
      (err = device_update(db, st, "update device", &changes, diag)))
    return err;
  return changes == 1 ? 0 : cordon_diag_set(diag, -ENOENT, "no device '%s'", id);
}

int server_db_device_set_all_offline(struct server_db *db, struct cordon_diag *diag) {
  return db_simple(db, Q_DEVICE_ALL_OFFLINE, "set devices offline", diag);
}

int server_db_device_revoke(struct server_db *db, const char *id, struct cordon_diag *diag) {
  if (!valid_hex_id(id))
    return cordon_diag_set(diag, -ENOENT, "no device '%.*s' (ids are %d hex digits)",
                           CORDON_ID_HEX_LEN, id ? id : "", CORDON_ID_HEX_LEN);
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_DEVICE_REVOKE, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK, changes = 0;
  bind_text(st, 1, id, &rc);
  if ((err = bind_check(db, st, rc, diag)) ||
      (err = device_update(db, st, "revoke device", &changes, diag)))
    return err;
  if (changes == 1)
    return 0;
  bool revoked = false;
  if ((err = device_why_unchanged(db, id, &revoked, diag)))
    return err;
  return cordon_diag_set(diag, -EALREADY, "device %s is already revoked", id);
}

int server_db_device_list(struct server_db *db, int64_t user_id,
                          struct server_db_device_list *out_list, struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_DEVICE_LIST, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_int(st, 1, user_id, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  struct server_db_device_list l = {0};
  size_t cap = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    struct server_db_device *d = list_push((void **)&l.items, &l.count, &cap, sizeof(*d));
    if (!d || read_device(st, d) < 0) {
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
      break;
    }
  }
  if (!err && rc != SQLITE_DONE)
    err = db_fail(db, rc, "list devices", diag);
  db_done(st);
  if (err) {
    server_db_device_list_release(&l);
    return err;
  }
  *out_list = l;
  return 0;
}

/* --- jobs ----------------------------------------------------------------- */

static const char *const job_state_names[] = {
    [SERVER_DB_JOB_QUEUED] = "queued",       [SERVER_DB_JOB_SENT] = "sent",
    [SERVER_DB_JOB_RUNNING] = "running",     [SERVER_DB_JOB_DONE] = "done",
    [SERVER_DB_JOB_FAILED] = "failed",       [SERVER_DB_JOB_EXPIRED] = "expired",
    [SERVER_DB_JOB_CANCELLED] = "cancelled",
};
#define JOB_STATE_COUNT (sizeof(job_state_names) / sizeof(job_state_names[0]))

const char *server_db_job_state_name(enum server_db_job_state s) {
  return (unsigned)s < JOB_STATE_COUNT ? job_state_names[s] : NULL;
}

int server_db_job_state_parse(const char *name, enum server_db_job_state *out_state) {
  for (size_t i = 0; name && i < JOB_STATE_COUNT; i++)
    if (strcmp(name, job_state_names[i]) == 0) {
      *out_state = (enum server_db_job_state)i;
      return 0;
    }
  return -EINVAL;
}

bool server_db_job_state_is_final(enum server_db_job_state s) {
  return s == SERVER_DB_JOB_DONE || s == SERVER_DB_JOB_FAILED || s == SERVER_DB_JOB_EXPIRED ||
         s == SERVER_DB_JOB_CANCELLED;
}

bool server_db_job_transition_is_legal(enum server_db_job_state from, enum server_db_job_state to) {
  if (!server_db_job_state_name(from) || !server_db_job_state_name(to))
    return false;
  if (server_db_job_state_is_final(from))
    return false;
  switch (to) {
  case SERVER_DB_JOB_SENT:
    return from == SERVER_DB_JOB_QUEUED;
  case SERVER_DB_JOB_RUNNING:
    return from == SERVER_DB_JOB_SENT;
  case SERVER_DB_JOB_DONE:
    return from == SERVER_DB_JOB_RUNNING;
  case SERVER_DB_JOB_FAILED:
  case SERVER_DB_JOB_EXPIRED:
  case SERVER_DB_JOB_CANCELLED:
    return true;
  default:
    return false;
  }
}

static int read_job(sqlite3_stmt *st, struct server_db_job *j) {
  memset(j, 0, sizeof(*j));
  col_text(st, 0, j->id, sizeof(j->id));
  j->user_id = sqlite3_column_int64(st, 1);
  col_text(st, 2, j->user, sizeof(j->user));
  col_text(st, 3, j->device_id, sizeof(j->device_id));
  col_blob(st, 4, j->package_hash, sizeof(j->package_hash));
  enum server_db_job_state s = SERVER_DB_JOB_FAILED;
  server_db_job_state_parse((const char *)sqlite3_column_text(st, 6), &s);
  j->state = s;
  col_text(st, 7, j->error, sizeof(j->error));
  j->created = sqlite3_column_int64(st, 9);
  j->updated = sqlite3_column_int64(st, 10);
  j->deadline = sqlite3_column_int64(st, 11);
  if (col_dup(st, 5, &j->args_json) < 0 || col_dup(st, 8, &j->result_json) < 0)
    return -ENOMEM;
  if (!j->args_json && !(j->args_json = strdup("[]")))
    return -ENOMEM;
  return 0;
}

void server_db_job_release(struct server_db_job *job) {
  if (!job)
    return;
  free(job->args_json);
  free(job->result_json);
  job->args_json = NULL;
  job->result_json = NULL;
}

void server_db_job_list_release(struct server_db_job_list *list) {
  if (!list)
    return;
  for (size_t i = 0; i < list->count; i++)
    server_db_job_release(&list->items[i]);
  free(list->items);
  list->items = NULL;
  list->count = 0;
}

int server_db_job_add(struct server_db *db, const struct server_db_job_new *job,
                      char out_id[CORDON_ID_HEX_SIZE], struct cordon_diag *diag) {
  if (!job || !job->package_hash)
    return cordon_diag_set(diag, -EINVAL, "job without a package hash");
  if (job->device_id && !valid_hex_id(job->device_id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  if (job->args_json && !valid_json(job->args_json, SERVER_DB_ARGS_MAX, false))
    return cordon_diag_set(diag, -EINVAL, "job args must be a JSON array of at most %d bytes",
                           SERVER_DB_ARGS_MAX);
  if (job->deadline < 0)
    return cordon_diag_set(diag, -EINVAL, "negative deadline");
  char id[CORDON_ID_HEX_SIZE];
  random_id(id);
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_JOB_ADD, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, id, &rc);
  bind_int(st, 2, job->user_id, &rc);
  bind_text(st, 3, job->device_id, &rc);
  bind_blob(st, 4, job->package_hash, SERVER_DB_HASH_SIZE, &rc);
  bind_text(st, 5, job->args_json ? job->args_json : "[]", &rc);
  bind_int(st, 6, server_db_now(db), &rc);
  bind_int(st, 7, job->deadline, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  if (rc != SQLITE_DONE) {
    err = db_map_rc(db->h, rc) == -ENOENT
              ? cordon_diag_set(diag, -ENOENT, "no such user or device for the job")
              : db_fail(db, rc, "add job", diag);
  }
  db_done(st);
  if (!err)
    memcpy(out_id, id, CORDON_ID_HEX_SIZE);
  return err;
}

/* Why an UPDATE keyed by job id changed nothing. */
static int job_peek(struct server_db *db, const char *id, enum server_db_job_state *out_state,
                    char out_device[CORDON_ID_HEX_SIZE], bool *out_has_result,
                    struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_JOB_PEEK, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, id, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    enum server_db_job_state s = SERVER_DB_JOB_FAILED;
    server_db_job_state_parse((const char *)sqlite3_column_text(st, 0), &s);
    *out_state = s;
    col_text(st, 1, out_device, CORDON_ID_HEX_SIZE);
    *out_has_result = sqlite3_column_int(st, 2) != 0;
  } else if (rc == SQLITE_DONE) {
    err = cordon_diag_set(diag, -ENOENT, "no job '%s'", id);
  } else {
    err = db_fail(db, rc, "get job", diag);
  }
  db_done(st);
  return err;
}

int server_db_job_transition(struct server_db *db, const char *id, enum server_db_job_state from,
                             enum server_db_job_state to, const char *error_code,
                             struct cordon_diag *diag) {
  if (!valid_hex_id(id))
    return cordon_diag_set(diag, -ENOENT, "no such job");
  if (!server_db_job_transition_is_legal(from, to))
    return cordon_diag_set(diag, -EPERM, "illegal job transition %s -> %s",
                           server_db_job_state_name(from) ? server_db_job_state_name(from) : "?",
                           server_db_job_state_name(to) ? server_db_job_state_name(to) : "?");
  if (error_code && !valid_token(error_code, SERVER_DB_CODE_MAX))
    return cordon_diag_set(diag, -EINVAL, "error code must be 1..%d of [a-z0-9_-]",
                           SERVER_DB_CODE_MAX);
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_JOB_TRANSITION, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, id, &rc);
  bind_text(st, 2, server_db_job_state_name(from), &rc);
  bind_text(st, 3, server_db_job_state_name(to), &rc);
  bind_text(st, 4, error_code, &rc);
  bind_int(st, 5, server_db_now(db), &rc);
  if ((err = bind_check(db, st, rc, diag)) || (err = db_exec_stmt(db, st, "job transition", diag)))
    return err;
  if (sqlite3_changes(db->h) == 1)
    return 0;
  enum server_db_job_state now_state;
  char dev[CORDON_ID_HEX_SIZE];
  bool has_result;
  if ((err = job_peek(db, id, &now_state, dev, &has_result, diag)))
    return err;
  return cordon_diag_set(diag, -ESTALE, "job %s is %s, not %s", id,
                         server_db_job_state_name(now_state), server_db_job_state_name(from));
}

int server_db_job_record_result(struct server_db *db, const char *id, const char *device_id,
                                enum server_db_job_state final, const char *error_code,
                                const char *result_json, enum server_db_job_state *out_state,
                                struct cordon_diag *diag) {
  if (!valid_hex_id(id) || !valid_hex_id(device_id))
    return cordon_diag_set(diag, -ENOENT, "no such job");
  if (final != SERVER_DB_JOB_DONE && final != SERVER_DB_JOB_FAILED)
    return cordon_diag_set(diag, -EINVAL, "a result makes a job done or failed");
  if (error_code && !valid_token(error_code, SERVER_DB_CODE_MAX))
    return cordon_diag_set(diag, -EINVAL, "error code must be 1..%d of [a-z0-9_-]",
                           SERVER_DB_CODE_MAX);
  if (!result_json || !valid_json(result_json, SERVER_DB_RESULT_MAX, true))
    return cordon_diag_set(diag, -EINVAL, "a job result must be a JSON object of at most %d bytes",
                           SERVER_DB_RESULT_MAX);
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_JOB_RECORD_RESULT, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, id, &rc);
  bind_text(st, 2, device_id, &rc);
  bind_text(st, 3, result_json, &rc);
  bind_text(st, 4, server_db_job_state_name(final), &rc);
  bind_text(st, 5, error_code, &rc);
  bind_int(st, 6, server_db_now(db), &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  bool updated = false;
  enum server_db_job_state after = final;
  if (rc == SQLITE_ROW) {
    updated = true;
    server_db_job_state_parse((const char *)sqlite3_column_text(st, 0), &after);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
      ;
  }
  if (rc != SQLITE_DONE)
    err = db_map_rc(db->h, rc) == -EPERM
              ? cordon_diag_set(diag, -EALREADY, "job %s already has a result", id)
              : db_fail(db, rc, "record result", diag);
  db_done(st);
  if (err)
    return err;
  if (!updated) {
    enum server_db_job_state s;
    char dev[CORDON_ID_HEX_SIZE];
    bool has_result;
    if ((err = job_peek(db, id, &s, dev, &has_result, diag)))
      return err;
    if (strcmp(dev, device_id) != 0)
      return cordon_diag_set(diag, -ENOENT, "no job '%s' on device %s", id, device_id);
    if (has_result)
      return cordon_diag_set(diag, -EALREADY, "job %s already has a result", id);
    return cordon_diag_set(diag, -ESTALE, "job %s is %s; it cannot have a result yet", id,
                           server_db_job_state_name(s));
  }
  if (out_state)
    *out_state = after;
  return 0;
}

int server_db_job_get(struct server_db *db, const char *id, struct server_db_job *out_job,
                      struct cordon_diag *diag) {
  if (!valid_hex_id(id))
    return cordon_diag_set(diag, -ENOENT, "no job '%.*s' (ids are %d hex digits)", CORDON_ID_HEX_LEN,
                           id ? id : "", CORDON_ID_HEX_LEN);
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_JOB_GET, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, id, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  struct server_db_job j;
  if (rc == SQLITE_ROW) {
    if (read_job(st, &j) < 0) {
      server_db_job_release(&j);
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
    }
  } else if (rc == SQLITE_DONE) {
    err = cordon_diag_set(diag, -ENOENT, "no job '%s'", id);
  } else {
    err = db_fail(db, rc, "get job", diag);
  }
  db_done(st);
  if (!err)
    *out_job = j;
  return err;
}

/* Collect the rows of a bound job query. */
static int job_collect(struct server_db *db, sqlite3_stmt *st, struct server_db_job_list *out_list,
                       struct cordon_diag *diag) {
  struct server_db_job_list l = {0};
  size_t cap = 0;
  int rc, err = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    struct server_db_job *j = list_push((void **)&l.items, &l.count, &cap, sizeof(*j));
    if (!j || read_job(st, j) < 0) {
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
      break;
    }
  }
  if (!err && rc != SQLITE_DONE)
    err = db_fail(db, rc, "list jobs", diag);
  db_done(st);
  if (err) {
    server_db_job_list_release(&l);
    return err;
  }
  *out_list = l;
  return 0;
}

int server_db_job_list(struct server_db *db, int64_t user_id, size_t limit,
                       struct server_db_job_list *out_list, struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_JOB_LIST, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_int(st, 1, user_id, &rc);
  bind_int(st, 2, limit == 0 || limit > INT64_MAX ? -1 : (int64_t)limit, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  return job_collect(db, st, out_list, diag);
}

int server_db_job_list_active_on_device(struct server_db *db, const char *device_id,
                                        struct server_db_job_list *out_list,
                                        struct cordon_diag *diag) {
  if (!valid_hex_id(device_id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_JOB_LIST_ACTIVE_ON_DEVICE, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, device_id, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  return job_collect(db, st, out_list, diag);
}

int server_db_job_list_overdue(struct server_db *db, struct server_db_job_list *out_list,
                               struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_JOB_LIST_OVERDUE, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_int(st, 1, server_db_now(db), &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  return job_collect(db, st, out_list, diag);
}

int server_db_job_count_in_flight(struct server_db *db, const char *device_id, size_t *out_count,
                                  struct cordon_diag *diag) {
  if (!valid_hex_id(device_id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  sqlite3_stmt *st = NULL;
  int err = db_stmt(db, Q_JOB_COUNT_IN_FLIGHT, &st, diag);
  if (err)
    return err;
  int rc = SQLITE_OK;
  bind_text(st, 1, device_id, &rc);
  if ((err = bind_check(db, st, rc, diag)))
    return err;
  rc = sqlite3_step(st);
  int64_t n = 0;
  if (rc == SQLITE_ROW)
    n = sqlite3_column_int64(st, 0);
  else
    err = db_fail(db, rc, "count jobs", diag);
  db_done(st);
  if (!err)
    *out_count = (size_t)n;
  return err;
}
