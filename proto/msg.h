/* Session messages: one msgpack map per transport record.
 *
 * Every message is a msgpack map with string keys; the key "t" names the
 * type. docs/protocol/messages.md lists every type and key with its msgpack
 * type, cap, presence and direction; this header is its C face.
 *
 * Decoding (msg_decode) is strict, and in this order:
 *   1. the record is at most MSG_ENCODED_MAX bytes;
 *   2. mpcheck_validate() with depth 8, str <= MSG_ARG_MAX, bin <=
 *      MSG_OUTPUT_MAX and at most MSG_ITEMS_MAX objects, so that msgpack-c
 *      never sees malformed input and allocates a bounded amount;
 *   3. msgpack-c unpacks it; the top is a map whose keys are all str;
 *   4. "t" must name a known type; every other key must belong to that type;
 *      no key appears twice; every required key is present;
 *   5. each value has the msgpack type of its field, integers are in range,
 *      strings are valid UTF-8 without NUL (and match the field's format),
 *      byte lengths and element counts are within the field's cap;
 *   6. the cross-field rules of the type hold (e.g. proto_min <= proto_max).
 * Errors: CORDON_E_LIMIT for a byte length, element count, nesting depth or
 * record size above a cap; CORDON_E_PROTOCOL for everything else that is
 * wrong with the bytes; -ENOMEM; -EINVAL for bad arguments. diag (may be
 * NULL) names the type and field.
 *
 * Ownership. A decoded struct msg owns all its strings and buffers (heap);
 * msg_release() frees them and zeroes the struct. A struct msg the caller
 * fills for msg_encode() points at the caller's memory and is only read;
 * never msg_release() it unless every pointer in it came from malloc().
 *
 * Encoding is deterministic: "t" first, then the keys in the order of
 * docs/protocol/messages.md; optional fields that are absent are omitted;
 * nullable fields are always present (nil when null); integers in their
 * shortest msgpack form. msg_encode() checks the struct by exactly the rules
 * of msg_decode() first, and fails with the code decoding would give, so it
 * never emits a record the peer must refuse.
 *
 * Pure: no I/O, no printing.
 */
#ifndef CORDON_PROTO_MSG_H
#define CORDON_PROTO_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/id.h"

/* Protocol versions this build speaks (hello/welcome negotiation). */
#define MSG_PROTO_VERSION_MIN 2 /* version 1 is retired (messages.md section 4) */
#define MSG_PROTO_VERSION_MAX 3
/* The first version with the `output` message (live job output). */
#define MSG_PROTO_VERSION_OUTPUT 2
/* The first version with welcome.servers (the cluster's addresses). */
#define MSG_PROTO_VERSION_SERVERS 3

/* Fixed sizes of binary fields. */
#define MSG_KEY_LEN 32  /* Ed25519 public key */
#define MSG_SIG_LEN 64  /* Ed25519 signature */
#define MSG_HASH_LEN 32 /* BLAKE2b-256 of the package index */
#define MSG_MAC_LEN 32  /* pairing proof MAC */

/* Caps (bytes unless stated). */
#define MSG_NAME_MAX 128     /* device and user names */
#define MSG_VERSION_MAX 64   /* agent_version */
#define MSG_PLATFORM_MAX 32  /* platform token */
#define MSG_CODE_MAX 64      /* error/goaway/downgrade codes */
#define MSG_PAIR_CODE_MAX 16 /* the public id part of a pairing code */
#define MSG_MECHANISM_MAX 128
#define MSG_TEXT_MAX 1024 /* human-readable messages */
#define MSG_ARGS_MAX 256  /* arguments per job (count) */
#define MSG_ARG_MAX 4096  /* bytes per argument */
#define MSG_CHUNK_MAX (64u << 10)
#define MSG_OUTPUT_MAX (1u << 20) /* stdout, stderr: each */
#define MSG_LIVE_MAX (16u << 10)  /* data of one `output` message */
#define MSG_TICKET_MAX 4096u      /* a version-1 ticket body is 161 bytes */
#define MSG_PUBLISHER_KEYS_MAX 16
#define MSG_FACTS_MAX 32       /* entries in hello.facts */
#define MSG_FACT_KEY_MAX 32    /* a fact's name: a token */
#define MSG_FACT_VALUE_MAX 256 /* a fact's value: a name (no control characters) */
#define MSG_SERVERS_MAX 16     /* entries in welcome.servers */
#define MSG_ADDR_MAX 255       /* one "host:port" of welcome.servers */
/* Objects per record (keys, values, containers), for the validator. */
#define MSG_ITEMS_MAX 1024
/* The largest encoded record. Every message that passes the field caps
 * encodes below it; it leaves room under FRAME_MAX_SESSION (2 MiB + 64 KiB)
 * for the 16-byte AEAD tag. */
