/* Inside server/db*.c only: the handle, the one table of SQL statements and
 * the helpers the per-table files share. The public contract, invariants and
 * errors are in server/db.h.
 *
 *   db.c             open (which driver), migrations, the statement cache,
 *                    transactions, binding and column helpers, validation
 *   db_sqlite.c      the SQLite driver: the file, pragmas, its migrations,
 *                    backup and restore
 *   db_pg.c          the PostgreSQL driver (libpq): the dialect, its
 *                    migrations, error mapping
 *   db_users.c       users
 *   db_pair_codes.c  pairing codes (mint, lookup, fail, consume)
 *   db_devices.c     devices, and pairing completion (code + device in one
 *                    transaction, through db_code_consume)
 *   db_labels.c      device labels (the device_labels table) and the pure
 *                    label helpers dispatch constraints share
 *   db_jobs.c        jobs: the state graph, transitions, the queue, results,
 *                    lists
 *   db_sessions.c    a cluster's device sessions (which server instance
 *                    holds each device, and its lease) and queued packages
 *   db_keys.c        a cluster's key rotations: one sealed row
 *
 * Calls go one way: every table file calls db.c; db_devices.c also calls
 * db_pair_codes.c (consuming the code), which calls db_users.c (the user a
 * code is minted for); db_devices.c and db_jobs.c call db_labels.c (labels
 * from and to their JSON text). Nothing calls back: what a caller asks of
 * the handle itself (server_db_is_shared) is db.c's. Every statement is
 * prepared once per handle from DB_STATEMENTS; user data is only ever
 * bound, never spliced into SQL. */
#ifndef CORDON_SERVER_DB_INTERNAL_H
#define CORDON_SERVER_DB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/db.h"

#define DB_LIVE_STATES "('queued','sent','running')"

/* The columns read_device() (db_devices.c) and read_job() (db_jobs.c) read,
 * in their order. */
#define DEVICE_COLUMNS                                                                             \
  "d.id, d.user_id, u.name, d.name, d.platform, d.public_key, d.best_level,"                       \
  " d.downgrade_reason, d.facts, d.max_jobs, d.state, d.online, d.last_seen, d.created,"           \
  " (SELECT json_group_object(l.key, l.value) FROM device_labels l WHERE l.device_id = d.id),"     \
  " d.last_addr, d.approved"                                                                       \
  " FROM devices d JOIN users u ON u.id = d.user_id"
#define JOB_COLUMNS                                                                                \
  "j.id, j.user_id, u.name, j.device_id, j.package_hash, j.args, j.state, j.error, j.result,"      \
  " j.created, j.updated, j.deadline, j.queue_expires, j.where_labels, j.package_name,"            \
  " j.package_version, jd.name"                                                                    \
  " FROM jobs j JOIN users u ON u.id = j.user_id LEFT JOIN devices jd ON jd.id = j.device_id"

/* transactions and the schema version (db.c) */
#define DB_TX_STATEMENTS(X)                                                                        \
  X(BEGIN_IMMEDIATE, "BEGIN IMMEDIATE")                                                            \
  X(COMMIT, "COMMIT")                                                                              \
  X(ROLLBACK, "ROLLBACK")                                                                          \
  X(GROUP_SAVEPOINT, "SAVEPOINT g")                                                                \
  X(GROUP_RELEASE, "RELEASE g")                                                                    \
  X(GROUP_ROLLBACK_TO, "ROLLBACK TO g")                                                            \
  X(TX_SAVEPOINT, "SAVEPOINT t")                                                                   \
  X(TX_RELEASE, "RELEASE t")                                                                       \
  X(TX_ROLLBACK_TO, "ROLLBACK TO t")                                                               \
  X(SCHEMA_VERSION, "SELECT version FROM schema_version")                                          \
  X(SET_SCHEMA_VERSION, "UPDATE schema_version SET version = ?1")

/* users (db_users.c) */
#define DB_USER_STATEMENTS(X)                                                                      \
  X(USER_ADD, "INSERT INTO users (name, created) VALUES (?1, ?2) RETURNING id")                    \
  X(USER_GET, "SELECT id, name, created, require_approval, removed FROM users WHERE id = ?1")      \
  X(USER_GET_BY_NAME, "SELECT id, name, created, require_approval, removed FROM users"             \
                      " WHERE name = ?1")                                                          \
  X(USER_LIST, "SELECT id, name, created, require_approval, removed FROM users ORDER BY id")       \
  X(USER_SET_APPROVAL, "UPDATE users SET require_approval = ?2 WHERE id = ?1 AND removed = 0")     \
  X(USER_REMOVE, "UPDATE users SET removed = 1 WHERE id = ?1 AND removed = 0")                     \
  X(USER_REVOKE_DEVICES, "UPDATE devices SET state = 'revoked', online = 0"                        \
                         " WHERE user_id = ?1 AND state <> 'revoked'")                             \
  X(USER_BURN_CODES, "UPDATE pair_codes SET state = 'burned', key = NULL"                          \
                     " WHERE user_id = ?1 AND state = 'live'")

