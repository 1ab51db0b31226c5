/* cordon-server jobs [--user U] [--device D] [--job-state S] [--since T]
 * [--limit N] [--json] and job ID [--json] [--wait] [--follow]: job states
 * and results. Both ask the running daemon (admin ops jobs and job, whose
 * objects server/admin_view.h builds); with no daemon they read the
 * database and build the same objects, with device_online null (unknown).
 * The text views are rendered from those objects; `job --json` carries
 * what the text view shows. With --wait the daemon is asked to answer once
 * the job is over (admin op wait); then the job is printed as without it,
 * and the exit status is the job's. --receipt reads the database (the
 * receipt file is signed with the state's ticket key). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/id.h"
#include "core/result.h"
#include "server/admin_client.h"
#include "server/admin_ops.h"
#include "server/admin_view.h"
#include "server/cli.h"
#include "server/db.h"

#define JOBS_DEFAULT_LIMIT 100

struct jobs_opts {
  const char *state, *user, *device;
  bool has_job_state;
  enum server_db_job_state job_state;
  int64_t since;
  size_t limit;
  int json, wait, follow;
  const char *receipt; /* job --receipt FILE */
};

/* --since: a UTC time as the tables print it, or a duration before now. */
static int parse_since(const char *s, int64_t *out) {
  struct tm tm = {0};
  const char *end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (end && *end == '\0') {
    *out = (int64_t)timegm(&tm);
    return 0;
  }
  int64_t d;
  if (server_cli_parse_duration(s, &d) < 0)
    return -EINVAL;
  *out = (int64_t)time(NULL) - d;
  return 0;
}

static int parse_opts(int argc, char **argv, const char *cmd, int with_filters,
                      struct jobs_opts *o) {
  static const struct option opts[] = {
      {"state", required_argument, NULL, 's'},  {"user", required_argument, NULL, 'u'},
      {"device", required_argument, NULL, 'd'}, {"job-state", required_argument, NULL, 'S'},
      {"since", required_argument, NULL, 'i'},  {"limit", required_argument, NULL, 'n'},
      {"json", no_argument, NULL, 'j'},         {"wait", no_argument, NULL, 'w'},
      {"follow", no_argument, NULL, 'f'},       {"receipt", required_argument, NULL, 'r'},
      {"help", no_argument, NULL, 'h'},         {0}};
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (!with_filters && strchr("udSin", c))
      return server_cli_usage(cmd, NULL, "%s is an option of jobs", argv[optind - 1]);
    switch (c) {
    case 's':
      o->state = optarg;
      break;
    case 'u':
      o->user = optarg;
      break;
    case 'd':
      o->device = optarg;
      break;
    case 'S':
      if (server_db_job_state_parse(optarg, &o->job_state) < 0)
        return server_cli_usage(cmd, NULL,
                                "--job-state: queued, sent, running, done, failed, expired or "
                                "cancelled, not '%s'",
                                optarg);
      o->has_job_state = true;
      break;
    case 'i':
      if (parse_since(optarg, &o->since) < 0)
        return server_cli_usage(cmd, NULL,
                                "--since: a time YYYY-MM-DDTHH:MM:SSZ or a duration (1h, 2d), "
                                "not '%s'",
                                optarg);
      break;
    case 'n': {
      char *end = NULL;
      unsigned long long v = strtoull(optarg, &end, 10);
      if (!*optarg || *end || *optarg == '-' || v > 1000000)
        return server_cli_usage(cmd, NULL, "--limit: 0..1000000 (0: all)");
      o->limit = (size_t)v;
      break;
    }
    case 'j':
      o->json = 1;
      break;
    case 'w':
      if (with_filters)
        return server_cli_usage(cmd, NULL, "--wait is an option of job");
      o->wait = 1;
      break;
    case 'f':
      if (with_filters)
        return server_cli_usage(cmd, NULL, "--follow is an option of job");
      o->follow = 1;
      break;
    case 'r':
      if (with_filters)
        return server_cli_usage(cmd, NULL, "--receipt is an option of job");
      o->receipt = optarg;
      break;
    case 'h':
      server_cli_help(cmd, NULL);
      return -1;
    default:
      return server_cli_bad_option(cmd, NULL, argv);
    }
  }
  return 0;
}

