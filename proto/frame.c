#include "proto/frame.h"

#include "core/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The first allocation for a body, and the capacity above which the buffer
 * is given back once its frame has been handed out. */
#define FRAME_BUF_MIN 4096u
#define FRAME_BUF_KEEP (64u << 10)

int frame_reader_init(struct frame_reader *r, uint32_t max_body) {
  if (!r || max_body == 0 || max_body > FRAME_MAX_HARD)
    return -EINVAL;
  memset(r, 0, sizeof(*r));
  r->max_body = max_body;
  return 0;
}

void frame_reader_release(struct frame_reader *r) {
  if (!r)
    return;
  free(r->body);
  memset(r, 0, sizeof(*r));
}

int frame_reader_set_max(struct frame_reader *r, uint32_t max_body) {
  if (!r || max_body == 0 || max_body > FRAME_MAX_HARD)
    return -EINVAL;
  r->max_body = max_body;
  if (!r->err && !r->delivered && r->hdr_len == FRAME_HEADER_LEN && r->want > max_body)
    r->err = CORDON_E_LIMIT;
  return r->err;
}

int frame_reader_in_frame(const struct frame_reader *r) {
  return r && !r->delivered && r->hdr_len > 0;
}

/* Forget the frame just handed out; give back a large buffer. */
static void reader_next_frame(struct frame_reader *r) {
  r->delivered = 0;
  r->hdr_len = 0;
  r->want = 0;
  r->body_len = 0;
  if (r->body_cap > FRAME_BUF_KEEP) {
    free(r->body);
    r->body = NULL;
    r->body_cap = 0;
  }
}

/* Make room for `need` body bytes (need <= r->want). */
static int reader_reserve(struct frame_reader *r, size_t need) {
  size_t cap;
  uint8_t *p;

  if (need <= r->body_cap)
    return 0;
  cap = r->body_cap ? r->body_cap : FRAME_BUF_MIN;
  while (cap < need)
    cap *= 2;
  if (cap > r->want)
    cap = r->want;
  p = realloc(r->body, cap);
  if (!p)
    return -ENOMEM;
  r->body = p;
  r->body_cap = cap;
  return 0;
}

int frame_reader_feed(struct frame_reader *r, const uint8_t *data, size_t len, size_t *out_used,
                      const uint8_t **out_body, size_t *out_len) {
  size_t used = 0;
  size_t n;
  int rc;

  if (!r || (!data && len > 0) || !out_used || !out_body || !out_len)
    return -EINVAL;
  *out_used = 0;
  if (r->err)
    return r->err;
  if (r->delivered)
    reader_next_frame(r);

  while (r->hdr_len < FRAME_HEADER_LEN && used < len)
    r->hdr[r->hdr_len++] = data[used++];
  if (r->hdr_len < FRAME_HEADER_LEN) {
    *out_used = used;
    return 0;
  }
  if (r->body_len == 0) {
    /* The length is complete: check it before anything is allocated. */
    uint32_t want = (uint32_t)r->hdr[0] << 24 | (uint32_t)r->hdr[1] << 16 |
                    (uint32_t)r->hdr[2] << 8 | (uint32_t)r->hdr[3];
    if (want == 0) {
      r->err = CORDON_E_PROTOCOL;
      goto out_err;
    }
    if (want > r->max_body) {
      r->err = CORDON_E_LIMIT;
      goto out_err;
    }
    r->want = want;
  }

  n = len - used;
  if (n > r->want - r->body_len)
    n = r->want - r->body_len;
  if (n > 0) {
    rc = reader_reserve(r, r->body_len + n);
    if (rc < 0) {
      r->err = rc;
      goto out_err;
    }
    memcpy(r->body + r->body_len, data + used, n);
    r->body_len += n;
    used += n;
  }
  *out_used = used;
  if (r->body_len < r->want)
    return 0;
  r->delivered = 1;
  *out_body = r->body;
  *out_len = r->body_len;
  return 1;

out_err:
  *out_used = used;
  return r->err;
}

int frame_encode_header(size_t body_len, uint32_t max_body, uint8_t out_hdr[FRAME_HEADER_LEN]) {
  if (!out_hdr)
    return -EINVAL;
  if (body_len == 0)
    return CORDON_E_PROTOCOL;
  if (body_len > max_body || body_len > FRAME_MAX_HARD)
    return CORDON_E_LIMIT;
  out_hdr[0] = (uint8_t)(body_len >> 24);
  out_hdr[1] = (uint8_t)(body_len >> 16);
  out_hdr[2] = (uint8_t)(body_len >> 8);
  out_hdr[3] = (uint8_t)body_len;
  return 0;
}

int frame_encode(const uint8_t *body, size_t body_len, uint32_t max_body, uint8_t *out,
                 size_t out_cap, size_t *out_len) {
  uint8_t hdr[FRAME_HEADER_LEN];
  int rc;

  if (!body || !out || !out_len)
    return -EINVAL;
  rc = frame_encode_header(body_len, max_body, hdr);
  if (rc < 0)
    return rc;
  if (out_cap < FRAME_HEADER_LEN || out_cap - FRAME_HEADER_LEN < body_len)
    return -ENOBUFS;
  memcpy(out, hdr, FRAME_HEADER_LEN);
  memcpy(out + FRAME_HEADER_LEN, body, body_len);
  *out_len = FRAME_HEADER_LEN + body_len;
  return 0;
}