#define MSG_ENCODED_MAX ((2u << 20) + (48u << 10))

enum msg_type {
  MSG_HELLO = 1,  /* agent -> server */
  MSG_WELCOME,    /* server -> agent */
  MSG_PING,       /* either */
  MSG_PONG,       /* either */
  MSG_JOB,        /* server -> agent */
  MSG_CHUNK,      /* server -> agent */
  MSG_RUNNING,    /* agent -> server */
  MSG_RESULT,     /* agent -> server */
  MSG_ACK,        /* server -> agent */
  MSG_CANCEL,     /* server -> agent */
  MSG_PAIR_PROOF, /* either (role says which) */
  MSG_PAIR_DONE,  /* server -> agent */
  MSG_KEYS,       /* server -> agent */
  MSG_UNPAIR,     /* agent -> server */
  MSG_GOAWAY,     /* either */
  MSG_ERROR,      /* either */
  MSG_OUTPUT,     /* agent -> server (version 2) */
};

/* Who may send a type: a bit set of these. */
#define MSG_FROM_AGENT 1u
#define MSG_FROM_SERVER 2u

/* Sandbox levels, ordered (a higher value is stronger). Wire strings:
 * "none", "contained", "isolated". */
enum msg_level {
  MSG_LEVEL_NONE = 0,
  MSG_LEVEL_CONTAINED = 1,
  MSG_LEVEL_ISOLATED = 2,
};

/* How one limit was enforced (docs/DESIGN.md section 5). Wire strings: "none",
 * "cgroup", "rlimit", "job", "tmpfs", "pid-namespace", "pgroup". */
enum msg_enforce {
  MSG_ENFORCE_NONE = 0,
  MSG_ENFORCE_CGROUP,
  MSG_ENFORCE_RLIMIT,
  MSG_ENFORCE_JOB,
  MSG_ENFORCE_TMPFS,
  MSG_ENFORCE_PID_NAMESPACE,
  MSG_ENFORCE_PGROUP,
};

/* A job's output streams. Wire strings: "stdout", "stderr". */
enum msg_stream {
  MSG_STREAM_STDOUT = 0,
  MSG_STREAM_STDERR = 1,
};

/* Pairing proof roles. Wire strings: "server", "agent". */
enum msg_role {
  MSG_ROLE_SERVER = 0,
  MSG_ROLE_AGENT = 1,
};

/* A byte string. data is NULL when len is 0 in decoded messages. */
struct msg_bytes {
  uint8_t *data;
  size_t len;
};

/* One probe result the agent reports (hello.facts): "bwrap_version" ->
 * "bubblewrap 0.8.0". */
struct msg_fact {
  char *key;   /* token, 1..MSG_FACT_KEY_MAX, unique within the map */
  char *value; /* name format, 0..MSG_FACT_VALUE_MAX */
};

