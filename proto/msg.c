/* Session messages: one schema table per type drives decoding, checking,
 * encoding and freeing, so the four can never disagree about a field. */
#include "proto/msg.h"

#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "proto/mpcheck.h"

/* ---- schema ---------------------------------------------------------- */

enum field_kind {
  K_UINT,   /* unsigned of `width` bytes, lo..hi */
  K_INT,    /* signed of `width` bytes (4 or 8), lo..hi */
  K_BOOL,   /* bool */
  K_STR,    /* char *, length lo..hi bytes, format `fmt` */
  K_BINFIX, /* uint8_t[hi] */
  K_BIN,    /* struct msg_bytes, length lo..hi */
  K_STRS,   /* char **, count at aux, lo..hi elements of 0..elem_max bytes */
  K_KEYS,   /* uint8_t (*)[MSG_KEY_LEN], count at aux, lo..hi elements */
  K_ENUM,   /* an enum stored as unsigned int, wire string from names[] */
  K_MAP,    /* a nested struct described by sub */
  K_FACTS,  /* struct msg_fact *, count at aux: a map of token keys (1..MSG_FACT_KEY_MAX)
               to name values (0..elem_max), lo..hi entries; present when non-NULL */
};

enum field_presence {
  P_REQUIRED, /* key present, value never nil */
  P_OPTIONAL, /* key may be absent; never nil */
  P_NULLABLE, /* key present; value may be nil */
};

enum str_format {
  FMT_TEXT,    /* UTF-8 */
  FMT_NAME,    /* UTF-8 without control characters (C0, DEL, C1, bidi) */
  FMT_TOKEN,   /* [a-z0-9_]+ */
  FMT_VERSION, /* printable ASCII without space */
  FMT_MECH,    /* mechanism names joined with '+' */
  FMT_ADDR,    /* a server address: msg_addr_parse() */
};

struct schema;

struct field {
  const char *key;
  uint8_t kind;
  uint8_t presence;
  uint8_t fmt;
  uint8_t width;
  /* Offset of the value. aux: for K_STRS/K_KEYS the size_t count; for an
   * optional or nullable field that is not a pointer, its bool has_ flag. */
  size_t off;
  size_t aux;
  int64_t lo;
  uint64_t hi;
  uint32_t elem_max;
  const char *const *names;
  unsigned n_names;
  const struct schema *sub;
};

