/* The result spool of `cordon-agent run`: a result is in the spool as soon
 * as it is sent (written and renamed into place right after it is queued
 * on the connection, before the loop reads the ack; synced on a side
 * thread, agent/bgsync.c) and is sent again on every new session until the
 * server acks it, so every result is delivered at least once, across
 * restarts of either side.
 *
 *   SPOOL/<id>.running  created (not synced) when a job is accepted;
 *                       removed once its .result is durable (or at the ack)
 *   SPOOL/<id>.result   the encoded result message (rename, then fsync of
 *                       it and of SPOOL off the loop) once it is sent;
 *                       removed at the server's ack
 *   SPOOL/.<name>.tmp   a write in progress (core_write_file_atomic); one
 *                       left by a crash is finished or removed at start
 * A .running without a .result, or with an empty one (a crash of the
 * machine before the sync), means the agent died while the job ran.
 *
 * SPOOL is CONFIG/spool (0700). Ids are raw CORDON_ID_LEN bytes and become
 * their lowercase hex in the names, so nothing from the wire reaches a path
 * unchecked. Files only: nothing here sends, decodes or logs; failures are
 * returned as -errno. The struct is plain storage (no release); use it from
 * one thread. */
#ifndef CORDON_AGENT_SPOOL_H
#define CORDON_AGENT_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/id.h"

struct agent_spool {
  char dir[3072]; /* short enough for SPOOL/<id>.<ext> in PATH_MAX */
};

/* Name CONFIG/spool (a longer path is cut) and make it, 0700: 0 or -errno
 * (the names are set either way). */
int agent_spool_init(struct agent_spool *sp, const char *config_dir);
/* The job was accepted: SPOOL/<id>.running, empty. 0 or -errno. */
int agent_spool_mark_running(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN]);
/* Store the job's encoded result message as SPOOL/<id>.result (visible on
 * return), then drop its .running: on a side thread once the result and
 * SPOOL are synced, or at once when the store failed (the job is over
 * either way). 0 or the store's -errno. */
int agent_spool_put_result(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN],
                           const uint8_t *msg, size_t len);
/* The server has the result: forget it (its .result and .running). */
void agent_spool_ack(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN]);
/* Is a result of job id stored? */
bool agent_spool_has_result(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN]);
/* The stored result of job id (1..max bytes) into *out_msg (malloc'd; the
 * caller frees it) and *out_len: 0, or -errno (-ENOENT: none stored). */
int agent_spool_get_result(const struct agent_spool *sp, const uint8_t id[CORDON_ID_LEN],
                           size_t max, uint8_t **out_msg, size_t *out_len);
/* Call fn with each stored result of 1..max bytes (msg valid during the
 * call only); unreadable, empty and larger files are skipped. */
void agent_spool_each_result(const struct agent_spool *sp, size_t max,
                             void (*fn)(void *ctx, const uint8_t *msg, size_t len), void *ctx);
/* Call fn with the id of each job that has a .running and no .result (the
 * agent died while it ran). fn may put that job's result. */
void agent_spool_each_orphan(const struct agent_spool *sp,
                             void (*fn)(void *ctx, const uint8_t id[CORDON_ID_LEN]), void *ctx);
/* At start, before agent_spool_each_orphan: every SPOOL/.<name>.tmp a
 * crash left is removed; a .<id>.running.tmp (the job was accepted, its
 * marker not yet renamed) first becomes SPOOL/<id>.running, unless the
 * job has a .running or .result already. Returns how many temps went. */
int agent_spool_recover_temps(const struct agent_spool *sp);

#endif
