/* Jobs (server/db.h): the state graph, conditional transitions, the queue
 * (jobs that wait for a device), results recorded exactly once, and the
 * lists the daemon and the commands read. */
#include "server/db.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/db_internal.h"

static const char *const job_state_names[] = {
    [SERVER_DB_JOB_QUEUED] = "queued",       [SERVER_DB_JOB_SENT] = "sent",
    [SERVER_DB_JOB_RUNNING] = "running",     [SERVER_DB_JOB_DONE] = "done",
    [SERVER_DB_JOB_FAILED] = "failed",       [SERVER_DB_JOB_EXPIRED] = "expired",
    [SERVER_DB_JOB_CANCELLED] = "cancelled",
};
#define JOB_STATE_COUNT (sizeof(job_state_names) / sizeof(job_state_names[0]))
_Static_assert(JOB_STATE_COUNT == SERVER_DB_JOB_STATE_COUNT, "db.h counts every job state");

const char *server_db_job_state_name(enum server_db_job_state s) {
  return (unsigned)s < JOB_STATE_COUNT ? job_state_names[s] : NULL;
}

int server_db_job_state_parse(const char *name, enum server_db_job_state *out_state) {
  for (size_t i = 0; name && i < JOB_STATE_COUNT; i++)
    if (strcmp(name, job_state_names[i]) == 0) {
      *out_state = (enum server_db_job_state)i;
      return 0;
    }
  return -EINVAL;
}

bool server_db_job_state_is_final(enum server_db_job_state s) {
  return s == SERVER_DB_JOB_DONE || s == SERVER_DB_JOB_FAILED || s == SERVER_DB_JOB_EXPIRED ||
         s == SERVER_DB_JOB_CANCELLED;
}

bool server_db_job_transition_is_legal(enum server_db_job_state from, enum server_db_job_state to) {
  if (!server_db_job_state_name(from) || !server_db_job_state_name(to))
    return false;
  if (server_db_job_state_is_final(from))
    return false;
  switch (to) {
  case SERVER_DB_JOB_SENT:
    return from == SERVER_DB_JOB_QUEUED;
  case SERVER_DB_JOB_RUNNING:
    return from == SERVER_DB_JOB_SENT;
  case SERVER_DB_JOB_DONE:
    return from == SERVER_DB_JOB_RUNNING;
  case SERVER_DB_JOB_FAILED:
  case SERVER_DB_JOB_EXPIRED:
  case SERVER_DB_JOB_CANCELLED:
    return true;
  default:
    return false;
  }
}

static int read_job(struct db_st *st, struct server_db_job *j) {
  memset(j, 0, sizeof(*j));
  db_col_text(st, 0, j->id, sizeof(j->id));
  j->user_id = db_col_int(st, 1);
  db_col_text(st, 2, j->user, sizeof(j->user));
  db_col_text(st, 3, j->device_id, sizeof(j->device_id));
  db_col_blob(st, 4, j->package_hash, sizeof(j->package_hash));
  enum server_db_job_state s = SERVER_DB_JOB_FAILED;
  server_db_job_state_parse(db_col_str(st, 6), &s);
  j->state = s;
  db_col_text(st, 7, j->error, sizeof(j->error));
  j->created = db_col_int(st, 9);
  j->updated = db_col_int(st, 10);
  j->deadline = db_col_int(st, 11);
  j->queue_expires = db_col_int(st, 12);
  db_labels_from_json(db_col_str(st, 13), &j->where);
  db_col_text(st, 14, j->package_name, sizeof(j->package_name));
  db_col_text(st, 15, j->package_version, sizeof(j->package_version));
  db_col_text(st, 16, j->device_name, sizeof(j->device_name));
  if (db_col_dup(st, 5, &j->args_json) < 0 || db_col_dup(st, 8, &j->result_json) < 0)
    return -ENOMEM;
  if (!j->args_json && !(j->args_json = strdup("[]")))
    return -ENOMEM;
  return 0;
}

void server_db_job_release(struct server_db_job *job) {
  if (!job)
    return;
  free(job->args_json);
  free(job->result_json);
  job->args_json = NULL;
  job->result_json = NULL;
}

