/* cordon-server dispatch / cancel: requests to the running daemon (the
 * package's bytes travel over the admin socket). A
 * dispatch --wait is two requests: the dispatch (its reply names the job at
 * once, printed on stderr so that it can be cancelled), then a wait for that
 * job. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/id.h"
#include "server/admin_client.h"
#include "server/admin_ops.h"
#include "server/cli.h"
#include "server/db.h"

static void print_json(json_t *j) {
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (s) {
    puts(s);
    free(s);
  }
  fflush(stdout);
}

/* A daemon error reply: its code and message, and for no_eligible_device
 * each candidate's reason on stderr. */
static int reply_error(json_t *reply) {
  const char *message;
  int err = admin_reply_err(reply, &message);
  json_t *cands = json_object_get(reply, ADMIN_REPLY_CANDIDATES);
  size_t i;
  json_t *c;
  json_array_foreach(cands, i, c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    fprintf(stderr, "  device %s%s%s%s: %s\n", json_string_value(json_object_get(c, "device")),
            name ? " (" : "", name ? name : "", name ? ")" : "",
            json_string_value(json_object_get(c, "reason")));
  }
  return server_cli_failf(err, "%s", message ? message : "failed");
}

/* --explain: every candidate and the verdict, on stdout. */
static int print_explain(json_t *reply) {
  struct server_cli_table t;
  server_cli_table_init(&t, 7, "DEVICE", "NAME", "ONLINE", "LOAD", "LAST SEEN", "LABELS",
                        "VERDICT");
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(reply, ADMIN_REPLY_CANDIDATES), i, c) {
    const char *reason = json_string_value(json_object_get(c, "reason"));
    char name[4 * SERVER_DB_NAME_MAX + 1], load[32], seen[64], labels[512] = "";
    server_cli_escape(json_string_value(json_object_get(c, "name")), name, sizeof(name));
    json_t *run = json_object_get(c, "running");
    snprintf(load, sizeof(load), "%s", "-");
    if (json_is_integer(run))
      snprintf(load, sizeof(load), "%lld/%lld", (long long)json_integer_value(run),
               (long long)json_integer_value(json_object_get(c, "max_jobs")));
    server_cli_format_time(json_integer_value(json_object_get(c, "last_seen")), "never", seen,
                           sizeof(seen));
    const char *k;
    json_t *v;
    size_t o = 0;
    json_object_foreach(json_object_get(c, "labels"), k, v) {
      int n = snprintf(labels + o, sizeof(labels) - o, "%s%s=%s", o ? "," : "", k,
                       json_string_value(v));
      if (n < 0 || (size_t)n >= sizeof(labels) - o)
        break;
      o += (size_t)n;
    }
    bool chosen = json_is_true(json_object_get(c, "chosen"));
    server_cli_table_row(&t, json_string_value(json_object_get(c, "device")), name[0] ? name : "-",
                         json_is_true(json_object_get(c, "online")) ? "online" : "offline", load,
                         seen, labels[0] ? labels : "-",
                         chosen    ? "chosen"
                         : !reason ? "eligible, not the least loaded"
                                   : reason);
  }
  (void)server_cli_table_print(&t);
  server_cli_table_release(&t);
  const char *decision = json_string_value(json_object_get(reply, ADMIN_REPLY_DECISION));
  const char *dev = json_string_value(json_object_get(reply, ADMIN_REPLY_DEVICE));
  if (decision && strcmp(decision, "send") == 0)
    printf("decision: send to %s\n", dev ? dev : "?");
  else if (decision && strcmp(decision, "queue") == 0)
    printf("decision: queue until %s comes online\n", dev ? dev : "an eligible device");
  else
    printf("decision: refuse (no_eligible_device)\n");
  return fflush(stdout) == 0 ? 0 : server_cli_failf(-EIO, "cannot write to stdout");
}

/* The job of a wait reply: its result JSON on stdout, the exit status of
 * the job (docs/DESIGN.md section 2.1). */