/* pairing codes (db_pair_codes.c) */
#define DB_CODE_STATEMENTS(X)                                                                      \
  X(CODE_COUNT_USABLE, "SELECT count(*) FROM pair_codes WHERE user_id = ?1 AND state = 'live'"     \
                       " AND attempts > 0 AND expires > ?2")                                       \
  X(CODE_PURGE, "DELETE FROM pair_codes WHERE user_id = ?1 AND expires < ?2")                      \
  X(CODE_ADD, "INSERT INTO pair_codes (id, user_id, key, created, expires, attempts, state)"       \
              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'live')")                                          \
  X(CODE_LOOKUP, "SELECT user_id, key, attempts, state, created, expires, last_failure,"           \
                 " last_failure_at FROM pair_codes WHERE id = ?1")                                 \
  X(CODE_NOTE_FAILURE, "UPDATE pair_codes SET last_failure = ?2, last_failure_at = ?3"             \
                       " WHERE id = ?1")                                                           \
  X(CODE_FAIL, "UPDATE pair_codes SET attempts = attempts - 1,"                                    \
               " state = CASE WHEN attempts <= 1 THEN 'burned' ELSE state END,"                    \
               " key = CASE WHEN attempts <= 1 THEN NULL ELSE key END"                             \
               " WHERE id = ?1 AND state = 'live' AND attempts > 0 RETURNING attempts")            \
  X(CODE_LIST, "SELECT c.id, c.user_id, u.name, c.attempts, c.state, c.created, c.expires,"        \
               " c.last_failure, c.last_failure_at FROM pair_codes c JOIN users u"                 \
               " ON u.id = c.user_id WHERE (?1 = 0 OR c.user_id = ?1) ORDER BY c.created, c.id")   \
  X(CODE_REVOKE,                                                                                   \
    "UPDATE pair_codes SET state = 'burned', key = NULL,"                                          \
    " last_failure = 'revoked', last_failure_at = ?2 WHERE id = ?1 AND state = 'live'")            \
  X(CODE_CONSUME, "UPDATE pair_codes SET state = 'used', used_at = ?2, key = NULL"                 \
                  " WHERE id = ?1 AND state = 'live' AND attempts > 0 AND expires > ?2"            \
                  " RETURNING user_id")

