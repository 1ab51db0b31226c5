/* cordon-server persistent state: one SQLite database, STATE/cordon.db, or
 * a PostgreSQL database named by a postgresql:// URL (STATE/db-url, or
 * cordon-server --db): the same functions, the same invariants, over either
 * driver (server/db_internal.h).
 *
 * Invariants
 * - Every function that changes something has committed it (WAL,
 *   synchronous=FULL) before it returns 0: the caller may act on the change
 *   (send a ticket, answer a pairing proof) at once.
 * - Changes that must not be seen half-done are one transaction: pairing
 *   completion (code consumed + device added), a job's result (result + final
 *   state), each schema migration.
 * - Races are settled by the database, not by the caller: consuming a pairing code,
 *   a job transition and recording a result are single conditional UPDATEs;
 *   of two racing callers (threads, processes) exactly one gets 0.
 * - A handle is used by one thread at a time. Other processes (the
 *   commands, while the daemon runs) open their own handles; WAL and a 5 s
 *   busy timeout make that safe. On PostgreSQL a write transaction holds
 *   one database-wide advisory lock (SQLite's single writer) and waits at
 *   most the same 5 s for it (lock_timeout); single statements are settled
 *   by row locks, conditional UPDATEs re-checking their WHERE.
 * - Pairing-code secrets are never stored: only a code id (the public lookup
 *   part) and key = BLAKE2b-256("cordon-pair-code-v1" || code). The key is
 *   dropped from the row once the code is used or burned. Nothing here logs.
 *
 * Errors: every function returns 0 or a negative value and, when `diag` is
 * not NULL, fills it with a one-line detail (never a secret):
 *   -ENOENT      no such user / device / job / code (or no database without
 *                SERVER_DB_CREATE)
 *   -EEXIST      a user name or device public key that is already there
 *   -EINVAL      an argument out of range (name too long, bad level, JSON
 *                that is not an object, unknown state value)
 *   -EACCES      a pairing code that is not live: used, burned, expired or
 *                out of attempts (consume, fail, pair_complete)
 *   -EPERM       an illegal job transition (not an edge of the state graph);
 *                setting a revoked device online
 *   -ESTALE      a job transition whose expected from-state no longer holds
 *   -EALREADY    a job result already recorded (nothing changed); a device
 *                already revoked
 *   -EBUSY       the database stayed locked past the busy timeout
 *   -ENOMEM, -EIO, -ENOSPC, -EROFS   from SQLite
 *   CORDON_E_LIMIT            too many live pairing codes for the user
 *   CORDON_E_CONFIG_INVALID   the database's schema is newer than this binary
 *                             knows, or the file is not a cordon database,
 *                             or it is accessible by group or others
 *   CORDON_E_INTERNAL         anything else the database reports
 *   -EOPNOTSUPP  backup or restore of a PostgreSQL database (use pg_dump)
 *   -ECONNREFUSED, -EHOSTUNREACH ...  the PostgreSQL server cannot be reached
 *                (diag names the host, never the password)
 *
 * Output parameters (out_*) are written only on success. Structs with heap
 * members are released with their _release function (NULL-safe; the struct
 * may be released again afterwards). Times are Unix seconds, server clock.
 */
#ifndef CORDON_SERVER_DB_H
#define CORDON_SERVER_DB_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/id.h"
#include "core/manifest.h" /* enum sandbox_level */
#include "core/result.h"   /* RESULT_JSON_MAX */

#define SERVER_DB_FILE "cordon.db"
#define SERVER_DB_SCHEMA_VERSION 14 /* the newest schema this binary knows */
#define SERVER_DB_BUSY_TIMEOUT_MS 5000

#define SERVER_DB_NAME_MAX 64           /* bytes of a user or device name */
#define SERVER_DB_PLATFORM_MAX 16       /* bytes of a platform name */
#define SERVER_DB_CODE_MAX 64           /* bytes of an error code string */
#define SERVER_DB_FACTS_MAX (16 * 1024) /* bytes of a device's facts JSON */
#define SERVER_DB_ARGS_MAX (64 * 1024)  /* bytes of a job's args JSON */
/* bytes of a job's result JSON: the longest any valid manifest allows
 * (core/result.h, about 4.02 MiB), so every result an agent sends fits */
#define SERVER_DB_RESULT_MAX RESULT_JSON_MAX
#define SERVER_DB_PUBKEY_SIZE 32                 /* X25519 static public key */
#define SERVER_DB_HASH_SIZE 32                   /* package index hash (CPKG_HASH_SIZE) */
#define SERVER_DB_QUEUE_TTL_MAX (30 * 24 * 3600) /* seconds a job may wait for a device */

/* Pairing codes (docs/OPERATIONS.md, "Server state"): 200 bits in Crockford
 * base32 (0-9 a-z without i l o u), 8 groups of 5 joined by '-':
 *   "k7m2q-9xa0c-....."  the first 2 groups (50 bits) are the code id,
 *                        the other 6 (150 bits) the secret.
 * Input is normalised: case folded, '-' and spaces dropped, i/l -> 1, o -> 0. */
#define SERVER_DB_CODE_CHARS 40               /* base32 characters */
#define SERVER_DB_CODE_TEXT_SIZE (40 + 7 + 1) /* with the dashes and NUL */
#define SERVER_DB_CODE_ID_CHARS 10
#define SERVER_DB_CODE_ID_SIZE (SERVER_DB_CODE_ID_CHARS + 1)
#define SERVER_DB_CODE_KEY_SIZE 32
#define SERVER_DB_CODE_DOMAIN "cordon-pair-code-v1"
#define SERVER_DB_CODE_TTL_DEFAULT 600 /* seconds */
#define SERVER_DB_CODE_TTL_MAX (7 * 24 * 3600)
#define SERVER_DB_CODE_ATTEMPTS 5
#define SERVER_DB_CODE_LIVE_MAX 3 /* live, unexpired codes per user */

struct server_db;

/* --- opening -------------------------------------------------------------- */

enum server_db_open_flags {
  SERVER_DB_CREATE = 1u << 0, /* create STATE/cordon.db (0600) when missing */
};

/* Open STATE/cordon.db: WAL, synchronous=FULL, foreign keys, busy timeout,
 * then migrate the schema up to SERVER_DB_SCHEMA_VERSION (each step one
 * transaction). The state directory must exist. Without SERVER_DB_CREATE a
 * missing database is -ENOENT ("run cordon-server init"). */
int server_db_open(const char *state_dir, unsigned flags, struct server_db **out_db,
                   struct cordon_diag *diag);
void server_db_close(struct server_db *db);

/* PostgreSQL instead of SQLite: a URL postgresql://[user[:password]@]host
 * [:port]/dbname[?param=value...] (libpq's form; host may be a socket
 * directory, e.g. ?host=/run/postgresql). The database must exist; its
 * schema is made and migrated as SQLite's is. */
#define SERVER_DB_URL_FILE "db-url" /* STATE/db-url: the URL, one line, 0600 */
#define SERVER_DB_URL_MAX 1024
bool server_db_url_is_pg(const char *url);
/* Keep url as the state directory's database (a new STATE/db-url, 0600):
 * every later server_db_open of state_dir opens it. -EEXIST when there is
 * one, -EINVAL for a URL that is not postgresql://... */
