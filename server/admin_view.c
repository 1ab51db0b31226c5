/* JSON views of devices, jobs and pairing codes (server/admin_view.h). */
#include "server/admin_view.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "server/admin_ops.h"
#include "server/cli.h"

const char *admin_view_device_state(enum server_db_device_state s) {
  return s == SERVER_DB_DEVICE_ACTIVE    ? "active"
         : s == SERVER_DB_DEVICE_PENDING ? "pending"
                                         : "revoked";
}

json_t *admin_view_device(const struct server_db_device *d, json_t *online) {
  return json_pack("{s:s, s:s, s:s, s:s?, s:s?, s:o, s:o, s:s, s:o}", "id", d->id, "name", d->name,
                   "owner", d->owner, "platform", d->platform[0] ? d->platform : NULL, "best_level",
                   d->has_level ? sandbox_level_name(d->best_level) : NULL, "online",
                   online ? online : json_null(), "last_seen", server_cli_json_time(d->last_seen),
                   "state", admin_view_device_state(d->state), "labels",
                   server_db_labels_to_json(&d->labels));
}

static json_t *same_online(void *ctx, const char *device_id) {
  (void)device_id;
  return json_incref(ctx);
}

int admin_view_device_show(struct server_db *db, const struct server_db_device *d, json_t *online,
                           json_t **out, struct cordon_diag *diag) {
  if (!online)
    online = json_null();
  struct server_db_job_list running = {0}, recent = {0};
  struct server_db_job_filter f = {.device_id = d->id, .limit = ADMIN_VIEW_RECENT_JOBS};
  int err = server_db_job_list_active_on_device(db, d->id, &running, diag);
  if (!err)
    err = server_db_job_list_filtered(db, &f, &recent, diag);
  if (err) {
    server_db_job_list_release(&running);
    json_decref(online);
    return err;
  }
  json_t *facts = d->facts_json ? json_loads(d->facts_json, 0, NULL) : NULL;
  if (!json_is_object(facts)) {
    json_decref(facts);
    facts = json_object();
  }
  json_t *o = admin_view_device(d, json_incref(online));
  if (o &&
      (json_object_set_new(o, "downgrade_reason",
                           d->downgrade_reason[0] ? json_string(d->downgrade_reason)
                                                  : json_null()) ||
       json_object_set_new(o, "max_jobs", json_integer(d->max_jobs)) ||
       json_object_set_new(o, "paired", server_cli_json_time(d->created)) ||
       json_object_set_new(o, "address", d->address[0] ? json_string(d->address) : json_null()) ||
       json_object_set_new(o, "facts", json_incref(facts)) ||
       json_object_set_new(o, "running_jobs",
                           admin_view_job_summaries(&running, same_online, online)) ||
       json_object_set_new(o, "recent_jobs",
                           admin_view_job_summaries(&recent, same_online, online)))) {
    json_decref(o);
    o = NULL;
  }
  json_decref(facts);
  json_decref(online);
  server_db_job_list_release(&running);
  server_db_job_list_release(&recent);
  if (!o)
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  *out = o;
  return 0;
}

json_t *admin_view_job_summary(const struct server_db_job *j, json_t *online) {
  if (!online)
    online = json_null();
  if (!j->device_id[0]) { /* no device: nothing to be online */
    json_decref(online);
    online = json_null();
  }
  char pkg[2 * SERVER_DB_NAME_MAX + 2];
  snprintf(pkg, sizeof(pkg), "%s@%s", j->package_name, j->package_version);
  json_t *r = j->result_json ? server_db_job_result_to_json(j) : NULL;
  const char *code = j->error[0]
                         ? j->error
                         : json_string_value(json_object_get(json_object_get(r, "error"), "code"));
  json_t *ec = json_object_get(r, "exit_code"), *sig = json_object_get(r, "signal");
  json_t *o =
      json_pack("{s:s, s:s, s:s?, s:s?, s:s, s:s?, s:s?, s:O?, s:O?, s:o, s:o, s:o}", "id", j->id,
                "user", j->user, "device", j->device_id[0] ? j->device_id : NULL, "device_name",
                j->device_name[0] ? j->device_name : NULL, "state",
                server_db_job_state_name(j->state), "package", j->package_name[0] ? pkg : NULL,
                "error", code, "exit_code", json_is_integer(ec) ? ec : NULL, "signal",
                json_is_integer(sig) ? sig : NULL, "created", server_cli_json_time(j->created),
                "updated", server_cli_json_time(j->updated), "device_online", online);
  json_decref(r);
  return o;
}