struct schema {
  const struct field *fields;
  unsigned n;
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define SCHEMA(f)                                                                                  \
  { f, COUNT(f) }
#define OFF(st, m) offsetof(struct st, m)

_Static_assert(sizeof(enum msg_level) == sizeof(unsigned), "enum storage");
_Static_assert(sizeof(enum msg_enforce) == sizeof(unsigned), "enum storage");
_Static_assert(sizeof(enum msg_role) == sizeof(unsigned), "enum storage");
_Static_assert(sizeof(enum msg_stream) == sizeof(unsigned), "enum storage");

static const char *const level_names[] = {"none", "contained", "isolated"};
static const char *const enforce_names[] = {"none",  "cgroup",        "rlimit", "job",
                                            "tmpfs", "pid-namespace", "pgroup"};
static const char *const role_names[] = {"server", "agent"};
static const char *const stream_names[] = {"stdout", "stderr"};
static const char *const mechanism_names[] = {
    "bwrap", "seccomp", "landlock", "cgroup", "rlimit", "appcontainer", "job", "pgroup", "none"};

#define F_ID(st, m)                                                                                \
  { .key = #m, .kind = K_BINFIX, .off = OFF(st, m), .hi = CORDON_ID_LEN }
#define F_FIX(st, m, n)                                                                            \
  { .key = #m, .kind = K_BINFIX, .off = OFF(st, m), .hi = (n) }
#define F_UINT(st, m, w, l, h)                                                                     \
  { .key = #m, .kind = K_UINT, .width = (w), .off = OFF(st, m), .lo = (l), .hi = (h) }
#define F_STR(st, m, f, l, h)                                                                      \
  { .key = #m, .kind = K_STR, .fmt = (f), .off = OFF(st, m), .lo = (l), .hi = (h) }
#define F_BOOL(st, m)                                                                              \
  { .key = #m, .kind = K_BOOL, .off = OFF(st, m) }
#define F_ENUM(st, m, tbl)                                                                         \
  { .key = #m, .kind = K_ENUM, .off = OFF(st, m), .names = tbl, .n_names = COUNT(tbl) }

static const struct field hello_fields[] = {
    F_UINT(msg_hello, proto_min, 2, 1, UINT16_MAX),
    F_UINT(msg_hello, proto_max, 2, 1, UINT16_MAX),
    F_STR(msg_hello, agent_version, FMT_VERSION, 1, MSG_VERSION_MAX),
    {.key = "device_id",
     .kind = K_BINFIX,
     .presence = P_OPTIONAL,
     .off = OFF(msg_hello, device_id),
     .aux = OFF(msg_hello, has_device_id),
     .hi = CORDON_ID_LEN},
    {.key = "pair_code",
     .kind = K_STR,
     .presence = P_OPTIONAL,
     .fmt = FMT_TOKEN,
     .off = OFF(msg_hello, pair_code),
     .lo = 1,
     .hi = MSG_PAIR_CODE_MAX},
    {.key = "name",
     .kind = K_STR,
     .presence = P_OPTIONAL,
     .fmt = FMT_NAME,
     .off = OFF(msg_hello, name),
     .lo = 1,
     .hi = MSG_NAME_MAX},
    F_STR(msg_hello, platform, FMT_TOKEN, 1, MSG_PLATFORM_MAX),
    F_ENUM(msg_hello, best_level, level_names),
    {.key = "downgrade_reason",
     .kind = K_STR,
     .presence = P_NULLABLE,
     .fmt = FMT_TOKEN,
     .off = OFF(msg_hello, downgrade_reason),
     .lo = 1,
     .hi = MSG_CODE_MAX},
    {.key = "mechanism",
     .kind = K_STR,
     .presence = P_OPTIONAL,
     .fmt = FMT_MECH,
     .off = OFF(msg_hello, mechanism),
     .lo = 1,
     .hi = MSG_MECHANISM_MAX},
    F_UINT(msg_hello, max_jobs, 4, 1, 1024),
    {.key = "sign_key",
     .kind = K_BINFIX,
     .presence = P_OPTIONAL,
     .off = OFF(msg_hello, sign_key),
     .aux = OFF(msg_hello, has_sign_key),
     .hi = MSG_KEY_LEN},
    {.key = "facts",
     .kind = K_FACTS,
     .presence = P_OPTIONAL,
     .fmt = FMT_NAME,
     .off = OFF(msg_hello, facts),
     .aux = OFF(msg_hello, n_facts),
     .lo = 0,
     .hi = MSG_FACTS_MAX,
     .elem_max = MSG_FACT_VALUE_MAX},
};

static const struct field welcome_fields[] = {
    F_UINT(msg_welcome, version, 2, 1, UINT16_MAX),
    F_UINT(msg_welcome, time_ms, 8, 0, UINT64_MAX),
    F_ID(msg_welcome, server_id),
    F_ID(msg_welcome, session_id),
    F_UINT(msg_welcome, ping_ms, 4, 10, 3600000),
    {.key = "servers",
     .kind = K_STRS,
     .presence = P_OPTIONAL,
     .fmt = FMT_ADDR,
     .off = OFF(msg_welcome, servers),
     .aux = OFF(msg_welcome, n_servers),
     .lo = 0,
     .hi = MSG_SERVERS_MAX,
     .elem_max = MSG_ADDR_MAX},
};

static const struct field ping_fields[] = {
    F_UINT(msg_ping, nonce, 8, 0, UINT64_MAX),
    {.key = "time_ms",
     .kind = K_UINT,
     .presence = P_OPTIONAL,
     .width = 8,
     .off = OFF(msg_ping, time_ms),
     .aux = OFF(msg_ping, has_time_ms),
     .lo = 0,
     .hi = UINT64_MAX},
};

static const struct field job_fields[] = {
    F_ID(msg_job, job_id),
    {.key = "ticket", .kind = K_BIN, .off = OFF(msg_job, ticket), .lo = 1, .hi = MSG_TICKET_MAX},
    F_FIX(msg_job, ticket_sig, MSG_SIG_LEN),
    F_FIX(msg_job, pkg_hash, MSG_HASH_LEN),
    F_UINT(msg_job, pkg_size, 8, 1, UINT64_MAX),
    {.key = "args",
     .kind = K_STRS,
     .fmt = FMT_TEXT,
     .off = OFF(msg_job, args),
     .aux = OFF(msg_job, n_args),
     .lo = 0,
     .hi = MSG_ARGS_MAX,
     .elem_max = MSG_ARG_MAX},
};

static const struct field chunk_fields[] = {
    F_ID(msg_chunk, job_id),
    F_UINT(msg_chunk, offset, 8, 0, UINT64_MAX),
    {.key = "data", .kind = K_BIN, .off = OFF(msg_chunk, data), .lo = 1, .hi = MSG_CHUNK_MAX},
};

static const struct field output_fields[] = {
    F_ID(msg_output, job_id),
    F_ENUM(msg_output, stream, stream_names),
    F_UINT(msg_output, offset, 8, 0, UINT64_MAX),
    {.key = "data", .kind = K_BIN, .off = OFF(msg_output, data), .lo = 1, .hi = MSG_LIVE_MAX},
};

static const struct field job_ref_fields[] = {
    F_ID(msg_job_ref, job_id),
};

static const struct field ack_fields[] = {
    F_ID(msg_job_ref, job_id),
    {.key = "retry_ms",
     .kind = K_UINT,
     .presence = P_OPTIONAL,
     .width = 4,
     .off = OFF(msg_job_ref, retry_ms),
     .aux = OFF(msg_job_ref, has_retry_ms),
     .lo = 1,
     .hi = 86400000},
};

static const struct field limits_fields[] = {
    F_ENUM(msg_limits_used, memory, enforce_names),
    F_ENUM(msg_limits_used, processes, enforce_names),
    F_ENUM(msg_limits_used, cpu, enforce_names),
    F_ENUM(msg_limits_used, time, enforce_names),
    F_ENUM(msg_limits_used, disk, enforce_names),
};
static const struct schema limits_schema = SCHEMA(limits_fields);

static const struct field sandbox_fields[] = {
    F_ENUM(msg_sandbox, requested, level_names),
    {.key = "level",
     .kind = K_ENUM,
     .presence = P_NULLABLE,
     .off = OFF(msg_sandbox, level),
     .aux = OFF(msg_sandbox, has_level),
     .names = level_names,
     .n_names = COUNT(level_names)},
    {.key = "mechanism",
     .kind = K_STR,
     .presence = P_NULLABLE,
     .fmt = FMT_MECH,
     .off = OFF(msg_sandbox, mechanism),
     .lo = 1,
     .hi = MSG_MECHANISM_MAX},
    {.key = "downgrade_reason",
     .kind = K_STR,
     .presence = P_NULLABLE,
     .fmt = FMT_TOKEN,
     .off = OFF(msg_sandbox, downgrade_reason),
     .lo = 1,
     .hi = MSG_CODE_MAX},
    {.key = "limits", .kind = K_MAP, .off = OFF(msg_sandbox, limits), .sub = &limits_schema},
};
static const struct schema sandbox_schema = SCHEMA(sandbox_fields);

static const struct field fault_fields[] = {
    F_STR(msg_fault, code, FMT_TOKEN, 1, MSG_CODE_MAX),
    F_STR(msg_fault, message, FMT_TEXT, 0, MSG_TEXT_MAX),
};
static const struct schema fault_schema = SCHEMA(fault_fields);

static const struct field result_fields[] = {
    F_ID(msg_result, job_id),
    F_ID(msg_result, device_id),
    {.key = "exit_code",
     .kind = K_INT,
     .presence = P_NULLABLE,
     .width = 8,
     .off = OFF(msg_result, exit_code),
     .aux = OFF(msg_result, has_exit_code),
     .lo = INT32_MIN,
     .hi = UINT32_MAX},
    {.key = "signal",
     .kind = K_INT,
     .presence = P_NULLABLE,
     .width = 4,
     .off = OFF(msg_result, signal),
     .aux = OFF(msg_result, has_signal),
     .lo = 1,
     .hi = 127},
    {.key = "stdout", .kind = K_BIN, .off = OFF(msg_result, stdout_buf), .hi = MSG_OUTPUT_MAX},
    {.key = "stderr", .kind = K_BIN, .off = OFF(msg_result, stderr_buf), .hi = MSG_OUTPUT_MAX},
    F_BOOL(msg_result, stdout_truncated),
    F_BOOL(msg_result, stderr_truncated),
    F_UINT(msg_result, wall_ms, 8, 0, UINT64_MAX),
    F_BOOL(msg_result, timed_out),
    {.key = "oom_killed",
     .kind = K_BOOL,
     .presence = P_NULLABLE,
     .off = OFF(msg_result, oom_killed),
     .aux = OFF(msg_result, has_oom_killed)},
    F_UINT(msg_result, orphans_killed, 4, 0, UINT32_MAX),
    {.key = "kill_scope",
     .kind = K_UINT,
     .presence = P_OPTIONAL,
     .width = 4,
     .off = OFF(msg_result, kill_scope),
     .aux = OFF(msg_result, has_kill_scope),
     .lo = 1,
     .hi = 5},
    {.key = "sandbox", .kind = K_MAP, .off = OFF(msg_result, sandbox), .sub = &sandbox_schema},
    {.key = "error",
     .kind = K_MAP,
     .presence = P_NULLABLE,
     .off = OFF(msg_result, error),
     .aux = OFF(msg_result, has_error),
     .sub = &fault_schema},
    {.key = "started_ms",
     .kind = K_UINT,
     .presence = P_OPTIONAL,
     .width = 8,
     .off = OFF(msg_result, started_ms),
     .aux = OFF(msg_result, has_started_ms),
     .lo = 0,
     .hi = UINT64_MAX},
    {.key = "ended_ms",
     .kind = K_UINT,
     .presence = P_OPTIONAL,
     .width = 8,
     .off = OFF(msg_result, ended_ms),
     .aux = OFF(msg_result, has_ended_ms),
     .lo = 0,
     .hi = UINT64_MAX},
    {.key = "ticket_hash",
     .kind = K_BINFIX,
     .presence = P_OPTIONAL,
     .off = OFF(msg_result, ticket_hash),
     .aux = OFF(msg_result, has_ticket_hash),
     .hi = MSG_HASH_LEN},
    {.key = "receipt_sig",
     .kind = K_BINFIX,
     .presence = P_OPTIONAL,
     .off = OFF(msg_result, receipt_sig),
     .aux = OFF(msg_result, has_receipt_sig),
     .hi = MSG_SIG_LEN},
};

static const struct field pair_proof_fields[] = {
    F_ENUM(msg_pair_proof, role, role_names),
    F_FIX(msg_pair_proof, mac, MSG_MAC_LEN),
};

static const struct field pair_done_fields[] = {
    F_ID(msg_pair_done, device_id),
    F_STR(msg_pair_done, user, FMT_NAME, 1, MSG_NAME_MAX),
    F_STR(msg_pair_done, name, FMT_NAME, 1, MSG_NAME_MAX),
    F_STR(msg_pair_done, platform, FMT_TOKEN, 1, MSG_PLATFORM_MAX),
    F_FIX(msg_pair_done, ticket_key, MSG_KEY_LEN),
    {.key = "publisher_keys",
     .kind = K_KEYS,
     .off = OFF(msg_pair_done, publisher_keys),
     .aux = OFF(msg_pair_done, n_publisher_keys),
     .lo = 1,
     .hi = MSG_PUBLISHER_KEYS_MAX},
};

static const struct field keys_fields[] = {
    F_UINT(msg_keys, serial, 8, 1, UINT64_MAX),
    F_FIX(msg_keys, ticket_key, MSG_KEY_LEN),
    F_FIX(msg_keys, publisher_key, MSG_KEY_LEN),
    F_FIX(msg_keys, ticket_sig, MSG_SIG_LEN),
    F_FIX(msg_keys, publisher_sig, MSG_SIG_LEN),
    {.key = "retired",
     .kind = K_KEYS,
     .presence = P_OPTIONAL,
     .off = OFF(msg_keys, retired),
     .aux = OFF(msg_keys, n_retired),
     .lo = 0,
     .hi = MSG_PUBLISHER_KEYS_MAX},
};

static const struct field goaway_fields[] = {
    F_STR(msg_goaway, code, FMT_TOKEN, 1, MSG_CODE_MAX),
    F_STR(msg_goaway, message, FMT_TEXT, 0, MSG_TEXT_MAX),
    {.key = "retry_ms",
     .kind = K_UINT,
     .presence = P_OPTIONAL,
     .width = 4,
     .off = OFF(msg_goaway, retry_ms),
     .aux = OFF(msg_goaway, has_retry_ms),
     .lo = 0,
     .hi = 86400000},
};

static const struct field error_fields[] = {
    F_STR(msg_error, code, FMT_TOKEN, 1, MSG_CODE_MAX),
    F_STR(msg_error, message, FMT_TEXT, 0, MSG_TEXT_MAX),
    {.key = "job_id",
     .kind = K_BINFIX,
     .presence = P_OPTIONAL,
     .off = OFF(msg_error, job_id),
     .aux = OFF(msg_error, has_job_id),
     .hi = CORDON_ID_LEN},
};

struct type_desc {
  const char *name;
  unsigned senders;
  struct schema schema;
};

#define BOTH (MSG_FROM_AGENT | MSG_FROM_SERVER)
static const struct type_desc types[] = {
    [MSG_HELLO] = {"hello", MSG_FROM_AGENT, SCHEMA(hello_fields)},
    [MSG_WELCOME] = {"welcome", MSG_FROM_SERVER, SCHEMA(welcome_fields)},
    [MSG_PING] = {"ping", BOTH, SCHEMA(ping_fields)},
    [MSG_PONG] = {"pong", BOTH, SCHEMA(ping_fields)},
    [MSG_JOB] = {"job", MSG_FROM_SERVER, SCHEMA(job_fields)},
    [MSG_CHUNK] = {"chunk", MSG_FROM_SERVER, SCHEMA(chunk_fields)},
    [MSG_RUNNING] = {"running", MSG_FROM_AGENT, SCHEMA(job_ref_fields)},
    [MSG_RESULT] = {"result", MSG_FROM_AGENT, SCHEMA(result_fields)},
    [MSG_ACK] = {"ack", MSG_FROM_SERVER, SCHEMA(ack_fields)},
    [MSG_CANCEL] = {"cancel", MSG_FROM_SERVER, SCHEMA(job_ref_fields)},
    [MSG_PAIR_PROOF] = {"pair_proof", BOTH, SCHEMA(pair_proof_fields)},
    [MSG_PAIR_DONE] = {"pair_done", MSG_FROM_SERVER, SCHEMA(pair_done_fields)},
    [MSG_KEYS] = {"keys", MSG_FROM_SERVER, SCHEMA(keys_fields)},
    [MSG_UNPAIR] = {"unpair", MSG_FROM_AGENT, {NULL, 0}},
    [MSG_GOAWAY] = {"goaway", BOTH, SCHEMA(goaway_fields)},
    [MSG_ERROR] = {"error", BOTH, SCHEMA(error_fields)},
    [MSG_OUTPUT] = {"output", MSG_FROM_AGENT, SCHEMA(output_fields)},
};

static const struct type_desc *type_find(enum msg_type t) {
  if ((unsigned)t == 0 || (unsigned)t >= COUNT(types))
    return NULL;
  return &types[t];
}

/* Where a diag points: "result" or "result.sandbox". */
struct path {
  const char *type;
  const char *map; /* nested map key or NULL */
};

#define DIAG(diag, rc, p, key, what)                                                               \
  cordon_diag_set((diag), (rc), "msg %s%s%s.%s: %s", (p)->type, (p)->map ? "." : "",               \
                  (p)->map ? (p)->map : "", (key), (what))

/* ---- value checks, shared by decoding and encoding ------------------- */

static bool in_set(const char *s, size_t len, const char *const *names, unsigned n,
                   unsigned *out_idx) {
  for (unsigned i = 0; i < n; i++) {
    if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) {
      if (out_idx)
        *out_idx = i;
      return true;
    }
  }
  return false;
}

/* Bidirectional formatting characters, which can make a printed name look
 * like another: U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069.
 * p is one complete, well-formed sequence of n bytes. */
static bool bidi_control(const uint8_t *p, unsigned n) {
  if (n == 2)
    return p[0] == 0xd8 && p[1] == 0x9c;
  if (n != 3 || p[0] != 0xe2)
    return false;
  if (p[1] == 0x80)
    return p[2] == 0x8e || p[2] == 0x8f || (p[2] >= 0xaa && p[2] <= 0xae);
  return p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9;
}

/* Well-formed UTF-8 (no overlongs, surrogates or code points above
 * U+10FFFF), no NUL; with no_ctrl also no C0, DEL or C1 controls and no
 * bidirectional formatting characters. */
static bool utf8_ok(const uint8_t *s, size_t n, bool no_ctrl) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      if (c == 0 || (no_ctrl && (c < 0x20 || c == 0x7f)))
        return false;
      i++;
      continue;
    }
    unsigned need;
    uint8_t lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      need = 1;
      if (no_ctrl && c == 0xc2)
        lo = 0xa0; /* U+0080..U+009F are C1 controls */
    } else if (c == 0xe0) {
      need = 2, lo = 0xa0;
    } else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) {
      need = 2;
    } else if (c == 0xed) {
      need = 2, hi = 0x9f;
    } else if (c == 0xf0) {
      need = 3, lo = 0x90;
    } else if (c >= 0xf1 && c <= 0xf3) {
      need = 3;
    } else if (c == 0xf4) {
      need = 3, hi = 0x8f;
    } else {
      return false;
    }
    if (n - i - 1 < need)
      return false;
    if (s[i + 1] < lo || s[i + 1] > hi)
      return false;
    for (unsigned k = 2; k <= need; k++)
      if (s[i + k] < 0x80 || s[i + k] > 0xbf)
        return false;
    if (no_ctrl && bidi_control(s + i, need + 1))
      return false;
    i += need + 1;
  }
  return true;
}

static bool token_ok(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  }
  return n > 0;
}