int server_db_save_url(const char *state_dir, const char *url, struct cordon_diag *diag);
/* As server_db_open, on url when it is not NULL; else on the process's
 * default (server_db_set_default_url), else STATE/db-url when there is one,
 * else STATE/cordon.db. */
int server_db_open_url(const char *state_dir, const char *url, unsigned flags,
                       struct server_db **out_db, struct cordon_diag *diag);
/* The URL every server_db_open of this process uses (cordon-server run
 * --db); NULL: each state directory's own. The string must outlive the
 * opens. */
void server_db_set_default_url(const char *url);
/* "sqlite" or "postgresql". */
const char *server_db_backend(const struct server_db *db);

/* The schema version of the open database. */
int server_db_schema_version(struct server_db *db, int *out_version, struct cordon_diag *diag);

/* SQLite only (PostgreSQL: -EOPNOTSUPP; pg_dump and pg_restore do this).
 * Write a copy of the whole database to a new file at path (0600; -EEXIST
 * when path exists) with SQLite's online backup: one consistent snapshot,
 * taken while other handles (the daemon) go on reading and writing. On
 * failure nothing is left at path. */
int server_db_backup(struct server_db *db, const char *path, struct cordon_diag *diag);
/* Replace all of db's contents with the cordon database at path, then
 * migrate it up to SERVER_DB_SCHEMA_VERSION. Only while no daemon runs
 * (the caller holds the state lock, server/lock.h). CORDON_E_CONFIG_INVALID
 * when path is not a cordon database, or is newer than this binary. */
int server_db_restore(struct server_db *db, const char *path, struct cordon_diag *diag);

/* Tests only: make the handle's clock read `now` (0 restores the real one). */
void server_db_set_clock(struct server_db *db, int64_t now);
int64_t server_db_now(const struct server_db *db);

/* --- the daemon's clock (docs/OPERATIONS.md, "Clocks") -------------------
 *
 * What the database keeps as Unix seconds (deadlines, queue deadlines,
 * pairing codes' expiry, leases) is measured on one clock. Without
 * server_db_clock_follow, server_db_now reads the host's wall clock (the
 * commands). The daemon calls it once: from then on server_db_now follows
 * the monotonic clock from an anchor that server_db_clock_tick (once a
 * second) moves:
 *   SQLite: to the host's wall clock. A difference of less than
 *     SERVER_DB_CLOCK_STEP_MS is drift, followed. A larger one is a step
 *     (an NTP step, a clock set by hand, a resumed machine): the deadlines
 *     of live jobs, the queue deadlines and the expiry of live pairing
 *     codes move with it (they count down from when they were set), in one
 *     transaction, so that a step forward expires nothing early and a step
 *     back holds nothing longer; *out_step_ms says by how much (0: none).
 *   PostgreSQL: to the database's clock (clock_timestamp(), once per
 *     tick), the one every server of a cluster shares, so that a server
 *     whose own clock is off judges leases and deadlines as the others do.
 *     server_db_clock_skew_ms: the host's clock minus the database's.
 * A failed reading keeps the anchor (the monotonic clock goes on). */
#define SERVER_DB_CLOCK_STEP_MS 2000
void server_db_clock_follow(struct server_db *db);
int server_db_clock_tick(struct server_db *db, int64_t *out_step_ms, struct cordon_diag *diag);
int64_t server_db_clock_skew_ms(const struct server_db *db);

/* --- group commit (the daemon) ------------------------------------------ */

/* Without it, every function above and below commits itself. With it (the
 * daemon, server/jobs.c), the operations a caller brackets with
 * server_db_group_op_begin/_end share one transaction: the first opens it
 * (BEGIN IMMEDIATE), each runs in its own SAVEPOINT (an op that fails rolls
 * back only itself), and server_db_group_commit commits them all with one
 * sync. So a function that returns 0 inside an op has NOT committed: the
 * caller must wait for the group's end before acting on the change.
 *
 * What is not bracketed keeps the contract of the header: a write outside
 * an op while the group is open (a statement that changes something, or a
 * transaction of its own) first commits the group, then commits itself.
 * Reads see the group's writes (one connection).
 *
 * ended(arg, err) is called once each time the group's transaction ends:
 * err 0 when it was committed (durable), else the error of the commit, or
 * of the statement under which SQLite rolled the whole transaction back
 * (disk full, I/O): then none of its ops happened. It is called from inside
 * the call that ended the group (an op_begin that found the group full, a
 * write outside an op, server_db_group_commit, server_db_group_settle):
 * it must only take note.
 * A group holds at most SERVER_DB_GROUP_OPS_MAX ops and stays open at most
 * SERVER_DB_GROUP_MS_MAX: the op_begin after that commits it first. */
#define SERVER_DB_GROUP_OPS_MAX 512
#define SERVER_DB_GROUP_MS_MAX 20
typedef void server_db_group_fn(void *arg, int err);
void server_db_group_enable(struct server_db *db, server_db_group_fn *ended, void *arg);
/* Start an op (the group's transaction first, when none is open). Ops
 * nest. 0, or an error (then the op did not start: do not end it). */
int server_db_group_op_begin(struct server_db *db, struct cordon_diag *diag);
/* End the op: err 0 keeps its changes in the group, else they are rolled
 * back. Returns err, or the error that undid the op anyway (the group was
 * rolled back under it). */
int server_db_group_op_end(struct server_db *db, int err);
/* Commit the open group (nothing when none is open): 0 or the error, both
 * also given to ended.
 *
 * A COMMIT whose answer is lost with the connection (PostgreSQL: the
 * server restarted, a failover, a cut) may have been committed or not:
 * the group is then in doubt, and ended is not called until the database
 * says which (asked by the transaction's id on the connection made again,
 * at once, then by every server_db_group_settle and op_begin; an op_begin
 * fails with -EIO meanwhile, for what waits for the group in doubt would
 * be taken for the next one's). Its -EIO says so. */
int server_db_group_commit(struct server_db *db, struct cordon_diag *diag);
/* Whether the last group is in doubt; ask again: 0 once its end is known
 * (ended was called, from in here), -EAGAIN while it is not. */
bool server_db_group_in_doubt(const struct server_db *db);
int server_db_group_settle(struct server_db *db);
/* Whether a group transaction is open (its ops not yet durable). */
bool server_db_group_pending(const struct server_db *db);
/* Write transactions this handle committed (each one sync, or none for a
 * relaxed one): for the metrics and the tests. */
uint64_t server_db_commit_count(const struct server_db *db);

/* --- users ---------------------------------------------------------------- */

struct server_db_user {
  int64_t id;
  char name[SERVER_DB_NAME_MAX + 1];
  int64_t created;
  bool require_approval; /* its new devices wait, pending, for device approve */
  bool removed;          /* user remove: kept for the jobs' history, nothing else */
};

struct server_db_user_list {
  struct server_db_user *items;
  size_t count;
};

