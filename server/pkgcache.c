#include "server/pkgcache.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct entry {
  bool used;
  dev_t dev;
  ino_t ino;
  off_t fsize;
  struct timespec mtime, ctime;
  uint8_t trust[PKGCACHE_TRUST_SIZE];
  uint8_t hash[CPKG_HASH_SIZE];
  uint64_t size;
  char *manifest_json;
  size_t manifest_len;
  uint64_t last_use; /* the cache's clock when it was last got or put */
};

struct pkgcache {
  size_t max;
  uint64_t clock;
  struct entry e[PKGCACHE_MAX];
};

int pkgcache_new(size_t max, struct pkgcache **out_cache) {
  if (max > PKGCACHE_MAX)
    return -EINVAL;
  struct pkgcache *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->max = max ? max : PKGCACHE_MAX;
  *out_cache = c;
  return 0;
}

void pkgcache_free(struct pkgcache *c) {
  if (!c)
    return;
  for (size_t i = 0; i < c->max; i++)
    free(c->e[i].manifest_json);
  free(c);
}

void pkgcache_trust_digest(const uint8_t (*keys)[32], size_t n, uint8_t out[PKGCACHE_TRUST_SIZE]) {
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, PKGCACHE_TRUST_SIZE);
  for (size_t i = 0; i < n; i++)
    crypto_generichash_update(&h, keys[i], 32);
  crypto_generichash_final(&h, out, PKGCACHE_TRUST_SIZE);
}

static bool same_time(struct timespec a, struct timespec b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static bool same_file(const struct entry *x, const struct stat *st) {
  return x->used && x->dev == st->st_dev && x->ino == st->st_ino && x->fsize == st->st_size &&
         same_time(x->mtime, st->st_mtim) && same_time(x->ctime, st->st_ctim);
}

int pkgcache_get(struct pkgcache *c, const struct stat *st,
                 const uint8_t trust[PKGCACHE_TRUST_SIZE], struct pkgcache_hit *out) {
  for (size_t i = 0; i < c->max; i++) {
    struct entry *x = &c->e[i];
    if (!same_file(x, st) || sodium_memcmp(x->trust, trust, PKGCACHE_TRUST_SIZE) != 0)
      continue;
    char *json = malloc(x->manifest_len + 1);
    if (!json)
      return -ENOMEM;
    memcpy(json, x->manifest_json, x->manifest_len + 1);
    memcpy(out->hash, x->hash, CPKG_HASH_SIZE);
    out->size = x->size;
    out->manifest_json = json;
    out->manifest_len = x->manifest_len;
    x->last_use = ++c->clock;
    return 0;
  }
  return -ENOENT;
}

int pkgcache_put(struct pkgcache *c, const struct stat *st,
                 const uint8_t trust[PKGCACHE_TRUST_SIZE], const uint8_t hash[CPKG_HASH_SIZE],
                 uint64_t size, const char *manifest_json, size_t manifest_len) {
  /* a file changed within the file system's timestamp granularity of its
   * last change could keep both times: not cached until it is older */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  if (st->st_ctim.tv_sec + PKGCACHE_RACY_S >= now.tv_sec ||
      st->st_mtim.tv_sec + PKGCACHE_RACY_S >= now.tv_sec)
    return -EAGAIN;
  char *json = malloc(manifest_len + 1);
  if (!json)
    return -ENOMEM;
  memcpy(json, manifest_json, manifest_len);
  json[manifest_len] = '\0';
  /* the same file's entry (verified with other keys, say), else a free
   * one, else the least recently used */
  struct entry *slot = NULL;
  for (size_t i = 0; i < c->max && !slot; i++)
    if (same_file(&c->e[i], st))
      slot = &c->e[i];
  for (size_t i = 0; i < c->max && !slot; i++)
    if (!c->e[i].used)
      slot = &c->e[i];
  if (!slot) {
    slot = &c->e[0];
    for (size_t i = 1; i < c->max; i++)
      if (c->e[i].last_use < slot->last_use)
        slot = &c->e[i];
  }
  free(slot->manifest_json);
  *slot = (struct entry){.used = true,
                         .dev = st->st_dev,
                         .ino = st->st_ino,
                         .fsize = st->st_size,
                         .mtime = st->st_mtim,
                         .ctime = st->st_ctim,
                         .size = size,
                         .manifest_json = json,
                         .manifest_len = manifest_len,
                         .last_use = ++c->clock};
  memcpy(slot->trust, trust, PKGCACHE_TRUST_SIZE);
  memcpy(slot->hash, hash, CPKG_HASH_SIZE);
  return 0;
}

size_t pkgcache_count(const struct pkgcache *c) {
  size_t n = 0;
  for (size_t i = 0; i < c->max; i++)
    n += c->e[i].used;
  return n;
}