struct msg_hello {
  uint16_t proto_min; /* 1..65535, <= proto_max */
  uint16_t proto_max;
  char *agent_version; /* printable ASCII, 1..MSG_VERSION_MAX */
  bool has_device_id;  /* optional: absent while pairing */
  uint8_t device_id[CORDON_ID_LEN];
  /* optional (NULL), pairing only: the public id part of the pairing code,
   * never its secret part (the server is not yet authenticated). Token of
   * 1..MSG_PAIR_CODE_MAX bytes, so a whole code does not fit. */
  char *pair_code;
  char *name;     /* optional (NULL): device name offered when pairing */
  char *platform; /* token, e.g. "linux" */
  enum msg_level best_level;
  char *downgrade_reason; /* nullable: NULL exactly when best_level is isolated */
  char *mechanism;        /* optional (NULL): e.g. "bwrap+seccomp+cgroup" */
  uint32_t max_jobs;      /* 1..1024 */
  bool has_sign_key;      /* optional: the device's receipt signing key */
  uint8_t sign_key[MSG_KEY_LEN];
  /* optional (NULL): a map of str to str on the wire, n_facts entries
   * (0..MSG_FACTS_MAX); present exactly when facts is not NULL */
  struct msg_fact *facts;
  size_t n_facts;
};

struct msg_welcome {
  uint16_t version; /* the chosen protocol version, >= 1 */
  uint64_t time_ms; /* server clock, ms since the Unix epoch */
  uint8_t server_id[CORDON_ID_LEN];
  uint8_t session_id[CORDON_ID_LEN];
  uint32_t ping_ms; /* ping interval the server expects, 10..3600000 */
  /* optional (NULL), version 3: the addresses of the cluster's servers,
   * n_servers (0..MSG_SERVERS_MAX) strings of msg_addr_parse()'s form;
   * present exactly when servers is not NULL */
  char **servers;
  size_t n_servers;
};

struct msg_ping { /* ping and pong */
  uint64_t nonce; /* a pong echoes its ping's nonce */
  /* optional: the sender's wall clock, ms since the epoch (the server sends
   * it in every ping and pong; the agent re-learns its clock offset) */
  bool has_time_ms;
  uint64_t time_ms;
};

struct msg_job {
  uint8_t job_id[CORDON_ID_LEN];
  struct msg_bytes ticket; /* the signed ticket body (proto/ticket.h), 1..MSG_TICKET_MAX */
  uint8_t ticket_sig[MSG_SIG_LEN];
  uint8_t pkg_hash[MSG_HASH_LEN];
  uint64_t pkg_size; /* >= 1: bytes the chunks will carry */
  char **args;       /* n_args strings (UTF-8, no NUL, <= MSG_ARG_MAX) */
  size_t n_args;     /* 0..MSG_ARGS_MAX */
};

struct msg_chunk {
  uint8_t job_id[CORDON_ID_LEN];
  uint64_t offset;       /* offset + data.len <= UINT64_MAX */
  struct msg_bytes data; /* 1..MSG_CHUNK_MAX */
};

/* Live output of a running job: advisory, the result stays the record. */
struct msg_output {
  uint8_t job_id[CORDON_ID_LEN];
  enum msg_stream stream;
  uint64_t offset;       /* bytes of that stream before data; offset + data.len <= UINT64_MAX */
  struct msg_bytes data; /* 1..MSG_LIVE_MAX */
};

struct msg_job_ref { /* running, ack, cancel */
  uint8_t job_id[CORDON_ID_LEN];
  /* ack only, optional: the result was NOT recorded (the server cannot
   * write now); keep it and send it again after retry_ms (1..86400000) */
  bool has_retry_ms;
  uint32_t retry_ms;
};

struct msg_limits_used {
  enum msg_enforce memory;
  enum msg_enforce processes;
  enum msg_enforce cpu;
  enum msg_enforce time;
  enum msg_enforce disk;
};

struct msg_sandbox {
  enum msg_level requested;
  bool has_level; /* nullable: null when refused before a level was chosen */
  enum msg_level level;
  char *mechanism;        /* nullable; names from the set, joined with '+' */
  char *downgrade_reason; /* nullable; when the level is known, NULL exactly when
                             it is isolated */
  struct msg_limits_used limits;
};

struct msg_fault {
  char *code;    /* token, 1..MSG_CODE_MAX */
  char *message; /* UTF-8, 0..MSG_TEXT_MAX */
};

