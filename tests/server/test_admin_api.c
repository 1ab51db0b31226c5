/* The admin API (docs/protocol/admin.md) against the real daemon and real
 * agents on loopback, through raw socket lines as a client written from the
 * page would send them: the version exchange, many requests on one
 * connection, refusals (unknown op or key, a line too long, a package too
 * large before anything is stored), dispatch with the package's bytes,
 * watch and follow, the stream limit, and who may connect (SO_PEERCRED and
 * the admin group, with the cordon-test and cordon-job accounts). */
#include "e2e.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "admin_conn.h"
#include "server/admin_ops.h"

static const char hello_manifest[] =
    "{\"name\":\"hello\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

static void assert_error(json_t *reply, const char *code, const char *message) {
  cr_assert(json_is_false(json_object_get(reply, "ok")), "not an error: %s", json_dumps(reply, 0));
  cr_assert_str_eq(str(reply, "code"), code);
  if (message)
    cr_assert_str_eq(str(reply, "message"), message);
  json_decref(reply);
}

static char *slurp_file(const char *path, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f);
  char *buf = malloc(1 << 20);
  *out_len = fread(buf, 1, 1 << 20, f);
  fclose(f);
  return buf;
}

/* {"op":"dispatch", ...} with the package's bytes after the line; the
 * reply. */
static json_t *dispatch_bytes(struct conn *c, const char *pkg, const char *extra) {
  size_t n;
  char *bytes = slurp_file(pkg, &n);
  char line[512];
  snprintf(line, sizeof(line), "{\"op\":\"dispatch\",\"user\":\"alice\",\"bytes\":%zu%s}", n,
           extra ? extra : "");
  send_line(c, line);
  send_raw(c, bytes, n);
  free(bytes);
  json_t *j = read_line(c);
  cr_assert_not_null(j);
  return j;
}

