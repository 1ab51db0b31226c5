/* libFuzzer target for the frame reader (proto/frame.c).
 *
 * Input: byte 0 picks the starting cap (bit 0: handshake or session) and
 * whether to switch to the session cap after the first frame (bit 1);
 * bytes 1..4 seed the chunk sizes; the rest is the byte stream. The reader,
 * fed in pseudo-random chunks, must agree exactly with a one-shot reference
 * parse of the same stream. */
#include "core/error.h"
#include "proto/frame.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      abort();                                                                                     \
  } while (0)

/* The expected outcome: frames (offset, length) and a final error. */
struct expect {
  size_t off[4096];
  size_t len[4096];
  size_t count;
  int err;
  size_t leftover; /* bytes of an unfinished frame at the end */
};

static void reference(const uint8_t *p, size_t n, uint32_t max, int switch_after_first,
                      struct expect *e) {
  size_t pos = 0;

  memset(e, 0, sizeof(*e));
  while (pos < n && e->count < 4096) {
    uint32_t len;
    if (n - pos < 4) {
      e->leftover = n - pos;
      return;
    }
    len = (uint32_t)p[pos] << 24 | (uint32_t)p[pos + 1] << 16 | (uint32_t)p[pos + 2] << 8 |
          p[pos + 3];
    if (len == 0) {
      e->err = CORDON_E_PROTOCOL;
      return;
    }
    if (len > max) {
      e->err = CORDON_E_LIMIT;
      return;
    }
    if (n - pos - 4 < len) {
      e->leftover = n - pos;
      return;
    }
    e->off[e->count] = pos + 4;
    e->len[e->count] = len;
    e->count++;
    pos += 4 + len;
    if (switch_after_first && e->count == 1)
      max = FRAME_MAX_SESSION;
  }
}

static uint32_t next_rand(uint32_t *s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 8;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct expect e;
  struct frame_reader r;
  uint32_t max, seed;
  int switch_after_first;
  const uint8_t *p;
  size_t n, pos = 0, got = 0;
  int err = 0;

  if (size < 5)
    return 0;
  max = (data[0] & 1) ? FRAME_MAX_SESSION : FRAME_MAX_HANDSHAKE;
  switch_after_first = (data[0] & 2) != 0;
  seed = (uint32_t)data[1] << 24 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 8 | data[4];
  p = data + 5;
  n = size - 5;
  reference(p, n, max, switch_after_first, &e);
  if (e.count == 4096)
    return 0; /* too many frames to track; not interesting */

  CHECK(frame_reader_init(&r, max) == 0);
  while (pos < n && !err) {
    size_t chunk = 1 + next_rand(&seed) % 64, off = 0;
    if (chunk > n - pos)
      chunk = n - pos;
    while (off < chunk) {
      const uint8_t *body = NULL;
      size_t used = 0, len = 0;
      int rc = frame_reader_feed(&r, p + pos + off, chunk - off, &used, &body, &len);
      CHECK(used <= chunk - off);
      off += used;
      if (rc < 0) {
        err = rc;
        break;
      }
      if (rc == 1) {
        CHECK(got < e.count);
        CHECK(len == e.len[got] && len >= 1 && len <= FRAME_MAX_HARD);
        CHECK(memcmp(body, p + e.off[got], len) == 0);
        got++;
        if (switch_after_first && got == 1)
          CHECK(frame_reader_set_max(&r, FRAME_MAX_SESSION) == 0);
      } else {
        CHECK(off == chunk);
      }
    }
    pos += chunk;
  }
  CHECK(got == e.count);
  CHECK(err == e.err);
  if (!err)
    CHECK(frame_reader_in_frame(&r) == (e.leftover > 0));
  frame_reader_release(&r);
  return 0;
}