struct msg_result {
  uint8_t job_id[CORDON_ID_LEN];
  uint8_t device_id[CORDON_ID_LEN];
  bool has_exit_code;          /* nullable */
  int64_t exit_code;           /* INT32_MIN..UINT32_MAX (Windows codes are DWORDs) */
  bool has_signal;             /* nullable; never both exit_code and signal */
  int32_t signal;              /* 1..127 */
  struct msg_bytes stdout_buf; /* wire key "stdout", 0..MSG_OUTPUT_MAX */
  struct msg_bytes stderr_buf; /* wire key "stderr", 0..MSG_OUTPUT_MAX */
  bool stdout_truncated;
  bool stderr_truncated;
  uint64_t wall_ms;
  bool timed_out;
  bool has_oom_killed; /* nullable: null when the mechanism cannot tell */
  bool oom_killed;
  uint32_t orphans_killed;
  bool has_kill_scope; /* optional: absent when nothing was killed */
  uint32_t kill_scope; /* enum kill_scope of core/result.h, 1..5 */
  struct msg_sandbox sandbox;
  bool has_error; /* nullable; required when neither exit_code nor signal */
  struct msg_fault error;
  /* optional: the receipt (docs/protocol/receipt.md) */
  bool has_started_ms; /* device clock, ms since the epoch; 0 = never started */
  uint64_t started_ms;
  bool has_ended_ms;
  uint64_t ended_ms;
  bool has_ticket_hash; /* absent when the device no longer has the ticket */
  uint8_t ticket_hash[MSG_HASH_LEN];
  bool has_receipt_sig;
  uint8_t receipt_sig[MSG_SIG_LEN];
};

struct msg_pair_proof {
  enum msg_role role;
  uint8_t mac[MSG_MAC_LEN];
};

struct msg_pair_done {
  uint8_t device_id[CORDON_ID_LEN];
  char *user;     /* name, the user the device now belongs to */
  char *name;     /* name, the device name as recorded */
  char *platform; /* token, as recorded */
  uint8_t ticket_key[MSG_KEY_LEN];
  uint8_t (*publisher_keys)[MSG_KEY_LEN];
  size_t n_publisher_keys; /* 1..MSG_PUBLISHER_KEYS_MAX */
};

struct msg_keys {
  uint64_t serial;                 /* increases with every rotation, >= 1 */
  uint8_t ticket_key[MSG_KEY_LEN]; /* the new keys */
  uint8_t publisher_key[MSG_KEY_LEN];
  uint8_t ticket_sig[MSG_SIG_LEN];    /* by the old ticket key */
  uint8_t publisher_sig[MSG_SIG_LEN]; /* by the old publisher key */
  /* optional (NULL): publisher keys the agent must no longer trust
   * (`keys retire`), every one retired so far, n_retired 0..16. Not
   * covered by the signatures: it can only take trust away, and the
   * session is the server's (docs/protocol/messages.md 6.13). */
  uint8_t (*retired)[MSG_KEY_LEN];
  size_t n_retired;
};

struct msg_goaway {
  char *code;        /* token, e.g. MSG_GOAWAY_VERSION_UNSUPPORTED */
  char *message;     /* UTF-8, 0..MSG_TEXT_MAX */
  bool has_retry_ms; /* optional */
  uint32_t retry_ms;
};

struct msg_error {
  char *code;
  char *message;
  bool has_job_id; /* optional */
  uint8_t job_id[CORDON_ID_LEN];
};

struct msg {
  enum msg_type type;
  union {
    struct msg_hello hello;
    struct msg_welcome welcome;
    struct msg_ping ping;
    struct msg_ping pong;
    struct msg_job job;
    struct msg_chunk chunk;
    struct msg_job_ref running;
    struct msg_result result;
    struct msg_job_ref ack;
    struct msg_job_ref cancel;
    struct msg_pair_proof pair_proof;
    struct msg_pair_done pair_done;
    struct msg_keys keys;
    struct msg_goaway goaway;
    struct msg_error error;
    struct msg_output output;
  };
};