/* name: 1..64 bytes of [A-Za-z0-9._-], starting with a letter or digit. */
int server_db_user_add(struct server_db *db, const char *name, int64_t *out_id,
                       struct cordon_diag *diag);
int server_db_user_get(struct server_db *db, int64_t id, struct server_db_user *out_user,
                       struct cordon_diag *diag);
int server_db_user_get_by_name(struct server_db *db, const char *name,
                               struct server_db_user *out_user, struct cordon_diag *diag);
/* Whether the user's newly paired devices wait for approval. -ENOENT for
 * an unknown or removed user. */
int server_db_user_set_require_approval(struct server_db *db, int64_t id, bool on,
                                        struct cordon_diag *diag);
/* Remove a user, in one transaction: every device of it revoked, every live
 * code burned, the user marked removed (its row and jobs stay; its name is
 * not reused). -ENOENT unknown, -EALREADY already removed. */
int server_db_user_remove(struct server_db *db, int64_t id, struct cordon_diag *diag);
/* All users, by id. */
int server_db_user_list(struct server_db *db, struct server_db_user_list *out_list,
                        struct cordon_diag *diag);
void server_db_user_list_release(struct server_db_user_list *list);

/* --- pairing codes -------------------------------------------------------- */

enum server_db_code_state {
  SERVER_DB_CODE_LIVE = 0,
  SERVER_DB_CODE_USED = 1,
  SERVER_DB_CODE_BURNED = 2,
};

struct server_db_code {
  char id[SERVER_DB_CODE_ID_SIZE];
  int64_t user_id;
  uint8_t key[SERVER_DB_CODE_KEY_SIZE]; /* SECRET: all zero unless live; wipe after use */
  int attempts_left;
  enum server_db_code_state state;
  bool expired; /* expires <= now */
  bool usable;  /* live && attempts_left > 0 && !expired */
  int64_t created, expires;
  char last_failure[SERVER_DB_CODE_MAX + 1]; /* why its last attempt failed, "" if none */
  int64_t last_failure_at;                   /* 0 = never */
};

/* Mint a code for user_id, valid ttl_s seconds (1..SERVER_DB_CODE_TTL_MAX):
 * writes the code text (the only time it exists outside the caller) and its
 * expiry. CORDON_E_LIMIT when the user already has SERVER_DB_CODE_LIVE_MAX
 * usable codes. */
int server_db_code_mint(struct server_db *db, int64_t user_id, int64_t ttl_s,
                        char out_code[SERVER_DB_CODE_TEXT_SIZE], int64_t *out_expires,
                        struct cordon_diag *diag);

/* Pure: normalise typed code text and derive its id and proof key. -EINVAL
 * when it is not 40 base32 characters after normalisation. The same function
 * the agent needs to build its proof (a candidate for proto/). */
int server_db_code_derive(const char *code, char out_id[SERVER_DB_CODE_ID_SIZE],
                          uint8_t out_key[SERVER_DB_CODE_KEY_SIZE]);

/* Look a code up by id, whatever its state. Wipe out_code->key after use
 * (server_db_code_wipe). */
int server_db_code_lookup(struct server_db *db, const char *code_id,
                          struct server_db_code *out_code, struct cordon_diag *diag);
void server_db_code_wipe(struct server_db_code *code);

/* A failed proof: one attempt less, burned at 0 (one UPDATE). -EACCES when
 * the code is not live. out_attempts_left may be NULL. */
int server_db_code_fail(struct server_db *db, const char *code_id, int *out_attempts_left,
                        struct cordon_diag *diag);

/* Every code (of user_id, or all when 0), oldest first; keys are not read. */
struct server_db_code_info {
  char id[SERVER_DB_CODE_ID_SIZE];
  int64_t user_id;
  char user[SERVER_DB_NAME_MAX + 1];
  int attempts_left;
  enum server_db_code_state state;
  bool expired;
  int64_t created, expires;
  char last_failure[SERVER_DB_CODE_MAX + 1];
  int64_t last_failure_at;
};
struct server_db_code_list {
  struct server_db_code_info *items;
  size_t count;
};
int server_db_code_list(struct server_db *db, int64_t user_id, struct server_db_code_list *out,
                        struct cordon_diag *diag);
void server_db_code_list_release(struct server_db_code_list *list);
/* A live code is burned (its key dropped, last_failure "revoked").
 * -ENOENT unknown, -EALREADY not live. */
int server_db_code_revoke(struct server_db *db, const char *code_id, struct cordon_diag *diag);

/* Note why an attempt with the code failed (a reason label such as
 * "bad_proof", "code_expired"; the server's own, never the agent's) and
 * when. -ENOENT for an unknown code. */
int server_db_code_note_failure(struct server_db *db, const char *code_id, const char *reason,
                                struct cordon_diag *diag);

/* Consume a usable code (state live, attempts left, not expired) in one
 * conditional UPDATE: of racing consumers exactly one gets 0, the others
 * -EACCES. Writes the minting user. Prefer server_db_pair_complete, which
 * also adds the device in the same transaction. */
int server_db_code_consume(struct server_db *db, const char *code_id, int64_t *out_user_id,
                           struct cordon_diag *diag);

/* --- labels --------------------------------------------------------------- */

/* A device's labels, set by the operator (`device label`), and a job's
 * constraints (`dispatch --where`), which every label of the job must match
 * exactly. A label is KEY=VALUE: KEY 1..63 bytes of [a-z0-9._-] starting
 * with a letter or digit, VALUE 1..63 bytes of [A-Za-z0-9._-]. At most
 * SERVER_DB_LABELS_MAX per device and per job; keys are unique. */
#define SERVER_DB_LABEL_MAX 63
#define SERVER_DB_LABELS_MAX 32

struct server_db_label {
  char key[SERVER_DB_LABEL_MAX + 1];
  char value[SERVER_DB_LABEL_MAX + 1];
};

struct server_db_labels {
  struct server_db_label items[SERVER_DB_LABELS_MAX]; /* sorted by key */
  size_t count;
};

/* Pure: whether key is a label key. */
bool server_db_label_key_valid(const char *key);
/* Pure: parse "KEY=VALUE". -EINVAL with a one-line diag naming the text. */
int server_db_label_parse(const char *text, struct server_db_label *out_label,
                          struct cordon_diag *diag);
/* Pure: add or replace label in labels, kept sorted. -EINVAL when it is not
 * valid, CORDON_E_LIMIT when labels is full. */
int server_db_labels_put(struct server_db_labels *labels, const struct server_db_label *label,
                         struct cordon_diag *diag);
/* Pure: the value of key, NULL when absent. */
const char *server_db_labels_get(const struct server_db_labels *labels, const char *key);
/* Pure: every label of want is in have with the same value (true when want
 * is empty). out_missing (may be NULL) is the first label of want that is
 * not, when there is one. */
bool server_db_labels_match(const struct server_db_labels *have,
                            const struct server_db_labels *want,
                            const struct server_db_label **out_missing);
/* {"key": "value", ...}, a new reference (NULL when out of memory). */
json_t *server_db_labels_to_json(const struct server_db_labels *labels);
/* "k=v,k=v" (or "" when empty), cut to fit size. */
void server_db_labels_format(const struct server_db_labels *labels, char *buf, size_t size);

