/* The JSON the admin API answers for devices and jobs, and the command
 * line prints with --json: one shape whether the daemon answered or the
 * command read the database itself (no daemon: online is null, unknown).
 * docs/protocol/admin.md lists the keys. Every function returns a new
 * reference, NULL when out of memory; online is stolen (json_true(),
 * json_false() or json_null()). */
#ifndef CORDON_SERVER_ADMIN_VIEW_H
#define CORDON_SERVER_ADMIN_VIEW_H

#include <jansson.h>

#include "server/db.h"

/* {"id", "name", "owner", "platform", "best_level", "online", "last_seen",
 * "state", "labels"} */
json_t *admin_view_device(const struct server_db_device *d, json_t *online);
/* {"id", "user", "device", "state", "error", "created", "updated",
 * "device_online"} */
json_t *admin_view_job_summary(const struct server_db_job *j, json_t *online);
/* {"id", "user", "device", "state", "error", "result", "device_online",
 * "created", "updated", "deadline", "queue_expires", "where", "args"} */
json_t *admin_view_job(const struct server_db_job *j, json_t *online);

#endif
