#include "agent/state.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/servers.h"
#include "agent/trust.h"
#include "compat/posix.h"
#include "core/file.h"
#include "platform/fs.h"
#include "proto/keyfile.h"

static int hex_field(json_t *o, const char *key, uint8_t *out, size_t n) {
  const char *s = json_string_value(json_object_get(o, key));
  size_t got;
  if (!s || sodium_hex2bin(out, n, s, strlen(s), NULL, &got, NULL) != 0 || got != n)
    return -1;
  return 0;
}

static int str_field(json_t *o, const char *key, char *out, size_t n) {
  const char *s = json_string_value(json_object_get(o, key));
  if (!s || strlen(s) >= n)
    return -1;
  snprintf(out, n, "%s", s);
  return 0;
}

int agent_pairing_load(const char *dir, struct agent_pairing *out_pairing,
                       struct cordon_diag *diag) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", dir, AGENT_PAIRING_FILE);
  struct stat st;
  if (stat(path, &st) < 0)
    return cordon_diag_set(diag, -ENOENT, "not paired (no %s); run `cordon-agent pair`", path);
  if (st.st_size > 16384)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s is too large", path);
  json_error_t je;
  json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  struct agent_pairing p;
  memset(&p, 0, sizeof(p));
  json_t *port = o ? json_object_get(o, "port") : NULL;
  if (!o || str_field(o, "host", p.host, sizeof(p.host)) < 0 || !json_is_integer(port) ||
      hex_field(o, "server_key", p.server_key, 32) < 0 ||
      hex_field(o, "device_id", p.device_id, CORDON_ID_LEN) < 0 ||
      str_field(o, "user", p.user, sizeof(p.user)) < 0 ||
      str_field(o, "name", p.name, sizeof(p.name)) < 0 ||
      hex_field(o, "ticket_key", p.ticket_key, 32) < 0) {
    json_decref(o);
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s is damaged", path);
  }
  p.port = (int)json_integer_value(port);
  json_decref(o);
  *out_pairing = p;
  return 0;
}

int agent_identity_load(const char *dir, uint8_t **out_priv, struct cordon_diag *diag) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", dir, AGENT_IDENTITY_FILE);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  struct stat st;
  char buf[KEYFILE_MAX_BYTES];
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && (st.st_mode & 077) == 0)
    n = read(fd, buf, sizeof(buf));
  close(fd);
  if (n <= 0)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                           "%s: unreadable, or readable by group or others", path);
  uint8_t *priv = sodium_malloc(32);
  if (!priv)
    return -ENOMEM;
  int r = keyfile_parse(KEYFILE_NOISE_SECRET, buf, (size_t)n, priv, diag);
  sodium_memzero(buf, sizeof(buf));
  if (r < 0) {
    sodium_free(priv);
    return r;
  }
  *out_priv = priv;
  return 0;
}

static int signing_key_write(const char *dir, const uint8_t seed[32], struct cordon_diag *diag) {
  char text[KEYFILE_MAX_BYTES];
  size_t len;
  int r = keyfile_format(KEYFILE_DEVICE_SIGN_SECRET, seed, "cordon-agent receipt signing key", text,
                         sizeof(text), &len);
  if (r == 0)
    r = core_write_file_atomic(dir, AGENT_SIGNING_FILE, text, len, 0600);
  sodium_memzero(text, sizeof(text));
  if (r < 0)
    return cordon_diag_set(diag, r, "cannot write the signing key: %s", strerror(-r));
  return 0;
}

int agent_signing_key_load(const char *dir, struct agent_pairing *p, struct cordon_diag *diag) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", dir, AGENT_SIGNING_FILE);
  uint8_t *seed = sodium_malloc(32), *sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
  int r = seed && sk ? 0 : -ENOMEM;
  int fd = r == 0 ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
  if (r == 0 && fd < 0 && errno == ENOENT) { /* paired before receipts: make one now */
    randombytes_buf(seed, 32);
    r = signing_key_write(dir, seed, diag);
  } else if (r == 0 && fd < 0) {
    r = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  } else if (r == 0) {
    struct stat st;
    char buf[KEYFILE_MAX_BYTES];
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && (st.st_mode & 077) == 0)
      n = read(fd, buf, sizeof(buf));
    r = n > 0 ? keyfile_parse(KEYFILE_DEVICE_SIGN_SECRET, buf, (size_t)n, seed, diag)
              : cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                                "%s: unreadable, or readable by group or others", path);
    sodium_memzero(buf, sizeof(buf));
  }
  if (fd >= 0)
    close(fd);
  if (r == 0) {
    crypto_sign_seed_keypair(p->sign_pk, sk, seed);
    p->sign_sk = sk;
    sk = NULL;
  }
  sodium_free(seed);
  sodium_free(sk);
  return r;
}