TestSuite(admin_api, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

Test(admin_api, hello_agrees_on_version_1_and_only_as_the_first_request) {
  struct conn *c = conn_open();
  json_t *r = ask(c, "{\"op\":\"hello\",\"versions\":[3,1,2]}");
  cr_assert(json_is_true(json_object_get(r, "ok")));
  cr_assert_eq(json_integer_value(json_object_get(r, "version")), 1);
  cr_assert_str_eq(str(r, "server"), "cordon-server");
  json_t *ops = json_object_get(r, "ops");
  cr_assert_eq(json_array_size(ops), ADMIN_OP_COUNT_);
  cr_assert_str_eq(json_string_value(json_array_get(ops, 0)), "hello");
  json_decref(r);
  assert_error(ask(c, "{\"op\":\"hello\",\"versions\":[1]}"), "usage",
               "hello must be the first request");
  assert_ok(ask(c, "{\"op\":\"ping\"}")); /* the connection goes on */
  conn_close(c);

  c = conn_open();
  assert_error(ask(c, "{\"op\":\"hello\",\"versions\":[2,7]}"), "usage",
               "no common version: this server speaks version 1");
  assert_error(ask(c, "{\"op\":\"hello\",\"versions\":[\"1\"]}"), "usage",
               "hello must be the first request");
  conn_close(c);

  /* without hello: version 1, as the one-shot command line speaks it */
  c = conn_open();
  assert_ok(ask(c, "{\"op\":\"ping\"}"));
  conn_close(c);
}

Test(admin_api, one_connection_carries_many_requests_even_sent_at_once) {
  struct conn *c = conn_open();
  const char *lines =
      "{\"op\":\"ping\"}\n{\"op\":\"devices\"}\n{\"op\":\"nope\"}\n{\"op\":\"jobs\"}\n";
  send_raw(c, lines, strlen(lines));
  assert_ok(read_line(c));
  json_t *r = read_line(c);
  cr_assert(json_is_array(json_object_get(r, "devices")));
  json_decref(r);
  assert_error(read_line(c), "usage", "unknown op");
  r = read_line(c);
  cr_assert_eq(json_array_size(json_object_get(r, "jobs")), 0);
  json_decref(r);
  conn_close(c);
}

Test(admin_api, unknown_keys_and_ops_are_refused_and_the_connection_goes_on) {
  struct conn *c = conn_open();
  assert_error(ask(c, "{\"op\":\"ping\",\"verbose\":true}"), "usage",
               "unknown key 'verbose' for op ping");
  assert_error(ask(c, "{\"op\":\"jobs\",\"job\":\"x\"}"), "usage", "unknown key 'job' for op jobs");
  assert_error(ask(c, "{\"op\":\"frobnicate\"}"), "usage", "unknown op");
  assert_error(ask(c, "{\"op\":\"job\",\"job\":\"0123456789abcdef0123456789abcdef\"}"), "not_found",
               "no such job");
  assert_error(ask(c, "{\"op\":\"jobs\",\"user\":\"nobody\"}"), "not_found", "no user 'nobody'");
  assert_error(ask(c, "{\"op\":\"jobs\",\"limit\":-1}"), "usage", NULL);
  assert_error(ask(c, "{\"op\":\"device\",\"device\":\"0123456789abcdef0123456789abcdef\"}"),
               "not_found", "no device '0123456789abcdef0123456789abcdef'");
  assert_error(ask(c, "{\"op\":\"dispatch\",\"user\":\"alice\"}"), "usage",
               "dispatch needs user, package and args");
  assert_ok(ask(c, "{\"op\":\"ping\"}"));
  conn_close(c);
}

Test(admin_api, a_line_too_long_is_refused_and_the_connection_closed) {
  struct conn *c = conn_open();
  static char big[ADMIN_REQUEST_MAX + 100];
  memset(big, ' ', sizeof(big));
  memcpy(big, "{\"op\":\"ping\"", 12);
  send_raw(c, big, sizeof(big));
  assert_error(read_line(c), "limit_exceeded", "request too long");
  cr_assert_null(read_line(c), "closed: no next line can be found");
  conn_close(c);
}

Test(admin_api, a_package_too_large_is_refused_before_anything_is_stored) {
  struct conn *c = conn_open();
  /* 1 TiB announced, not one byte sent: the answer comes at once */
  send_line(c, "{\"op\":\"dispatch\",\"user\":\"alice\",\"bytes\":1099511627776}");
  assert_error(read_line(c), "package_too_large", NULL);
  cr_assert_null(read_line(c), "closed: the bytes are not read past");
  conn_close(c);
  cr_assert_eq(uploads(), 0);
  c = conn_open();
  send_line(c, "{\"op\":\"dispatch\",\"user\":\"alice\",\"bytes\":-1}");
  assert_error(read_line(c), "package_too_large", NULL);
  conn_close(c);
  char want[80];
  snprintf(want, sizeof(want), "bytes: 0 to %llu", ADMIN_BODY_MAX);
  cr_assert(count_in(e2e_server_log, want) >= 2, "logged as refused");
}

Test(admin_api, a_refused_request_with_bytes_is_read_past) {
  struct conn *c = conn_open();
  send_line(c, "{\"op\":\"dispatch\",\"user\":\"alice\",\"bytes\":10,\"colour\":\"red\"}");
  send_raw(c, "{\"op\":\"x\"}", 10); /* bytes that look like a line: they are not one */
  assert_error(read_line(c), "usage", "unknown key 'colour' for op dispatch");
  assert_ok(ask(c, "{\"op\":\"ping\"}"));
  /* a package path is for the daemon's own user and root; this test is root */
  assert_error(ask(c, "{\"op\":\"dispatch\",\"user\":\"alice\",\"package\":\"/nonexistent\","
                      "\"bytes\":0}"),
               "usage", "dispatch needs user, package and args");
  conn_close(c);
  cr_assert_eq(uploads(), 0);
}

Test(admin_api, dispatch_with_bytes_runs_the_job_and_watch_sees_it) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  char *pkg = pack("hello", hello_manifest, "echo \"hi $1\"\n");
  struct conn *w = conn_open();
  assert_ok(ask(w, "{\"op\":\"watch\"}"));
  start_agent(a);
  struct conn *c = conn_open();
  assert_ok(ask(c, "{\"op\":\"hello\",\"versions\":[1]}"));
  json_t *r = dispatch_bytes(c, pkg, ",\"args\":[\"api\"],\"wait\":true");
  cr_assert(json_is_true(json_object_get(r, "ok")), "%s", json_dumps(r, 0));
  json_t *job = json_object_get(r, "job");
  cr_assert_str_eq(str(job, "state"), "done");
  cr_assert_str_eq(str(json_object_get(job, "result"), "stdout"), "hi api\n");
  char id[33];
  snprintf(id, sizeof(id), "%s", str(job, "id"));
  json_decref(r);
  cr_assert_eq(uploads(), 0, "the bytes' file is gone");

  r = ask(c, "{\"op\":\"jobs\",\"user\":\"alice\"}");
  cr_assert_eq(json_array_size(json_object_get(r, "jobs")), 1);
  cr_assert_str_eq(str(json_array_get(json_object_get(r, "jobs"), 0), "id"), id);
  json_decref(r);
  char line[200];
  snprintf(line, sizeof(line), "{\"op\":\"job\",\"job\":\"%s\"}", id);
  r = ask(c, line);
  job = json_object_get(r, "job");
  cr_assert(json_is_true(json_object_get(job, "device_online")));
  cr_assert_str_eq(json_string_value(json_array_get(json_object_get(job, "args"), 0)), "api");
  json_decref(r);
  snprintf(line, sizeof(line), "{\"op\":\"label\",\"device\":\"%s\",\"set\":[\"gpu=yes\"]}", a->id);
  r = ask(c, line);
  cr_assert_str_eq(str(json_object_get(r, "labels"), "gpu"), "yes");
  json_decref(r);
  snprintf(line, sizeof(line), "{\"op\":\"device\",\"device\":\"%s\"}", a->id);
  r = ask(c, line);
  cr_assert_str_eq(str(json_object_get(json_object_get(r, "device"), "labels"), "gpu"), "yes");
  cr_assert(json_is_true(json_object_get(json_object_get(r, "device"), "online")));
  json_decref(r);

  /* the watch: the device came, the job went sent -> running -> done */
  const char *want[] = {"device_online", "sent", "running", "done"};
  size_t seen = 0;
  while (seen < 4) {
    json_t *ev = read_line(w);
    cr_assert_not_null(ev);
    const char *name = str(ev, "event");
    if (strcmp(name, "device_online") == 0) {
      cr_assert_str_eq(str(ev, "device"), a->id);
      cr_assert_str_eq(str(ev, "user"), "alice");
      cr_assert_eq(seen, 0);
      seen++;
    } else if (strcmp(name, "job_state") == 0) {
      cr_assert_str_eq(str(ev, "job"), id);
      cr_assert_str_eq(str(ev, "state"), want[seen], "%s", json_dumps(ev, 0));
      seen++;
    }
    json_decref(ev);
  }
  e2e_stop(&a->pid, SIGTERM);
  json_t *ev = read_line(w);
  cr_assert_str_eq(str(ev, "event"), "device_offline");
  cr_assert_str_eq(str(ev, "device"), a->id);
  json_decref(ev);
  conn_close(w);
  conn_close(c);
  free(pkg);
}

