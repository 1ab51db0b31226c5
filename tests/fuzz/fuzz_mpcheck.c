/* libFuzzer target for the msgpack validator.
 *
 * Checks, for arbitrary bytes and two sets of limits: the result is 0 or a
 * documented error; validate and measure agree; and whatever validate
 * accepts, msgpack-c parses completely into an object with no ext, no
 * container deeper than the limit, and no str/bin above its cap. */
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/mpcheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned obj_depth(const msgpack_object *o, const struct mpcheck_limits *lim) {
  unsigned deepest = 0;
  switch (o->type) {
  case MSGPACK_OBJECT_EXT:
    abort();
  case MSGPACK_OBJECT_STR:
    if (o->via.str.size > lim->max_str)
      abort();
    return 0;
  case MSGPACK_OBJECT_BIN:
    if (o->via.bin.size > lim->max_bin)
      abort();
    return 0;
  case MSGPACK_OBJECT_ARRAY:
    for (uint32_t i = 0; i < o->via.array.size; i++) {
      unsigned d = obj_depth(&o->via.array.ptr[i], lim);
      deepest = d > deepest ? d : deepest;
    }
    return deepest + 1;
  case MSGPACK_OBJECT_MAP:
    for (uint32_t i = 0; i < o->via.map.size; i++) {
      unsigned k = obj_depth(&o->via.map.ptr[i].key, lim);
      unsigned v = obj_depth(&o->via.map.ptr[i].val, lim);
      deepest = k > deepest ? k : deepest;
      deepest = v > deepest ? v : deepest;
    }
    return deepest + 1;
  default:
    return 0;
  }
}

static void check(const uint8_t *data, size_t size, const struct mpcheck_limits *lim) {
  struct cordon_diag diag;
  size_t used = 0;
  int rc = mpcheck_validate(data, size, lim, &diag);
  int mrc = mpcheck_measure(data, size, lim, &used, NULL);

  if (rc != 0 && rc != CORDON_E_PROTOCOL && rc != CORDON_E_LIMIT)
    abort();
  if (mrc != 0 && mrc != CORDON_E_PROTOCOL && mrc != CORDON_E_LIMIT)
    abort();
  /* validate == measure + "nothing after it" */
  if ((rc == 0) != (mrc == 0 && used == size))
    abort();
  if (mrc == 0) {
    if (used == 0 || used > size)
      abort();
    if (mpcheck_validate(data, used, lim, NULL) != 0)
      abort();
  }
  if (rc != 0)
    return;

  msgpack_unpacked up;
  size_t off = 0;
  msgpack_unpacked_init(&up);
  if (msgpack_unpack_next(&up, (const char *)data, size, &off) != MSGPACK_UNPACK_SUCCESS ||
      off != size)
    abort();
  if (obj_depth(&up.data, lim) > lim->max_depth)
    abort();
  msgpack_unpacked_destroy(&up);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const struct mpcheck_limits wide = {MPCHECK_DEPTH_MAX, 1u << 20, 1u << 20, 1u << 16};
  static const struct mpcheck_limits tight = {2, 8, 8, 16};
  check(data, size, &wide);
  check(data, size, &tight);
  return 0;
}
