/* A cluster's key rotations (server/db.h): the cluster_keys table, one row
 * (id 1) of sealed bytes the database cannot open (server/keys.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/db.h"
#include "server/db_internal.h"

_Static_assert(DB_CLUSTER_KEYS_LIMIT == SERVER_DB_CLUSTER_KEYS_MAX,
               "the statement's limit is the header's");

int server_db_cluster_keys_serial(struct server_db *db, uint64_t *out_serial,
                                  struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_CLUSTER_KEYS_SERIAL, &st, diag);
  if (err)
    return err;
  int rc = db_step(st);
  if (rc == DB_ROW)
    *out_serial = (uint64_t)db_col_int(st, 0);
  db_done(st);
  if (rc < 0)
    return db_fail(db, rc, "read the cluster's key serial", diag);
  return rc == DB_ROW ? 0 : -ENOENT;
}

int server_db_cluster_keys_get(struct server_db *db, uint64_t *out_serial, uint8_t **out_sealed,
                               size_t *out_len, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_CLUSTER_KEYS_GET, &st, diag);
  if (err)
    return err;
  int rc = db_step(st);
  if (rc < 0) {
    db_done(st);
    return db_fail(db, rc, "read the cluster's keys", diag);
  }
  if (rc != DB_ROW) {
    db_done(st);
    return -ENOENT;
  }
  int64_t serial = db_col_int(st, 0), stored = db_col_int(st, 1);
  size_t len = 0;
  const void *p = db_col_blob_ptr(st, 2, &len);
  if (stored < 0 || (uint64_t)stored > SERVER_DB_CLUSTER_KEYS_MAX || !p || len != (size_t)stored) {
    db_done(st);
    return cordon_diag_set(diag, CORDON_E_LIMIT,
                           "the cluster's sealed keys: %lld bytes (at most %u)", (long long)stored,
                           SERVER_DB_CLUSTER_KEYS_MAX);
  }
  uint8_t *copy = malloc(len ? len : 1);
  if (copy)
    memcpy(copy, p, len);
  db_done(st);
  if (!copy)
    return -ENOMEM;
  *out_serial = (uint64_t)serial;
  *out_sealed = copy;
  *out_len = len;
  return 0;
}

int server_db_cluster_keys_put(struct server_db *db, uint64_t serial, const uint8_t *sealed,
                               size_t len, struct cordon_diag *diag) {
  if (serial == 0 || serial > INT64_MAX || len > SERVER_DB_CLUSTER_KEYS_MAX)
    return cordon_diag_set(diag, -EINVAL, "cluster keys: serial %llu, %zu bytes",
                           (unsigned long long)serial, len);
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_CLUSTER_KEYS_PUT, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_int(st, 1, (int64_t)serial, &rc);
  db_bind_blob(st, 2, sealed, len, &rc);
  db_bind_int(st, 3, server_db_now(db), &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
      (err = db_exec_stmt(db, st, "write the cluster's keys", diag)))
    return err;
  return db_changes(db) == 1 ? 0 : -EEXIST;
}
