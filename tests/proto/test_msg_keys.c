/* The keys message's optional `retired` list: round trip, absent means
 * NULL, over 16 keys is a limit, an element that is not a 32-byte bin is a
 * protocol error; the signed bytes do not cover it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "proto/msg.h"

static struct msg keys_msg(uint8_t (*retired)[MSG_KEY_LEN], size_t n) {
  struct msg m;
  memset(&m, 0, sizeof(m));
  m.type = MSG_KEYS;
  m.keys.serial = 7;
  memset(m.keys.ticket_key, 1, MSG_KEY_LEN);
  memset(m.keys.publisher_key, 2, MSG_KEY_LEN);
  memset(m.keys.ticket_sig, 3, MSG_SIG_LEN);
  memset(m.keys.publisher_sig, 4, MSG_SIG_LEN);
  m.keys.retired = retired;
  m.keys.n_retired = n;
  return m;
}

Test(msg_keys, retired_round_trips_and_is_optional) {
  uint8_t r[2][MSG_KEY_LEN];
  memset(r[0], 0xaa, MSG_KEY_LEN);
  memset(r[1], 0xbb, MSG_KEY_LEN);
  struct msg m = keys_msg(r, 2);
  uint8_t buf[1024];
  size_t len;
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), 0);
  struct msg d;
  cr_assert_eq(msg_decode(buf, len, &d, NULL), 0);
  cr_assert_eq(d.keys.n_retired, 2);
  cr_assert_eq(memcmp(d.keys.retired, r, sizeof(r)), 0);
  cr_assert_eq(d.keys.serial, 7);
  msg_release(&d);

  m = keys_msg(NULL, 0);
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), 0);
  cr_assert_null(memmem(buf, len, "retired", 7), "absent: omitted");
  cr_assert_eq(msg_decode(buf, len, &d, NULL), 0);
  cr_assert_null(d.keys.retired);
  msg_release(&d);

  /* the signatures cover serial and keys only */
  uint8_t a[MSG_KEYS_SIGNED_LEN], b[MSG_KEYS_SIGNED_LEN];
  struct msg with = keys_msg(r, 2), without = keys_msg(NULL, 0);
  msg_keys_signed_data(&with.keys, a);
  msg_keys_signed_data(&without.keys, b);
  cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
}

Test(msg_keys, retired_caps) {
  static uint8_t many[MSG_PUBLISHER_KEYS_MAX + 1][MSG_KEY_LEN];
  struct msg m = keys_msg(many, MSG_PUBLISHER_KEYS_MAX + 1);
  uint8_t buf[2048];
  size_t len;
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), CORDON_E_LIMIT);
  m = keys_msg(NULL, 3);
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), -EINVAL);
  /* an element of the wrong size, made by hand from a good encoding */
  m = keys_msg(many, 1);
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), 0);
  uint8_t *at = memmem(buf, len, "retired", 7);
  cr_assert(at);
  /* "retired" 91 c4 20 <32 bytes>: make the bin 31 bytes long, drop one */
  cr_assert_eq(at[7], 0x91);
  cr_assert_eq(at[8], 0xc4);
  at[9] = 31;
  struct msg d;
  struct cordon_diag diag = {{0}};
  cr_assert_eq(msg_decode(buf, len - 1, &d, &diag), CORDON_E_PROTOCOL, "%s", diag.msg);
  cr_assert(strstr(diag.msg, "retired"), "%s", diag.msg);
}