/* devices (db_devices.c) */
#define DB_DEVICE_STATEMENTS(X)                                                                    \
  X(DEVICE_ADD, "INSERT INTO devices (id, user_id, name, platform, public_key, best_level,"        \
                " downgrade_reason, facts, max_jobs, state, online, last_seen, created, approved)" \
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'active', 0, 0, ?10,"                \
                " CASE WHEN ?11 <> 0 OR (SELECT require_approval FROM users WHERE id = ?2) <> 0"   \
                " THEN 0 ELSE 1 END)")                                                             \
  X(DEVICE_APPROVE, "UPDATE devices SET approved = 1 WHERE id = ?1 AND state = 'active'"           \
                    " AND approved = 0")                                                           \
  X(DEVICE_GET, "SELECT " DEVICE_COLUMNS " WHERE d.id = ?1")                                       \
  X(DEVICE_GET_BY_KEY, "SELECT " DEVICE_COLUMNS " WHERE d.public_key = ?1")                        \
  X(DEVICE_LIST, "SELECT " DEVICE_COLUMNS " WHERE (?1 = 0 OR d.user_id = ?1)"                      \
                 " ORDER BY u.name, d.name, d.id")                                                 \
  X(DEVICE_STATE, "SELECT state FROM devices WHERE id = ?1")                                       \
  X(DEVICE_NAME_TAKEN, "SELECT count(*) FROM devices WHERE user_id = ?1 AND name = ?2"             \
                       " AND state <> 'revoked' AND id <> coalesce(?3, '')")                       \
  X(DEVICE_FIND,                                                                                   \
    "SELECT d.id, u.name, d.state, d.name = ?1 FROM devices d JOIN users u ON u.id = d.user_id"    \
    " WHERE (?2 = 0 OR d.user_id = ?2) AND (d.name = ?1 OR"                                        \
    " (?3 <> 0 AND substr(d.id, 1, length(?1)) = ?1))"                                             \
    " ORDER BY d.name = ?1 DESC, d.state = 'revoked', d.id LIMIT 9")                               \
  X(DEVICE_RENAME, "UPDATE devices SET name = ?2 WHERE id = ?1 AND state <> 'revoked'")            \
  X(DEVICE_SET_ONLINE, "UPDATE devices SET online = ?2, last_seen = ?3"                            \
                       " WHERE id = ?1 AND (state = 'active' OR ?2 = 0)")                          \
  X(DEVICE_TOUCH, "UPDATE devices SET last_seen = ?2 WHERE id = ?1")                               \
  X(DEVICE_UPDATE_INFO, "UPDATE devices SET name = coalesce(?2, name), platform = ?3,"             \
                        " best_level = ?4, downgrade_reason = ?5, facts = ?6, max_jobs = ?7,"      \
                        " last_addr = coalesce(?8, last_addr) WHERE id = ?1")                      \
  X(DEVICE_ALL_OFFLINE, "UPDATE devices SET online = 0 WHERE online <> 0")                         \
  X(DEVICE_REVOKE, "UPDATE devices SET state = 'revoked', online = 0"                              \
                   " WHERE id = ?1 AND state = 'active'")                                          \
  X(DEVICE_COUNT_BY_STATE, "SELECT state, count(*) FROM devices GROUP BY state")                   \
  X(DEVICE_SIGN_KEY, "SELECT sign_key FROM devices WHERE id = ?1")                                 \
  X(DEVICE_SET_SIGN_KEY, "UPDATE devices SET sign_key = ?2 WHERE id = ?1 AND sign_key IS NULL")

/* device labels (db_labels.c) */
#define DB_LABEL_STATEMENTS(X)                                                                     \
  X(LABEL_SET, "INSERT INTO device_labels (device_id, key, value) VALUES (?1, ?2, ?3)"             \
               " ON CONFLICT (device_id, key) DO UPDATE SET value = excluded.value")               \
  X(LABEL_REMOVE, "DELETE FROM device_labels WHERE device_id = ?1 AND key = ?2")                   \
  X(LABEL_COUNT, "SELECT count(*) FROM device_labels WHERE device_id = ?1")                        \
  X(LABEL_LIST, "SELECT json_group_object(key, value) FROM device_labels WHERE device_id = ?1")

