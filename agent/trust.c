#include "agent/trust.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/state.h"
#include "compat/posix.h"
#include "core/file.h"
#include "proto/keyfile.h"
#include "proto/msg.h"

static int load_fd(struct cpkg_trust *trust, int fd, const char *name, struct cordon_diag *diag) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", name, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not a regular file", name);
  char text[KEYFILE_MAX_BYTES + 1];
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fd, text + len, sizeof(text) - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return cordon_diag_set(diag, -errno, "%s: %s", name, strerror(errno));
    if (n == 0 || (len += (size_t)n) == sizeof(text))
      break;
  }
  uint8_t pk[KEYFILE_KEY_SIZE];
  struct cordon_diag d = {{0}};
  int err = keyfile_parse(KEYFILE_PUBLISHER_PUBLIC, text, len, pk, &d);
  if (err)
    return cordon_diag_set(diag, err, "%s: %s", name, d.msg);
  err = cpkg_trust_add(trust, pk);
  if (err == CORDON_E_LIMIT)
    return cordon_diag_set(diag, err, "%s: more than %u trusted keys", name, CPKG_MAX_TRUSTED_KEYS);
  return err;
}

int agent_trust_load_file(struct cpkg_trust *trust, const char *path, struct cordon_diag *diag) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  int err = load_fd(trust, fd, path, diag);
  close(fd);
  return err;
}

int agent_trust_load_dir(struct cpkg_trust *trust, const char *dir, struct cordon_diag *diag) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    if (errno == ENOENT)
      return 0;
    return cordon_diag_set(diag, -errno, "%s: %s", dir, strerror(errno));
  }
  DIR *d = fdopendir(dfd);
  if (!d) {
    int e = errno;
    close(dfd);
    return cordon_diag_set(diag, -e, "%s: %s", dir, strerror(e));
  }
  int err = 0;
  struct dirent *de;
  while (!err && (de = readdir(d)) != NULL) {
    size_t n = strlen(de->d_name);
    if (n <= 4 || strcmp(de->d_name + n - 4, ".pub") != 0)
      continue;
    char name[4096];
    snprintf(name, sizeof(name), "%s/%s", dir, de->d_name);
    /* The directory is the owner's; a link in it is not followed. */
    int fd =
        openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      err = cordon_diag_set(diag, errno == ELOOP ? CORDON_E_CONFIG_INVALID : -errno, "%s: %s", name,
                            errno == ELOOP ? "is a symlink" : strerror(errno));
      break;
    }
    err = load_fd(trust, fd, name, diag);
    close(fd);
  }
  closedir(d);
  return err;
}

/* ---- the paired server's rotated keys ---- */

static int read_serial_file(const char *dir, uint64_t *out_serial, uint8_t ticket_key[32],
                            bool *out_have, struct cordon_diag *diag) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, AGENT_SERVER_KEYS_FILE);
  json_error_t je;
  json_t *o = json_load_file(path, 0, &je);
  *out_have = false;
  *out_serial = 0;
  if (!o)
    return access(path, F_OK) == 0
               ? cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: %s", path, je.text)
               : 0;
  const char *hex = json_string_value(json_object_get(o, "ticket_key"));
  json_t *serial = json_object_get(o, "serial");
  size_t got = 0;
  int r = 0;
  if (!json_is_integer(serial) || json_integer_value(serial) < 1 || !hex ||
      sodium_hex2bin(ticket_key, 32, hex, strlen(hex), NULL, &got, NULL) != 0 || got != 32)
    r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not the agent's server keys", path);
  else {
    *out_serial = (uint64_t)json_integer_value(serial);
    *out_have = true;
  }
  json_decref(o);
  return r;
}

int agent_trust_server_keys_load(const char *dir, struct agent_pairing *p,
                                 struct cordon_diag *diag) {
  uint64_t serial;
  uint8_t tk[32];
  bool have;
  int r = read_serial_file(dir, &serial, tk, &have, diag);
  if (r == 0 && have)
    memcpy(p->ticket_key, tk, 32);
  return r;
}

static bool is_server_publisher_file(const char *name) {
  size_t n = strlen(name), pre = strlen("server-publisher");
  return n >= pre + 4 && strncmp(name, "server-publisher", pre) == 0 &&
         strcmp(name + n - 4, ".pub") == 0 && (name[pre] == '.' || name[pre] == '-');
}

/* The server's publisher keys this agent holds (trusted/server-publisher*.pub). */
struct server_pubs {
  uint8_t key[CPKG_MAX_TRUSTED_KEYS][32]; /* the server's chain has up to 256: all of them */
  char name[CPKG_MAX_TRUSTED_KEYS][96];
  size_t n;
};

static void load_server_pubs(const char *dir, struct server_pubs *out) {
  out->n = 0;
  char tdir[4096];
  snprintf(tdir, sizeof(tdir), "%s/%s", dir, AGENT_TRUSTED_DIR);
  DIR *d = opendir(tdir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL && out->n < CPKG_MAX_TRUSTED_KEYS) {
    if (!is_server_publisher_file(de->d_name) || strlen(de->d_name) >= sizeof(out->name[0]))
      continue;
    char path[4200];
    if (snprintf(path, sizeof(path), "%s/%s", tdir, de->d_name) >= (int)sizeof(path))
      continue;
    char text[KEYFILE_MAX_BYTES + 1];
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
      fclose(f);
    if (keyfile_parse(KEYFILE_PUBLISHER_PUBLIC, text, len, out->key[out->n], NULL) == 0 &&
        snprintf(out->name[out->n], sizeof(out->name[0]), "%s", de->d_name) <
            (int)sizeof(out->name[0]))
      out->n++;
  }
  closedir(d);
}

