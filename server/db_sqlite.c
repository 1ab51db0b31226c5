/* The SQLite driver (server/db_internal.h): STATE/cordon.db, WAL,
 * synchronous=FULL, foreign keys, a 5 s busy timeout; the schema's
 * migrations; the online backup and restore. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "server/db.h"
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
    /* 9 -> 10: a cluster (server/cluster.h): which server instance holds
     * each device's live session, until when; and the packages of queued
     * jobs, so that any server can send them */
    "CREATE TABLE device_sessions ("
    "  device_id TEXT PRIMARY KEY REFERENCES devices(id),"
    "  instance TEXT NOT NULL,"
    "  session_id TEXT NOT NULL,"
    "  lease_expires INTEGER NOT NULL);"
    "CREATE INDEX device_sessions_instance ON device_sessions (instance);"
    "CREATE TABLE job_packages ("
    "  job_id TEXT PRIMARY KEY REFERENCES jobs(id),"
    "  bytes BLOB NOT NULL);",
    /* 10 -> 11: the once-a-second expiry and queue scans read the live jobs
     * by state and deadline, not the whole table (it only grows) */
    "CREATE INDEX jobs_state_deadline ON jobs (state, deadline);",
    /* 11 -> 12: queued packages above SERVER_DB_PACKAGE_STORE_MAX, in parts
     * (job_packages keeps a smaller one in one row, as before) */
    "CREATE TABLE job_package_parts ("
    "  job_id TEXT NOT NULL REFERENCES jobs(id),"
    "  part INTEGER NOT NULL CHECK (part >= 0),"
    "  bytes BLOB NOT NULL,"
    "  PRIMARY KEY (job_id, part));",
    /* 12 -> 13: a cluster's key rotations, sealed by its Noise key
     * (server/keysync.h; used only on PostgreSQL) */
    "CREATE TABLE cluster_keys ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  serial INTEGER NOT NULL CHECK (serial >= 1),"
    "  sealed BLOB NOT NULL,"
    "  updated INTEGER NOT NULL);",
    /* 13 -> 14 (the new indexes first, the old one dropped last: on
     * PostgreSQL the drop locks the table until the commit): a job's
     * state changes touch the live jobs' index only
     * (jobs_device_state held every job of the history, so each change was
     * a random page of it: half the pages of each commit), and the newest
     * jobs are listed by an index of their creation rather than by sorting
     * the whole table */
    "CREATE INDEX jobs_device_live ON jobs (device_id, state)"
    "  WHERE state IN ('queued','sent','running');"
    "CREATE INDEX jobs_created ON jobs (created);"
    "DROP INDEX jobs_device_state;",
};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == SERVER_DB_SCHEMA_VERSION,
               "one migration per schema version");

