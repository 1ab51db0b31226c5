/* cordon-server jobs [--user U] [--device D] [--state S] [--since T]
 * [--limit N] [--json] and job ID [--json] [--wait]: job states and
 * results. `job ID --json` carries what the text view shows: the stored
 * job (server_db_job_to_json) and its package, device name, times, queue
 * deadline, constraints, arguments and device_online (the running daemon's
 * answer; null when no daemon runs, or the job has no device). With --wait
 * the running daemon is asked to answer once the job is over (admin op
 * wait); then the job is printed as without it, and the exit status is the
 * job's. */
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
#include "server/admin_client.h"
#include "server/admin_ops.h"
#include "server/cli.h"
#include "server/db.h"

#define JOBS_DEFAULT_LIMIT 100

static json_t *job_online_json(const struct server_db_job *j, const json_t *live) {
  return j->device_id[0] ? server_cli_online_json(live, j->device_id) : json_null();
}

void server_cli_job_error(const struct server_db_job *j, char *buf, size_t size) {
  snprintf(buf, size, "%s", j->error[0] ? j->error : "-");
  if (j->error[0] || !j->result_json)
    return;
  json_t *r = server_db_job_result_to_json(j);
  const char *code = json_string_value(json_object_get(json_object_get(r, "error"), "code"));
  json_t *ec = json_object_get(r, "exit_code"), *sig = json_object_get(r, "signal");
  if (code)
    snprintf(buf, size, "%s", code);
  else if (json_is_integer(sig))
    snprintf(buf, size, "signal %lld", (long long)json_integer_value(sig));
  else if (json_is_integer(ec) && json_integer_value(ec) != 0)
    snprintf(buf, size, "exit %lld", (long long)json_integer_value(ec));
  json_decref(r);
}

void server_cli_job_package(const struct server_db_job *j, char *buf, size_t size) {
  if (j->package_name[0])
    snprintf(buf, size, "%s@%s", j->package_name, j->package_version);
  else
    snprintf(buf, size, "-");
}

json_t *server_cli_job_summary_json(const struct server_db_job *j, const json_t *live) {
  char error[SERVER_DB_CODE_MAX + 32], pkg[2 * SERVER_DB_NAME_MAX + 2];
  server_cli_job_error(j, error, sizeof(error));
  server_cli_job_package(j, pkg, sizeof(pkg));
  /* "error": the stable code (the job's, else its result's), null when none */
  const char *code = j->error[0]                                 ? j->error
                     : strchr(error, ' ') || !strcmp(error, "-") ? NULL
                                                                 : error;
  return json_pack("{s:s, s:s, s:s?, s:s?, s:s, s:s?, s:s?, s:o, s:o, s:o}", "id", j->id, "user",
                   j->user, "device", j->device_id[0] ? j->device_id : NULL, "device_name",
                   j->device_name[0] ? j->device_name : NULL, "state",
                   server_db_job_state_name(j->state), "package", j->package_name[0] ? pkg : NULL,
                   "error", code, "created", server_cli_json_time(j->created), "updated",
                   server_cli_json_time(j->updated), "device_online", job_online_json(j, live));
}

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

