#include "server/keys.h"
#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/id.h"
#include "proto/cpkg.h"

int keys_write_file(int dirfd, const char *name, enum keyfile_kind kind,
                    const uint8_t key[KEYFILE_KEY_SIZE], mode_t mode, const char *comment,
                    struct cordon_diag *diag) {
  char *line = sodium_malloc(KEYFILE_MAX_BYTES);
  if (!line)
    return -ENOMEM;
  size_t len = 0;
  int err = keyfile_format(kind, key, comment, line, KEYFILE_MAX_BYTES, &len);
  if (err) {
    cordon_diag_set(diag, err, "%s: cannot format key", name);
    goto out_free_line;
  }
  int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    err = cordon_diag_set(diag, -errno, "%s: %s", name, strerror(errno));
    goto out_free_line;
  }
  if ((err = fchmod(fd, mode) < 0 ? -errno : 0) == 0 && (err = core_write_all(fd, line, len)) == 0)
    err = fsync(fd) < 0 ? -errno : 0;
  if (close(fd) < 0 && !err)
    err = -errno;
  if (err) {
    cordon_diag_set(diag, err, "%s: %s", name, strerror(-err));
    unlinkat(dirfd, name, 0);
  }
out_free_line:
  sodium_free(line);
  return err;
}

int keys_read_file(const char *path, enum keyfile_kind kind, uint8_t **out_key,
                   struct cordon_diag *diag) {
  int secret = kind != KEYFILE_PUBLISHER_PUBLIC && kind != KEYFILE_TICKET_PUBLIC;
  int err = 0;
  char *text = sodium_malloc(KEYFILE_MAX_BYTES + 1);
  uint8_t *key = sodium_malloc(KEYFILE_KEY_SIZE);
  if (!text || !key) {
    err = -ENOMEM;
    goto out_free;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
    goto out_free;
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
    goto out_close;
  }
  if (!S_ISREG(st.st_mode)) {
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not a regular file", path);
    goto out_close;
  }
  if (secret && (st.st_mode & 077)) {
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                          "%s: secret key file is accessible by group or others (mode 0%03o); "
                          "chmod 600 it",
                          path, (unsigned)(st.st_mode & 0777));
    goto out_close;
  }
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fd, text + len, KEYFILE_MAX_BYTES + 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
      goto out_close;
    }
    if (n == 0 || (len += (size_t)n) > KEYFILE_MAX_BYTES)
      break;
  }
  struct cordon_diag d = {{0}};
  err = keyfile_parse(kind, text, len, key, &d);
  if (err) {
    cordon_diag_set(diag, err, "%s: %s", path, d.msg);
    goto out_close;
  }
  *out_key = key;
  key = NULL;
out_close:
  close(fd);
out_free:
  sodium_free(text); /* sodium_free wipes */
  sodium_free(key);
  return err;
}

int keys_load_publisher_secret(const char *path, uint8_t **out_secret_key,
                               struct cordon_diag *diag) {
  uint8_t *seed = NULL;
  int err = keys_read_file(path, KEYFILE_PUBLISHER_SECRET, &seed, diag);
  if (err)
    return err;
  uint8_t pk[crypto_sign_PUBLICKEYBYTES];
  uint8_t *sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
  if (!sk) {
    sodium_free(seed);
    return -ENOMEM;
  }
  crypto_sign_seed_keypair(pk, sk, seed);
  sodium_free(seed);
  *out_secret_key = sk;
  return 0;
}

/* ---- rotation ----------------------------------------------------------- */

static void iso_now(char out[32]) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void key_id_hex(const uint8_t pk[32], char out[33]) {
  uint8_t id[CORDON_ID_LEN];
  cpkg_key_id(pk, id);
  cordon_id_to_hex(id, out);
}

static json_t *hex_json(const uint8_t *b, size_t n) {
  char h[2 * MSG_SIG_LEN + 1];
  sodium_bin2hex(h, sizeof(h), b, n);
  return json_string(h);
}

static int hex_get(json_t *o, const char *key, uint8_t *out, size_t n) {
  const char *s = json_string_value(json_object_get(o, key));
  size_t got = 0;
  if (!s || strlen(s) != 2 * n || sodium_hex2bin(out, n, s, strlen(s), NULL, &got, NULL) != 0 ||
      got != n)
    return -1;
  return 0;
}

/* A key file's seed and its crypto_sign key pair (sk sodium_malloc'ed). */
static int seed_keypair(const char *path, enum keyfile_kind kind, uint8_t pk[32], uint8_t **out_sk,
                        uint8_t **out_seed, struct cordon_diag *diag) {
  uint8_t *seed = NULL;
  int r = keys_read_file(path, kind, &seed, diag);
  if (r < 0)
    return r;
  uint8_t *sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
  if (!sk) {
    sodium_free(seed);
    return -ENOMEM;
  }
  crypto_sign_seed_keypair(pk, sk, seed);
  if (out_seed)
    *out_seed = seed;
  else
    sodium_free(seed);
  *out_sk = sk;
  return 0;
}

static json_t *key_entry(const char *role, const uint8_t pk[32], const char *created,
                         const char *file) {
  char id[33];
  key_id_hex(pk, id);
  return json_pack("{s:s, s:s, s:o, s:s, s:n, s:s}", "id", id, "role", role, "public",
                   hex_json(pk, 32), "created", created, "retired", "file", file);
}

/* The registry: STATE/keys.json, or what `init` left (serial 0). */
static int reg_load(const char *state, json_t **out, struct cordon_diag *diag) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", state, SERVER_KEYS_FILE);
  char *text = NULL;
  size_t len;
  int r =
      core_read_file(path, 1 << 20, CORDON_E_CONFIG_INVALID, SERVER_KEYS_FILE, &text, &len, diag);
  if (r == 0) {
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    free(text);
    if (!json_is_object(j) || !json_is_array(json_object_get(j, "keys")) ||
        !json_is_array(json_object_get(j, "chain")) ||
        !json_is_integer(json_object_get(j, "serial"))) {
      json_decref(j);
      return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not a cordon key registry", path);
    }
    *out = j;
    return 0;
  }
  if (r != -ENOENT)
    return r;
  /* no rotation yet: the keys of init */
  uint8_t tpk[32], ppk[32], *sk = NULL;
  snprintf(path, sizeof(path), "%s/%s", state, SERVER_TICKET_KEY_FILE);
  if ((r = seed_keypair(path, KEYFILE_TICKET_SECRET, tpk, &sk, NULL, diag)) < 0)
    return r;
  sodium_free(sk);
  snprintf(path, sizeof(path), "%s/%s", state, SERVER_PUBLISHER_PUB_FILE);
  uint8_t *pub = NULL;
  if ((r = keys_read_file(path, KEYFILE_PUBLISHER_PUBLIC, &pub, diag)) < 0)
    return r;
  memcpy(ppk, pub, 32);
  sodium_free(pub);
  char created[32] = "unknown";
  struct stat st;
  if (stat(path, &st) == 0) {
    struct tm tm;
    gmtime_r(&st.st_mtime, &tm);
    strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
  }
  json_t *keys = json_array();
  json_array_append_new(keys, key_entry("ticket", tpk, created, SERVER_TICKET_KEY_FILE));
  json_array_append_new(keys, key_entry("publisher", ppk, created, SERVER_PUBLISHER_KEY_FILE));
  *out = json_pack("{s:i, s:o, s:[]}", "serial", 0, "keys", keys, "chain");
  return *out ? 0 : -ENOMEM;
}