Test(admin_api, follow_of_a_finished_job_is_its_end_at_once) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *pkg = pack("hello", hello_manifest, "echo over\n");
  struct conn *c = conn_open();
  json_t *r = dispatch_bytes(c, pkg, ",\"wait\":true");
  char id[33], line[200];
  snprintf(id, sizeof(id), "%s", str(json_object_get(r, "job"), "id"));
  json_decref(r);
  snprintf(line, sizeof(line), "{\"op\":\"follow\",\"job\":\"%s\"}", id);
  assert_ok(ask(c, line));
  r = read_line(c);
  cr_assert_str_eq(str(r, "event"), "end");
  cr_assert(json_is_true(json_object_get(r, "ok")));
  cr_assert_str_eq(str(json_object_get(r, "job"), "state"), "done");
  cr_assert_str_eq(str(json_object_get(json_object_get(r, "job"), "result"), "stdout"), "over\n");
  json_decref(r);
  assert_ok(ask(c, "{\"op\":\"ping\"}")); /* after the end, requests again */
  assert_error(ask(c, "{\"op\":\"follow\",\"job\":\"0123456789abcdef0123456789abcdef\"}"),
               "not_found", "no such job");
  conn_close(c);
  free(pkg);
}

Test(admin_api, a_non_member_uid_is_refused_without_a_reply) {
  /* let cordon-test reach the socket: only SO_PEERCRED stands in its way */
  char sock[400];
  snprintf(sock, sizeof(sock), "%s/%s", e2e_state, ADMIN_SOCKET_FILE);
  cr_assert_eq(chmod(e2e_state, 0711), 0);
  cr_assert_eq(chmod(sock, 0666), 0);
  struct passwd *pw = getpwnam("cordon-test");
  cr_assert_not_null(pw, "the cordon-test account (scripts/test-setup.sh)");
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
      _exit(10);
    int fd = sock_connect();
    if (fd < 0)
      _exit(11);
    (void)!send(fd, "{\"op\":\"ping\"}\n", 14, MSG_NOSIGNAL); /* it may be closed already */
    char b[64];
    _exit(read(fd, b, sizeof(b)) <= 0 ? 0 : 12); /* closed (or reset), nothing said */
  }
  int st;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
  char want[80];
  snprintf(want, sizeof(want), "msg=\"admin connection refused\" uid=%d ", (int)pw->pw_uid);
  cr_assert(wait_in(e2e_server_log, want, 2000), "logged with its uid");
}