/* --- devices -------------------------------------------------------------- */

enum server_db_device_state {
  SERVER_DB_DEVICE_ACTIVE = 0,
  SERVER_DB_DEVICE_REVOKED = 1, /* terminal */
  SERVER_DB_DEVICE_PENDING = 2, /* paired, waiting for device approve: gets no jobs */
};

/* What a device says about itself (pairing, then every hello). NULL strings
 * are stored as NULL; facts_json, when given, must be a JSON object. */
struct server_db_device_info {
  const char *name;     /* required for add: 1..64 bytes UTF-8, no controls */
  const char *platform; /* [a-z0-9_-]{1,16} or NULL */
  bool has_level;       /* best_level valid */
  enum sandbox_level best_level;
  const char *downgrade_reason; /* stable code string or NULL */
  const char *facts_json;       /* <= SERVER_DB_FACTS_MAX, or NULL */
  int max_jobs;                 /* 0 = unknown, else 1..1024 */
  const char *address;          /* where it connected from; NULL keeps the last one */
  bool pending;                 /* add: wait for approval (also when its user requires it) */
};

struct server_db_device {
  char id[CORDON_ID_HEX_SIZE];
  int64_t user_id;
  char owner[SERVER_DB_NAME_MAX + 1]; /* the user's name */
  char name[SERVER_DB_NAME_MAX + 1];
  char platform[SERVER_DB_PLATFORM_MAX + 1]; /* "" when unknown */
  uint8_t public_key[SERVER_DB_PUBKEY_SIZE];
  bool has_level;
  enum sandbox_level best_level;
  char downgrade_reason[SERVER_DB_CODE_MAX + 1]; /* "" when none */
  char *facts_json;                              /* heap, NULL when none */
  int max_jobs;
  enum server_db_device_state state;
  bool online;
  int64_t last_seen; /* 0 = never */
  int64_t created;
  struct server_db_labels labels;
  char address[64]; /* where it last connected from, "" when never */
};

struct server_db_device_list {
  struct server_db_device *items;
  size_t count;
};

void server_db_device_release(struct server_db_device *dev);
void server_db_device_list_release(struct server_db_device_list *list);

/* Add an active device owned by user_id with a new random id. -EEXIST if the
 * public key is already known (whatever that device's state). Names are
 * unique per user among devices that are not revoked: a name that is taken
 * gets "-2", "-3", ... appended (the base cut to fit 64 bytes); read the
 * device back for the name it got. */
int server_db_device_add(struct server_db *db, int64_t user_id,
                         const uint8_t public_key[SERVER_DB_PUBKEY_SIZE],
                         const struct server_db_device_info *info, char out_id[CORDON_ID_HEX_SIZE],
                         struct cordon_diag *diag);

/* Pairing completion in one transaction: consume the code (as
 * server_db_code_consume) and add the device owned by the code's user. If
 * anything fails nothing changed: the code is still live (or -EACCES: it was
 * not usable). out_user_id may be NULL. */
int server_db_pair_complete(struct server_db *db, const char *code_id,
                            const uint8_t public_key[SERVER_DB_PUBKEY_SIZE],
                            const struct server_db_device_info *info,
                            char out_device_id[CORDON_ID_HEX_SIZE], int64_t *out_user_id,
                            struct cordon_diag *diag);

int server_db_device_get(struct server_db *db, const char *id, struct server_db_device *out_dev,
                         struct cordon_diag *diag);
int server_db_device_get_by_key(struct server_db *db,
                                const uint8_t public_key[SERVER_DB_PUBKEY_SIZE],
                                struct server_db_device *out_dev, struct cordon_diag *diag);

/* A device named by what an operator typed: its whole id, its name (of
 * user_id's devices when user_id is not 0; devices not revoked first, a
 * revoked one only when no other has the name) or a unique prefix of its
 * id. -ENOENT when nothing matches, -ENOTUNIQ when several do (diag names
 * them: "id (owner)", at most 8). */
int server_db_device_resolve(struct server_db *db, const char *text, int64_t user_id,
                             struct server_db_device *out_dev, struct cordon_diag *diag);

/* A pending device becomes active. -ENOENT unknown, -EPERM revoked,
 * -EALREADY not pending. */
int server_db_device_approve(struct server_db *db, const char *id, struct cordon_diag *diag);

/* Rename a device (not revoked). -EEXIST when another device of its user
 * that is not revoked has the name, -EINVAL for a name that is not valid
 * (as for add), -ENOENT unknown, -EPERM revoked. */
int server_db_device_rename(struct server_db *db, const char *id, const char *name,
                            struct cordon_diag *diag);

/* Online flag and last_seen = now (either way). Works on revoked devices
 * only to set them offline. */
int server_db_device_set_online(struct server_db *db, const char *id, bool online,
                                struct cordon_diag *diag);
/* last_seen = now (a ping, any message). */
int server_db_device_touch(struct server_db *db, const char *id, struct cordon_diag *diag);
/* Replace what the device reported (platform, level, reason, facts,
 * max_jobs) from a hello; info->name NULL keeps the name. */
int server_db_device_update_info(struct server_db *db, const char *id,
                                 const struct server_db_device_info *info,
                                 struct cordon_diag *diag);
/* Every device offline (daemon start). */
int server_db_device_set_all_offline(struct server_db *db, struct cordon_diag *diag);
/* Mark revoked and offline. Terminal: nothing here makes it active again.
 * -EALREADY when it already was revoked, -ENOENT when unknown. The daemon
 * must also close the device's live session (the database alone cannot). */
int server_db_device_revoke(struct server_db *db, const char *id, struct cordon_diag *diag);

/* Set the labels of `set` (adding or replacing) and remove the keys of
 * `remove` (a key that is not there is no error), in one transaction.
 * -ENOENT for an unknown device, -EINVAL for a label or key that is not
 * valid, CORDON_E_LIMIT when the device would have more than
 * SERVER_DB_LABELS_MAX labels. out_labels (may be NULL): the labels after. */
int server_db_device_label(struct server_db *db, const char *id, const struct server_db_label *set,
                           size_t n_set, const char *const *remove, size_t n_remove,
                           struct server_db_labels *out_labels, struct cordon_diag *diag);

/* The device's receipt signing key (Ed25519 public, docs/protocol/receipt.md).
 * -ENOENT for an unknown device, -ENODATA when it registered none. */
#define SERVER_DB_SIGN_KEY_SIZE 32
int server_db_device_sign_key(struct server_db *db, const char *id,
                              uint8_t out_key[SERVER_DB_SIGN_KEY_SIZE], struct cordon_diag *diag);
/* Register the device's signing key once: 0 when stored now, -EALREADY when
 * that same key is registered, -EEXIST when another one is (it stays). */
int server_db_device_register_sign_key(struct server_db *db, const char *id,
                                       const uint8_t key[SERVER_DB_SIGN_KEY_SIZE],
                                       struct cordon_diag *diag);

/* How many devices are active and revoked (for metrics): out_counts indexed
 * by enum server_db_device_state; pending ones count as active. */
