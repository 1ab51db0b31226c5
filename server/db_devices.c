/* Devices (server/db.h): added by pairing (with the code consumed in the
 * same transaction) or directly, updated from every hello, revoked for
 * good. */
#include "server/db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/db_internal.h"

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

static int check_device_info(const struct server_db_device_info *info, bool need_name,
                             struct cordon_diag *diag) {
  if (!info)
    return cordon_diag_set(diag, -EINVAL, "device info missing");
  if ((need_name || info->name) && !valid_display_text(info->name, SERVER_DB_NAME_MAX))
    return cordon_diag_set(diag, -EINVAL,
                           "device name must be 1..%d bytes of UTF-8 without control characters",
                           SERVER_DB_NAME_MAX);
  if (info->platform && !db_valid_token(info->platform, SERVER_DB_PLATFORM_MAX))
    return cordon_diag_set(diag, -EINVAL, "platform must be 1..%d of [a-z0-9_-]",
                           SERVER_DB_PLATFORM_MAX);
  if (info->has_level && !sandbox_level_name(info->best_level))
    return cordon_diag_set(diag, -EINVAL, "unknown sandbox level %d", (int)info->best_level);
  if (info->downgrade_reason && !db_valid_token(info->downgrade_reason, SERVER_DB_CODE_MAX))
    return cordon_diag_set(diag, -EINVAL, "downgrade reason must be 1..%d of [a-z0-9_-]",
                           SERVER_DB_CODE_MAX);
  if (info->facts_json && !db_valid_json(info->facts_json, SERVER_DB_FACTS_MAX, true))
    return cordon_diag_set(diag, -EINVAL, "device facts must be a JSON object of at most %d bytes",
                           SERVER_DB_FACTS_MAX);
  if (info->max_jobs < 0 || info->max_jobs > 1024)
    return cordon_diag_set(diag, -EINVAL, "max_jobs %d out of range 0..1024", info->max_jobs);
  return 0;
}

