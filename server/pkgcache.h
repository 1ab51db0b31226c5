/* The server's cache of verified package indexes (issue 18): a package
 * dispatched again is not read and verified again while its file and the
 * trusted publisher keys are unchanged.
 *
 * An entry is keyed by the opened file's identity (device, inode, size,
 * modification and change times, to the nanosecond: any write, truncate,
 * rename over or chmod changes the change time, which no user can set) and
 * by a digest of the publisher keys it was verified with (a key rotated in
 * or retired is another digest). It holds what the verification gave: the
 * index hash, the package size the index declares and the manifest JSON.
 * A file changed less than PKGCACHE_RACY_S seconds ago is not cached (a
 * change within the file system's timestamp granularity could leave both
 * times as they were: git's "racily clean" entries), so the first
 * dispatches of a package just built verify it each time.
 * At most PKGCACHE_MAX entries; the least recently used one is replaced.
 * Not thread-safe (the daemon's loop only). */
#ifndef CORDON_SERVER_PKGCACHE_H
#define CORDON_SERVER_PKGCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "proto/cpkg.h"

#define PKGCACHE_MAX 64
#define PKGCACHE_TRUST_SIZE 32
#define PKGCACHE_RACY_S 2

struct pkgcache;

/* What a verification gave; manifest_json is malloc'ed (the caller's after
 * pkgcache_get, freed with free()). */
struct pkgcache_hit {
  uint8_t hash[CPKG_HASH_SIZE];
  uint64_t size;
  char *manifest_json;
  size_t manifest_len;
};

/* A new, empty cache of at most max entries (1..PKGCACHE_MAX; 0 means
 * PKGCACHE_MAX). -ENOMEM, -EINVAL. */
int pkgcache_new(size_t max, struct pkgcache **out_cache);
void pkgcache_free(struct pkgcache *c);

/* The digest of a set of publisher keys (n keys of 32 bytes, in order). */
void pkgcache_trust_digest(const uint8_t (*keys)[32], size_t n, uint8_t out[PKGCACHE_TRUST_SIZE]);

/* The entry for this file and trust digest into *out (a copy), marked
 * most recently used: 0; -ENOENT when there is none; -ENOMEM. */
int pkgcache_get(struct pkgcache *c, const struct stat *st,
                 const uint8_t trust[PKGCACHE_TRUST_SIZE], struct pkgcache_hit *out);

/* Record a verification (the manifest is copied), replacing the entry of
 * the same file if any, else the least recently used one when full.
 * -EAGAIN when the file changed less than PKGCACHE_RACY_S seconds ago,
 * -ENOMEM (the cache is unchanged either way). */
int pkgcache_put(struct pkgcache *c, const struct stat *st,
                 const uint8_t trust[PKGCACHE_TRUST_SIZE], const uint8_t hash[CPKG_HASH_SIZE],
                 uint64_t size, const char *manifest_json, size_t manifest_len);

/* The number of entries (for tests). */
size_t pkgcache_count(const struct pkgcache *c);

#endif