/* jobs (db_jobs.c) */
#define DB_JOB_STATEMENTS(X)                                                                       \
  X(JOB_ADD, "INSERT INTO jobs (id, user_id, device_id, package_hash, args, state, created,"       \
             " updated, deadline, queue_expires, where_labels, package_name, package_version,"     \
             " idem_key, ticket)"                                                                  \
             " VALUES (?1, ?2, ?3, ?4, ?5, ?13, ?6, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?14)")          \
  X(JOB_GET_BY_KEY, "SELECT " JOB_COLUMNS " WHERE j.user_id = ?1 AND j.idem_key = ?2")             \
  X(JOB_SEND, "UPDATE jobs SET state = 'sent', device_id = ?2, deadline = ?3, updated = ?4"        \
              " WHERE id = ?1 AND state = 'queued' AND (device_id IS NULL OR device_id = ?2)")     \
  X(JOB_TRANSITION, "UPDATE jobs SET state = ?3, error = coalesce(?4, error), updated = ?5"        \
                    " WHERE id = ?1 AND state = ?2")                                               \
  X(JOB_RECORD_RESULT,                                                                             \
    "UPDATE jobs SET result = ?3, receipt = ?7,"                                                   \
    " error = CASE WHEN state IN ('sent','running') THEN ?5 ELSE error END,"                       \
    " state = CASE WHEN state IN ('sent','running') THEN ?4 ELSE state END, updated = ?6"          \
    " WHERE id = ?1 AND device_id = ?2 AND result IS NULL AND state <> 'queued'"                   \
    " RETURNING state")                                                                            \
  X(JOB_PEEK, "SELECT state, device_id, result IS NOT NULL FROM jobs WHERE id = ?1")               \
  X(JOB_GET, "SELECT " JOB_COLUMNS " WHERE j.id = ?1")                                             \
  /* the newest first: every user's by jobs_created, one user's by                                 \
   * jobs_user (each walks back from the newest, sorting nothing) */                               \
  X(JOB_LIST, "SELECT " JOB_COLUMNS " ORDER BY j.created DESC, j.rowid DESC LIMIT ?1")             \
  X(JOB_LIST_OF_USER, "SELECT " JOB_COLUMNS " WHERE j.user_id = ?1"                                \
                      " ORDER BY j.created DESC, j.rowid DESC LIMIT ?2")                           \
  X(JOB_LIST_FILTERED, "SELECT " JOB_COLUMNS " WHERE (?1 IS NULL OR j.device_id = ?1)"             \
                       " AND (?2 IS NULL OR j.state = ?2) AND j.created >= ?3"                     \
                       " ORDER BY j.created DESC, j.rowid DESC LIMIT ?4")                          \
  X(JOB_LIST_FILTERED_OF_USER, "SELECT " JOB_COLUMNS " WHERE j.user_id = ?1"                       \
                               " AND (?2 IS NULL OR j.device_id = ?2)"                             \
                               " AND (?3 IS NULL OR j.state = ?3) AND j.created >= ?4"             \
                               " ORDER BY j.created DESC, j.rowid DESC LIMIT ?5")                  \
  X(JOB_LIST_ACTIVE_ON_DEVICE, "SELECT " JOB_COLUMNS " WHERE j.device_id = ?1"                     \
                               " AND j.state IN " DB_LIVE_STATES " ORDER BY j.created, j.rowid")   \
  X(JOB_LIST_OVERDUE, "SELECT " JOB_COLUMNS " WHERE j.deadline <> 0 AND j.deadline <= ?1"          \
                      " AND j.state IN " DB_LIVE_STATES " ORDER BY j.created, j.rowid")            \
  X(JOB_LIST_QUEUED, "SELECT " JOB_COLUMNS " WHERE j.state = 'queued' AND j.queue_expires <> 0"    \
                     " ORDER BY j.created, j.rowid")                                               \
  X(JOB_LIST_QUEUE_EXPIRED, "SELECT " JOB_COLUMNS " WHERE j.state = 'queued'"                      \
                            " AND j.queue_expires <> 0 AND j.queue_expires <= ?1"                  \
                            " ORDER BY j.created, j.rowid")                                        \
  /* the second IN names jobs_device_live's states: SQLite uses a partial                          \
   * index only for a WHERE that repeats the index's own */                                        \
  X(JOB_COUNT_IN_FLIGHT, "SELECT count(*) FROM jobs WHERE device_id = ?1"                          \
                         " AND state IN ('sent','running') AND state IN " DB_LIVE_STATES)          \
  X(JOB_COUNT_BY_STATE, "SELECT state, count(*) FROM jobs GROUP BY state")                         \
  X(JOB_COUNT_LIVE, "SELECT state, count(*) FROM jobs WHERE state IN ('queued','sent','running')"  \
                    " GROUP BY state")                                                             \
  X(JOB_SET_TICKET, "UPDATE jobs SET ticket = ?2 WHERE id = ?1 AND state = 'queued'")              \
  X(JOB_TICKET, "SELECT ticket FROM jobs WHERE id = ?1")                                           \
  X(JOB_RECEIPT, "SELECT receipt FROM jobs WHERE id = ?1")

