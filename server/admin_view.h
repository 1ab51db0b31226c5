/* The JSON objects of devices, jobs and pairing codes: what the admin API
 * answers and what the command line prints with --json, built here once
 * for both (the daemon's handlers, and a command's own reading of the
 * database when no daemon runs, when online is null: unknown). The command
 * line's text views are rendered from these objects.
 * docs/protocol/admin.md lists the keys. Every function returns a new
 * reference, NULL when out of memory; online is stolen (json_true(),
 * json_false() or json_null()). */
#ifndef CORDON_SERVER_ADMIN_VIEW_H
#define CORDON_SERVER_ADMIN_VIEW_H

#include <jansson.h>

#include "server/db.h"

#define ADMIN_VIEW_RECENT_JOBS 10 /* device show: the newest jobs of the device */

/* "active", "pending" or "revoked". */
const char *admin_view_device_state(enum server_db_device_state s);

/* One `devices --json` row: {"id", "name", "owner", "platform",
 * "best_level", "online", "last_seen", "state", "labels"} */
json_t *admin_view_device(const struct server_db_device *d, json_t *online);

/* `device show --json`: admin_view_device's keys and "downgrade_reason",
 * "max_jobs", "paired", "address", "facts" (the agent's probes, {} when
 * none), "running_jobs" and "recent_jobs" (admin_view_job_summary rows, the
 * newest ADMIN_VIEW_RECENT_JOBS), read from db. 0 and *out, or a database
 * error with diag. */
int admin_view_device_show(struct server_db *db, const struct server_db_device *d, json_t *online,
                           json_t **out, struct cordon_diag *diag);

/* One `jobs --json` row: {"id", "user", "device", "device_name", "state",
 * "package" ("name@version" or null), "error" (the stable code: the job's,
 * else its result's; null when none), "exit_code", "signal" (the result's,
 * null when none), "created", "updated", "device_online"} */
json_t *admin_view_job_summary(const struct server_db_job *j, json_t *online);

/* `job --json`: the stored job (server_db_job_to_json: "id", "user",
 * "device", "state", "error", "result") and "device_name",
 * "device_online", "package" {"name", "version", "hash"}, "created",
 * "updated", "deadline", "queued_until", "where", "args". */
json_t *admin_view_job(const struct server_db_job *j, json_t *online);

/* Whether device_id is connected (a new reference: json_true(),
 * json_false() or json_null()); for the lists below. */
typedef json_t *admin_view_online_fn(void *ctx, const char *device_id);

/* The arrays of the objects above, one per item of l; online NULL: every
 * online is null (unknown). */
json_t *admin_view_devices(const struct server_db_device_list *l, admin_view_online_fn *online,
                           void *ctx);
json_t *admin_view_job_summaries(const struct server_db_job_list *l, admin_view_online_fn *online,
                                 void *ctx);
json_t *admin_view_codes(const struct server_db_code_list *l);

/* One `pair-code list --json` row: {"id", "user", "state" ("live", "used",
 * "burned" or "expired"), "attempts_left", "created", "expires",
 * "last_failure", "last_failure_at"}; never the secret. */
json_t *admin_view_code(const struct server_db_code_info *c);

#endif