/* The current (last) entry of a role. */
static json_t *reg_current(json_t *reg, const char *role) {
  json_t *keys = json_object_get(reg, "keys"), *cur = NULL, *k;
  size_t i;
  json_array_foreach(keys, i, k) {
    if (strcmp(json_string_value(json_object_get(k, "role")), role) == 0)
      cur = k;
  }
  return cur;
}

static int entry_path(const char *state, json_t *e, char *out, size_t len) {
  const char *f = json_string_value(json_object_get(e, "file"));
  int n = snprintf(out, len, "%s/%s", state, f ? f : "");
  return !f || n < 0 || (size_t)n >= len ? CORDON_E_CONFIG_INVALID : 0;
}

static int reg_save(const char *state, json_t *reg, struct cordon_diag *diag) {
  char *s = json_dumps(reg, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (!s)
    return -ENOMEM;
  int r = core_write_file_atomic(state, SERVER_KEYS_FILE, s, strlen(s), 0600);
  free(s);
  return r < 0 ? cordon_diag_set(diag, r, "%s/%s: %s", state, SERVER_KEYS_FILE, strerror(-r)) : 0;
}

/* Put a key file into dir, replacing it: 0 or -errno with diag. */
static int put_keyfile(const char *dir, const char *name, enum keyfile_kind kind,
                       const uint8_t key[32], unsigned mode, struct cordon_diag *diag) {
  char text[KEYFILE_MAX_BYTES];
  size_t len;
  int r = keyfile_format(kind, key, "cordon-server keys rotate", text, sizeof(text), &len);
  if (r == 0)
    r = core_write_file_atomic(dir, name, text, len, mode);
  sodium_memzero(text, sizeof(text));
  return r < 0 ? cordon_diag_set(diag, r, "%s/%s: %s", dir, name, strerror(-r)) : 0;
}

/* Every key's secret under STATE/keys/: the entries init left point at
 * STATE/ticket.key and publisher.key, which a rotation overwrites. */
static int reg_own_files(const char *state, json_t *reg, struct cordon_diag *diag) {
  char kdir[4096];
  snprintf(kdir, sizeof(kdir), "%s/%s", state, SERVER_KEYS_DIR);
  if (mkdir(kdir, 0700) < 0 && errno != EEXIST)
    return cordon_diag_set(diag, -errno, "%s: %s", kdir, strerror(errno));
  json_t *k;
  size_t i;
  json_array_foreach(json_object_get(reg, "keys"), i, k) {
    const char *f = json_string_value(json_object_get(k, "file"));
    if (!f || strncmp(f, SERVER_KEYS_DIR "/", sizeof(SERVER_KEYS_DIR)) == 0)
      continue;
    bool tkt = strcmp(json_string_value(json_object_get(k, "role")), "ticket") == 0;
    char path[4096], name[128], rel[160];
    int r = entry_path(state, k, path, sizeof(path));
    uint8_t *seed = NULL;
    if (r == 0)
      r = keys_read_file(path, tkt ? KEYFILE_TICKET_SECRET : KEYFILE_PUBLISHER_SECRET, &seed, diag);
    if (r < 0)
      return r;
    snprintf(name, sizeof(name), "%s-%s.key", tkt ? "ticket" : "publisher",
             json_string_value(json_object_get(k, "id")));
    r = put_keyfile(kdir, name, tkt ? KEYFILE_TICKET_SECRET : KEYFILE_PUBLISHER_SECRET, seed, 0600,
                    diag);
    sodium_free(seed);
    if (r < 0)
      return r;
    snprintf(rel, sizeof(rel), "%s/%s", SERVER_KEYS_DIR, name);
    json_object_set_new(k, "file", json_string(rel));
  }
  return 0;
}

/* A new key of a role: its seed written under STATE/keys/, its entry. */
static int new_key(const char *state, const char *role, uint8_t pk[32], uint8_t **out_sk,
                   json_t **out_entry, struct cordon_diag *diag) {
  bool tkt = strcmp(role, "ticket") == 0;
  uint8_t *seed = sodium_malloc(32), *sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
  if (!seed || !sk) {
    sodium_free(seed);
    sodium_free(sk);
    return -ENOMEM;
  }
  randombytes_buf(seed, 32);
  crypto_sign_seed_keypair(pk, sk, seed);
  char id[33], kdir[4096], name[128], rel[160], created[32];
  key_id_hex(pk, id);
  snprintf(kdir, sizeof(kdir), "%s/%s", state, SERVER_KEYS_DIR);
  snprintf(name, sizeof(name), "%s-%s.key", role, id);
  int r = put_keyfile(kdir, name, tkt ? KEYFILE_TICKET_SECRET : KEYFILE_PUBLISHER_SECRET, seed,
                      0600, diag);
  if (r == 0 && !tkt) {
    char pub[128];
    snprintf(pub, sizeof(pub), "%s-%s.pub", role, id);
    r = put_keyfile(kdir, pub, KEYFILE_PUBLISHER_PUBLIC, pk, 0644, diag);
  }
  sodium_free(seed);
  if (r < 0) {
    sodium_free(sk);
    return r;
  }
  iso_now(created);
  snprintf(rel, sizeof(rel), "%s/%s", SERVER_KEYS_DIR, name);
  *out_entry = key_entry(role, pk, created, rel);
  *out_sk = sk;
  return 0;
}

/* The secret key of an entry (sk sodium_malloc'ed) and its public half. */
static int entry_keypair(const char *state, json_t *e, uint8_t pk[32], uint8_t **out_sk,
                         struct cordon_diag *diag) {
  char path[4096];
  if (entry_path(state, e, path, sizeof(path)) < 0)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: a key without a file",
                           SERVER_KEYS_FILE);
  bool tkt = strcmp(json_string_value(json_object_get(e, "role")), "ticket") == 0;
  return seed_keypair(path, tkt ? KEYFILE_TICKET_SECRET : KEYFILE_PUBLISHER_SECRET, pk, out_sk,
                      NULL, diag);
}

