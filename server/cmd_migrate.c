/* cordon-server migrate --to postgresql://...: a stopped server's SQLite
 * state (STATE/cordon.db) moved into an empty PostgreSQL database, row for
 * row, in one PostgreSQL transaction that is committed only after every
 * table was read back and compared; then STATE/db-url names the database,
 * so that `run` on the state uses it. STATE/cordon.db is left as it was.
 *
 * Refused: while a daemon holds the state (STATE/daemon.lock, as restore
 * is), for a state that uses PostgreSQL already, a SQLite schema that is
 * not this binary's, a table this command does not know (a future table
 * is never left behind), a column the two schemas do not share, a target
 * whose cordon tables hold any row (it never merges). The packages of
 * queued jobs (STATE/queue/<id>.cpkg) go into job_packages, so that any
 * server of a cluster can send them; those above 64 MiB into
 * job_package_parts after the commit (each in a transaction of its own: a
 * failure leaves it to this server alone, as a cluster's dispatch does) (docs/OPERATIONS.md,
 * "Moving from SQLite to PostgreSQL"). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/id.h"
#include "server/cli.h"
#include "server/db.h"
#include "server/lock.h"

const struct server_migrate_table server_migrate_tables[] = {
    {"schema_version", NULL}, /* not copied: the target's own */
    {"users", "id"},
    {"pair_codes", "id"},
    {"devices", "id"},
    {"device_labels", "device_id, key"},
    {"jobs", "id"},
    {"device_sessions", "device_id"},
    {"job_packages", "job_id"},
    {"job_package_parts", "job_id, part"},
    {"cluster_keys", "id"},
    {NULL, NULL},
};

static const struct server_migrate_table *table_find(const char *name) {
  for (const struct server_migrate_table *t = server_migrate_tables; t->name; t++)
    if (strcmp(t->name, name) == 0)
      return t;
  return NULL;
}

/* A queued job's package, put into job_packages from STATE/queue. */
struct added {
  char id[CORDON_ID_HEX_SIZE];
  uint8_t digest[crypto_generichash_BYTES];
};

/* One table's copy: its columns (the target's order) and what was read. */
struct copy {
  const struct server_migrate_table *t;
  struct server_db_move_columns cols;
  int64_t rows;
  uint8_t digest[crypto_generichash_BYTES];
  crypto_generichash_state h;
  struct server_db *dst;
  struct cordon_diag *diag;
  /* where the columns read are: jobs' id, state and queue_expires;
   * job_packages' job_id and bytes (-1: none) */
  int id_col, state_col, expires_col, bytes_col;
  char (*queued)[CORDON_ID_HEX_SIZE]; /* jobs: ids of the jobs waiting in the queue */
  size_t n_queued, cap_queued;
  char (*kept)[CORDON_ID_HEX_SIZE]; /* job_packages: the rows SQLite had */
  size_t n_kept, cap_kept;
  const struct added *added; /* the read-back of job_packages: rows put from STATE/queue */
  size_t n_added, added_seen;
  bool added_bad;
};

static void copy_release(struct copy *c) {
  free(c->queued);
  free(c->kept);
}

/* Each value with its kind, so that 1 and "1" differ. */
static void hash_row(crypto_generichash_state *h, const struct server_db_value *row, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint8_t head[9] = {(uint8_t)row[i].kind};
    uint64_t v = row[i].kind == SERVER_DB_VALUE_INT ? (uint64_t)row[i].i : (uint64_t)row[i].len;
    for (int b = 0; b < 8; b++)
      head[1 + b] = (uint8_t)(v >> (56 - 8 * b));
    crypto_generichash_update(h, head, row[i].kind == SERVER_DB_VALUE_NULL ? 1 : sizeof(head));
    if (row[i].kind == SERVER_DB_VALUE_TEXT || row[i].kind == SERVER_DB_VALUE_BLOB)
      crypto_generichash_update(h, row[i].p, row[i].len);
  }
}

