/* cordon-server state (server/db.h): opening, migrations, the statement
 * cache, transactions and the helpers the per-table files share
 * (server/db_internal.h), over the handle's driver (db_sqlite.c, db_pg.c).
 * Every statement is prepared once per handle from the constant table; user
 * data is only ever bound, never spliced into SQL. */
#include "server/db.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/id.h"
#include "core/log.h"
#include "server/db_internal.h"

static const char *const stmt_sql[] = {
#define DB_STMT_SQL_(name, sql) sql,
    DB_STATEMENTS(DB_STMT_SQL_)
#undef DB_STMT_SQL_
};

static const char *const stmt_pg_sql[Q_COUNT_] = {
#define DB_STMT_PG_SQL_(name, sql) [Q_##name] = sql,
    DB_PG_STATEMENTS(DB_STMT_PG_SQL_)
#undef DB_STMT_PG_SQL_
};

/* --- errors --------------------------------------------------------------- */

/* Map rc to an error and describe it: "<path>: <what>: <driver message>". */
int db_fail(struct server_db *db, int rc, const char *what, struct cordon_diag *diag) {
  int err = rc < 0 ? rc : CORDON_E_INTERNAL;
  const char *msg = db->h ? db->drv->errmsg(db) : "";
  return cordon_diag_set(diag, err, "%s: %s: %s", db->path, what,
                         msg && *msg ? msg : cordon_err_message(err));
}

int64_t server_db_now(const struct server_db *db) {
  if (db && db->fixed_now)
    return db->fixed_now;
  if (db && db->clock_follow)
    return (db->clock_wall_ms + (core_mono_ms() - db->clock_mono_ms)) / 1000;
  return (int64_t)(core_wall_ms() / 1000);
}

/* The database's clock in ms (PostgreSQL), the middle of the round trip
 * on the monotonic clock into *out_mono. */
static int clock_read_db(struct server_db *db, int64_t *out_ms, int64_t *out_mono,
                         struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int64_t t0 = core_mono_ms();
  int err = db_stmt(db, Q_CLOCK_NOW_MS, &st, diag);
  if (err)
    return err;
  int rc = db_step(st);
  if (rc == DB_ROW)
    *out_ms = db_col_int(st, 0);
  else
    err = db_fail(db, rc, "read the database's clock", diag);
  db_done(st);
  *out_mono = (t0 + core_mono_ms()) / 2;
  return err;
}

/* Move what counts down from when it was set by step_s: live jobs'
 * deadlines, queued jobs' queue deadlines, live pairing codes. */
static int clock_shift(struct server_db *db, int64_t step_s, struct cordon_diag *diag) {
  static const enum db_stmt shifts[] = {Q_CLOCK_SHIFT_DEADLINES, Q_CLOCK_SHIFT_QUEUE,
                                        Q_CLOCK_SHIFT_CODES};
  int err = db_tx_begin(db, diag);
  for (size_t i = 0; !err && i < sizeof(shifts) / sizeof(shifts[0]); i++)
    err = db_exec_int(db, shifts[i], step_s, "move the deadlines with the clock", diag);
  if (err) {
    db_tx_rollback(db);
    return err;
  }
  return db_tx_commit(db, diag);
}

void server_db_clock_follow(struct server_db *db) {
  db->clock_follow = false; /* the first reading: the wall clock, or the database's */
  int64_t ms = (int64_t)core_wall_ms(), mono = core_mono_ms();
  if (server_db_is_shared(db) && clock_read_db(db, &ms, &mono, NULL) < 0) {
    ms = (int64_t)core_wall_ms();
    mono = core_mono_ms();
  }
  db->clock_wall_ms = ms;
  db->clock_mono_ms = mono;
  db->clock_skew_ms = (int64_t)core_wall_ms() - ms;
  db->clock_follow = true;
}