/* ---- server addresses (welcome.servers) ------------------------------ */

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

static bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A dotted quad: four decimal parts 0..255 without leading zeros. */
static bool ipv4_ok(const char *s, size_t n) {
  size_t i = 0;
  for (int part = 0; part < 4; part++) {
    if (part > 0 && (i >= n || s[i++] != '.'))
      return false;
    size_t start = i;
    unsigned v = 0;
    while (i < n && is_digit(s[i]) && i - start < 3)
      v = v * 10 + (unsigned)(s[i++] - '0');
    if (i == start || v > 255 || (s[start] == '0' && i - start > 1))
      return false;
  }
  return i == n;
}

/* RFC 4291 text form: eight groups of 1..4 hex digits, one "::" standing
 * for one or more zero groups, the last two groups optionally a dotted
 * quad. No zone index. */
static bool ipv6_ok(const char *s, size_t n) {
  unsigned groups = 0;
  bool gap = false;
  size_t i = 0;
  if (n >= 2 && s[0] == ':' && s[1] == ':') {
    gap = true;
    i = 2;
  } else if (n >= 1 && s[0] == ':') {
    return false;
  }
  while (i < n) {
    size_t start = i;
    while (i < n && is_hex(s[i]) && i - start < 5)
      i++;
    if (i < n && s[i] == '.') { /* an embedded IPv4 ends the address */
      if (!ipv4_ok(s + start, n - start))
        return false;
      groups += 2;
      i = n;
      break;
    }
    if (i == start || i - start > 4)
      return false;
    groups++;
    if (i == n)
      break;
    if (s[i] != ':')
      return false;
    i++;
    if (i < n && s[i] == ':') {
      if (gap)
        return false;
      gap = true;
      i++;
    } else if (i == n) {
      return false; /* a single trailing ':' */
    }
  }
  return gap ? groups <= 7 : groups == 8;
}