static int push_id(char (**items)[CORDON_ID_HEX_SIZE], size_t *n, size_t *cap,
                   const struct server_db_value *v) {
  if (v->kind != SERVER_DB_VALUE_TEXT || v->len != CORDON_ID_HEX_LEN)
    return 0; /* not a job id: nothing in STATE/queue can be its */
  if (*n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 64;
    void *p = realloc(*items, ncap * sizeof(**items));
    if (!p)
      return -ENOMEM;
    *items = p;
    *cap = ncap;
  }
  memcpy((*items)[*n], v->p, CORDON_ID_HEX_LEN);
  (*items)[(*n)++][CORDON_ID_HEX_LEN] = '\0';
  return 0;
}

/* A row of STATE/cordon.db: into the digest and the target. */
static int copy_row(void *arg, const struct server_db_value *row, size_t n) {
  struct copy *c = arg;
  hash_row(&c->h, row, n);
  c->rows++;
  int err = 0;
  if (c->state_col >= 0 && row[c->state_col].kind == SERVER_DB_VALUE_TEXT &&
      strcmp(row[c->state_col].p, "queued") == 0 &&
      row[c->expires_col].kind == SERVER_DB_VALUE_INT && row[c->expires_col].i != 0)
    err = push_id(&c->queued, &c->n_queued, &c->cap_queued, &row[c->id_col]);
  if (!err && c->bytes_col >= 0)
    err = push_id(&c->kept, &c->n_kept, &c->cap_kept, &row[c->id_col]);
  if (err)
    return cordon_diag_set(c->diag, err, "out of memory");
  return server_db_move_target_insert(c->dst, c->t->name, &c->cols, row, c->diag);
}

static int id_cmp(const void *a, const void *b) {
  return strcmp(a, b);
}

/* A row read back from the target: into the digest, unless it is a
 * package put from STATE/queue, which is compared on its own. */
static int check_row(void *arg, const struct server_db_value *row, size_t n) {
  struct copy *c = arg;
  const struct server_db_value *id = c->n_added ? &row[c->id_col] : NULL;
  /* added is in id order; its id is its first member */
  const struct added *a = id && id->kind == SERVER_DB_VALUE_TEXT
                              ? bsearch(id->p, c->added, c->n_added, sizeof(*c->added), id_cmp)
                              : NULL;
  if (a) {
    const struct server_db_value *b = &row[c->bytes_col];
    uint8_t d[crypto_generichash_BYTES];
    crypto_generichash(d, sizeof(d), b->p, b->len, NULL, 0);
    if (b->kind != SERVER_DB_VALUE_BLOB || sodium_memcmp(d, a->digest, sizeof(d)) != 0)
      c->added_bad = true;
    c->added_seen++;
    return 0;
  }
  hash_row(&c->h, row, n);
  c->rows++;
  return 0;
}

/* The columns a table is copied with: the target's, each of which the
 * source has (a PostgreSQL identity column rowid reads SQLite's rowid),
 * and no source column left out. A CLI status. */
