/* JSON views of devices and jobs (server/admin_view.h). */
#include "server/admin_view.h"

#include "server/cli.h"

static const char *device_state_name(enum server_db_device_state s) {
  return s == SERVER_DB_DEVICE_ACTIVE ? "active" : "revoked";
}

json_t *admin_view_device(const struct server_db_device *d, json_t *online) {
  return json_pack("{s:s, s:s, s:s, s:s?, s:s?, s:o, s:o, s:s, s:o}", "id", d->id, "name", d->name,
                   "owner", d->owner, "platform", d->platform[0] ? d->platform : NULL, "best_level",
                   d->has_level ? sandbox_level_name(d->best_level) : NULL, "online",
                   online ? online : json_null(), "last_seen", server_cli_json_time(d->last_seen),
                   "state", device_state_name(d->state), "labels",
                   server_db_labels_to_json(&d->labels));
}

json_t *admin_view_job_summary(const struct server_db_job *j, json_t *online) {
  return json_pack(
      "{s:s, s:s, s:s?, s:s, s:s?, s:o, s:o, s:o}", "id", j->id, "user", j->user, "device",
      j->device_id[0] ? j->device_id : NULL, "state", server_db_job_state_name(j->state), "error",
      j->error[0] ? j->error : NULL, "created", server_cli_json_time(j->created), "updated",
      server_cli_json_time(j->updated), "device_online", online ? online : json_null());
}

json_t *admin_view_job(const struct server_db_job *j, json_t *online) {
  json_t *o = server_db_job_to_json(j);
  if (!o) {
    json_decref(online);
    return NULL;
  }
  json_t *args = json_loads(j->args_json ? j->args_json : "[]", 0, NULL);
  json_object_set_new(o, "device_online", online ? online : json_null());
  json_object_set_new(o, "created", server_cli_json_time(j->created));
  json_object_set_new(o, "updated", server_cli_json_time(j->updated));
  json_object_set_new(o, "deadline", server_cli_json_time(j->deadline));
  json_object_set_new(o, "queue_expires", server_cli_json_time(j->queue_expires));
  json_object_set_new(o, "where", server_db_labels_to_json(&j->where));
  json_object_set_new(o, "args", args ? args : json_null());
  return o;
}
