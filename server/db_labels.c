/* Device labels (server/db.h): the device_labels table, and the pure label
 * helpers that `device label`, `dispatch --where` and the daemon's device
 * choice share. */
#include "server/db.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/db_internal.h"

#define LABEL_SYNTAX                                                                               \
  "a label is KEY=VALUE: KEY 1..63 of [a-z0-9._-] starting with a letter or digit, VALUE 1..63 "   \
  "of [A-Za-z0-9._-]"

static bool is_lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_punct(char c) {
  return c == '.' || c == '_' || c == '-';
}

bool server_db_label_key_valid(const char *key) {
  size_t n = key ? strlen(key) : 0;
  if (n == 0 || n > SERVER_DB_LABEL_MAX || !is_lower_alnum(key[0]))
    return false;
  for (size_t i = 1; i < n; i++)
    if (!is_lower_alnum(key[i]) && !is_punct(key[i]))
      return false;
  return true;
}

static bool value_valid(const char *v) {
  size_t n = v ? strlen(v) : 0;
  if (n == 0 || n > SERVER_DB_LABEL_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!is_lower_alnum(v[i]) && !(v[i] >= 'A' && v[i] <= 'Z') && !is_punct(v[i]))
      return false;
  return true;
}

int server_db_label_parse(const char *text, struct server_db_label *out_label,
                          struct cordon_diag *diag) {
  const char *eq = text ? strchr(text, '=') : NULL;
  struct server_db_label l;
  size_t kn = eq ? (size_t)(eq - text) : 0;
  if (!eq || kn == 0 || kn > SERVER_DB_LABEL_MAX || strlen(eq + 1) > SERVER_DB_LABEL_MAX)
    return cordon_diag_set(diag, -EINVAL, "label '%.200s': %s", text ? text : "", LABEL_SYNTAX);
  memcpy(l.key, text, kn);
  l.key[kn] = '\0';
  snprintf(l.value, sizeof(l.value), "%s", eq + 1);
  if (!server_db_label_key_valid(l.key) || !value_valid(l.value))
    return cordon_diag_set(diag, -EINVAL, "label '%.200s': %s", text, LABEL_SYNTAX);
  *out_label = l;
  return 0;
}

int server_db_labels_put(struct server_db_labels *labels, const struct server_db_label *label,
                         struct cordon_diag *diag) {
  if (!server_db_label_key_valid(label->key) || !value_valid(label->value))
    return cordon_diag_set(diag, -EINVAL, "label '%.63s': %s", label->key, LABEL_SYNTAX);
  size_t i = 0;
  while (i < labels->count && strcmp(labels->items[i].key, label->key) < 0)
    i++;
  if (i < labels->count && strcmp(labels->items[i].key, label->key) == 0) {
    labels->items[i] = *label;
    return 0;
  }
  if (labels->count >= SERVER_DB_LABELS_MAX)
    return cordon_diag_set(diag, CORDON_E_LIMIT, "at most %d labels", SERVER_DB_LABELS_MAX);
  memmove(&labels->items[i + 1], &labels->items[i], (labels->count - i) * sizeof(labels->items[0]));
  labels->items[i] = *label;
  labels->count++;
  return 0;
}

const char *server_db_labels_get(const struct server_db_labels *labels, const char *key) {
  for (size_t i = 0; key && i < labels->count; i++)
    if (strcmp(labels->items[i].key, key) == 0)
      return labels->items[i].value;
  return NULL;
}

bool server_db_labels_match(const struct server_db_labels *have,
                            const struct server_db_labels *want,
                            const struct server_db_label **out_missing) {
  for (size_t i = 0; want && i < want->count; i++) {
    const char *v = server_db_labels_get(have, want->items[i].key);
    if (!v || strcmp(v, want->items[i].value) != 0) {
      if (out_missing)
        *out_missing = &want->items[i];
      return false;
    }
  }
  return true;
}

json_t *server_db_labels_to_json(const struct server_db_labels *labels) {
  json_t *o = json_object();
  for (size_t i = 0; o && i < labels->count; i++)
    if (json_object_set_new(o, labels->items[i].key, json_string(labels->items[i].value)) < 0) {
      json_decref(o);
      o = NULL;
    }
  return o;
}

void server_db_labels_format(const struct server_db_labels *labels, char *buf, size_t size) {
  size_t o = 0;
  if (size == 0)
    return;
  buf[0] = '\0';
  for (size_t i = 0; i < labels->count; i++) {
    int n = snprintf(buf + o, size - o, "%s%s=%s", i ? "," : "", labels->items[i].key,
                     labels->items[i].value);
    if (n < 0 || (size_t)n >= size - o) {
      buf[o] = '\0';
      return;
    }
    o += (size_t)n;
  }
}

