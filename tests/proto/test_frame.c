/* Tests for proto/frame.c: the length-prefixed frame codec. */
#include "core/error.h"
#include "proto/frame.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Feed a whole chunk, collecting complete frames into `frames` (copies,
 * concatenated) and their lengths into `lens`. Returns the first error or
 * the number of frames. */
struct collected {
  uint8_t data[1 << 16];
  size_t data_len;
  size_t lens[256];
  size_t count;
};

static int feed_all(struct frame_reader *r, const uint8_t *p, size_t len, struct collected *c) {
  while (len > 0) {
    const uint8_t *body = NULL;
    size_t used = 0, body_len = 0;
    int rc = frame_reader_feed(r, p, len, &used, &body, &body_len);
    cr_assert_leq(used, len);
    if (rc < 0)
      return rc;
    p += used;
    len -= used;
    if (rc == 1) {
      cr_assert_lt(c->count, 256);
      cr_assert_leq(c->data_len + body_len, sizeof(c->data));
      memcpy(c->data + c->data_len, body, body_len);
      c->data_len += body_len;
      c->lens[c->count++] = body_len;
    } else {
      cr_assert_eq(len, 0, "0 means the whole chunk was consumed");
    }
  }
  return (int)c->count;
}

static size_t put_frame(uint8_t *out, const void *body, size_t len) {
  size_t n = 0;
  cr_assert_eq(frame_encode(body, len, FRAME_MAX_HARD, out, len + 4, &n), 0);
  return n;
}

static void hdr(uint8_t out[4], uint32_t len) {
  out[0] = (uint8_t)(len >> 24);
  out[1] = (uint8_t)(len >> 16);
  out[2] = (uint8_t)(len >> 8);
  out[3] = (uint8_t)len;
}

Test(frame, init_rejects_bad_maximum) {
  struct frame_reader r;
  cr_assert_eq(frame_reader_init(&r, 0), -EINVAL);
  cr_assert_eq(frame_reader_init(&r, FRAME_MAX_HARD + 1), -EINVAL);
  cr_assert_eq(frame_reader_init(&r, FRAME_MAX_HARD), 0);
  cr_assert_eq(frame_reader_set_max(&r, 0), -EINVAL);
  cr_assert_eq(frame_reader_set_max(&r, FRAME_MAX_HARD + 1), -EINVAL);
  frame_reader_release(&r);
  frame_reader_release(NULL);
}

Test(frame, limits_are_the_documented_values) {
  cr_assert_eq(FRAME_MAX_HANDSHAKE, 1024);
  cr_assert_eq(FRAME_MAX_SESSION, 2 * 1024 * 1024 + 64 * 1024);
}

Test(frame, rejects_length_zero) {
  struct frame_reader r;
  struct collected c = {0};
  uint8_t in[8] = {0, 0, 0, 0, 0, 0, 0, 1};

  frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
  cr_assert_eq(feed_all(&r, in, sizeof(in), &c), CORDON_E_PROTOCOL);
  cr_assert_eq(feed_all(&r, in + 4, 4, &c), CORDON_E_PROTOCOL, "the error is sticky");
  cr_assert_null(r.body, "nothing allocated");
  frame_reader_release(&r);
}

Test(frame, rejects_length_above_limit) {
  struct frame_reader r;
  struct collected c = {0};
  uint8_t in[4];

  frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
  hdr(in, FRAME_MAX_HANDSHAKE + 1);
  cr_assert_eq(feed_all(&r, in, sizeof(in), &c), CORDON_E_LIMIT);
  cr_assert_null(r.body, "checked before any allocation");
  frame_reader_release(&r);

  frame_reader_init(&r, FRAME_MAX_SESSION);
  hdr(in, FRAME_MAX_SESSION + 1);
  cr_assert_eq(feed_all(&r, in, sizeof(in), &c), CORDON_E_LIMIT);
  cr_assert_null(r.body);
  frame_reader_release(&r);
}

Test(frame, rejects_length_2_pow_32_minus_1) {
  struct frame_reader r;
  struct collected c = {0};
  uint8_t in[6] = {0xff, 0xff, 0xff, 0xff, 0x00, 0x00};

  frame_reader_init(&r, FRAME_MAX_HARD);
  cr_assert_eq(feed_all(&r, in, sizeof(in), &c), CORDON_E_LIMIT);
  cr_assert_null(r.body);
  cr_assert_eq(r.body_cap, 0);
  frame_reader_release(&r);
}