int agent_pairing_save(const char *dir, const uint8_t *identity_priv, const struct agent_pairing *p,
                       const uint8_t (*publisher_keys)[32], size_t n_publisher_keys,
                       struct cordon_diag *diag) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", dir, AGENT_PAIRING_FILE);
  if (access(path, F_OK) == 0)
    return cordon_diag_set(diag, -EEXIST, "already paired (%s); run `cordon-agent unpair` first",
                           path);
  int r = fs_mkdir_p(dir, 0700);
  if (r < 0)
    return cordon_diag_set(diag, r, "%s: %s", dir, strerror(-r));
  char text[KEYFILE_MAX_BYTES];
  size_t len;
  r = keyfile_format(KEYFILE_NOISE_SECRET, identity_priv, "cordon-agent identity", text,
                     sizeof(text), &len);
  if (r == 0)
    r = core_write_file_atomic(dir, AGENT_IDENTITY_FILE, text, len, 0600);
  sodium_memzero(text, sizeof(text));
  if (r < 0)
    return cordon_diag_set(diag, r, "cannot write the identity key: %s", strerror(-r));
  uint8_t seed[32];
  randombytes_buf(seed, sizeof(seed)); /* the receipt signing key, made at pairing */
  r = signing_key_write(dir, seed, diag);
  sodium_memzero(seed, sizeof(seed));
  if (r < 0)
    return r;
  char trusted[PATH_MAX];
  snprintf(trusted, sizeof(trusted), "%s/%s", dir, AGENT_TRUSTED_DIR);
  fs_mkdir_p(trusted, 0700);
  for (size_t i = 0; i < n_publisher_keys && i < 1; i++) {
    r = keyfile_format(KEYFILE_PUBLISHER_PUBLIC, publisher_keys[i], "the paired server", text,
                       sizeof(text), &len);
    if (r == 0)
      r = core_write_file_atomic(trusted, AGENT_SERVER_PUBLISHER_FILE, text, len, 0644);
    if (r < 0)
      return cordon_diag_set(diag, r, "cannot write the publisher key");
  }
  char sk[65], dev[CORDON_ID_HEX_SIZE], tk[65];
  sodium_bin2hex(sk, sizeof(sk), p->server_key, 32);
  cordon_id_to_hex(p->device_id, dev);
  sodium_bin2hex(tk, sizeof(tk), p->ticket_key, 32);
  json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:s}", "host", p->host, "port", p->port,
                        "server_key", sk, "device_id", dev, "user", p->user, "name", p->name,
                        "ticket_key", tk);
  char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
  json_decref(o);
  if (!s)
    return -ENOMEM;
  r = core_write_file_atomic(dir, AGENT_PAIRING_FILE, s, strlen(s), 0600);
  free(s);
  if (r < 0)
    return cordon_diag_set(diag, r, "cannot write %s: %s", AGENT_PAIRING_FILE, strerror(-r));
  return 0;
}

int agent_pairing_remove(const char *dir, struct cordon_diag *diag) {
  char path[PATH_MAX];
  const char *names[] = {AGENT_PAIRING_FILE, AGENT_IDENTITY_FILE, AGENT_SIGNING_FILE,
                         AGENT_SERVERS_FILE};
  bool any = false;
  for (size_t i = 0; i < 4; i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    if (unlink(path) == 0 && i < 2) /* signing.key alone is not a pairing */
      any = true;
  }
  snprintf(path, sizeof(path), "%s/%s/%s", dir, AGENT_TRUSTED_DIR, AGENT_SERVER_PUBLISHER_FILE);
  unlink(path);
  return any ? 0 : cordon_diag_set(diag, -ENOENT, "not paired");
}