static int print_outcome(json_t *job) {
  json_t *res = json_object_get(job, "result");
  const char *st = json_string_value(json_object_get(job, "state"));
  if (json_is_object(res)) {
    print_json(res);
    if (json_is_true(json_object_get(job, "late")))
      fprintf(stderr, "%s: job %s expired before its result came (late)\n", SERVER_PROG,
              json_string_value(json_object_get(job, "id")));
    json_t *ec = json_object_get(res, "exit_code");
    json_t *err = json_object_get(res, "error");
    if (json_is_object(err))
      return server_cli_failf(cordon_err_from_name(json_string_value(json_object_get(err, "code"))),
                              "%s", json_string_value(json_object_get(err, "message")));
    return json_is_integer(ec) && json_integer_value(ec) == 0 ? 0 : 1;
  }
  int code = cordon_err_from_name(json_string_value(json_object_get(job, "error")));
  if (!code && st && strcmp(st, "cancelled") == 0)
    code = CORDON_E_CANCELLED; /* only what happened: never a guess */
  else if (!code && st && strcmp(st, "expired") == 0)
    code = CORDON_E_DEVICE_LOST;
  else if (!code)
    code = CORDON_E_INTERNAL;
  return server_cli_failf(code, "job %s ended %s without a result: %s",
                          json_string_value(json_object_get(job, "id")), st ? st : "?",
                          cordon_err_message(code));
}

/* Wait for job id through the daemon; the reply's "job" in *out_job. A
 * wait the daemon cut off (it stopped or died) names the job and how to
 * wait for it again. */
static int wait_job(const char *state, const char *id, json_t **out_reply) {
  json_t *req = admin_request_new(ADMIN_OP_WAIT);
  int r = req ? admin_request_set(req, ADMIN_ARG_JOB, json_string(id)) : -ENOMEM;
  struct cordon_diag diag = {{0}};
  if (r == 0)
    r = admin_call(state, req, out_reply, &diag);
  json_decref(req);
  if (r < 0) {
    int rc = server_cli_admin_fail(r, &diag);
    fprintf(stderr,
            "%s: job %s goes on without the daemon's answer; `%s job %s --wait` waits for it "
            "again\n",
            SERVER_PROG, id, SERVER_PROG, id);
    return rc;
  }
  return 0;
}

/* With no daemon to ask: an unknown user or device is the database's
 * answer (its exit status), as the daemon's would be; else 0 (the caller
 * says the daemon is not running). The daemon does these checks itself. */
static int offline_check(const char *state, const char *user, const char *device) {
  struct server_db *db = NULL;
  if (server_db_open(state, 0, &db, NULL) < 0)
    return 0;
  struct server_db_user u;
  struct server_db_device named = {0};
  struct cordon_diag ud = {{0}};
  int status = 0, uerr = server_db_user_get_by_name(db, user, &u, &ud);
  if (uerr)
    status = server_cli_db_fail(uerr, &ud);
  else if (device && !cordon_id_hex_valid(device) &&
           (status = server_cli_device_resolve(db, device, user, &named)) == 0)
    server_db_device_release(&named);
  server_db_close(db);
  return status;
}