/* Append announcement serial+1 of (tpk, ppk), signed by tsk and psk, with
 * every retired publisher key. */
static int reg_announce(json_t *reg, const uint8_t tpk[32], const uint8_t ppk[32],
                        const uint8_t *tsk, const uint8_t *psk, uint64_t *out_serial) {
  json_t *chain = json_object_get(reg, "chain");
  if (json_array_size(chain) >= SERVER_KEYS_CHAIN_MAX)
    return CORDON_E_LIMIT;
  struct msg_keys k = {.serial = (uint64_t)json_integer_value(json_object_get(reg, "serial")) + 1};
  memcpy(k.ticket_key, tpk, 32);
  memcpy(k.publisher_key, ppk, 32);
  uint8_t data[MSG_KEYS_SIGNED_LEN];
  msg_keys_signed_data(&k, data);
  crypto_sign_detached(k.ticket_sig, NULL, data, sizeof(data), tsk);
  crypto_sign_detached(k.publisher_sig, NULL, data, sizeof(data), psk);
  json_t *retired = json_array(), *e;
  size_t i;
  json_array_foreach(json_object_get(reg, "keys"), i, e) {
    if (strcmp(json_string_value(json_object_get(e, "role")), "publisher") == 0 &&
        json_is_string(json_object_get(e, "retired")))
      json_array_append(retired, json_object_get(e, "public"));
  }
  if (json_array_size(retired) > MSG_PUBLISHER_KEYS_MAX) /* the newest 16 */
    while (json_array_size(retired) > MSG_PUBLISHER_KEYS_MAX)
      json_array_remove(retired, 0);
  json_array_append_new(
      chain, json_pack("{s:I, s:o, s:o, s:o, s:o, s:o}", "serial", (json_int_t)k.serial,
                       "ticket_key", hex_json(tpk, 32), "publisher_key", hex_json(ppk, 32),
                       "ticket_sig", hex_json(k.ticket_sig, MSG_SIG_LEN), "publisher_sig",
                       hex_json(k.publisher_sig, MSG_SIG_LEN), "retired", retired));
  json_object_set_new(reg, "serial", json_integer((json_int_t)k.serial));
  *out_serial = k.serial;
  return 0;
}

/* STATE/ticket.key, publisher.key, publisher.pub: copies of the current
 * keys, for `pack --key`, agents' --trust and older tools. */
static int refresh_copies(const char *state, json_t *reg, struct cordon_diag *diag) {
  json_t *t = reg_current(reg, "ticket"), *p = reg_current(reg, "publisher");
  char path[4096];
  uint8_t *seed = NULL;
  int r = entry_path(state, t, path, sizeof(path));
  if (r == 0 && (r = keys_read_file(path, KEYFILE_TICKET_SECRET, &seed, diag)) == 0) {
    r = put_keyfile(state, SERVER_TICKET_KEY_FILE, KEYFILE_TICKET_SECRET, seed, 0600, diag);
    sodium_free(seed);
  }
  if (r == 0)
    r = entry_path(state, p, path, sizeof(path));
  if (r == 0 && (r = keys_read_file(path, KEYFILE_PUBLISHER_SECRET, &seed, diag)) == 0) {
    uint8_t pk[32], sk[crypto_sign_SECRETKEYBYTES];
    crypto_sign_seed_keypair(pk, sk, seed);
    sodium_memzero(sk, sizeof(sk));
    r = put_keyfile(state, SERVER_PUBLISHER_KEY_FILE, KEYFILE_PUBLISHER_SECRET, seed, 0600, diag);
    if (r == 0)
      r = put_keyfile(state, SERVER_PUBLISHER_PUB_FILE, KEYFILE_PUBLISHER_PUBLIC, pk, 0644, diag);
    sodium_free(seed);
  }
  return r;
}

int server_keys_rotate(const char *state_dir, bool ticket, bool publisher, uint64_t *out_serial,
                       char new_ticket_id[33], char new_publisher_id[33],
                       struct cordon_diag *diag) {
  if (!ticket && !publisher)
    return -EINVAL;
  json_t *reg = NULL;
  uint8_t *old_tsk = NULL, *old_psk = NULL, *tsk = NULL, *psk = NULL;
  uint8_t old_tpk[32], old_ppk[32], tpk[32], ppk[32];
  json_t *te = NULL, *pe = NULL;
  int r = reg_load(state_dir, &reg, diag);
  if (r == 0)
    r = reg_own_files(state_dir, reg, diag);
  if (r == 0)
    r = entry_keypair(state_dir, reg_current(reg, "ticket"), old_tpk, &old_tsk, diag);
  if (r == 0)
    r = entry_keypair(state_dir, reg_current(reg, "publisher"), old_ppk, &old_psk, diag);
  memcpy(tpk, old_tpk, 32);
  memcpy(ppk, old_ppk, 32);
  if (r == 0 && ticket)
    r = new_key(state_dir, "ticket", tpk, &tsk, &te, diag);
  if (r == 0 && publisher)
    r = new_key(state_dir, "publisher", ppk, &psk, &pe, diag);
  if (r == 0) {
    json_t *keys = json_object_get(reg, "keys");
    if (te)
      json_array_append(keys, te);
    if (pe)
      json_array_append(keys, pe);
    r = reg_announce(reg, tpk, ppk, old_tsk, old_psk, out_serial);
    if (r < 0)
      cordon_diag_set(diag, r, "more than %d rotations and retirements", SERVER_KEYS_CHAIN_MAX);
  }
  if (r == 0)
    r = reg_save(state_dir, reg, diag);
  if (r == 0)
    r = refresh_copies(state_dir, reg, diag);
  if (r == 0) {
    new_ticket_id[0] = new_publisher_id[0] = '\0';
    if (te)
      snprintf(new_ticket_id, 33, "%s", json_string_value(json_object_get(te, "id")));
    if (pe)
      snprintf(new_publisher_id, 33, "%s", json_string_value(json_object_get(pe, "id")));
  }
  json_decref(te);
  json_decref(pe);
  json_decref(reg);
  sodium_free(old_tsk);
  sodium_free(old_psk);
  sodium_free(tsk);
  sodium_free(psk);
  return r;
}