int server_db_clock_tick(struct server_db *db, int64_t *out_step_ms, struct cordon_diag *diag) {
  *out_step_ms = 0;
  if (!db->clock_follow || db->fixed_now)
    return 0;
  int64_t mono = core_mono_ms(), est = db->clock_wall_ms + (mono - db->clock_mono_ms);
  if (server_db_is_shared(db)) {
    int64_t ms = 0;
    int err = clock_read_db(db, &ms, &mono, diag);
    if (err)
      return err; /* the anchor stands: the monotonic clock goes on */
    db->clock_wall_ms = ms;
    db->clock_mono_ms = mono;
    db->clock_skew_ms = (int64_t)core_wall_ms() - ms;
    return 0;
  }
  int64_t wall = (int64_t)core_wall_ms(), step = wall - est;
  if (step > -SERVER_DB_CLOCK_STEP_MS && step < SERVER_DB_CLOCK_STEP_MS) {
    db->clock_wall_ms = wall; /* small drift (NTP slews): follow it */
    db->clock_mono_ms = mono;
    return 0;
  }
  int64_t step_s = step / 1000; /* whole seconds, as the columns hold */
  int err = clock_shift(db, step_s, diag);
  if (err)
    return err; /* tried again at the next tick */
  db->clock_wall_ms = est + step_s * 1000;
  db->clock_mono_ms = mono;
  *out_step_ms = step_s * 1000;
  return 0;
}

int64_t server_db_clock_skew_ms(const struct server_db *db) {
  return db->clock_skew_ms;
}

void server_db_set_clock(struct server_db *db, int64_t now) {
  if (db)
    db->fixed_now = now;
}

/* --- statements ----------------------------------------------------------- */

/* The cached statement for q, reset and without bindings. */
static int group_before_stmt(struct server_db *db, struct db_st *st, struct cordon_diag *diag);

/* Whether sql commits nothing by itself: a query or a transaction statement
 * (the group's rule for "a write outside an op", and the commit count). */
static bool sql_readonly(const char *sql) {
  static const char *const heads[] = {"SELECT",   "BEGIN",     "COMMIT",
                                      "ROLLBACK", "SAVEPOINT", "RELEASE"};
  for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++)
    if (strncmp(sql, heads[i], strlen(heads[i])) == 0)
      return true;
  return false;
}

int db_stmt(struct server_db *db, enum db_stmt q, struct db_st **out_st, struct cordon_diag *diag) {
  struct db_st *st = &db->stmts[q];
  if (!st->ready) {
    st->db = db;
    int err = db->drv->prepare(db, st, stmt_sql[q], stmt_pg_sql[q], diag);
    if (err)
      return err;
    st->ready = true;
    st->readonly = sql_readonly(stmt_sql[q]);
    st->is_commit = strcmp(stmt_sql[q], "COMMIT") == 0;
  }
  int err = group_before_stmt(db, st, diag); /* group commit */
  if (err)
    return err;
  *out_st = st;
  return 0;
}

int db_step(struct db_st *st) {
  struct server_db *db = st->db;
  bool autocommit_write = !st->readonly && !st->counted && !db_in_tx(db);
  int rc = db->drv->step(st);
  db->last_err = rc < 0 ? rc : 0;
  if ((rc == DB_ROW || rc == DB_DONE) && (autocommit_write || (st->is_commit && rc == DB_DONE))) {
    db->commits++; /* a write transaction of its own, or the end of one */
    st->counted = true;
  }
  return rc;
}

/* Done with a statement: reset it so it holds no locks, drop bindings. */
void db_done(struct db_st *st) {
  if (st && st->ready) {
    st->db->drv->reset(st);
    st->counted = false;
  }
}

/* Run a statement that returns no rows (or whose rows do not matter). */
int db_exec_stmt(struct server_db *db, struct db_st *st, const char *what,
                 struct cordon_diag *diag) {
  int rc;
  while ((rc = db_step(st)) == DB_ROW)
    ;
  int err = rc == DB_DONE ? 0 : db_fail(db, rc, what, diag);
  db_done(st);
  return err;
}

int db_simple(struct server_db *db, enum db_stmt q, const char *what, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  return db_exec_stmt(db, st, what, diag);
}

