/* Tests for proto/result_msg.c: a received result becomes one the JSON
 * form always takes. */
#include "proto/result_msg.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The wire allows an error message of MSG_TEXT_MAX bytes of UTF-8; the
 * result keeps 511. Cut inside a character, it would be invalid UTF-8, its
 * JSON could not be made, and the server could never record the result:
 * it ends at the last whole character instead. */
Test(result_msg, an_error_message_cut_inside_a_character_ends_at_the_last_whole_one) {
  char text[MSG_TEXT_MAX + 1];
  /* "é" (2 bytes) 512 times: byte 511 is the first half of one */
  for (size_t i = 0; i < MSG_TEXT_MAX; i += 2)
    memcpy(text + i, "\xc3\xa9", 2);
  text[MSG_TEXT_MAX] = '\0';
  struct msg_result m;
  memset(&m, 0, sizeof(m));
  m.has_exit_code = true;
  m.has_error = true;
  m.error.code = "spawn_failed";
  m.error.message = text;
  struct job_result r;
  job_result_init(&r);
  cr_assert_eq(result_from_msg(&m, &r), 0);
  size_t n = strlen(r.error_message);
  cr_assert_eq(n, 510, "510 bytes: 255 whole characters, not %zu", n);
  cr_assert(utf8_valid((const uint8_t *)r.error_message, n));
  json_t *j = job_result_to_json(&r);
  cr_assert_not_null(j, "the JSON takes it");
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                   r.error_message);
  json_decref(j);
  job_result_release(&r);
}

Test(result_msg, output_of_any_bytes_comes_through_the_message_unchanged) {
  static const uint8_t out[] = {0x01, 0x00, 0xff, '"', '\\', 0x1b};
  struct job_result r;
  job_result_init(&r);
  r.ran = r.exited = true;
  r.out.data = malloc(sizeof(out));
  memcpy(r.out.data, out, sizeof(out));
  r.out.len = sizeof(out);
  r.err.data = malloc(1);
  uint8_t id[CORDON_ID_LEN] = {1}, dev[CORDON_ID_LEN] = {2};
  struct msg m;
  result_to_msg(&r, id, dev, &m);
  cr_assert_eq(m.result.stdout_buf.len, sizeof(out));
  struct job_result back;
  job_result_init(&back);
  cr_assert_eq(result_from_msg(&m.result, &back), 0);
  cr_assert_eq(back.out.len, sizeof(out));
  cr_assert_arr_eq(back.out.data, out, sizeof(out));
  job_result_release(&back);
  job_result_release(&r);
}
