/* welcome.servers (version 3): the cluster's addresses, an array of at
 * most 16 "host:port" strings of at most 255 bytes, each a DNS name, an
 * IPv4 address or a bracketed IPv6 address and a port 1..65535, decoded as
 * strictly as every other field; and msg_addr_parse(), which the server's
 * --advertise and the agent's servers.json use too. */
#include <criterion/criterion.h>
#include <errno.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"

static struct msg welcome(uint16_t version, char **servers, size_t n) {
  struct msg m;
  memset(&m, 0, sizeof(m));
  m.type = MSG_WELCOME;
  m.welcome.version = version;
  m.welcome.time_ms = 1795000000123ull;
  memset(m.welcome.server_id, 0x5e, CORDON_ID_LEN);
  memset(m.welcome.session_id, 0x55, CORDON_ID_LEN);
  m.welcome.ping_ms = 15000;
  m.welcome.servers = servers;
  m.welcome.n_servers = n;
  return m;
}

Test(msg_servers, round_trip_keeps_every_address_in_order) {
  char *list[] = {"a.example.org:7443", "10.0.0.2:7443", "[2001:db8::2]:65535", "[::1]:1",
                  "[::ffff:192.0.2.1]:80"};
  struct msg m = welcome(3, list, 5);
  uint8_t *buf;
  size_t len;
  struct cordon_diag diag = {{0}};
  cr_assert_eq(msg_encode_alloc(&m, &buf, &len, &diag), 0, "%s", diag.msg);
  struct msg d;
  cr_assert_eq(msg_decode(buf, len, &d, &diag), 0, "%s", diag.msg);
  cr_assert_eq(d.welcome.n_servers, 5);
  for (size_t i = 0; i < 5; i++)
    cr_expect_str_eq(d.welcome.servers[i], list[i]);
  msg_release(&d);
  free(buf);
}

Test(msg_servers, absent_is_omitted_and_null_an_empty_list_is_zero) {
  struct msg m = welcome(3, NULL, 0);
  uint8_t buf[512];
  size_t len;
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), 0);
  cr_assert_null(memmem(buf, len, "servers", 7), "an absent optional key is omitted");
  struct msg d;
  cr_assert_eq(msg_decode(buf, len, &d, NULL), 0);
  cr_assert_null(d.welcome.servers);
  msg_release(&d);
  char *none[1];
  m = welcome(3, none, 0);
  cr_assert_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), 0);
  cr_assert_eq(msg_decode(buf, len, &d, NULL), 0);
  cr_assert_not_null(d.welcome.servers);
  cr_assert_eq(d.welcome.n_servers, 0);
  msg_release(&d);
}

/* A version-3 welcome whose servers value is written by fill. */
static int decode_raw(uint16_t version, void (*fill)(msgpack_packer *), struct cordon_diag *diag) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 7);
  uint8_t id[CORDON_ID_LEN] = {0};
#define S(x) (msgpack_pack_str(&pk, strlen(x)), msgpack_pack_str_body(&pk, x, strlen(x)))
  S("t"), S("welcome");
  S("version"), msgpack_pack_uint16(&pk, version);
  S("time_ms"), msgpack_pack_uint64(&pk, 1);
  S("server_id"), msgpack_pack_bin(&pk, CORDON_ID_LEN), msgpack_pack_bin_body(&pk, id, sizeof(id));
  S("session_id"), msgpack_pack_bin(&pk, CORDON_ID_LEN), msgpack_pack_bin_body(&pk, id, sizeof(id));
  S("ping_ms"), msgpack_pack_uint32(&pk, 15000);
  S("servers");
#undef S
  fill(&pk);
  struct msg d;
  int r = msg_decode((const uint8_t *)sb.data, sb.size, &d, diag);
  if (r == 0)
    msg_release(&d);
  msgpack_sbuffer_destroy(&sb);
  return r;
}

static void pack_strs(msgpack_packer *pk, size_t n, const char *each) {
  msgpack_pack_array(pk, n);
  for (size_t i = 0; i < n; i++) {
    msgpack_pack_str(pk, strlen(each));
    msgpack_pack_str_body(pk, each, strlen(each));
  }
}