static int read_device(struct db_st *st, struct server_db_device *d) {
  memset(d, 0, sizeof(*d));
  db_col_text(st, 0, d->id, sizeof(d->id));
  d->user_id = db_col_int(st, 1);
  db_col_text(st, 2, d->owner, sizeof(d->owner));
  db_col_text(st, 3, d->name, sizeof(d->name));
  db_col_text(st, 4, d->platform, sizeof(d->platform));
  db_col_blob(st, 5, d->public_key, sizeof(d->public_key));
  const char *level = db_col_str(st, 6);
  enum sandbox_level lv;
  if (level && sandbox_level_parse(level, &lv) == 0) {
    d->has_level = true;
    d->best_level = lv;
  }
  db_col_text(st, 7, d->downgrade_reason, sizeof(d->downgrade_reason));
  d->max_jobs = (int)db_col_int(st, 9);
  const char *state = db_col_str(st, 10);
  d->state =
      state && strcmp(state, "active") == 0 ? SERVER_DB_DEVICE_ACTIVE : SERVER_DB_DEVICE_REVOKED;
  d->online = (int)db_col_int(st, 11) != 0;
  d->last_seen = db_col_int(st, 12);
  d->created = db_col_int(st, 13);
  db_labels_from_json(db_col_str(st, 14), &d->labels);
  db_col_text(st, 15, d->address, sizeof(d->address));
  if (d->state == SERVER_DB_DEVICE_ACTIVE && (int)db_col_int(st, 16) == 0)
    d->state = SERVER_DB_DEVICE_PENDING;
  return db_col_dup(st, 8, &d->facts_json);
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

/* Whether another device of user_id that is not revoked is called name
 * (except_id: the device itself, or NULL). */
static int name_taken(struct server_db *db, int64_t user_id, const char *name,
                      const char *except_id, bool *out_taken, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_DEVICE_NAME_TAKEN, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_int(st, 1, user_id, &rc);
  db_bind_text(st, 2, name, &rc);
  db_bind_text(st, 3, except_id, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  rc = db_step(st);
  if (rc == DB_ROW)
    *out_taken = db_col_int(st, 0) > 0;
  else
    err = db_fail(db, rc, "check device name", diag);
  db_done(st);
  return err;
}

/* want, or want-2, want-3, ... : the first name free for user_id. The base
 * is cut at a UTF-8 character boundary so that the result fits. */
static int free_name(struct server_db *db, int64_t user_id, const char *want,
                     char out[SERVER_DB_NAME_MAX + 1], struct cordon_diag *diag) {
  bool taken = false;
  int err = name_taken(db, user_id, want, NULL, &taken, diag);
  if (err)
    return err;
  snprintf(out, SERVER_DB_NAME_MAX + 1, "%s", want);
  for (int n = 2; taken && n < 1000; n++) {
    char suffix[8];
    int sl = snprintf(suffix, sizeof(suffix), "-%d", n);
    size_t base = strlen(want);
    if (base > SERVER_DB_NAME_MAX - (size_t)sl)
      base = SERVER_DB_NAME_MAX - (size_t)sl;
    while (base > 0 && ((unsigned char)want[base] & 0xc0) == 0x80)
      base--;
    snprintf(out, SERVER_DB_NAME_MAX + 1, "%.*s%s", (int)base, want, suffix);
    if ((err = name_taken(db, user_id, out, NULL, &taken, diag)))
      return err;
  }
  return taken ? cordon_diag_set(diag, -EEXIST, "no free name like '%s'", want) : 0;
}

static int device_insert(struct server_db *db, int64_t user_id,
                         const uint8_t public_key[SERVER_DB_PUBKEY_SIZE],
                         const struct server_db_device_info *info, char out_id[CORDON_ID_HEX_SIZE],
                         struct cordon_diag *diag) {
  char id[CORDON_ID_HEX_SIZE], name[SERVER_DB_NAME_MAX + 1];
  db_new_id(id);
  int err = free_name(db, user_id, info->name, name, diag);
  if (err)
    return err;
  struct db_st *st = NULL;
  if ((err = db_stmt(db, Q_DEVICE_ADD, &st, diag)))
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, id, &rc);
  db_bind_int(st, 2, user_id, &rc);
  db_bind_text(st, 3, name, &rc);
  db_bind_text(st, 4, info->platform, &rc);
  db_bind_blob(st, 5, public_key, SERVER_DB_PUBKEY_SIZE, &rc);
  db_bind_text(st, 6, info->has_level ? sandbox_level_name(info->best_level) : NULL, &rc);
  db_bind_text(st, 7, info->downgrade_reason, &rc);
  db_bind_text(st, 8, info->facts_json, &rc);
  db_bind_int(st, 9, info->max_jobs, &rc);
  db_bind_int(st, 10, server_db_now(db), &rc);
  db_bind_int(st, 11, info->pending ? 1 : 0, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  rc = db_step(st);
  if (rc != DB_DONE) {
    err = rc;
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
  if ((err = db_tx_begin(db, diag)))
    return err;
  if ((err = device_insert(db, user_id, public_key, info, out_id, diag)) ||
      (err = db_tx_commit(db, diag)))
    db_tx_rollback(db);
  return err;
}

/* [0-9a-f]{4,32}: what may be (the start of) a device id */
static bool id_prefix_valid(const char *s) {
  size_t n = strlen(s);
  if (n < 4 || n > CORDON_ID_HEX_LEN)
    return false;
  return strspn(s, "0123456789abcdef") == n;
}

int server_db_device_resolve(struct server_db *db, const char *text, int64_t user_id,
                             struct server_db_device *out_dev, struct cordon_diag *diag) {
  if (!text || !*text)
    return cordon_diag_set(diag, -ENOENT, "no device ''");
  struct server_db_device d;
  int err;
  if (cordon_id_hex_valid(text)) {
    err = server_db_device_get(db, text, &d, diag);
    if (err != -ENOENT) {
      if (!err && user_id && d.user_id != user_id) {
        server_db_device_release(&d);
        return cordon_diag_set(diag, -ENOENT, "no device '%s' of that user", text);
      }
      if (!err)
        *out_dev = d;
      return err;
    }
  }
  struct db_st *st = NULL;
  if ((err = db_stmt(db, Q_DEVICE_FIND, &st, diag)))
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, text, &rc);
  db_bind_int(st, 2, user_id, &rc);
  db_bind_int(st, 3, id_prefix_valid(text), &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  /* rows: name matches (not revoked, then revoked), then prefix matches */
  enum { ACTIVE_NAME, REVOKED_NAME, PREFIX, KINDS };
  char ids[9][CORDON_ID_HEX_SIZE], owners[9][SERVER_DB_NAME_MAX + 1];
  int kinds[9];
  size_t n = 0, per[KINDS] = {0};
  while ((rc = db_step(st)) == DB_ROW && n < 9) {
    db_col_text(st, 0, ids[n], sizeof(ids[n]));
    db_col_text(st, 1, owners[n], sizeof(owners[n]));
    const char *state = db_col_str(st, 2);
    bool by_name = (int)db_col_int(st, 3) != 0;
    kinds[n] = !by_name                                 ? PREFIX
               : state && strcmp(state, "revoked") == 0 ? REVOKED_NAME
                                                        : ACTIVE_NAME;
    per[kinds[n]]++;
    n++;
  }
  if (rc != DB_ROW && rc != DB_DONE)
    err = db_fail(db, rc, "find device", diag);
  db_done(st);
  if (err)
    return err;
  int kind = per[ACTIVE_NAME] ? ACTIVE_NAME : per[REVOKED_NAME] ? REVOKED_NAME : PREFIX;
  if (per[kind] == 0)
    return cordon_diag_set(diag, -ENOENT, "no device '%s'%s", text, user_id ? " of that user" : "");
  /* a name (a device chose it at pairing) never hides another device
   * whose id starts with the same text: both are candidates */
  bool shadow = false;
  for (size_t i = 0; i < n && kind != PREFIX; i++)
    for (size_t j = 0; kinds[i] == PREFIX && j < n; j++)
      shadow |= kinds[j] == kind && strcmp(ids[i], ids[j]) != 0;
  if (per[kind] > 1 || shadow) {
    char list[400] = "";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
      if (kinds[i] != kind && !(shadow && kinds[i] == PREFIX))
        continue;
      int w = snprintf(list + o, sizeof(list) - o, "%s%s (%s)", o ? ", " : "", ids[i], owners[i]);
      if (w < 0 || (size_t)w >= sizeof(list) - o)
        break;
      o += (size_t)w;
    }
    return cordon_diag_set(diag, -ENOTUNIQ, "'%s' names %s devices: %s; %s", text,
                           per[kind] > 8 ? "many" : "several", list,
                           kind == PREFIX ? "give more of the id"
                           : shadow       ? "a name and the start of an id: give the whole id"
                                          : "add --user or give an id");
  }
  for (size_t i = 0; i < n; i++)
    if (kinds[i] == kind)
      return server_db_device_get(db, ids[i], out_dev, diag);
  return cordon_diag_set(diag, -ENOENT, "no device '%s'", text);
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
  if ((err = db_tx_begin(db, diag)))
    return err;
  int64_t user;
  char id[CORDON_ID_HEX_SIZE];
  if ((err = db_code_consume(db, code_id, &user, diag)) ||
      (err = device_insert(db, user, public_key, info, id, diag)) ||
      (err = db_tx_commit(db, diag))) {
    db_tx_rollback(db);
    return err;
  }
  memcpy(out_device_id, id, CORDON_ID_HEX_SIZE);
  if (out_user_id)
    *out_user_id = user;
  return 0;
}

static int device_get(struct server_db *db, enum db_stmt q, const char *id, const uint8_t *key,
                      struct server_db_device *out_dev, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  if (id)
    db_bind_text(st, 1, id, &rc);
  else
    db_bind_blob(st, 1, key, SERVER_DB_PUBKEY_SIZE, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  rc = db_step(st);
  struct server_db_device d;
  if (rc == DB_ROW) {
    if (read_device(st, &d) < 0) {
      server_db_device_release(&d);
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
    }
  } else if (rc == DB_DONE) {
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
  if (!cordon_id_hex_valid(id))
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
  struct db_st *st = NULL;
  int rc = DB_OK, err = db_stmt_text(db, Q_DEVICE_STATE, id, &st, diag);
  if (err)
    return err;
  rc = db_step(st);
  if (rc == DB_ROW) {
    const char *s = db_col_str(st, 0);
    *out_revoked = s && strcmp(s, "revoked") == 0;
  } else if (rc == DB_DONE) {
    err = cordon_diag_set(diag, -ENOENT, "no device '%.*s'", CORDON_ID_HEX_LEN, id);
  } else {
    err = db_fail(db, rc, "get device", diag);
  }
  db_done(st);
  return err;
}

/* Run an UPDATE keyed by device id (?1) whose other bindings are set. */
static int device_update(struct server_db *db, struct db_st *st, const char *what, int *out_changes,
                         struct cordon_diag *diag) {
  int err = db_exec_stmt(db, st, what, diag);
  if (err)
    return err;
  *out_changes = db_changes(db);
  return 0;
}

int server_db_device_set_online(struct server_db *db, const char *id, bool online,
                                struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_DEVICE_SET_ONLINE, &st, diag);
  if (err)
    return err;
  int rc = DB_OK, changes = 0;
  db_bind_text(st, 1, id, &rc);
  db_bind_int(st, 2, online ? 1 : 0, &rc);
  db_bind_int(st, 3, server_db_now(db), &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
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
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_DEVICE_TOUCH, &st, diag);
  if (err)
    return err;
  int rc = DB_OK, changes = 0;
  db_bind_text(st, 1, id, &rc);
  db_bind_int(st, 2, server_db_now(db), &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
      (err = device_update(db, st, "touch device", &changes, diag)))
    return err;
  return changes == 1 ? 0 : cordon_diag_set(diag, -ENOENT, "no device '%s'", id);
}

int server_db_device_update_info(struct server_db *db, const char *id,
                                 const struct server_db_device_info *info,
                                 struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  int err = check_device_info(info, false, diag);
  if (err)
    return err;
  struct db_st *st = NULL;
  if ((err = db_stmt(db, Q_DEVICE_UPDATE_INFO, &st, diag)))
    return err;
  int rc = DB_OK, changes = 0;
  db_bind_text(st, 1, id, &rc);
  db_bind_text(st, 2, info->name, &rc);
  db_bind_text(st, 3, info->platform, &rc);
  db_bind_text(st, 4, info->has_level ? sandbox_level_name(info->best_level) : NULL, &rc);
  db_bind_text(st, 5, info->downgrade_reason, &rc);
  db_bind_text(st, 6, info->facts_json, &rc);
  db_bind_int(st, 7, info->max_jobs, &rc);
  db_bind_text(st, 8, info->address && strlen(info->address) < 64 ? info->address : NULL, &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
      (err = device_update(db, st, "update device", &changes, diag)))
    return err;
  return changes == 1 ? 0 : cordon_diag_set(diag, -ENOENT, "no device '%s'", id);
}

int server_db_device_set_all_offline(struct server_db *db, struct cordon_diag *diag) {
  return db_simple(db, Q_DEVICE_ALL_OFFLINE, "set devices offline", diag);
}

int server_db_device_revoke(struct server_db *db, const char *id, struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no device '%.*s' (ids are %d hex digits)",
                           CORDON_ID_HEX_LEN, id ? id : "", CORDON_ID_HEX_LEN);
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_DEVICE_REVOKE, &st, diag);
  if (err)
    return err;
  int rc = DB_OK, changes = 0;
  db_bind_text(st, 1, id, &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
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
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_DEVICE_LIST, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_int(st, 1, user_id, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  struct server_db_device_list l = {0};
  size_t cap = 0;
  while ((rc = db_step(st)) == DB_ROW) {
    struct server_db_device *d = db_list_push((void **)&l.items, &l.count, &cap, sizeof(*d));
    if (!d || read_device(st, d) < 0) {
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
      break;
    }
  }
  if (!err && rc != DB_DONE)
    err = db_fail(db, rc, "list devices", diag);
  db_done(st);
  if (err) {
    server_db_device_list_release(&l);
    return err;
  }
  *out_list = l;
  return 0;
}

int server_db_device_count_by_state(struct server_db *db, size_t out_counts[2],
                                    struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_DEVICE_COUNT_BY_STATE, &st, diag);
  if (err)
    return err;
  size_t counts[2] = {0, 0};
  int rc;
  while ((rc = db_step(st)) == DB_ROW) {
    const char *state = db_col_str(st, 0);
    counts[state && strcmp(state, "active") == 0 ? SERVER_DB_DEVICE_ACTIVE
                                                 : SERVER_DB_DEVICE_REVOKED] +=
        (size_t)db_col_int(st, 1);
  }
  if (rc != DB_DONE)
    err = db_fail(db, rc, "count devices by state", diag);
  db_done(st);
  if (!err)
    memcpy(out_counts, counts, sizeof(counts));
  return err;
}

int server_db_device_approve(struct server_db *db, const char *id, struct cordon_diag *diag) {
  struct server_db_device d;
  int err = server_db_device_get(db, id, &d, diag);
  if (err)
    return err;
  enum server_db_device_state was = d.state;
  server_db_device_release(&d);
  if (was == SERVER_DB_DEVICE_REVOKED)
    return cordon_diag_set(diag, -EPERM, "device %s is revoked", id);
  if (was != SERVER_DB_DEVICE_PENDING)
    return cordon_diag_set(diag, -EALREADY, "device %s is not pending", id);
  struct db_st *st = NULL;
  if ((err = db_stmt(db, Q_DEVICE_APPROVE, &st, diag)))
    return err;
  int rc = DB_OK, changes = 0;
  db_bind_text(st, 1, id, &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
      (err = device_update(db, st, "approve device", &changes, diag)))
    return err;
  return changes == 1 ? 0 : cordon_diag_set(diag, -EALREADY, "device %s is not pending", id);
}

int server_db_device_rename(struct server_db *db, const char *id, const char *name,
                            struct cordon_diag *diag) {
  if (!valid_display_text(name, SERVER_DB_NAME_MAX))
    return cordon_diag_set(diag, -EINVAL,
                           "a device name is 1..%d bytes of UTF-8 text without controls",
                           SERVER_DB_NAME_MAX);
  struct server_db_device d;
  int err = server_db_device_get(db, id, &d, diag);
  if (err)
    return err;
  int64_t user = d.user_id;
  bool revoked = d.state == SERVER_DB_DEVICE_REVOKED;
  server_db_device_release(&d);
  if (revoked)
    return cordon_diag_set(diag, -EPERM, "device %s is revoked", id);
  bool taken = false;
  if ((err = db_tx_begin(db, diag)))
    return err;
  struct db_st *st = NULL;
  int rc = DB_OK, changes = 0;
  if ((err = name_taken(db, user, name, id, &taken, diag)))
    goto out_rollback;
  if (taken) {
    err = cordon_diag_set(diag, -EEXIST, "another device of its user is called '%s'", name);
    goto out_rollback;
  }
  if ((err = db_stmt(db, Q_DEVICE_RENAME, &st, diag)))
    goto out_rollback;
  db_bind_text(st, 1, id, &rc);
  db_bind_text(st, 2, name, &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
      (err = device_update(db, st, "rename device", &changes, diag)))
    goto out_rollback;
  if (changes != 1) {
    err = cordon_diag_set(diag, -EPERM, "device %s is revoked", id);
    goto out_rollback;
  }
  return db_tx_commit(db, diag);
out_rollback:
  db_tx_rollback(db);
  return err;
}
int server_db_device_sign_key(struct server_db *db, const char *id,
                              uint8_t out_key[SERVER_DB_SIGN_KEY_SIZE], struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  struct db_st *st = NULL;
  int rc = DB_OK, err = db_stmt_text(db, Q_DEVICE_SIGN_KEY, id, &st, diag);
  if (err)
    return err;
  rc = db_step(st);
  if (rc == DB_ROW) {
    size_t n = 0;
    if (!db_col_blob_ptr(st, 0, &n) || n != SERVER_DB_SIGN_KEY_SIZE)
      err = cordon_diag_set(diag, -ENODATA, "device %s has no signing key", id);
    else
      db_col_blob(st, 0, out_key, SERVER_DB_SIGN_KEY_SIZE);
  } else if (rc == DB_DONE) {
    err = cordon_diag_set(diag, -ENOENT, "no device '%s'", id);
  } else {
    err = db_fail(db, rc, "device signing key", diag);
  }
  db_done(st);
  return err;
}

int server_db_device_register_sign_key(struct server_db *db, const char *id,
                                       const uint8_t key[SERVER_DB_SIGN_KEY_SIZE],
                                       struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_DEVICE_SET_SIGN_KEY, &st, diag);
  if (err)
    return err;
  int rc = DB_OK, changes = 0;
  db_bind_text(st, 1, id, &rc);
  db_bind_blob(st, 2, key, SERVER_DB_SIGN_KEY_SIZE, &rc);
  if ((err = db_bind_check(db, st, rc, diag)) ||
      (err = device_update(db, st, "register signing key", &changes, diag)))
    return err;
  if (changes == 1)
    return 0;
  uint8_t have[SERVER_DB_SIGN_KEY_SIZE];
  if ((err = server_db_device_sign_key(db, id, have, diag)))
    return err;
  return memcmp(have, key, sizeof(have)) == 0
             ? -EALREADY
             : cordon_diag_set(diag, -EEXIST, "device %s has another signing key", id);
}