/* A DNS name: dot-separated labels of 1..63 letters, digits and '-', not
 * starting or ending with '-', at most 253 bytes, no trailing dot; the last
 * label not all digits (so "1.2.3" and "256.1.1.1" are not names). */
static bool dns_ok(const char *s, size_t n) {
  if (n == 0 || n > 253)
    return false;
  size_t start = 0;
  bool numeric = true;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || s[i] == '.') {
      size_t len = i - start;
      if (len == 0 || len > 63 || s[start] == '-' || s[i - 1] == '-')
        return false;
      start = i + 1;
      if (i < n)
        numeric = true;
      continue;
    }
    char c = s[i];
    if (!is_digit(c))
      numeric = false;
    if (!(is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-'))
      return false;
  }
  return !numeric;
}

int msg_addr_parse(const char *s, size_t n, char *out_host, uint16_t *out_port) {
  if (!s)
    return -EINVAL;
  if (n > MSG_ADDR_MAX)
    return CORDON_E_LIMIT;
  const char *colon = NULL;
  for (size_t i = n; i > 0; i--)
    if (s[i - 1] == ':') {
      colon = s + i - 1;
      break;
    }
  if (!colon)
    return CORDON_E_PROTOCOL;
  size_t hl = (size_t)(colon - s), pl = n - hl - 1;
  unsigned port = 0;
  if (pl == 0 || pl > 5 || colon[1] == '0')
    return CORDON_E_PROTOCOL;
  for (size_t i = 0; i < pl; i++) {
    if (!is_digit(colon[1 + i]))
      return CORDON_E_PROTOCOL;
    port = port * 10 + (unsigned)(colon[1 + i] - '0');
  }
  if (port < 1 || port > 65535)
    return CORDON_E_PROTOCOL;
  const char *h = s;
  bool ok;
  if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
    h++;
    hl -= 2;
    ok = ipv6_ok(h, hl);
  } else {
    ok = ipv4_ok(h, hl) || dns_ok(h, hl);
  }
  if (!ok)
    return CORDON_E_PROTOCOL;
  if (out_host) {
    memcpy(out_host, h, hl);
    out_host[hl] = '\0';
  }
  if (out_port)
    *out_port = (uint16_t)port;
  return 0;
}

static bool mechanism_ok(const char *s, size_t n) {
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || s[i] == '+') {
      if (!in_set(s + start, i - start, mechanism_names, COUNT(mechanism_names), NULL))
        return false;
      start = i + 1;
    }
  }
  return true;
}

/* Length and format of a string value. */
static int check_str(const struct field *f, const char *s, size_t n, const struct path *p,
                     struct cordon_diag *diag) {
  if (n > f->hi)
    return DIAG(diag, CORDON_E_LIMIT, p, f->key, "string too long");
  if (n < (uint64_t)f->lo)
    return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "string too short");
  if (memchr(s, 0, n))
    return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "NUL in string");
  bool ok;
  switch (f->fmt) {
  case FMT_TOKEN:
    ok = token_ok(s, n);
    break;
  case FMT_VERSION:
    ok = true;
    for (size_t i = 0; i < n; i++)
      if (s[i] < 0x21 || s[i] > 0x7e)
        ok = false;
    break;
  case FMT_MECH:
    ok = mechanism_ok(s, n);
    break;
  case FMT_NAME:
    ok = utf8_ok((const uint8_t *)s, n, true);
    break;
  case FMT_ADDR:
    ok = msg_addr_parse(s, n, NULL, NULL) == 0;
    break;
  default:
    ok = utf8_ok((const uint8_t *)s, n, false);
    break;
  }
  if (!ok)
    return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "invalid characters");
  return 0;
}

static int check_uint(const struct field *f, uint64_t v, const struct path *p,
                      struct cordon_diag *diag) {
  if (v < (uint64_t)f->lo || v > f->hi)
    return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "integer out of range");
  return 0;
}

static int check_int(const struct field *f, int64_t v, const struct path *p,
                     struct cordon_diag *diag) {
  if (v < f->lo || (v >= 0 && (uint64_t)v > f->hi))
    return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "integer out of range");
  return 0;
}

static int check_len(const struct field *f, size_t n, const struct path *p,
                     struct cordon_diag *diag) {
  if (n > f->hi)
    return DIAG(diag, CORDON_E_LIMIT, p, f->key, f->kind == K_BIN ? "too long" : "too many");
  if (n < (uint64_t)f->lo)
    return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, f->kind == K_BIN ? "too short" : "too few");
  return 0;
}

/* Unaligned-safe typed access at base + off. */
static uint64_t load_uint(const uint8_t *at, unsigned width) {
  switch (width) {
  case 1: {
    uint8_t v;
    memcpy(&v, at, 1);
    return v;
  }
  case 2: {
    uint16_t v;
    memcpy(&v, at, 2);
    return v;
  }
  case 4: {
    uint32_t v;
    memcpy(&v, at, 4);
    return v;
  }
  default: {
    uint64_t v;
    memcpy(&v, at, 8);
    return v;
  }
  }
}

static void store_uint(uint8_t *at, unsigned width, uint64_t x) {
  switch (width) {
  case 1: {
    uint8_t v = (uint8_t)x;
    memcpy(at, &v, 1);
    break;
  }
  case 2: {
    uint16_t v = (uint16_t)x;
    memcpy(at, &v, 2);
    break;
  }
  case 4: {
    uint32_t v = (uint32_t)x;
    memcpy(at, &v, 4);
    break;
  }
  default:
    memcpy(at, &x, 8);
    break;
  }
}

