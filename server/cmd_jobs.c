/* cordon-server jobs [--user U] [--json] and job ID [--json] [--wait]: job
 * states and results. `job ID --json` prints {"id","user","device","state",
 * "error","result","device_online"} with result the stored docs/DESIGN.md
 * section 5 object or null, and device_online the running daemon's answer
 * (null when no daemon runs, or the job has no device). With --wait the
 * running daemon is asked to answer once the job is over (admin op wait);
 * then the job is printed as without it, and the exit status is the job's. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/admin_client.h"
#include "server/admin_ops.h"
#include "server/cli.h"
#include "server/db.h"

static const char jobs_usage[] =
    "usage: cordon-server jobs [--user USER] [--limit N] [--json] [--state DIR]";
static const char job_usage[] =
    "usage: cordon-server job ID [--json] [--wait] [--receipt FILE] [--state DIR]";

#define JOBS_DEFAULT_LIMIT 100

static json_t *job_online_json(const struct server_db_job *j, const json_t *live) {
  return j->device_id[0] ? server_cli_online_json(live, j->device_id) : json_null();
}

static json_t *job_summary_json(const struct server_db_job *j, const json_t *live) {
  return json_pack("{s:s, s:s, s:s?, s:s, s:s?, s:o, s:o, s:o}", "id", j->id, "user", j->user,
                   "device", j->device_id[0] ? j->device_id : NULL, "state",
                   server_db_job_state_name(j->state), "error", j->error[0] ? j->error : NULL,
                   "created", server_cli_json_time(j->created), "updated",
                   server_cli_json_time(j->updated), "device_online", job_online_json(j, live));
}

static int parse_opts(int argc, char **argv, const char *usage, int with_filters,
                      const char **state, const char **user, size_t *limit, int *json, int *wait,
                      const char **receipt) {
  static const struct option opts[] = {
      {"state", required_argument, NULL, 's'}, {"user", required_argument, NULL, 'u'},
      {"limit", required_argument, NULL, 'n'}, {"json", no_argument, NULL, 'j'},
      {"wait", no_argument, NULL, 'w'},        {"receipt", required_argument, NULL, 'r'},
      {"help", no_argument, NULL, 'h'},        {0}};
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      *state = optarg;
      break;
    case 'u':
      if (!with_filters)
        return server_cli_failf(CORDON_E_USAGE, "%s", usage);
      *user = optarg;
      break;
    case 'n': {
      char *end = NULL;
      unsigned long long v = strtoull(optarg, &end, 10);
      if (!with_filters || !*optarg || *end || *optarg == '-' || v > 1000000)
        return server_cli_failf(CORDON_E_USAGE, "--limit: 0..1000000 (0: all); %s", usage);
      *limit = (size_t)v;
      break;
    }
    case 'j':
      *json = 1;
      break;
    case 'w':
      if (with_filters)
        return server_cli_failf(CORDON_E_USAGE, "%s", usage);
      *wait = 1;
      break;
    case 'r':
      if (!receipt)
        return server_cli_failf(CORDON_E_USAGE, "%s", usage);
      *receipt = optarg;
      break;
    case 'h':
      printf("%s\n", usage);
      return -1;
    default:
      return server_cli_failf(CORDON_E_USAGE, "%s", usage);
    }
  }
  return 0;
}

int server_cmd_jobs(const struct server_cli *cli, int argc, char **argv) {
  const char *state = cli->state_dir, *user = NULL;
  size_t limit = JOBS_DEFAULT_LIMIT;
  int json = 0, wait = 0;
  int status = parse_opts(argc, argv, jobs_usage, 1, &state, &user, &limit, &json, &wait, NULL);
  if (status)
    return status < 0 ? 0 : status;
  if (optind != argc)
    return server_cli_failf(CORDON_E_USAGE, "%s", jobs_usage);
  struct server_db *db = NULL;
  if ((status = server_cli_open_db(state, &db)))
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_user u = {0};
  struct server_db_job_list l = {0};
  int err = user ? server_db_user_get_by_name(db, user, &u, &diag) : 0;
  if (!err)
    err = server_db_job_list(db, user ? u.id : 0, limit, &l, &diag);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  json_t *live = NULL;
  char why[600];
  if (server_cli_live_sessions(state, &live, why, sizeof(why)) < 0)
    live = NULL;
  if (json) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < l.count; i++)
      if (json_array_append_new(arr, job_summary_json(&l.items[i], live)) < 0) {
        json_decref(arr);
        arr = NULL;
      }
    status = server_cli_print_json(arr, 0);
  } else {
    printf("%-32s  %-12s %-32s  %-7s  %-9s %-20s %s\n", "ID", "USER", "DEVICE", "ONLINE", "STATE",
           "CREATED", "ERROR");
    for (size_t i = 0; i < l.count; i++) {
      const struct server_db_job *j = &l.items[i];
      char created[64];
      server_cli_format_time(j->created, "-", created, sizeof(created));
      printf("%-32s  %-12s %-32s  %-7s  %-9s %-20s %s\n", j->id, j->user,
             j->device_id[0] ? j->device_id : "-",
             j->device_id[0] ? server_cli_online_text(live, j->device_id) : "-",
             server_db_job_state_name(j->state), created, j->error[0] ? j->error : "-");
    }
    if (!live)
      fprintf(stderr, "%s: online: unknown (%s)\n", SERVER_PROG, why);
  }
  json_decref(live);
  server_db_job_list_release(&l);
  return status;
}

/* Ask the daemon to answer once job j is over (j is released here). */
static int wait_over(const char *state, struct server_db_job *j) {
  char id[CORDON_ID_HEX_SIZE];
  snprintf(id, sizeof(id), "%s", j->id);
  const char *st = server_db_job_state_name(j->state);
  server_db_job_release(j);
  json_t *req = admin_request_new(ADMIN_OP_WAIT), *reply = NULL;
  struct cordon_diag diag = {{0}};
  int err = req ? admin_request_set(req, ADMIN_ARG_JOB, json_string(id)) : -ENOMEM;
  if (err == 0)
    err = admin_call(state, req, &reply, &diag);
  json_decref(req);
  if (err == -ENOENT || err == -ECONNREFUSED)
    return server_cli_failf(err, "job %s is %s and the daemon is not running to finish it", id, st);
  if (err)
    return server_cli_fail(err, &diag);
  int status = 0;
  if (!admin_reply_is_ok(reply)) {
    const char *msg;
    err = admin_reply_err(reply, &msg);
    status = server_cli_failf(err, "%s", msg ? msg : "the daemon did not wait");
  }
  json_decref(reply);
  return status;
}

