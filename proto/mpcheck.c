#include "proto/mpcheck.h"

#include <errno.h>

static const struct mpcheck_limits mpcheck_defaults = {
    .max_depth = MPCHECK_DEPTH_MAX,
    .max_str = MPCHECK_DEFAULT_MAX_STR,
    .max_bin = MPCHECK_DEFAULT_MAX_BIN,
    .max_items = MPCHECK_DEFAULT_MAX_ITEMS,
};

/* Big-endian unsigned of n (1, 2, 4 or 8) bytes; the caller checked bounds. */
static uint64_t mp_be(const uint8_t *p, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; i++)
    v = (v << 8) | p[i];
  return v;
}

/* What one header byte announces. */
enum mp_kind {
  MP_SCALAR,    /* `size` more bytes of payload */
  MP_STR,       /* a length of `size` bytes, then the body */
  MP_BIN,       /* same, bin */
  MP_ARRAY,     /* a count of `size` bytes (0: fix, count in `fix`) */
  MP_MAP,       /* same, entries */
  MP_EXT,       /* refused */
  MP_NEVER_USED /* 0xc1 */
};

struct mp_head {
  enum mp_kind kind;
  unsigned size; /* payload bytes (scalar) or width of the length field */
  uint32_t fix;  /* length/count carried in the type byte itself */
};

static struct mp_head mp_classify(uint8_t b) {
  struct mp_head h = {MP_SCALAR, 0, 0};
  if (b <= 0x7f || b >= 0xe0)
    return h; /* positive / negative fixint */
  if (b <= 0x8f)
    return (struct mp_head){MP_MAP, 0, b & 0x0fu};
  if (b <= 0x9f)
    return (struct mp_head){MP_ARRAY, 0, b & 0x0fu};
  if (b <= 0xbf)
    return (struct mp_head){MP_STR, 0, b & 0x1fu};
  switch (b) {
  case 0xc0: /* nil */
  case 0xc2: /* false */
  case 0xc3: /* true */
    return h;
  case 0xc1:
    h.kind = MP_NEVER_USED;
    return h;
  case 0xc4:
  case 0xc5:
  case 0xc6:
    return (struct mp_head){MP_BIN, 1u << (b - 0xc4), 0};
  case 0xca:
    h.size = 4;
    return h;
  case 0xcb:
    h.size = 8;
    return h;
  case 0xcc:
  case 0xcd:
  case 0xce:
  case 0xcf:
    h.size = 1u << (b - 0xcc);
    return h;
  case 0xd0:
  case 0xd1:
  case 0xd2:
  case 0xd3:
    h.size = 1u << (b - 0xd0);
    return h;
  case 0xd9:
  case 0xda:
  case 0xdb:
    return (struct mp_head){MP_STR, 1u << (b - 0xd9), 0};
  case 0xdc:
    return (struct mp_head){MP_ARRAY, 2, 0};
  case 0xdd:
    return (struct mp_head){MP_ARRAY, 4, 0};
  case 0xde:
    return (struct mp_head){MP_MAP, 2, 0};
  case 0xdf:
    return (struct mp_head){MP_MAP, 4, 0};
  default: /* 0xc7-0xc9 ext 8/16/32, 0xd4-0xd8 fixext */
    h.kind = MP_EXT;
    return h;
  }
}

static int mp_check_limits(const struct mpcheck_limits *lim) {
  if (lim->max_depth > MPCHECK_DEPTH_MAX || lim->max_items == 0)
    return -EINVAL;
  return 0;
}

int mpcheck_measure(const uint8_t *buf, size_t len, const struct mpcheck_limits *limits,
                    size_t *out_len, struct cordon_diag *diag) {
  const struct mpcheck_limits *lim = limits ? limits : &mpcheck_defaults;
  /* left[i]: objects still to read inside the container open at level i. */
  uint64_t left[MPCHECK_DEPTH_MAX];
  unsigned depth = 0;
  uint64_t items = 0;
  size_t pos = 0;

  if ((!buf && len > 0) || !out_len)
    return -EINVAL;
  if (mp_check_limits(lim) < 0)
    return cordon_diag_set(diag, -EINVAL, "msgpack: invalid limits");

  for (;;) {
    size_t at = pos;
    if (pos >= len)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msgpack: truncated at offset %zu", pos);
    if (++items > lim->max_items)
      return cordon_diag_set(diag, CORDON_E_LIMIT, "msgpack: more than %u objects (offset %zu)",
                             lim->max_items, at);
    struct mp_head h = mp_classify(buf[pos++]);
    if (h.kind == MP_EXT)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msgpack: ext type at offset %zu", at);
    if (h.kind == MP_NEVER_USED)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msgpack: byte 0xc1 at offset %zu", at);
    if (h.kind != MP_SCALAR && h.size > len - pos)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msgpack: truncated header at offset %zu",
                             at);
    uint64_t n = h.fix;
    if (h.kind != MP_SCALAR && h.size > 0) {
      n = mp_be(buf + pos, h.size);
      pos += h.size;
    }
    size_t rest = len - pos;

    switch (h.kind) {
    case MP_SCALAR:
      if (h.size > rest)
        return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msgpack: truncated value at offset %zu",
                               at);
      pos += h.size;
      break;
    case MP_STR:
    case MP_BIN: {
      uint32_t cap = h.kind == MP_STR ? lim->max_str : lim->max_bin;
      if (n > cap)
        return cordon_diag_set(diag, CORDON_E_LIMIT,
                               "msgpack: %s of %llu bytes above %u at offset %zu",
                               h.kind == MP_STR ? "str" : "bin", (unsigned long long)n, cap, at);
      if (n > rest)
        return cordon_diag_set(diag, CORDON_E_PROTOCOL,
                               "msgpack: %s of %llu bytes with %zu left at offset %zu",
                               h.kind == MP_STR ? "str" : "bin", (unsigned long long)n, rest, at);
      pos += (size_t)n;
      break;
    }
    case MP_ARRAY:
    case MP_MAP: {
      if (depth >= lim->max_depth)
        return cordon_diag_set(diag, CORDON_E_LIMIT,
                               "msgpack: nesting deeper than %u at offset %zu", lim->max_depth, at);
      uint64_t objects = h.kind == MP_MAP ? 2 * n : n; /* n < 2^32: no overflow */
      if (objects > rest)
        return cordon_diag_set(diag, CORDON_E_PROTOCOL,
                               "msgpack: %s of %llu elements with %zu bytes left at offset %zu",
                               h.kind == MP_MAP ? "map" : "array", (unsigned long long)n, rest, at);
      if (objects > 0) {
        left[depth++] = objects;
        continue; /* read the first element */
      }
      break;
    }
    default:
      return CORDON_E_INTERNAL;
    }

    /* One object is complete: count it against the containers it closes. */
    for (;;) {
      if (depth == 0) {
        *out_len = pos;
        return 0;
      }
      if (--left[depth - 1] > 0)
        break;
      depth--;
    }
  }
}

int mpcheck_validate(const uint8_t *buf, size_t len, const struct mpcheck_limits *limits,
                     struct cordon_diag *diag) {
  size_t used = 0;
  int rc = mpcheck_measure(buf, len, limits, &used, diag);
  if (rc < 0)
    return rc;
  if (used != len)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL,
                           "msgpack: %zu trailing bytes after the object at offset %zu", len - used,
                           used);
  return 0;
}