/* a job's reply line (dispatch --wait, job, wait, the end of a follow)
 * carries its whole stored result: the largest fits with room to spare */
_Static_assert(ADMIN_REPLY_MAX >= SERVER_DB_RESULT_MAX + (1u << 20),
               "a reply line holds the largest result");

json_t *admin_view_job(const struct server_db_job *j, json_t *online) {
  if (!online)
    online = json_null();
  if (!j->device_id[0]) {
    json_decref(online);
    online = json_null();
  }
  json_t *o = server_db_job_to_json(j);
  if (!o) {
    json_decref(online);
    return NULL;
  }
  char hash[2 * SERVER_DB_HASH_SIZE + 1];
  sodium_bin2hex(hash, sizeof(hash), j->package_hash, sizeof(j->package_hash));
  json_t *args = json_loads(j->args_json ? j->args_json : "[]", 0, NULL);
  int bad =
      json_object_set_new(o, "device_name",
                          j->device_name[0] ? json_string(j->device_name) : json_null()) ||
      json_object_set_new(o, "device_online", online) ||
      json_object_set_new(o, "package",
                          j->package_name[0]
                              ? json_pack("{s:s, s:s, s:s}", "name", j->package_name, "version",
                                          j->package_version, "hash", hash)
                              : json_pack("{s:n, s:n, s:s}", "name", "version", "hash", hash)) ||
      json_object_set_new(o, "created", server_cli_json_time(j->created)) ||
      json_object_set_new(o, "updated", server_cli_json_time(j->updated)) ||
      json_object_set_new(o, "deadline", server_cli_json_time(j->deadline)) ||
      json_object_set_new(o, "queued_until", server_cli_json_time(j->queue_expires)) ||
      json_object_set_new(o, "where", server_db_labels_to_json(&j->where)) ||
      json_object_set_new(o, "args", args ? args : json_array());
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static const char *code_state(const struct server_db_code_info *c) {
  if (c->state == SERVER_DB_CODE_USED)
    return "used";
  if (c->state == SERVER_DB_CODE_BURNED || c->attempts_left <= 0)
    return "burned";
  return c->expired ? "expired" : "live";
}

json_t *admin_view_code(const struct server_db_code_info *c) {
  return json_pack("{s:s, s:s, s:s, s:i, s:o, s:o, s:s?, s:o}", "id", c->id, "user", c->user,
                   "state", code_state(c), "attempts_left", c->attempts_left, "created",
                   server_cli_json_time(c->created), "expires", server_cli_json_time(c->expires),
                   "last_failure", c->last_failure[0] ? c->last_failure : NULL, "last_failure_at",
                   server_cli_json_time(c->last_failure_at));
}

/* Append o (stolen) to arr; on failure arr is released: NULL. */
static json_t *append(json_t *arr, json_t *o) {
  if (arr && json_array_append_new(arr, o) == 0)
    return arr;
  if (!arr)
    json_decref(o);
  json_decref(arr);
  return NULL;
}

static json_t *online_of(admin_view_online_fn *online, void *ctx, const char *device_id) {
  return online ? online(ctx, device_id) : json_null();
}

json_t *admin_view_devices(const struct server_db_device_list *l, admin_view_online_fn *online,
                           void *ctx) {
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < l->count; i++)
    arr = append(arr, admin_view_device(&l->items[i], online_of(online, ctx, l->items[i].id)));
  return arr;
}

json_t *admin_view_job_summaries(const struct server_db_job_list *l, admin_view_online_fn *online,
                                 void *ctx) {
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < l->count; i++)
    arr = append(
        arr, admin_view_job_summary(&l->items[i], online_of(online, ctx, l->items[i].device_id)));
  return arr;
}

json_t *admin_view_codes(const struct server_db_code_list *l) {
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < l->count; i++)
    arr = append(arr, admin_view_code(&l->items[i]));
  return arr;
}