/* a cluster's device sessions and queued packages (db_sessions.c) */
#define DB_SESSION_STATEMENTS(X)                                                                   \
  X(SESSION_CLAIM, "INSERT INTO device_sessions (device_id, instance, session_id, lease_expires)"  \
                   " VALUES (?1, ?2, ?3, ?4) ON CONFLICT (device_id) DO UPDATE SET"                \
                   " instance = excluded.instance, session_id = excluded.session_id,"              \
                   " lease_expires = excluded.lease_expires")                                      \
  X(SESSION_RELEASE, "DELETE FROM device_sessions WHERE device_id = ?1 AND instance = ?2"          \
                     " AND session_id = ?3")                                                       \
  X(SESSION_RENEW, "UPDATE device_sessions SET lease_expires = ?2 WHERE instance = ?1")            \
  X(SESSION_LIST_INSTANCE,                                                                         \
    "SELECT device_id, session_id FROM device_sessions WHERE instance = ?1")                       \
  X(SESSION_LIST_REVOKED, "SELECT s.device_id, s.session_id FROM device_sessions s"                \
                          " JOIN devices d ON d.id = s.device_id WHERE s.instance = ?1"            \
                          " AND d.state = 'revoked'")                                              \
  X(SESSION_LIST_CANCELLED, "SELECT j.device_id, s.session_id, j.id FROM jobs j"                   \
                            " JOIN device_sessions s ON s.device_id = j.device_id"                 \
                            " WHERE s.instance = ?1 AND j.state = 'cancelled'"                     \
                            " AND j.result IS NULL AND j.updated >= ?2")                           \
  X(SESSION_GET, "SELECT instance, session_id, lease_expires FROM device_sessions"                 \
                 " WHERE device_id = ?1")                                                          \
  X(SESSION_OFFLINE_UNLEASED, "UPDATE devices SET online = 0 WHERE online <> 0 AND NOT EXISTS"     \
                              " (SELECT 1 FROM device_sessions s WHERE s.device_id = devices.id"   \
                              " AND s.lease_expires > ?1)")                                        \
  X(SESSION_OFFLINE_EXPIRED, "UPDATE devices SET online = 0 WHERE online <> 0 AND id IN"           \
                             " (SELECT device_id FROM device_sessions WHERE lease_expires <= ?1)") \
  X(SESSION_DELETE_EXPIRED, "DELETE FROM device_sessions WHERE lease_expires <= ?1")               \
  X(SESSION_DELETE_ALL, "DELETE FROM device_sessions")                                             \
  X(PACKAGE_PUT, "INSERT INTO job_packages (job_id, bytes) VALUES (?1, ?2)"                        \
                 " ON CONFLICT (job_id) DO NOTHING")                                               \
  X(PACKAGE_GET, "SELECT bytes FROM job_packages WHERE job_id = ?1")                               \
  /* by each package's job (an IN list of the sent jobs would read them                            \
   * all: the whole history) */                                                                    \
  X(PACKAGE_PURGE, "DELETE FROM job_packages WHERE EXISTS (SELECT 1 FROM jobs j"                   \
                   " WHERE j.id = job_packages.job_id AND j.state <> 'queued')")                   \
  X(PACKAGE_PART_PUT, "INSERT INTO job_package_parts (job_id, part, bytes) VALUES (?1, ?2, ?3)"    \
                      " ON CONFLICT (job_id, part) DO NOTHING")                                    \
  X(PACKAGE_PART_GET, "SELECT bytes FROM job_package_parts WHERE job_id = ?1 AND part = ?2")       \
  X(PACKAGE_PART_COUNT, "SELECT count(*) FROM job_package_parts WHERE job_id = ?1")                \
  X(PACKAGE_PART_PURGE, "DELETE FROM job_package_parts WHERE EXISTS (SELECT 1 FROM jobs j"         \
                        " WHERE j.id = job_package_parts.job_id AND j.state <> 'queued')")

/* The daemon's clock (server/db.h, server_db_clock_tick): the database's
 * (PostgreSQL; SQLite's is the host's own), and the durations that move
 * with a step of the host's clock. */
#define DB_CLOCK_STATEMENTS(X)                                                                     \
  X(CLOCK_NOW_MS, "SELECT CAST(strftime('%s','now') AS INTEGER) * 1000")                           \
  X(CLOCK_SHIFT_DEADLINES, "UPDATE jobs SET deadline = deadline + ?1"                              \
                           " WHERE deadline <> 0 AND state IN " DB_LIVE_STATES)                    \
  X(CLOCK_SHIFT_QUEUE, "UPDATE jobs SET queue_expires = queue_expires + ?1"                        \
                       " WHERE state = 'queued' AND queue_expires <> 0")                           \
  X(CLOCK_SHIFT_CODES, "UPDATE pair_codes SET expires = expires + ?1 WHERE state = 'live'")

/* a cluster's key rotations, one sealed row (db_keys.c) */
#define DB_CLUSTER_KEYS_STR_(x) #x
#define DB_CLUSTER_KEYS_STR(x) DB_CLUSTER_KEYS_STR_(x)
#define DB_CLUSTER_KEYS_STATEMENTS(X)                                                              \
  X(CLUSTER_KEYS_SERIAL, "SELECT serial FROM cluster_keys WHERE id = 1")                           \
  X(CLUSTER_KEYS_GET,                                                                              \
    "SELECT serial, length(sealed), CASE WHEN length(sealed) <= " DB_CLUSTER_KEYS_STR(             \
        DB_CLUSTER_KEYS_LIMIT) " THEN sealed END"                                                  \
                               " FROM cluster_keys WHERE id = 1")                                  \
  X(CLUSTER_KEYS_PUT, "INSERT INTO cluster_keys (id, serial, sealed, updated)"                     \
                      " VALUES (1, ?1, ?2, ?3) ON CONFLICT (id) DO UPDATE SET"                     \
                      " serial = excluded.serial, sealed = excluded.sealed,"                       \
                      " updated = excluded.updated WHERE cluster_keys.serial < excluded.serial")
