/* Trusted publisher keys of the agent (docs/protocol/package.md, "Key files").
 *
 * A package verifies only against a key in a struct cpkg_trust. The agent
 * fills it from:
 *   - `--trust FILE` (exec): one publisher public key file, as written by
 *     `cordon-server init` to STATE/publisher.pub;
 *   - CONFIG/trusted/: every regular file named *.pub in the agent's config
 *     directory's `trusted` subdirectory (AGENT_TRUSTED_DIR). A missing
 *     directory means no keys from there; any malformed *.pub file is an
 *     error, never silently skipped.
 * Errors: CORDON_E_CONFIG_INVALID (diag names the file), CORDON_E_LIMIT (more
 * than CPKG_MAX_TRUSTED_KEYS keys), negated errno.
 */
#ifndef CORDON_AGENT_TRUST_H
#define CORDON_AGENT_TRUST_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "proto/cpkg.h"

#define AGENT_TRUSTED_DIR "trusted"

/* Add the key in the publisher public key file at path. */
int agent_trust_load_file(struct cpkg_trust *trust, const char *path, struct cordon_diag *diag);

/* Add the keys of every *.pub file in dir; 0 when dir does not exist. */
int agent_trust_load_dir(struct cpkg_trust *trust, const char *dir, struct cordon_diag *diag);

/* ---- the paired server's keys after `cordon-server keys rotate` ----
 *
 * pairing.json keeps the ticket key of the pairing and
 * trusted/server-publisher.pub its publisher key. Each `keys` message
 * (docs/protocol/messages.md 6.13) the agent accepts moves them on:
 *   CONFIG/server-keys.json (0600)  {"serial": N, "ticket_key": HEX}: the
 *                                    last serial accepted and the ticket key
 *                                    it named, which replaces pairing.json's
 *   trusted/server-publisher-N.pub   the publisher key announcement N named
 * and a retired key's server-publisher*.pub file is removed, so packages
 * it signed fail with unknown_key from then on. */
#define AGENT_SERVER_KEYS_FILE "server-keys.json"

struct agent_pairing;
struct msg_keys;

/* After agent_pairing_load: put the ticket key of the last accepted
 * announcement into p (nothing when none was accepted). 0, or
 * CORDON_E_CONFIG_INVALID for a malformed file. */
int agent_trust_server_keys_load(const char *dir, struct agent_pairing *p,
                                 struct cordon_diag *diag);

/* Apply one announcement. 0: ignored (its serial is not newer than the last
 * accepted); 1: accepted, the files above and p->ticket_key updated;
 * CORDON_E_SIGNATURE_INVALID: new keys whose signatures do not verify under
 * the current ticket key and one of the server's publisher keys this agent
 * trusts (nothing changed); negated errno. An announcement naming keys the
 * agent already trusts needs no signature check (a device paired after the
 * rotation); its `retired` list is applied either way: it only takes trust
 * away, and it comes over the paired server's authenticated session. */
int agent_trust_apply_keys(const char *dir, struct agent_pairing *p, const struct msg_keys *k,
                           struct cordon_diag *diag);
/* The same; *out_changed (may be NULL) tells whether the publisher keys in
 * trusted/ changed (a key file written or a retired one removed): false
 * on every result but an accepted announcement that did either. */
int agent_trust_apply_keys_changed(const char *dir, struct agent_pairing *p,
                                   const struct msg_keys *k, bool *out_changed,
                                   struct cordon_diag *diag);

/* The serial of the last announcement accepted, 0 for none (or a
 * malformed file). */
uint64_t agent_trust_keys_serial(const char *dir);

/* Forget them (unpair): server-keys.json and trusted/server-publisher-*.pub. */
void agent_trust_server_keys_remove(const char *dir);

#endif