static int64_t load_int(const uint8_t *at, unsigned width) {
  if (width == 4) {
    int32_t v;
    memcpy(&v, at, 4);
    return v;
  }
  int64_t v;
  memcpy(&v, at, 8);
  return v;
}

static void store_int(uint8_t *at, unsigned width, int64_t x) {
  if (width == 4) {
    int32_t v = (int32_t)x;
    memcpy(at, &v, 4);
  } else {
    memcpy(at, &x, 8);
  }
}

static bool load_bool(const uint8_t *at) {
  bool v;
  memcpy(&v, at, sizeof(v));
  return v;
}

static void store_bool(uint8_t *at, bool v) {
  memcpy(at, &v, sizeof(v));
}

static void *load_ptr(const uint8_t *at) {
  void *v;
  memcpy(&v, at, sizeof(v));
  return v;
}

static void store_ptr(uint8_t *at, void *v) {
  memcpy(at, &v, sizeof(v));
}

static size_t load_size(const uint8_t *at) {
  size_t v;
  memcpy(&v, at, sizeof(v));
  return v;
}

static void store_size(uint8_t *at, size_t v) {
  memcpy(at, &v, sizeof(v));
}

/* Whether an optional or nullable field holds a value. */
static bool field_present(const struct field *f, const uint8_t *base) {
  if (f->presence == P_REQUIRED)
    return true;
  if (f->kind == K_STR || f->kind == K_STRS || f->kind == K_FACTS || f->kind == K_KEYS)
    return load_ptr(base + f->off) != NULL;
  return load_bool(base + f->aux);
}

/* ---- cross-field rules ------------------------------------------------ */

static int check_rules(const struct msg *m, struct cordon_diag *diag) {
  switch (m->type) {
  case MSG_HELLO:
    if (m->hello.has_device_id && m->hello.pair_code)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL,
                             "msg hello: device_id and pair_code are exclusive");
    if (m->hello.proto_min > m->hello.proto_max)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg hello: proto_min above proto_max");
    if ((m->hello.best_level == MSG_LEVEL_ISOLATED) != (m->hello.downgrade_reason == NULL))
      return cordon_diag_set(diag, CORDON_E_PROTOCOL,
                             "msg hello: downgrade_reason must be null exactly when "
                             "best_level is isolated");
    break;
  case MSG_WELCOME:
    if (m->welcome.servers && m->welcome.version < MSG_PROTO_VERSION_SERVERS)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL,
                             "msg welcome: servers needs protocol version 3 or later");
    break;
  case MSG_CHUNK:
    if (m->chunk.offset > UINT64_MAX - m->chunk.data.len)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg chunk: offset + length overflows");
    break;
  case MSG_OUTPUT:
    if (m->output.offset > UINT64_MAX - m->output.data.len)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg output: offset + length overflows");
    break;
  case MSG_RESULT: {
    const struct msg_result *r = &m->result;
    if (r->has_exit_code && r->has_signal)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL,
                             "msg result: both exit_code and signal are set");
    if (!r->has_exit_code && !r->has_signal && !r->has_error)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg result: no exit_code, signal or error");
    if (r->sandbox.has_level &&
        (r->sandbox.level == MSG_LEVEL_ISOLATED) != (r->sandbox.downgrade_reason == NULL))
      return cordon_diag_set(diag, CORDON_E_PROTOCOL,
                             "msg result: sandbox.downgrade_reason must be null exactly when "
                             "the level is isolated");
    break;
  }
  default:
    break;
  }
  return 0;
}

/* ---- decoding ---------------------------------------------------------- */

static bool key_is(const msgpack_object *k, const char *name) {
  size_t n = strlen(name);
  return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
         memcmp(k->via.str.ptr, name, n) == 0;
}

static int dec_map(const struct schema *s, const msgpack_object *o, uint8_t *base, bool top,
                   const struct path *p, struct cordon_diag *diag);

static int dec_str(const struct field *f, const msgpack_object *o, char **out, const struct path *p,
                   struct cordon_diag *diag) {
  if (o->type != MSGPACK_OBJECT_STR)
    return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "not a str");
  int rc = check_str(f, o->via.str.ptr, o->via.str.size, p, diag);
  if (rc < 0)
    return rc;
  char *s = malloc((size_t)o->via.str.size + 1);
  if (!s)
    return -ENOMEM;
  memcpy(s, o->via.str.ptr, o->via.str.size);
  s[o->via.str.size] = '\0';
  *out = s;
  return 0;
}