/* The jobs request of the filters given (NULL when out of memory). */
static json_t *jobs_request(const struct jobs_opts *o) {
  json_t *req = admin_request_new(ADMIN_OP_JOBS);
  int r =
      req ? admin_request_set(req, ADMIN_ARG_LIMIT, json_integer((json_int_t)o->limit)) : -ENOMEM;
  if (r == 0 && o->user)
    r = admin_request_set(req, ADMIN_ARG_USER, json_string(o->user));
  if (r == 0 && o->device)
    r = admin_request_set(req, ADMIN_ARG_DEVICE, json_string(o->device));
  if (r == 0 && o->has_job_state)
    r = admin_request_set(req, ADMIN_ARG_JOB_STATE,
                          json_string(server_db_job_state_name(o->job_state)));
  if (r == 0 && o->since)
    r = admin_request_set(req, ADMIN_ARG_SINCE, json_integer((json_int_t)o->since));
  if (r < 0) {
    json_decref(req);
    return NULL;
  }
  return req;
}

/* The jobs from the running daemon (*out_live true), or (none running)
 * from the database with device_online null: 0 and *out_list, or the exit
 * status. */
static int jobs_get(const struct jobs_opts *o, json_t **out_list, bool *out_live) {
  struct server_db *db = NULL;
  int status = server_cli_ask_or_open(o->state, jobs_request(o), ADMIN_REPLY_JOBS, out_list, &db);
  *out_live = !db;
  if (status || !db)
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_user u = {0};
  struct server_db_device dev = {0};
  struct server_db_job_list l = {0};
  int err = o->user ? server_db_user_get_by_name(db, o->user, &u, &diag) : 0;
  if (!err && o->device && (status = server_cli_device_resolve(db, o->device, o->user, &dev))) {
    server_db_close(db);
    return status;
  }
  struct server_db_job_filter f = {.user_id = o->user ? u.id : 0,
                                   .device_id = o->device ? dev.id : NULL,
                                   .has_state = o->has_job_state,
                                   .state = o->job_state,
                                   .since = o->since,
                                   .limit = o->limit};
  if (!err)
    err = server_db_job_list_filtered(db, &f, &l, &diag);
  server_db_device_release(&dev);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  json_t *arr = admin_view_job_summaries(&l, NULL, NULL);
  server_db_job_list_release(&l);
  if (!arr)
    return server_cli_failf(-ENOMEM, "out of memory");
  *out_list = arr;
  return 0;
}

int server_cmd_jobs(const struct server_cli *cli, int argc, char **argv) {
  struct jobs_opts o = {.state = cli->state_dir, .limit = JOBS_DEFAULT_LIMIT};
  int status = parse_opts(argc, argv, "jobs", 1, &o);
  if (status)
    return status < 0 ? 0 : status;
  if (optind != argc)
    return server_cli_usage("jobs", NULL, "unexpected argument '%s'", argv[optind]);
  json_t *list = NULL;
  bool live = false;
  if ((status = jobs_get(&o, &list, &live)))
    return status;
  if (o.json)
    return server_cli_print_json(list, 0);
  struct server_cli_table t;
  server_cli_table_init(&t, 8, "ID", "USER", "DEVICE", "ONLINE", "STATE", "PACKAGE", "CREATED",
                        "ERROR");
  size_t i;
  json_t *j;
  json_array_foreach(list, i, j) {
    char error[SERVER_DB_CODE_MAX + 32], name[4 * SERVER_DB_NAME_MAX + 1];
    char pkg_text[8 * SERVER_DB_NAME_MAX + 8];
    const char *device = server_cli_str(j, "device", NULL);
    server_cli_job_error_text(j, error, sizeof(error));
    server_cli_escape(server_cli_str(j, "package", "-"), pkg_text, sizeof(pkg_text));
    server_cli_escape(server_cli_str(j, "device_name", device ? device : "-"), name, sizeof(name));
    char user[4 * SERVER_DB_NAME_MAX + 1];
    server_cli_escape(server_cli_str(j, "user", "?"), user, sizeof(user));
    server_cli_table_row(&t, server_cli_str(j, "id", "?"), user, name,
                         device ? server_cli_online_word(json_object_get(j, "device_online")) : "-",
                         server_cli_str(j, "state", "?"), pkg_text,
                         server_cli_str(j, "created", "-"), error);
  }
  json_decref(list);
  status = server_cli_table_print(&t);
  server_cli_table_release(&t);
  if (!live)
    fprintf(stderr, "%s: online: unknown (daemon not running)\n", SERVER_PROG);
  return status;
}