#define DB_CLUSTER_KEYS_LIMIT 4194304 /* SERVER_DB_CLUSTER_KEYS_MAX, as SQL text */

#define DB_STATEMENTS(X)                                                                           \
  DB_TX_STATEMENTS(X)                                                                              \
  DB_CLOCK_STATEMENTS(X)                                                                           \
  DB_USER_STATEMENTS(X)                                                                            \
  DB_CODE_STATEMENTS(X)                                                                            \
  DB_DEVICE_STATEMENTS(X)                                                                          \
  DB_LABEL_STATEMENTS(X)                                                                           \
  DB_JOB_STATEMENTS(X)                                                                             \
  DB_SESSION_STATEMENTS(X)                                                                         \
  DB_CLUSTER_KEYS_STATEMENTS(X)

/* Where PostgreSQL's text is not the translation of SQLite's: a write
 * transaction takes one lock for the whole database, as BEGIN IMMEDIATE
 * does in SQLite, so that what SQLite's single writer settled (a count
 * then an insert, a name check then a rename) stays settled when several
 * handles and servers write at once. Its answer also gives the
 * transaction's id: a COMMIT whose answer is lost with the connection is
 * asked after by it (db_driver.outcome). */
#define DB_PG_STATEMENTS(X)                                                                        \
  X(BEGIN_IMMEDIATE, "BEGIN; SELECT pg_advisory_xact_lock(1668248164), txid_current()")            \
  X(CLOCK_NOW_MS, "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)")

enum db_stmt {
#define DB_STMT_ENUM_(name, sql) Q_##name,
  DB_STATEMENTS(DB_STMT_ENUM_)
#undef DB_STMT_ENUM_
      Q_COUNT_
};

/* --- the storage driver --------------------------------------------------
 *
 * One statement table, two backends (db_sqlite.c, db_pg.c): the table files
 * bind, step and read columns through the db_* helpers below, which call
 * the handle's driver. The SQL of DB_STATEMENTS is SQLite's; the PostgreSQL
 * driver translates it (?N -> $N, json_group_object -> json_object_agg) and
 * takes a whole statement from DB_PG_STATEMENTS where the dialects differ.
 *
 * Step results: DB_ROW, DB_DONE, or a negative db.h error (already mapped,
 * the driver's message kept for db_fail). */
#define DB_OK 0
#define DB_ROW 100
#define DB_DONE 101
#define DB_PARAMS_MAX 16 /* the highest ?N of any statement */

struct db_param {
  char *value; /* heap; NULL binds NULL */
  size_t len;
  unsigned type; /* PostgreSQL type oid, 0 = let the server infer it */
  bool binary;   /* bytea, sent as bytes */
};

/* A statement of the table, prepared for the handle's backend. */
struct db_st {
  struct server_db *db;
  void *h; /* SQLite: its sqlite3_stmt; PostgreSQL: the PGresult of the last run */
  bool ready;
  bool readonly;  /* a query or a transaction statement: writes nothing itself */
  bool is_commit; /* COMMIT */
  bool counted;   /* its write was counted in db->commits since its last reset */
  /* PostgreSQL only */
  char *sql; /* translated text */
  int nparams;
  struct db_param params[DB_PARAMS_MAX];
  bool ran;
  int row, rows;
  int blob_col, blob_row; /* which column blob holds, decoded */
  uint8_t *blob;
  size_t blob_len;
};

