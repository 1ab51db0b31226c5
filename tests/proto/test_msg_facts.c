/* hello.facts: the agent's probe results, a msgpack map of token keys to
 * name-format strings, decoded as strictly as every other field (a key
 * once, caps on the count, the key and the value). */
#include <criterion/criterion.h>
#include <errno.h>
#include <msgpack.h>
#include <stdio.h>
#include <string.h>

#include "proto/msg.h"

static struct msg hello(struct msg_fact *facts, size_t n) {
  struct msg m;
  memset(&m, 0, sizeof(m));
  m.type = MSG_HELLO;
  m.hello.proto_min = 1;
  m.hello.proto_max = 1;
  m.hello.agent_version = "0.1.0";
  m.hello.platform = "linux";
  m.hello.best_level = MSG_LEVEL_ISOLATED;
  m.hello.max_jobs = 2;
  m.hello.facts = facts;
  m.hello.n_facts = n;
  return m;
}

Test(msg_facts, round_trip_keeps_every_fact_in_order) {
  struct msg_fact f[] = {{"bwrap_version", "bubblewrap 0.8.0"},
                         {"cgroup_controllers", "cpu memory pids"},
                         {"landlock_abi", "7"},
                         {"empty", ""}};
  struct msg m = hello(f, 4);
  uint8_t *buf;
  size_t len;
  cr_assert_eq(msg_encode_alloc(&m, &buf, &len, NULL), 0);
  struct msg d;
  struct cordon_diag diag = {{0}};
  cr_assert_eq(msg_decode(buf, len, &d, &diag), 0, "%s", diag.msg);
  cr_assert_eq(d.hello.n_facts, 4);
  for (size_t i = 0; i < 4; i++) {
    cr_expect_str_eq(d.hello.facts[i].key, f[i].key);
    cr_expect_str_eq(d.hello.facts[i].value, f[i].value);
  }
  msg_release(&d);
  free(buf);
}

Test(msg_facts, absent_facts_decode_as_null_and_an_empty_map_as_zero) {
  struct msg m = hello(NULL, 0);
  uint8_t buf[512];
  size_t len;
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), 0);
  cr_assert_null(memmem(buf, len, "facts", 5), "an absent optional key is omitted");
  struct msg d;
  cr_assert_eq(msg_decode(buf, len, &d, NULL), 0);
  cr_assert_null(d.hello.facts);
  msg_release(&d);
  struct msg_fact none[1];
  m = hello(none, 0);
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), 0);
  cr_assert_eq(msg_decode(buf, len, &d, NULL), 0);
  cr_assert_not_null(d.hello.facts);
  cr_assert_eq(d.hello.n_facts, 0);
  msg_release(&d);
}

/* A hello whose facts value is written by fill (after the other keys). */
static int decode_raw(void (*fill)(msgpack_packer *), struct cordon_diag *diag) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 9);
#define S(x) (msgpack_pack_str(&pk, strlen(x)), msgpack_pack_str_body(&pk, x, strlen(x)))
  S("t"), S("hello");
  S("proto_min"), msgpack_pack_uint8(&pk, 1);
  S("proto_max"), msgpack_pack_uint8(&pk, 1);
  S("agent_version"), S("0.1.0");
  S("platform"), S("linux");
  S("best_level"), S("isolated");
  S("downgrade_reason"), msgpack_pack_nil(&pk);
  S("facts");
  fill(&pk);
  S("max_jobs"), msgpack_pack_uint8(&pk, 1);
#undef S
  struct msg d;
  int rc = msg_decode((const uint8_t *)sb.data, sb.size, &d, diag);
  if (rc == 0)
    msg_release(&d);
  msgpack_sbuffer_destroy(&sb);
  return rc;
}

static void str(msgpack_packer *pk, const char *s) {
  msgpack_pack_str(pk, strlen(s));
  msgpack_pack_str_body(pk, s, strlen(s));
}

static void fill_ok(msgpack_packer *pk) {
  msgpack_pack_map(pk, 1);
  str(pk, "os"), str(pk, "Linux 6.1");
}
static void fill_dup(msgpack_packer *pk) {
  msgpack_pack_map(pk, 2);
  str(pk, "os"), str(pk, "Linux 6.1");
  str(pk, "os"), str(pk, "Linux 6.2");
}
static void fill_not_map(msgpack_packer *pk) {
  msgpack_pack_array(pk, 0);
}
static void fill_int_value(msgpack_packer *pk) {
  msgpack_pack_map(pk, 1);
  str(pk, "landlock_abi"), msgpack_pack_uint8(pk, 7);
}
static void fill_bad_key(msgpack_packer *pk) {
  msgpack_pack_map(pk, 1);
  str(pk, "Bwrap Version"), str(pk, "x");
}
static void fill_control_value(msgpack_packer *pk) {
  msgpack_pack_map(pk, 1);
  str(pk, "os"), str(pk, "Linux\x1b[2J");
}
static void fill_long_key(msgpack_packer *pk) {
  char k[MSG_FACT_KEY_MAX + 2];
  memset(k, 'a', sizeof(k) - 1);
  k[sizeof(k) - 1] = '\0';
  msgpack_pack_map(pk, 1);
  str(pk, k), str(pk, "x");
}
static void fill_long_value(msgpack_packer *pk) {
  char v[MSG_FACT_VALUE_MAX + 2];
  memset(v, 'v', sizeof(v) - 1);
  v[sizeof(v) - 1] = '\0';
  msgpack_pack_map(pk, 1);
  str(pk, "os"), str(pk, v);
}
static void fill_too_many(msgpack_packer *pk) {
  msgpack_pack_map(pk, MSG_FACTS_MAX + 1);
  for (int i = 0; i <= MSG_FACTS_MAX; i++) {
    char k[16];
    snprintf(k, sizeof(k), "k%d", i);
    str(pk, k), str(pk, "v");
  }
}

Test(msg_facts, strict_decoding) {
  struct cordon_diag d = {{0}};
  cr_assert_eq(decode_raw(fill_ok, &d), 0, "%s", d.msg);
  struct {
    void (*fill)(msgpack_packer *);
    int want;
  } cases[] = {
      {fill_dup, CORDON_E_PROTOCOL},           {fill_not_map, CORDON_E_PROTOCOL},
      {fill_int_value, CORDON_E_PROTOCOL},     {fill_bad_key, CORDON_E_PROTOCOL},
      {fill_control_value, CORDON_E_PROTOCOL}, {fill_long_key, CORDON_E_LIMIT},
      {fill_long_value, CORDON_E_LIMIT},       {fill_too_many, CORDON_E_LIMIT},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    memset(&d, 0, sizeof(d));
    cr_expect_eq(decode_raw(cases[i].fill, &d), cases[i].want, "case %zu: %s", i, d.msg);
    cr_expect(strstr(d.msg, "facts"), "case %zu names the field: %s", i, d.msg);
  }
}

Test(msg_facts, encode_refuses_what_decode_would) {
  struct msg_fact dup[] = {{"os", "a"}, {"os", "b"}};
  struct msg m = hello(dup, 2);
  uint8_t buf[1024];
  size_t len;
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), CORDON_E_PROTOCOL);
  struct msg_fact bad[] = {{"Not-A-Token", "a"}};
  m = hello(bad, 1);
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), CORDON_E_PROTOCOL);
  m = hello(NULL, 3);
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), -EINVAL);
}