static const int api_version[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
_Static_assert(sizeof(api_version) / sizeof(api_version[0]) == SERVER_DB_SCHEMA_VERSION + 1,
               "SQLite's versions are the API's");

/* --- errors --------------------------------------------------------------- */

/* An SQLite result code as a db.h error (0 for OK, DONE and ROW). */
static int map_rc(sqlite3 *h, int rc) {
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

/* A failed SQLite call: its error, never 0. */
static int lite_err(sqlite3 *h, int rc) {
  int err = map_rc(h, rc);
  return err ? err : CORDON_E_INTERNAL;
}

static int lite_fail(struct server_db *db, int rc, const char *what, struct cordon_diag *diag) {
  return cordon_diag_set(diag, lite_err(db->h, rc), "%s: %s: %s", db->path, what,
                         db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc));
}

/* --- statements ----------------------------------------------------------- */

static int lite_prepare(struct server_db *db, struct db_st *st, const char *sql, const char *pg_sql,
                        struct cordon_diag *diag) {
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v3(db->h, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, NULL);
  if (rc != SQLITE_OK)
    return lite_fail(db, rc, "prepare", diag);
  st->h = s;
  return 0;
}

static void lite_finalize(struct db_st *st) {
  sqlite3_finalize(st->h);
  st->h = NULL;
  st->ready = false;
}

static int lite_step(struct db_st *st) {
  int rc = sqlite3_step(st->h);
  if (rc == SQLITE_ROW)
    return DB_ROW;
  if (rc == SQLITE_DONE)
    return DB_DONE;
  return lite_err(st->db->h, rc);
}

static void lite_reset(struct db_st *st) {
  sqlite3_reset(st->h);
  sqlite3_clear_bindings(st->h);
}

static int lite_bind(struct db_st *st, int i, int kind, const void *p, size_t n, int64_t v) {
  int rc;
  switch (kind != DB_BIND_INT && !p ? DB_BIND_NULL : kind) {
  case DB_BIND_INT:
    rc = sqlite3_bind_int64(st->h, i, v);
    break;
  case DB_BIND_TEXT:
    rc = sqlite3_bind_text(st->h, i, p, (int)n, SQLITE_TRANSIENT);
    break;
  case DB_BIND_BLOB:
    rc = sqlite3_bind_blob(st->h, i, p, (int)n, SQLITE_TRANSIENT);
    break;
  default:
    rc = sqlite3_bind_null(st->h, i);
    break;
  }
  return rc == SQLITE_OK ? DB_OK : lite_err(st->db->h, rc);
}

static int64_t lite_col_int(struct db_st *st, int i) {
  return sqlite3_column_int64(st->h, i);
}

static const char *lite_col_str(struct db_st *st, int i) {
  return (const char *)sqlite3_column_text(st->h, i);
}

static const void *lite_col_blob(struct db_st *st, int i, size_t *out_len) {
  const void *p = sqlite3_column_blob(st->h, i);
  *out_len = (size_t)sqlite3_column_bytes(st->h, i);
  return p;
}

static int64_t lite_changes(struct server_db *db) {
  return sqlite3_changes(db->h);
}

static bool lite_in_tx(struct server_db *db) {
  return !sqlite3_get_autocommit(db->h);
}

static const char *lite_errmsg(struct server_db *db) {
  return db->h ? sqlite3_errmsg(db->h) : "";
}

/* Setting this pragma does no I/O; it fails only when out of memory. */
static void lite_sync(struct server_db *db, bool full) {
  (void)sqlite3_exec(db->h, full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
                     NULL, NULL, NULL);
}

static int lite_exec_script(struct server_db *db, const char *sql) {
  char *msg = NULL;
  int rc = sqlite3_exec(db->h, sql, NULL, NULL, &msg);
  if (rc == SQLITE_OK)
    return 0;
  snprintf(db->errmsg, sizeof(db->errmsg), "%s", msg ? msg : sqlite3_errstr(rc));
  sqlite3_free(msg);
  return lite_err(db->h, rc);
}

static int lite_probe(struct server_db *db, bool *out_has_table, bool *out_empty, bool *out_foreign,
                      struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db->h,
                              "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                              " AND name = 'schema_version'), (SELECT count(*) FROM sqlite_master),"
                              " (SELECT application_id FROM pragma_application_id)",
                              -1, &st, NULL);
  if (rc != SQLITE_OK)
    return lite_fail(db, rc, "read schema", diag);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    int err = lite_fail(db, rc, "read schema", diag);
    sqlite3_finalize(st);
    return err;
  }
  int64_t has_table = sqlite3_column_int64(st, 0), objects = sqlite3_column_int64(st, 1);
  int64_t app_id = sqlite3_column_int64(st, 2);
  sqlite3_finalize(st);
  *out_has_table = has_table != 0;
  *out_empty = objects == 0;
  *out_foreign = app_id != 0 && app_id != DB_APPLICATION_ID;
  return 0;
}

/* --- open ----------------------------------------------------------------- */

static int pragma(struct server_db *db, const char *sql, const char *expect,
                  struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db->h, sql, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return lite_fail(db, rc, sql, diag);
  int err = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const unsigned char *v = sqlite3_column_text(st, 0);
    if (expect && (!v || strcmp((const char *)v, expect) != 0))
      err = cordon_diag_set(diag, CORDON_E_INTERNAL, "%s: %s gave '%s', wanted '%s'", db->path, sql,
                            v ? (const char *)v : "", expect);
  }
  if (rc != SQLITE_DONE && !err)
    err = lite_fail(db, rc, sql, diag);
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

