/* cordon-server jobs [--user U] [--json] and job ID [--json]: job states and
 * results. `job ID --json` prints {"id","user","device","state","result",
 * "device_online"} with result the stored docs/DESIGN.md section 5 object or
 * null, and device_online the running daemon's answer (null when no daemon
 * runs, or the job has no device). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/cli.h"
#include "server/db.h"

static const char jobs_usage[] =
    "usage: cordon-server jobs [--user USER] [--limit N] [--json] [--state DIR]";
static const char job_usage[] = "usage: cordon-server job ID [--json] [--state DIR]";

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
                      const char **state, const char **user, size_t *limit, int *json) {
  static const struct option opts[] = {
      {"state", required_argument, NULL, 's'}, {"user", required_argument, NULL, 'u'},
      {"limit", required_argument, NULL, 'n'}, {"json", no_argument, NULL, 'j'},
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
  int json = 0;
  int status = parse_opts(argc, argv, jobs_usage, 1, &state, &user, &limit, &json);
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

int server_cmd_job(const struct server_cli *cli, int argc, char **argv) {
  const char *state = cli->state_dir, *user = NULL;
  size_t limit = 0;
  int json = 0;
  int status = parse_opts(argc, argv, job_usage, 0, &state, &user, &limit, &json);
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
           "created:  %s\nupdated:  %s\ndeadline: %s\nargs:     %s\nresult:   ",
           j.id, j.user, j.device_id[0] ? j.device_id : "-", online,
           server_db_job_state_name(j.state), j.error[0] ? j.error : "-", created, updated,
           deadline, args_text ? args_text : "?");
    free(args_text);
    if (j.result_json) {
      fflush(stdout);
      status = server_cli_print_json(server_db_job_result_to_json(&j), 1);
    } else {
      printf("none\n");
    }
  }
  json_decref(live);
  server_db_job_release(&j);
  return status;
}
