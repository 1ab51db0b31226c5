/* Frames: the unit cordon sends over TCP.
 *
 * A frame is a 4-byte big-endian body length followed by that many body
 * bytes. A body is never empty (length 0 is a protocol error). During the
 * Noise handshake a body is one handshake message; afterwards it is one
 * transport record (docs/protocol/wire.md).
 *
 * Limits. The reader enforces a per-state maximum on the declared body
 * length, checked as soon as the 4 length bytes are in and before any memory
 * is allocated for the body:
 *   FRAME_MAX_HANDSHAKE  1024 bytes    while the handshake runs
 *   FRAME_MAX_SESSION    2 MiB + 64 KiB afterwards: a result carries at most
 *                        1 MiB of stdout and 1 MiB of stderr (output_kb ≤ 1024
 *                        each) plus the rest of the message and the 16-byte
 *                        authentication tag.
 * No maximum may be set above FRAME_MAX_HARD. The body buffer grows with the
 * bytes actually received (never beyond the declared length), so a peer that
 * declares a large frame and then stalls holds at most what it has sent.
 *
 * Pure: buffers in, buffers out. Errors: CORDON_E_PROTOCOL (length 0),
 * CORDON_E_LIMIT (declared length above the current maximum), -ENOMEM,
 * -EINVAL (bad arguments), -ENOBUFS (output buffer too small). A reader error
 * is sticky: every later feed returns the same error.
 */
#ifndef CORDON_PROTO_FRAME_H
#define CORDON_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FRAME_HEADER_LEN 4
#define FRAME_MAX_HANDSHAKE 1024u
#define FRAME_MAX_SESSION ((2u << 20) + (64u << 10)) /* 2162688 */
#define FRAME_MAX_HARD FRAME_MAX_SESSION

/* An incremental frame reader. Treat the fields as private. */
struct frame_reader {
  uint32_t max_body; /* current per-state maximum */
  uint8_t hdr[FRAME_HEADER_LEN];
  size_t hdr_len; /* header bytes collected for the current frame */
  uint32_t want;  /* declared body length, valid when hdr_len == 4 */
  uint8_t *body;  /* body buffer (malloc), capacity body_cap */
  size_t body_cap;
  size_t body_len; /* body bytes collected */
  int delivered;   /* the last feed returned a frame: reset on next feed */
  int err;         /* sticky error, 0 if none */
};

/* Initialise r with a maximum body length (1..FRAME_MAX_HARD).
 * Returns 0, or -EINVAL for a maximum outside that range. */
int frame_reader_init(struct frame_reader *r, uint32_t max_body);

/* Free the buffer. r may be NULL. */
void frame_reader_release(struct frame_reader *r);

/* Change the maximum, e.g. from FRAME_MAX_HANDSHAKE to FRAME_MAX_SESSION
 * when the handshake completes. Applies to every frame whose length has not
 * been read yet. If a frame whose length was already accepted is in progress
 * and exceeds the new maximum, the reader fails with CORDON_E_LIMIT (sticky).
 * Returns 0, -EINVAL for a maximum outside 1..FRAME_MAX_HARD, or
 * CORDON_E_LIMIT. */
int frame_reader_set_max(struct frame_reader *r, uint32_t max_body);

/* Feed bytes. Consumes bytes of data up to and including the end of at most
 * one frame and stores how many in *out_used (also on error: the bytes
 * examined). Returns:
 *   1  a frame is complete: *out_body / *out_len point at its body, which
 *      stays owned by r and valid until the next frame_reader_feed or
 *      frame_reader_release;
 *   0  all of data was consumed and no frame is complete yet;
 *   <0 an error (sticky).
 * Callers loop until the chunk is used up, so that they can change the
 * maximum between two frames of the same chunk:
 *
 *   while (len > 0) {
 *     rc = frame_reader_feed(&r, p, len, &used, &body, &body_len);
 *     if (rc < 0) close the connection;
 *     p += used; len -= used;
 *     if (rc == 1) handle(body, body_len);
 *   }
 */
int frame_reader_feed(struct frame_reader *r, const uint8_t *data, size_t len, size_t *out_used,
                      const uint8_t **out_body, size_t *out_len);

/* 1 if r holds part of a frame (some header or body bytes), 0 when it is
 * between frames. For "half-sent frame" deadlines. */
int frame_reader_in_frame(const struct frame_reader *r);

/* Write the 4-byte header for a body of body_len bytes. Returns 0,
 * CORDON_E_PROTOCOL for body_len 0, CORDON_E_LIMIT above max_body. */
int frame_encode_header(size_t body_len, uint32_t max_body, uint8_t out_hdr[FRAME_HEADER_LEN]);

/* Write header and body into out (out_cap bytes). out may not overlap body.
 * Returns 0 with *out_len = 4 + body_len, or the errors of
 * frame_encode_header, or -ENOBUFS if out is too small. */
int frame_encode(const uint8_t *body, size_t body_len, uint32_t max_body, uint8_t *out,
                 size_t out_cap, size_t *out_len);

#endif