void server_db_job_list_release(struct server_db_job_list *list) {
  if (!list)
    return;
  for (size_t i = 0; i < list->count; i++)
    server_db_job_release(&list->items[i]);
  free(list->items);
  list->items = NULL;
  list->count = 0;
}

int server_db_job_add(struct server_db *db, const struct server_db_job_new *job,
                      char out_id[CORDON_ID_HEX_SIZE], struct cordon_diag *diag) {
  if (!job || !job->package_hash)
    return cordon_diag_set(diag, -EINVAL, "job without a package hash");
  if (job->device_id && !cordon_id_hex_valid(job->device_id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  if (job->args_json && !db_valid_json(job->args_json, SERVER_DB_ARGS_MAX, false))
    return cordon_diag_set(diag, -EINVAL, "job args must be a JSON array of at most %d bytes",
                           SERVER_DB_ARGS_MAX);
  if (job->deadline < 0 || job->queue_expires < 0)
    return cordon_diag_set(diag, -EINVAL, "negative deadline");
  for (size_t i = 0; job->where && i < job->where->count; i++)
    if (!server_db_label_key_valid(job->where->items[i].key))
      return cordon_diag_set(diag, -EINVAL, "bad label key in the job's constraints");
  if (job->key && !server_db_job_key_valid(job->key))
    return cordon_diag_set(diag, -EINVAL, "a key is 1 to %d printable ASCII characters",
                           SERVER_DB_KEY_MAX);
  bool sent = job->ticket != NULL;
  if (sent && (job->ticket_len == 0 || job->ticket_len > SERVER_DB_TICKET_MAX))
    return cordon_diag_set(diag, -EINVAL, "a ticket is 1..%d bytes", SERVER_DB_TICKET_MAX);
  if (sent && (!job->device_id || job->deadline <= 0 || !job->id || !cordon_id_hex_valid(job->id)))
    return cordon_diag_set(diag, -EINVAL, "a job added as sent needs its id, device and deadline");
  char id[CORDON_ID_HEX_SIZE];
  if (sent)
    memcpy(id, job->id, CORDON_ID_HEX_SIZE);
  else
    db_new_job_id(id);
  int err = 0;
  char *where = db_labels_dump(job->where, &err);
  if (err)
    return cordon_diag_set(diag, err, "out of memory");
  struct db_st *st = NULL;
  if ((err = db_stmt(db, Q_JOB_ADD, &st, diag))) {
    free(where);
    return err;
  }
  int rc = DB_OK;
  db_bind_text(st, 1, id, &rc);
  db_bind_int(st, 2, job->user_id, &rc);
  db_bind_text(st, 3, job->device_id, &rc);
  db_bind_blob(st, 4, job->package_hash, SERVER_DB_HASH_SIZE, &rc);
  db_bind_text(st, 5, job->args_json ? job->args_json : "[]", &rc);
  db_bind_int(st, 6, server_db_now(db), &rc);
  db_bind_int(st, 7, job->deadline, &rc);
  db_bind_int(st, 8, job->queue_expires, &rc);
  db_bind_text(st, 9, where, &rc);
  db_bind_text(st, 10, job->package_name, &rc);
  db_bind_text(st, 11, job->package_version, &rc);
  db_bind_text(st, 12, job->key, &rc);
  db_bind_text(st, 13, server_db_job_state_name(sent ? SERVER_DB_JOB_SENT : SERVER_DB_JOB_QUEUED),
               &rc);
  db_bind_blob(st, 14, job->ticket, job->ticket_len, &rc);
  free(where);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  /* A job with a deadline is sent at once: its row becomes durable with
   * the synced queued -> sent commit that follows (or the synced failure),
   * before anyone is told its id; lost in a crash before that, it was
   * never anybody's. A queued job's row, and one added sent (with its
   * ticket: this is its queued -> sent), are synced here. */
  bool now = job->deadline > 0 && !sent;
  if (now)
    db_sync_relax(db);
  rc = db_step(st);
  if (now)
    db_sync_restore(db);
  if (rc != DB_DONE) {
    if (job->key && rc == -EEXIST)
      err = cordon_diag_set(diag, -EEXIST, "a job with this key exists");
    else
      err = rc == -ENOENT ? cordon_diag_set(diag, -ENOENT, "no such user or device for the job")
                          : db_fail(db, rc, "add job", diag);
  }
  db_done(st);
  if (!err)
    memcpy(out_id, id, CORDON_ID_HEX_SIZE);
  return err;
}

/* Why an UPDATE keyed by job id changed nothing. */
static int job_peek(struct server_db *db, const char *id, enum server_db_job_state *out_state,
                    char out_device[CORDON_ID_HEX_SIZE], bool *out_has_result,
                    struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int rc = DB_OK, err = db_stmt_text(db, Q_JOB_PEEK, id, &st, diag);
  if (err)
    return err;
  rc = db_step(st);
  if (rc == DB_ROW) {
    enum server_db_job_state s = SERVER_DB_JOB_FAILED;
    server_db_job_state_parse(db_col_str(st, 0), &s);
    *out_state = s;
    db_col_text(st, 1, out_device, CORDON_ID_HEX_SIZE);
    *out_has_result = (int)db_col_int(st, 2) != 0;
  } else if (rc == DB_DONE) {
    err = cordon_diag_set(diag, -ENOENT, "no job '%s'", id);
  } else {
    err = db_fail(db, rc, "get job", diag);
  }
  db_done(st);
  return err;
}

int server_db_job_transition(struct server_db *db, const char *id, enum server_db_job_state from,
                             enum server_db_job_state to, const char *error_code,
                             struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no such job");
  if (!server_db_job_transition_is_legal(from, to))
    return cordon_diag_set(diag, -EPERM, "illegal job transition %s -> %s",
                           server_db_job_state_name(from) ? server_db_job_state_name(from) : "?",
                           server_db_job_state_name(to) ? server_db_job_state_name(to) : "?");
  if (error_code && !db_valid_token(error_code, SERVER_DB_CODE_MAX))
    return cordon_diag_set(diag, -EINVAL, "error code must be 1..%d of [a-z0-9_-]",
                           SERVER_DB_CODE_MAX);
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_JOB_TRANSITION, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, id, &rc);
  db_bind_text(st, 2, server_db_job_state_name(from), &rc);
  db_bind_text(st, 3, server_db_job_state_name(to), &rc);
  db_bind_text(st, 4, error_code, &rc);
  db_bind_int(st, 5, server_db_now(db), &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  /* sent -> running is not synced: lost in a crash, the job is `sent`
   * again, and a sent job is decided as a running one (its result is
   * taken from either, its deadline expires either) */
  bool relaxed = to == SERVER_DB_JOB_RUNNING;
  if (relaxed)
    db_sync_relax(db);
  err = db_exec_stmt(db, st, "job transition", diag);
  if (relaxed)
    db_sync_restore(db);
  if (err)
    return err;
  if (db_changes(db) == 1)
    return 0;
  enum server_db_job_state now_state;
  char dev[CORDON_ID_HEX_SIZE];
  bool has_result;
  if ((err = job_peek(db, id, &now_state, dev, &has_result, diag)))
    return err;
  return cordon_diag_set(diag, -ESTALE, "job %s is %s, not %s", id,
                         server_db_job_state_name(now_state), server_db_job_state_name(from));
}

int server_db_job_send(struct server_db *db, const char *id, const char *device_id,
                       int64_t deadline, struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no such job");
  if (!cordon_id_hex_valid(device_id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  if (deadline < 0)
    return cordon_diag_set(diag, -EINVAL, "negative deadline");
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_JOB_SEND, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, id, &rc);
  db_bind_text(st, 2, device_id, &rc);
  db_bind_int(st, 3, deadline, &rc);
  db_bind_int(st, 4, server_db_now(db), &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  rc = db_step(st);
  if (rc != DB_DONE)
    err = rc == -ENOENT ? cordon_diag_set(diag, -ENOENT, "no device '%s'", device_id)
                        : db_fail(db, rc, "send job", diag);
  db_done(st);
  if (err)
    return err;
  if (db_changes(db) == 1)
    return 0;
  enum server_db_job_state s;
  char dev[CORDON_ID_HEX_SIZE];
  bool has_result;
  if ((err = job_peek(db, id, &s, dev, &has_result, diag)))
    return err;
  if (s != SERVER_DB_JOB_QUEUED)
    return cordon_diag_set(diag, -ESTALE, "job %s is %s, not queued", id,
                           server_db_job_state_name(s));
  return cordon_diag_set(diag, -EPERM, "job %s waits for device %s", id, dev);
}

int server_db_job_record_result(struct server_db *db, const char *id, const char *device_id,
                                enum server_db_job_state final, const char *error_code,
                                const char *result_json, enum server_db_job_state *out_state,
                                struct cordon_diag *diag) {
  return server_db_job_record_signed_result(db, id, device_id, final, error_code, result_json, NULL,
                                            0, out_state, diag);
}

/* checked: result_json is a JSON object this file wrote itself */
static int record_result(struct server_db *db, const char *id, const char *device_id,
                         enum server_db_job_state final, const char *error_code,
                         const char *result_json, bool checked, const uint8_t *receipt,
                         size_t receipt_len, enum server_db_job_state *out_state,
                         struct cordon_diag *diag);

int server_db_job_record_signed_result(struct server_db *db, const char *id, const char *device_id,
                                       enum server_db_job_state final, const char *error_code,
                                       const char *result_json, const uint8_t *receipt,
                                       size_t receipt_len, enum server_db_job_state *out_state,
                                       struct cordon_diag *diag) {
  return record_result(db, id, device_id, final, error_code, result_json, false, receipt,
                       receipt_len, out_state, diag);
}

int server_db_job_record_signed_result_obj(struct server_db *db, const char *id,
                                           const char *device_id, enum server_db_job_state final,
                                           const char *error_code, const json_t *result, size_t max,
                                           const uint8_t *receipt, size_t receipt_len,
                                           enum server_db_job_state *out_state,
                                           struct cordon_diag *diag) {
  if (max == 0 || max > SERVER_DB_RESULT_MAX)
    max = SERVER_DB_RESULT_MAX;
  char *text = json_is_object(result) ? json_dumps(result, JSON_COMPACT) : NULL;
  if (json_is_object(result) && !text)
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  size_t len = text ? strlen(text) : 0;
  int err;
  if (text && len > max)
    err = cordon_diag_set(
        diag, -E2BIG, "the result's JSON is %zu bytes, above the %zu the store takes", len, max);
  else
    err = record_result(db, id, device_id, final, error_code, text, text != NULL, receipt,
                        receipt_len, out_state, diag);
  free(text);
  return err;
}

static int record_result(struct server_db *db, const char *id, const char *device_id,
                         enum server_db_job_state final, const char *error_code,
                         const char *result_json, bool checked, const uint8_t *receipt,
                         size_t receipt_len, enum server_db_job_state *out_state,
                         struct cordon_diag *diag) {
  if (receipt && (receipt_len == 0 || receipt_len > SERVER_DB_RECEIPT_MAX))
    return cordon_diag_set(diag, -EINVAL, "a receipt is 1..%d bytes", SERVER_DB_RECEIPT_MAX);
  if (!cordon_id_hex_valid(id) || !cordon_id_hex_valid(device_id))
    return cordon_diag_set(diag, -ENOENT, "no such job");
  if (final != SERVER_DB_JOB_DONE && final != SERVER_DB_JOB_FAILED)
    return cordon_diag_set(diag, -EINVAL, "a result makes a job done or failed");
  if (error_code && !db_valid_token(error_code, SERVER_DB_CODE_MAX))
    return cordon_diag_set(diag, -EINVAL, "error code must be 1..%d of [a-z0-9_-]",
                           SERVER_DB_CODE_MAX);
  if (!result_json || (!checked && !db_valid_json(result_json, SERVER_DB_RESULT_MAX, true)))
    return cordon_diag_set(diag, -EINVAL, "a job result must be a JSON object of at most %zu bytes",
                           SERVER_DB_RESULT_MAX);
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_JOB_RECORD_RESULT, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, id, &rc);
  db_bind_text(st, 2, device_id, &rc);
  db_bind_text(st, 3, result_json, &rc);
  db_bind_text(st, 4, server_db_job_state_name(final), &rc);
  db_bind_text(st, 5, error_code, &rc);
  db_bind_int(st, 6, server_db_now(db), &rc);
  if (receipt)
    db_bind_blob(st, 7, receipt, receipt_len, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  rc = db_step(st);
  bool updated = false;
  enum server_db_job_state after = final;
  if (rc == DB_ROW) {
    updated = true;
    server_db_job_state_parse(db_col_str(st, 0), &after);
    while ((rc = db_step(st)) == DB_ROW)
      ;
  }
  if (rc != DB_DONE)
    err = rc == -EPERM ? cordon_diag_set(diag, -EALREADY, "job %s already has a result", id)
                       : db_fail(db, rc, "record result", diag);
  db_done(st);
  if (err)
    return err;
  if (!updated) {
    enum server_db_job_state s;
    char dev[CORDON_ID_HEX_SIZE];
    bool has_result;
    if ((err = job_peek(db, id, &s, dev, &has_result, diag)))
      return err;
    if (strcmp(dev, device_id) != 0)
      return cordon_diag_set(diag, -ENOENT, "no job '%s' on device %s", id, device_id);
    if (has_result)
      return cordon_diag_set(diag, -EALREADY, "job %s already has a result", id);
    return cordon_diag_set(diag, -ESTALE, "job %s is %s; it cannot have a result yet", id,
                           server_db_job_state_name(s));
  }
  if (out_state)
    *out_state = after;
  return 0;
}

/* The one row of the bound job query st into *out_job: 0, -ENOENT ("no
 * job 'id'", or "no job with this key" when id is NULL) or the error. */
static int job_one(struct server_db *db, struct db_st *st, const char *id,
                   struct server_db_job *out_job, struct cordon_diag *diag) {
  int err = 0, rc = db_step(st);
  struct server_db_job j;
  if (rc == DB_ROW) {
    if (read_job(st, &j) < 0) {
      server_db_job_release(&j);
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
    }
  } else if (rc == DB_DONE) {
    err = id ? cordon_diag_set(diag, -ENOENT, "no job '%s'", id)
             : cordon_diag_set(diag, -ENOENT, "no job with this key");
  } else {
    err = db_fail(db, rc, id ? "get job" : "find job by key", diag);
  }
  db_done(st);
  if (!err)
    *out_job = j;
  return err;
}

int server_db_job_get(struct server_db *db, const char *id, struct server_db_job *out_job,
                      struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no job '%.*s' (ids are %d hex digits)",
                           CORDON_ID_HEX_LEN, id ? id : "", CORDON_ID_HEX_LEN);
  struct db_st *st = NULL;
  int err = db_stmt_text(db, Q_JOB_GET, id, &st, diag);
  if (err)
    return err;
  return job_one(db, st, id, out_job, diag);
}

json_t *server_db_job_result_to_json(const struct server_db_job *job) {
  /* the database holds only JSON objects: a parse failure is a damaged row
   * (a result stored before control bytes went to base64 may have a NUL,
   * \u0000, in its output's string: it reads as the byte it was) */
  json_t *r = job->result_json ? json_loads(job->result_json, JSON_ALLOW_NUL, NULL) : NULL;
  return r ? r : json_null();
}

json_t *server_db_job_to_json(const struct server_db_job *job) {
  json_t *o = json_pack(
      "{s:s, s:s, s:s?, s:s, s:s?, s:o}", "id", job->id, "user", job->user, "device",
      job->device_id[0] ? job->device_id : NULL, "state", server_db_job_state_name(job->state),
      "error", job->error[0] ? job->error : NULL, "result", server_db_job_result_to_json(job));
  /* a result that came after the job expired: kept, and said to be late */
  if (o && job->state == SERVER_DB_JOB_EXPIRED && job->result_json)
    json_object_set_new(o, "late", json_true());
  return o;
}

/* Collect the rows of a bound job query. */
static int job_collect(struct server_db *db, struct db_st *st, struct server_db_job_list *out_list,
                       struct cordon_diag *diag) {
  struct server_db_job_list l = {0};
  size_t cap = 0;
  int rc, err = 0;
  while ((rc = db_step(st)) == DB_ROW) {
    struct server_db_job *j = db_list_push((void **)&l.items, &l.count, &cap, sizeof(*j));
    if (!j || read_job(st, j) < 0) {
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
      break;
    }
  }
  if (!err && rc != DB_DONE)
    err = db_fail(db, rc, "list jobs", diag);
  db_done(st);
  if (err) {
    server_db_job_list_release(&l);
    return err;
  }
  *out_list = l;
  return 0;
}

int server_db_job_list(struct server_db *db, int64_t user_id, size_t limit,
                       struct server_db_job_list *out_list, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, user_id ? Q_JOB_LIST_OF_USER : Q_JOB_LIST, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  int k = user_id ? 1 : 0; /* the parameters after the user's */
  if (k)
    db_bind_int(st, 1, user_id, &rc);
  db_bind_int(st, 1 + k, limit == 0 || limit > INT64_MAX ? INT64_MAX : (int64_t)limit, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  return job_collect(db, st, out_list, diag);
}

int server_db_job_list_filtered(struct server_db *db, const struct server_db_job_filter *f,
                                struct server_db_job_list *out_list, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, f->user_id ? Q_JOB_LIST_FILTERED_OF_USER : Q_JOB_LIST_FILTERED, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  int k = f->user_id ? 1 : 0; /* the parameters after the user's */
  if (k)
    db_bind_int(st, 1, f->user_id, &rc);
  db_bind_text(st, 1 + k, f->device_id, &rc);
  db_bind_text(st, 2 + k, f->has_state ? server_db_job_state_name(f->state) : NULL, &rc);
  db_bind_int(st, 3 + k, f->since, &rc);
  db_bind_int(st, 4 + k, f->limit == 0 || f->limit > INT64_MAX ? INT64_MAX : (int64_t)f->limit,
              &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  return job_collect(db, st, out_list, diag);
}

int server_db_job_list_active_on_device(struct server_db *db, const char *device_id,
                                        struct server_db_job_list *out_list,
                                        struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(device_id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  struct db_st *st = NULL;
  int err = db_stmt_text(db, Q_JOB_LIST_ACTIVE_ON_DEVICE, device_id, &st, diag);
  if (err)
    return err;
  return job_collect(db, st, out_list, diag);
}

/* The jobs of a list statement whose ?1, when bind_now, is the clock. */
static int job_list_by(struct server_db *db, enum db_stmt q, bool bind_now,
                       struct server_db_job_list *out_list, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  if (bind_now)
    db_bind_int(st, 1, server_db_now(db), &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  return job_collect(db, st, out_list, diag);
}

int server_db_job_list_overdue(struct server_db *db, struct server_db_job_list *out_list,
                               struct cordon_diag *diag) {
  return job_list_by(db, Q_JOB_LIST_OVERDUE, true, out_list, diag);
}

int server_db_job_list_queued(struct server_db *db, struct server_db_job_list *out_list,
                              struct cordon_diag *diag) {
  return job_list_by(db, Q_JOB_LIST_QUEUED, false, out_list, diag);
}

int server_db_job_list_queue_expired(struct server_db *db, struct server_db_job_list *out_list,
                                     struct cordon_diag *diag) {
  return job_list_by(db, Q_JOB_LIST_QUEUE_EXPIRED, true, out_list, diag);
}

int server_db_job_count_in_flight(struct server_db *db, const char *device_id, size_t *out_count,
                                  struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(device_id))
    return cordon_diag_set(diag, -ENOENT, "no such device");
  struct db_st *st = NULL;
  int rc = DB_OK, err = db_stmt_text(db, Q_JOB_COUNT_IN_FLIGHT, device_id, &st, diag);
  if (err)
    return err;
  rc = db_step(st);
  int64_t n = 0;
  if (rc == DB_ROW)
    n = db_col_int(st, 0);
  else
    err = db_fail(db, rc, "count jobs", diag);
  db_done(st);
  if (!err)
    *out_count = (size_t)n;
  return err;
}

static int count_states(struct server_db *db, enum db_stmt q,
                        size_t out_counts[SERVER_DB_JOB_STATE_COUNT], struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, q, &st, diag);
  if (err)
    return err;
  size_t counts[SERVER_DB_JOB_STATE_COUNT] = {0};
  int rc;
  while ((rc = db_step(st)) == DB_ROW) {
    enum server_db_job_state s;
    if (server_db_job_state_parse(db_col_str(st, 0), &s) == 0)
      counts[s] += (size_t)db_col_int(st, 1);
  }
  if (rc != DB_DONE)
    err = db_fail(db, rc, "count jobs by state", diag);
  db_done(st);
  if (!err)
    memcpy(out_counts, counts, sizeof(counts));
  return err;
}

int server_db_job_count_by_state(struct server_db *db, size_t out_counts[SERVER_DB_JOB_STATE_COUNT],
                                 struct cordon_diag *diag) {
  return count_states(db, Q_JOB_COUNT_BY_STATE, out_counts, diag);
}

int server_db_job_count_live(struct server_db *db, size_t out_counts[SERVER_DB_JOB_STATE_COUNT],
                             struct cordon_diag *diag) {
  return count_states(db, Q_JOB_COUNT_LIVE, out_counts, diag);
}

int server_db_job_set_ticket(struct server_db *db, const char *id, const uint8_t *ticket,
                             size_t len, struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no such job");
  if (!ticket || len == 0 || len > SERVER_DB_TICKET_MAX)
    return cordon_diag_set(diag, -EINVAL, "a ticket is 1..%d bytes", SERVER_DB_TICKET_MAX);
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_JOB_SET_TICKET, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, id, &rc);
  db_bind_blob(st, 2, ticket, len, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  rc = db_step(st);
  int changes = db_changes(db);
  db_done(st);
  if (rc != DB_DONE)
    return db_fail(db, rc, "set ticket", diag);
  return changes == 1 ? 0 : cordon_diag_set(diag, -ESTALE, "job %s is not queued", id);
}

int server_db_job_send_with_ticket(struct server_db *db, const char *id, const char *device_id,
                                   int64_t deadline, const uint8_t *ticket, size_t len,
                                   struct cordon_diag *diag) {
  int err = db_tx_begin(db, diag);
  if (err)
    return err;
  if ((err = server_db_job_set_ticket(db, id, ticket, len, diag)) ||
      (err = server_db_job_send(db, id, device_id, deadline, diag))) {
    db_tx_rollback(db);
    return err;
  }
  return db_tx_commit(db, diag);
}

static int job_blob(struct server_db *db, enum db_stmt q, const char *id, const char *what,
                    uint8_t *out, size_t cap, size_t *out_len, struct cordon_diag *diag) {
  if (!cordon_id_hex_valid(id))
    return cordon_diag_set(diag, -ENOENT, "no such job");
  struct db_st *st = NULL;
  int rc = DB_OK, err = db_stmt_text(db, q, id, &st, diag);
  if (err)
    return err;
  rc = db_step(st);
  if (rc == DB_ROW) {
    size_t n = 0;
    const void *p = db_col_blob_ptr(st, 0, &n);
    if (!p || n == 0)
      err = cordon_diag_set(diag, -ENODATA, "job %s has no %s", id, what);
    else if (n > cap)
      err = cordon_diag_set(diag, -ENOBUFS, "job %s: its %s is too large", id, what);
    else {
      memcpy(out, p, n);
      *out_len = n;
    }
  } else if (rc == DB_DONE) {
    err = cordon_diag_set(diag, -ENOENT, "no job '%s'", id);
  } else {
    err = db_fail(db, rc, what, diag);
  }
  db_done(st);
  return err;
}

int server_db_job_ticket(struct server_db *db, const char *id, uint8_t *out, size_t cap,
                         size_t *out_len, struct cordon_diag *diag) {
  return job_blob(db, Q_JOB_TICKET, id, "ticket", out, cap, out_len, diag);
}

int server_db_job_receipt(struct server_db *db, const char *id, uint8_t *out, size_t cap,
                          size_t *out_len, struct cordon_diag *diag) {
  return job_blob(db, Q_JOB_RECEIPT, id, "receipt", out, cap, out_len, diag);
}

bool server_db_job_key_valid(const char *key) {
  size_t n = key ? strlen(key) : 0;
  if (n < 1 || n > SERVER_DB_KEY_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if (key[i] < 0x21 || key[i] > 0x7e)
      return false;
  return true;
}

int server_db_job_get_by_key(struct server_db *db, int64_t user_id, const char *key,
                             struct server_db_job *out_job, struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_JOB_GET_BY_KEY, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_int(st, 1, user_id, &rc);
  db_bind_text(st, 2, key, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  return job_one(db, st, NULL, out_job, diag);
}