int agent_trust_apply_keys(const char *dir, struct agent_pairing *p, const struct msg_keys *k,
                           struct cordon_diag *diag) {
  return agent_trust_apply_keys_changed(dir, p, k, NULL, diag);
}

int agent_trust_apply_keys_changed(const char *dir, struct agent_pairing *p,
                                   const struct msg_keys *k, bool *out_changed,
                                   struct cordon_diag *diag) {
  bool changed_ = false, *changed = out_changed ? out_changed : &changed_;
  *changed = false;
  uint64_t serial;
  uint8_t tk[32];
  bool have;
  int r = read_serial_file(dir, &serial, tk, &have, diag);
  if (r < 0)
    return r;
  if (k->serial > (uint64_t)INT64_MAX) /* server-keys.json could not hold it */
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "keys %llu: a serial past 2^63 - 1",
                           (unsigned long long)k->serial);
  if (k->serial <= serial)
    return 0;
  struct server_pubs *pubs = malloc(sizeof(*pubs));
  if (!pubs)
    return -ENOMEM;
  load_server_pubs(dir, pubs);
  bool have_pub = false;
  for (size_t i = 0; i < pubs->n; i++)
    have_pub |= sodium_memcmp(pubs->key[i], k->publisher_key, 32) == 0;
  bool have_ticket = sodium_memcmp(p->ticket_key, k->ticket_key, 32) == 0;
  if (!have_ticket || !have_pub) {
    uint8_t data[MSG_KEYS_SIGNED_LEN];
    msg_keys_signed_data(k, data);
    bool pub_ok = false;
    for (size_t i = 0; i < pubs->n && !pub_ok; i++)
      pub_ok = crypto_sign_verify_detached(k->publisher_sig, data, sizeof(data), pubs->key[i]) == 0;
    if (!pub_ok ||
        crypto_sign_verify_detached(k->ticket_sig, data, sizeof(data), p->ticket_key) != 0) {
      free(pubs);
      return cordon_diag_set(diag, CORDON_E_SIGNATURE_INVALID,
                             "keys %llu: not signed by the server's current keys",
                             (unsigned long long)k->serial);
    }
  }
  char tdir[4096];
  snprintf(tdir, sizeof(tdir), "%s/%s", dir, AGENT_TRUSTED_DIR);
  if (!have_pub) {
    char text[KEYFILE_MAX_BYTES], name[96];
    size_t len;
    snprintf(name, sizeof(name), "server-publisher-%llu.pub", (unsigned long long)k->serial);
    r = keyfile_format(KEYFILE_PUBLISHER_PUBLIC, k->publisher_key, "the paired server (rotated)",
                       text, sizeof(text), &len);
    if (r == 0) {
      mkdir(tdir, 0700);
      r = core_write_file_atomic(tdir, name, text, len, 0644);
    }
    if (r < 0) {
      free(pubs);
      return cordon_diag_set(diag, r, "%s/%s: %s", tdir, name, strerror(-r));
    }
    *changed = true;
  }
  for (size_t i = 0; i < pubs->n; i++) {
    bool retired = false;
    for (size_t j = 0; j < k->n_retired && k->retired; j++)
      retired |= sodium_memcmp(k->retired[j], pubs->key[i], 32) == 0;
    if (retired && sodium_memcmp(pubs->key[i], k->publisher_key, 32) != 0) {
      char path[4200];
      snprintf(path, sizeof(path), "%s/%s", tdir, pubs->name[i]);
      if (unlink(path) == 0)
        *changed = true;
    }
  }
  free(pubs);
  char hex[65];
  sodium_bin2hex(hex, sizeof(hex), k->ticket_key, 32);
  json_t *o = json_pack("{s:I, s:s}", "serial", (json_int_t)k->serial, "ticket_key", hex);
  char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
  json_decref(o);
  if (!s)
    return -ENOMEM;
  r = core_write_file_atomic(dir, AGENT_SERVER_KEYS_FILE, s, strlen(s), 0600);
  free(s);
  if (r < 0)
    return cordon_diag_set(diag, r, "%s/%s: %s", dir, AGENT_SERVER_KEYS_FILE, strerror(-r));
  memcpy(p->ticket_key, k->ticket_key, 32);
  return 1;
}

uint64_t agent_trust_keys_serial(const char *dir) {
  uint64_t serial;
  uint8_t tk[32];
  bool have;
  return read_serial_file(dir, &serial, tk, &have, NULL) == 0 && have ? serial : 0;
}

void agent_trust_server_keys_remove(const char *dir) {
  char path[4200], tdir[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, AGENT_SERVER_KEYS_FILE);
  unlink(path);

  snprintf(tdir, sizeof(tdir), "%s/%s", dir, AGENT_TRUSTED_DIR);
  DIR *d = opendir(tdir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (is_server_publisher_file(de->d_name) && de->d_name[strlen("server-publisher")] == '-')
      unlinkat(dirfd(d), de->d_name, 0);
  }
  closedir(d);
}
