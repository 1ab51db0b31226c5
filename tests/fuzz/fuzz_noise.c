/* libFuzzer target for reading Noise handshake messages and transport
 * records (proto/noise.c).
 *
 * Input: byte 0 picks what the rest is fed to:
 *   0  message 1, read by a responder (which then writes message 2)
 *   1  message 2, read by an initiator that sent a real message 1
 *   2  message 3, read by a responder after a real messages 1 and 2
 *   3  a transport record, read by a fresh session
 * Keys are fixed so that runs are reproducible. Anything may be rejected;
 * nothing may crash, leak or read out of bounds, and a failed object must
 * stay failed. */
#include "core/error.h"
#include "proto/noise.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      abort();                                                                                     \
  } while (0)

static const uint8_t i_static[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                     12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                     23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
static const uint8_t r_static[32] = {32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                     16, 15, 14, 13, 12, 11, 10, 9,  8,  7,  6,  5,  4,  3,  2,  1};
static const uint8_t i_eph[32] = {0x11, [31] = 0x42};
static const uint8_t r_eph[32] = {0x22, [31] = 0x24};

static void pair(struct noise_handshake **hi, struct noise_handshake **hr) {
  uint8_t pro[NOISE_PROLOGUE_LEN];
  size_t n = 0;

  CHECK(noise_prologue_build(NOISE_WIRE_VERSION, NOISE_MODE_SESSION, pro, sizeof(pro), &n) == 0);
  CHECK(noise_handshake_new(NOISE_INITIATOR, i_static, pro, n, hi) == 0);
  CHECK(noise_handshake_new(NOISE_RESPONDER, r_static, pro, n, hr) == 0);
  CHECK(noise_handshake_set_ephemeral(*hi, i_eph) == 0);
  CHECK(noise_handshake_set_ephemeral(*hr, r_eph) == 0);
}

/* Pass a message from one side to the other. */
static void relay(struct noise_handshake *from, struct noise_handshake *to) {
  uint8_t buf[256], pl[256];
  size_t n = 0, m = 0;

  CHECK(noise_handshake_write_message(from, NULL, 0, buf, sizeof(buf), &n) == 0);
  CHECK(noise_handshake_read_message(to, buf, n, pl, sizeof(pl), &m) == 0);
}

static void read_fuzzed(struct noise_handshake *hs, const uint8_t *msg, size_t len) {
  static uint8_t pl[NOISE_MAX_MESSAGE + 1];
  uint8_t out[256];
  size_t n = 0;
  int rc;

  rc = noise_handshake_read_message(hs, msg, len, pl, sizeof(pl), &n);
  if (rc < 0) {
    CHECK(noise_handshake_next(hs) == NOISE_ACTION_FAILED);
    CHECK(noise_handshake_write_message(hs, NULL, 0, out, sizeof(out), &n) == rc);
    return;
  }
  CHECK(n <= len);
  /* Accepted: carry on as far as the handshake goes. */
  if (noise_handshake_next(hs) == NOISE_ACTION_WRITE)
    (void)noise_handshake_write_message(hs, NULL, 0, out, sizeof(out), &n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct noise_handshake *hi = NULL, *hr = NULL;
  struct noise_session *si = NULL, *sr = NULL;

  if (size < 1)
    return 0;
  pair(&hi, &hr);
  switch (data[0] & 3) {
  case 0:
    read_fuzzed(hr, data + 1, size - 1);
    break;
  case 1: {
    uint8_t buf[256];
    size_t n = 0;
    CHECK(noise_handshake_write_message(hi, NULL, 0, buf, sizeof(buf), &n) == 0);
    read_fuzzed(hi, data + 1, size - 1);
    break;
  }
  case 2:
    relay(hi, hr);
    relay(hr, hi);
    {
      uint8_t buf[256];
      size_t n = 0;
      CHECK(noise_handshake_write_message(hi, NULL, 0, buf, sizeof(buf), &n) == 0);
    }
    read_fuzzed(hr, data + 1, size - 1);
    break;
  default: {
    static uint8_t out[NOISE_MAX_RECORD];
    size_t n = 0;
    int rc;
    relay(hi, hr);
    relay(hr, hi);
    relay(hi, hr);
    CHECK(noise_handshake_split(&hi, &si) == 0);
    CHECK(noise_handshake_split(&hr, &sr) == 0);
    rc = noise_session_decrypt(sr, data + 1, size - 1, out, sizeof(out), &n);
    if (rc < 0)
      CHECK(noise_session_error(sr) == rc);
    break;
  }
  }
  noise_session_free(si);
  noise_session_free(sr);
  noise_handshake_free(hi);
  noise_handshake_free(hr);
  return 0;
}
