/* Pairing codes (server/db.h): minted for a user, looked up by their public
 * id, burned by failed proofs, consumed once. The secret part is never
 * stored; the proof key is dropped once the code is used or burned. */
#include "server/db.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/pairing.h"
#include "server/db_internal.h"

#define DB_CODE_BYTES 25 /* 200 bits = 40 base32 characters */
#define DB_CODE_GROUP 5
#define DB_CODE_KEEP_S (7 * 24 * 3600) /* expired codes are kept this long, then purged */

static const char code_alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";

/* The code text rules and the derivation live in proto/pairing.c: the agent
 * needs the very same function. */
int server_db_code_derive(const char *code, char out_id[SERVER_DB_CODE_ID_SIZE],
                          uint8_t out_key[SERVER_DB_CODE_KEY_SIZE]) {
  return pairing_code_derive(code, out_id, out_key);
}

/* 25 random bytes -> 40 characters in groups of 5. */
static void code_generate(char out[SERVER_DB_CODE_TEXT_SIZE]) {
  uint8_t b[DB_CODE_BYTES];
  randombytes_buf(b, sizeof(b));
  size_t o = 0;
  for (size_t i = 0; i < SERVER_DB_CODE_CHARS; i++) {
    size_t bit = i * 5, byte = bit / 8, shift = bit % 8;
    unsigned v = (unsigned)b[byte] << 8 | (byte + 1 < sizeof(b) ? b[byte + 1] : 0);
    unsigned c = (v >> (11 - shift)) & 0x1f;
    if (i && i % DB_CODE_GROUP == 0)
      out[o++] = '-';
    out[o++] = code_alphabet[c];
  }
  out[o] = '\0';
  sodium_memzero(b, sizeof(b));
}