/* The admin group, here cordon-test's own group (CORDON_ADMIN_GROUP), and a
 * small stream limit (CORDON_ADMIN_STREAM_MAX). */
static void group_setup(void) {
  setenv("CORDON_ADMIN_GROUP", "cordon-test", 1);
  setenv("CORDON_ADMIN_STREAM_MAX", "4096", 1);
  e2e_setup();
}

TestSuite(admin_group, .init = group_setup, .fini = e2e_teardown, .timeout = 180);

static int child_ping_as(const char *account) {
  struct passwd *pw = getpwnam(account);
  cr_assert_not_null(pw, "the %s account (scripts/test-setup.sh)", account);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
      _exit(10);
    int fd = sock_connect();
    if (fd < 0)
      _exit(11);
    (void)!send(fd, "{\"op\":\"ping\"}\n", 14, MSG_NOSIGNAL); /* it may be closed already */
    char b[64] = "";
    ssize_t n = read(fd, b, sizeof(b) - 1);
    _exit(n > 0 && strncmp(b, "{\"ok\":true}\n", 12) == 0 ? 0 : n <= 0 ? 20 : 21);
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Test(admin_group, the_socket_is_the_groups_and_members_may_talk_others_not) {
  char sock[400];
  snprintf(sock, sizeof(sock), "%s/%s", e2e_state, ADMIN_SOCKET_FILE);
  struct stat st;
  cr_assert_eq(stat(sock, &st), 0);
  struct group *g = getgrnam("cordon-test");
  cr_assert_not_null(g);
  cr_assert_eq(st.st_mode & 0777, 0660, "mode %o", st.st_mode & 0777);
  cr_assert_eq(st.st_gid, g->gr_gid);
  cr_assert(count_in(e2e_server_log, "state directory is not searchable by the group") == 1,
            "the daemon says the 0700 state directory keeps members out");
  /* what the Debian package does: the group may search the directory */
  cr_assert_eq(chown(e2e_state, 0, g->gr_gid), 0);
  cr_assert_eq(chmod(e2e_state, 0710), 0);
  cr_assert_eq(child_ping_as("cordon-test"), 0, "a member is answered");
  /* cordon-job: not a member; the socket's mode stops it (EACCES) */
  cr_assert_eq(child_ping_as("cordon-job"), 11);
  /* and when the mode lets it in, SO_PEERCRED does not */
  cr_assert_eq(chmod(e2e_state, 0711), 0);
  cr_assert_eq(chmod(sock, 0666), 0);
  int refused = child_ping_as("cordon-job");
  cr_assert_eq(refused, 20, "child %d", refused);
  cr_assert(wait_in(e2e_server_log, "not the daemon's user, root or a member of", 2000));
}

Test(admin_group, a_watch_that_does_not_read_is_dropped_with_an_error_line) {
  pair_agent(0, "laptop", NULL); /* offline: dispatches queue */
  char *pkg = pack("hello", hello_manifest, "echo hi\n");
  struct conn *w = conn_open();
  assert_ok(ask(w, "{\"op\":\"watch\"}"));
  struct conn *c = conn_open();
  size_t n;
  char *bytes = slurp_file(pkg, &n);
  char line[200];
  snprintf(line, sizeof(line), "{\"op\":\"dispatch\",\"user\":\"alice\",\"bytes\":%zu}", n);
  int i;
  /* queued, then cancelled: two events each, until the watcher is behind */
  for (i = 0; i < 3000 && !count_in(e2e_server_log, "msg=\"admin stream dropped"); i++) {
    send_line(c, line);
    send_raw(c, bytes, n);
    json_t *r = read_line(c);
    cr_assert_str_eq(str(r, "state"), "queued", "%s", json_dumps(r, 0));
    char cancel[120];
    snprintf(cancel, sizeof(cancel), "{\"op\":\"cancel\",\"job\":\"%s\"}", str(r, "job_id"));
    json_decref(r);
    assert_ok(ask(c, cancel));
  }
  free(bytes);
  cr_assert(count_in(e2e_server_log, "msg=\"admin stream dropped"), "dropped after %d", i);
  /* what was sent before, then the error line, then the close */
  json_t *last = NULL, *ev;
  int lines = 0;
  while ((ev = read_line(w))) {
    json_decref(last);
    last = ev;
    lines++;
  }
  cr_assert_not_null(last);
  cr_assert_str_eq(str(last, "event"), "error");
  cr_assert_str_eq(str(last, "code"), "limit_exceeded");
  cr_assert(lines > 10);
  json_decref(last);
  conn_close(w);
  assert_ok(ask(c, "{\"op\":\"ping\"}")); /* everyone else goes on */
  conn_close(c);
  free(pkg);
}

/* `job ID --follow` with its stdout on a pipe: the first line comes while
 * the job still runs (it sleeps 2 s before its second). */
Test(admin_api, job_follow_prints_the_first_line_before_the_job_ends) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL); /* offline: the job waits */
  char *pkg = pack("twice", hello_manifest, "echo first; sleep 2; echo second >&2; echo third\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  int po[2], pe[2];
  cr_assert(pipe(po) == 0 && pipe(pe) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    execl(SERVER, SERVER, "job", id, "--follow", "--state", e2e_state, (char *)NULL);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  msleep(300); /* following before the job is sent */
  start_agent(a);
  char buf[256] = "";
  size_t n = 0;
  while (!strchr(buf, '\n')) {
    ssize_t k = read(po[0], buf + n, sizeof(buf) - 1 - n);
    cr_assert_gt(k, 0, "the follower's stdout ended early: '%s'", buf);
    n += (size_t)k;
    buf[n] = '\0';
  }
  cr_assert_str_eq(buf, "first\n");
  cr_assert_str_eq(job_state(id, NULL), "running", "the first line came while it runs");
  ssize_t k;
  while ((k = read(po[0], buf + n, sizeof(buf) - 1 - n)) > 0)
    n += (size_t)k;
  buf[n] = '\0';
  cr_assert_str_eq(buf, "first\nthird\n");
  char err[256];
  n = 0;
  while ((k = read(pe[0], err + n, sizeof(err) - 1 - n)) > 0)
    n += (size_t)k;
  err[n] = '\0';
  cr_assert_str_eq(err, "second\n");
  int st;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the job's exit status: %d", st);
  close(po[0]);
  close(pe[0]);
  cr_assert_str_eq(job_state(id, NULL), "done");
  free(pkg);
}

Test(admin_api, an_upload_left_by_a_dead_daemon_is_removed_at_the_next_start) {
  e2e_stop(&e2e_server_pid, SIGKILL);
  char path[400];
  snprintf(path, sizeof(path), "%s/upload-AbC123", e2e_state);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("half a package", f);
  fclose(f);
  cr_assert_eq(uploads(), 1);
  start_server();
  cr_assert_eq(uploads(), 0);
}

Test(admin_api, streams_end_with_an_error_line_when_the_daemon_stops) {
  pair_agent(0, "laptop", NULL); /* offline: the job waits in the queue */
  char *pkg = pack("hello", hello_manifest, "echo hi\n");
  struct conn *c = conn_open();
  json_t *r = dispatch_bytes(c, pkg, NULL);
  cr_assert_str_eq(str(r, "state"), "queued");
  char line[200];
  snprintf(line, sizeof(line), "{\"op\":\"follow\",\"job\":\"%s\"}", str(r, "job_id"));
  json_decref(r);
  assert_ok(ask(c, line));
  struct conn *w = conn_open();
  assert_ok(ask(w, "{\"op\":\"watch\"}"));
  cr_assert_eq(kill(e2e_server_pid, SIGTERM), 0);
  struct conn *both[] = {c, w};
  for (int i = 0; i < 2; i++) {
    json_t *ev = read_line(both[i]);
    cr_assert_not_null(ev);
    cr_assert_str_eq(str(ev, "event"), "error");
    cr_assert_str_eq(str(ev, "code"), "io_error");
    cr_assert_str_eq(str(ev, "message"), "the server is stopping");
    json_decref(ev);
    cr_assert_null(read_line(both[i]));
    conn_close(both[i]);
  }
  int st;
  cr_assert_eq(waitpid(e2e_server_pid, &st, 0), e2e_server_pid);
  e2e_server_pid = -1;
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
  free(pkg);
}

/* jobs takes the command line's filters; unknown users, jobs and devices
 * are not_found; a device is named by its name (and user) or an id
 * prefix, resolved by the daemon, and device answers `device show`'s
 * object. */
Test(admin_api, jobs_filters_not_found_and_devices_by_name) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL); /* offline: dispatches queue */
  struct e2e_agent *b = pair_agent(1, "desktop", NULL);
  char *pkg = pack("hello", hello_manifest, "echo hi\n");
  struct conn *c = conn_open();
  json_t *r = dispatch_bytes(c, pkg, ",\"device\":\"laptop\"");
  cr_assert_str_eq(str(r, "state"), "queued", "%s", json_dumps(r, 0));
  cr_assert_str_eq(str(r, "device"), a->id, "the daemon resolved the name");
  char on_laptop[33];
  snprintf(on_laptop, sizeof(on_laptop), "%s", str(r, "job_id"));
  json_decref(r);
  char prefix[200];
  snprintf(prefix, sizeof(prefix), ",\"device\":\"%.8s\"", b->id);
  r = dispatch_bytes(c, pkg, prefix);
  cr_assert_str_eq(str(r, "device"), b->id, "an id prefix names it too");
  char on_desktop[33];
  snprintf(on_desktop, sizeof(on_desktop), "%s", str(r, "job_id"));
  json_decref(r);
  char line[300];
  snprintf(line, sizeof(line), "{\"op\":\"cancel\",\"job\":\"%s\"}", on_desktop);
  assert_ok(ask(c, line));

  /* the filters */
  r = ask(c, "{\"op\":\"jobs\",\"user\":\"alice\",\"device\":\"laptop\"}");
  json_t *jobs = json_object_get(r, "jobs");
  cr_assert_eq(json_array_size(jobs), 1, "%s", json_dumps(r, 0));
  json_t *row = json_array_get(jobs, 0);
  cr_assert_str_eq(str(row, "id"), on_laptop);
  cr_assert_str_eq(str(row, "device_name"), "laptop");
  cr_assert_str_eq(str(row, "package"), "hello@1");
  cr_assert(json_is_false(json_object_get(row, "device_online")));
  json_decref(r);
  r = ask(c, "{\"op\":\"jobs\",\"job_state\":\"cancelled\"}");
  jobs = json_object_get(r, "jobs");
  cr_assert_eq(json_array_size(jobs), 1, "%s", json_dumps(r, 0));
  cr_assert_str_eq(str(json_array_get(jobs, 0), "id"), on_desktop);
  cr_assert_str_eq(str(json_array_get(jobs, 0), "error"), "cancelled");
  json_decref(r);
  r = ask(c, "{\"op\":\"jobs\",\"since\":4000000000}");
  cr_assert_eq(json_array_size(json_object_get(r, "jobs")), 0, "none created after 2096");
  json_decref(r);
  r = ask(c, "{\"op\":\"jobs\",\"limit\":1}");
  cr_assert_eq(json_array_size(json_object_get(r, "jobs")), 1);
  json_decref(r);
  assert_error(ask(c, "{\"op\":\"jobs\",\"job_state\":\"sleeping\"}"), "usage", NULL);

  /* the same objects as the command line prints with --json */
  r = ask(c, "{\"op\":\"device\",\"device\":\"laptop\",\"user\":\"alice\"}");
  json_t *dev = json_object_get(r, "device");
  cr_assert_str_eq(str(dev, "id"), a->id, "%s", json_dumps(r, 0));
  cr_assert(json_is_object(json_object_get(dev, "facts")));
  cr_assert_eq(json_array_size(json_object_get(dev, "running_jobs")), 1);
  cr_assert_eq(json_array_size(json_object_get(dev, "recent_jobs")), 1);
  cr_assert(json_is_false(json_object_get(dev, "online")));
  struct out *o = RUN(SERVER, "device", "show", "laptop", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *cli = json_loads(o->out, 0, NULL);
  cr_assert(json_equal(cli, dev), "device show --json is the API's object:\n%s\n%s", o->out,
            json_dumps(dev, 0));
  json_decref(cli);
  free(o);
  json_decref(r);
  r = ask(c, "{\"op\":\"job\",\"job\":\"0123456789abcdef0123456789abcdef\"}");
  assert_error(r, "not_found", "no such job");
  snprintf(line, sizeof(line), "{\"op\":\"job\",\"job\":\"%s\"}", on_laptop);
  r = ask(c, line);
  o = RUN(SERVER, "job", on_laptop, "--json", "--state", e2e_state);
  cli = json_loads(o->out, 0, NULL);
  cr_assert(json_equal(cli, json_object_get(r, "job")), "job --json is the API's object");
  json_decref(cli);
  free(o);
  json_decref(r);

  /* not_found and ambiguity, with the command line's codes */
  assert_error(ask(c, "{\"op\":\"jobs\",\"user\":\"nobody\"}"), "not_found", "no user 'nobody'");
  assert_error(ask(c, "{\"op\":\"device\",\"device\":\"kitchen\"}"), "not_found", NULL);
  assert_error(ask(c, "{\"op\":\"devices\",\"user\":\"nobody\"}"), "not_found", NULL);
  assert_error(ask(c, "{\"op\":\"label\",\"device\":\"kitchen\",\"set\":[\"a=b\"]}"), "not_found",
               NULL);
  assert_error(ask(c, "{\"op\":\"revoke\",\"device\":\"kitchen\"}"), "not_found", NULL);
  r = dispatch_bytes(c, pkg, ",\"device\":\"kitchen\"");
  assert_error(r, "not_found", NULL);
  snprintf(line, sizeof(line), "{\"op\":\"cancel\",\"job\":\"%s\"}", on_desktop);
  assert_error(ask(c, line), "not_running", NULL);
  /* bob's laptop: then the bare name is ambiguous, with user it is not */
  struct out *o2 = RUN(SERVER, "user", "add", "bob", "--state", e2e_state);
  cr_assert_eq(o2->status, 0, "%s", o2->err);
  free(o2);
  char *code = mint_code("bob"), bob_dir[400];
  snprintf(bob_dir, sizeof(bob_dir), "%s/agent-bob", e2e_dir);
  o2 = RUN(AGENT, "--config", bob_dir, "pair", "--server", e2e_addr, "--code", code, "--name",
           "laptop");
  cr_assert_eq(o2->status, 0, "pair bob's laptop: %s", o2->err);
  free(o2);
  free(code);
  r = ask(c, "{\"op\":\"device\",\"device\":\"laptop\"}");
  cr_assert_str_eq(str(r, "code"), "usage", "%s", json_dumps(r, 0));
  cr_assert(strstr(str(r, "message"), "names several devices"), "%s", str(r, "message"));
  json_decref(r);
  r = ask(c, "{\"op\":\"device\",\"device\":\"laptop\",\"user\":\"bob\"}");
  cr_assert(json_is_true(json_object_get(r, "ok")), "%s", json_dumps(r, 0));
  cr_assert_str_eq(str(json_object_get(r, "device"), "owner"), "bob");
  json_decref(r);
  conn_close(c);
  free(pkg);
}