static int lite_open(struct server_db *db, const char *state_dir, const char *url, unsigned flags,
                     struct cordon_diag *diag) {
  int n = snprintf(db->path, sizeof(db->path), "%s/%s", state_dir, SERVER_DB_FILE);
  if (n < 0 || (size_t)n >= sizeof(db->path))
    return cordon_diag_set(diag, -ENAMETOOLONG, "state directory path too long");
  int err = prepare_file(state_dir, db->path, flags, diag);
  if (err)
    return err;
  sqlite3 *h = NULL;
  int rc = sqlite3_open_v2(
      db->path, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_EXRESCODE, NULL);
  db->h = h;
  if (rc != SQLITE_OK)
    return lite_fail(db, rc, "open", diag);
  sqlite3_extended_result_codes(h, 1);
  sqlite3_busy_timeout(h, SERVER_DB_BUSY_TIMEOUT_MS);
  /* These take no user data. */
  if ((err = pragma(db, "PRAGMA journal_mode = WAL", "wal", diag)) ||
      (err = pragma(db, "PRAGMA synchronous = FULL", NULL, diag)) ||
      (err = pragma(db, "PRAGMA foreign_keys = ON", NULL, diag)) ||
      (err = pragma(db, "PRAGMA trusted_schema = OFF", NULL, diag)) ||
      (err = pragma(db, "PRAGMA secure_delete = ON", NULL, diag)) ||
      /* 16 MiB of page cache (SQLite's default is 2 MB), taken only as
       * pages are read: the daemon's scans and lookups of a database of
       * 10,000 devices and a long history stay in memory */
      (err = pragma(db, "PRAGMA cache_size = -16384", NULL, diag)))
    return err;
  return 0;
}

/* --- checkpoints on a thread of their own --------------------------------- */

/* SQLite's own checkpoint runs in the writer's COMMIT once the WAL holds
 * wal_autocheckpoint (1,000) pages: on the daemon's loop, a twentieth of
 * its time with thousands of jobs a second. server_db_checkpoint_behind
 * hands the bulk of it to a thread with a connection of its own; the
 * commit's WAL hook (on the writer's thread, after each COMMIT) drives it:
 *  - every CKPT_FRAMES new pages in the WAL it wakes the thread, which
 *    runs a PASSIVE checkpoint (it waits for no one: pages a reader still
 *    needs stay for the next one);
 *  - the WAL is restarted from its start only by a write transaction that
 *    began with all of it copied, which commits made meanwhile prevent; so
 *    the first COMMIT after the thread's checkpoint ended copies what was
 *    written since, itself (a few groups' pages), and the next transaction
 *    restarts the WAL, as after SQLite's own checkpoint;
 *  - the thread starts no checkpoint until the writer has taken the end
 *    of the last one, and is not woken while one runs;
 *  - should the thread fall behind (a slow disk; its checkpoints failing,
 *    e.g. when the disk is full) past CKPT_INLINE_FRAMES, the writer stops
 *    waking it, waits for the checkpoint under way to end and checkpoints
 *    itself, as SQLite's own would: the WAL does not grow without bound.
 * A checkpoint that fails is logged, at most once a minute. Durability is
 * the WAL's fsync in each COMMIT, as before: a checkpoint only moves
 * committed pages into the database file (and fsyncs it). */
#define CKPT_FRAMES 1000
#define CKPT_INLINE_FRAMES 16000
#define CKPT_LOG_MS 60000

struct ckpt {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* the thread waits for work; the writer for the thread to end one */
  /* under mu: work wanted, to stop, one under way, one ended that the
   * writer has not taken yet, and the last one's failure (SQLite's code) */
  bool want, stop, running, ended;
  int failed;
  sqlite3 *h; /* the thread's own connection */
  /* the writer's (the hook's) own */
  int last_frames;   /* the WAL's length at the last commit */
  int next_at;       /* the length at which the thread is woken next */
  int64_t logged_ms; /* the last failure logged (core_mono_ms), 0: none */
  const char *path;  /* for messages */
};