int server_keys_retire(const char *state_dir, const char *id_prefix, uint64_t *out_serial,
                       char out_id[33], struct cordon_diag *diag) {
  json_t *reg = NULL;
  int r = reg_load(state_dir, &reg, diag);
  if (r < 0)
    return r;
  size_t plen = strlen(id_prefix), i;
  json_t *found = NULL, *e;
  int hits = 0;
  json_array_foreach(json_object_get(reg, "keys"), i, e) {
    const char *id = json_string_value(json_object_get(e, "id"));
    if (plen >= 4 && id && strncmp(id, id_prefix, plen) == 0) {
      found = e;
      hits++;
    }
  }
  uint8_t tpk[32], ppk[32], *tsk = NULL, *psk = NULL;
  if (hits != 1)
    r = cordon_diag_set(diag, hits == 0 && plen >= 4 ? CORDON_E_NOT_FOUND : CORDON_E_USAGE,
                        "%s: %s key id (`keys list` shows them)", id_prefix,
                        hits       ? "an ambiguous"
                        : plen < 4 ? "too short a"
                                   : "no such");
  else if (strcmp(json_string_value(json_object_get(found, "role")), "publisher") != 0)
    r = cordon_diag_set(diag, CORDON_E_USAGE,
                        "%s is a ticket key: `keys rotate --ticket` replaces it, nothing to retire",
                        id_prefix);
  else if (found == reg_current(reg, "publisher"))
    r = cordon_diag_set(diag, CORDON_E_USAGE,
                        "%s is the current publisher key: `keys rotate --publisher` first",
                        id_prefix);
  else if (json_is_string(json_object_get(found, "retired")))
    r = cordon_diag_set(diag, CORDON_E_USAGE, "%s is already retired", id_prefix);
  if (r == 0)
    r = reg_own_files(state_dir, reg, diag);
  if (r == 0)
    r = entry_keypair(state_dir, reg_current(reg, "ticket"), tpk, &tsk, diag);
  if (r == 0)
    r = entry_keypair(state_dir, reg_current(reg, "publisher"), ppk, &psk, diag);
  if (r == 0) {
    char now[32];
    iso_now(now);
    json_object_set_new(found, "retired", json_string(now));
    r = reg_announce(reg, tpk, ppk, tsk, psk, out_serial);
    if (r < 0)
      cordon_diag_set(diag, r, "more than %d rotations and retirements", SERVER_KEYS_CHAIN_MAX);
  }
  if (r == 0)
    r = reg_save(state_dir, reg, diag);
  if (r == 0)
    snprintf(out_id, 33, "%s", json_string_value(json_object_get(found, "id")));
  sodium_free(tsk);
  sodium_free(psk);
  json_decref(reg);
  return r;
}

int server_keys_list(const char *state_dir, json_t **out_list, struct cordon_diag *diag) {
  json_t *reg = NULL;
  int r = reg_load(state_dir, &reg, diag);
  if (r < 0)
    return r;
  json_t *t = reg_current(reg, "ticket"), *p = reg_current(reg, "publisher");
  json_t *list = json_array(), *e;
  size_t i;
  json_array_foreach(json_object_get(reg, "keys"), i, e) {
    json_array_append_new(
        list, json_pack("{s:O, s:O, s:O, s:O, s:b}", "id", json_object_get(e, "id"), "role",
                        json_object_get(e, "role"), "created", json_object_get(e, "created"),
                        "retired", json_object_get(e, "retired"), "current", e == t || e == p));
  }
  json_decref(reg);
  *out_list = list;
  return 0;
}

int server_keys_publisher_path(const char *state_dir, char *out, size_t len,
                               struct cordon_diag *diag) {
  json_t *reg = NULL;
  int r = reg_load(state_dir, &reg, diag);
  if (r < 0)
    return r;
  r = entry_path(state_dir, reg_current(reg, "publisher"), out, len);
  json_decref(reg);
  return r < 0 ? cordon_diag_set(diag, r, "%s: no publisher key", SERVER_KEYS_FILE) : 0;
}

static int ring_fill(const char *state, struct server_keyring *k, uint8_t *sk_buf,
                     struct cordon_diag *diag) {
  json_t *reg = NULL;
  int r = reg_load(state, &reg, diag);
  if (r < 0)
    return r;
  struct server_keyring n = {0};
  uint8_t *tsk = NULL;
  r = entry_keypair(state, reg_current(reg, "ticket"), n.ticket_pk, &tsk, diag);
  json_t *keys = json_object_get(reg, "keys"), *cur = reg_current(reg, "publisher");
  if (r == 0 && (!cur || hex_get(cur, "public", n.publisher_pk[0], 32) < 0))
    r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: no publisher key", SERVER_KEYS_FILE);
  n.n_publisher = 1;
  for (size_t i = json_array_size(keys);
       r == 0 && i-- > 0 && n.n_publisher < MSG_PUBLISHER_KEYS_MAX;) {
    json_t *e = json_array_get(keys, i);
    if (e == cur || strcmp(json_string_value(json_object_get(e, "role")), "publisher") != 0 ||
        json_is_string(json_object_get(e, "retired")))
      continue;
    if (hex_get(e, "public", n.publisher_pk[n.n_publisher], 32) < 0)
      r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: a malformed key", SERVER_KEYS_FILE);
    else
      n.n_publisher++;
  }
  json_t *chain = json_object_get(reg, "chain");
  size_t nc = json_array_size(chain);
  if (r == 0 && nc) {
    n.chain = calloc(nc, sizeof(*n.chain));
    if (!n.chain)
      r = -ENOMEM;
  }
  for (size_t i = 0; r == 0 && i < nc; i++) {
    json_t *c = json_array_get(chain, i);
    struct msg_keys *m = &n.chain[i];
    json_t *ret = json_object_get(c, "retired");
    m->serial = (uint64_t)json_integer_value(json_object_get(c, "serial"));
    if (hex_get(c, "ticket_key", m->ticket_key, 32) < 0 ||
        hex_get(c, "publisher_key", m->publisher_key, 32) < 0 ||
        hex_get(c, "ticket_sig", m->ticket_sig, MSG_SIG_LEN) < 0 ||
        hex_get(c, "publisher_sig", m->publisher_sig, MSG_SIG_LEN) < 0 ||
        json_array_size(ret) > MSG_PUBLISHER_KEYS_MAX) {
      r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: a malformed announcement",
                          SERVER_KEYS_FILE);
      break;
    }
    n.n_chain = i + 1;
    size_t nr = json_array_size(ret);
    if (nr == 0)
      continue;
    m->retired = calloc(nr, MSG_KEY_LEN);
    if (!m->retired) {
      r = -ENOMEM;
      break;
    }
    for (size_t j = 0; j < nr; j++) {
      const char *h = json_string_value(json_array_get(ret, j));
      size_t got = 0;
      if (!h || sodium_hex2bin(m->retired[j], 32, h, strlen(h), NULL, &got, NULL) != 0 ||
          got != 32) {
        r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: a malformed retired key",
                            SERVER_KEYS_FILE);
        break;
      }
      m->n_retired = j + 1;
    }
  }
  json_decref(reg);
  if (r < 0) {
    sodium_free(tsk);
    server_keyring_release(&n);
    return r;
  }
  if (sk_buf) { /* in place */
    memcpy(sk_buf, tsk, crypto_sign_SECRETKEYBYTES);
    sodium_free(tsk);
    n.ticket_sk = sk_buf;
  } else {
    n.ticket_sk = tsk;
  }
  k->ticket_sk = NULL;
  server_keyring_release(k);
  *k = n;
  return 0;
}