int server_db_device_count_by_state(struct server_db *db, size_t out_counts[2],
                                    struct cordon_diag *diag);

/* user_id 0 = all users; ordered by owner, then name. */
int server_db_device_list(struct server_db *db, int64_t user_id,
                          struct server_db_device_list *out_list, struct cordon_diag *diag);

/* --- jobs ----------------------------------------------------------------- */

/* Graph: queued -> sent -> running -> done | failed; any non-final state ->
 * expired | cancelled | failed. done, failed, expired, cancelled are final. */
enum server_db_job_state {
  SERVER_DB_JOB_QUEUED = 0,
  SERVER_DB_JOB_SENT,
  SERVER_DB_JOB_RUNNING,
  SERVER_DB_JOB_DONE,
  SERVER_DB_JOB_FAILED,
  SERVER_DB_JOB_EXPIRED,
  SERVER_DB_JOB_CANCELLED,
};

const char *server_db_job_state_name(enum server_db_job_state s); /* "queued"...; NULL if bad */
int server_db_job_state_parse(const char *name, enum server_db_job_state *out_state);
bool server_db_job_state_is_final(enum server_db_job_state s);
/* Whether from -> to is an edge of the graph above. */
bool server_db_job_transition_is_legal(enum server_db_job_state from, enum server_db_job_state to);

/* A job waits in the queue when queue_expires is not 0: it stays `queued`
 * until server_db_job_send gives it to a device (its own device_id when one
 * was named, else any device of the user whose labels match `where`), or
 * until queue_expires passes. A queued job with queue_expires 0 is being
 * dispatched right now; its deadline decides it. */
struct server_db_job_new {
  int64_t user_id;
  const char *device_id;                /* NULL when no device was chosen or named */
  const uint8_t *package_hash;          /* SERVER_DB_HASH_SIZE bytes */
  const char *args_json;                /* a JSON array; NULL = [] */
  int64_t deadline;                     /* absolute; 0 = none */
  int64_t queue_expires;                /* absolute; 0 = not queued */
  const struct server_db_labels *where; /* NULL or empty: no constraint */
  const char *package_name;             /* the manifest's name and version, or NULL */
  const char *package_version;
  const char *key; /* NULL, or the idempotency key (1..SERVER_DB_KEY_MAX bytes of
                      printable ASCII): one job per user and key */
  /* NULL: the job is added queued with a new id (db_new_job_id). Else it is added
   * already sent to device_id (required, as is a deadline) with this ticket
   * (1..SERVER_DB_TICKET_MAX bytes), under id (CORDON_ID_HEX_LEN hex digits
   * the caller drew at random: the ticket names the job) — what
   * server_db_job_add then server_db_job_send_with_ticket would leave, in
   * one statement. */
  const uint8_t *ticket;
  size_t ticket_len;
  const char *id;
};

struct server_db_job {
  char id[CORDON_ID_HEX_SIZE];
  int64_t user_id;
  char user[SERVER_DB_NAME_MAX + 1];
  char device_id[CORDON_ID_HEX_SIZE]; /* "" when none */
  uint8_t package_hash[SERVER_DB_HASH_SIZE];
  char *args_json; /* heap, never NULL after a successful get */
  enum server_db_job_state state;
  char error[SERVER_DB_CODE_MAX + 1]; /* stable error code, "" when none */
  char *result_json;                  /* heap, NULL until a result was recorded */
  int64_t created, updated, deadline;
  int64_t queue_expires;                        /* 0 = never waited in the queue */
  struct server_db_labels where;                /* the constraints its device must meet */
  char package_name[SERVER_DB_NAME_MAX + 1];    /* "" when not kept (older jobs) */
  char package_version[SERVER_DB_NAME_MAX + 1]; /* "" when not kept */
  char device_name[SERVER_DB_NAME_MAX + 1];     /* its device's name, "" when none */
};

/* Which jobs server_db_job_list_filtered lists. */
struct server_db_job_filter {
  int64_t user_id;       /* 0 = every user */
  const char *device_id; /* NULL = every device */
  bool has_state;        /* state valid */
  enum server_db_job_state state;
  int64_t since; /* created at or after; 0 = always */
  size_t limit;  /* 0 = no limit */
};

struct server_db_job_list {
  struct server_db_job *items;
  size_t count;
};

void server_db_job_release(struct server_db_job *job);
void server_db_job_list_release(struct server_db_job_list *list);

/* Add a queued job with a new id: 6 bytes of the host's ms clock, then 80
 * random bits (cordon_id_ordered), or a sent one (ticket above). -EINVAL
 * for a bad field, -ENOENT for no such user or device. */
int server_db_job_add(struct server_db *db, const struct server_db_job_new *job,
                      char out_id[CORDON_ID_HEX_SIZE], struct cordon_diag *diag);
/* (server_db_job_add: -EEXIST when the user has a job with that key.) */
#define SERVER_DB_KEY_MAX 128
/* Is key a valid idempotency key (1..SERVER_DB_KEY_MAX bytes, 0x21..0x7e)? */
bool server_db_job_key_valid(const char *key);
/* The job user_id dispatched with key into *out_job (release it): 0,
 * -ENOENT when there is none. */
int server_db_job_get_by_key(struct server_db *db, int64_t user_id, const char *key,
                             struct server_db_job *out_job, struct cordon_diag *diag);

/* from -> to in one conditional UPDATE. error_code (a stable code string,
 * may be NULL) is stored when given. -EPERM if not an edge, -ESTALE if the
 * job is no longer in `from`, -ENOENT if unknown. */
int server_db_job_transition(struct server_db *db, const char *id, enum server_db_job_state from,
                             enum server_db_job_state to, const char *error_code,
                             struct cordon_diag *diag);

/* A queued job goes to device_id: queued -> sent in one conditional UPDATE
 * that also sets the job's device and deadline. -ESTALE when the job is no
 * longer queued (cancelled, expired meanwhile), -EPERM when it waits for
 * another device, -ENOENT when unknown. */
int server_db_job_send(struct server_db *db, const char *id, const char *device_id,
                       int64_t deadline, struct cordon_diag *diag);

/* Record the §5 result of a job, once per job id, from device_id (the job's
 * device; another device gets -ENOENT). result_json must be a JSON object.
 * One UPDATE: the result is stored and, if the job is sent or running, it
 * becomes `final` (SERVER_DB_JOB_DONE or SERVER_DB_JOB_FAILED, error_code
 * stored with it); a job that already reached a final state (cancelled,
 * expired) keeps its state and gets the result. A queued job is -ESTALE. A
 * second result for the same job: -EALREADY, nothing changed. out_state (may
 * be NULL) is the job's state afterwards. */
int server_db_job_record_result(struct server_db *db, const char *id, const char *device_id,
                                enum server_db_job_state final, const char *error_code,
                                const char *result_json, enum server_db_job_state *out_state,
                                struct cordon_diag *diag);

/* As server_db_job_record_result, storing the job's receipt with it in the
 * same UPDATE: receipt (1..SERVER_DB_RECEIPT_MAX bytes) is the device key
 * (32) || its signature (64) || the encoded receipt (docs/protocol/receipt.md). */