int server_cmd_jobs(const struct server_cli *cli, int argc, char **argv) {
  struct jobs_opts o = {.state = cli->state_dir, .limit = JOBS_DEFAULT_LIMIT};
  int status = parse_opts(argc, argv, "jobs", 1, &o);
  if (status)
    return status < 0 ? 0 : status;
  if (optind != argc)
    return server_cli_usage("jobs", NULL, "unexpected argument '%s'", argv[optind]);
  struct server_db *db = NULL;
  if ((status = server_cli_open_db(o.state, &db)))
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_user u = {0};
  struct server_db_device dev = {0};
  struct server_db_job_list l = {0};
  int err = o.user ? server_db_user_get_by_name(db, o.user, &u, &diag) : 0;
  if (!err && o.device && (status = server_cli_device_resolve(db, o.device, o.user, &dev))) {
    server_db_close(db);
    return status;
  }
  struct server_db_job_filter f = {.user_id = o.user ? u.id : 0,
                                   .device_id = o.device ? dev.id : NULL,
                                   .has_state = o.has_job_state,
                                   .state = o.job_state,
                                   .since = o.since,
                                   .limit = o.limit};
  if (!err)
    err = server_db_job_list_filtered(db, &f, &l, &diag);
  server_db_device_release(&dev);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  json_t *live = NULL;
  char why[600];
  if (server_cli_live_sessions(o.state, &live, why, sizeof(why)) < 0)
    live = NULL;
  if (o.json) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < l.count; i++)
      if (json_array_append_new(arr, server_cli_job_summary_json(&l.items[i], live)) < 0) {
        json_decref(arr);
        arr = NULL;
      }
    status = server_cli_print_json(arr, 0);
  } else {
    printf("%-32s  %-12s %-20s %-7s  %-9s %-24s %-20s %s\n", "ID", "USER", "DEVICE", "ONLINE",
           "STATE", "PACKAGE", "CREATED", "ERROR");
    for (size_t i = 0; i < l.count; i++) {
      const struct server_db_job *j = &l.items[i];
      char created[64], error[SERVER_DB_CODE_MAX + 32], pkg[2 * SERVER_DB_NAME_MAX + 2];
      char name[4 * SERVER_DB_NAME_MAX + 1], pkg_text[4 * sizeof(pkg)];
      server_cli_format_time(j->created, "-", created, sizeof(created));
      server_cli_job_error(j, error, sizeof(error));
      server_cli_job_package(j, pkg, sizeof(pkg));
      server_cli_escape(pkg, pkg_text, sizeof(pkg_text));
      server_cli_escape(j->device_name[0] ? j->device_name
                        : j->device_id[0] ? j->device_id
                                          : "-",
                        name, sizeof(name));
      printf("%-32s  %-12s %-20s %-7s  %-9s %-24s %-20s %s\n", j->id, j->user, name,
             j->device_id[0] ? server_cli_online_text(live, j->device_id) : "-",
             server_db_job_state_name(j->state), pkg_text, created, error);
    }
    if (!live)
      fprintf(stderr, "%s: online: unknown (%s)\n", SERVER_PROG, why);
  }
  json_decref(live);
  server_db_job_list_release(&l);
  return status;
}

/* job --json: the stored job (server_db_job_to_json: id, user, device,
 * state, error, result) and everything else the text view shows. */
static json_t *job_full_json(const struct server_db_job *j, const json_t *live) {
  json_t *o = server_db_job_to_json(j);
  if (!o)
    return NULL;
  char hash[2 * SERVER_DB_HASH_SIZE + 1];
  sodium_bin2hex(hash, sizeof(hash), j->package_hash, sizeof(j->package_hash));
  json_t *args = json_loads(j->args_json, 0, NULL);
  int bad =
      json_object_set_new(o, "device_name",
                          j->device_name[0] ? json_string(j->device_name) : json_null()) ||
      json_object_set_new(o, "device_online", job_online_json(j, live)) ||
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

/* A result's captured output (text or _base64) to f. */
static void write_captured(FILE *f, const json_t *res, const char *name) {
  char key[32];
  const char *text = json_string_value(json_object_get(res, name));
  snprintf(key, sizeof(key), "%s_base64", name);
  if (text)
    fputs(text, f);
  else
    write_base64(f, json_string_value(json_object_get(res, key)));
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
    status = server_cli_print_json(job_full_json(&j, live), 0);
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
    char device[4 * SERVER_DB_NAME_MAX + CORDON_ID_HEX_SIZE + 8], name[4 * SERVER_DB_NAME_MAX + 1];
    char error[SERVER_DB_CODE_MAX + 32], pkg[2 * SERVER_DB_NAME_MAX + 2], pkg_text[4 * sizeof(pkg)];
    server_cli_escape(j.device_name, name, sizeof(name));
    if (!j.device_id[0])
      snprintf(device, sizeof(device), "-");
    else
      snprintf(device, sizeof(device), "%s (%s)", name[0] ? name : "?", j.device_id);
    server_cli_job_error(&j, error, sizeof(error));
    server_cli_job_package(&j, pkg, sizeof(pkg));
    server_cli_escape(pkg, pkg_text, sizeof(pkg_text));
    char hash[2 * SERVER_DB_HASH_SIZE + 1];
    sodium_bin2hex(hash, sizeof(hash), j.package_hash, sizeof(j.package_hash));
    printf("id:       %s\nuser:     %s\ndevice:   %s\nonline:   %s\nstate:    %s\nerror:    %s\n"
           "package:  %s (index %s)\ncreated:  %s\nupdated:  %s\ndeadline: %s\n",
           j.id, j.user, device, online, server_db_job_state_name(j.state), error, pkg_text, hash,
           created, updated, deadline);
    if (j.state == SERVER_DB_JOB_EXPIRED && j.result_json)
      printf("late:     yes (the result came after the job expired)\n");
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