int server_keyring_load(const char *state_dir, struct server_keyring *out,
                        struct cordon_diag *diag) {
  memset(out, 0, sizeof(*out));
  return ring_fill(state_dir, out, NULL, diag);
}

int server_keyring_reload(const char *state_dir, struct server_keyring *k,
                          struct cordon_diag *diag) {
  return ring_fill(state_dir, k, k->ticket_sk, diag);
}

void server_keyring_release(struct server_keyring *k) {
  if (!k)
    return;
  for (size_t i = 0; i < k->n_chain; i++)
    free(k->chain[i].retired);
  free(k->chain);
  sodium_free(k->ticket_sk);
  memset(k, 0, sizeof(*k));
}

/* ---- a cluster's one identity ---- */

const char *const server_keys_top_files[] = {SERVER_TICKET_KEY_FILE,    SERVER_NOISE_KEY_FILE,
                                             SERVER_PUBLISHER_KEY_FILE, SERVER_PUBLISHER_PUB_FILE,
                                             SERVER_KEYS_FILE,          NULL};

/* Copy from/rel to to/rel with its mode (group/other write never; a secret
 * stays 0600): absent is -ENOENT, a non-regular file or a link refused. */
static int copy_one(const char *from, const char *to, const char *rel, struct cordon_diag *diag) {
  char src[4096], dir[4096];
  const char *slash = strrchr(rel, '/');
  int n = snprintf(src, sizeof(src), "%s/%s", from, rel);
  int m = slash ? snprintf(dir, sizeof(dir), "%s/%.*s", to, (int)(slash - rel), rel)
                : snprintf(dir, sizeof(dir), "%s", to);
  if (n < 0 || (size_t)n >= sizeof(src) || m < 0 || (size_t)m >= sizeof(dir))
    return cordon_diag_set(diag, -ENAMETOOLONG, "%s: path too long", rel);
  struct stat st;
  if (lstat(src, &st) < 0)
    return errno == ENOENT ? -ENOENT
                           : cordon_diag_set(diag, -errno, "%s: %s", src, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not a regular file", src);
  char *data = NULL;
  size_t len = 0;
  int r = core_read_file(src, 1 << 20, CORDON_E_CONFIG_INVALID, src, &data, &len, diag);
  if (r < 0)
    return r;
  unsigned mode = (st.st_mode & 0077) ? 0644 : 0600;
  if (mode == 0644 && strstr(rel, ".pub") == NULL) /* a secret readable by others: refuse */
    r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                        "%s: a key file that group or others can access", src);
  else if ((r = core_write_file_atomic(dir, slash ? slash + 1 : rel, data, len, mode)) < 0)
    cordon_diag_set(diag, r, "%s/%s: %s", to, rel, strerror(-r));
  sodium_memzero(data, len);
  free(data);
  return r;
}

/* The two keyrings name the same keys (and chain length). */
static bool rings_equal(const struct server_keyring *a, const struct server_keyring *b) {
  return memcmp(a->ticket_pk, b->ticket_pk, 32) == 0 && a->n_publisher == b->n_publisher &&
         memcmp(a->publisher_pk, b->publisher_pk, a->n_publisher * 32) == 0 &&
         a->n_chain == b->n_chain;
}

int server_keys_copy(const char *from_state, const char *to_state, struct cordon_diag *diag) {
  struct server_keyring src = {0}, dst = {0};
  uint8_t *noise = NULL;
  char path[4096];
  int r = server_keyring_load(from_state, &src, diag);
  if (r == 0) {
    snprintf(path, sizeof(path), "%s/%s", from_state, SERVER_NOISE_KEY_FILE);
    r = keys_read_file(path, KEYFILE_NOISE_SECRET, &noise, diag);
    sodium_free(noise);
  }
  if (r < 0)
    goto out;
  for (size_t i = 0; r == 0 && server_keys_top_files[i]; i++) {
    r = copy_one(from_state, to_state, server_keys_top_files[i], diag);
    if (r == -ENOENT && strcmp(server_keys_top_files[i], SERVER_KEYS_FILE) == 0)
      r = 0; /* no rotation yet */
    else if (r == -ENOENT)
      r = cordon_diag_set(diag, -ENOENT, "%s/%s: missing", from_state, server_keys_top_files[i]);
  }
  /* the rotated keys: every file keys.json names under keys/ */
  json_t *reg = NULL;
  if (r == 0 && (r = reg_load(from_state, &reg, diag)) == 0) {
    json_t *e;
    size_t i;
    bool made_dir = false;
    json_array_foreach(json_object_get(reg, "keys"), i, e) {
      const char *f = json_string_value(json_object_get(e, "file"));
      if (r < 0 || !f || strncmp(f, SERVER_KEYS_DIR "/", sizeof(SERVER_KEYS_DIR)) != 0)
        continue;
      if (strchr(f + sizeof(SERVER_KEYS_DIR), '/') || strstr(f, "..")) {
        r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s/%s: bad key path %s", from_state,
                            SERVER_KEYS_FILE, f);
        break;
      }
      if (!made_dir) {
        snprintf(path, sizeof(path), "%s/%s", to_state, SERVER_KEYS_DIR);
        if (mkdir(path, 0700) < 0 && errno != EEXIST) {
          r = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
          break;
        }
        made_dir = true;
      }
      r = copy_one(from_state, to_state, f, diag);
      if (r == 0 && strcmp(json_string_value(json_object_get(e, "role")), "publisher") == 0) {
        char pub[512];
        size_t fl = strlen(f);
        if (fl > 4 && fl < sizeof(pub) && strcmp(f + fl - 4, ".key") == 0) {
          snprintf(pub, sizeof(pub), "%.*s.pub", (int)(fl - 4), f);
          r = copy_one(from_state, to_state, pub, diag);
          if (r == -ENOENT) /* init's first key keeps its public half in publisher.pub */
            r = 0;
        }
      }
      if (r == -ENOENT)
        r = cordon_diag_set(diag, -ENOENT, "%s/%s: missing", from_state, f);
    }
    json_decref(reg);
  }
  if (r == 0 && (r = server_keyring_load(to_state, &dst, diag)) == 0 && !rings_equal(&src, &dst))
    r = cordon_diag_set(diag, CORDON_E_INTERNAL, "%s: the copied keys differ from %s", to_state,
                        from_state);
