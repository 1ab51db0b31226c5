/* Pairing on the daemon's listener: a session in pairing mode (Noise
 * pairing pattern, docs/protocol/pairing.md) proves knowledge of a code and
 * becomes a paired device. Reached only through the session hooks
 * (server/session.h); calls back only session_send and session_goaway.
 *
 * Every failure looks the same to the agent: a server proof under a key it
 * cannot match, then goaway pairing_failed. Each address gets at most
 * SERVER_PAIR_RATE_MAX pairing attempts per SERVER_PAIR_RATE_WINDOW_MS; a
 * failed proof costs the code one attempt, counted when the session
 * closes. */
#ifndef CORDON_SERVER_PAIR_H
#define CORDON_SERVER_PAIR_H

#include <stdint.h>

#include "proto/msg.h"
#include "server/db.h"
#include "server/session.h"

#define SERVER_PAIR_RATE_MAX 10          /* pairing connections per address ... */
#define SERVER_PAIR_RATE_WINDOW_MS 60000 /* ... per minute */

struct pair_ctx;

/* db, ticket_pk and publisher_pk (MSG_KEY_LEN bytes each, sent in
 * pair_done) are borrowed for its lifetime. 0 or -ENOMEM. */
int pair_new(struct server_db *db, const uint8_t *ticket_pk, const uint8_t *publisher_pk,
             struct pair_ctx **out_ctx);
void pair_free(struct pair_ctx *p); /* NULL-safe */
/* run --require-approval: every device paired from now on is pending. */
void pair_set_require_approval(struct pair_ctx *p, bool on);

/* The session hooks' pair_hello, pair_proof and (part of) closed. */
void pair_on_hello(struct pair_ctx *p, struct session *s, const struct msg_hello *h);
int pair_on_proof(struct pair_ctx *p, struct session *s, const struct msg_pair_proof *proof);
void pair_on_closed(struct pair_ctx *p, struct session *s);

#endif