int server_db_code_mint(struct server_db *db, int64_t user_id, int64_t ttl_s,
                        char out_code[SERVER_DB_CODE_TEXT_SIZE], int64_t *out_expires,
                        struct cordon_diag *diag) {
  if (ttl_s < 1 || ttl_s > SERVER_DB_CODE_TTL_MAX)
    return cordon_diag_set(diag, -EINVAL, "code lifetime must be 1..%d seconds",
                           SERVER_DB_CODE_TTL_MAX);
  char code[SERVER_DB_CODE_TEXT_SIZE], id[SERVER_DB_CODE_ID_SIZE];
  uint8_t key[SERVER_DB_CODE_KEY_SIZE];
  int64_t now = server_db_now(db), expires = now + ttl_s;
  int err = db_tx_begin(db, diag);
  if (err)
    return err;
  struct server_db_user u;
  if ((err = server_db_user_get(db, user_id, &u, diag)))
    goto out_rollback;
  struct db_st *st = NULL;
  if ((err = db_stmt(db, Q_CODE_COUNT_USABLE, &st, diag)))
    goto out_rollback;
  int rc = DB_OK;
  db_bind_int(st, 1, user_id, &rc);
  db_bind_int(st, 2, now, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    goto out_rollback;
  rc = db_step(st);
  int64_t live = rc == DB_ROW ? db_col_int(st, 0) : 0;
  if (rc != DB_ROW)
    err = db_fail(db, rc, "count codes", diag);
  db_done(st);
  if (err)
    goto out_rollback;
  /* Forget the user's codes that expired long ago: the table stays small. */
  if ((err = db_stmt(db, Q_CODE_PURGE, &st, diag)))
    goto out_rollback;
  rc = DB_OK;
  db_bind_int(st, 1, user_id, &rc);
  db_bind_int(st, 2, now - DB_CODE_KEEP_S, &rc);
  if ((err = db_bind_check(db, st, rc, diag)) || (err = db_exec_stmt(db, st, "purge codes", diag)))
    goto out_rollback;
  if (live >= SERVER_DB_CODE_LIVE_MAX) {
    err = cordon_diag_set(diag, CORDON_E_LIMIT,
                          "user '%s' already has %lld live pairing codes (at most %d)", u.name,
                          (long long)live, SERVER_DB_CODE_LIVE_MAX);
    goto out_rollback;
  }
  for (int tries = 0;; tries++) {
    code_generate(code);
    if ((err = server_db_code_derive(code, id, key)))
      break;
    if ((err = db_stmt(db, Q_CODE_ADD, &st, diag)))
      break;
    rc = DB_OK;
    db_bind_text(st, 1, id, &rc);
    db_bind_int(st, 2, user_id, &rc);
    db_bind_blob(st, 3, key, sizeof(key), &rc);
    db_bind_int(st, 4, now, &rc);
    db_bind_int(st, 5, expires, &rc);
    db_bind_int(st, 6, SERVER_DB_CODE_ATTEMPTS, &rc);
    if ((err = db_bind_check(db, st, rc, diag)))
      break;
    rc = db_step(st);
    err = rc == DB_DONE ? 0 : db_fail(db, rc, "add code", diag);
    db_done(st);
    if (err != -EEXIST || tries == 4) /* an id collision (2^-50): draw again */
      break;
  }
  if (err)
    goto out_rollback;
  if ((err = db_tx_commit(db, diag)))
    goto out_wipe;
  memcpy(out_code, code, SERVER_DB_CODE_TEXT_SIZE);
  if (out_expires)
    *out_expires = expires;
  goto out_wipe;
out_rollback:
  db_tx_rollback(db);
out_wipe:
  sodium_memzero(code, sizeof(code));
  sodium_memzero(key, sizeof(key));
  return err;
}

static enum server_db_code_state code_state_parse(const char *s) {
  if (s && strcmp(s, "live") == 0)
    return SERVER_DB_CODE_LIVE;
  if (s && strcmp(s, "used") == 0)
    return SERVER_DB_CODE_USED;
  return SERVER_DB_CODE_BURNED;
}

static bool valid_code_id(const char *id) {
  if (!id || strlen(id) != SERVER_DB_CODE_ID_CHARS)
    return false;
  for (size_t i = 0; i < SERVER_DB_CODE_ID_CHARS; i++)
    if (!memchr(code_alphabet, id[i], sizeof(code_alphabet) - 1) || id[i] == '\0')
      return false;
  return true;
}

int server_db_code_lookup(struct server_db *db, const char *code_id,
                          struct server_db_code *out_code, struct cordon_diag *diag) {
  if (!valid_code_id(code_id))
    return cordon_diag_set(diag, -ENOENT, "no such pairing code");
  struct db_st *st = NULL;
  int rc = DB_OK, err = db_stmt_text(db, Q_CODE_LOOKUP, code_id, &st, diag);
  if (err)
    return err;
  rc = db_step(st);
  if (rc == DB_ROW) {
    struct server_db_code *c = out_code;
    memcpy(c->id, code_id, SERVER_DB_CODE_ID_SIZE);
    c->user_id = db_col_int(st, 0);
    db_col_blob(st, 1, c->key, sizeof(c->key));
    c->attempts_left = (int)db_col_int(st, 2);
    c->state = code_state_parse(db_col_str(st, 3));
    c->created = db_col_int(st, 4);
    c->expires = db_col_int(st, 5);
    db_col_text(st, 6, c->last_failure, sizeof(c->last_failure));
    c->last_failure_at = db_col_int(st, 7);
    c->expired = c->expires <= server_db_now(db);
    c->usable = c->state == SERVER_DB_CODE_LIVE && c->attempts_left > 0 && !c->expired;
    if (c->state != SERVER_DB_CODE_LIVE)
      sodium_memzero(c->key, sizeof(c->key));
  } else if (rc == DB_DONE) {
    err = cordon_diag_set(diag, -ENOENT, "no such pairing code");
  } else {
    err = db_fail(db, rc, "look up code", diag);
  }
  db_done(st);
  return err;
}

void server_db_code_wipe(struct server_db_code *code) {
  if (code)
    sodium_memzero(code, sizeof(*code));
}

int server_db_code_fail(struct server_db *db, const char *code_id, int *out_attempts_left,
                        struct cordon_diag *diag) {
  if (!valid_code_id(code_id))
    return cordon_diag_set(diag, -ENOENT, "no such pairing code");
  struct db_st *st = NULL;
  int rc = DB_OK, err = db_stmt_text(db, Q_CODE_FAIL, code_id, &st, diag);
  if (err)
    return err;
  rc = db_step(st);
  int left = 0;
  if (rc == DB_ROW) {
    left = (int)db_col_int(st, 0);
    while ((rc = db_step(st)) == DB_ROW)
      ;
  } else if (rc == DB_DONE) {
    err = cordon_diag_set(diag, -EACCES, "pairing code is not live");
  }
  if (!err && rc != DB_DONE)
    err = db_fail(db, rc, "record failed attempt", diag);
  db_done(st);
  if (!err && out_attempts_left)
    *out_attempts_left = left;
  return err;
}

int server_db_code_list(struct server_db *db, int64_t user_id, struct server_db_code_list *out,
                        struct cordon_diag *diag) {
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_CODE_LIST, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_int(st, 1, user_id, &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  struct server_db_code_list l = {0};
  size_t cap = 0;
  int64_t now = server_db_now(db);
  while ((rc = db_step(st)) == DB_ROW) {
    struct server_db_code_info *c = db_list_push((void **)&l.items, &l.count, &cap, sizeof(*c));
    if (!c) {
      err = cordon_diag_set(diag, -ENOMEM, "out of memory");
      break;
    }
    db_col_text(st, 0, c->id, sizeof(c->id));
    c->user_id = db_col_int(st, 1);
    db_col_text(st, 2, c->user, sizeof(c->user));
    c->attempts_left = (int)db_col_int(st, 3);
    c->state = code_state_parse(db_col_str(st, 4));
    c->created = db_col_int(st, 5);
    c->expires = db_col_int(st, 6);
    c->expired = c->expires <= now;
    db_col_text(st, 7, c->last_failure, sizeof(c->last_failure));
    c->last_failure_at = db_col_int(st, 8);
  }
  if (!err && rc != DB_DONE)
    err = db_fail(db, rc, "list codes", diag);
  db_done(st);
  if (err) {
    server_db_code_list_release(&l);
    return err;
  }
  *out = l;
  return 0;
}

void server_db_code_list_release(struct server_db_code_list *list) {
  if (!list)
    return;
  free(list->items);
  list->items = NULL;
  list->count = 0;
}

int server_db_code_revoke(struct server_db *db, const char *code_id, struct cordon_diag *diag) {
  struct server_db_code c;
  int err = server_db_code_lookup(db, code_id, &c, diag);
  if (err)
    return err;
  enum server_db_code_state was = c.state;
  server_db_code_wipe(&c);
  if (was != SERVER_DB_CODE_LIVE)
    return cordon_diag_set(diag, -EALREADY, "pairing code %s is not live", code_id);
  struct db_st *st = NULL;
  if ((err = db_stmt(db, Q_CODE_REVOKE, &st, diag)))
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, code_id, &rc);
  db_bind_int(st, 2, server_db_now(db), &rc);
  if ((err = db_bind_check(db, st, rc, diag)) || (err = db_exec_stmt(db, st, "revoke code", diag)))
    return err;
  return db_changes(db) == 1
             ? 0
             : cordon_diag_set(diag, -EALREADY, "pairing code %s is not live", code_id);
}

int server_db_code_note_failure(struct server_db *db, const char *code_id, const char *reason,
                                struct cordon_diag *diag) {
  if (!valid_code_id(code_id))
    return cordon_diag_set(diag, -ENOENT, "no such pairing code");
  if (!reason || !db_valid_token(reason, SERVER_DB_CODE_MAX))
    return cordon_diag_set(diag, -EINVAL, "a failure reason is a token");
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_CODE_NOTE_FAILURE, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, code_id, &rc);
  db_bind_text(st, 2, reason, &rc);
  db_bind_int(st, 3, server_db_now(db), &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  if ((err = db_exec_stmt(db, st, "note code failure", diag)))
    return err;
  return db_changes(db) == 1 ? 0 : cordon_diag_set(diag, -ENOENT, "no such pairing code");
}

int db_code_consume(struct server_db *db, const char *code_id, int64_t *out_user_id,
                    struct cordon_diag *diag) {
  if (!valid_code_id(code_id))
    return cordon_diag_set(diag, -EACCES, "pairing code is not usable");
  struct db_st *st = NULL;
  int err = db_stmt(db, Q_CODE_CONSUME, &st, diag);
  if (err)
    return err;
  int rc = DB_OK;
  db_bind_text(st, 1, code_id, &rc);
  db_bind_int(st, 2, server_db_now(db), &rc);
  if ((err = db_bind_check(db, st, rc, diag)))
    return err;
  rc = db_step(st);
  int64_t user = 0;
  if (rc == DB_ROW) {
    user = db_col_int(st, 0);
    while ((rc = db_step(st)) == DB_ROW)
      ;
  } else if (rc == DB_DONE) {
    err = cordon_diag_set(diag, -EACCES, "pairing code is not usable");
  }
  if (!err && rc != DB_DONE)
    err = db_fail(db, rc, "consume code", diag);
  db_done(st);
  if (!err)
    *out_user_id = user;
  return err;
}

int server_db_code_consume(struct server_db *db, const char *code_id, int64_t *out_user_id,
                           struct cordon_diag *diag) {
  int64_t user;
  int err = db_code_consume(db, code_id, &user, diag);
  if (!err && out_user_id)
    *out_user_id = user;
  return err;
}