out:
  server_keyring_release(&src);
  server_keyring_release(&dst);
  return r;
}

/* ---- a cluster's rotations, through the database ---- */

#define BUNDLE_MAGIC "CKB1"
#define BUNDLE_AD_TAG "cordon cluster keys 1"
#define BUNDLE_AD_LEN (sizeof(BUNDLE_AD_TAG) - 1 + 8 + 32)
#define BUNDLE_NONCE crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define BUNDLE_TAG crypto_aead_xchacha20poly1305_ietf_ABYTES
#define BUNDLE_PLAIN_MAX (SERVER_KEYS_BUNDLE_MAX - BUNDLE_NONCE - BUNDLE_TAG)
#define BUNDLE_NAME_MAX 160
#define BUNDLE_FILE_MAX (1u << 20) /* keys.json's limit (reg_load); key files are far smaller */

static void put_be(uint8_t *p, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; i--, v >>= 8)
    p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++)
    v = v << 8 | p[i];
  return v;
}

/* The sealing key and the associated data of serial. */
static int seal_params(const uint8_t noise_priv[32], uint64_t serial, uint8_t key[32],
                       uint8_t ad[BUNDLE_AD_LEN]) {
  uint8_t pub[32];
  if (sodium_init() < 0 || crypto_scalarmult_base(pub, noise_priv) != 0 ||
      crypto_kdf_derive_from_key(key, 32, 1, SERVER_KEYS_SEAL_CONTEXT, noise_priv) != 0)
    return CORDON_E_CRYPTO;
  memcpy(ad, BUNDLE_AD_TAG, sizeof(BUNDLE_AD_TAG) - 1);
  put_be(ad + sizeof(BUNDLE_AD_TAG) - 1, serial, 8);
  memcpy(ad + sizeof(BUNDLE_AD_TAG) - 1 + 8, pub, 32);
  return 0;
}

/* A name a bundle may carry: one of the top files, or keys/NAME.key|.pub
 * (NAME of [A-Za-z0-9_-], no dots, no slash). */
static bool bundle_name_ok(const char *name) {
  static const char *const top[] = {SERVER_TICKET_KEY_FILE, SERVER_PUBLISHER_KEY_FILE,
                                    SERVER_PUBLISHER_PUB_FILE, SERVER_KEYS_FILE};
  for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++)
    if (strcmp(name, top[i]) == 0)
      return true;
  const char *base = name + sizeof(SERVER_KEYS_DIR);
  size_t len = strlen(name);
  if (strncmp(name, SERVER_KEYS_DIR "/", sizeof(SERVER_KEYS_DIR)) != 0 || len >= BUNDLE_NAME_MAX ||
      len < sizeof(SERVER_KEYS_DIR) + 5 ||
      (strcmp(name + len - 4, ".key") != 0 && strcmp(name + len - 4, ".pub") != 0))
    return false;
  for (const char *c = base; c < name + len - 4; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '-' || *c == '_'))
      return false;
  return true;
}

static unsigned bundle_mode(const char *name) {
  size_t len = strlen(name);
  return len > 4 && strcmp(name + len - 4, ".pub") == 0 ? 0644 : 0600;
}

/* The files of state's bundle, in the order they are installed: STATE/keys/
 * first, the top copies, keys.json last. *out: n names of BUNDLE_NAME_MAX. */
static int bundle_list(const char *state, json_t *reg, char (*out)[BUNDLE_NAME_MAX], size_t *out_n,
                       struct cordon_diag *diag) {
  size_t n = 0, i;
  json_t *e;
  json_array_foreach(json_object_get(reg, "keys"), i, e) {
    const char *f = json_string_value(json_object_get(e, "file"));
    if (!f || !bundle_name_ok(f) || strncmp(f, SERVER_KEYS_DIR "/", sizeof(SERVER_KEYS_DIR)) != 0)
      return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s/%s: bad key path %s", state,
                             SERVER_KEYS_FILE, f ? f : "(none)");
    if (n + 6 > SERVER_KEYS_BUNDLE_FILES_MAX)
      return cordon_diag_set(diag, CORDON_E_LIMIT, "%s: too many key files", state);
    snprintf(out[n++], BUNDLE_NAME_MAX, "%s", f);
    size_t fl = strlen(f);
    if (strcmp(json_string_value(json_object_get(e, "role")), "publisher") == 0 &&
        strcmp(f + fl - 4, ".key") == 0) {
      char path[4096];
      struct stat st;
      snprintf(out[n], BUNDLE_NAME_MAX, "%.*s.pub", (int)(fl - 4), f);
      snprintf(path, sizeof(path), "%s/%s", state, out[n]);
      if (lstat(path, &st) == 0) /* init's first key keeps its public half in publisher.pub */
        n++;
    }
  }
  snprintf(out[n++], BUNDLE_NAME_MAX, "%s", SERVER_TICKET_KEY_FILE);
  snprintf(out[n++], BUNDLE_NAME_MAX, "%s", SERVER_PUBLISHER_KEY_FILE);
  snprintf(out[n++], BUNDLE_NAME_MAX, "%s", SERVER_PUBLISHER_PUB_FILE);
  snprintf(out[n++], BUNDLE_NAME_MAX, "%s", SERVER_KEYS_FILE);
  *out_n = n;
  return 0;
}

/* Append state/rel to the plaintext at *pos: u16 name length, the name,
 * u32 data length, the data. */