Test(frame, accepts_exactly_the_limit) {
  struct frame_reader r;
  uint8_t *in = malloc(FRAME_MAX_SESSION + 4);
  const uint8_t *body = NULL;
  size_t used = 0, len = 0;

  cr_assert_not_null(in);
  hdr(in, FRAME_MAX_SESSION);
  for (size_t i = 0; i < FRAME_MAX_SESSION; i++)
    in[4 + i] = (uint8_t)(i * 7);
  frame_reader_init(&r, FRAME_MAX_SESSION);
  cr_assert_eq(frame_reader_feed(&r, in, FRAME_MAX_SESSION + 4, &used, &body, &len), 1);
  cr_assert_eq(used, FRAME_MAX_SESSION + 4);
  cr_assert_eq(len, FRAME_MAX_SESSION);
  cr_assert_eq(memcmp(body, in + 4, len), 0);
  frame_reader_release(&r);

  frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
  hdr(in, FRAME_MAX_HANDSHAKE);
  cr_assert_eq(frame_reader_feed(&r, in, FRAME_MAX_HANDSHAKE + 4, &used, &body, &len), 1);
  cr_assert_eq(len, FRAME_MAX_HANDSHAKE);
  frame_reader_release(&r);
  free(in);
}

Test(frame, memory_grows_only_with_received_bytes) {
  struct frame_reader r;
  uint8_t in[14] = {0};
  const uint8_t *body;
  size_t used, len;

  hdr(in, FRAME_MAX_SESSION);
  frame_reader_init(&r, FRAME_MAX_SESSION);
  cr_assert_eq(frame_reader_feed(&r, in, sizeof(in), &used, &body, &len), 0);
  cr_assert_eq(r.body_len, 10);
  cr_assert_leq(r.body_cap, 4096, "a stalled 2 MiB frame holds %zu bytes", r.body_cap);
  frame_reader_release(&r);
}

Test(frame, byte_at_a_time_feeding) {
  static const char *bodies[] = {"a", "hello", "frames over a trickle", "z"};
  uint8_t stream[256];
  size_t stream_len = 0, frames = 0;
  struct frame_reader r;

  for (size_t i = 0; i < 4; i++)
    stream_len += put_frame(stream + stream_len, bodies[i], strlen(bodies[i]));
  frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
  for (size_t i = 0; i < stream_len; i++) {
    const uint8_t *body = NULL;
    size_t used = 0, len = 0;
    int rc = frame_reader_feed(&r, stream + i, 1, &used, &body, &len);
    cr_assert_eq(used, 1);
    cr_assert_geq(rc, 0);
    if (rc == 1) {
      cr_assert_eq(len, strlen(bodies[frames]));
      cr_assert_eq(memcmp(body, bodies[frames], len), 0);
      frames++;
      cr_assert_eq(frame_reader_in_frame(&r), 0);
    } else {
      cr_assert_eq(frame_reader_in_frame(&r), 1);
    }
  }
  cr_assert_eq(frames, 4);
  frame_reader_release(&r);
}

Test(frame, several_frames_in_one_chunk) {
  uint8_t stream[256];
  size_t stream_len = 0;
  struct frame_reader r;
  struct collected c = {0};

  stream_len += put_frame(stream + stream_len, "one", 3);
  stream_len += put_frame(stream + stream_len, "two!", 4);
  stream_len += put_frame(stream + stream_len, "three", 5);
  frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
  cr_assert_eq(feed_all(&r, stream, stream_len, &c), 3);
  cr_assert_eq(c.lens[0], 3);
  cr_assert_eq(c.lens[1], 4);
  cr_assert_eq(c.lens[2], 5);
  cr_assert_eq(memcmp(c.data, "onetwo!three", 12), 0);
  cr_assert_eq(frame_reader_in_frame(&r), 0);
  frame_reader_release(&r);
}

Test(frame, feed_stops_at_the_end_of_each_frame) {
  uint8_t stream[64];
  size_t stream_len = 0, used = 0, len = 0;
  const uint8_t *body = NULL;
  struct frame_reader r;

  stream_len += put_frame(stream, "ab", 2);
  stream_len += put_frame(stream + stream_len, "cd", 2);
  frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
  cr_assert_eq(frame_reader_feed(&r, stream, stream_len, &used, &body, &len), 1);
  cr_assert_eq(used, 6, "only the first frame is consumed");
  cr_assert_eq(frame_reader_feed(&r, stream + 6, stream_len - 6, &used, &body, &len), 1);
  cr_assert_eq(used, 6);
  cr_assert_eq(memcmp(body, "cd", 2), 0);
  cr_assert_eq(frame_reader_feed(&r, stream, 0, &used, &body, &len), 0);
  cr_assert_eq(used, 0);
  frame_reader_release(&r);
}

Test(frame, trailing_partial_frames_wait_for_more) {
  uint8_t stream[64];
  size_t n = 0;
  struct frame_reader r;

  n += put_frame(stream, "full", 4);
  n += put_frame(stream + n, "partial", 7);
  for (size_t cut = 9; cut < n; cut++) {
    struct collected c = {0};
    frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
    cr_assert_eq(feed_all(&r, stream, cut, &c), 1, "cut at %zu", cut);
    cr_assert_eq(frame_reader_in_frame(&r), 1);
    cr_assert_eq(feed_all(&r, stream + cut, n - cut, &c), 2);
    cr_assert_eq(memcmp(c.data, "fullpartial", 11), 0);
    frame_reader_release(&r);
  }
  /* A partial header alone. */
  struct collected c = {0};
  frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
  cr_assert_eq(feed_all(&r, stream, 3, &c), 0);
  cr_assert_eq(frame_reader_in_frame(&r), 1);
  frame_reader_release(&r);
}

