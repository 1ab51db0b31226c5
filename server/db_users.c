/* Users (server/db.h): a name and an id; every device, code and job
 * belongs to one. */
#include "server/db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/db_internal.h"

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

static void read_user(struct db_st *st, struct server_db_user *u) {
  u->id = db_col_int(st, 0);
  db_col_text(st, 1, u->name, sizeof(u->name));
  u->created = db_col_int(st, 2);
  u->require_approval = (int)db_col_int(st, 3) != 0;
  u->removed = (int)db_col_int(st, 4) != 0;
}

int server_db_user_add(struct server_db *db, const char *name, int64_t *out_id,
                       struct cordon_diag *diag) {
  if (!valid_user_name(name))
    return cordon_diag_set(diag, -EINVAL,
                           "user name must be 1..%d of [A-Za-z0-9._-], starting with a letter "
                           "or digit",
                           SERVER_DB_NAME_MAX);
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_USER_ADD, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, name, &rc);
  db_bind_int(st, 2, server_db_now(db), &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  rc = db_step(st);
  int64_t id = rc == DB_ROW ? db_col_int(st, 0) : 0;
  while (rc == DB_ROW)
    rc = db_step(st);
  if (rc != DB_DONE) {
    err = rc == -EEXIST ? cordon_diag_set(diag, -EEXIST, "user '%s' already exists", name)
                        : db_fail(db, rc, "add user", diag);
    db_done(st);
    return err;
  }
  db_done(st);
  if (out_id)
    *out_id = id;
  return 0;
}

static int user_get(struct server_db *db, enum db_stmt q, int64_t id, const char *name,
                    struct server_db_user *out_user, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  if (name)
    db_bind_text(st, 1, name, &rc);
  else
    db_bind_int(st, 1, id, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  rc = db_step(st);
  if (rc == DB_ROW) {
    read_user(st, out_user);
  } else if (rc == DB_DONE) {
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

int server_db_user_set_require_approval(struct server_db *db, int64_t id, bool on,
                                        struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_USER_SET_APPROVAL, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_int(st, 1, id, &rc);
  db_bind_int(st, 2, on ? 1 : 0, &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
      (err = db_exec_stmt(db, st, "set require_approval", diag)))
    return err;
  return db_changes(db) == 1
             ? 0
             : cordon_diag_set(diag, -ENOENT, "no user with id %lld", (long long)id);
}

/* Run q bound to ?1 = id. */
static int user_exec(struct server_db *db, enum db_stmt q, int64_t id, const char *what,
                     int *out_changes, struct cordon_diag *diag) {
  int err = db_exec_int(db, q, id, what, diag);
  if (err)
    return err;
  if (out_changes)
    *out_changes = db_changes(db);
  return 0;
}

int server_db_user_remove(struct server_db *db, int64_t id, struct cordon_diag *diag) {
  struct server_db_user u;
  int err = server_db_user_get(db, id, &u, diag);
  if (err)
    return err;
  if (u.removed)
    return cordon_diag_set(diag, -EALREADY, "user %s was already removed", u.name);
  if ((err = db_tx_begin(db, diag)))
    return err;
  int changes = 0;
  if ((err = user_exec(db, Q_USER_REVOKE_DEVICES, id, "revoke the user's devices", NULL, diag)) ||
      (err = user_exec(db, Q_USER_BURN_CODES, id, "burn the user's codes", NULL, diag)) ||
      (err = user_exec(db, Q_USER_REMOVE, id, "remove user", &changes, diag)))
    goto out_rollback;
  if (changes != 1) {
    err = cordon_diag_set(diag, -EALREADY, "user %s was already removed", u.name);
    goto out_rollback;
  }
  return db_tx_commit(db, diag);
out_rollback:
  db_tx_rollback(db);
  return err;
}

int server_db_user_list(struct server_db *db, struct server_db_user_list *out_list,
                        struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_USER_LIST, &st, diag);
  if (err)
    return err;
  struct server_db_user_list l = {0};
  size_t cap = 0;
  int rc;
  while ((rc = db_step(st)) == DB_ROW) {
    struct server_db_user *u = db_list_push((void **)&l.items, &l.count, &cap, sizeof(*u));
    if (!u) {
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
      break;
    }
    read_user(st, u);
  }
  if (!err && rc != DB_DONE)
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