static int plan_columns(struct server_db *src, struct server_db *dst, struct copy *c) {
  struct cordon_diag diag = {{0}};
  struct server_db_move_columns s;
  int err = server_db_move_source_columns(src, c->t->name, &s, &diag);
  if (!err)
    err = server_db_move_target_columns(dst, c->t->name, &c->cols, &diag);
  if (err)
    return server_cli_fail(err, &diag);
  for (size_t i = 0; i < c->cols.count; i++) {
    const struct server_db_move_column *p = &c->cols.items[i];
    bool found = strcmp(p->name, "rowid") == 0 && p->identity;
    for (size_t j = 0; !found && j < s.count; j++)
      found = strcmp(s.items[j].name, p->name) == 0;
    if (!found)
      return server_cli_failf(
          CORDON_E_CONFIG_INVALID, "%s has a column %s.%s that %s lacks: nothing was copied",
          server_db_move_where(dst), c->t->name, p->name, server_db_move_where(src));
  }
  for (size_t j = 0; j < s.count; j++) {
    bool found = false;
    for (size_t i = 0; !found && i < c->cols.count; i++)
      found = strcmp(s.items[j].name, c->cols.items[i].name) == 0;
    if (!found)
      return server_cli_failf(
          CORDON_E_CONFIG_INVALID, "%s has a column %s.%s that %s lacks: nothing was copied",
          server_db_move_where(src), c->t->name, s.items[j].name, server_db_move_where(dst));
  }
  c->id_col = c->state_col = c->expires_col = c->bytes_col = -1;
  bool jobs = strcmp(c->t->name, "jobs") == 0, pkgs = strcmp(c->t->name, "job_packages") == 0;
  for (size_t i = 0; (jobs || pkgs) && i < c->cols.count; i++) {
    const char *name = c->cols.items[i].name;
    if (strcmp(name, jobs ? "id" : "job_id") == 0)
      c->id_col = (int)i;
    else if (jobs && strcmp(name, "state") == 0)
      c->state_col = (int)i;
    else if (jobs && strcmp(name, "queue_expires") == 0)
      c->expires_col = (int)i;
    else if (pkgs && strcmp(name, "bytes") == 0)
      c->bytes_col = (int)i;
  }
  if ((jobs && (c->id_col < 0 || c->state_col < 0 || c->expires_col < 0)) ||
      (pkgs && (c->id_col < 0 || c->bytes_col < 0)))
    return server_cli_failf(CORDON_E_INTERNAL, "table %s lacks the columns of a queued job",
                            c->t->name);
  return 0;
}

/* STATE/queue/<id>.cpkg, whole, into *out (heap): 0, -ENOENT, -EFBIG. */
static int read_package(const char *state, const char *id, uint8_t **out, size_t *out_len) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/queue/%s.cpkg", state, id);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return -errno;
  struct stat st;
  int err = 0;
  uint8_t *buf = NULL;
  if (fstat(fd, &st) < 0)
    err = -errno;
  else if (!S_ISREG(st.st_mode))
    err = -ENOENT;
  else if ((uint64_t)st.st_size > SERVER_DB_PACKAGE_STORE_MAX)
    err = -EFBIG;
  else if (!(buf = malloc(st.st_size ? (size_t)st.st_size : 1)))
    err = -ENOMEM;
  size_t got = 0, len = err ? 0 : (size_t)st.st_size;
  while (!err && got < len) {
    ssize_t n = read(fd, buf + got, len - got);
    if (n <= 0)
      err = n < 0 ? -errno : -EIO;
    else
      got += (size_t)n;
  }
  close(fd);
  if (err) {
    free(buf);
    return err;
  }
  *out = buf;
  *out_len = len;
  return 0;
}

/* The queued jobs' packages into job_packages (those SQLite had a row for
 * were copied with the table). *out_added (heap, by id); the counts of
 * those with no file and of those too large for the database. A CLI
 * status. */
static int put_packages(const char *state, struct server_db *dst, struct copy *jobs,
                        struct copy *pkgs, struct added **out_added, size_t *out_n,
                        size_t *out_missing, size_t *out_large) {
  struct added *added = jobs->n_queued ? calloc(jobs->n_queued, sizeof(*added)) : NULL;
  if (jobs->n_queued && !added)
    return server_cli_failf(-ENOMEM, "out of memory");
  size_t n = 0;
  if (jobs->n_queued)
    qsort(jobs->queued, jobs->n_queued, sizeof(*jobs->queued), id_cmp);
  if (pkgs->n_kept)
    qsort(pkgs->kept, pkgs->n_kept, sizeof(*pkgs->kept), id_cmp);
  for (size_t i = 0; i < jobs->n_queued; i++) {
    const char *id = jobs->queued[i];
    if (pkgs->n_kept && bsearch(id, pkgs->kept, pkgs->n_kept, sizeof(*pkgs->kept), id_cmp))
      continue;
    uint8_t *buf = NULL;
    size_t len = 0;
    int err = read_package(state, id, &buf, &len);
    if (err == -ENOENT || err == -EFBIG) {
      (*(err == -ENOENT ? out_missing : out_large))++;
      continue;
    }
    struct cordon_diag diag = {{0}};
    if (err)
      err = cordon_diag_set(&diag, err, "%s/queue/%s.cpkg: %s", state, id, strerror(-err));
    else
      err = server_db_job_package_put(dst, id, buf, len, &diag);
    if (!err) {
      snprintf(added[n].id, sizeof(added[n].id), "%s", id);
      crypto_generichash(added[n].digest, sizeof(added[n].digest), buf, len, NULL, 0);
      n++;
    }
    free(buf);
    if (err) {
      free(added);
      return server_cli_failf(err, "%s; rolled back: %s is as it was", diag.msg,
                              server_db_move_where(dst));
    }
  }
  *out_added = added;
  *out_n = n;
  return 0;
}

