#include "proto/cpkg.h"

#include <errno.h>
#include <msgpack.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat/posix.h"
#include "core/manifest.h"

/* ---- small helpers ------------------------------------------------------- */

#define DIAG_PATH_MAX 160

/* A path made safe to print: non-printable bytes as \xNN, cut with "...". */
static const char *diag_path(const char *p, size_t len, char out[DIAG_PATH_MAX + 8]) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)p[i];
    if (o + 4 > DIAG_PATH_MAX) {
      memcpy(out + o, "...", 3);
      o += 3;
      break;
    }
    if (c < 0x20 || c > 0x7e || c == '\\' || c == '\'') {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    } else {
      out[o++] = (char)c;
    }
  }
  out[o] = '\0';
  return out;
}

static void hex_encode(const uint8_t *b, size_t n, char *out) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex[b[i] >> 4];
    out[2 * i + 1] = hex[b[i] & 15];
  }
  out[2 * n] = '\0';
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint16_t be16(const uint8_t *p) {
  return (uint16_t)(p[0] << 8 | p[1]);
}

static int ascii_lower(int c) {
  return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* ---- paths ---------------------------------------------------------------- */

static int ieq(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (ascii_lower((unsigned char)a[i]) != ascii_lower((unsigned char)b[i]))
      return 0;
  return 1;
}

/* A Windows device name, with or without extension ("aux", "Aux.txt", "nul .tar.gz"). */
static int name_is_device(const char *name, size_t len) {
  static const char *const devices[] = {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"};
  size_t stem = 0;
  while (stem < len && name[stem] != '.')
    stem++;
  while (stem > 0 && name[stem - 1] == ' ')
    stem--;
  for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++)
    if (strlen(devices[i]) == stem && ieq(name, devices[i], stem))
      return 1;
  if (stem == 4 && (ieq(name, "COM", 3) || ieq(name, "LPT", 3)) && name[3] >= '0' && name[3] <= '9')
    return 1;
  return 0;
}

int cpkg_path_check(const char *path, size_t len, struct cordon_diag *diag) {
  char shown[DIAG_PATH_MAX + 8];
  if (len == 0)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "empty path in the file table");
  if (len > CPKG_MAX_PATH)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE, "path '%s' is longer than %u bytes",
                           diag_path(path, len, shown), CPKG_MAX_PATH);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)path[i];
    if (c < 0x20 || c > 0x7e)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "path '%s' has a control or non-ASCII byte",
                             diag_path(path, len, shown));
    if (strchr("\\:*?\"<>|", c))
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "path '%s' has a character not allowed on Windows ('%c')",
                             diag_path(path, len, shown), c);
  }
  if (path[0] == '/')
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "path '%s' is absolute",
                           diag_path(path, len, shown));
  size_t depth = 0;
  for (size_t start = 0; start <= len;) {
    const char *nl = memchr(path + start, '/', len - start);
    size_t end = nl ? (size_t)(nl - path) : len;
    const char *name = path + start;
    size_t nlen = end - start;
    depth++;
    if (nlen == 0)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "path '%s' has an empty component",
                             diag_path(path, len, shown));
    if ((nlen == 1 && name[0] == '.') || (nlen == 2 && name[0] == '.' && name[1] == '.'))
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "path '%s' has a '.' or '..' component", diag_path(path, len, shown));
    if (nlen > CPKG_MAX_NAME)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE,
                             "path '%s' has a component longer than %u bytes",
                             diag_path(path, len, shown), CPKG_MAX_NAME);
    if (name[nlen - 1] == '.' || name[nlen - 1] == ' ')
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "path '%s' has a component ending in a dot or space",
                             diag_path(path, len, shown));
    if (name_is_device(name, nlen))
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "path '%s' has a Windows device name as a component",
                             diag_path(path, len, shown));
    start = end + 1;
  }
  if (depth > CPKG_MAX_DEPTH)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE,
                           "path '%s' has more than %u components", diag_path(path, len, shown),
                           CPKG_MAX_DEPTH);
  return 0;
}

static int path_cmp(const char *a, const char *b, int fold) {
  for (;; a++, b++) {
    int ca = (unsigned char)*a, cb = (unsigned char)*b;
    if (ca == '/')
      ca = 1; /* after the end of a name, before any byte a name may hold */
    if (cb == '/')
      cb = 1;
    if (fold) {
      ca = ascii_lower(ca);
      cb = ascii_lower(cb);
    }
    if (ca != cb)
      return ca < cb ? -1 : 1;
    if (!ca)
      return 0;
  }
}

