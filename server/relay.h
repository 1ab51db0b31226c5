/* The text of an event relayed between a cluster's instances through
 * PostgreSQL NOTIFY (server/cluster.c; docs/ARCHITECTURE.md, "Cluster"):
 * one payload per notification, fields separated by one space,
 *
 *   cordon1 INSTANCE SEQ state   JOB STATE DEVICE USER CODE MAC
 *   cordon1 INSTANCE SEQ output  JOB DEVICE USER STREAM OFFSET BASE64 MAC
 *   cordon1 INSTANCE SEQ online  DEVICE USER MAC
 *   cordon1 INSTANCE SEQ offline DEVICE USER MAC
 *
 * "cordon1" is the version; INSTANCE the sender's id (32 lower-case hex);
 * SEQ its count of payloads (decimal, so that no two are the same: the
 * database folds identical payloads of one transaction into one); JOB and
 * DEVICE ids (32 lower-case hex); USER a user name ([A-Za-z0-9._-],
 * SERVER_DB_NAME_MAX); STATE a job state's name; CODE an error code
 * ([a-z0-9_-], SERVER_DB_CODE_MAX); "-" for a field the event has not
 * (JOB never, DEVICE for online/offline never); STREAM 1 (stdout) or 2
 * (stderr); OFFSET where the data starts in its stream (decimal); BASE64
 * the bytes (RFC 4648, padded), 1 to RELAY_CHUNK_MAX of them; MAC the
 * keyed BLAKE2b-128 (32 lower-case hex) of everything before its space,
 * under the cluster's relay key (relay_key_derive): any role that may
 * connect to the database may NOTIFY on any channel (PostgreSQL has no
 * permission on channels), and only a holder of the cluster's identity
 * makes a payload the servers take.
 *
 * PostgreSQL takes payloads shorter than 8000 bytes: an output event is
 * split into chunks of at most RELAY_CHUNK_MAX bytes, each a payload with
 * its own offset, in order. Every payload is printable ASCII without a
 * quote or a backslash (and so is safe in an array literal).
 *
 * Pure: no I/O, no allocation. */
#ifndef CORDON_SERVER_RELAY_H
#define CORDON_SERVER_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/id.h"
#include "server/db.h"
#include "server/events.h"

#define RELAY_VERSION "cordon1"
#define RELAY_PAYLOAD_MAX 7999u /* bytes, NUL not counted: PostgreSQL's limit is < 8000 */
#define RELAY_CHUNK_MAX 5600u   /* bytes of output per payload (7468 in base64) */
#define RELAY_KEY_LEN 32u
#define RELAY_MAC_LEN 16u

/* The relay key from the secret every server of a cluster holds (the
 * Noise static private key: one identity, docs/SECURITY.md), len bytes
 * (16 to 64). -EINVAL for another length. */
int relay_key_derive(const uint8_t *secret, size_t len, uint8_t out_key[RELAY_KEY_LEN]);

/* A payload's storage: what relay_encode writes, one at a time. */
struct relay_payload {
  char text[RELAY_PAYLOAD_MAX + 1];
  size_t len;
};

/* A decoded payload: ev points into the struct (valid while it lives). */
struct relay_msg {
  char instance[CORDON_ID_HEX_SIZE];
  uint64_t seq;
  struct event ev;
  char job_id[CORDON_ID_HEX_SIZE];
  char device_id[CORDON_ID_HEX_SIZE];
  char user[SERVER_DB_NAME_MAX + 1];
  char state[16];
  char code[SERVER_DB_CODE_MAX + 1];
  uint8_t data[RELAY_CHUNK_MAX];
};

typedef int (*relay_emit_fn)(void *ctx, const struct relay_payload *p);

/* Encode ev as one payload (several for output: RELAY_CHUNK_MAX bytes
 * each) from instance, numbering them *seq, *seq + 1, ... (*seq is
 * advanced past those emitted). emit is called for each in order; a
 * negative return stops and is returned. 0 (output of no bytes: nothing
 * emitted), -EINVAL for an event whose fields do not fit the format (a
 * name with other characters, an unknown kind), or emit's error. */
int relay_encode(const uint8_t key[RELAY_KEY_LEN], const char *instance, uint64_t *seq,
                 const struct event *ev, relay_emit_fn emit, void *ctx);

/* Whether payload (len bytes) is one of instance's: only its head is
 * looked at. */
bool relay_is_from(const char *payload, size_t len, const char *instance);

/* Decode one payload of len bytes (not necessarily NUL-terminated) into
 * *out: its length checked first, then its MAC under key, then every
 * field. 0, or -EINVAL with *out_why (may be NULL) a static phrase saying
 * what was wrong; *out is then undefined. */
int relay_decode(const uint8_t key[RELAY_KEY_LEN], const char *payload, size_t len,
                 struct relay_msg *out, const char **out_why);

#endif