/* Run a command as account (its own group only) to its end. */
static struct out *run_as(const char *account, const char *const *argv) {
  struct passwd *pw = getpwnam(account);
  cr_assert_not_null(pw, "the %s account (scripts/test-setup.sh)", account);
  struct out *o = calloc(1, sizeof(*o));
  char outp[400], errp[400];
  snprintf(outp, sizeof(outp), "%s/as.out", e2e_dir);
  snprintf(errp, sizeof(errp), "%s/as.err", e2e_dir);
  pid_t pid = fork();
  if (pid == 0) {
    int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
      _exit(126);
    if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
      _exit(125);
    execv(argv[0], (char **)argv);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  o->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  FILE *f = fopen(outp, "r");
  size_t n = f ? fread(o->out, 1, sizeof(o->out) - 1, f) : 0;
  o->out[n] = '\0';
  if (f)
    fclose(f);
  f = fopen(errp, "r");
  n = f ? fread(o->err, 1, sizeof(o->err) - 1, f) : 0;
  o->err[n] = '\0';
  if (f)
    fclose(f);
  return o;
}

#define RUN_AS(account, ...) run_as(account, (const char *const[]){__VA_ARGS__, NULL})

/* A member of the admin group, who cannot read the state directory's
 * files (the database among them), runs the admin commands: each goes
 * through the API. */
Test(admin_group, a_member_runs_the_admin_commands_through_the_api) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL); /* offline: the job queues */
  char *pkg = pack("hello", hello_manifest, "echo hi\n");
  cr_assert_eq(chmod(pkg, 0644), 0);
  struct group *g = getgrnam("cordon-test");
  cr_assert_not_null(g);
  cr_assert_eq(chown(e2e_state, 0, g->gr_gid), 0);
  cr_assert_eq(chmod(e2e_state, 0710), 0);
  char db[400];
  snprintf(db, sizeof(db), "%s/cordon.db", e2e_state);
  struct out *o = RUN_AS("cordon-test", "/bin/cat", db);
  cr_assert_neq(o->status, 0, "the member cannot read the database");
  free(o);

  o = RUN_AS("cordon-test", SERVER, "dispatch", "--user", "alice", "--device", "laptop", pkg,
             "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  cr_assert(strstr(o->err, "queued"), "%s", o->err);
  free(o);

  o = RUN_AS("cordon-test", SERVER, "jobs", "--device", "laptop", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "jobs: %s", o->err);
  json_t *jobs = json_loads(o->out, 0, NULL);
  cr_assert_eq(json_array_size(jobs), 1, "%s", o->out);
  cr_assert_str_eq(str(json_array_get(jobs, 0), "id"), id);
  cr_assert(json_is_false(json_object_get(json_array_get(jobs, 0), "device_online")),
            "the daemon's answer: offline, not unknown");
  json_decref(jobs);
  free(o);

  o = RUN_AS("cordon-test", SERVER, "job", id, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "job: %s", o->err);
  cr_assert(strstr(o->out, "state:    queued"), "%s", o->out);
  cr_assert(strstr(o->out, "online:   offline"), "%s", o->out);
  char want[100];
  snprintf(want, sizeof(want), "device:   laptop (%s)", a->id);
  cr_assert(strstr(o->out, want), "%s", o->out);
  free(o);

  o = RUN_AS("cordon-test", SERVER, "devices", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "devices: %s", o->err);
  cr_assert(strstr(o->out, a->id) && strstr(o->out, "laptop"), "%s", o->out);
  cr_assert(!strstr(o->err, "unknown"), "online is known: %s", o->err);
  free(o);

  o = RUN_AS("cordon-test", SERVER, "device", "label", "laptop", "room=3", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "device label: %s", o->err);
  cr_assert_str_eq(o->out, "room=3\n");
  free(o);

  o = RUN_AS("cordon-test", SERVER, "job", "0123456789abcdef0123456789abcdef", "--state",
             e2e_state);
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "not_found"), "%s", o->err);
  free(o);

  o = RUN_AS("cordon-test", SERVER, "cancel", id, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "cancel: %s", o->err);
  free(o);
  cr_assert_str_eq(job_state(id, NULL), "cancelled");
  o = RUN_AS("cordon-test", SERVER, "cancel", id, "--state", e2e_state);
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "not_running"), "the daemon's check: %s", o->err);
  free(o);

  o = RUN_AS("cordon-test", SERVER, "pair-code", "list", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "pair-code list: %s", o->err);
  json_t *codes = json_loads(o->out, 0, NULL);
  cr_assert_eq(json_array_size(codes), 1, "the code that paired the laptop: %s", o->out);
  cr_assert_str_eq(str(json_array_get(codes, 0), "state"), "used");
  json_decref(codes);
  free(o);

  /* enrolment approval and names, for a pending device of alice's */
  o = RUN(SERVER, "user", "set", "alice", "--require-approval", "yes", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  struct e2e_agent *t = pair_agent(1, "tablet", NULL);
  struct e2e_agent *p = pair_agent(2, "phone", NULL);
  o = RUN_AS("cordon-test", SERVER, "device", "approve", "tablet", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "approve: %s", o->err);
  cr_assert(strstr(o->err, "approved"), "%s", o->err);
  free(o);
  o = RUN_AS("cordon-test", SERVER, "device", "reject", "phone", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "reject: %s", o->err);
  free(o);
  o = RUN_AS("cordon-test", SERVER, "device", "reject", "tablet", "--state", e2e_state);
  cr_assert_eq(o->status, 2, "an active device is revoked, not rejected: %s", o->err);
  free(o);
  o = RUN_AS("cordon-test", SERVER, "device", "rename", "tablet", "slate", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "rename: %s", o->err);
  free(o);
  o = RUN_AS("cordon-test", SERVER, "device", "show", "slate", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "show: %s", o->err);
  json_t *shown = json_loads(o->out, 0, NULL);
  cr_assert_str_eq(str(shown, "id"), t->id);
  cr_assert_str_eq(str(shown, "state"), "active");
  json_decref(shown);
  free(o);
  o = RUN_AS("cordon-test", SERVER, "device", "show", p->id, "--json", "--state", e2e_state);
  shown = json_loads(o->out, 0, NULL);
  cr_assert_str_eq(str(shown, "state"), "revoked", "%s", o->out);
  json_decref(shown);
  free(o);

  o = RUN_AS("cordon-test", SERVER, "revoke", "laptop", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "revoke: %s", o->err);
  cr_assert(strstr(o->err, "revoked device"), "%s", o->err);
  free(o);
  o = RUN(SERVER, "device", "show", a->id, "--json", "--state", e2e_state);
  json_t *d = json_loads(o->out, 0, NULL);
  cr_assert_str_eq(str(d, "state"), "revoked", "%s", o->out);
  json_decref(d);
  free(o);
  cr_assert(wait_in(e2e_server_log, "msg=\"device revoked\"", 2000), "logged with the uid");
  free(pkg);
}