#define SERVER_DB_RECEIPT_MAX 1024
int server_db_job_record_signed_result(struct server_db *db, const char *id, const char *device_id,
                                       enum server_db_job_state final, const char *error_code,
                                       const char *result_json, const uint8_t *receipt,
                                       size_t receipt_len, enum server_db_job_state *out_state,
                                       struct cordon_diag *diag);
/* The same with the result as a JSON object (borrowed), which this writes
 * compactly itself: its text needs no parsing to be checked. -EINVAL when
 * it is not an object; -E2BIG, nothing written, when its text is longer
 * than max (0: SERVER_DB_RESULT_MAX; a larger max is SERVER_DB_RESULT_MAX). */
int server_db_job_record_signed_result_obj(struct server_db *db, const char *id,
                                           const char *device_id, enum server_db_job_state final,
                                           const char *error_code, const json_t *result, size_t max,
                                           const uint8_t *receipt, size_t receipt_len,
                                           enum server_db_job_state *out_state,
                                           struct cordon_diag *diag);
/* The ticket body a queued job is about to be sent with (set before
 * server_db_job_send; at most SERVER_DB_TICKET_MAX bytes). -ESTALE when the
 * job is not queued. */
#define SERVER_DB_TICKET_MAX 4096
int server_db_job_set_ticket(struct server_db *db, const char *id, const uint8_t *ticket,
                             size_t len, struct cordon_diag *diag);
/* server_db_job_set_ticket then server_db_job_send in one transaction: one
 * durable write (docs/ARCHITECTURE.md, "Durable writes"); nothing changes
 * when either fails. */
int server_db_job_send_with_ticket(struct server_db *db, const char *id, const char *device_id,
                                   int64_t deadline, const uint8_t *ticket, size_t len,
                                   struct cordon_diag *diag);
/* Read a job's ticket body or stored receipt into out (cap bytes). -ENOENT
 * for an unknown job, -ENODATA when it has none, -ENOBUFS when cap is too
 * small. */
int server_db_job_ticket(struct server_db *db, const char *id, uint8_t *out, size_t cap,
                         size_t *out_len, struct cordon_diag *diag);
int server_db_job_receipt(struct server_db *db, const char *id, uint8_t *out, size_t cap,
                          size_t *out_len, struct cordon_diag *diag);

int server_db_job_get(struct server_db *db, const char *id, struct server_db_job *out_job,
                      struct cordon_diag *diag);
/* The job as one JSON object, the shape `cordon-server job ID --json` prints
 * and a dispatch --wait reply carries: {"id", "user", "device" (null when
 * none), "state", "error" (the stable code, null when none), "result" (the
 * stored result object, null when none or unreadable)}. New reference;
 * NULL when out of memory. */
json_t *server_db_job_to_json(const struct server_db_job *job);
/* Its "result" alone: a new reference, JSON null when there is none. */
json_t *server_db_job_result_to_json(const struct server_db_job *job);
/* The jobs that pass every filter, newest first. */
int server_db_job_list_filtered(struct server_db *db, const struct server_db_job_filter *filter,
                                struct server_db_job_list *out_list, struct cordon_diag *diag);
/* user_id 0 = all; newest first; at most `limit` (0 = no limit). */
int server_db_job_list(struct server_db *db, int64_t user_id, size_t limit,
                       struct server_db_job_list *out_list, struct cordon_diag *diag);
/* Non-final jobs of a device, oldest first (agent_restarted / device_lost). */
int server_db_job_list_active_on_device(struct server_db *db, const char *device_id,
                                        struct server_db_job_list *out_list,
                                        struct cordon_diag *diag);
/* Non-final jobs whose deadline (non-zero) is <= now, oldest first. */
int server_db_job_list_overdue(struct server_db *db, struct server_db_job_list *out_list,
                               struct cordon_diag *diag);
/* Jobs waiting in the queue (state queued, queue_expires set), oldest first. */
int server_db_job_list_queued(struct server_db *db, struct server_db_job_list *out_list,
                              struct cordon_diag *diag);
/* Those of them whose queue_expires is <= now, oldest first. */
int server_db_job_list_queue_expired(struct server_db *db, struct server_db_job_list *out_list,
                                     struct cordon_diag *diag);
/* How many jobs are in each state (for metrics): out_counts indexed by enum
 * server_db_job_state. */
#define SERVER_DB_JOB_STATE_COUNT 7
int server_db_job_count_by_state(struct server_db *db, size_t out_counts[SERVER_DB_JOB_STATE_COUNT],
                                 struct cordon_diag *diag);
/* The same for queued, sent and running only (the others 0): an index
 * range each, cheap however long the history is. */
int server_db_job_count_live(struct server_db *db, size_t out_counts[SERVER_DB_JOB_STATE_COUNT],
                             struct cordon_diag *diag);
/* Number of sent or running jobs on a device (its concurrency in use). */
int server_db_job_count_in_flight(struct server_db *db, const char *device_id, size_t *out_count,
                                  struct cordon_diag *diag);

/* ---- a cluster's device sessions and queued packages (db_sessions.c) ----
 *
 * Several `cordon-server run` processes on one PostgreSQL database each
 * have an instance id (server/cluster.h). device_sessions holds, per device,
 * the instance and session id of its newest live session and the lease
 * (Unix seconds) its instance keeps renewing; job_packages the bytes of
 * queued jobs' packages, so that the server a device connects to can send
 * them: one row for a package of at most SERVER_DB_PACKAGE_STORE_MAX bytes
 * (what servers before schema 12 read too), job_package_parts rows of
 * SERVER_DB_PACKAGE_PART bytes for a larger one. With SQLite (one server)
 * none of these tables is used. */

#define SERVER_DB_PACKAGE_STORE_MAX (64u << 20) /* bytes of a package kept in job_packages */
#define SERVER_DB_PACKAGE_PART (8u << 20)       /* bytes per job_package_parts row */
#define SERVER_DB_PACKAGE_MAX (16ull << 30)     /* bytes of a package read back, at most */

struct server_db_session_row {
  char device_id[CORDON_ID_HEX_SIZE];
  char session_id[CORDON_ID_HEX_SIZE];
  char job_id[CORDON_ID_HEX_SIZE]; /* server_db_session_list_cancelled only */
};
struct server_db_session_rows {
  struct server_db_session_row *items; /* heap */
  size_t count;
};
void server_db_session_rows_release(struct server_db_session_rows *rows);

/* SQLite: the WAL's checkpoints from now on run on a thread of this
 * handle's own, with its own connection, rather than in the COMMIT that
 * filled the WAL (the daemon's loop). Stopped by server_db_close. 0 (also
 * on PostgreSQL, which has none), or an error: then they stay in COMMIT. */
int server_db_checkpoint_behind(struct server_db *db, struct cordon_diag *diag);

/* Whether the backend is shared by several servers (PostgreSQL). */
bool server_db_is_shared(const struct server_db *db);
/* The device's live session is (instance, session_id) until lease_expires:
 * the row is taken whoever held it. */
int server_db_session_claim(struct server_db *db, const char *device_id, const char *instance,
                            const char *session_id, int64_t lease_expires,
                            struct cordon_diag *diag);