static void sixteen(msgpack_packer *pk) {
  pack_strs(pk, 16, "s.example:7443");
}
static void seventeen(msgpack_packer *pk) {
  pack_strs(pk, 17, "s.example:7443");
}
static char long_addr[300];
/* "aaa…a.example:7443" of exactly len bytes: labels of 63 bytes */
static void make_long(size_t len) {
  const char *tail = "example:7443";
  size_t body = len - strlen(tail);
  memset(long_addr, 'a', body);
  for (size_t i = 63; i < body; i += 64)
    long_addr[i] = '.';
  long_addr[body - 1] = '.';
  snprintf(long_addr + body, sizeof(long_addr) - body, "%s", tail);
}
static void one_long(msgpack_packer *pk) {
  pack_strs(pk, 1, long_addr);
}
static const char *one_value;
static void one(msgpack_packer *pk) {
  pack_strs(pk, 1, one_value);
}
static void not_an_array(msgpack_packer *pk) {
  msgpack_pack_str(pk, 14);
  msgpack_pack_str_body(pk, "s.example:7443", 14);
}
static void an_int_inside(msgpack_packer *pk) {
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint16(pk, 7443);
}
static void nil(msgpack_packer *pk) {
  msgpack_pack_nil(pk);
}

Test(msg_servers, sixteen_entries_pass_seventeen_are_over_the_cap) {
  struct cordon_diag diag = {{0}};
  cr_assert_eq(decode_raw(3, sixteen, &diag), 0, "%s", diag.msg);
  cr_assert_eq(decode_raw(3, seventeen, &diag), CORDON_E_LIMIT);
  cr_expect(strstr(diag.msg, "welcome.servers"), "names the field: %s", diag.msg);
}

Test(msg_servers, an_entry_of_255_bytes_passes_256_is_over_the_cap) {
  struct cordon_diag diag = {{0}};
  make_long(255);
  cr_assert_eq(strlen(long_addr), 255);
  cr_assert_eq(decode_raw(3, one_long, &diag), 0, "%s", diag.msg);
  make_long(256);
  cr_assert_eq(strlen(long_addr), 256);
  cr_assert_eq(decode_raw(3, one_long, &diag), CORDON_E_LIMIT);
  cr_expect(strstr(diag.msg, "servers"), "%s", diag.msg);
}

Test(msg_servers, a_wrong_shape_is_a_protocol_error) {
  struct cordon_diag diag = {{0}};
  cr_expect_eq(decode_raw(3, not_an_array, &diag), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_raw(3, an_int_inside, &diag), CORDON_E_PROTOCOL);
  cr_expect_eq(decode_raw(3, nil, &diag), CORDON_E_PROTOCOL, "optional, never nil");
}

Test(msg_servers, needs_version_3) {
  struct cordon_diag diag = {{0}};
  cr_assert_eq(decode_raw(2, sixteen, &diag), CORDON_E_PROTOCOL);
  cr_expect(strstr(diag.msg, "version 3"), "%s", diag.msg);
  char *list[] = {"a.example:1"};
  struct msg m = welcome(2, list, 1);
  uint8_t buf[512];
  size_t len;
  cr_expect_eq(msg_encode(&m, buf, sizeof(buf), &len, NULL), CORDON_E_PROTOCOL,
               "the encoder refuses what the decoder would");
}

/* Entries the decoder refuses, each alone in the list. */
static const char *const bad[] = {
    "",                      /* empty */
    "a.example",             /* no port */
    "a.example:",            /* empty port */
    "a.example:0",           /* port 0 */
    "a.example:65536",       /* above 65535 */
    "a.example:07443",       /* a leading zero */
    "a.example:74a3",        /* not decimal */
    "a.example:+7443",       /* a sign */
    "a.example:123456",      /* six digits */
    ":7443",                 /* no host */
    "a..example:7443",       /* an empty label */
    ".a.example:7443",       /* a leading dot */
    "a.example.:7443",       /* a trailing dot */
    "-a.example:7443",       /* a label starting with '-' */
    "a-.example:7443",       /* a label ending with '-' */
    "a_b.example:7443",      /* '_' */
    "a b.example:7443",      /* a space */
    "a.example:7443\n",      /* a newline */
    "caf\xc3\xa9.example:1", /* not ASCII */
    "1.2.3:7443",            /* numeric, not a quad */
    "256.1.1.1:7443",        /* a part above 255 */
    "01.2.3.4:7443",         /* a leading zero in a part */
    "1.2.3.4.5:7443",        /* five parts */
    "::1:7443",              /* IPv6 without brackets */
    "[::1]",                 /* bracketed, no port */
    "[::1:7443",             /* an unclosed bracket */
    "[]:7443",               /* empty brackets */
    "[1:2:3:4:5:6:7]:7443",  /* seven groups, no :: */
    "[1:2:3:4:5:6:7:8:9]:1", /* nine groups */
    "[1::2::3]:7443",        /* two :: */
    "[12345::1]:7443",       /* a group of 5 digits */
    "[fe80::1%eth0]:7443",   /* a zone index */
    "[::1:]:7443",           /* a trailing ':' */
    "[:1::2]:7443",          /* a leading single ':' */
    "[g::1]:7443",           /* not hex */
    "[a.example]:7443",      /* a name in brackets */
    "[10.0.0.1]:7443",       /* IPv4 in brackets */
    "http://a.example:7443", /* a URL */
    "a.example:7443/path",   /* a path */
    "user@a.example:7443",   /* userinfo */
};