static int bundle_add(const char *state, const char *rel, uint8_t *plain, size_t *pos,
                      struct cordon_diag *diag) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", state, rel);
  struct stat st;
  if (lstat(path, &st) < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not a regular file", path);
  char *data = NULL;
  size_t len = 0, nl = strlen(rel);
  int r = core_read_file(path, BUNDLE_FILE_MAX, CORDON_E_CONFIG_INVALID, path, &data, &len, diag);
  if (r < 0)
    return r;
  if (*pos + 2 + nl + 4 + len > BUNDLE_PLAIN_MAX) {
    r = cordon_diag_set(diag, CORDON_E_LIMIT, "%s: the key files pass %u bytes", state,
                        SERVER_KEYS_BUNDLE_MAX);
  } else {
    put_be(plain + *pos, nl, 2);
    memcpy(plain + *pos + 2, rel, nl);
    put_be(plain + *pos + 2 + nl, len, 4);
    memcpy(plain + *pos + 6 + nl, data, len);
    *pos += 6 + nl + len;
  }
  sodium_memzero(data, len);
  free(data);
  return r;
}

int server_keys_bundle_seal(const char *state_dir, const uint8_t noise_priv[32],
                            uint8_t **out_sealed, size_t *out_len, uint64_t *out_serial,
                            struct cordon_diag *diag) {
  json_t *reg = NULL;
  char(*names)[BUNDLE_NAME_MAX] = calloc(SERVER_KEYS_BUNDLE_FILES_MAX, BUNDLE_NAME_MAX);
  uint8_t *plain = sodium_malloc(BUNDLE_PLAIN_MAX), *sealed = NULL;
  uint8_t key[32], ad[BUNDLE_AD_LEN];
  size_t n = 0, pos = 8;
  int r = !names || !plain ? -ENOMEM : reg_load(state_dir, &reg, diag);
  if (r < 0)
    goto out;
  uint64_t serial = (uint64_t)json_integer_value(json_object_get(reg, "serial"));
  if (serial == 0) {
    r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: no rotation yet, nothing to seal",
                        state_dir);
    goto out;
  }
  if ((r = bundle_list(state_dir, reg, names, &n, diag)) < 0)
    goto out;
  memcpy(plain, BUNDLE_MAGIC, 4);
  put_be(plain + 4, n, 4);
  for (size_t i = 0; r == 0 && i < n; i++)
    r = bundle_add(state_dir, names[i], plain, &pos, diag);
  if (r == 0 && (r = seal_params(noise_priv, serial, key, ad)) < 0)
    cordon_diag_set(diag, r, "cannot derive the sealing key");
  if (r == 0 && !(sealed = malloc(BUNDLE_NONCE + pos + BUNDLE_TAG)))
    r = -ENOMEM;
  if (r < 0)
    goto out;
  randombytes_buf(sealed, BUNDLE_NONCE);
  unsigned long long clen = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(sealed + BUNDLE_NONCE, &clen, plain, pos, ad,
                                             sizeof(ad), NULL, sealed, key);
  *out_sealed = sealed;
  *out_len = BUNDLE_NONCE + (size_t)clen;
  *out_serial = serial;
out:
  sodium_memzero(key, sizeof(key));
  sodium_free(plain);
  free(names);
  json_decref(reg);
  return r;
}

int server_keys_bundle_open(const uint8_t noise_priv[32], uint64_t serial, const uint8_t *sealed,
                            size_t len, uint8_t **out_plain, size_t *out_plain_len,
                            struct cordon_diag *diag) {
  if (len > SERVER_KEYS_BUNDLE_MAX)
    return cordon_diag_set(diag, CORDON_E_LIMIT, "a sealed bundle of %zu bytes (at most %u)", len,
                           SERVER_KEYS_BUNDLE_MAX);
  if (len < BUNDLE_NONCE + BUNDLE_TAG + 8)
    return cordon_diag_set(diag, CORDON_E_CRYPTO, "a sealed bundle cut short (%zu bytes)", len);
  uint8_t key[32], ad[BUNDLE_AD_LEN];
  int r = seal_params(noise_priv, serial, key, ad);
  if (r < 0)
    return cordon_diag_set(diag, r, "cannot derive the sealing key");
  uint8_t *plain = sodium_malloc(len - BUNDLE_NONCE - BUNDLE_TAG);
  if (!plain) {
    sodium_memzero(key, sizeof(key));
    return -ENOMEM;
  }
  unsigned long long mlen = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(plain, &mlen, NULL, sealed + BUNDLE_NONCE,
                                                 len - BUNDLE_NONCE, ad, sizeof(ad), sealed,
                                                 key) != 0) {
    r = cordon_diag_set(diag, CORDON_E_CRYPTO,
                        "the sealed bundle does not open: not sealed by this cluster's Noise key "
                        "for serial %llu, or altered",
                        (unsigned long long)serial);
    sodium_free(plain);
  } else {
    *out_plain = plain;
    *out_plain_len = (size_t)mlen;
  }
  sodium_memzero(key, sizeof(key));
  return r;
}

struct bundle_entry {
  char name[BUNDLE_NAME_MAX];
  const uint8_t *data;
  size_t len;
};

/* The entries of an opened bundle (borrowing plain), checked: known names,
 * no name twice, keys.json present. */
static int bundle_parse(const uint8_t *plain, size_t len, struct bundle_entry **out, size_t *out_n,
                        struct cordon_diag *diag) {
  if (len < 8 || memcmp(plain, BUNDLE_MAGIC, 4) != 0)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "not a cordon key bundle");
  uint64_t n = get_be(plain + 4, 4);
  if (n == 0 || n > SERVER_KEYS_BUNDLE_FILES_MAX)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "a key bundle of %llu files",
                           (unsigned long long)n);
  struct bundle_entry *e = calloc(n, sizeof(*e));
  if (!e)
    return -ENOMEM;
  size_t pos = 8;
  bool has_reg = false;
  int r = 0;
  for (size_t i = 0; r == 0 && i < n; i++) {
    size_t nl = pos + 2 <= len ? (size_t)get_be(plain + pos, 2) : SIZE_MAX;
    if (nl == SIZE_MAX || nl == 0 || nl >= BUNDLE_NAME_MAX || pos + 2 + nl + 4 > len) {
      r = CORDON_E_CONFIG_INVALID;
      break;
    }
    memcpy(e[i].name, plain + pos + 2, nl);
    e[i].name[nl] = '\0';
    e[i].len = (size_t)get_be(plain + pos + 2 + nl, 4);
    e[i].data = plain + pos + 6 + nl;
    if (strlen(e[i].name) != nl || !bundle_name_ok(e[i].name) || e[i].len > BUNDLE_FILE_MAX ||
        e[i].len > len - (pos + 6 + nl)) {
      r = CORDON_E_CONFIG_INVALID;
      break;
    }
    pos += 6 + nl + e[i].len;
    for (size_t j = 0; j < i; j++)
      if (strcmp(e[j].name, e[i].name) == 0)
        r = CORDON_E_CONFIG_INVALID;
    has_reg = has_reg || strcmp(e[i].name, SERVER_KEYS_FILE) == 0;
  }
  if (r == 0 && (pos != len || !has_reg))
    r = CORDON_E_CONFIG_INVALID;
  if (r < 0) {
    free(e);
    return cordon_diag_set(diag, r, "a malformed key bundle");
  }
  *out = e;
  *out_n = n;
  return 0;
}