int db_exec_int(struct server_db *db, enum db_stmt q, int64_t v, const char *what,
                struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_int(st, 1, v, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  return db_exec_stmt(db, st, what, diag);
}

int db_stmt_text(struct server_db *db, enum db_stmt q, const char *text, struct db_st **out_st,
                 struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, text, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  *out_st = st;
  return 0;
}

int64_t db_changes(struct server_db *db) {
  return db->drv->changes(db);
}

bool db_in_tx(struct server_db *db) {
  return db->drv->in_tx(db);
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
  if (!g->open || db_in_tx(db))
    return false;
  int err = db->last_err;
  g->lost = g->depth > 0;
  g->lost_err = err ? err : -EIO;
  g->tx_nested = 0;
  group_ended(db, g->lost_err);
  return true;
}

/* Before each statement: a write outside an op commits the open group
 * first (it keeps db.h's contract: committed when it returns); inside an
 * op whose group was rolled back, nothing more runs. */
static int group_before_stmt(struct server_db *db, struct db_st *st, struct cordon_diag *diag) {
  struct db_group *g = &db->group;
  if (g->open && g->depth == 0 && !st->readonly)
    server_db_group_commit(db, NULL);
  else if (g->open && g->depth > 0)
    group_check_lost(db);
  if (g->lost)
    return cordon_diag_set(diag, g->lost_err, "%s: the group transaction was rolled back: %s",
                           db->path, cordon_err_message(g->lost_err));
  return 0;
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

/* COMMIT the connection's transaction (rolled back if that fails): 0 or
 * the error. *doubt: the transaction's id when the COMMIT went out and its
 * answer was lost with the connection (committed or not: only the
 * database knows), else 0. One that is no longer open (it died with its
 * connection, made again since) is not committed, and is not asked. */
static int commit_tx(struct server_db *db, uint64_t *doubt, struct cordon_diag *diag) {
  *doubt = 0;
  if (!db_in_tx(db))
    return cordon_diag_set(diag, db->last_err ? db->last_err : -EIO,
                           "%s: commit: no transaction is open any more (lost with its "
                           "connection, or rolled back under it)",
                           db->path);
  int err = db_simple(db, Q_COMMIT, "commit", diag);
  if (err && db->drv->unanswered)
    *doubt = db->drv->unanswered(db);
  if (err && !*doubt && db_in_tx(db))
    db_simple(db, Q_ROLLBACK, "rollback", NULL);
  return err;
}

/* err, with diag saying that whether a commit whose answer was lost went
 * in is not known yet. */
static int not_known_yet(struct server_db *db, int err, struct cordon_diag *diag) {
  return cordon_diag_set(diag, err,
                         "%s: commit: the connection broke before its answer: whether it was "
                         "committed is not known yet",
                         db->path);
}

/* Ask what became of a commit whose answer was lost: 0 committed, -EAGAIN
 * not known yet (diag says so), else the error it was not committed
 * with. */
static int commit_outcome(struct server_db *db, uint64_t xid, struct cordon_diag *diag) {
  struct cordon_diag why = {{0}};
  int r = db->drv->outcome(db, xid, &why);
  if (r == -EAGAIN)
    not_known_yet(db, r, diag);
  else if (r < 0)
    cordon_diag_set(diag, r, "%s: commit: the connection broke before its answer: %s", db->path,
                    why.msg);
  if (r != -EAGAIN) {
    char x[24];
    snprintf(x, sizeof(x), "%llu", (unsigned long long)xid);
    core_log_kv(r ? CORE_LOG_ERROR : CORE_LOG_WARN,
                r ? "a commit lost its answer with the connection: it was not committed"
                  : "a commit lost its answer with the connection: it was committed",
                "database", db->path, "transaction", x, "error", r ? why.msg : "-", NULL);
  }
  return r;
}

/* The group whose COMMIT's answer was lost: asked again (at most every
 * DB_DOUBT_ASK_MS: each ask is a round trip on the loop); once known, it
 * ends (committed, or not). -EAGAIN while still not known. */
#define DB_DOUBT_ASK_MS 100
static int group_settle(struct server_db *db, struct cordon_diag *diag) {
  struct db_group *g = &db->group;
  if (!g->doubt)
    return 0;
  int64_t now = (int64_t)core_mono_ms();
  if (now < g->doubt_next_ms)
    return not_known_yet(db, -EAGAIN, diag);
  g->doubt_next_ms = now + DB_DOUBT_ASK_MS;
  int err = commit_outcome(db, g->doubt, diag);
  if (err == -EAGAIN)
    return err;
  g->doubt = 0;
  group_ended(db, err);
  return err;
}

int server_db_group_commit(struct server_db *db, struct cordon_diag *diag) {
  struct db_group *g = &db->group;
  if (!g->open || g->depth > 0)
    return 0;
  uint64_t doubt;
  int err = commit_tx(db, &doubt, diag);
  if (doubt) {
    g->open = false;
    g->ops = 0;
    g->doubt = doubt;
    g->doubt_next_ms = 0; /* asked at once */
    int r = group_settle(db, diag);
    return r == -EAGAIN ? -EIO : r;
  }
  group_ended(db, err);
  return err;
}

bool server_db_group_in_doubt(const struct server_db *db) {
  return db->group.doubt != 0;
}

int server_db_group_settle(struct server_db *db) {
  return group_settle(db, NULL) == -EAGAIN ? -EAGAIN : 0;
}

int server_db_group_op_begin(struct server_db *db, struct cordon_diag *diag) {
  struct db_group *g = &db->group;
  if (g->lost)
    return cordon_diag_set(diag, g->lost_err, "%s: the group transaction was rolled back",
                           db->path);
  /* no new group before the last one's end is known: what waits for it
   * would be taken for this one's */
  if (g->doubt && group_settle(db, diag) == -EAGAIN)
    return -EIO;
  if (g->open && g->depth == 0 &&
      (g->ops >= SERVER_DB_GROUP_OPS_MAX ||
       (int64_t)core_mono_ms() - g->opened_ms >= SERVER_DB_GROUP_MS_MAX) &&
      server_db_group_commit(db, diag) < 0 && g->doubt)
    return -EIO; /* full, committed now, and that commit is in doubt: as above */
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
  uint64_t doubt;
  int err = commit_tx(db, &doubt, diag);
  if (doubt) /* asked at once: a server that is up answers on the connection made again */
    err = commit_outcome(db, doubt, diag);
  return err == -EAGAIN ? -EIO : err;
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
  if (db_in_tx(db))
    db_simple(db, Q_ROLLBACK, "rollback", NULL);
}

/* Not in a transaction: SQLite refuses the pragma there, and the group's
 * commit is synced anyway. */
void db_sync_relax(struct server_db *db) {
  if (!db_in_tx(db))
    db->drv->sync(db, false);
}

void db_sync_restore(struct server_db *db) {
  if (!db_in_tx(db))
    db->drv->sync(db, true);
}

/* --- end of transactions and group commit --------------------------------- */

/* Bind helpers: any failure is remembered and reported by db_bind_check. */
static void bind(struct db_st *st, int i, int kind, const void *p, size_t n, int64_t v, int *rc) {
  int r = st->db->drv->bind(st, i, kind, p, n, v);
  if (r != DB_OK && *rc == DB_OK)
    *rc = r;
}

/* A NULL string or blob binds NULL of that type (PostgreSQL cannot tell
 * the type of `?2 IS NULL` alone). */
void db_bind_text(struct db_st *st, int i, const char *s, int *rc) {
  bind(st, i, DB_BIND_TEXT, s, s ? strlen(s) : 0, 0, rc);
}

void db_bind_int(struct db_st *st, int i, int64_t v, int *rc) {
  bind(st, i, DB_BIND_INT, NULL, 0, v, rc);
}

void db_bind_blob(struct db_st *st, int i, const void *p, size_t n, int *rc) {
  bind(st, i, DB_BIND_BLOB, p, p ? n : 0, 0, rc);
}

int db_bind_check(struct server_db *db, struct db_st *st, int rc, struct cordon_diag *diag) {
  if (rc == DB_OK)
    return 0;
  int err = db_fail(db, rc, "bind", diag);
  db_done(st);
  return err;
}

int64_t db_col_int(struct db_st *st, int i) {
  return st->db->drv->col_int(st, i);
}

const char *db_col_str(struct db_st *st, int i) {
  return st->db->drv->col_str(st, i);
}

const void *db_col_blob_ptr(struct db_st *st, int i, size_t *out_len) {
  size_t n = 0;
  const void *p = st->db->drv->col_blob(st, i, &n);
  *out_len = p ? n : 0;
  return p;
}

void db_col_text(struct db_st *st, int i, char *dst, size_t size) {
  const char *s = db_col_str(st, i);
  snprintf(dst, size, "%s", s ? s : "");
}

int db_col_dup(struct db_st *st, int i, char **out) {
  const char *s = db_col_str(st, i);
  if (!s) {
    *out = NULL;
    return 0;
  }
  char *d = strdup(s);
  if (!d)
    return -ENOMEM;
  *out = d;
  return 0;
}

void db_col_blob(struct db_st *st, int i, uint8_t *dst, size_t size) {
  size_t n = 0;
  const void *p = db_col_blob_ptr(st, i, &n);
  memset(dst, 0, size);
  if (p && n == size)
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

void db_new_job_id(char out[CORDON_ID_HEX_SIZE]) {
  uint8_t b[CORDON_ID_LEN];
  cordon_id_ordered(b, core_wall_ms());
  cordon_id_to_hex(b, out);
}

/* --- open and migrate ----------------------------------------------------- */

int db_read_schema_version(struct server_db *db, int *out_version, struct cordon_diag *diag) {
  /* No schema_version table: an empty database is version 0, anything else
   * is not ours. */
  bool has_table = false, empty = false, foreign = false;
  int err = db->drv->probe(db, &has_table, &empty, &foreign, diag);
  if (err)
    return err;
  if (foreign)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not a cordon database", db->path);
  if (!has_table) {
    if (!empty)
      return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                             "%s: not a cordon database (no schema_version table)", db->path);
    *out_version = 0;
    return 0;
  }
  struct db_st *st = NULL;
  if ((err = db_stmt(db, Q_SCHEMA_VERSION, &st, diag)))
    return err;
  int rc = db_step(st);
  if (rc != DB_ROW) {
    err = rc == DB_DONE ? cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                                          "%s: schema_version is empty", db->path)
                        : db_fail(db, rc, "read schema version", diag);
    db_done(st);
    return err;
  }
  int64_t v = db_col_int(st, 0);
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
                         db->path, version, db->drv->schema_version);
}

