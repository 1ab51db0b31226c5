/* Signed executor packages (.cpkg), docs/protocol/package.md.
 *
 * Layout:  header (96 bytes) | index (msgpack, signed) | file contents
 *
 *   header: magic "CPKG\r\n\x1a\n", u16 BE format version (1), u16 BE flags
 *           (0), u32 BE index length, 16-byte key id, 64-byte Ed25519
 *           signature over "cordon-cpkg-index-v1\0" || BLAKE2b-256(index).
 *   index:  map {"v": 1, "manifest": bin (the manifest.json bytes),
 *           "files": [[path, mode, size, BLAKE2b-256], ...], "total": uint}
 *   contents: each file's bytes in table order, nothing between or after.
 *
 * Everything here is pure: bytes in, bytes or events out. Reading files and
 * creating the staging directory belong to the callers (server/pack.c,
 * agent/cpkg_stage.c).
 *
 * The reader (struct cpkg_stream) looks the key id up in the trusted set and
 * checks the signature over the index BEFORE the index is parsed; only the
 * length-prefixed index (at most CPKG_MAX_INDEX bytes) is held in memory.
 * File contents pass through in the caller's buffers and are hashed as they
 * go; each file's hash is checked at its end, before the next file begins.
 *
 * Errors: CORDON_E_PACKAGE_CORRUPT (diag names the file or the part of the
 * package), CORDON_E_SIGNATURE_INVALID, CORDON_E_UNKNOWN_KEY,
 * CORDON_E_PACKAGE_TOO_LARGE, CORDON_E_MANIFEST_INVALID (manifest bytes over
 * MANIFEST_MAX_BYTES or not matching manifest.json), -ENOMEM.
 */
#ifndef CORDON_PROTO_CPKG_H
#define CORDON_PROTO_CPKG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/id.h"

#define CPKG_MAGIC "CPKG\r\n\x1a\n"
#define CPKG_MAGIC_SIZE 8
#define CPKG_FORMAT_VERSION 1
#define CPKG_HEADER_SIZE 96
#define CPKG_PUBLIC_KEY_SIZE 32
#define CPKG_SECRET_KEY_SIZE 64 /* libsodium's crypto_sign secret key (seed || public) */
#define CPKG_SIG_SIZE 64
#define CPKG_HASH_SIZE 32
/* Signed message = CPKG_SIGN_DOMAIN including its NUL (21 bytes) || BLAKE2b-256(index). */
#define CPKG_SIGN_DOMAIN "cordon-cpkg-index-v1"
#define CPKG_SIGN_DOMAIN_SIZE 21

/* Limits, checked before anything of that size is allocated. */
#define CPKG_MAX_INDEX (16u * 1024 * 1024) /* bytes of msgpack index */
#define CPKG_MAX_FILES 100000u             /* entries in the file table */
#define CPKG_MAX_PATH 1024u                /* bytes of one path */
#define CPKG_MAX_NAME 255u                 /* bytes of one path component */
#define CPKG_MAX_DEPTH 32u                 /* components of one path */
#define CPKG_MAX_TOTAL (8ull << 30)        /* bytes of all file contents (8 GiB) */
#define CPKG_MAX_TRUSTED_KEYS 1024u

/* The file every package holds at its top: its bytes are the index's manifest. */
#define CPKG_MANIFEST_PATH "manifest.json"

#define CPKG_MODE_EXEC 0755u
#define CPKG_MODE_PLAIN 0644u

/* One file table entry. In a parsed index, path points into the index's own
 * memory and offset is the file's start within the contents section. */
struct cpkg_file {
  const char *path; /* NUL-terminated */
  uint32_t mode;    /* CPKG_MODE_EXEC or CPKG_MODE_PLAIN */
  uint64_t size;
  uint64_t offset;
  uint8_t hash[CPKG_HASH_SIZE]; /* BLAKE2b-256 of the contents */
};

/* A parsed, validated index: owns all its memory. */
struct cpkg_index {
  uint32_t version;
  uint8_t *manifest_json; /* exact bytes, not NUL-terminated */
  size_t manifest_len;
  struct cpkg_file *files; /* in table order (see cpkg_path_cmp) */
  size_t n_files;
  uint64_t total;
  char *paths_; /* private: storage of the paths */
};

/* ---- paths ---------------------------------------------------------------- */

/* Check one package path against the rules (docs/protocol/package.md,
 * "Paths"): relative, '/'-separated, printable ASCII without \ : * ? " < > |,
 * no empty, "." or ".." component, no component ending in '.' or ' ', no
 * Windows device name (CON, PRN, AUX, NUL, COM0-9, LPT0-9, CONIN$, CONOUT$,
 * with or without extension), at most CPKG_MAX_PATH bytes, CPKG_MAX_NAME per
 * component and CPKG_MAX_DEPTH components. Errors: CORDON_E_PACKAGE_CORRUPT
 * (diag says which rule), CORDON_E_PACKAGE_TOO_LARGE for the length limits. */
int cpkg_path_check(const char *path, size_t len, struct cordon_diag *diag);

/* The package order: bytewise, with '/' sorting before every other byte
 * (so a directory's files are contiguous). <0, 0, >0 like strcmp. */
int cpkg_path_cmp(const char *a, const char *b);

/* Check a whole file table: each path, strictly increasing cpkg_path_cmp
 * order, no path that is both a file and a directory, no two paths equal
 * when ASCII letters are folded to one case, modes, the count and size
 * limits, and that CPKG_MANIFEST_PATH is present and holds manifest_json.
 * offset is ignored. Errors as above. */