int cpkg_path_cmp(const char *a, const char *b) {
  return path_cmp(a, b, 0);
}

static int folded_cmp(const void *x, const void *y, void *ctx) {
  const struct cpkg_file *files = ctx;
  return path_cmp(files[*(const uint32_t *)x].path, files[*(const uint32_t *)y].path, 1);
}

enum { PAIR_OK, PAIR_CASE, PAIR_FILE_DIR };

/* p <= q in folded order. Files conflict when a common leading component is
 * spelled differently (one name on a case-insensitive filesystem, two here) or
 * when one path is a leading part of the other (a file used as a directory). */
static int pair_conflict(const char *p, const char *q) {
  for (;;) {
    const char *pe = strchrnul(p, '/'), *qe = strchrnul(q, '/');
    size_t pl = (size_t)(pe - p), ql = (size_t)(qe - q);
    if (pl != ql || !ieq(p, q, pl))
      return PAIR_OK;
    if (memcmp(p, q, pl) != 0)
      return PAIR_CASE;
    if (!*pe && !*qe)
      return PAIR_CASE;
    if (!*pe || !*qe)
      return PAIR_FILE_DIR;
    p = pe + 1;
    q = qe + 1;
  }
}

int cpkg_files_check(const struct cpkg_file *files, size_t n_files, const uint8_t *manifest_json,
                     size_t manifest_len, struct cordon_diag *diag) {
  char shown[DIAG_PATH_MAX + 8], shown2[DIAG_PATH_MAX + 8];
  if (n_files == 0)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "the file table is empty");
  if (n_files > CPKG_MAX_FILES)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE, "%zu files, more than the limit of %u",
                           n_files, CPKG_MAX_FILES);
  if (manifest_len > MANIFEST_MAX_BYTES)
    return cordon_diag_set(diag, CORDON_E_MANIFEST_INVALID, "manifest is larger than %d bytes",
                           MANIFEST_MAX_BYTES);
  uint64_t total = 0;
  const struct cpkg_file *manifest = NULL;
  for (size_t i = 0; i < n_files; i++) {
    const struct cpkg_file *f = &files[i];
    size_t plen = strlen(f->path);
    int err = cpkg_path_check(f->path, plen, diag);
    if (err)
      return err;
    if (i > 0 && cpkg_path_cmp(files[i - 1].path, f->path) >= 0)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "path '%s' is a duplicate or out of order",
                             diag_path(f->path, plen, shown));
    if (f->mode != CPKG_MODE_EXEC && f->mode != CPKG_MODE_PLAIN)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "file '%s': mode 0%o is not 0644 or 0755",
                             diag_path(f->path, plen, shown), (unsigned)f->mode);
    if (f->size > CPKG_MAX_TOTAL || total + f->size > CPKG_MAX_TOTAL)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE,
                             "file '%s' (%llu bytes) takes the package over %llu bytes",
                             diag_path(f->path, plen, shown), (unsigned long long)f->size,
                             (unsigned long long)CPKG_MAX_TOTAL);
    total += f->size;
    if (strcmp(f->path, CPKG_MANIFEST_PATH) == 0)
      manifest = f;
  }
  if (!manifest)
    return cordon_diag_set(diag, CORDON_E_MANIFEST_INVALID, "the package has no %s",
                           CPKG_MANIFEST_PATH);
  uint8_t h[CPKG_HASH_SIZE];
  crypto_generichash(h, sizeof(h), manifest_json, manifest_len, NULL, 0);
  if (manifest->size != manifest_len || memcmp(h, manifest->hash, sizeof(h)) != 0)
    return cordon_diag_set(diag, CORDON_E_MANIFEST_INVALID,
                           "the index's manifest differs from the file %s", CPKG_MANIFEST_PATH);

  /* Case-insensitive duplicates and file/directory clashes: sort by folded
   * path; every clash then shows between neighbours. */
  uint32_t *order = malloc(n_files * sizeof(*order));
  if (!order)
    return -ENOMEM;
  for (size_t i = 0; i < n_files; i++)
    order[i] = (uint32_t)i;
  qsort_r(order, n_files, sizeof(*order), folded_cmp, (void *)files);
  int err = 0;
  for (size_t i = 1; i < n_files && !err; i++) {
    const char *p = files[order[i - 1]].path, *q = files[order[i]].path;
    switch (pair_conflict(p, q)) {
    case PAIR_CASE:
      err =
          cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "paths '%s' and '%s' differ only in case",
                          diag_path(p, strlen(p), shown), diag_path(q, strlen(q), shown2));
      break;
    case PAIR_FILE_DIR:
      err = cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                            "path '%s' is a file and also the directory of '%s'",
                            diag_path(p, strlen(p), shown), diag_path(q, strlen(q), shown2));
      break;
    default:
      break;
    }
  }
  free(order);
  return err;
}