static int dec_value(const struct field *f, const msgpack_object *o, uint8_t *base,
                     const struct path *p, struct cordon_diag *diag) {
  uint8_t *at = base + f->off;
  int rc;

  if (o->type == MSGPACK_OBJECT_NIL) {
    if (f->presence != P_NULLABLE)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "nil not allowed");
    /* Null: the zeroed struct already says so (NULL pointer, has_ false). */
    return 0;
  }
  if (f->presence != P_REQUIRED && f->kind != K_STR && f->kind != K_STRS && f->kind != K_FACTS &&
      f->kind != K_KEYS)
    store_bool(base + f->aux, true);

  switch (f->kind) {
  case K_UINT:
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "integer out of range");
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "not an integer");
    rc = check_uint(f, o->via.u64, p, diag);
    if (rc < 0)
      return rc;
    store_uint(at, f->width, o->via.u64);
    return 0;
  case K_INT: {
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
      if (o->via.u64 > f->hi)
        return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "integer out of range");
      v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
      v = o->via.i64;
    } else {
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "not an integer");
    }
    rc = check_int(f, v, p, diag);
    if (rc < 0)
      return rc;
    store_int(at, f->width, v);
    return 0;
  }
  case K_BOOL:
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "not a bool");
    store_bool(at, o->via.boolean);
    return 0;
  case K_STR: {
    char *s = NULL;
    rc = dec_str(f, o, &s, p, diag);
    if (rc < 0)
      return rc;
    store_ptr(at, s);
    return 0;
  }
  case K_BINFIX:
    if (o->type != MSGPACK_OBJECT_BIN)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "not a bin");
    if (o->via.bin.size != f->hi)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "wrong length");
    memcpy(at, o->via.bin.ptr, (size_t)f->hi);
    return 0;
  case K_BIN: {
    struct msg_bytes b = {NULL, 0};
    if (o->type != MSGPACK_OBJECT_BIN)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "not a bin");
    rc = check_len(f, o->via.bin.size, p, diag);
    if (rc < 0)
      return rc;
    if (o->via.bin.size > 0) {
      b.data = malloc(o->via.bin.size);
      if (!b.data)
        return -ENOMEM;
      memcpy(b.data, o->via.bin.ptr, o->via.bin.size);
      b.len = o->via.bin.size;
    }
    memcpy(at, &b, sizeof(b));
    return 0;
  }
  case K_STRS: {
    if (o->type != MSGPACK_OBJECT_ARRAY)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "not an array");
    size_t n = o->via.array.size;
    rc = check_len(f, n, p, diag);
    if (rc < 0)
      return rc;
    char **v = calloc(n ? n : 1, sizeof(*v));
    if (!v)
      return -ENOMEM;
    /* Stored first so that msg_release() frees what is already copied. */
    store_ptr(at, v);
    struct field elem = *f;
    elem.kind = K_STR;
    elem.lo = 0;
    elem.hi = f->elem_max;
    for (size_t i = 0; i < n; i++) {
      rc = dec_str(&elem, &o->via.array.ptr[i], &v[i], p, diag);
      if (rc < 0)
        return rc;
      store_size(base + f->aux, i + 1);
    }
    return 0;
  }
  case K_KEYS: {
    if (o->type != MSGPACK_OBJECT_ARRAY)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "not an array");
    size_t n = o->via.array.size;
    rc = check_len(f, n, p, diag);
    if (rc < 0)
      return rc;
    for (size_t i = 0; i < n; i++) {
      const msgpack_object *e = &o->via.array.ptr[i];
      if (e->type != MSGPACK_OBJECT_BIN || e->via.bin.size != MSG_KEY_LEN)
        return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "element is not a 32-byte bin");
    }
    uint8_t(*k)[MSG_KEY_LEN] = malloc(n ? n * MSG_KEY_LEN : 1);
    if (!k)
      return -ENOMEM;
    for (size_t i = 0; i < n; i++)
      memcpy(k[i], o->via.array.ptr[i].via.bin.ptr, MSG_KEY_LEN);
    store_ptr(at, k);
    store_size(base + f->aux, n);
    return 0;
  }
  case K_ENUM: {
    unsigned idx;
    if (o->type != MSGPACK_OBJECT_STR)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "not a str");
    if (!in_set(o->via.str.ptr, o->via.str.size, f->names, f->n_names, &idx))
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "unknown value");
    memcpy(at, &idx, sizeof(idx));
    return 0;
  }
  case K_MAP: {
    struct path sub = {p->type, f->key};
    return dec_map(f->sub, o, at, false, &sub, diag);
  }
  case K_FACTS: {
    if (o->type != MSGPACK_OBJECT_MAP)
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "not a map");
    size_t n = o->via.map.size;
    rc = check_len(f, n, p, diag);
    if (rc < 0)
      return rc;
    struct msg_fact *v = calloc(n ? n : 1, sizeof(*v));
    if (!v)
      return -ENOMEM;
    /* Stored first so that msg_release() frees what is already copied. */
    store_ptr(at, v);
    struct field kf = {
        .key = f->key, .kind = K_STR, .fmt = FMT_TOKEN, .lo = 1, .hi = MSG_FACT_KEY_MAX};
    struct field vf = {.key = f->key, .kind = K_STR, .fmt = f->fmt, .lo = 0, .hi = f->elem_max};
    for (size_t i = 0; i < n; i++) {
      const msgpack_object_kv *kv = &o->via.map.ptr[i];
      for (size_t j = 0; j < i; j++)
        if (kv->key.type == MSGPACK_OBJECT_STR && key_is(&kv->key, v[j].key))
          return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "duplicate key");
      rc = dec_str(&kf, &kv->key, &v[i].key, p, diag);
      if (rc == 0) {
        rc = dec_str(&vf, &kv->val, &v[i].value, p, diag);
        if (rc < 0) {
          free(v[i].key);
          v[i].key = NULL;
        }
      }
      if (rc < 0)
        return rc;
      store_size(base + f->aux, i + 1);
    }
    return 0;
  }
  default:
    return CORDON_E_INTERNAL;
  }
}

static int dec_map(const struct schema *s, const msgpack_object *o, uint8_t *base, bool top,
                   const struct path *p, struct cordon_diag *diag) {
  uint32_t seen = 0;
  bool seen_t = false;

  if (o->type != MSGPACK_OBJECT_MAP)
    return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg %s%s%s: not a map", p->type,
                           p->map ? "." : "", p->map ? p->map : "");
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object_kv *kv = &o->via.map.ptr[i];
    if (kv->key.type != MSGPACK_OBJECT_STR)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg %s: a key is not a str", p->type);
    if (top && key_is(&kv->key, "t")) {
      if (seen_t)
        return DIAG(diag, CORDON_E_PROTOCOL, p, "t", "duplicate key");
      seen_t = true;
      continue;
    }
    unsigned idx = s->n;
    for (unsigned j = 0; j < s->n; j++) {
      if (key_is(&kv->key, s->fields[j].key)) {
        idx = j;
        break;
      }
    }
    if (idx == s->n)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg %s%s%s: unknown key", p->type,
                             p->map ? "." : "", p->map ? p->map : "");
    if (seen & (1u << idx))
      return DIAG(diag, CORDON_E_PROTOCOL, p, s->fields[idx].key, "duplicate key");
    seen |= 1u << idx;
    int rc = dec_value(&s->fields[idx], &kv->val, base, p, diag);
    if (rc < 0)
      return rc;
  }
  for (unsigned j = 0; j < s->n; j++)
    if (!(seen & (1u << j)) && s->fields[j].presence != P_OPTIONAL)
      return DIAG(diag, CORDON_E_PROTOCOL, p, s->fields[j].key, "missing");
  return 0;
}

/* Every schema fits the `seen` bit set. */
_Static_assert(COUNT(result_fields) <= 32, "too many fields for the seen mask");

/* The validator's caps are the largest of any field's. */
_Static_assert(MSG_TICKET_MAX <= MSG_OUTPUT_MAX && MSG_CHUNK_MAX <= MSG_OUTPUT_MAX &&
                   MSG_LIVE_MAX <= MSG_OUTPUT_MAX,
               "max_bin must cover every bin field");
_Static_assert(MSG_TEXT_MAX <= MSG_ARG_MAX && MSG_NAME_MAX <= MSG_ARG_MAX &&
                   MSG_MECHANISM_MAX <= MSG_ARG_MAX,
               "max_str must cover every str field");

static const struct mpcheck_limits msg_mp_limits = {
    .max_depth = MPCHECK_DEPTH_MAX,
    .max_str = MSG_ARG_MAX,
    .max_bin = MSG_OUTPUT_MAX,
    .max_items = MSG_ITEMS_MAX,
};

static void rel_fields(const struct schema *s, uint8_t *base);

int msg_decode(const uint8_t *buf, size_t len, struct msg *out_msg, struct cordon_diag *diag) {
  struct msg m;
  msgpack_unpacked up;
  size_t off = 0;
  int rc;

  if ((!buf && len > 0) || !out_msg)
    return -EINVAL;
  if (len > MSG_ENCODED_MAX)
    return cordon_diag_set(diag, CORDON_E_LIMIT, "msg: record of %zu bytes above %u", len,
                           MSG_ENCODED_MAX);
  rc = mpcheck_validate(buf, len, &msg_mp_limits, diag);
  if (rc < 0)
    return rc;

  memset(&m, 0, sizeof(m));
  msgpack_unpacked_init(&up);
  msgpack_unpack_return ur = msgpack_unpack_next(&up, (const char *)buf, len, &off);
  if (ur == MSGPACK_UNPACK_NOMEM_ERROR) {
    rc = -ENOMEM;
    goto out_destroy;
  }
  if (ur != MSGPACK_UNPACK_SUCCESS || off != len) {
    rc = cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg: msgpack-c refused the record");
    goto out_destroy;
  }
  const msgpack_object *o = &up.data;
  if (o->type != MSGPACK_OBJECT_MAP) {
    rc = cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg: record is not a map");
    goto out_destroy;
  }

  /* Find "t" to know which schema the other keys follow. */
  const msgpack_object *t = NULL;
  for (uint32_t i = 0; i < o->via.map.size && !t; i++)
    if (key_is(&o->via.map.ptr[i].key, "t"))
      t = &o->via.map.ptr[i].val;
  if (!t) {
    rc = cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg: no \"t\" key");
    goto out_destroy;
  }
  if (t->type != MSGPACK_OBJECT_STR) {
    rc = cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg: \"t\" is not a str");
    goto out_destroy;
  }
  for (unsigned i = 1; i < COUNT(types); i++) {
    size_t n = strlen(types[i].name);
    if (t->via.str.size == n && memcmp(t->via.str.ptr, types[i].name, n) == 0)
      m.type = (enum msg_type)i;
  }
  if (m.type == 0) {
    rc = cordon_diag_set(diag, CORDON_E_PROTOCOL, "msg: unknown type");
    goto out_destroy;
  }

  const struct type_desc *td = &types[m.type];
  struct path p = {td->name, NULL};
  rc = dec_map(&td->schema, o, (uint8_t *)&m.hello, true, &p, diag);
  if (rc < 0)
    goto out_release;
  rc = check_rules(&m, diag);
  if (rc < 0)
    goto out_release;

  *out_msg = m;
  msgpack_unpacked_destroy(&up);
  return 0;