/* After the commit: the queued packages above 64 MiB into
 * job_package_parts, each in a transaction of its own (a failure is
 * counted: that job is sent by this server only). */
static void put_large_packages(const char *state, struct server_db *dst, const struct copy *jobs,
                               size_t *out_stored, size_t *out_failed) {
  for (size_t i = 0; i < jobs->n_queued; i++) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/queue/%s.cpkg", state, jobs->queued[i]);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0)
      continue;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size > SERVER_DB_PACKAGE_STORE_MAX) {
      struct cordon_diag diag = {{0}};
      if (server_db_job_package_store(dst, jobs->queued[i], fd, (uint64_t)st.st_size, &diag) == 0)
        (*out_stored)++;
      else
        (*out_failed)++;
    }
    close(fd);
  }
}

/* "users 2, devices 3, ..." of the copied tables. */
static void summary(const struct copy *copies, size_t n, size_t packages, char *buf, size_t size) {
  size_t o = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && o < size; i++)
    o += (size_t)snprintf(buf + o, size - o, "%s%s %lld", i ? ", " : "", copies[i].t->name,
                          (long long)copies[i].rows);
  if (o < size && packages)
    snprintf(buf + o, size - o, " (and %zu queued package(s) from STATE/queue)", packages);
}

static int parse(int argc, char **argv, const char **state, const char **url) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                       {"to", required_argument, NULL, 't'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 's')
      *state = optarg;
    else if (c == 't')
      *url = optarg;
    else if (c == 'h')
      return server_cli_help("migrate", NULL) == 0 ? -1 : 2;
    else
      return server_cli_bad_option("migrate", NULL, argv);
  }
  if (optind != argc)
    return server_cli_usage("migrate", NULL, "migrate takes no arguments");
  if (!*url)
    return server_cli_usage("migrate", NULL, "--to postgresql://... is missing");
  if (!server_db_url_is_pg(*url) || strlen(*url) > SERVER_DB_URL_MAX || strpbrk(*url, "\r\n"))
    return server_cli_usage("migrate", NULL, "--to: a postgresql:// URL of at most %d bytes",
                            SERVER_DB_URL_MAX);
  return 0;
}

#define N_COPIED (sizeof(server_migrate_tables) / sizeof(server_migrate_tables[0]) - 2)