/* ---- writing --------------------------------------------------------------- */

static void pack_str(msgpack_packer *pk, const char *s, size_t len) {
  msgpack_pack_str(pk, len);
  msgpack_pack_str_body(pk, s, len);
}

int cpkg_index_encode(const uint8_t *manifest_json, size_t manifest_len,
                      const struct cpkg_file *files, size_t n_files, uint8_t **out_index,
                      size_t *out_len, struct cordon_diag *diag) {
  int err = cpkg_files_check(files, n_files, manifest_json, manifest_len, diag);
  if (err)
    return err;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  uint64_t total = 0;
  int rc = 0;
  rc |= msgpack_pack_map(&pk, 4);
  pack_str(&pk, "v", 1);
  rc |= msgpack_pack_uint32(&pk, CPKG_FORMAT_VERSION);
  pack_str(&pk, "manifest", 8);
  rc |= msgpack_pack_bin(&pk, manifest_len);
  rc |= msgpack_pack_bin_body(&pk, manifest_json, manifest_len);
  pack_str(&pk, "files", 5);
  rc |= msgpack_pack_array(&pk, n_files);
  for (size_t i = 0; i < n_files; i++) {
    rc |= msgpack_pack_array(&pk, 4);
    pack_str(&pk, files[i].path, strlen(files[i].path));
    rc |= msgpack_pack_uint32(&pk, files[i].mode);
    rc |= msgpack_pack_uint64(&pk, files[i].size);
    rc |= msgpack_pack_bin(&pk, CPKG_HASH_SIZE);
    rc |= msgpack_pack_bin_body(&pk, files[i].hash, CPKG_HASH_SIZE);
    total += files[i].size;
  }
  pack_str(&pk, "total", 5);
  rc |= msgpack_pack_uint64(&pk, total);
  if (rc != 0 || !sb.data) {
    msgpack_sbuffer_destroy(&sb);
    return -ENOMEM;
  }
  if (sb.size > CPKG_MAX_INDEX) {
    size_t size = sb.size;
    msgpack_sbuffer_destroy(&sb);
    return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE,
                           "the index would be %zu bytes, more than the limit of %u", size,
                           CPKG_MAX_INDEX);
  }
  *out_len = sb.size;
  *out_index = (uint8_t *)msgpack_sbuffer_release(&sb);
  return 0;
}

void cpkg_key_id(const uint8_t pk[CPKG_PUBLIC_KEY_SIZE], uint8_t out_id[CORDON_ID_LEN]) {
  uint8_t h[32];
  crypto_generichash(h, sizeof(h), pk, CPKG_PUBLIC_KEY_SIZE, NULL, 0);
  memcpy(out_id, h, CORDON_ID_LEN);
}

void cpkg_index_hash(const uint8_t *index, size_t len, uint8_t out_hash[CPKG_HASH_SIZE]) {
  crypto_generichash(out_hash, CPKG_HASH_SIZE, index, len, NULL, 0);
}

static void signed_message(const uint8_t hash[CPKG_HASH_SIZE],
                           uint8_t msg[CPKG_SIGN_DOMAIN_SIZE + CPKG_HASH_SIZE]) {
  memcpy(msg, CPKG_SIGN_DOMAIN, CPKG_SIGN_DOMAIN_SIZE); /* includes the NUL */
  memcpy(msg + CPKG_SIGN_DOMAIN_SIZE, hash, CPKG_HASH_SIZE);
}

