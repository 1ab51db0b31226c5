/* A cluster's device sessions and queued packages (server/db.h): the
 * device_sessions, job_packages and job_package_parts tables. */
#include "server/pq.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file.h"
#include "server/db.h"
#include "server/db_internal.h"

void server_db_session_rows_release(struct server_db_session_rows *rows) {
  if (!rows)
    return;
  free(rows->items);
  rows->items = NULL;
  rows->count = 0;
}

int server_db_session_claim(struct server_db *db, const char *device_id, const char *instance,
                            const char *session_id, int64_t lease_expires,
                            struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt_text(db, Q_SESSION_CLAIM, device_id, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 2, instance, &rc);
  db_bind_text(st, 3, session_id, &rc);
  db_bind_int(st, 4, lease_expires, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  return db_exec_stmt(db, st, "claim a device session", diag);
}

int server_db_session_release(struct server_db *db, const char *device_id, const char *instance,
                              const char *session_id, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt_text(db, Q_SESSION_RELEASE, device_id, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 2, instance, &rc);
  db_bind_text(st, 3, session_id, &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
      (err = db_exec_stmt(db, st, "release a device session", diag)))
    return err;
  return db_changes(db) == 1 ? 0 : -ENOENT;
}

int server_db_session_renew(struct server_db *db, const char *instance, int64_t lease_expires,
                            size_t *out_count, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt_text(db, Q_SESSION_RENEW, instance, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_int(st, 2, lease_expires, &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
      (err = db_exec_stmt(db, st, "renew the session leases", diag)))
    return err;
  *out_count = (size_t)db_changes(db);
  return 0;
}

/* Rows of q (instance as ?1, since as ?2 when since >= 0): device id,
 * session id and, when q has a third column, a job id. */
static int list_rows(struct server_db *db, enum db_stmt q, const char *instance, int64_t since,
                     struct server_db_session_rows *out, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt_text(db, q, instance, &st, diag);
  if (err)
    return err;
  if (since >= 0) {
    int rc = DB_OK;
    db_bind_int(st, 2, since, &rc);
    if ((err = db_bind_check(db, st, rc, diag)))
      return err;
  }
  struct server_db_session_rows rows = {0};
  size_t cap = 0;
  int step;
  while ((step = db_step(st)) == DB_ROW) {
    struct server_db_session_row *r =
        db_list_push((void **)&rows.items, &rows.count, &cap, sizeof(*rows.items));
    if (!r) {
      step = -ENOMEM;
      break;
    }
    db_col_text(st, 0, r->device_id, sizeof(r->device_id));
    db_col_text(st, 1, r->session_id, sizeof(r->session_id));
    if (q == Q_SESSION_LIST_CANCELLED)
      db_col_text(st, 2, r->job_id, sizeof(r->job_id));
  }
  if (step != DB_DONE) {
    err = db_fail(db, step, "list the session leases", diag);
    db_done(st);
    server_db_session_rows_release(&rows);
    return err;
  }
  db_done(st);
  *out = rows;
  return 0;
}

int server_db_session_list(struct server_db *db, const char *instance,
                           struct server_db_session_rows *out, struct cordon_diag *diag) {
  return list_rows(db, Q_SESSION_LIST_INSTANCE, instance, -1, out, diag);
}

int server_db_session_list_revoked(struct server_db *db, const char *instance,
                                   struct server_db_session_rows *out, struct cordon_diag *diag) {
  return list_rows(db, Q_SESSION_LIST_REVOKED, instance, -1, out, diag);
}

int server_db_session_list_cancelled(struct server_db *db, const char *instance, int64_t since,
                                     struct server_db_session_rows *out, struct cordon_diag *diag) {
  return list_rows(db, Q_SESSION_LIST_CANCELLED, instance, since, out, diag);
}

int server_db_session_get(struct server_db *db, const char *device_id, char *out_instance,
                          char *out_session_id, int64_t *out_lease_expires,
                          struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt_text(db, Q_SESSION_GET, device_id, &st, diag);
  if (err)
    return err;
  int step = db_step(st);
  if (step == DB_ROW) {
    if (out_instance)
      db_col_text(st, 0, out_instance, CORDON_ID_HEX_SIZE);
    if (out_session_id)
      db_col_text(st, 1, out_session_id, CORDON_ID_HEX_SIZE);
    if (out_lease_expires)
      *out_lease_expires = db_col_int(st, 2);
    err = 0;
  } else if (step == DB_DONE) {
    err = -ENOENT;
  } else {
    err = db_fail(db, step, "read a device session", diag);
  }
  db_done(st);
  return err;
}

/* q bound with now as ?1, run. */
static int exec_now(struct server_db *db, enum db_stmt q, const char *what,
                    struct cordon_diag *diag) {
  return db_exec_int(db, q, server_db_now(db), what, diag);
}

int server_db_session_expire(struct server_db *db, bool at_start, struct cordon_diag *diag) {
  int err = 0;
  if (at_start)
    err = exec_now(db, Q_SESSION_OFFLINE_UNLEASED, "set unleased devices offline", diag);
  if (!err)
    err = exec_now(db, Q_SESSION_OFFLINE_EXPIRED, "set expired devices offline", diag);
  if (!err)
    err = exec_now(db, Q_SESSION_DELETE_EXPIRED, "drop expired session leases", diag);
  return err;
}

int server_db_session_clear(struct server_db *db, struct cordon_diag *diag) {
  return db_simple(db, Q_SESSION_DELETE_ALL, "drop the session leases", diag);
}

int server_db_job_package_put(struct server_db *db, const char *job_id, const void *bytes,
                              size_t len, struct cordon_diag *diag) {
  if (len > SERVER_DB_PACKAGE_STORE_MAX)
    return cordon_diag_set(diag, -EFBIG, "a package of %zu bytes is not kept in the database", len);
  struct db_st *st = NULL;
  int err = db_stmt_text(db, Q_PACKAGE_PUT, job_id, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_blob(st, 2, bytes, len, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  return db_exec_stmt(db, st, "keep a queued package", diag);
}

int server_db_job_package_get(struct server_db *db, const char *job_id, uint8_t **out,
                              size_t *out_len, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt_text(db, Q_PACKAGE_GET, job_id, &st, diag);
  if (err)
    return err;
  int step = db_step(st);
  if (step == DB_ROW) {
    size_t len = 0;
    const void *p = db_col_blob_ptr(st, 0, &len);
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) {
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
    } else {
      if (len)
        memcpy(copy, p, len);
      *out = copy;
      *out_len = len;
      err = 0;
    }
  } else if (step == DB_DONE) {
    err = -ENOENT;
  } else {
    err = db_fail(db, step, "read a queued package", diag);
  }
  db_done(st);
  return err;
}

/* n bytes of fd at off into buf: 0, or an error (a short file is -EIO). */
static int read_at(int fd, uint8_t *buf, size_t n, uint64_t off, struct cordon_diag *diag) {
  for (size_t got = 0; got < n;) {
    ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return cordon_diag_set(diag, -errno, "read the package: %s", strerror(errno));
    if (r == 0)
      return cordon_diag_set(diag, -EIO, "read the package: it ended early");
    got += (size_t)r;
  }
  return 0;
}

static int write_all(int fd, const void *p, size_t n, struct cordon_diag *diag) {
  int err = core_write_all(fd, p, n);
  return err ? cordon_diag_set(diag, err, "write the package: %s", strerror(-err)) : 0;
}

static int part_put(struct server_db *db, const char *job_id, int64_t part, const uint8_t *bytes,
                    size_t len, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt_text(db, Q_PACKAGE_PART_PUT, job_id, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_int(st, 2, part, &rc);
  db_bind_blob(st, 3, bytes, len, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  return db_exec_stmt(db, st, "keep a part of a queued package", diag);
}

int server_db_job_package_store(struct server_db *db, const char *job_id, int fd, uint64_t size,
                                struct cordon_diag *diag) {
  if (size > SERVER_DB_PACKAGE_MAX)
    return cordon_diag_set(diag, -EFBIG, "a package of %llu bytes is not kept in the database",
                           (unsigned long long)size);
  size_t chunk = size <= SERVER_DB_PACKAGE_STORE_MAX ? (size_t)size : SERVER_DB_PACKAGE_PART;
  uint8_t *buf = malloc(chunk ? chunk : 1);
  if (!buf)
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  int err;
  if (size <= SERVER_DB_PACKAGE_STORE_MAX) { /* one row, as servers before schema 12 read it */
    err = read_at(fd, buf, chunk, 0, diag);
    if (!err)
      err = server_db_job_package_put(db, job_id, buf, chunk, diag);
    free(buf);
    return err;
  }
  if ((err = db_tx_begin(db, diag))) {
    free(buf);
    return err;
  }
  int64_t part = 0;
  for (uint64_t off = 0; off < size && !err; off += chunk, part++) {
    size_t n = size - off < chunk ? (size_t)(size - off) : chunk;
    err = read_at(fd, buf, n, off, diag);
    if (!err)
      err = part_put(db, job_id, part, buf, n, diag);
  }
  free(buf);
  if (err) {
    db_tx_rollback(db);
    return err;
  }
  return db_tx_commit(db, diag);
}

/* Part number part of job id into fd: 0, -ENOENT (no such part), or an error. */
static int part_load(struct server_db *db, const char *job_id, int64_t part, int fd,
                     uint64_t *io_size, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt_text(db, Q_PACKAGE_PART_GET, job_id, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_int(st, 2, part, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  int step = db_step(st);
  if (step == DB_ROW) {
    size_t len = 0;
    const void *p = db_col_blob_ptr(st, 0, &len);
    if (len == 0 || len > SERVER_DB_PACKAGE_PART ||
        len > SERVER_DB_PACKAGE_MAX - *io_size) /* the store never writes such a part */
      err = cordon_diag_set(diag, -EFBIG, "part %lld of the queued package: %zu bytes",
                            (long long)part, len);
    else if (!(err = write_all(fd, p, len, diag)))
      *io_size += len;
  } else if (step == DB_DONE) {
    err = -ENOENT;
  } else {
    err = db_fail(db, step, "read a part of a queued package", diag);
  }
  db_done(st);
  return err;
}

int server_db_job_package_load(struct server_db *db, const char *job_id, int fd, uint64_t *out_size,
                               struct cordon_diag *diag) {
  uint8_t *buf = NULL;
  size_t len = 0;
  int err = server_db_job_package_get(db, job_id, &buf, &len, diag);
  if (err != -ENOENT) {
    if (!err && !(err = write_all(fd, buf, len, diag)))
      *out_size = len;
    free(buf);
    return err;
  }
  /* a large one: its parts, counted first (a store commits them all at
   * once, a purge drops them all at once: a part missing on the way means
   * the job left the queue, not a shorter package) */
  struct db_st *st = NULL;
  if ((err = db_stmt_text(db, Q_PACKAGE_PART_COUNT, job_id, &st, diag)))
    return err;
  int step = db_step(st);
  int64_t parts = step == DB_ROW ? db_col_int(st, 0) : -1;
  if (step != DB_ROW)
    err = db_fail(db, step, "count the parts of a queued package", diag);
  db_done(st);
  if (err)
    return err;
  if (parts <= 0)
    return -ENOENT;
  if ((uint64_t)parts > SERVER_DB_PACKAGE_MAX / SERVER_DB_PACKAGE_PART + 1)
    return cordon_diag_set(diag, -EFBIG, "a queued package of %lld parts", (long long)parts);
  uint64_t size = 0;
  for (int64_t part = 0; part < parts; part++)
    if ((err = part_load(db, job_id, part, fd, &size, diag)))
      return err;
  *out_size = size;
  return 0;
}

int server_db_job_package_purge(struct server_db *db, struct cordon_diag *diag) {
  int err = db_simple(db, Q_PACKAGE_PURGE, "drop the packages of sent jobs", diag);
  if (!err)
    err = db_simple(db, Q_PACKAGE_PART_PURGE, "drop the parts of sent jobs' packages", diag);
  return err;
}

int server_db_queue_listen(struct server_db *db, int *out_fd, struct cordon_diag *diag) {
  if (!server_db_is_shared(db))
    return cordon_diag_set(diag, -EOPNOTSUPP, "LISTEN: PostgreSQL only");
  int err = db->drv->exec_script(db, "LISTEN " SERVER_DB_QUEUE_CHANNEL);
  if (err)
    return cordon_diag_set(diag, err, "%s: LISTEN: %s", db->path, db->drv->errmsg(db));
  int fd = PQsocket(db->h);
  if (fd < 0)
    return cordon_diag_set(diag, -ENOTCONN, "%s: LISTEN: no socket", db->path);
  *out_fd = fd;
  return 0;
}

int server_db_queue_notifications(struct server_db *db) {
  return server_db_notifications(db, NULL, NULL);
}

int server_db_queue_notify(struct server_db *db, struct cordon_diag *diag) {
  if (!server_db_is_shared(db))
    return 0;
  int err = db->drv->exec_script(db, "NOTIFY " SERVER_DB_QUEUE_CHANNEL);
  return err ? cordon_diag_set(diag, err, "%s: NOTIFY: %s", db->path, db->drv->errmsg(db)) : 0;
}

int server_db_events_listen(struct server_db *db, struct cordon_diag *diag) {
  if (!server_db_is_shared(db))
    return cordon_diag_set(diag, -EOPNOTSUPP, "LISTEN: PostgreSQL only");
  int err = db->drv->exec_script(db, "LISTEN " SERVER_DB_EVENTS_CHANNEL);
  return err ? cordon_diag_set(diag, err, "%s: LISTEN: %s", db->path, db->drv->errmsg(db)) : 0;
}

int server_db_notifications(struct server_db *db, server_db_notify_fn *fn, void *ctx) {
  if (!server_db_is_shared(db))
    return -EOPNOTSUPP;
  if (!PQconsumeInput(db->h) || PQstatus(db->h) != CONNECTION_OK)
    return -ECONNRESET;
  int n = 0;
  PGnotify *note;
  while ((note = PQnotifies(db->h))) {
    n++;
    const char *payload = note->extra ? note->extra : "";
    if (fn)
      fn(ctx, note->relname, payload, strlen(payload));
    PQfreemem(note);
  }
  return n;
}

/* Printable ASCII that needs no quoting inside an array literal's "...". */
static bool payload_plain(const char *p, size_t *out_len) {
  size_t n = 0;
  for (; p[n]; n++)
    if (p[n] < 0x20 || p[n] > 0x7e || p[n] == '\'' || p[n] == '"' || p[n] == '\\')
      return false;
  *out_len = n;
  return n > 0 && n < 8000;
}

int server_db_events_notify(struct server_db *db, const char *const *payloads, size_t n,
                            struct cordon_diag *diag) {
  if (!server_db_is_shared(db))
    return cordon_diag_set(diag, -EOPNOTSUPP, "NOTIFY: PostgreSQL only");
  if (n == 0 || n > SERVER_DB_EVENTS_BATCH_MAX)
    return cordon_diag_set(diag, -EINVAL, "NOTIFY: %zu payloads (1 to %d)", n,
                           SERVER_DB_EVENTS_BATCH_MAX);
  /* one text[] parameter, {"a","b",...}: the payloads bound, never in the SQL */
  size_t total = 3, len;
  for (size_t i = 0; i < n; i++) {
    if (!payloads[i] || !payload_plain(payloads[i], &len))
      return cordon_diag_set(diag, -EINVAL, "NOTIFY: payload %zu is not 1 to 7999 plain bytes", i);
    total += len + 3;
  }
  char *array = malloc(total);
  if (!array)
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  size_t at = 0;
  array[at++] = '{';
  for (size_t i = 0; i < n; i++) {
    len = strlen(payloads[i]);
    if (i)
      array[at++] = ',';
    array[at++] = '"';
    memcpy(array + at, payloads[i], len);
    at += len;
    array[at++] = '"';
  }
  array[at++] = '}';
  array[at] = '\0';
  const char *values[] = {array};
  PGresult *res = PQexecParams(db->h,
                               "SELECT pg_notify('" SERVER_DB_EVENTS_CHANNEL "', p)"
                               " FROM unnest($1::text[]) AS p",
                               1, NULL, values, NULL, NULL, 0);
  free(array);
  int err = 0;
  if (PQresultStatus(res) != PGRES_TUPLES_OK) {
    const char *m = res ? PQresultErrorMessage(res) : PQerrorMessage(db->h);
    size_t ml = strcspn(m, "\n");
    err = cordon_diag_set(diag, PQstatus(db->h) == CONNECTION_OK ? -EIO : -ECONNRESET,
                          "%s: NOTIFY: %.*s", db->path, (int)(ml < 200 ? ml : 200), m);
  }
  PQclear(res);
  return err;
}