int server_cmd_dispatch(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"user", required_argument, NULL, 'u'},
                                       {"device", required_argument, NULL, 'd'},
                                       {"wait", no_argument, NULL, 'w'},
                                       {"detach", no_argument, NULL, 'D'},
                                       {"where", required_argument, NULL, 'W'},
                                       {"no-queue", no_argument, NULL, 'n'},
                                       {"queue-ttl", required_argument, NULL, 't'},
                                       {"explain", no_argument, NULL, 'e'},
                                       {"state", required_argument, NULL, 's'},
                                       {"key", required_argument, NULL, 'k'},
                                       {0}};
  const char *state = cli->state_dir, *user = NULL, *device = NULL, *key = NULL;
  bool wait = false, detach = false, no_queue = false, explain = false;
  int64_t ttl = 0;
  json_t *where = json_array();
  struct server_db_labels seen = {0};
  int c;
  if (!where)
    return server_cli_failf(-ENOMEM, "out of memory");
  optind = 0; /* 0: glibc re-initialises its scanner */
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    struct server_db_label l;
    struct cordon_diag ld = {{0}};
    switch (c) {
    case 'u':
      user = optarg;
      break;
    case 'd':
      device = optarg;
      break;
    case 'w':
      wait = true;
      break;
    case 'D':
      detach = true;
      break;
    case 'W':
      if (server_db_label_parse(optarg, &l, &ld) < 0) {
        json_decref(where);
        return server_cli_failf(CORDON_E_USAGE, "--where %s", ld.msg);
      }
      if (server_db_labels_get(&seen, l.key) || server_db_labels_put(&seen, &l, &ld) < 0) {
        json_decref(where);
        return server_cli_failf(CORDON_E_USAGE, "--where: label %s given twice, or more than %d",
                                l.key, SERVER_DB_LABELS_MAX);
      }
      json_array_append_new(where, json_string(optarg));
      break;
    case 'n':
      no_queue = true;
      break;
    case 't':
      if (server_cli_parse_duration(optarg, &ttl) < 0 || ttl < 1 || ttl > SERVER_DB_QUEUE_TTL_MAX) {
        json_decref(where);
        return server_cli_failf(CORDON_E_USAGE,
                                "--queue-ttl: a duration from 1s to 30d (90s, 10m, 1h30m)");
      }
      break;
    case 'e':
      explain = true;
      break;
    case 's':
      state = optarg;
      break;
    case 'k':
      if (!server_db_job_key_valid(optarg)) {
        json_decref(where);
        return server_cli_failf(CORDON_E_USAGE,
                                "--key: 1 to %d printable ASCII characters, no space",
                                SERVER_DB_KEY_MAX);
      }
      key = optarg;
      break;
    default:
      json_decref(where);
      return server_cli_bad_option("dispatch", NULL, argv);
    }
  }
  /* getopt permutes: the package is the first operand, the rest are args */
  if (!user || optind >= argc || (wait && detach) || (no_queue && ttl) ||
      (explain && (wait || detach))) {
    json_decref(where);
    return server_cli_usage("dispatch", NULL, "%s",
                            !user             ? "--user USER is missing"
                            : optind >= argc  ? "FILE.cpkg is missing"
                            : wait && detach  ? "--wait and --detach exclude each other"
                            : no_queue && ttl ? "--no-queue and --queue-ttl exclude each other"
                                              : "--explain sends nothing: no --wait or --detach");
  }
  /* the package's bytes go over the socket: the daemon need not read our files */
  int pkg_fd = open(argv[optind], O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (pkg_fd < 0) {
    json_decref(where);
    int known = offline_check(state, user, device);
    if (known)
      return known;
    return server_cli_failf(CORDON_E_USAGE, "%s: cannot read the package", argv[optind]);
  }
  json_t *args = json_array();
  for (int i = optind + 1; args && i < argc; i++)
    json_array_append_new(args, json_string(argv[i]));
  json_t *req = admin_request_new(ADMIN_OP_DISPATCH);
  int r = req ? admin_request_set(req, ADMIN_ARG_ARGS, args) : -ENOMEM;
  if (!req)
    json_decref(args);
  if (r == 0)
    r = admin_request_set(req, ADMIN_ARG_USER, json_string(user));
  if (r == 0 && device)
    r = admin_request_set(req, ADMIN_ARG_DEVICE, json_string(device));
  if (r == 0 && json_array_size(where))
    r = admin_request_set(req, ADMIN_ARG_WHERE, json_incref(where));
  if (r == 0 && no_queue)
    r = admin_request_set(req, ADMIN_ARG_NO_QUEUE, json_true());
  if (r == 0 && ttl)
    r = admin_request_set(req, ADMIN_ARG_QUEUE_TTL, json_integer(ttl));
  if (r == 0 && explain)
    r = admin_request_set(req, ADMIN_ARG_EXPLAIN, json_true());
  if (r == 0 && key)
    r = admin_request_set(req, ADMIN_ARG_KEY, json_string(key));
  json_decref(where);
  json_t *reply = NULL;
  struct cordon_diag diag = {{0}};
  if (r == 0)
    r = admin_call_with_file(state, req, pkg_fd, &reply, &diag);
  close(pkg_fd);
  json_decref(req);
  /* not asked (no daemon, or not a package file): an unknown user or
   * device is still the database's answer, first */
  int known = r == -ENOENT || r == -ECONNREFUSED || r == CORDON_E_USAGE
                  ? offline_check(state, user, device)
                  : 0;
  if (known)
    return known;
  if (r < 0)
    return server_cli_admin_fail(r, &diag);
  if (!admin_reply_is_ok(reply)) {
    int rc = reply_error(reply); /* the daemon's code: not_found for an unknown user */
    json_decref(reply);
    return rc;
  }
  if (explain) {
    int rc = print_explain(reply);
    json_decref(reply);
    return rc;
  }
  char id[CORDON_ID_HEX_SIZE];
  snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(reply, ADMIN_REPLY_JOB_ID)));
  const char *st = json_string_value(json_object_get(reply, ADMIN_REPLY_STATE));
  bool queued = st && strcmp(st, "queued") == 0;
  bool existing = json_is_true(json_object_get(reply, ADMIN_REPLY_EXISTING));
  if (existing) {
    fprintf(stderr, "%s: job %s was dispatched with key %s before (it is %s): no new job\n",
            SERVER_PROG, id, key ? key : "?", st ? st : "?");
    queued = false;
  }
  const char *dev = json_string_value(json_object_get(reply, ADMIN_REPLY_DEVICE));
  char until[64];
  server_cli_format_time(json_integer_value(json_object_get(reply, ADMIN_REPLY_QUEUE_EXPIRES)), "?",
                         until, sizeof(until));
  if (!wait) {
    printf("%s\n", id);
    fflush(stdout);
    if (queued)
      fprintf(stderr, "%s: job %s queued: it waits for %s until %s\n", SERVER_PROG, id,
              dev ? dev : "an eligible device", until);
    json_decref(reply);
    return 0;
  }
  /* the id at once, so that it can be cancelled while we wait */
  if (queued)
    fprintf(stderr, "%s: job %s queued: it waits for %s until %s\n", SERVER_PROG, id,
            dev ? dev : "an eligible device", until);
  else if (!existing)
    fprintf(stderr, "%s: job %s sent to device %s\n", SERVER_PROG, id, dev ? dev : "?");
  json_decref(reply);
  reply = NULL;
  int rc = wait_job(state, id, &reply);
  if (rc)
    return rc;
  if (!admin_reply_is_ok(reply))
    rc = reply_error(reply);
  else
    rc = print_outcome(json_object_get(reply, ADMIN_REPLY_JOB));
  json_decref(reply);
  return rc;
}