/* The job object from the running daemon (*out_live true), or (none
 * running) from the database: 0 and *out_job, or the exit status. */
static int job_get(const char *state, const char *id, json_t **out_job, bool *out_live) {
  json_t *req = admin_request_new(ADMIN_OP_JOB);
  if (req && admin_request_set(req, ADMIN_ARG_JOB, json_string(id)) < 0) {
    json_decref(req);
    req = NULL;
  }
  struct server_db *db = NULL;
  int status = server_cli_ask_or_open(state, req, ADMIN_REPLY_JOB, out_job, &db);
  *out_live = !db;
  if (status || !db)
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_job j;
  int err = server_db_job_get(db, id, &j, &diag);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  json_t *o = admin_view_job(&j, json_null());
  server_db_job_release(&j);
  if (!o)
    return server_cli_failf(-ENOMEM, "out of memory");
  *out_job = o;
  return 0;
}

/* Ask the daemon to answer once job id (in state st) is over. */
static int wait_over(const char *state, const char *id, const char *st) {
  json_t *req = admin_request_new(ADMIN_OP_WAIT), *reply = NULL;
  struct cordon_diag diag = {{0}};
  int err = req ? admin_request_set(req, ADMIN_ARG_JOB, json_string(id)) : -ENOMEM;
  if (err == 0)
    err = admin_call(state, req, &reply, &diag);
  json_decref(req);
  if (err == -ENOENT || err == -ECONNREFUSED)
    return server_cli_failf(CORDON_E_NOT_RUNNING,
                            "job %s is %s and the daemon is not running to finish it", id, st);
  if (err)
    return server_cli_admin_fail(err, &diag);
  int status = 0;
  if (!admin_reply_is_ok(reply)) {
    const char *msg;
    err = admin_reply_err(reply, &msg);
    status = server_cli_failf(err, "%s", msg ? msg : "the daemon did not wait");
  }
  json_decref(reply);
  return status;
}

/* docs/DESIGN.md section 2.1, for a job object of the admin API: 0 only
 * for a job that ran and exited 0. */
static int job_json_exit_status(const json_t *j) {
  const char *st = server_cli_str(j, "state", "");
  json_t *ec = json_object_get(json_object_get(j, "result"), "exit_code");
  return strcmp(st, "done") == 0 && json_is_integer(ec) && json_integer_value(ec) == 0 ? 0 : 1;
}

/* Bytes of a base64 text to f. */
static void write_base64(FILE *f, const char *b64) {
  size_t n = b64 ? strlen(b64) : 0, len = 0;
  uint8_t *bin = malloc(n / 4 * 3 + 3);
  if (bin && sodium_base642bin(bin, n / 4 * 3 + 3, b64, n, NULL, &len, NULL,
                               sodium_base64_VARIANT_ORIGINAL) == 0)
    fwrite(bin, 1, len, f);
  free(bin);
}

/* A result's captured output (text or _base64, core/result.h) to f, its
 * bytes as they were (a NUL included); nothing for a result recorded
 * without its output. */
static void write_captured(FILE *f, const json_t *res, const char *name) {
  uint8_t *data;
  size_t len;
  if (job_result_output_decode(res, name, RESULT_OUTPUT_MAX, &data, &len) == 0) {
    fwrite(data, 1, len, f);
    free(data);
  }
}

