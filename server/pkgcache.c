#include "server/pkgcache.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct entry {
  bool used;
  uint8_t key[PKGCACHE_KEY_SIZE];
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

/* Exactly len bytes at off, or -EINVAL when the file ends first. */
static int pread_full(int fd, uint8_t *buf, size_t len, off_t off) {
  while (len > 0) {
    ssize_t n = pread(fd, buf, len, off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -errno;
    if (n == 0)
      return -EINVAL;
    buf += n;
    len -= (size_t)n;
    off += n;
  }
  return 0;
}

int pkgcache_key_of_fd(int fd, uint8_t out[PKGCACHE_KEY_SIZE]) {
  uint8_t buf[65536];
  int r = pread_full(fd, buf, CPKG_HEADER_SIZE, 0);
  if (r < 0)
    return r;
  if (memcmp(buf, CPKG_MAGIC, CPKG_MAGIC_SIZE) != 0)
    return -EINVAL;
  uint32_t index_len = (uint32_t)buf[12] << 24 | (uint32_t)buf[13] << 16 | (uint32_t)buf[14] << 8 |
                       (uint32_t)buf[15];
  if (index_len == 0 || index_len > CPKG_MAX_INDEX)
    return -EINVAL;
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, PKGCACHE_KEY_SIZE);
  crypto_generichash_update(&h, buf, CPKG_HEADER_SIZE);
  off_t off = CPKG_HEADER_SIZE;
  for (uint32_t left = index_len; left > 0;) {
    size_t want = left < sizeof(buf) ? left : sizeof(buf);
    if ((r = pread_full(fd, buf, want, off)) < 0)
      return r;
    crypto_generichash_update(&h, buf, want);
    off += (off_t)want;
    left -= (uint32_t)want;
  }
  crypto_generichash_final(&h, out, PKGCACHE_KEY_SIZE);
  return 0;
}

void pkgcache_trust_digest(const uint8_t (*keys)[32], size_t n, uint8_t out[PKGCACHE_TRUST_SIZE]) {
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, PKGCACHE_TRUST_SIZE);
  for (size_t i = 0; i < n; i++)
    crypto_generichash_update(&h, keys[i], 32);
  crypto_generichash_final(&h, out, PKGCACHE_TRUST_SIZE);
}

static struct entry *find(struct pkgcache *c, const uint8_t key[PKGCACHE_KEY_SIZE],
                          const uint8_t trust[PKGCACHE_TRUST_SIZE]) {
  for (size_t i = 0; i < c->max; i++) {
    struct entry *x = &c->e[i];
    if (x->used && memcmp(x->key, key, PKGCACHE_KEY_SIZE) == 0 &&
        memcmp(x->trust, trust, PKGCACHE_TRUST_SIZE) == 0)
      return x;
  }
  return NULL;
}

int pkgcache_get(struct pkgcache *c, const uint8_t key[PKGCACHE_KEY_SIZE],
                 const uint8_t trust[PKGCACHE_TRUST_SIZE], struct pkgcache_hit *out) {
  struct entry *x = find(c, key, trust);
  if (!x)
    return -ENOENT;
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

int pkgcache_put(struct pkgcache *c, const uint8_t key[PKGCACHE_KEY_SIZE],
                 const uint8_t trust[PKGCACHE_TRUST_SIZE], const uint8_t hash[CPKG_HASH_SIZE],
                 uint64_t size, const char *manifest_json, size_t manifest_len) {
  char *json = malloc(manifest_len + 1);
  if (!json)
    return -ENOMEM;
  memcpy(json, manifest_json, manifest_len);
  json[manifest_len] = '\0';
  /* the same entry, else a free one, else the least recently used */
  struct entry *slot = find(c, key, trust);
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
                         .size = size,
                         .manifest_json = json,
                         .manifest_len = manifest_len,
                         .last_use = ++c->clock};
  memcpy(slot->key, key, PKGCACHE_KEY_SIZE);
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