out_release:
  rel_fields(&td->schema, (uint8_t *)&m.hello);
out_destroy:
  msgpack_unpacked_destroy(&up);
  return rc;
}

/* ---- releasing --------------------------------------------------------- */

static void rel_fields(const struct schema *s, uint8_t *base) {
  for (unsigned i = 0; i < s->n; i++) {
    const struct field *f = &s->fields[i];
    uint8_t *at = base + f->off;
    switch (f->kind) {
    case K_STR:
    case K_KEYS:
      free(load_ptr(at));
      break;
    case K_BIN: {
      struct msg_bytes b;
      memcpy(&b, at, sizeof(b));
      free(b.data);
      break;
    }
    case K_STRS: {
      char **v = load_ptr(at);
      size_t n = load_size(base + f->aux);
      for (size_t j = 0; v && j < n; j++)
        free(v[j]);
      free(v);
      break;
    }
    case K_MAP:
      rel_fields(f->sub, at);
      break;
    case K_FACTS: {
      struct msg_fact *v = load_ptr(at);
      size_t n = load_size(base + f->aux);
      for (size_t j = 0; v && j < n; j++) {
        free(v[j].key);
        free(v[j].value);
      }
      free(v);
      break;
    }
    default:
      break;
    }
  }
}

void msg_release(struct msg *m) {
  if (!m)
    return;
  const struct type_desc *td = type_find(m->type);
  if (td)
    rel_fields(&td->schema, (uint8_t *)&m->hello);
  memset(m, 0, sizeof(*m));
}

/* ---- encoding ---------------------------------------------------------- */

/* Checks every present field of a struct by the decoding rules. */
static int chk_fields(const struct schema *s, const uint8_t *base, const struct path *p,
                      struct cordon_diag *diag) {
  for (unsigned i = 0; i < s->n; i++) {
    const struct field *f = &s->fields[i];
    const uint8_t *at = base + f->off;
    int rc = 0;

    if (f->kind == K_STR && f->presence == P_REQUIRED && !load_ptr(at))
      return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "missing");
    if ((f->kind == K_STRS || f->kind == K_FACTS || f->kind == K_KEYS) && !load_ptr(at) &&
        load_size(base + f->aux) > 0)
      return -EINVAL;
    if (!field_present(f, base))
      continue;
    switch (f->kind) {
    case K_UINT:
      rc = check_uint(f, load_uint(at, f->width), p, diag);
      break;
    case K_INT:
      rc = check_int(f, load_int(at, f->width), p, diag);
      break;
    case K_STR: {
      const char *str = load_ptr(at);
      rc = check_str(f, str, strlen(str), p, diag);
      break;
    }
    case K_BIN: {
      struct msg_bytes b;
      memcpy(&b, at, sizeof(b));
      if (b.len > 0 && !b.data)
        return -EINVAL;
      rc = check_len(f, b.len, p, diag);
      break;
    }
    case K_STRS: {
      char **v = load_ptr(at);
      size_t n = load_size(base + f->aux);
      if (n > 0 && !v)
        return -EINVAL;
      rc = check_len(f, n, p, diag);
      struct field elem = *f;
      elem.kind = K_STR;
      elem.lo = 0;
      elem.hi = f->elem_max;
      for (size_t j = 0; rc == 0 && j < n; j++) {
        if (!v[j])
          return -EINVAL;
        rc = check_str(&elem, v[j], strlen(v[j]), p, diag);
      }
      break;
    }
    case K_KEYS: {
      size_t n = load_size(base + f->aux);
      if (n > 0 && !load_ptr(at))
        return -EINVAL;
      rc = check_len(f, n, p, diag);
      break;
    }
    case K_ENUM: {
      unsigned v;
      memcpy(&v, at, sizeof(v));
      if (v >= f->n_names)
        return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "unknown value");
      break;
    }
    case K_MAP: {
      struct path sub = {p->type, f->key};
      rc = chk_fields(f->sub, at, &sub, diag);
      break;
    }
    case K_FACTS: {
      const struct msg_fact *v = load_ptr(at);
      size_t n = load_size(base + f->aux);
      rc = check_len(f, n, p, diag);
      struct field kf = {
          .key = f->key, .kind = K_STR, .fmt = FMT_TOKEN, .lo = 1, .hi = MSG_FACT_KEY_MAX};
      struct field vf = {.key = f->key, .kind = K_STR, .fmt = f->fmt, .lo = 0, .hi = f->elem_max};
      for (size_t j = 0; rc == 0 && j < n; j++) {
        if (!v[j].key || !v[j].value)
          return -EINVAL;
        for (size_t k = 0; k < j; k++)
          if (strcmp(v[k].key, v[j].key) == 0)
            return DIAG(diag, CORDON_E_PROTOCOL, p, f->key, "duplicate key");
        rc = check_str(&kf, v[j].key, strlen(v[j].key), p, diag);
        if (rc == 0)
          rc = check_str(&vf, v[j].value, strlen(v[j].value), p, diag);
      }
      break;
    }
    default:
      break;
    }
    if (rc < 0)
      return rc;
  }
  return 0;
}

/* The packer's sink: a caller buffer, a counter (buf NULL) or an exact
 * allocation. Never grows past MSG_ENCODED_MAX. */
struct wbuf {
  uint8_t *buf;
  size_t len;
  size_t cap;
  int err;
};

static int wbuf_write(void *data, const char *p, size_t n) {
  struct wbuf *w = data;
  if (n > MSG_ENCODED_MAX - w->len) {
    w->err = CORDON_E_LIMIT;
    return -1;
  }
  if (w->buf) {
    if (n > w->cap - w->len) {
      w->err = -ENOBUFS;
      return -1;
    }
    memcpy(w->buf + w->len, p, n);
  }
  w->len += n;
  return 0;
}

static int pk_str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  if (msgpack_pack_str(pk, n) < 0)
    return -1;
  return msgpack_pack_str_body(pk, s, n);
}

static int pk_bin(msgpack_packer *pk, const void *b, size_t n) {
  if (msgpack_pack_bin(pk, n) < 0)
    return -1;
  return n ? msgpack_pack_bin_body(pk, b, n) : 0;
}

static int pk_fields(msgpack_packer *pk, const struct schema *s, const uint8_t *base,
                     const char *type_name);