/* --follow: the job's output as it comes, then its exit status. A job
 * whose output never came live (over already, or an agent that does not
 * send it) has its captured output printed at the end. */
static int follow_job(const char *state, const char *id) {
  json_t *req = admin_request_new(ADMIN_OP_FOLLOW), *reply = NULL;
  struct cordon_diag diag = {{0}};
  struct admin_stream *st = NULL;
  int err = req ? admin_request_set(req, ADMIN_ARG_JOB, json_string(id)) : -ENOMEM;
  if (err == 0)
    err = admin_stream_open(state, req, &st, &reply, &diag);
  json_decref(req);
  if (err == -ENOENT || err == -ECONNREFUSED)
    return server_cli_failf(err, "the daemon is not running: `job %s --follow` needs it", id);
  if (err)
    return server_cli_fail(err, &diag);
  int status = 0;
  bool live = false, over = !admin_reply_is_ok(reply); /* refused: reply says why */
  while (!over) {
    json_decref(reply);
    reply = NULL;
    if ((err = admin_stream_next(st, &reply, &diag)) < 0) {
      status = server_cli_fail(err, &diag);
      break;
    }
    const char *ev = server_cli_str(reply, ADMIN_REPLY_EVENT, "");
    if (strcmp(ev, "output") == 0) {
      FILE *f = strcmp(server_cli_str(reply, "stream", ""), "stderr") == 0 ? stderr : stdout;
      write_base64(f, json_string_value(json_object_get(reply, "data")));
      fflush(f);
      live = true;
      continue;
    }
    over = true; /* the end, or an error line */
    if (strcmp(ev, "end") == 0 && admin_reply_is_ok(reply)) {
      json_t *job = json_object_get(reply, ADMIN_REPLY_JOB);
      json_t *res = json_object_get(job, "result");
      if (!live && json_is_object(res)) {
        write_captured(stdout, res, "stdout");
        write_captured(stderr, res, "stderr");
      }
      fflush(stdout);
      if (!json_is_object(res) || json_is_object(json_object_get(res, "error")))
        fprintf(stderr, "%s: job %s ended %s%s%s\n", SERVER_PROG, id,
                server_cli_str(job, "state", "?"), json_object_get(job, "error") ? ": " : "",
                server_cli_str(job, "error", ""));
      status = job_json_exit_status(job);
      json_decref(reply);
      reply = NULL;
    }
  }
  if (reply) { /* an error: the refusal, or the stream's error line */
    const char *msg;
    err = admin_reply_err(reply, &msg);
    status = server_cli_failf(err, "%s", msg ? msg : "the daemon ended the stream");
  }
  json_decref(reply);
  admin_stream_close(st);
  return status;
}

