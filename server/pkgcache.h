/* The server's cache of verified package indexes (issue 18): a package
 * dispatched again is not verified again while the trusted publisher keys
 * are the same.
 *
 * An entry is keyed by the package's signed part itself, BLAKE2b-256 of
 * its header (key id and signature) and index bytes as they are in the
 * file (pkgcache_key_of_fd), and by a digest of the publisher keys it was
 * verified with (a key rotated in or retired is another digest): the same
 * bytes verified with the same keys give the same answer, so a hit needs
 * no signature check and no index parse, whatever file the bytes are in
 * (each dispatch's upload is a new one). It holds what the verification
 * gave: the index hash, the package size the index declares and the
 * manifest JSON. Only a successful verification is cached. At most
 * PKGCACHE_MAX entries; the least recently used one is replaced. Not
 * thread-safe (the daemon's loop only). */
#ifndef CORDON_SERVER_PKGCACHE_H
#define CORDON_SERVER_PKGCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/cpkg.h"

#define PKGCACHE_MAX 64
#define PKGCACHE_KEY_SIZE 32
#define PKGCACHE_TRUST_SIZE 32

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

/* The key of the package open at fd: BLAKE2b-256 of its first
 * CPKG_HEADER_SIZE + index length bytes (the length from the header, at
 * most CPKG_MAX_INDEX), read with pread. -EINVAL when the file does not
 * start with a header of that shape or ends before its index (the full
 * verification says why), -errno of a read. */
int pkgcache_key_of_fd(int fd, uint8_t out[PKGCACHE_KEY_SIZE]);

/* The digest of a set of publisher keys (n keys of 32 bytes, in order). */
void pkgcache_trust_digest(const uint8_t (*keys)[32], size_t n, uint8_t out[PKGCACHE_TRUST_SIZE]);

/* The entry for this key and trust digest into *out (a copy), marked most
 * recently used: 0; -ENOENT when there is none; -ENOMEM. */
int pkgcache_get(struct pkgcache *c, const uint8_t key[PKGCACHE_KEY_SIZE],
                 const uint8_t trust[PKGCACHE_TRUST_SIZE], struct pkgcache_hit *out);

/* Record a successful verification (the manifest is copied), replacing
 * the entry of the same key and trust if any, else the least recently
 * used one when full. -ENOMEM (the cache is unchanged). */
int pkgcache_put(struct pkgcache *c, const uint8_t key[PKGCACHE_KEY_SIZE],
                 const uint8_t trust[PKGCACHE_TRUST_SIZE], const uint8_t hash[CPKG_HASH_SIZE],
                 uint64_t size, const char *manifest_json, size_t manifest_len);

/* The number of entries (for tests). */
size_t pkgcache_count(const struct pkgcache *c);

#endif