struct db_driver {
  const char *name; /* "sqlite", "postgresql" */
  /* migrations[n] takes the backend's schema from n to n + 1; api_version[n]
   * is the SERVER_DB_SCHEMA_VERSION that backend version n means. */
  const char *const *migrations;
  int schema_version;
  const int *api_version;
  int (*open)(struct server_db *db, const char *state_dir, const char *url, unsigned flags,
              struct cordon_diag *diag);
  void (*close)(struct server_db *db);
  /* whether the database is empty, ours (schema_version), or foreign */
  int (*probe)(struct server_db *db, bool *out_has_table, bool *out_empty, bool *out_foreign,
               struct cordon_diag *diag);
  int (*exec_script)(struct server_db *db, const char *sql); /* its message: errmsg */
  int (*prepare)(struct server_db *db, struct db_st *st, const char *sql, const char *pg_sql,
                 struct cordon_diag *diag);
  void (*finalize)(struct db_st *st);
  int (*step)(struct db_st *st);
  void (*reset)(struct db_st *st);
  int (*bind)(struct db_st *st, int i, int kind, const void *p, size_t n, int64_t v);
  int64_t (*col_int)(struct db_st *st, int i);
  const char *(*col_str)(struct db_st *st, int i);
  const void *(*col_blob)(struct db_st *st, int i, size_t *out_len);
  int64_t (*changes)(struct server_db *db);
  bool (*in_tx)(struct server_db *db);
  const char *(*errmsg)(struct server_db *db);
  void (*sync)(struct server_db *db, bool full);
  /* A COMMIT that went out and whose answer was lost with the connection
   * (PostgreSQL; NULL for SQLite, whose commit is in this process): the
   * transaction's id, then forgotten here, or 0 for none. outcome asks the
   * database what became of it: 0 committed, -EAGAIN not known yet (no
   * connection, or its old backend still runs it), else the error it was
   * not committed with (in diag). */
  uint64_t (*unanswered)(struct server_db *db);
  int (*outcome)(struct server_db *db, uint64_t xid, struct cordon_diag *diag);
};
/* bind's kind; TEXT or BLOB with p NULL binds a NULL of that type */
enum { DB_BIND_NULL, DB_BIND_INT, DB_BIND_TEXT, DB_BIND_BLOB };

extern const struct db_driver db_sqlite_driver;
extern const struct db_driver db_pg_driver;

/* Group commit (server/db.h; db.c, "transactions and group commit"). */
struct db_group {
  bool enabled;
  bool open;             /* its transaction is open */
  bool lost;             /* the backend rolled it back under the ops still open */
  int lost_err;          /* why */
  unsigned depth;        /* ops open: one SAVEPOINT g each */
  unsigned tx_nested;    /* db_tx_begin inside an op: one SAVEPOINT t each */
  unsigned ops;          /* ops in the open transaction */
  int64_t opened_ms;     /* core_mono_ms when it was opened */
  uint64_t doubt;        /* its COMMIT's answer was lost: the transaction, until known */
  int64_t doubt_next_ms; /* asked again no sooner (core_mono_ms) */
  server_db_group_fn *ended;
  void *ended_arg;
};

struct server_db {
  const struct db_driver *drv;
  void *h; /* the driver's connection: sqlite3 * or PGconn * */
  struct db_st stmts[Q_COUNT_];
  int64_t fixed_now;
  /* server_db_clock_follow: now is clock_wall_ms + (mono - clock_mono_ms),
   * re-anchored by server_db_clock_tick */
  bool clock_follow;
  int64_t clock_wall_ms, clock_mono_ms;
  int64_t clock_skew_ms; /* PostgreSQL: the host's clock minus the database's, last tick */
  int64_t changes;       /* PostgreSQL: rows the last statement changed */
  char errmsg[256];      /* PostgreSQL: the last error, one line */
  char path[4096];       /* for messages: the SQLite file, or the URL without its password */
  int last_err;          /* the last failed step's error (0 after a success) */
  void *pg;              /* PostgreSQL: the driver's connection state (db_pg.c) */
  uint64_t round_trips;  /* PostgreSQL: exchanges with the server (pipelines, scripts) */
  struct db_group group;
  uint64_t commits; /* write transactions committed: COMMITs and autocommit writes */
  void *ckpt;       /* SQLite: the checkpoint thread (db_sqlite.c), or NULL */
};

/* --- errors --------------------------------------------------------------- */

/* Describe a failed step: "<path>: <what>: <driver message>"; rc is a
 * negative error (anything else becomes CORDON_E_INTERNAL). */
int db_fail(struct server_db *db, int rc, const char *what, struct cordon_diag *diag);

/* --- statements and transactions ------------------------------------------ */

/* The cached statement for q, reset and without bindings. */
int db_stmt(struct server_db *db, enum db_stmt q, struct db_st **out_st, struct cordon_diag *diag);
/* DB_ROW, DB_DONE or a negative error. */
int db_step(struct db_st *st);
/* Done with a statement: reset it so it holds no locks, drop bindings. */
void db_done(struct db_st *st);
/* Run a bound statement whose rows do not matter, then db_done it. */
int db_exec_stmt(struct server_db *db, struct db_st *st, const char *what,
                 struct cordon_diag *diag);
/* db_exec_stmt of q, which takes no bindings. */
int db_simple(struct server_db *db, enum db_stmt q, const char *what, struct cordon_diag *diag);
/* db_exec_stmt of q with ?1 bound to v. */
int db_exec_int(struct server_db *db, enum db_stmt q, int64_t v, const char *what,
                struct cordon_diag *diag);