int server_cmd_job(const struct server_cli *cli, int argc, char **argv) {
  struct jobs_opts o = {.state = cli->state_dir};
  int status = parse_opts(argc, argv, "job", 0, &o);
  const char *state = o.state;
  int json = o.json, wait = o.wait;
  const char *receipt = o.receipt;
  if (status)
    return status < 0 ? 0 : status;
  if (argc - optind != 1)
    return server_cli_usage("job", NULL, argc == optind ? "JOB is missing" : "one JOB expected");
  if (o.follow && (wait || receipt || json))
    return server_cli_usage("job", NULL,
                            "--follow goes alone (not with --wait, --json or --receipt)");
  if (o.follow)
    return follow_job(state, argv[optind]);
  const char *id = argv[optind];
  if (receipt) { /* the file only: signed with the state's ticket key */
    struct server_db *db = NULL;
    if ((status = server_cli_open_db(state, &db)))
      return status;
    struct cordon_diag diag = {{0}};
    struct server_db_job j;
    int err = server_db_job_get(db, id, &j, &diag);
    if (err) {
      status = server_cli_db_fail(err, &diag);
    } else {
      status = server_cli_write_receipt(state, db, &j, receipt);
      server_db_job_release(&j);
    }
    server_db_close(db);
    return status;
  }
  json_t *j = NULL;
  bool live = false;
  if ((status = job_get(state, id, &j, &live)))
    return status;
  enum server_db_job_state st;
  if (wait && server_db_job_state_parse(server_cli_str(j, "state", "?"), &st) == 0 &&
      !server_db_job_state_is_final(st)) {
    char idc[CORDON_ID_HEX_SIZE], stc[32];
    snprintf(idc, sizeof(idc), "%s", server_cli_str(j, "id", id));
    snprintf(stc, sizeof(stc), "%s", server_cli_str(j, "state", "?"));
    json_decref(j);
    j = NULL;
    if ((status = wait_over(state, idc, stc)))
      return status;
    if ((status = job_get(state, idc, &j, &live)))
      return status;
  }
  int over = wait ? job_json_exit_status(j) : 0;
  if (json) {
    status = server_cli_print_json(j, 0);
    return status ? status : over;
  }
  const char *st_name = server_cli_str(j, "state", "?");
  const char *device = server_cli_str(j, "device", NULL);
  char online[64], dev_text[4 * SERVER_DB_NAME_MAX + CORDON_ID_HEX_SIZE + 8];
  char name[4 * SERVER_DB_NAME_MAX + 1], error[SERVER_DB_CODE_MAX + 32];
  char pkg[2 * SERVER_DB_NAME_MAX + 2], pkg_text[4 * sizeof(pkg)];
  if (!device)
    snprintf(online, sizeof(online), "-");
  else if (live)
    snprintf(online, sizeof(online), "%s",
             server_cli_online_word(json_object_get(j, "device_online")));
  else
    snprintf(online, sizeof(online), "unknown (daemon not running)");
  server_cli_escape(server_cli_str(j, "device_name", ""), name, sizeof(name));
  if (!device)
    snprintf(dev_text, sizeof(dev_text), "-");
  else
    snprintf(dev_text, sizeof(dev_text), "%s (%s)", name[0] ? name : "?", device);
  server_cli_job_error_text(j, error, sizeof(error));
  json_t *p = json_object_get(j, "package");
  if (server_cli_str(p, "name", NULL))
    snprintf(pkg, sizeof(pkg), "%s@%s", server_cli_str(p, "name", ""),
             server_cli_str(p, "version", ""));
  else
    snprintf(pkg, sizeof(pkg), "-");
  server_cli_escape(pkg, pkg_text, sizeof(pkg_text));
  json_t *res = json_object_get(j, "result");
  printf("id:       %s\nuser:     %s\ndevice:   %s\nonline:   %s\nstate:    %s\nerror:    %s\n"
         "package:  %s (index %s)\ncreated:  %s\nupdated:  %s\ndeadline: %s\n",
         server_cli_str(j, "id", "?"), server_cli_str(j, "user", "?"), dev_text, online, st_name,
         error, pkg_text, server_cli_str(p, "hash", "?"), server_cli_str(j, "created", "-"),
         server_cli_str(j, "updated", "-"), server_cli_str(j, "deadline", "none"));
  if (strcmp(st_name, "expired") == 0 && json_is_object(res))
    printf("late:     yes (the result came after the job expired)\n");
  if (server_cli_str(j, "queued_until", NULL)) /* it waited (or waits) in the queue */
    printf("queued:   until %s\n", server_cli_str(j, "queued_until", "-"));
  char where[SERVER_DB_LABELS_MAX * (2 * SERVER_DB_LABEL_MAX + 2) + 1];
  server_cli_labels_text(json_object_get(j, "where"), where, sizeof(where));
  if (where[0])
    printf("where:    %s\n", where);
  char *args_text = json_dumps(json_object_get(j, "args"), JSON_COMPACT | JSON_ENSURE_ASCII);
  printf("args:     %s\nresult:   ", args_text ? args_text : "?");
  free(args_text);
  if (json_is_object(res)) {
    fflush(stdout);
    status = server_cli_print_json(json_incref(res), 1);
  } else {
    printf("none\n");
    status = fflush(stdout) == 0 ? 0 : server_cli_failf(-EIO, "cannot write to stdout");
  }
  json_decref(j);
  return status ? status : over;
}