/* The row goes if it is still (instance, session_id): 0, or -ENOENT when
 * another session (here or elsewhere) holds it or it is gone. */
int server_db_session_release(struct server_db *db, const char *device_id, const char *instance,
                              const char *session_id, struct cordon_diag *diag);
/* Every row of instance: lease_expires. *out_count: the rows it still has. */
int server_db_session_renew(struct server_db *db, const char *instance, int64_t lease_expires,
                            size_t *out_count, struct cordon_diag *diag);
/* The rows instance holds. */
int server_db_session_list(struct server_db *db, const char *instance,
                           struct server_db_session_rows *out, struct cordon_diag *diag);
/* The rows instance holds of devices revoked since (their sessions must
 * close). */
int server_db_session_list_revoked(struct server_db *db, const char *instance,
                                   struct server_db_session_rows *out, struct cordon_diag *diag);
/* Jobs cancelled at or after since (Unix seconds), without a result yet, on
 * devices instance holds: the agent must be told (the cancel may have come
 * through another instance). */
int server_db_session_list_cancelled(struct server_db *db, const char *instance, int64_t since,
                                     struct server_db_session_rows *out, struct cordon_diag *diag);
/* The device's row: its instance, session id (each CORDON_ID_HEX_SIZE) and
 * lease; -ENOENT when it has none. Any out may be NULL. */
int server_db_session_get(struct server_db *db, const char *device_id, char *out_instance,
                          char *out_session_id, int64_t *out_lease_expires,
                          struct cordon_diag *diag);
/* Devices whose row's lease has passed go offline and their rows go; with
 * at_start, also every device online without a live lease (left so by a
 * server that died before any lease). Conditional statements: safe with
 * several servers running it. */
int server_db_session_expire(struct server_db *db, bool at_start, struct cordon_diag *diag);
/* Every row goes (a single server's start: none of them is live). */
int server_db_session_clear(struct server_db *db, struct cordon_diag *diag);
/* Keep the bytes of queued job id's package (at most
 * SERVER_DB_PACKAGE_STORE_MAX). A second put of the same job does nothing. */
int server_db_job_package_put(struct server_db *db, const char *job_id, const void *bytes,
                              size_t len, struct cordon_diag *diag);
/* The package of job id into *out (heap, free()): -ENOENT when none. */
int server_db_job_package_get(struct server_db *db, const char *job_id, uint8_t **out,
                              size_t *out_len, struct cordon_diag *diag);
/* Keep queued job id's package, the size bytes of fd from its start
 * (pread: fd's offset stays): in job_packages when it fits, else in parts,
 * every part in one transaction (all or none; inside a group op, a part of
 * it). A second store of the same job adds nothing. -EFBIG above
 * SERVER_DB_PACKAGE_MAX. */
int server_db_job_package_store(struct server_db *db, const char *job_id, int fd, uint64_t size,
                                struct cordon_diag *diag);
/* Write job id's package into fd (at its offset, with write) from
 * job_packages, else from its parts in order: 0 with *out_size, -ENOENT
 * when the database has none, -EFBIG when the parts pass
 * SERVER_DB_PACKAGE_MAX (nothing more is written then), else the error. */
int server_db_job_package_load(struct server_db *db, const char *job_id, int fd, uint64_t *out_size,
                               struct cordon_diag *diag);
/* The packages (rows and parts) of jobs no longer queued go. */
int server_db_job_package_purge(struct server_db *db, struct cordon_diag *diag);

/* PostgreSQL's LISTEN/NOTIFY on the channel SERVER_DB_QUEUE_CHANNEL: a job
 * was queued. server_db_queue_listen makes db (a handle of its own, used
 * for nothing else) listen, with *out_fd the socket to poll for reading;
 * server_db_queue_notifications reads what arrived: how many (0 or more),
 * or a negative error when the connection broke (listen on a new handle).
 * server_db_queue_notify tells every listener. -EOPNOTSUPP on SQLite
 * (notify: 0, nothing to tell). */
#define SERVER_DB_QUEUE_CHANNEL "cordon_queue"
/* Such a handle on db's database, returned at once, its connection not
 * made yet (-EOPNOTSUPP on SQLite): it is made as a broken connection is
 * made again, never blocking for long — each server_db_queue_listen and
 * server_db_events_listen on it takes the attempt a step further, waiting
 * 100 ms at most per attempt in all; an attempt older than connect_timeout
 * is dropped, the next starts no sooner than 0.5 s later, doubling to 5 s.
 * Until it is made they fail: -EINPROGRESS while an attempt runs, -EIO
 * after a failed one (diag: why). It logs nothing of its connection. */
int server_db_listener_open(const struct server_db *db, struct server_db **out_db,
                            struct cordon_diag *diag);
int server_db_queue_listen(struct server_db *db, int *out_fd, struct cordon_diag *diag);
int server_db_queue_notifications(struct server_db *db);
int server_db_queue_notify(struct server_db *db, struct cordon_diag *diag);

/* ---- moving a SQLite state to PostgreSQL (cordon-server migrate) --------
 *
 * The pieces server/cmd_migrate.c puts together; it knows the tables and
 * decides what is refused. The source is STATE/cordon.db as it is (never
 * created, never migrated), with SQLite's write lock held from
 * server_db_move_source_open until server_db_close, so that nothing
 * changes under the copy. The target is a PostgreSQL database with one
 * transaction open from server_db_move_target_open until
 * server_db_move_target_commit: the schema it lacked (made or migrated
 * inside that transaction), every row and the identities' sequences, all
 * or nothing; closing it uncommitted leaves the database as it was. Table
 * and column names are checked (lower case letters, digits and '_'), never
 * user data; values are only ever bound. Rows are read in the order
 * order_by gives (column names separated by ", "), as values of the four
 * kinds both backends store. */

enum server_db_value_kind {
  SERVER_DB_VALUE_NULL,
  SERVER_DB_VALUE_INT,
  SERVER_DB_VALUE_TEXT, /* p: its bytes, NUL-terminated; len without the NUL */
  SERVER_DB_VALUE_BLOB,
};
struct server_db_value {
  enum server_db_value_kind kind;
  int64_t i;     /* INT */
  const void *p; /* TEXT, BLOB: valid during the row's callback only */
  size_t len;
};

#define SERVER_DB_MOVE_NAME_MAX 63 /* bytes of a table or column name */
#define SERVER_DB_MOVE_NAMES_MAX 64
#define SERVER_DB_MOVE_COLUMNS_MAX 48
struct server_db_move_names {
  size_t count;
  char name[SERVER_DB_MOVE_NAMES_MAX][SERVER_DB_MOVE_NAME_MAX + 1];
};
struct server_db_move_column {
  char name[SERVER_DB_MOVE_NAME_MAX + 1];
  enum server_db_value_kind kind; /* the declared type; NULL: anything */
  bool identity;                  /* PostgreSQL: an identity column */
};
struct server_db_move_columns {
  size_t count;
  struct server_db_move_column items[SERVER_DB_MOVE_COLUMNS_MAX];
};
/* Called once per row with cols->count values; a non-zero return stops
 * the read and is returned by it. */