int cpkg_files_check(const struct cpkg_file *files, size_t n_files, const uint8_t *manifest_json,
                     size_t manifest_len, struct cordon_diag *diag);

/* ---- writing --------------------------------------------------------------- */

/* Encode the index for files (which must pass cpkg_files_check). The buffer is
 * malloc'ed; the caller frees it. The encoding is deterministic. */
int cpkg_index_encode(const uint8_t *manifest_json, size_t manifest_len,
                      const struct cpkg_file *files, size_t n_files, uint8_t **out_index,
                      size_t *out_len, struct cordon_diag *diag);

/* The key id of a publisher public key: the first 16 bytes of BLAKE2b-256(pk). */
void cpkg_key_id(const uint8_t pk[CPKG_PUBLIC_KEY_SIZE], uint8_t out_id[CORDON_ID_LEN]);

/* BLAKE2b-256 of the index bytes: what is signed, and what tickets name. */
void cpkg_index_hash(const uint8_t *index, size_t len, uint8_t out_hash[CPKG_HASH_SIZE]);

/* Build the header for index, signed with secret_key (libsodium crypto_sign
 * format, 64 bytes). Errors: CORDON_E_PACKAGE_TOO_LARGE, CORDON_E_CRYPTO. */
int cpkg_header_build(const uint8_t *index, size_t index_len,
                      const uint8_t secret_key[CPKG_SECRET_KEY_SIZE],
                      uint8_t out_header[CPKG_HEADER_SIZE]);

/* ---- reading --------------------------------------------------------------- */

/* Parse and validate index bytes. Does NOT check any signature: the stream
 * calls it only after the signature verified; it is public for tools and the
 * fuzz target. The bytes are checked for bounds (depth, counts, lengths, no
 * ext types) before msgpack-c sees them. */
int cpkg_index_parse(const uint8_t *buf, size_t len, struct cpkg_index **out_index,
                     struct cordon_diag *diag);
void cpkg_index_free(struct cpkg_index *index);

/* A set of trusted publisher public keys. */
struct cpkg_trust;

int cpkg_trust_new(struct cpkg_trust **out_trust);
/* Add a key; adding a key already present is a no-op. Errors:
 * CORDON_E_LIMIT above CPKG_MAX_TRUSTED_KEYS, -ENOMEM. */
int cpkg_trust_add(struct cpkg_trust *trust, const uint8_t pk[CPKG_PUBLIC_KEY_SIZE]);
size_t cpkg_trust_count(const struct cpkg_trust *trust);
/* The trusted key with this key id, or NULL. */
const uint8_t *cpkg_trust_find(const struct cpkg_trust *trust,
                               const uint8_t key_id[CORDON_ID_LEN]);
void cpkg_trust_free(struct cpkg_trust *trust);

enum cpkg_event_type {
  CPKG_EVENT_NEED_MORE,  /* all input consumed; feed more (or call finish at EOF) */
  CPKG_EVENT_INDEX,      /* signature good, index parsed: cpkg_stream_index() */
  CPKG_EVENT_FILE_BEGIN, /* file `file` starts (also for empty files) */
  CPKG_EVENT_FILE_DATA,  /* data/len: the next bytes of file `file` (NOT yet verified) */
  CPKG_EVENT_FILE_END,   /* file `file` is complete and its hash matched */
  CPKG_EVENT_DONE,       /* every file verified; nothing may follow */
};

struct cpkg_event {
  enum cpkg_event_type type;
  size_t file;         /* index into cpkg_stream_index()->files */
  const uint8_t *data; /* FILE_DATA: points into the caller's buffer */
  size_t len;
};

struct cpkg_stream;

/* The streaming verifier. Feed it the package bytes in any chunking:
 *
 *   for (;;) {
 *     err = cpkg_stream_next(s, buf + off, n - off, &used, &ev, diag);
 *     if (err) fail;
 *     off += used;
 *     if (ev.type == CPKG_EVENT_NEED_MORE) break;   // read the next chunk
 *     handle(ev);
 *   }
 *
 * At end of input, run the same loop with len 0 (it drains events that need
 * no bytes), then cpkg_stream_finish(). trust must outlive the stream. After
 * an error every call returns that error again. */
int cpkg_stream_new(const struct cpkg_trust *trust, struct cpkg_stream **out_stream);
int cpkg_stream_next(struct cpkg_stream *s, const uint8_t *buf, size_t len, size_t *out_used,
                     struct cpkg_event *out_event, struct cordon_diag *diag);
/* 0 when the whole package was seen and verified; CORDON_E_PACKAGE_CORRUPT
 * ("truncated ...") otherwise. */
int cpkg_stream_finish(struct cpkg_stream *s, struct cordon_diag *diag);
/* The parsed index once CPKG_EVENT_INDEX was returned, else NULL. */
const struct cpkg_index *cpkg_stream_index(const struct cpkg_stream *s);
/* BLAKE2b-256 of the index once CPKG_EVENT_INDEX was returned: 0, else CORDON_E_USAGE. */
int cpkg_stream_index_hash(const struct cpkg_stream *s, uint8_t out_hash[CPKG_HASH_SIZE]);
/* Total package size in bytes once the index is known, else 0. */
uint64_t cpkg_stream_package_size(const struct cpkg_stream *s);
void cpkg_stream_free(struct cpkg_stream *s);

#endif