int cpkg_header_build(const uint8_t *index, size_t index_len,
                      const uint8_t secret_key[CPKG_SECRET_KEY_SIZE],
                      uint8_t out_header[CPKG_HEADER_SIZE]) {
  if (index_len == 0 || index_len > CPKG_MAX_INDEX)
    return CORDON_E_PACKAGE_TOO_LARGE;
  uint8_t hdr[CPKG_HEADER_SIZE] = {0};
  uint8_t pk[CPKG_PUBLIC_KEY_SIZE], hash[CPKG_HASH_SIZE];
  uint8_t msg[CPKG_SIGN_DOMAIN_SIZE + CPKG_HASH_SIZE];
  memcpy(hdr, CPKG_MAGIC, CPKG_MAGIC_SIZE);
  hdr[8] = 0;
  hdr[9] = CPKG_FORMAT_VERSION;
  hdr[10] = hdr[11] = 0;
  hdr[12] = (uint8_t)(index_len >> 24);
  hdr[13] = (uint8_t)(index_len >> 16);
  hdr[14] = (uint8_t)(index_len >> 8);
  hdr[15] = (uint8_t)index_len;
  if (crypto_sign_ed25519_sk_to_pk(pk, secret_key) != 0)
    return CORDON_E_CRYPTO;
  cpkg_key_id(pk, hdr + 16);
  cpkg_index_hash(index, index_len, hash);
  signed_message(hash, msg);
  if (crypto_sign_detached(hdr + 32, NULL, msg, sizeof(msg), secret_key) != 0)
    return CORDON_E_CRYPTO;
  memcpy(out_header, hdr, sizeof(hdr));
  return 0;
}

/* ---- reading: bounds before msgpack-c ------------------------------------- */

/* msgpack-c allocates a container's element array from the declared count
 * before it reads the elements. This walk, which allocates nothing, checks
 * every count against the bytes left and against an element budget, every
 * length against the buffer, the nesting depth, and refuses ext types. */
#define INDEX_MAX_NESTING 3 /* map > files array > entry array */
#define INDEX_ELEMENT_BUDGET (64u + 5u * CPKG_MAX_FILES)

struct mpwalk {
  const uint8_t *p;
  size_t len, pos, budget;
};

static int mp_take(struct mpwalk *w, size_t n, uint64_t *out) {
  if (w->len - w->pos < n)
    return CORDON_E_PACKAGE_CORRUPT;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++)
    v = v << 8 | w->p[w->pos + i];
  w->pos += n;
  *out = v;
  return 0;
}

static int mp_skip(struct mpwalk *w, unsigned depth) {
  if (w->pos >= w->len)
    return CORDON_E_PACKAGE_CORRUPT;
  uint8_t b = w->p[w->pos++];
  uint64_t n = 0;
  int err = 0;
  enum { SCALAR, ARRAY, MAP } kind = SCALAR;
  if (b <= 0x7f || b >= 0xe0)
    return 0; /* fixint */
  if (b <= 0x8f) {
    kind = MAP;
    n = b & 0x0f;
  } else if (b <= 0x9f) {
    kind = ARRAY;
    n = b & 0x0f;
  } else if (b <= 0xbf) {
    n = b & 0x1f;
  } else {
    switch (b) {
    case 0xc0: /* nil */
    case 0xc2: /* false */
    case 0xc3: /* true */
      return 0;
    case 0xc4: /* bin 8 */
    case 0xd9: /* str 8 */
      err = mp_take(w, 1, &n);
      break;
    case 0xc5:
    case 0xda:
      err = mp_take(w, 2, &n);
      break;
    case 0xc6:
    case 0xdb:
      err = mp_take(w, 4, &n);
      break;
    case 0xcc: /* uint 8 */
    case 0xd0: /* int 8 */
      n = 1;
      break;
    case 0xcd:
    case 0xd1:
      n = 2;
      break;
    case 0xca: /* float 32 */
    case 0xce:
    case 0xd2:
      n = 4;
      break;
    case 0xcb:
    case 0xcf:
    case 0xd3:
      n = 8;
      break;
    case 0xdc:
      kind = ARRAY;
      err = mp_take(w, 2, &n);
      break;
    case 0xdd:
      kind = ARRAY;
      err = mp_take(w, 4, &n);
      break;
    case 0xde:
      kind = MAP;
      err = mp_take(w, 2, &n);
      break;
    case 0xdf:
      kind = MAP;
      err = mp_take(w, 4, &n);
      break;
    default: /* 0xc1 (never used) and the ext types */
      return CORDON_E_PACKAGE_CORRUPT;
    }
  }
  if (err)
    return err;
  if (kind == SCALAR) {
    if (w->len - w->pos < n)
      return CORDON_E_PACKAGE_CORRUPT;
    w->pos += n;
    return 0;
  }
  if (depth >= INDEX_MAX_NESTING)
    return CORDON_E_PACKAGE_CORRUPT;
  uint64_t elems = kind == MAP ? 2 * n : n;
  if (elems > w->len - w->pos)
    return CORDON_E_PACKAGE_CORRUPT; /* every element takes at least one byte */
  if (elems > w->budget)
    return CORDON_E_PACKAGE_TOO_LARGE;
  w->budget -= elems;
  for (uint64_t i = 0; i < elems; i++)
    if ((err = mp_skip(w, depth + 1)) != 0)
      return err;
  return 0;
}