void db_labels_from_json(const char *text, struct server_db_labels *out) {
  memset(out, 0, sizeof(*out));
  json_t *o = text ? json_loads(text, 0, NULL) : NULL;
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    struct server_db_label l;
    if (!json_is_string(v) || strlen(k) > SERVER_DB_LABEL_MAX ||
        json_string_length(v) > SERVER_DB_LABEL_MAX)
      continue; /* not written by this code: skipped, never a crash */
    snprintf(l.key, sizeof(l.key), "%s", k);
    snprintf(l.value, sizeof(l.value), "%s", json_string_value(v));
    (void)server_db_labels_put(out, &l, NULL);
  }
  json_decref(o);
}

char *db_labels_dump(const struct server_db_labels *labels, int *out_err) {
  *out_err = 0;
  if (!labels || labels->count == 0)
    return NULL;
  json_t *o = server_db_labels_to_json(labels);
  char *s = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(o);
  if (!s)
    *out_err = -ENOMEM;
  return s;
}

/* --- the device_labels table ---------------------------------------------- */

static int label_step(struct server_db *db, enum db_stmt q, const char *id, const char *key,
                      const char *value, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, id, &rc);
  db_bind_text(st, 2, key, &rc);
  if (value)
    db_bind_text(st, 3, value, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  return db_exec_stmt(db, st, "label device", diag);
}

static int label_count(struct server_db *db, const char *id, int64_t *out_n,
                       struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int rc = DB_OK, err = db_stmt_text(db, Q_LABEL_COUNT, id, &st, diag);
  if (err)
    return err;
  rc = db_step(st);
  if (rc == DB_ROW)
    *out_n = db_col_int(st, 0);
  else
    err = db_fail(db, rc, "count labels", diag);
  db_done(st);
  return err;
}

/* Inside the transaction: the device exists. */
static int device_exists(struct server_db *db, const char *id, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int rc = DB_OK, err = db_stmt_text(db, Q_DEVICE_STATE, id, &st, diag);
  if (err)
    return err;
  rc = db_step(st);
  if (rc == DB_DONE)
    err = cordon_diag_set(diag, -ENOENT, "no device '%s'", id);
  else if (rc != DB_ROW)
    err = db_fail(db, rc, "get device", diag);
  db_done(st);
  return err;
}

static int label_read(struct server_db *db, const char *id, struct server_db_labels *out,
                      struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int rc = DB_OK, err = db_stmt_text(db, Q_LABEL_LIST, id, &st, diag);
  if (err)
    return err;
  rc = db_step(st);
  if (rc == DB_ROW)
    db_labels_from_json(db_col_str(st, 0), out);
  else
    err = db_fail(db, rc, "read labels", diag);
  db_done(st);
  return err;
}

int server_db_device_label(struct server_db *db, const char *id, const struct server_db_label *set,
                           size_t n_set, const char *const *remove, size_t n_remove,
                           struct server_db_labels *out_labels, struct cordon_diag *diag) {
  for (size_t i = 0; i < n_set; i++)
    if (!server_db_label_key_valid(set[i].key) || !value_valid(set[i].value))
      return cordon_diag_set(diag, -EINVAL, "label '%.63s=%.63s': %s", set[i].key, set[i].value,
                             LABEL_SYNTAX);
  for (size_t i = 0; i < n_remove; i++)
    if (!server_db_label_key_valid(remove[i]))
      return cordon_diag_set(diag, -EINVAL, "label key '%.200s': %s", remove[i], LABEL_SYNTAX);
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no device '%.*s' (ids are %d hex digits)",
                           CORDON_ID_HEX_LEN, id ? id : "", CORDON_ID_HEX_LEN);
  int err;
  if ((err = db_tx_begin(db, diag)))
    return err;
  err = device_exists(db, id, diag);
  for (size_t i = 0; !err && i < n_remove; i++)
    err = label_step(db, Q_LABEL_REMOVE, id, remove[i], NULL, diag);
  for (size_t i = 0; !err && i < n_set; i++)
    err = label_step(db, Q_LABEL_SET, id, set[i].key, set[i].value, diag);
  int64_t n = 0;
  if (!err)
    err = label_count(db, id, &n, diag);
  if (!err && n > SERVER_DB_LABELS_MAX)
    err = cordon_diag_set(diag, CORDON_E_LIMIT, "a device has at most %d labels (this makes %lld)",
                          SERVER_DB_LABELS_MAX, (long long)n);
  if (!err)
    err = db_tx_commit(db, diag);
  if (err) {
    db_tx_rollback(db);
    return err;
  }
  if (out_labels)
    return label_read(db, id, out_labels, diag);
  return 0;
}