static void *ckpt_main(void *arg) {
  struct ckpt *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->stop && (!c->want || c->ended))
      pthread_cond_wait(&c->cv, &c->mu);
    if (c->stop)
      break;
    c->want = false;
    c->running = true;
    pthread_mutex_unlock(&c->mu);
    int rc = sqlite3_wal_checkpoint_v2(c->h, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    pthread_mutex_lock(&c->mu);
    c->running = false;
    if (rc == SQLITE_OK)
      c->ended = true;
    else
      c->failed = rc;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static void ckpt_log(struct ckpt *c, int rc) {
  int64_t now = (int64_t)core_mono_ms();
  if (c->logged_ms && now - c->logged_ms < CKPT_LOG_MS)
    return;
  c->logged_ms = now;
  core_log_kv(CORE_LOG_WARN, "WAL checkpoint failed: the WAL grows until one succeeds", "db",
              c->path, "error", sqlite3_errstr(rc), NULL);
}

static int ckpt_hook(void *arg, sqlite3 *h, const char *name, int frames) {
  struct ckpt *c = arg;
  if (frames < c->last_frames) /* restarted */
    c->next_at = CKPT_FRAMES;
  c->last_frames = frames;
  bool behind = frames >= CKPT_INLINE_FRAMES, wake = false;
  pthread_mutex_lock(&c->mu);
  bool catch_up = c->ended;
  c->ended = false;
  int failed = c->failed;
  c->failed = SQLITE_OK;
  if (behind) {
    c->want = false;
    while (c->running)
      pthread_cond_wait(&c->cv, &c->mu);
  } else if (!catch_up && !c->running && !c->want && frames >= c->next_at) {
    c->want = wake = true;
    c->next_at = frames + CKPT_FRAMES;
  }
  pthread_mutex_unlock(&c->mu);
  if (wake)
    pthread_cond_broadcast(&c->cv);
  if (failed != SQLITE_OK)
    ckpt_log(c, failed);
  if (catch_up || behind) {
    int rc = sqlite3_wal_checkpoint_v2(h, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    if (rc == SQLITE_BUSY && catch_up && !behind) { /* again at the next commit */
      pthread_mutex_lock(&c->mu);
      c->ended = true;
      pthread_mutex_unlock(&c->mu);
    } else if (rc != SQLITE_OK) {
      ckpt_log(c, rc);
    }
  }
  return SQLITE_OK;
}

int server_db_checkpoint_behind(struct server_db *db, struct cordon_diag *diag) {
  if (db->drv != &db_sqlite_driver || db->ckpt)
    return 0;
  if (!sqlite3_threadsafe())
    return cordon_diag_set(diag, -ENOTSUP,
                           "checkpoint thread: this SQLite is built without thread safety");
  struct ckpt *c = calloc(1, sizeof(*c));
  if (!c)
    return cordon_diag_set(diag, -ENOMEM, "checkpoint thread: out of memory");
  int rc = sqlite3_open_v2(db->path, &c->h,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_NOMUTEX |
                               SQLITE_OPEN_EXRESCODE,
                           NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(c->h, "PRAGMA synchronous = FULL", NULL, NULL, NULL);
  if (rc != SQLITE_OK) {
    int err = cordon_diag_set(diag, lite_err(c->h, rc), "%s: checkpoint connection: %s", db->path,
                              c->h ? sqlite3_errmsg(c->h) : sqlite3_errstr(rc));
    sqlite3_close(c->h);
    free(c);
    return err;
  }
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  int e = pthread_create(&c->thread, NULL, ckpt_main, c);
  if (e != 0) {
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    sqlite3_close(c->h);
    free(c);
    return cordon_diag_set(diag, -e, "checkpoint thread: %s", strerror(e));
  }
  c->next_at = CKPT_FRAMES;
  c->path = db->path;
  sqlite3_wal_hook(db->h, ckpt_hook, c);
  db->ckpt = c;
  return 0;
}

static void ckpt_stop(struct server_db *db) {
  struct ckpt *c = db->ckpt;
  if (!c)
    return;
  sqlite3_wal_hook(db->h, NULL, NULL);
  pthread_mutex_lock(&c->mu);
  c->stop = true;
  pthread_mutex_unlock(&c->mu);
  pthread_cond_broadcast(&c->cv);
  pthread_join(c->thread, NULL);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  sqlite3_close(c->h);
  free(c);
  db->ckpt = NULL;
}

static void lite_close(struct server_db *db) {
  ckpt_stop(db); /* first: the last connection's close checkpoints the WAL away */
  sqlite3_close(db->h);
  db->h = NULL;
}

const struct db_driver db_sqlite_driver = {
    .name = "sqlite",
    .migrations = migrations,
    .schema_version = SERVER_DB_SCHEMA_VERSION,
    .api_version = api_version,
    .open = lite_open,
    .close = lite_close,
    .probe = lite_probe,
    .exec_script = lite_exec_script,
    .prepare = lite_prepare,
    .finalize = lite_finalize,
    .step = lite_step,
    .reset = lite_reset,
    .bind = lite_bind,
    .col_int = lite_col_int,
    .col_str = lite_col_str,
    .col_blob = lite_col_blob,
    .changes = lite_changes,
    .in_tx = lite_in_tx,
    .errmsg = lite_errmsg,
    .sync = lite_sync,
};

/* --- backup and restore --------------------------------------------------- */

static int refuse_pg(struct server_db *db, const char *what, struct cordon_diag *diag) {
  return cordon_diag_set(diag, -EOPNOTSUPP,
                         "%s: cordon-server %s works on SQLite only; for PostgreSQL use "
                         "pg_dump and pg_restore (docs/OPERATIONS.md, \"PostgreSQL\")",
                         db->path, what);
}

/* Copy all of src into dst with SQLite's online backup API, waiting out a
 * writer that holds the lock (up to the busy timeout). */
static int copy_database(sqlite3 *dst, sqlite3 *src, const char *what, struct cordon_diag *diag) {
  sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
  if (!b)
    return cordon_diag_set(diag, lite_err(dst, sqlite3_errcode(dst)), "%s: %s", what,
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
    return cordon_diag_set(diag, lite_err(dst, rc), "%s: %s", what, sqlite3_errstr(rc));
  return 0;
}

int server_db_backup(struct server_db *db, const char *path, struct cordon_diag *diag) {
  if (db->drv != &db_sqlite_driver)
    return refuse_pg(db, "backup", diag);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  close(fd);
  sqlite3 *dst = NULL;
  int rc = sqlite3_open_v2(path, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL);
  int err = rc == SQLITE_OK ? 0
                            : cordon_diag_set(diag, lite_err(dst, rc), "%s: %s", path,
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
  if (db->drv != &db_sqlite_driver)
    return refuse_pg(db, "restore", diag);
  struct server_db *src = calloc(1, sizeof(*src));
  if (!src)
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  src->drv = &db_sqlite_driver;
  snprintf(src->path, sizeof(src->path), "%s", path);
  int err = 0, version = 0;
  struct stat st;
  if (stat(path, &st) < 0)
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s is not a regular file", path);
  sqlite3 *sh = NULL;
  int rc = err ? SQLITE_OK
               : sqlite3_open_v2(path, &sh, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, NULL);
  src->h = sh;
  if (!err && rc != SQLITE_OK)
    err = lite_fail(src, rc, "open", diag);
  if (!err)
    err = db_read_schema_version(src, &version, diag);
  if (!err && version == 0)
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: an empty database", path);
  if (!err && version > SERVER_DB_SCHEMA_VERSION)
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                          "%s: schema version %d is newer than this cordon-server knows (%d)", path,
                          version, SERVER_DB_SCHEMA_VERSION);
  if (!err) {
    /* the prepared statements of db refer to the schema being replaced */
    for (size_t i = 0; i < Q_COUNT_; i++)
      if (db->stmts[i].ready)
        lite_finalize(&db->stmts[i]);
    err = copy_database(db->h, src->h, db->path, diag);
  }
  server_db_close(src);
  if (!err)
    err = db_migrate(db, diag); /* an older backup comes up to this schema */
  return err;
}

/* --- moving a state to PostgreSQL (server/db.h, cordon-server migrate) ---- */

bool server_db_move_name_ok(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > SERVER_DB_MOVE_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
      return false;
  return true;
}

const char *server_db_move_where(const struct server_db *db) {
  return db->path;
}

int server_db_move_source_open(const char *state_dir, struct server_db **out_db, int *out_version,
                               struct cordon_diag *diag) {
  struct server_db *db = calloc(1, sizeof(*db));
  if (!db)
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  db->drv = &db_sqlite_driver;
  int version = 0;
  int err = lite_open(db, state_dir, NULL, 0, diag);
  if (!err) {
    /* the write lock: a command writing meanwhile waits (busy timeout),
     * so no change slips in between the copy and the switch */
    int rc = sqlite3_exec(db->h, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
      err = lite_fail(db, rc, "take the write lock", diag);
  }
  if (!err)
    err = db_read_schema_version(db, &version, diag);
  if (err) {
    server_db_close(db);
    return err;
  }
  *out_db = db;
  *out_version = version;
  return 0;
}

int server_db_move_source_tables(struct server_db *src, struct server_db_move_names *out,
                                 struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(src->h,
                              "SELECT name FROM sqlite_master WHERE type = 'table'"
                              " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                              -1, &st, NULL);
  if (rc != SQLITE_OK)
    return lite_fail(src, rc, "list the tables", diag);
  int err = 0;
  out->count = 0;
  while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    if (out->count == SERVER_DB_MOVE_NAMES_MAX)
      err = cordon_diag_set(diag, -E2BIG, "%s: more than %d tables", src->path,
                            SERVER_DB_MOVE_NAMES_MAX);
    else
      snprintf(out->name[out->count++], sizeof(out->name[0]), "%s", name ? name : "");
  }
  if (!err && rc != SQLITE_DONE)
    err = lite_fail(src, rc, "list the tables", diag);
  sqlite3_finalize(st);
  return err;
}

/* A declared SQLite type as the kind its values have. */
static enum server_db_value_kind declared_kind(const char *type) {
  if (!type)
    return SERVER_DB_VALUE_NULL;
  if (sqlite3_stricmp(type, "INTEGER") == 0)
    return SERVER_DB_VALUE_INT;
  if (sqlite3_stricmp(type, "TEXT") == 0)
    return SERVER_DB_VALUE_TEXT;
  if (sqlite3_stricmp(type, "BLOB") == 0)
    return SERVER_DB_VALUE_BLOB;
  return SERVER_DB_VALUE_NULL;
}

int server_db_move_source_columns(struct server_db *src, const char *table,
                                  struct server_db_move_columns *out, struct cordon_diag *diag) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(src->h, "SELECT name, type FROM pragma_table_info(?1) ORDER BY cid",
                              -1, &st, NULL);
  if (rc != SQLITE_OK)
    return lite_fail(src, rc, "read the columns", diag);
  sqlite3_bind_text(st, 1, table, -1, SQLITE_TRANSIENT);
  int err = 0;
  out->count = 0;
  while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    if (out->count == SERVER_DB_MOVE_COLUMNS_MAX) {
      err = cordon_diag_set(diag, -E2BIG, "%s: table %s has more than %d columns", src->path, table,
                            SERVER_DB_MOVE_COLUMNS_MAX);
      break;
    }
    struct server_db_move_column *c = &out->items[out->count++];
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", name ? name : "");
    c->kind = declared_kind((const char *)sqlite3_column_text(st, 1));
  }
  if (!err && rc != SQLITE_DONE)
    err = lite_fail(src, rc, "read the columns", diag);
  sqlite3_finalize(st);
  if (!err && out->count == 0)
    err = cordon_diag_set(diag, -ENOENT, "%s: no table %s", src->path, table);
  return err;
}

int server_db_move_source_sequence(struct server_db *src, const char *table, int64_t *out_seq,
                                   struct cordon_diag *diag) {
  /* sqlite_sequence exists once a table with AUTOINCREMENT does */
  static const char *const steps[] = {
      "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'",
      "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = ?1"};
  int64_t v = 0;
  int err = 0;
  for (size_t i = 0; !err && i < 2; i++) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(src->h, steps[i], -1, &st, NULL);
    if (rc == SQLITE_OK && i == 1)
      rc = sqlite3_bind_text(st, 1, table, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK)
      rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
      v = sqlite3_column_int64(st, 0);
    else
      err = lite_fail(src, rc, "read sqlite_sequence", diag);
    sqlite3_finalize(st);
    if (!err && i == 0 && v == 0)
      break; /* none: 0 */
  }
  if (!err)
    *out_seq = v;
  return err;
}

int server_db_move_select_sql(const char *table, const struct server_db_move_columns *cols,
                              const char *order_by, bool quote, char *out, size_t size) {
  if (!server_db_move_name_ok(table) || cols->count == 0 || !order_by || !*order_by ||
      strspn(order_by, "abcdefghijklmnopqrstuvwxyz0123456789_, ") != strlen(order_by))
    return -EINVAL;
  const char *q = quote ? "\"" : "";
  size_t o = (size_t)snprintf(out, size, "SELECT ");
  for (size_t i = 0; i < cols->count && o < size; i++) {
    if (!server_db_move_name_ok(cols->items[i].name))
      return -EINVAL;
    o += (size_t)snprintf(out + o, size - o, "%s%s%s%s", i ? ", " : "", q, cols->items[i].name, q);
  }
  if (o < size)
    o += (size_t)snprintf(out + o, size - o, " FROM %s%s%s ORDER BY %s", q, table, q, order_by);
  return o < size ? 0 : -ENAMETOOLONG;
}

int server_db_move_source_read(struct server_db *src, const char *table,
                               const struct server_db_move_columns *cols, const char *order_by,
                               server_db_move_row_fn *fn, void *arg, struct cordon_diag *diag) {
  char sql[4096];
  if (server_db_move_select_sql(table, cols, order_by, false, sql, sizeof(sql)) < 0)
    return cordon_diag_set(diag, -EINVAL, "%s: table %s: not a name this copy reads", src->path,
                           table);
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(src->h, sql, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return lite_fail(src, rc, table, diag);
  struct server_db_value row[SERVER_DB_MOVE_COLUMNS_MAX];
  int err = 0;
  while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    for (size_t i = 0; !err && i < cols->count; i++) {
      struct server_db_value *v = &row[i];
      memset(v, 0, sizeof(*v));
      switch (sqlite3_column_type(st, (int)i)) {
      case SQLITE_INTEGER:
        v->kind = SERVER_DB_VALUE_INT;
        v->i = sqlite3_column_int64(st, (int)i);
        break;
      case SQLITE_TEXT:
        v->kind = SERVER_DB_VALUE_TEXT;
        v->p = sqlite3_column_text(st, (int)i);
        v->len = (size_t)sqlite3_column_bytes(st, (int)i);
        break;
      case SQLITE_BLOB:
        v->kind = SERVER_DB_VALUE_BLOB;
        v->len = (size_t)sqlite3_column_bytes(st, (int)i);
        v->p = sqlite3_column_blob(st, (int)i);
        if (!v->p)
          v->p = "";
        break;
      case SQLITE_NULL:
        v->kind = SERVER_DB_VALUE_NULL;
        break;
      default:
        err = cordon_diag_set(diag, -EINVAL,
                              "%s: %s.%s holds a real number, which no cordon "
                              "column has",
                              src->path, table, cols->items[i].name);
      }
    }
    if (!err)
      err = fn(arg, row, cols->count);
  }
  if (!err && rc != SQLITE_DONE)
    err = lite_fail(src, rc, table, diag);
  sqlite3_finalize(st);
  return err;
}