Test(msg_servers, junk_entries_are_a_protocol_error_naming_the_field) {
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct cordon_diag diag = {{0}};
    one_value = bad[i];
    cr_expect_eq(decode_raw(3, one, &diag), CORDON_E_PROTOCOL, "'%s' was not refused", bad[i]);
    cr_expect(strstr(diag.msg, "welcome.servers"), "'%s': %s", bad[i], diag.msg);
    cr_expect_eq(msg_addr_parse(bad[i], strlen(bad[i]), NULL, NULL), CORDON_E_PROTOCOL, "'%s'",
                 bad[i]);
  }
}

Test(msg_servers, a_nul_inside_an_entry_is_refused) {
  struct cordon_diag diag = {{0}};
  static const char with_nul[] = "a.example:7443\0x";
  cr_expect_eq(msg_addr_parse(with_nul, sizeof(with_nul) - 1, NULL, NULL), CORDON_E_PROTOCOL);
  one_value = "a.example:7443";
  cr_expect_eq(decode_raw(3, one, &diag), 0, "%s", diag.msg);
}

Test(msg_servers, addr_parse_gives_the_host_without_brackets_and_the_port) {
  static const struct {
    const char *in, *host;
    uint16_t port;
  } good[] = {
      {"a.example:7443", "a.example", 7443},
      {"A-1.Example.ORG:1", "A-1.Example.ORG", 1},
      {"localhost:65535", "localhost", 65535},
      {"127.0.0.1:7443", "127.0.0.1", 7443},
      {"0.0.0.0:9", "0.0.0.0", 9},
      {"[::1]:7443", "::1", 7443},
      {"[::]:7443", "::", 7443},
      {"[1:2:3:4:5:6:7:8]:7443", "1:2:3:4:5:6:7:8", 7443},
      {"[2001:DB8::a:b]:7443", "2001:DB8::a:b", 7443},
      {"[1::]:7443", "1::", 7443},
      {"[::ffff:10.0.0.1]:7443", "::ffff:10.0.0.1", 7443},
      {"[1:2:3:4:5:6:1.2.3.4]:7443", "1:2:3:4:5:6:1.2.3.4", 7443},
      {"1a.example:7443", "1a.example", 7443},
  };
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    char host[MSG_ADDR_MAX + 1];
    uint16_t port = 0;
    cr_expect_eq(msg_addr_parse(good[i].in, strlen(good[i].in), host, &port), 0, "'%s'",
                 good[i].in);
    cr_expect_str_eq(host, good[i].host);
    cr_expect_eq(port, good[i].port, "'%s'", good[i].in);
  }
  make_long(256);
  cr_expect_eq(msg_addr_parse(long_addr, 256, NULL, NULL), CORDON_E_LIMIT);
  cr_expect_eq(msg_addr_parse(NULL, 0, NULL, NULL), -EINVAL);
}

Test(msg_servers, the_protocol_speaks_2_and_3) {
  cr_expect_eq(MSG_PROTO_VERSION_MIN, 2);
  cr_expect_eq(MSG_PROTO_VERSION_MAX, 3);
  cr_expect_eq(MSG_PROTO_VERSION_SERVERS, 3);
  uint16_t v = 0;
  cr_expect_eq(msg_version_choose(2, 2, MSG_PROTO_VERSION_MIN, MSG_PROTO_VERSION_MAX, &v), 0);
  cr_expect_eq(v, 2, "an agent of version 2 still gets a welcome (without servers)");
  cr_expect_eq(msg_version_choose(2, 3, MSG_PROTO_VERSION_MIN, MSG_PROTO_VERSION_MAX, &v), 0);
  cr_expect_eq(v, 3);
}