/* ---- reading: the index ---------------------------------------------------- */

static int obj_is_key(const msgpack_object *o, const char *name) {
  size_t n = strlen(name);
  return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
         memcmp(o->via.str.ptr, name, n) == 0;
}

static int index_from_object(const msgpack_object *root, struct cpkg_index *idx,
                             struct cordon_diag *diag) {
  const msgpack_object *v = NULL, *manifest = NULL, *files = NULL, *total = NULL;
  if (root->type != MSGPACK_OBJECT_MAP || root->via.map.size != 4)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "the index is not a map of 4 entries");
  for (uint32_t i = 0; i < root->via.map.size; i++) {
    const msgpack_object *k = &root->via.map.ptr[i].key, *val = &root->via.map.ptr[i].val;
    const msgpack_object **slot = obj_is_key(k, "v")          ? &v
                                  : obj_is_key(k, "manifest") ? &manifest
                                  : obj_is_key(k, "files")    ? &files
                                  : obj_is_key(k, "total")    ? &total
                                                              : NULL;
    if (!slot || *slot)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "the index has an unknown or repeated key");
    *slot = val;
  }
  if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 != CPKG_FORMAT_VERSION)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "the index has an unsupported version");
  if (manifest->type != MSGPACK_OBJECT_BIN)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "index: \"manifest\" is not bin");
  if (manifest->via.bin.size > MANIFEST_MAX_BYTES)
    return cordon_diag_set(diag, CORDON_E_MANIFEST_INVALID, "manifest is larger than %d bytes",
                           MANIFEST_MAX_BYTES);
  if (files->type != MSGPACK_OBJECT_ARRAY)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "index: \"files\" is not an array");
  if (files->via.array.size > CPKG_MAX_FILES)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE, "%u files, more than the limit of %u",
                           files->via.array.size, CPKG_MAX_FILES);
  if (total->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                           "index: \"total\" is not an unsigned integer");

  size_t n = files->via.array.size, arena = 0;
  for (size_t i = 0; i < n; i++) {
    const msgpack_object *e = &files->via.array.ptr[i];
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 4)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "index: file entry %zu is not an array of 4", i);
    const msgpack_object *f = e->via.array.ptr;
    if (f[0].type != MSGPACK_OBJECT_STR || f[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        f[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[3].type != MSGPACK_OBJECT_BIN ||
        f[3].via.bin.size != CPKG_HASH_SIZE)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "index: file entry %zu is not [str, uint, uint, bin(32)]", i);
    if (memchr(f[0].via.str.ptr, '\0', f[0].via.str.size))
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "index: path of entry %zu holds a NUL",
                             i);
    if (f[1].via.u64 != CPKG_MODE_EXEC && f[1].via.u64 != CPKG_MODE_PLAIN)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                             "index: mode of entry %zu is not 0644 or 0755", i);
    arena += f[0].via.str.size + 1;
  }

  idx->files = calloc(n ? n : 1, sizeof(*idx->files));
  idx->paths_ = malloc(arena ? arena : 1);
  idx->manifest_json = malloc(manifest->via.bin.size ? manifest->via.bin.size : 1);
  if (!idx->files || !idx->paths_ || !idx->manifest_json)
    return -ENOMEM;
  memcpy(idx->manifest_json, manifest->via.bin.ptr, manifest->via.bin.size);
  idx->manifest_len = manifest->via.bin.size;
  idx->version = CPKG_FORMAT_VERSION;
  idx->n_files = n;
  char *p = idx->paths_;
  for (size_t i = 0; i < n; i++) {
    const msgpack_object *f = files->via.array.ptr[i].via.array.ptr;
    memcpy(p, f[0].via.str.ptr, f[0].via.str.size);
    p[f[0].via.str.size] = '\0';
    idx->files[i].path = p;
    p += f[0].via.str.size + 1;
    idx->files[i].mode = (uint32_t)f[1].via.u64;
    idx->files[i].size = f[2].via.u64;
    memcpy(idx->files[i].hash, f[3].via.bin.ptr, CPKG_HASH_SIZE);
  }
  int err = cpkg_files_check(idx->files, n, idx->manifest_json, idx->manifest_len, diag);
  if (err)
    return err;
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    idx->files[i].offset = off;
    off += idx->files[i].size; /* cannot overflow: checked against CPKG_MAX_TOTAL */
  }
  if (total->via.u64 != off)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                           "index: total %llu is not the sum of the file sizes (%llu)",
                           (unsigned long long)total->via.u64, (unsigned long long)off);
  idx->total = off;
  return 0;
}