typedef int server_db_move_row_fn(void *arg, const struct server_db_value *row, size_t n);

/* Whether s can name a table or column here: [a-z_][a-z0-9_]*, at most
 * SERVER_DB_MOVE_NAME_MAX bytes. */
bool server_db_move_name_ok(const char *s);
/* The SELECT both reads run, "SELECT a, b FROM t ORDER BY k" (names
 * double-quoted when quote), into out: 0, -EINVAL for a name that is not
 * one, -ENAMETOOLONG when it does not fit. */
int server_db_move_select_sql(const char *table, const struct server_db_move_columns *cols,
                              const char *order_by, bool quote, char *out, size_t size);

/* db_sqlite.c. Open STATE/cordon.db (it must exist: -ENOENT) and take its
 * write lock (BEGIN IMMEDIATE; -EBUSY after the busy timeout), without
 * migrating it: *out_version is its schema version, whatever it is. */
int server_db_move_source_open(const char *state_dir, struct server_db **out_db, int *out_version,
                               struct cordon_diag *diag);
/* Every table of the source's schema, by name; SQLite's own (sqlite_*)
 * left out. */
int server_db_move_source_tables(struct server_db *src, struct server_db_move_names *out,
                                 struct cordon_diag *diag);
/* The columns of table (-ENOENT: no such table), in their order; kind from
 * the declared type (INTEGER, TEXT, BLOB). */
int server_db_move_source_columns(struct server_db *src, const char *table,
                                  struct server_db_move_columns *out, struct cordon_diag *diag);
/* The value sqlite_sequence keeps for table (AUTOINCREMENT's highest id
 * ever given), 0 when none. */
int server_db_move_source_sequence(struct server_db *src, const char *table, int64_t *out_seq,
                                   struct cordon_diag *diag);
/* Every row of table, cols (a column named rowid reads SQLite's rowid),
 * ordered by order_by. A REAL value is -EINVAL: no cordon column has one. */
int server_db_move_source_read(struct server_db *src, const char *table,
                               const struct server_db_move_columns *cols, const char *order_by,
                               server_db_move_row_fn *fn, void *arg, struct cordon_diag *diag);

/* db_pg.c. Connect to url (state_dir must exist), begin the transaction
 * (with the database-wide writer lock) and bring the schema up to this
 * binary's inside it: *out_found is the PostgreSQL schema version found (0:
 * none, made here). CORDON_E_CONFIG_INVALID for a database that holds
 * other tables and no cordon schema, or a newer cordon schema. */
int server_db_move_target_open(const char *state_dir, const char *url, struct server_db **out_db,
                               int *out_found, struct cordon_diag *diag);
/* The tables of the target's schema (current_schema()), by name. */
int server_db_move_target_tables(struct server_db *dst, struct server_db_move_names *out,
                                 struct cordon_diag *diag);
/* The columns of table, in their order, with their kinds (bigint, text,
 * bytea; another type is -EINVAL) and identities. */
int server_db_move_target_columns(struct server_db *dst, const char *table,
                                  struct server_db_move_columns *out, struct cordon_diag *diag);
/* How many rows table has. */
int server_db_move_target_count(struct server_db *dst, const char *table, int64_t *out_count,
                                struct cordon_diag *diag);
/* Insert one row: cols' values, identities included (OVERRIDING SYSTEM
 * VALUE), each bound as its kind (so a value of another kind than its
 * column is refused or, where PostgreSQL converts it, read back changed). */
int server_db_move_target_insert(struct server_db *dst, const char *table,
                                 const struct server_db_move_columns *cols,
                                 const struct server_db_value *row, struct cordon_diag *diag);
/* As server_db_move_source_read, on the target (inside its transaction). */
int server_db_move_target_read(struct server_db *dst, const char *table,
                               const struct server_db_move_columns *cols, const char *order_by,
                               server_db_move_row_fn *fn, void *arg, struct cordon_diag *diag);
/* The sequence of table's identity column goes on after
 * max(at_least, the column's highest value); nothing when both are 0. */
int server_db_move_target_identity(struct server_db *dst, const char *table, const char *column,
                                   int64_t at_least, struct cordon_diag *diag);
/* COMMIT: 0 when every row is in. */
int server_db_move_target_commit(struct server_db *dst, struct cordon_diag *diag);
/* What messages call db: STATE/cordon.db, or the URL without its password
 * (postgresql://user@host:port/name). */
const char *server_db_move_where(const struct server_db *db);

/* A cluster's key rotations (server/keysync.h, docs/SECURITY.md): one row,
 * the newest rotation's key files sealed under a key only the cluster's
 * servers hold (server_keys_bundle_seal), and its serial. With SQLite the
 * table exists but is not used. */
#define SERVER_DB_CLUSTER_KEYS_MAX (4u << 20) /* bytes of sealed read back, at most */
/* The row's serial: -ENOENT when there is none. */
int server_db_cluster_keys_serial(struct server_db *db, uint64_t *out_serial,
                                  struct cordon_diag *diag);
/* The row: its serial and sealed bytes (*out_sealed malloc'ed, free()).
 * -ENOENT when there is none; CORDON_E_LIMIT when sealed passes
 * SERVER_DB_CLUSTER_KEYS_MAX (the database does not send it then). */
int server_db_cluster_keys_get(struct server_db *db, uint64_t *out_serial, uint8_t **out_sealed,
                               size_t *out_len, struct cordon_diag *diag);
/* Write the row if it is absent or its serial is lower than serial (one
 * conditional statement: of two servers racing, the higher serial stays):
 * 0 written, -EEXIST when the row's serial is serial or higher. */
int server_db_cluster_keys_put(struct server_db *db, uint64_t serial, const uint8_t *sealed,
                               size_t len, struct cordon_diag *diag);

/* The relay of events between instances (server/cluster.c): NOTIFY on the
 * channel SERVER_DB_EVENTS_CHANNEL with a payload (server/relay.h).
 * server_db_events_listen makes a handle that server_db_queue_listen made
 * listen on it too. server_db_notifications reads what arrived on either
 * channel, calling fn for each with its channel and payload (borrowed for
 * the call; len bytes, NUL-terminated): how many (0 or more), or a
 * negative error when the connection broke. server_db_events_notify sends
 * n payloads (1 to SERVER_DB_EVENTS_BATCH_MAX) in one statement, in their
 * order: each is delivered at the commit of db's transaction, at once
 * when none is open. A payload must be 1 to 7999 bytes of printable ASCII
 * without a quote (' or ") or a backslash: -EINVAL, nothing sent.
 * -EOPNOTSUPP on SQLite. */
#define SERVER_DB_EVENTS_CHANNEL "cordon_events"
#define SERVER_DB_EVENTS_BATCH_MAX 64
typedef void server_db_notify_fn(void *ctx, const char *channel, const char *payload, size_t len);
int server_db_events_listen(struct server_db *db, struct cordon_diag *diag);
int server_db_notifications(struct server_db *db, server_db_notify_fn *fn, void *ctx);
int server_db_events_notify(struct server_db *db, const char *const *payloads, size_t n,
                            struct cordon_diag *diag);

#endif