/* Rows the last finished statement changed. */
int64_t db_changes(struct server_db *db);
/* Whether a transaction is open. */
bool db_in_tx(struct server_db *db);

/* BEGIN IMMEDIATE (PostgreSQL: BEGIN and the one writer lock); COMMIT
 * (rolled back if it fails); ROLLBACK if one is open. Inside a group op
 * they are a SAVEPOINT t, its RELEASE and its ROLLBACK TO (then RELEASE):
 * the op's transaction is the group's. Outside an op, with the group open,
 * db_tx_begin commits the group first. */
int db_tx_begin(struct server_db *db, struct cordon_diag *diag);
int db_tx_commit(struct server_db *db, struct cordon_diag *diag);
void db_tx_rollback(struct server_db *db);

/* The next commits without a sync (SQLite: WAL, synchronous=NORMAL;
 * PostgreSQL: synchronous_commit off — atomic, made durable by the next
 * synced commit), until db_sync_restore. Only for rows whose loss in a
 * crash decides nothing (docs/ARCHITECTURE.md, "Durable writes"). Nothing
 * inside a transaction (a group op): the group's commit is synced. */
void db_sync_relax(struct server_db *db);
void db_sync_restore(struct server_db *db);

/* Bind helpers: the first failure is kept in *rc and reported (with the
 * statement reset) by db_bind_check. A NULL string binds NULL. */
void db_bind_text(struct db_st *st, int i, const char *s, int *rc);
void db_bind_int(struct db_st *st, int i, int64_t v, int *rc);
void db_bind_blob(struct db_st *st, int i, const void *p, size_t n, int *rc);
int db_bind_check(struct server_db *db, struct db_st *st, int rc, struct cordon_diag *diag);
/* db_stmt, then text (a job's, a device's id...) bound as ?1 and checked:
 * the statement ready to step, or the error (nothing to release then). */
int db_stmt_text(struct server_db *db, enum db_stmt q, const char *text, struct db_st **out_st,
                 struct cordon_diag *diag);

/* Column helpers: an integer (a boolean is 0 or 1); text (NULL for NULL);
 * a blob and its length (NULL for NULL); text into a fixed buffer ("" for
 * NULL, truncated); a heap copy (NULL for NULL; -ENOMEM); a blob of exactly
 * size bytes (else zeros). */
int64_t db_col_int(struct db_st *st, int i);
const char *db_col_str(struct db_st *st, int i);
const void *db_col_blob_ptr(struct db_st *st, int i, size_t *out_len);
void db_col_text(struct db_st *st, int i, char *dst, size_t size);
int db_col_dup(struct db_st *st, int i, char **out);
void db_col_blob(struct db_st *st, int i, uint8_t *dst, size_t size);

/* The stored schema version (the backend's numbering): 0 for an empty
 * database, CORDON_E_CONFIG_INVALID for one that is not cordon's. */
int db_read_schema_version(struct server_db *db, int *out_version, struct cordon_diag *diag);
/* Migrate up to the driver's newest schema, one transaction per step. */
int db_migrate(struct server_db *db, struct cordon_diag *diag);

/* Grow an array by one zeroed element; NULL when out of memory. */
void *db_list_push(void **items, size_t *count, size_t *cap, size_t elem);

/* --- validation and ids --------------------------------------------------- */

/* [a-z0-9_-]{1,max} */
bool db_valid_token(const char *s, size_t max);
/* JSON text of the wanted kind (object or array), at most max bytes. */
bool db_valid_json(const char *s, size_t max, bool want_object);
/* A fresh random id in its hex form (core/id.h). */
void db_new_id(char out[CORDON_ID_HEX_SIZE]);
/* A new job's id: time-ordered (cordon_id_ordered), 80 random bits. */
void db_new_job_id(char out[CORDON_ID_HEX_SIZE]);

/* --- across tables -------------------------------------------------------- */

/* db_labels.c: labels from their JSON object text ({"k": "v", ...}); NULL
 * or text that is not such an object gives no labels. */
void db_labels_from_json(const char *text, struct server_db_labels *out);
/* The labels as compact JSON object text (heap), NULL for none or when out
 * of memory (*out_err -ENOMEM then). */
char *db_labels_dump(const struct server_db_labels *labels, int *out_err);

/* db_pair_codes.c: the consuming UPDATE of server_db_code_consume, inside or
 * outside a transaction (server_db_pair_complete runs it inside one). */
int db_code_consume(struct server_db *db, const char *code_id, int64_t *out_user_id,
                    struct cordon_diag *diag);

#endif