/* The same for cancel: an unknown job (not_found) or one over already
 * (not_running) is the database's answer when no daemon runs. */
static int offline_job_check(const char *state, const char *id) {
  struct server_db *db = NULL;
  if (server_db_open(state, 0, &db, NULL) < 0)
    return 0;
  struct server_db_job job;
  struct cordon_diag jd = {{0}};
  int status = 0, err = server_db_job_get(db, id, &job, &jd);
  server_db_close(db);
  if (err)
    return server_cli_db_fail(err, &jd);
  if (server_db_job_state_is_final(job.state))
    status = server_cli_failf(CORDON_E_NOT_RUNNING, "job %s already ended: %s", id,
                              server_db_job_state_name(job.state));
  server_db_job_release(&job);
  return status;
}

int server_cmd_cancel(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'}, {0}};
  const char *state = cli->state_dir;
  int c;
  optind = 0; /* 0: glibc re-initialises its scanner */
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == 's')
      state = optarg;
    else
      return server_cli_bad_option("cancel", NULL, argv);
  }
  if (optind + 1 != argc)
    return server_cli_usage("cancel", NULL, optind == argc ? "JOB is missing" : "one JOB expected");
  json_t *req = admin_request_new(ADMIN_OP_CANCEL);
  int r = req ? admin_request_set(req, ADMIN_ARG_JOB, json_string(argv[optind])) : -ENOMEM;
  json_t *reply = NULL;
  struct cordon_diag diag = {{0}};
  if (r == 0)
    r = admin_call(state, req, &reply, &diag);
  json_decref(req);
  int known = r == -ENOENT || r == -ECONNREFUSED ? offline_job_check(state, argv[optind]) : 0;
  if (known)
    return known;
  if (r < 0)
    return server_cli_admin_fail(r, &diag);
  int rc = admin_reply_is_ok(reply) ? 0 : reply_error(reply);
  if (rc == 0)
    fprintf(stderr, "cordon-server: job %s cancelled\n", argv[optind]);
  json_decref(reply);
  return rc;
}
