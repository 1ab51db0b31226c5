/* cordon-server jobs [--user U] [--json] and job ID [--json] [--wait |
 * --follow]: job states and results, asked of the running daemon (admin
 * ops jobs and job), or read from the database when none runs. `job ID
 * --json` prints {"id","user","device","state","error","result",
 * "device_online"} (of the API's job object, server/admin_view.h) with result the stored
 * docs/DESIGN.md section 5 object or null, and device_online the running daemon's answer (null when
 * no daemon runs, or the job has no device). With --wait the running daemon is asked to answer once
 * the job is over (admin op wait); then the job is printed as without it, and the exit status is
 * the job's. With --follow (admin op follow) what the job prints goes to stdout and stderr as it
 * comes; the exit status is the job's. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/admin_client.h"
#include "server/admin_ops.h"
#include "server/admin_view.h"
#include "server/cli.h"
#include "server/db.h"

static const char jobs_usage[] =
    "usage: cordon-server jobs [--user USER] [--limit N] [--json] [--state DIR]";
static const char job_usage[] =
    "usage: cordon-server job ID [--json] [--wait | --follow] [--state DIR]";

#define JOBS_DEFAULT_LIMIT 100

static int parse_opts(int argc, char **argv, const char *usage, int with_filters,
                      const char **state, const char **user, size_t *limit, int *json, int *wait,
                      int *follow) {
  static const struct option opts[] = {
      {"state", required_argument, NULL, 's'}, {"user", required_argument, NULL, 'u'},
      {"limit", required_argument, NULL, 'n'}, {"json", no_argument, NULL, 'j'},
      {"wait", no_argument, NULL, 'w'},        {"follow", no_argument, NULL, 'f'},
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
    case 'f':
      if (with_filters)
        return server_cli_failf(CORDON_E_USAGE, "%s", usage);
      *follow = 1;
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

/* The jobs from the running daemon, or (none running) from the database
 * with device_online unknown: 0 and *out_list, or an exit status. */
static int jobs_get(const char *state, const char *user, size_t limit, json_t **out_list, char *why,
                    size_t why_size) {
  json_t *req = admin_request_new(ADMIN_OP_JOBS);
  int r = req ? admin_request_set(req, ADMIN_ARG_LIMIT, json_integer((json_int_t)limit)) : -ENOMEM;
  if (r == 0 && user)
    r = admin_request_set(req, ADMIN_ARG_USER, json_string(user));
  if (r < 0) {
    json_decref(req);
    req = NULL;
  }
  int status = server_cli_ask_for(state, req, ADMIN_REPLY_JOBS, out_list);
  if (status != -ESRCH)
    return status;
  snprintf(why, why_size, "daemon not running");
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
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < l.count; i++)
    if (json_array_append_new(arr, admin_view_job_summary(&l.items[i], json_null())) < 0) {
      json_decref(arr);
      arr = NULL;
    }
  server_db_job_list_release(&l);
  if (!arr)
    return server_cli_failf(-ENOMEM, "out of memory");
  *out_list = arr;
  return 0;
}

int server_cmd_jobs(const struct server_cli *cli, int argc, char **argv) {
  const char *state = cli->state_dir, *user = NULL;
  size_t limit = JOBS_DEFAULT_LIMIT;
  int json = 0, wait = 0, follow = 0;
  int status = parse_opts(argc, argv, jobs_usage, 1, &state, &user, &limit, &json, &wait, &follow);
  if (status)
    return status < 0 ? 0 : status;
  if (optind != argc)
    return server_cli_failf(CORDON_E_USAGE, "%s", jobs_usage);
  json_t *list = NULL;
  char why[600] = "";
  if ((status = jobs_get(state, user, limit, &list, why, sizeof(why))))
    return status;
  if (json)
    return server_cli_print_json(list, 0);
  printf("%-32s  %-12s %-32s  %-7s  %-9s %-20s %s\n", "ID", "USER", "DEVICE", "ONLINE", "STATE",
         "CREATED", "ERROR");
  size_t i;
  json_t *j;
  json_array_foreach(list, i, j) {
    const char *dev = server_cli_str(j, "device", NULL);
    printf("%-32s  %-12s %-32s  %-7s  %-9s %-20s %s\n", server_cli_str(j, "id", "?"),
           server_cli_str(j, "user", "?"), dev ? dev : "-",
           dev ? server_cli_online_word(json_object_get(j, "device_online")) : "-",
           server_cli_str(j, "state", "?"), server_cli_str(j, "created", "-"),
           server_cli_str(j, "error", "-"));
  }
  json_decref(list);
  if (why[0])
    fprintf(stderr, "%s: online: unknown (%s)\n", SERVER_PROG, why);
  return 0;
}

/* The job from the running daemon, or (none running) from the database:
 * 0 and *out_job (its admin_view_job object), or an exit status; *daemon
 * says which. */