/* Write the entries into dir (dir/keys/ for keys/...) in their order,
 * keys.json last: the commit point. */
static int bundle_write(const char *dir, const struct bundle_entry *e, size_t n,
                        struct cordon_diag *diag) {
  char sub[4096];
  snprintf(sub, sizeof(sub), "%s/%s", dir, SERVER_KEYS_DIR);
  struct stat st;
  if (lstat(sub, &st) < 0 && errno == ENOENT && mkdir(sub, 0700) < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", sub, strerror(errno));
  if (lstat(sub, &st) < 0 || !S_ISDIR(st.st_mode))
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not a directory", sub);
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < n; i++) {
      bool reg = strcmp(e[i].name, SERVER_KEYS_FILE) == 0;
      if (reg != (pass == 1))
        continue;
      bool in_keys = strchr(e[i].name, '/') != NULL;
      const char *name = in_keys ? strchr(e[i].name, '/') + 1 : e[i].name;
      int r = core_write_file_atomic(in_keys ? sub : dir, name, e[i].data, e[i].len,
                                     bundle_mode(e[i].name));
      if (r < 0)
        return cordon_diag_set(diag, r, "%s/%s: %s", dir, e[i].name, strerror(-r));
    }
  }
  return 0;
}

static void scratch_remove(const char *dir, const struct bundle_entry *e, size_t n) {
  char path[4096 + BUNDLE_NAME_MAX + 8];
  for (size_t i = 0; i < n; i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, e[i].name);
    unlink(path);
  }
  snprintf(path, sizeof(path), "%s/%s", dir, SERVER_KEYS_DIR);
  rmdir(path);
  rmdir(dir);
}

/* Every key file the bundle's keys.json names is one of its own files
 * under keys/ (so loading it reads nothing outside the bundle). */
static int bundle_names_own(const char *scratch, const struct bundle_entry *e, size_t n,
                            struct cordon_diag *diag) {
  json_t *reg = NULL, *k;
  size_t i;
  struct cordon_diag d = {{0}};
  int r = reg_load(scratch, &reg, &d);
  if (r < 0)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "the bundle's %s: %s", SERVER_KEYS_FILE,
                           d.msg);
  json_array_foreach(json_object_get(reg, "keys"), i, k) {
    const char *f = json_string_value(json_object_get(k, "file"));
    bool found = false;
    for (size_t j = 0; f && !found && j < n; j++)
      found = strchr(e[j].name, '/') && strcmp(e[j].name, f) == 0;
    if (!found) {
      r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "the bundle's %s names %s, not in it",
                          SERVER_KEYS_FILE, f ? f : "no file");
      break;
    }
  }
  json_decref(reg);
  return r;
}

static bool announcement_equal(const struct msg_keys *a, const struct msg_keys *b) {
  return a->serial == b->serial && memcmp(a->ticket_key, b->ticket_key, MSG_KEY_LEN) == 0 &&
         memcmp(a->publisher_key, b->publisher_key, MSG_KEY_LEN) == 0 &&
         memcmp(a->ticket_sig, b->ticket_sig, MSG_SIG_LEN) == 0 &&
         memcmp(a->publisher_sig, b->publisher_sig, MSG_SIG_LEN) == 0 &&
         a->n_retired == b->n_retired &&
         (a->n_retired == 0 || memcmp(a->retired, b->retired, a->n_retired * MSG_KEY_LEN) == 0);
}

int server_keys_bundle_install(const char *state_dir, const uint8_t *plain, size_t plain_len,
                               uint64_t serial, const struct server_keyring *own,
                               struct cordon_diag *diag) {
  struct bundle_entry *e = NULL;
  size_t n = 0;
  int r = bundle_parse(plain, plain_len, &e, &n, diag);
  if (r < 0)
    return r;
  char scratch[4096];
  snprintf(scratch, sizeof(scratch), "%s/.keysync-XXXXXX", state_dir);
  if (!mkdtemp(scratch)) {
    r = cordon_diag_set(diag, -errno, "%s: %s", scratch, strerror(errno));
    free(e);
    return r;
  }
  struct server_keyring fresh = {0};
  struct cordon_diag d = {{0}};
  r = bundle_write(scratch, e, n, diag);
  if (r == 0)
    r = bundle_names_own(scratch, e, n, diag);
  if (r == 0 && server_keyring_load(scratch, &fresh, &d) < 0)
    r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "the bundle's keys do not load: %s", d.msg);
  if (r == 0 && fresh.n_chain != serial)
    r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                        "the bundle of serial %llu holds %zu announcements",
                        (unsigned long long)serial, fresh.n_chain);
  for (size_t i = 0; r == 0 && i < own->n_chain; i++)
    if (i >= fresh.n_chain || !announcement_equal(&own->chain[i], &fresh.chain[i]))
      r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                          "the bundle's chain does not extend this server's: announcement %zu "
                          "differs (keys rotated on two servers at once?)",
                          i + 1);
  if (r == 0 && fresh.n_chain <= own->n_chain)
    r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                        "the bundle's chain (%zu) is not newer than this server's (%zu)",
                        fresh.n_chain, own->n_chain);
  server_keyring_release(&fresh);
  json_t *disk = NULL; /* newer on disk than in own: a rotation of this state was just committed */
  if (r == 0 && reg_load(state_dir, &disk, &d) == 0 &&
      (uint64_t)json_integer_value(json_object_get(disk, "serial")) >= serial)
    r = -EALREADY;
  json_decref(disk);
  if (r == 0)
    r = bundle_write(state_dir, e, n, diag);
  scratch_remove(scratch, e, n);
  free(e);
  return r;
}
