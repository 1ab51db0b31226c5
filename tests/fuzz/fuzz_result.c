/* libFuzzer target for a result's output in its JSON form (core/result.c):
 * the encoder job_result_to_json and the decoder job_result_output_decode.
 *
 * The input is used twice. As the JSON of a result (what a client reads
 * from the admin API): job_result_output_decode must never crash, never
 * return more than its max, and what it reads must encode and decode back
 * to the same bytes. As a job's raw output on both streams (any bytes): the
 * JSON made of it must hold each stream in at most RESULT_STREAM_JSON_MAX
 * characters, be no longer than RESULT_JSON_MAX allows, and decode to the
 * same bytes. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/result.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      abort();                                                                                     \
  } while (0)

/* The JSON of a result whose stdout and stderr are the bytes (borrowed). */
static json_t *encode(const uint8_t *bytes, size_t len) {
  struct job_result r;
  job_result_init(&r);
  r.out = (struct result_buf){(uint8_t *)bytes, len, false};
  r.err = (struct result_buf){(uint8_t *)bytes, len, false};
  json_t *j = job_result_to_json(&r);
  CHECK(j);
  return j;
}

static void check_round_trip(json_t *j, const uint8_t *bytes, size_t len) {
  static const char *const names[] = {"stdout", "stderr"};
  for (int i = 0; i < 2; i++) {
    uint8_t *got;
    size_t n;
    CHECK(job_result_output_decode(j, names[i], RESULT_OUTPUT_MAX, &got, &n) == 0);
    CHECK(n == len && (len == 0 || memcmp(got, bytes, len) == 0));
    free(got);
    json_t *v = json_object_get(j, names[i]);
    if (json_is_null(v)) {
      char key[32];
      snprintf(key, sizeof(key), "%s_base64", names[i]);
      v = json_object_get(j, key);
    }
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    CHECK(t && strlen(t) <= RESULT_STREAM_JSON_MAX(len));
    free(t);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > RESULT_OUTPUT_MAX)
    return 0;
  /* as a result's JSON */
  json_t *in = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
  if (in) {
    static const size_t maxes[] = {0, 3, 64, RESULT_OUTPUT_MAX};
    for (size_t m = 0; m < sizeof(maxes) / sizeof(maxes[0]); m++) {
      uint8_t *got = NULL;
      size_t n = 0;
      int r = job_result_output_decode(in, "stdout", maxes[m], &got, &n);
      CHECK(r == 0 || r == -EINVAL || r == -E2BIG || r == -ENODATA || r == -ENOMEM);
      if (r == 0) {
        CHECK(got && n <= maxes[m]);
        json_t *again = encode(got, n);
        check_round_trip(again, got, n);
        json_decref(again);
      }
      free(got);
    }
    json_decref(in);
  }
  /* as a job's output */
  json_t *j = encode(data, size);
  char *text = json_dumps(j, JSON_COMPACT);
  CHECK(text && strlen(text) <= 2 * RESULT_STREAM_JSON_MAX(size) + RESULT_JSON_ENVELOPE_MAX);
  free(text);
  check_round_trip(j, data, size);
  json_decref(j);
  return 0;
}