int cpkg_index_parse(const uint8_t *buf, size_t len, struct cpkg_index **out_index,
                     struct cordon_diag *diag) {
  if (len == 0)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "the index is empty");
  if (len > CPKG_MAX_INDEX)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE, "the index is larger than %u bytes",
                           CPKG_MAX_INDEX);
  struct mpwalk w = {.p = buf, .len = len, .pos = 0, .budget = INDEX_ELEMENT_BUDGET};
  int err = mp_skip(&w, 0);
  if (err == CORDON_E_PACKAGE_TOO_LARGE)
    return cordon_diag_set(diag, err, "the index has more elements than %u files need",
                           CPKG_MAX_FILES);
  if (err || w.pos != len)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "the index is not well-formed msgpack");

  struct cpkg_index *idx = calloc(1, sizeof(*idx));
  if (!idx)
    return -ENOMEM;
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  size_t off = 0;
  msgpack_unpack_return ur = msgpack_unpack_next(&up, (const char *)buf, len, &off);
  if (ur == MSGPACK_UNPACK_NOMEM_ERROR) {
    err = -ENOMEM;
  } else if (ur != MSGPACK_UNPACK_SUCCESS || off != len) {
    err = cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "the index is not well-formed msgpack");
  } else {
    err = index_from_object(&up.data, idx, diag);
  }
  msgpack_unpacked_destroy(&up);
  if (err) {
    cpkg_index_free(idx);
    return err;
  }
  *out_index = idx;
  return 0;
}

void cpkg_index_free(struct cpkg_index *index) {
  if (!index)
    return;
  free(index->manifest_json);
  free(index->files);
  free(index->paths_);
  free(index);
}

/* ---- trust ---------------------------------------------------------------- */

struct trusted_key {
  uint8_t pk[CPKG_PUBLIC_KEY_SIZE];
  uint8_t id[CORDON_ID_LEN];
};

struct cpkg_trust {
  struct trusted_key *keys;
  size_t n, cap;
};

int cpkg_trust_new(struct cpkg_trust **out_trust) {
  struct cpkg_trust *t = calloc(1, sizeof(*t));
  if (!t)
    return -ENOMEM;
  *out_trust = t;
  return 0;
}

int cpkg_trust_add(struct cpkg_trust *trust, const uint8_t pk[CPKG_PUBLIC_KEY_SIZE]) {
  for (size_t i = 0; i < trust->n; i++)
    if (memcmp(trust->keys[i].pk, pk, CPKG_PUBLIC_KEY_SIZE) == 0)
      return 0;
  if (trust->n >= CPKG_MAX_TRUSTED_KEYS)
    return CORDON_E_LIMIT;
  if (trust->n == trust->cap) {
    size_t cap = trust->cap ? trust->cap * 2 : 4;
    struct trusted_key *k = realloc(trust->keys, cap * sizeof(*k));
    if (!k)
      return -ENOMEM;
    trust->keys = k;
    trust->cap = cap;
  }
  memcpy(trust->keys[trust->n].pk, pk, CPKG_PUBLIC_KEY_SIZE);
  cpkg_key_id(pk, trust->keys[trust->n].id);
  trust->n++;
  return 0;
}

size_t cpkg_trust_count(const struct cpkg_trust *trust) {
  return trust ? trust->n : 0;
}

const uint8_t *cpkg_trust_find(const struct cpkg_trust *trust,
                               const uint8_t key_id[CORDON_ID_LEN]) {
  if (!trust)
    return NULL;
  for (size_t i = 0; i < trust->n; i++)
    if (memcmp(trust->keys[i].id, key_id, CORDON_ID_LEN) == 0)
      return trust->keys[i].pk;
  return NULL;
}

void cpkg_trust_free(struct cpkg_trust *trust) {
  if (!trust)
    return;
  free(trust->keys);
  free(trust);
}

/* ---- reading: the stream --------------------------------------------------- */

enum stream_state {
  ST_HEADER,
  ST_INDEX,
  ST_FILE_BEGIN,
  ST_FILE_DATA,
  ST_FILE_END,
  ST_DONE_PENDING,
  ST_DONE,
  ST_FAILED,
};