int db_migrate(struct server_db *db, struct cordon_diag *diag) {
  const int newest = db->drv->schema_version;
  int version;
  int err = db_read_schema_version(db, &version, diag);
  if (err)
    return err;
  if (version > newest)
    return refuse_newer(db, version, diag);
  while (version < newest) {
    /* One step per transaction; re-read under the write lock, another
     * process may have migrated meanwhile. */
    err = db_tx_begin(db, diag);
    if (err)
      return err;
    err = db_read_schema_version(db, &version, diag);
    if (err)
      goto out_rollback;
    if (version > newest) {
      err = refuse_newer(db, version, diag);
      goto out_rollback;
    }
    if (version == newest) {
      db_tx_rollback(db);
      break;
    }
    if ((err = db->drv->exec_script(db, db->drv->migrations[version]))) {
      err = cordon_diag_set(diag, err, "%s: migration %d -> %d: %s", db->path, version, version + 1,
                            db->drv->errmsg(db));
      goto out_rollback;
    }
    struct db_st *st = NULL;
    err = db_stmt(db, Q_SET_SCHEMA_VERSION, &st, diag);
    if (err)
      goto out_rollback;
    int brc = DB_OK;
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

/* --- which database ------------------------------------------------------- */

static const char *default_url; /* cordon-server --db, for this process */

void server_db_set_default_url(const char *url) {
  default_url = url;
}

bool server_db_url_is_pg(const char *url) {
  return url && (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0);
}

/* The URL kept in STATE/db-url, or NULL (*out_url) when there is none. */
static int read_url_file(const char *state_dir, char **out_url, struct cordon_diag *diag) {
  char path[4096];
  *out_url = NULL;
  int n = snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_DB_URL_FILE);
  if (n < 0 || (size_t)n >= sizeof(path))
    return cordon_diag_set(diag, -ENAMETOOLONG, "state directory path too long");
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
  if (fd < 0)
    return errno == ENOENT ? 0 : cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  struct stat st;
  char buf[SERVER_DB_URL_MAX + 2];
  ssize_t got = -1;
  int err = 0;
  if (fstat(fd, &st) < 0)
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode) || (st.st_mode & 077))
    err =
        cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                        "%s must be a regular file that only its owner can read (chmod 600)", path);
  else if ((got = read(fd, buf, sizeof(buf) - 1)) < 0)
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  close(fd);
  if (err)
    return err;
  buf[got] = '\0';
  buf[strcspn(buf, "\r\n")] = '\0';
  if (!server_db_url_is_pg(buf) || strlen(buf) > SERVER_DB_URL_MAX)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                           "%s: not a postgresql:// URL of at most %d bytes", path,
                           SERVER_DB_URL_MAX);
  if (!(*out_url = strdup(buf)))
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  return 0;
}