Test(frame, maximum_can_change_between_frames_of_one_chunk) {
  uint8_t *stream = malloc(4096);
  uint8_t big[2000];
  size_t n = 0, used = 0, len = 0;
  const uint8_t *body = NULL;
  struct frame_reader r;
  struct collected c = {0};

  cr_assert_not_null(stream);
  memset(big, 'x', sizeof(big));
  n += put_frame(stream, "handshake", 9);
  n += put_frame(stream + n, big, sizeof(big));

  /* Without the switch the second frame is over the handshake cap. */
  frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
  cr_assert_eq(feed_all(&r, stream, n, &c), CORDON_E_LIMIT);
  frame_reader_release(&r);

  frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
  cr_assert_eq(frame_reader_feed(&r, stream, n, &used, &body, &len), 1);
  cr_assert_eq(frame_reader_set_max(&r, FRAME_MAX_SESSION), 0);
  cr_assert_eq(frame_reader_feed(&r, stream + used, n - used, &used, &body, &len), 1);
  cr_assert_eq(len, sizeof(big));
  frame_reader_release(&r);

  /* Lowering the cap under a frame already in progress fails it. */
  frame_reader_init(&r, FRAME_MAX_SESSION);
  cr_assert_eq(frame_reader_feed(&r, stream + 13, 100, &used, &body, &len), 0);
  cr_assert_eq(frame_reader_set_max(&r, FRAME_MAX_HANDSHAKE), CORDON_E_LIMIT);
  cr_assert_eq(frame_reader_feed(&r, stream + 113, 10, &used, &body, &len), CORDON_E_LIMIT);
  frame_reader_release(&r);
  free(stream);
}

Test(frame, random_chunking_yields_the_same_frames) {
  uint8_t stream[1 << 15];
  size_t lens[64], n = 0, count = 0;
  unsigned seed = 12345;

  while (count < 64) {
    size_t len = 1 + (size_t)(rand_r(&seed) % 400);
    uint8_t body[400];
    if (n + len + 4 > sizeof(stream))
      break;
    for (size_t i = 0; i < len; i++)
      body[i] = (uint8_t)rand_r(&seed);
    n += put_frame(stream + n, body, len);
    lens[count++] = len;
  }
  for (int round = 0; round < 200; round++) {
    struct frame_reader r;
    struct collected c = {0};
    size_t pos = 0, off = 0;

    frame_reader_init(&r, FRAME_MAX_HANDSHAKE);
    while (pos < n) {
      size_t chunk = 1 + (size_t)(rand_r(&seed) % 700);
      if (chunk > n - pos)
        chunk = n - pos;
      cr_assert_geq(feed_all(&r, stream + pos, chunk, &c), 0);
      pos += chunk;
    }
    cr_assert_eq(c.count, count);
    for (size_t i = 0; i < count; i++) {
      cr_assert_eq(c.lens[i], lens[i]);
      cr_assert_eq(memcmp(c.data + off, stream + off + 4 * (i + 1), lens[i]), 0);
      off += lens[i];
    }
    frame_reader_release(&r);
  }
}

Test(frame, encoder_writes_big_endian_header) {
  uint8_t h[4], out[16];
  size_t n = 0;

  cr_assert_eq(frame_encode_header(0x010203, FRAME_MAX_HARD, h), 0);
  cr_assert(h[0] == 0x00 && h[1] == 0x01 && h[2] == 0x02 && h[3] == 0x03);
  cr_assert_eq(frame_encode_header(0, FRAME_MAX_HARD, h), CORDON_E_PROTOCOL);
  cr_assert_eq(frame_encode_header(FRAME_MAX_HANDSHAKE + 1, FRAME_MAX_HANDSHAKE, h),
               CORDON_E_LIMIT);
  cr_assert_eq(frame_encode_header((size_t)FRAME_MAX_HARD + 1, UINT32_MAX, h), CORDON_E_LIMIT);
  cr_assert_eq(frame_encode_header((size_t)UINT32_MAX + 1, UINT32_MAX, h), CORDON_E_LIMIT);
  cr_assert_eq(frame_encode((const uint8_t *)"abc", 3, FRAME_MAX_HANDSHAKE, out, 6, &n), -ENOBUFS);
  cr_assert_eq(frame_encode((const uint8_t *)"abc", 3, FRAME_MAX_HANDSHAKE, out, 7, &n), 0);
  cr_assert_eq(n, 7);
  cr_assert_eq(memcmp(out, "\0\0\0\3abc", 7), 0);
}
