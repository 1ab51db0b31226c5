/* A msgpack validator that runs before msgpack-c sees untrusted bytes.
 *
 * mpcheck_validate() walks the encoding of exactly one msgpack object that
 * must cover the whole buffer, without allocating anything and without
 * recursion (a fixed stack of MPCHECK_DEPTH_MAX counters), so that whatever
 * passes can be handed to msgpack_unpack_next() with a known bound on the
 * memory msgpack-c will allocate for it. It enforces:
 *   - well-formedness: every header complete, every declared body present,
 *     no byte 0xc1, nothing after the object (trailing bytes);
 *   - no ext types at all (fixext 1/2/4/8/16, ext 8/16/32);
 *   - nesting depth: at most limits->max_depth containers (arrays or maps)
 *     inside one another: a scalar is depth 0, [] and {"a": 1} depth 1,
 *     [[1]] depth 2, and the check fires at the first container header
 *     past the limit (a 1000-deep nesting costs 9 bytes of work);
 *   - element counts that fit: an array of n elements needs n more bytes at
 *     least, a map of n entries 2n, so a declared count larger than what is
 *     left of the buffer is rejected at its header (`dd ff ff ff ff` never
 *     gets further);
 *   - str and bin sizes at most limits->max_str / limits->max_bin bytes;
 *   - at most limits->max_items objects in total (every key, value and
 *     container counts one), which bounds msgpack-c's per-object allocation.
 *
 * Pure and allocation-free. Errors:
 *   CORDON_E_PROTOCOL  malformed: truncated, trailing bytes, 0xc1, ext type,
 *                      a count larger than the bytes left, empty buffer;
 *   CORDON_E_LIMIT     depth, str/bin size or item count above the limits;
 *   -EINVAL            bad arguments (NULL buffer with len > 0, limits out of
 *                      range).
 * diag (may be NULL) receives a one-line detail with the byte offset.
 */
#ifndef CORDON_PROTO_MPCHECK_H
#define CORDON_PROTO_MPCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* The deepest nesting any caller may allow. */
#define MPCHECK_DEPTH_MAX 8

struct mpcheck_limits {
  unsigned max_depth; /* 0..MPCHECK_DEPTH_MAX open containers */
  uint32_t max_str;   /* largest str body in bytes */
  uint32_t max_bin;   /* largest bin body in bytes */
  uint32_t max_items; /* objects in total, >= 1 */
};

/* The limits used when NULL is passed: depth 8, str 1 MiB, bin 16 MiB,
 * 1 Mi items. Protocol code passes its own, tighter limits. */
#define MPCHECK_DEFAULT_MAX_STR (1u << 20)
#define MPCHECK_DEFAULT_MAX_BIN (16u << 20)
#define MPCHECK_DEFAULT_MAX_ITEMS (1u << 20)

/* Validate that buf[0..len) is exactly one msgpack object within limits
 * (NULL: the defaults above). Returns 0 or an error listed above. */
int mpcheck_validate(const uint8_t *buf, size_t len, const struct mpcheck_limits *limits,
                     struct cordon_diag *diag);

/* Like mpcheck_validate() but the object need only start the buffer: on
 * success *out_len is the length of the first object (bytes after it are not
 * looked at). Same errors, without the trailing-bytes one. */
int mpcheck_measure(const uint8_t *buf, size_t len, const struct mpcheck_limits *limits,
                    size_t *out_len, struct cordon_diag *diag);

#endif