int server_db_save_url(const char *state_dir, const char *url, struct cordon_diag *diag) {
  if (!server_db_url_is_pg(url) || strlen(url) > SERVER_DB_URL_MAX || strpbrk(url, "\r\n"))
    return cordon_diag_set(diag, -EINVAL,
                           "--db takes a postgresql:// URL of at most %d bytes (one line)",
                           SERVER_DB_URL_MAX);
  char path[4096];
  int n = snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_DB_URL_FILE);
  if (n < 0 || (size_t)n >= sizeof(path))
    return cordon_diag_set(diag, -ENAMETOOLONG, "state directory path too long");
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  size_t len = strlen(url);
  int err = 0;
  if (fchmod(fd, 0600) < 0 || write(fd, url, len) != (ssize_t)len || write(fd, "\n", 1) != 1 ||
      fsync(fd) < 0)
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  if (close(fd) < 0 && !err)
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  if (err)
    unlink(path);
  return err;
}

/* which driver, asked of the handle that chose it (db.c), so that no
 * table file is called back */
bool server_db_is_shared(const struct server_db *db) {
  return db && db->drv == &db_pg_driver;
}

int server_db_open_url(const char *state_dir, const char *url, unsigned flags,
                       struct server_db **out_db, struct cordon_diag *diag) {
  if (!state_dir || !out_db)
    return cordon_diag_set(diag, -EINVAL, "server_db_open: missing argument");
  if (sodium_init() < 0)
    return cordon_diag_set(diag, CORDON_E_CRYPTO, "libsodium failed to initialise");
  char *kept = NULL;
  int err = 0;
  if (!url && !(url = default_url)) {
    if ((err = read_url_file(state_dir, &kept, diag)))
      return err;
    url = kept;
  }
  if (url && !server_db_url_is_pg(url)) {
    free(kept);
    return cordon_diag_set(diag, -EINVAL, "the database URL must start with postgresql://");
  }
  struct server_db *db = calloc(1, sizeof(*db));
  if (!db) {
    free(kept);
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  }
  db->drv = url ? &db_pg_driver : &db_sqlite_driver;
  err = db->drv->open(db, state_dir, url, flags, diag);
  if (kept) {
    sodium_memzero(kept, strlen(kept)); /* it may hold a password */
    free(kept);
  }
  if (!err)
    err = db_migrate(db, diag);
  if (err) {
    server_db_close(db);
    return err;
  }
  *out_db = db;
  return 0;
}

int server_db_open(const char *state_dir, unsigned flags, struct server_db **out_db,
                   struct cordon_diag *diag) {
  return server_db_open_url(state_dir, NULL, flags, out_db, diag);
}

void server_db_close(struct server_db *db) {
  if (!db)
    return;
  for (size_t i = 0; i < Q_COUNT_; i++)
    if (db->stmts[i].ready || db->stmts[i].h)
      db->drv->finalize(&db->stmts[i]);
  if (db->h || db->pg) /* PostgreSQL: pg without h, a listener not connected yet */
    db->drv->close(db);
  free(db);
}

const char *server_db_backend(const struct server_db *db) {
  return db->drv->name;
}

int server_db_schema_version(struct server_db *db, int *out_version, struct cordon_diag *diag) {
  int v = 0; /* gcc -O3 cannot see that every failure returns nonzero */
  int err = db_read_schema_version(db, &v, diag);
  if (err)
    return err;
  /* a newer one than this binary knows: as many versions past the newest */
  *out_version = v > db->drv->schema_version
                     ? v - db->drv->schema_version + SERVER_DB_SCHEMA_VERSION
                     : db->drv->api_version[v];
  return 0;
}