/* docs/DESIGN.md section 2.1: 0 only for a job that ran and exited 0. */
static int job_exit_status(const struct server_db_job *j) {
  if (j->state != SERVER_DB_JOB_DONE)
    return 1;
  json_t *r = server_db_job_result_to_json(j);
  json_t *ec = json_object_get(r, "exit_code");
  int status = json_is_integer(ec) && json_integer_value(ec) == 0 ? 0 : 1;
  json_decref(r);
  return status;
}

int server_cmd_job(const struct server_cli *cli, int argc, char **argv) {
  const char *state = cli->state_dir, *user = NULL;
  size_t limit = 0;
  int json = 0, wait = 0;
  const char *receipt = NULL;
  int status = parse_opts(argc, argv, job_usage, 0, &state, &user, &limit, &json, &wait, &receipt);
  if (status)
    return status < 0 ? 0 : status;
  if (argc - optind != 1)
    return server_cli_failf(CORDON_E_USAGE, "%s", job_usage);
  struct server_db *db = NULL;
  if ((status = server_cli_open_db(state, &db)))
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_job j;
  int err = server_db_job_get(db, argv[optind], &j, &diag);
  if (!err && wait && !server_db_job_state_is_final(j.state)) {
    server_db_close(db);
    db = NULL;
    if ((status = wait_over(state, &j)))
      return status;
    if ((status = server_cli_open_db(state, &db)))
      return status;
    err = server_db_job_get(db, argv[optind], &j, &diag);
  }
  if (!err && receipt) { /* the file only */
    status = server_cli_write_receipt(state, db, &j, receipt);
    server_db_job_release(&j);
    server_db_close(db);
    return status;
  }
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  json_t *live = NULL;
  char why[600];
  if (j.device_id[0] && server_cli_live_sessions(state, &live, why, sizeof(why)) < 0)
    live = NULL;
  if (json) {
    json_t *o = server_db_job_to_json(&j);
    if (o)
      json_object_set_new(o, "device_online", job_online_json(&j, live));
    status = server_cli_print_json(o, 0);
  } else {
    char created[64], updated[64], deadline[64];
    server_cli_format_time(j.created, "-", created, sizeof(created));
    server_cli_format_time(j.updated, "-", updated, sizeof(updated));
    server_cli_format_time(j.deadline, "none", deadline, sizeof(deadline));
    json_error_t jerr;
    json_t *args = json_loads(j.args_json, 0, &jerr);
    char *args_text = args ? json_dumps(args, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(args);
    char online[700];
    if (!j.device_id[0])
      snprintf(online, sizeof(online), "-");
    else if (live)
      snprintf(online, sizeof(online), "%s", server_cli_online_text(live, j.device_id));
    else
      snprintf(online, sizeof(online), "unknown (%s)", why);
    printf("id:       %s\nuser:     %s\ndevice:   %s\nonline:   %s\nstate:    %s\nerror:    %s\n"
           "created:  %s\nupdated:  %s\ndeadline: %s\n",
           j.id, j.user, j.device_id[0] ? j.device_id : "-", online,
           server_db_job_state_name(j.state), j.error[0] ? j.error : "-", created, updated,
           deadline);
    if (j.queue_expires) { /* it waited (or waits) in the queue */
      char until[64];
      server_cli_format_time(j.queue_expires, "-", until, sizeof(until));
      printf("queued:   until %s\n", until);
    }
    if (j.where.count) {
      char where[SERVER_DB_LABELS_MAX * (2 * SERVER_DB_LABEL_MAX + 2) + 1];
      server_db_labels_format(&j.where, where, sizeof(where));
      printf("where:    %s\n", where);
    }
    printf("args:     %s\nresult:   ", args_text ? args_text : "?");
    free(args_text);
    if (j.result_json) {
      fflush(stdout);
      status = server_cli_print_json(server_db_job_result_to_json(&j), 1);
    } else {
      printf("none\n");
    }
  }
  if (wait && status == 0)
    status = job_exit_status(&j);
  json_decref(live);
  server_db_job_release(&j);
  return status;
}