struct cpkg_stream {
  crypto_generichash_state hash; /* first: needs 64-byte alignment */
  const struct cpkg_trust *trust;
  enum stream_state state;
  int err;
  uint8_t header[CPKG_HEADER_SIZE];
  size_t have; /* bytes of the header or index gathered so far */
  uint32_t index_len;
  const uint8_t *pk;
  uint8_t *index_buf;
  struct cpkg_index *index;
  uint8_t index_hash[CPKG_HASH_SIZE];
  size_t cur;         /* current file */
  uint64_t file_done; /* bytes of the current file seen */
};

int cpkg_stream_new(const struct cpkg_trust *trust, struct cpkg_stream **out_stream) {
  void *mem = NULL;
  size_t size = (sizeof(struct cpkg_stream) + 63) & ~(size_t)63;
  if (posix_memalign(&mem, 64, size) != 0)
    return -ENOMEM;
  struct cpkg_stream *s = mem;
  memset(s, 0, size);
  s->trust = trust;
  s->state = ST_HEADER;
  *out_stream = s;
  return 0;
}

void cpkg_stream_free(struct cpkg_stream *s) {
  if (!s)
    return;
  free(s->index_buf);
  cpkg_index_free(s->index);
  free(s);
}

static int stream_fail(struct cpkg_stream *s, int err) {
  s->state = ST_FAILED;
  s->err = err;
  free(s->index_buf);
  s->index_buf = NULL;
  return err;
}

static int stream_header(struct cpkg_stream *s, struct cordon_diag *diag) {
  const uint8_t *h = s->header;
  if (memcmp(h, CPKG_MAGIC, CPKG_MAGIC_SIZE) != 0)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "not a cordon package (bad magic)");
  if (be16(h + 8) != CPKG_FORMAT_VERSION)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "unsupported package format version %u",
                           be16(h + 8));
  if (be16(h + 10) != 0)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "unknown header flags 0x%04x",
                           be16(h + 10));
  s->index_len = be32(h + 12);
  if (s->index_len == 0)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "the header declares an empty index");
  if (s->index_len > CPKG_MAX_INDEX)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE,
                           "the index is %u bytes, more than the limit of %u", s->index_len,
                           CPKG_MAX_INDEX);
  s->pk = cpkg_trust_find(s->trust, h + 16);
  if (!s->pk) {
    char hex[2 * CORDON_ID_LEN + 1];
    hex_encode(h + 16, CORDON_ID_LEN, hex);
    return cordon_diag_set(diag, CORDON_E_UNKNOWN_KEY, "signed by key id %s, which is not trusted",
                           hex);
  }
  s->index_buf = malloc(s->index_len);
  if (!s->index_buf)
    return -ENOMEM;
  return 0;
}

static int stream_index(struct cpkg_stream *s, struct cordon_diag *diag) {
  uint8_t msg[CPKG_SIGN_DOMAIN_SIZE + CPKG_HASH_SIZE];
  cpkg_index_hash(s->index_buf, s->index_len, s->index_hash);
  signed_message(s->index_hash, msg);
  if (crypto_sign_verify_detached(s->header + 32, msg, sizeof(msg), s->pk) != 0) {
    char hex[2 * CORDON_ID_LEN + 1];
    hex_encode(s->header + 16, CORDON_ID_LEN, hex);
    return cordon_diag_set(diag, CORDON_E_SIGNATURE_INVALID,
                           "the index signature does not verify with key id %s", hex);
  }
  /* Only now, signed by a trusted key, is the index parsed. */
  int err = cpkg_index_parse(s->index_buf, s->index_len, &s->index, diag);
  free(s->index_buf);
  s->index_buf = NULL;
  return err;
}