static int job_get(const char *state, const char *id, json_t **out_job, bool *daemon) {
  json_t *req = admin_request_new(ADMIN_OP_JOB);
  if (req && admin_request_set(req, ADMIN_ARG_JOB, json_string(id)) < 0) {
    json_decref(req);
    req = NULL;
  }
  int status = server_cli_ask_for(state, req, ADMIN_REPLY_JOB, out_job);
  *daemon = status != -ESRCH;
  if (status != -ESRCH)
    return status;
  struct server_db *db = NULL;
  if ((status = server_cli_open_db(state, &db)))
    return status;
  struct cordon_diag diag = {{0}};
  struct server_db_job j;
  int err = server_db_job_get(db, id, &j, &diag);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &diag);
  *out_job = admin_view_job(&j, json_null());
  server_db_job_release(&j);
  return *out_job ? 0 : server_cli_failf(-ENOMEM, "out of memory");
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
static int job_exit_status(const json_t *j) {
  const char *st = server_cli_str(j, "state", "");
  json_t *ec = json_object_get(json_object_get(j, "result"), "exit_code");
  return strcmp(st, "done") == 0 && json_is_integer(ec) && json_integer_value(ec) == 0 ? 0 : 1;
}

static bool state_is_final(const char *st) {
  return strcmp(st, "done") == 0 || strcmp(st, "failed") == 0 || strcmp(st, "cancelled") == 0 ||
         strcmp(st, "expired") == 0;
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
      status = job_exit_status(job);
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
  const char *state = cli->state_dir, *user = NULL;
  size_t limit = 0;
  int json = 0, wait = 0, follow = 0;
  int status = parse_opts(argc, argv, job_usage, 0, &state, &user, &limit, &json, &wait, &follow);
  if (status)
    return status < 0 ? 0 : status;
  if (argc - optind != 1 || (wait && follow))
    return server_cli_failf(CORDON_E_USAGE, "%s", job_usage);
  if (follow)
    return follow_job(state, argv[optind]);
  json_t *j = NULL;
  bool daemon;
  if ((status = job_get(state, argv[optind], &j, &daemon)))
    return status;
  if (wait && !state_is_final(server_cli_str(j, "state", ""))) {
    char id[CORDON_ID_HEX_SIZE], st[32];
    snprintf(id, sizeof(id), "%s", server_cli_str(j, "id", ""));
    snprintf(st, sizeof(st), "%s", server_cli_str(j, "state", "?"));
    json_decref(j);
    j = NULL;
    if ((status = wait_over(state, id, st)))
      return status;
    if ((status = job_get(state, id, &j, &daemon)))
      return status;
  }
  if (json) {
    /* the keys `job --json` has always printed; the API's job has more */
    json_t *o = json_pack(
        "{s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "id", json_object_get(j, "id"), "user",
        json_object_get(j, "user"), "device", json_object_get(j, "device"), "state",
        json_object_get(j, "state"), "error", json_object_get(j, "error"), "result",
        json_object_get(j, "result"), "device_online", json_object_get(j, "device_online"));
    status = server_cli_print_json(o, 0);
  } else {
    const char *dev = server_cli_str(j, "device", NULL);
    char online[700];
    if (!dev)
      snprintf(online, sizeof(online), "-");
    else if (daemon || !json_is_null(json_object_get(j, "device_online")))
      snprintf(online, sizeof(online), "%s",
               server_cli_online_word(json_object_get(j, "device_online")));
    else
      snprintf(online, sizeof(online), "unknown (daemon not running)");
    json_t *args = json_object_get(j, "args");
    char *args_text = args ? json_dumps(args, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    printf("id:       %s\nuser:     %s\ndevice:   %s\nonline:   %s\nstate:    %s\nerror:    %s\n"
           "created:  %s\nupdated:  %s\ndeadline: %s\n",
           server_cli_str(j, "id", "?"), server_cli_str(j, "user", "?"), dev ? dev : "-", online,
           server_cli_str(j, "state", "?"), server_cli_str(j, "error", "-"),
           server_cli_str(j, "created", "-"), server_cli_str(j, "updated", "-"),
           server_cli_str(j, "deadline", "none"));
    if (json_is_string(json_object_get(j, "queue_expires"))) /* it waited (or waits) */
      printf("queued:   until %s\n", server_cli_str(j, "queue_expires", "-"));
    json_t *where = json_object_get(j, "where");
    if (json_object_size(where)) {
      char text[SERVER_DB_LABELS_MAX * (2 * SERVER_DB_LABEL_MAX + 2) + 1] = "";
      size_t o = 0;
      const char *k;
      json_t *v;
      json_object_foreach(where, k, v) {
        int n = snprintf(text + o, sizeof(text) - o, "%s%s=%s", o ? "," : "", k,
                         json_string_value(v) ? json_string_value(v) : "");
        if (n < 0 || (size_t)n >= sizeof(text) - o)
          break;
        o += (size_t)n;
      }
      printf("where:    %s\n", text);
    }
    printf("args:     %s\nresult:   ", args_text ? args_text : "?");
    free(args_text);
    json_t *res = json_object_get(j, "result");
    if (json_is_object(res)) {
      fflush(stdout);
      status = server_cli_print_json(json_incref(res), 1);
    } else {
      printf("none\n");
    }
  }
  if (wait && status == 0)
    status = job_exit_status(j);
  json_decref(j);
  return status;
}