static int pk_value(msgpack_packer *pk, const struct field *f, const uint8_t *base) {
  const uint8_t *at = base + f->off;
  switch (f->kind) {
  case K_UINT:
    return msgpack_pack_uint64(pk, load_uint(at, f->width));
  case K_INT:
    return msgpack_pack_int64(pk, load_int(at, f->width));
  case K_BOOL:
    return load_bool(at) ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
  case K_STR:
    return pk_str(pk, load_ptr(at));
  case K_BINFIX:
    return pk_bin(pk, at, (size_t)f->hi);
  case K_BIN: {
    struct msg_bytes b;
    memcpy(&b, at, sizeof(b));
    return pk_bin(pk, b.data, b.len);
  }
  case K_STRS: {
    char **v = load_ptr(at);
    size_t n = load_size(base + f->aux);
    if (msgpack_pack_array(pk, n) < 0)
      return -1;
    for (size_t i = 0; i < n; i++)
      if (pk_str(pk, v[i]) < 0)
        return -1;
    return 0;
  }
  case K_KEYS: {
    const uint8_t(*k)[MSG_KEY_LEN] = load_ptr(at);
    size_t n = load_size(base + f->aux);
    if (msgpack_pack_array(pk, n) < 0)
      return -1;
    for (size_t i = 0; i < n; i++)
      if (pk_bin(pk, k[i], MSG_KEY_LEN) < 0)
        return -1;
    return 0;
  }
  case K_ENUM: {
    unsigned v;
    memcpy(&v, at, sizeof(v));
    return pk_str(pk, f->names[v]);
  }
  case K_MAP:
    return pk_fields(pk, f->sub, at, NULL);
  case K_FACTS: {
    const struct msg_fact *v = load_ptr(at);
    size_t n = load_size(base + f->aux);
    if (msgpack_pack_map(pk, n) < 0)
      return -1;
    for (size_t i = 0; i < n; i++)
      if (pk_str(pk, v[i].key) < 0 || pk_str(pk, v[i].value) < 0)
        return -1;
    return 0;
  }
  default:
    return -1;
  }
}

/* A map of the present fields, preceded by "t" when type_name is set. */
static int pk_fields(msgpack_packer *pk, const struct schema *s, const uint8_t *base,
                     const char *type_name) {
  size_t n = type_name ? 1 : 0;
  for (unsigned i = 0; i < s->n; i++)
    if (s->fields[i].presence != P_OPTIONAL || field_present(&s->fields[i], base))
      n++;
  if (msgpack_pack_map(pk, n) < 0)
    return -1;
  if (type_name && (pk_str(pk, "t") < 0 || pk_str(pk, type_name) < 0))
    return -1;
  for (unsigned i = 0; i < s->n; i++) {
    const struct field *f = &s->fields[i];
    if (!field_present(f, base)) {
      if (f->presence == P_OPTIONAL)
        continue;
      if (pk_str(pk, f->key) < 0 || msgpack_pack_nil(pk) < 0)
        return -1;
      continue;
    }
    if (pk_str(pk, f->key) < 0 || pk_value(pk, f, base) < 0)
      return -1;
  }
  return 0;
}

static int enc_check(const struct msg *m, const struct type_desc **out_td,
                     struct cordon_diag *diag) {
  if (!m)
    return -EINVAL;
  const struct type_desc *td = type_find(m->type);
  if (!td)
    return cordon_diag_set(diag, -EINVAL, "msg: unknown type %d", (int)m->type);
  struct path p = {td->name, NULL};
  int rc = chk_fields(&td->schema, (const uint8_t *)&m->hello, &p, diag);
  if (rc < 0)
    return rc;
  rc = check_rules(m, diag);
  if (rc < 0)
    return rc;
  *out_td = td;
  return 0;
}

static int enc_run(const struct msg *m, const struct type_desc *td, struct wbuf *w) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, w, wbuf_write);
  if (pk_fields(&pk, &td->schema, (const uint8_t *)&m->hello, td->name) < 0)
    return w->err ? w->err : CORDON_E_INTERNAL;
  return 0;
}

int msg_encode(const struct msg *m, uint8_t *buf, size_t cap, size_t *out_len,
               struct cordon_diag *diag) {
  const struct type_desc *td = NULL;
  if ((!buf && cap > 0) || !out_len)
    return -EINVAL;
  int rc = enc_check(m, &td, diag);
  if (rc < 0)
    return rc;
  uint8_t dummy;
  struct wbuf w = {buf ? buf : &dummy, 0, cap, 0};
  rc = enc_run(m, td, &w);
  if (rc < 0)
    return cordon_diag_set(diag, rc, "msg %s: encoding does not fit", td->name);
  *out_len = w.len;
  return 0;
}

int msg_encode_alloc(const struct msg *m, uint8_t **out_buf, size_t *out_len,
                     struct cordon_diag *diag) {
  const struct type_desc *td = NULL;
  if (!out_buf || !out_len)
    return -EINVAL;
  int rc = enc_check(m, &td, diag);
  if (rc < 0)
    return rc;
  struct wbuf count = {NULL, 0, 0, 0};
  rc = enc_run(m, td, &count);
  if (rc < 0)
    return cordon_diag_set(diag, rc, "msg %s: encoding too large", td->name);
  uint8_t *buf = malloc(count.len);
  if (!buf)
    return -ENOMEM;
  struct wbuf w = {buf, 0, count.len, 0};
  rc = enc_run(m, td, &w);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  *out_buf = buf;
  *out_len = w.len;
  return 0;
}

/* ---- names and helpers ------------------------------------------------- */

const char *msg_type_name(enum msg_type type) {
  const struct type_desc *td = type_find(type);
  return td ? td->name : NULL;
}

unsigned msg_type_senders(enum msg_type type) {
  const struct type_desc *td = type_find(type);
  return td ? td->senders : 0;
}

const char *msg_level_name(enum msg_level level) {
  return (unsigned)level < COUNT(level_names) ? level_names[level] : NULL;
}

const char *msg_enforce_name(enum msg_enforce how) {
  return (unsigned)how < COUNT(enforce_names) ? enforce_names[how] : NULL;
}

const char *msg_role_name(enum msg_role role) {
  return (unsigned)role < COUNT(role_names) ? role_names[role] : NULL;
}

const char *msg_stream_name(enum msg_stream stream) {
  return (unsigned)stream < COUNT(stream_names) ? stream_names[stream] : NULL;
}

int msg_version_choose(uint16_t peer_min, uint16_t peer_max, uint16_t our_min, uint16_t our_max,
                       uint16_t *out_version) {
  if (!out_version)
    return -EINVAL;
  if (peer_min == 0 || our_min == 0 || peer_min > peer_max || our_min > our_max)
    return CORDON_E_PROTOCOL;
  uint16_t hi = peer_max < our_max ? peer_max : our_max;
  uint16_t lo = peer_min > our_min ? peer_min : our_min;
  if (hi < lo)
    return CORDON_E_PROTOCOL;
  *out_version = hi;
  return 0;
}

void msg_keys_signed_data(const struct msg_keys *k, uint8_t out[MSG_KEYS_SIGNED_LEN]) {
  uint8_t *p = out;
  memcpy(p, MSG_KEYS_DOMAIN, sizeof(MSG_KEYS_DOMAIN)); /* with its NUL */
  p += sizeof(MSG_KEYS_DOMAIN);
  for (int i = 7; i >= 0; i--)
    *p++ = (uint8_t)(k->serial >> (8 * i));
  memcpy(p, k->ticket_key, MSG_KEY_LEN);
  p += MSG_KEY_LEN;
  memcpy(p, k->publisher_key, MSG_KEY_LEN);
}