int cpkg_stream_next(struct cpkg_stream *s, const uint8_t *buf, size_t len, size_t *out_used,
                     struct cpkg_event *out_event, struct cordon_diag *diag) {
  size_t used = 0;
  struct cpkg_event ev = {.type = CPKG_EVENT_NEED_MORE};
  char shown[DIAG_PATH_MAX + 8];
  int err;
  for (;;) {
    switch (s->state) {
    case ST_FAILED:
      return cordon_diag_set(diag, s->err, "the package stream already failed");
    case ST_HEADER: {
      size_t take = CPKG_HEADER_SIZE - s->have;
      if (take > len - used)
        take = len - used;
      if (take)
        memcpy(s->header + s->have, buf + used, take);
      s->have += take;
      used += take;
      if (s->have < CPKG_HEADER_SIZE)
        goto need_more;
      if ((err = stream_header(s, diag)) != 0)
        return stream_fail(s, err);
      s->have = 0;
      s->state = ST_INDEX;
      break;
    }
    case ST_INDEX: {
      size_t take = s->index_len - s->have;
      if (take > len - used)
        take = len - used;
      if (take)
        memcpy(s->index_buf + s->have, buf + used, take);
      s->have += take;
      used += take;
      if (s->have < s->index_len)
        goto need_more;
      if ((err = stream_index(s, diag)) != 0)
        return stream_fail(s, err);
      s->cur = 0;
      s->state = ST_FILE_BEGIN;
      ev.type = CPKG_EVENT_INDEX;
      goto event;
    }
    case ST_FILE_BEGIN:
      crypto_generichash_init(&s->hash, NULL, 0, CPKG_HASH_SIZE);
      s->file_done = 0;
      s->state = ST_FILE_DATA;
      ev.type = CPKG_EVENT_FILE_BEGIN;
      ev.file = s->cur;
      goto event;
    case ST_FILE_DATA: {
      uint64_t left = s->index->files[s->cur].size - s->file_done;
      if (left == 0) {
        s->state = ST_FILE_END;
        break;
      }
      if (used == len)
        goto need_more;
      size_t take = len - used;
      if (take > left)
        take = (size_t)left;
      crypto_generichash_update(&s->hash, buf + used, take);
      ev.type = CPKG_EVENT_FILE_DATA;
      ev.file = s->cur;
      ev.data = buf + used;
      ev.len = take;
      used += take;
      s->file_done += take;
      goto event;
    }
    case ST_FILE_END: {
      const struct cpkg_file *f = &s->index->files[s->cur];
      uint8_t h[CPKG_HASH_SIZE];
      crypto_generichash_final(&s->hash, h, sizeof(h));
      if (memcmp(h, f->hash, sizeof(h)) != 0)
        return stream_fail(s, cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                                              "file '%s': contents do not match the signed hash",
                                              diag_path(f->path, strlen(f->path), shown)));
      ev.type = CPKG_EVENT_FILE_END;
      ev.file = s->cur;
      s->cur++;
      s->state = s->cur < s->index->n_files ? ST_FILE_BEGIN : ST_DONE_PENDING;
      goto event;
    }
    case ST_DONE_PENDING:
      s->state = ST_DONE;
      ev.type = CPKG_EVENT_DONE;
      goto event;
    case ST_DONE:
      if (used < len)
        return stream_fail(s, cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                                              "trailing data after the last file"));
      goto need_more;
    }
  }
need_more:
  ev.type = CPKG_EVENT_NEED_MORE;
event:
  *out_used = used;
  *out_event = ev;
  return 0;
}

int cpkg_stream_finish(struct cpkg_stream *s, struct cordon_diag *diag) {
  char shown[DIAG_PATH_MAX + 8];
  switch (s->state) {
  case ST_DONE:
    return 0;
  case ST_FAILED:
    return cordon_diag_set(diag, s->err, "the package stream already failed");
  case ST_HEADER:
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "truncated in the header");
  case ST_INDEX:
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT, "truncated in the index");
  default: {
    const struct cpkg_file *f =
        &s->index->files[s->cur < s->index->n_files ? s->cur : s->index->n_files - 1];
    return cordon_diag_set(diag, CORDON_E_PACKAGE_CORRUPT,
                           "truncated in file '%s' (%llu of %llu bytes)",
                           diag_path(f->path, strlen(f->path), shown),
                           (unsigned long long)s->file_done, (unsigned long long)f->size);
  }
  }
}

const struct cpkg_index *cpkg_stream_index(const struct cpkg_stream *s) {
  return s->state == ST_FAILED ? NULL : s->index;
}

int cpkg_stream_index_hash(const struct cpkg_stream *s, uint8_t out_hash[CPKG_HASH_SIZE]) {
  if (!s->index || s->state == ST_FAILED)
    return CORDON_E_USAGE;
  memcpy(out_hash, s->index_hash, CPKG_HASH_SIZE);
  return 0;
}

uint64_t cpkg_stream_package_size(const struct cpkg_stream *s) {
  if (!s->index)
    return 0;
  return CPKG_HEADER_SIZE + (uint64_t)s->index_len + s->index->total;
}