/* Everything after the lock: a CLI status. */
static int migrate(const char *state, const char *url) {
  struct cordon_diag diag = {{0}};
  struct server_db *src = NULL, *dst = NULL;
  struct copy copies[N_COPIED];
  struct added *added = NULL;
  size_t n_added = 0, missing = 0, large = 0;
  memset(copies, 0, sizeof(copies));
  int version = 0, found = 0, status = 0;
  int err = server_db_move_source_open(state, &src, &version, &diag);
  if (err)
    return server_cli_fail(server_cli_db_code(err), &diag);
  const char *from = server_db_move_where(src);
  if (version != SERVER_DB_SCHEMA_VERSION) {
    status = version < SERVER_DB_SCHEMA_VERSION
                 ? server_cli_failf(CORDON_E_CONFIG_INVALID,
                                    "%s has schema version %d, this cordon-server's is %d: any "
                                    "cordon-server command that opens it (cordon-server user "
                                    "list --state %s, or run) migrates it; then migrate",
                                    from, version, SERVER_DB_SCHEMA_VERSION, state)
                 : server_cli_failf(CORDON_E_CONFIG_INVALID,
                                    "%s has schema version %d, newer than this cordon-server "
                                    "knows (%d): use the cordon-server that wrote it",
                                    from, version, SERVER_DB_SCHEMA_VERSION);
    goto out;
  }
  /* every table of the schema is one this command knows */
  struct server_db_move_names names;
  if ((err = server_db_move_source_tables(src, &names, &diag))) {
    status = server_cli_fail(err, &diag);
    goto out;
  }
  for (size_t i = 0; i < names.count; i++)
    if (!table_find(names.name[i])) {
      status = server_cli_failf(CORDON_E_CONFIG_INVALID,
                                "%s has a table %s that this cordon-server does not know how to "
                                "move: nothing was copied",
                                from, names.name[i]);
      goto out;
    }
  if ((err = server_db_move_target_open(state, url, &dst, &found, &diag))) {
    status = server_cli_fail(server_cli_db_code(err), &diag);
    goto out;
  }
  const char *to = server_db_move_where(dst);
  /* the target's tables are this command's too, and hold nothing */
  if ((err = server_db_move_target_tables(dst, &names, &diag))) {
    status = server_cli_fail(err, &diag);
    goto out;
  }
  char rows_found[512] = "";
  for (size_t i = 0, o = 0; i < names.count; i++) {
    int64_t n = 0;
    if (!table_find(names.name[i])) {
      status = server_cli_failf(CORDON_E_CONFIG_INVALID,
                                "%s has a table %s that this cordon-server does not know: "
                                "migrate needs an empty database",
                                to, names.name[i]);
      goto out;
    }
    if (strcmp(names.name[i], "schema_version") == 0)
      continue;
    if ((err = server_db_move_target_count(dst, names.name[i], &n, &diag))) {
      status = server_cli_fail(err, &diag);
      goto out;
    }
    if (n && o < sizeof(rows_found))
      o += (size_t)snprintf(rows_found + o, sizeof(rows_found) - o, "%s%s: %lld", o ? ", " : "",
                            names.name[i], (long long)n);
  }
  if (rows_found[0]) {
    status = server_cli_failf(CORDON_E_ALREADY_EXISTS,
                              "%s already holds cordon data (%s); migrate never merges: give it "
                              "an empty database",
                              to, rows_found);
    goto out;
  }
  /* the rows, table by table (foreign keys first), and the sequences */
  for (size_t i = 0; i < N_COPIED; i++) {
    struct copy *c = &copies[i];
    c->t = &server_migrate_tables[i + 1];
    c->dst = dst;
    c->diag = &diag;
    if ((status = plan_columns(src, dst, c)))
      goto out;
    crypto_generichash_init(&c->h, NULL, 0, sizeof(c->digest));
    err = server_db_move_source_read(src, c->t->name, &c->cols, c->t->key, copy_row, c, &diag);
    if (!err)
      crypto_generichash_final(&c->h, c->digest, sizeof(c->digest));
    for (size_t k = 0; !err && k < c->cols.count; k++) {
      int64_t seq = 0;
      if (!c->cols.items[k].identity)
        continue;
      err = server_db_move_source_sequence(src, c->t->name, &seq, &diag);
      if (!err)
        err = server_db_move_target_identity(dst, c->t->name, c->cols.items[k].name, seq, &diag);
    }
    if (err) {
      status = server_cli_failf(err, "%s; rolled back: %s is as it was", diag.msg, to);
      goto out;
    }
  }
  struct copy *jobs = NULL, *pkgs = NULL;
  for (size_t i = 0; i < N_COPIED; i++) {
    if (strcmp(copies[i].t->name, "jobs") == 0)
      jobs = &copies[i];
    else if (strcmp(copies[i].t->name, "job_packages") == 0)
      pkgs = &copies[i];
  }
  if ((status = put_packages(state, dst, jobs, pkgs, &added, &n_added, &missing, &large)))
    goto out;
  /* read every table back and compare before committing */
  for (size_t i = 0; i < N_COPIED; i++) {
    struct copy *c = &copies[i], back = *c;
    back.rows = 0;
    back.queued = back.kept = NULL;
    back.n_queued = back.n_kept = 0;
    back.added = c == pkgs ? added : NULL;
    back.n_added = c == pkgs ? n_added : 0;
    crypto_generichash_init(&back.h, NULL, 0, sizeof(back.digest));
    err = server_db_move_target_read(dst, c->t->name, &c->cols, c->t->key, check_row, &back, &diag);
    if (err) {
      status = server_cli_failf(err, "%s; rolled back: %s is as it was", diag.msg, to);
      goto out;
    }
    crypto_generichash_final(&back.h, back.digest, sizeof(back.digest));
    if (back.rows != c->rows || sodium_memcmp(back.digest, c->digest, sizeof(c->digest)) != 0 ||
        back.added_seen != back.n_added || back.added_bad) {
      status = server_cli_failf(CORDON_E_INTERNAL,
                                "table %s read back from %s is not what %s holds (%lld rows, "
                                "%lld read back): rolled back, %s is as it was",
                                c->t->name, to, from, (long long)c->rows, (long long)back.rows, to);
      goto out;
    }
  }
  if ((err = server_db_move_target_commit(dst, &diag))) {
    status = server_cli_failf(err, "%s; %s is as it was", diag.msg, to);
    goto out;
  }
  if ((err = server_db_save_url(state, url, &diag))) {
    status = server_cli_failf(err,
                              "the state is in %s now, but %s/%s could not be written (%s): write "
                              "the URL there yourself (one line, chmod 600) before starting run",
                              to, state, SERVER_DB_URL_FILE, diag.msg);
    goto out;
  }
  size_t large_stored = 0, large_failed = 0;
  if (large)
    put_large_packages(state, dst, jobs, &large_stored, &large_failed);
  char counts[1024];
  summary(copies, N_COPIED, n_added + large_stored, counts, sizeof(counts));
  char note[256] = "";
  if (missing || large_failed)
    snprintf(note, sizeof(note),
             "; of the queued jobs, %zu had no package in %s/queue (they fail when a device "
             "comes for them) and %zu could not be put into the database (only this server "
             "sends them)",
             missing, state, large_failed);
  fprintf(stderr,
          "%s: migrated %s to %s: %s, every table read back and compared before the commit%s; "
          "%s/%s names it now, so cordon-server run --state %s uses it; %s is kept as it was "
          "and no longer used (remove %s/%s to go back to it)\n",
          SERVER_PROG, from, to, counts, note, state, SERVER_DB_URL_FILE, state, from, state,
          SERVER_DB_URL_FILE);
out:
  for (size_t i = 0; i < N_COPIED; i++)
    copy_release(&copies[i]);
  free(added);
  server_db_close(dst); /* uncommitted: rolled back */
  server_db_close(src);
  return status;
}

int server_cmd_migrate(const struct server_cli *cli, int argc, char **argv) {
  const char *state = cli->state_dir, *url = NULL;
  int status = parse(argc, argv, &state, &url);
  if (status)
    return status < 0 ? 0 : status;
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s", state, SERVER_DB_URL_FILE);
  if (access(path, F_OK) == 0)
    return server_cli_failf(CORDON_E_ALREADY_EXISTS,
                            "%s uses PostgreSQL already (%s): there is nothing to migrate", state,
                            path);
  struct cordon_diag diag = {{0}};
  struct server_lock *lock = NULL;
  int err = server_lock_take(state, &lock, &diag);
  if (err == -EBUSY)
    return server_cli_failf(-EBUSY, "%s; stop the daemon before migrating", diag.msg);
  if (err)
    return server_cli_fail(err, &diag);
  status = migrate(state, url);
  server_lock_release(lock);
  return status;
}