/* goaway codes this protocol defines (others are allowed: any token). */
#define MSG_GOAWAY_VERSION_UNSUPPORTED "version_unsupported"
#define MSG_GOAWAY_SHUTDOWN "shutdown"
#define MSG_GOAWAY_REVOKED "revoked"
#define MSG_GOAWAY_UNPAIRED "unpaired"
#define MSG_GOAWAY_REPLACED "replaced"
#define MSG_GOAWAY_IDLE "idle_timeout"
#define MSG_GOAWAY_PAIRING_FAILED "pairing_failed"
#define MSG_GOAWAY_PROTOCOL "protocol_error"
#define MSG_GOAWAY_UNAVAILABLE "unavailable" /* the server cannot serve now: reconnect later */

/* Decode one record. On success *out_msg owns its memory (msg_release()).
 * Errors: see the top of this file. *out_msg is untouched on failure. */
int msg_decode(const uint8_t *buf, size_t len, struct msg *out_msg, struct cordon_diag *diag);

/* Encode m into buf (cap bytes). Returns 0 with *out_len, -ENOBUFS if buf
 * is too small (buf's contents are then unspecified), or the error
 * msg_decode() would return for m's content; -EINVAL for an unknown type or
 * a NULL array with a non-zero count. */
int msg_encode(const struct msg *m, uint8_t *buf, size_t cap, size_t *out_len,
               struct cordon_diag *diag);

/* Encode m into a new malloc()ed buffer of at most MSG_ENCODED_MAX bytes
 * that the caller frees. Errors as msg_encode(), -ENOMEM instead of
 * -ENOBUFS. */
int msg_encode_alloc(const struct msg *m, uint8_t **out_buf, size_t *out_len,
                     struct cordon_diag *diag);

/* Free what a decoded message owns and zero it. m may be NULL. */
void msg_release(struct msg *m);

/* The wire name of a type ("hello"), NULL if unknown. */
const char *msg_type_name(enum msg_type type);
/* MSG_FROM_AGENT and/or MSG_FROM_SERVER: who may send this type; 0 if the
 * type is unknown. A pair_proof's role must also match its sender. */
unsigned msg_type_senders(enum msg_type type);
/* Wire names of the enums, NULL for a value out of range. */
const char *msg_level_name(enum msg_level level);
const char *msg_enforce_name(enum msg_enforce how);
const char *msg_role_name(enum msg_role role);
const char *msg_stream_name(enum msg_stream stream);

/* A server address as welcome.servers carries it: "host:port", at most
 * MSG_ADDR_MAX bytes (n, no NUL needed), where host is a DNS name (labels
 * of letters, digits and '-', the last not all digits), a dotted-quad IPv4
 * address or an IPv6 address in brackets ("[::1]:7443"), and port is
 * 1..65535 in decimal without leading zeros. 0, with the host (brackets
 * removed, NUL-terminated, at most MSG_ADDR_MAX + 1 bytes) and the port
 * when out_host / out_port are not NULL; CORDON_E_LIMIT when longer than
 * MSG_ADDR_MAX; CORDON_E_PROTOCOL for anything else; -EINVAL for s NULL. */
int msg_addr_parse(const char *s, size_t n, char *out_host, uint16_t *out_port);

/* Version negotiation. Given the peer's hello range and ours, the highest
 * version both speak: 0 and *out_version, or CORDON_E_PROTOCOL when the
 * ranges do not meet (the server then sends goaway "version_unsupported")
 * or a range is empty or starts at 0. */
int msg_version_choose(uint16_t peer_min, uint16_t peer_max, uint16_t our_min, uint16_t our_max,
                       uint16_t *out_version);

/* The bytes the old keys sign in a keys message (domain-separated):
 *   "cordon keys v1" 0x00 | serial (8 bytes, big-endian) | ticket_key |
 *   publisher_key
 * Both signatures cover the same bytes. */
#define MSG_KEYS_DOMAIN "cordon keys v1"
#define MSG_KEYS_SIGNED_LEN (sizeof(MSG_KEYS_DOMAIN) + 8 + 2 * MSG_KEY_LEN)
void msg_keys_signed_data(const struct msg_keys *k, uint8_t out[MSG_KEYS_SIGNED_LEN]);

#endif
