/* cordon-agent run sends a job's output live (`output`, protocol version
 * 2), against a scripted server in this process (the real net/conn layer,
 * message codec, tickets and a .cpkg signed by server/pack.c) and real
 * isolated jobs: the first line of a job that prints, sleeps and prints
 * arrives before its result; the live bytes are the result's bytes; a
 * flood stops at the output cap while the result is as it always was; a
 * server that stops reading loses live output but never holds a job or
 * its result up; a welcome of the retired version 1 is refused. */
#include <sys/socket.h>

#include "scripted_server.h"

#define CAPTURE_MAX (1u << 20)

struct stream_seen {
  uint8_t *live; /* the live bytes, placed at their offsets */
  uint64_t end;  /* the largest offset + length seen */
  uint64_t next; /* where the next message should start without a gap */
  bool gap, overlap;
};

static struct {
  uint8_t job_id[16];
  /* more jobs beside job_id (the slow-server test): their live bytes and
   * whole results are counted only */
  uint8_t more_ids[4][16];
  int n_more, more_results, more_complete;
  uint64_t more_live;
  int hellos; /* hellos received */
  bool running, result;
  int stall_ms; /* on `running`, the server stops reading for this long */
  uint64_t wall_ms;
  int outputs;              /* output messages */
  int outputs_before_run;   /* ... that came before `running` */
  int outputs_after_result; /* ... that came after the result */
  int64_t first_output_ms, result_ms;
  size_t largest;
  struct stream_seen s[2];
  /* the result */
  uint8_t *out[2];
  size_t out_len[2];
  bool truncated[2];
  bool exited;
  long exit_code;
  char code[64];
} T;

/* ---- the scripted server ---- */

static bool is_more(const uint8_t id[16]) {
  for (int i = 0; i < T.n_more; i++)
    if (memcmp(id, T.more_ids[i], 16) == 0)
      return true;
  return false;
}

static void on_output(const struct msg_output *o) {
  if (is_more(o->job_id)) {
    T.more_live += o->data.len;
    return;
  }
  cr_assert(memcmp(o->job_id, T.job_id, 16) == 0, "output for another job");
  T.outputs++;
  if (!T.running)
    T.outputs_before_run++;
  if (T.result)
    T.outputs_after_result++;
  if (T.outputs == 1)
    T.first_output_ms = now_ms();
  if (o->data.len > T.largest)
    T.largest = o->data.len;
  struct stream_seen *s = &T.s[o->stream == MSG_STREAM_STDERR];
  if (o->offset > s->next)
    s->gap = true;
  if (o->offset < s->next)
    s->overlap = true;
  s->next = o->offset + o->data.len;
  if (s->next > s->end)
    s->end = s->next;
  if (s->next <= CAPTURE_MAX)
    memcpy(s->live + o->offset, o->data.data, o->data.len);
}

static void on_result(const struct msg_result *r) {
  if (is_more(r->job_id)) {
    T.more_results++;
    T.more_complete += r->has_exit_code && r->exit_code == 0 && r->stdout_buf.len == (1u << 20) &&
                       r->stderr_buf.len == (1u << 20);
    return;
  }
  T.result = true;
  T.result_ms = now_ms();
  const struct msg_bytes *b[2] = {&r->stdout_buf, &r->stderr_buf};
  for (int i = 0; i < 2; i++) {
    T.out_len[i] = b[i]->len;
    if (b[i]->len)
      memcpy(T.out[i], b[i]->data, b[i]->len);
  }
  T.truncated[0] = r->stdout_truncated;
  T.truncated[1] = r->stderr_truncated;
  T.wall_ms = r->wall_ms;
  T.exited = r->has_exit_code;
  T.exit_code = (long)r->exit_code;
  snprintf(T.code, sizeof(T.code), "%s", r->has_error ? r->error.code : "");
}

/* Hellos are counted (and welcomed with S.version), output and results
 * recorded (results acked by the scripted server). */
static bool on_msg(struct net_conn *c, const struct msg *m) {
  (void)c;
  if (m->type == MSG_HELLO) {
    T.hellos++;
  } else if (m->type == MSG_RUNNING) {
    T.running = true;
    if (T.stall_ms) /* a slow server: the loop does nothing meanwhile */
      usleep((useconds_t)T.stall_ms * 1000);
  } else if (m->type == MSG_OUTPUT) {
    on_output(&m->output);
  } else if (m->type == MSG_RESULT) {
    on_result(&m->result);
  }
  return false;
}

static bool have_result(void) {
  return T.result;
}
static bool all_results(void) {
  return T.result && T.more_results == T.n_more;
}
static bool have_output(void) {
  return T.outputs > 0;
}
/* ---- the job ---- */

static void send_job(const struct pkg *p) {
  send_job_id(p, T.job_id);
}

/* ---- the agent ---- */

static void setup(void) {
  memset(&T, 0, sizeof(T));
  for (int i = 0; i < 2; i++) {
    T.s[i].live = calloc(1, CAPTURE_MAX);
    T.out[i] = calloc(1, CAPTURE_MAX);
    cr_assert(T.s[i].live && T.out[i]);
  }
  ss_setup("cordon-output", on_msg);
  S.version = MSG_PROTO_VERSION_OUTPUT;
  randombytes_buf(T.job_id, 16);
}

static void teardown(void) {
  ss_teardown();
  for (int i = 0; i < 2; i++) {
    free(T.s[i].live);
    free(T.out[i]);
  }
}

static void start_agent(void) {
  S.agent = START("--log-level", "debug");
  cr_assert(spin(10000, connected), "the agent did not connect:\n%s", slurp(S.log));
}

/* SIGTERM: the agent stops cleanly (under ASan, without a leak). */
static void stop_agent(void) {
  kill(S.agent, SIGTERM);
  int64_t end = now_ms() + 15000;
  int st = -1;
  while (now_ms() < end) {
    if (waitpid(S.agent, &st, WNOHANG) == S.agent)
      break;
    st = -1;
    uv_run(&S.loop, UV_RUN_ONCE);
  }
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "the agent did not stop cleanly:\n%s", slurp(S.log));
  S.agent = 0;
}

/* The job ran, and what came live on stream i is the result's bytes. */
static void assert_live_is_the_result(int i) {
  const struct stream_seen *s = &T.s[i];
  cr_assert(!s->gap && !s->overlap, "stream %d: live offsets are contiguous", i);
  cr_assert_eq(s->end, T.out_len[i], "stream %d: %llu bytes live, %zu in the result", i,
               (unsigned long long)s->end, T.out_len[i]);
  cr_assert(memcmp(s->live, T.out[i], T.out_len[i]) == 0, "stream %d: the same bytes", i);
}

Test(agent_output, the_first_line_arrives_before_the_result_and_the_live_bytes_are_the_result,
     .init = setup, .fini = teardown, .timeout = 90) {
  struct pkg p = make_package(
      "job", "{\"name\":\"talk\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
      "echo first; echo warn >&2; sleep 2; echo second\n");
  start_agent();
  send_job(&p);
  cr_assert(spin(30000, have_output), "no output came:\n%s", slurp(S.log));
  cr_assert(!T.result, "the first output came before the result");
  cr_assert_eq(T.outputs_before_run, 0, "output follows `running`");
  cr_assert(spin(30000, have_result), "no result:\n%s", slurp(S.log));
  cr_assert_geq(T.result_ms - T.first_output_ms, 1000,
                "the first line was live, %lld ms before the result",
                (long long)(T.result_ms - T.first_output_ms));
  cr_assert_str_eq(T.code, "", "%s\n%s", T.code, slurp(S.log));
  cr_assert(T.exited && T.exit_code == 0);
  cr_assert_eq(T.out_len[0], strlen("first\nsecond\n"));
  cr_assert(memcmp(T.out[0], "first\nsecond\n", T.out_len[0]) == 0);
  assert_live_is_the_result(0);
  assert_live_is_the_result(1);
  cr_assert_eq(T.outputs_after_result, 0);
  spin(300, NULL);
  cr_assert_eq(T.outputs_after_result, 0, "nothing live after the result");
  stop_agent();
}

Test(agent_output, a_flood_stops_at_the_output_cap_and_the_result_is_unchanged, .init = setup,
     .fini = teardown, .timeout = 90) {
  struct pkg p = make_package("job",
                              "{\"name\":\"flood\",\"version\":\"1\",\"entry\":[\"/bin/sh\","
                              "\"run.sh\"],\"limits\":{\"output_kb\":64}}",
                              "yes 0123456789abcdef | head -c 3000000; echo done >&2\n");
  start_agent();
  send_job(&p);
  cr_assert(spin(30000, have_result), "no result:\n%s", slurp(S.log));
  cr_assert_str_eq(T.code, "", "%s\n%s", T.code, slurp(S.log));
  cr_assert(T.exited && T.exit_code == 0, "%ld", T.exit_code);
  /* the result as it always was: 64 KiB kept, the rest discarded */
  cr_assert_eq(T.out_len[0], 64u << 10);
  cr_assert(T.truncated[0]);
  for (size_t i = 0; i < T.out_len[0]; i++)
    cr_assert_eq(T.out[0][i], "0123456789abcdef\n"[i % 17], "byte %zu", i);
  cr_assert_eq(T.out_len[1], 5);
  cr_assert(!T.truncated[1]);
  /* live: never past the cap, in messages within their limit */
  cr_assert_gt(T.outputs, 1);
  cr_assert_leq(T.s[0].end, 64u << 10, "live output stops at the cap: %llu",
                (unsigned long long)T.s[0].end);
  cr_assert_leq(T.largest, MSG_LIVE_MAX);
  /* nothing was dropped on a fast loopback session: the same bytes */
  assert_live_is_the_result(0);
  assert_live_is_the_result(1);
  cr_assert_eq(T.outputs_after_result, 0);
  stop_agent();
}

static void small_receive_buffer(uv_handle_t *h, void *arg) {
  (void)arg;
  uv_os_fd_t fd;
  int size = 4096;
  if (h->type == UV_TCP && uv_fileno(h, &fd) == 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

Test(agent_output, a_slow_server_loses_live_chunks_but_never_holds_the_jobs_or_their_results,
     .init = setup, .fini = teardown, .timeout = 90) {
  /* The session's receive buffer here is tiny and the server stops
   * reading for 4 s once the first job runs, while three jobs flood
   * 2 x 1 MiB each: 6 MiB live, more than the agent's socket can hold
   * (net.ipv4.tcp_wmem's 4 MiB at most) plus its 256 KiB per job of
   * unsent live output, so some of it must be dropped. */
  uv_walk(&S.loop, small_receive_buffer, NULL); /* the listener's, inherited */
  T.stall_ms = 4000;
  T.n_more = 2;
  for (int i = 0; i < T.n_more; i++)
    randombytes_buf(T.more_ids[i], 16);
  struct pkg p = make_package("job",
                              "{\"name\":\"flood\",\"version\":\"1\",\"entry\":[\"/bin/sh\","
                              "\"run.sh\"],\"limits\":{\"output_kb\":1024}}",
                              "yes 0123456789abcdef | head -c 1048576\n"
                              "yes 0123456789abcdef | head -c 1048576 >&2\n");
  start_agent();
  send_job(&p);
  for (int i = 0; i < T.n_more; i++)
    send_job_id(&p, T.more_ids[i]);
  cr_assert(spin(60000, all_results), "results: %d of %d:\n%s", T.more_results + T.result,
            T.n_more + 1, slurp(S.log));
  cr_assert_str_eq(T.code, "", "%s\n%s", T.code, slurp(S.log));
  cr_assert_lt(T.wall_ms, 3000, "the job did not wait for the server: %llu ms",
               (unsigned long long)T.wall_ms);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(T.out_len[i], 1u << 20, "the result has all of stream %d", i);
    cr_assert(!T.truncated[i]);
    for (size_t k = 0; k < T.out_len[i]; k++)
      cr_assert_eq(T.out[i][k], "0123456789abcdef\n"[k % 17], "stream %d byte %zu", i, k);
    cr_assert_leq(T.s[i].end, 1u << 20);
    cr_assert(!T.s[i].overlap);
    /* what did come live is the result's bytes at its offsets */
    for (size_t k = 0; k < T.s[i].end; k++)
      if (T.s[i].live[k])
        cr_assert_eq(T.s[i].live[k], T.out[i][k], "stream %d byte %zu", i, k);
  }
  cr_assert_eq(T.more_complete, T.n_more, "every result is whole");
  uint64_t live = T.more_live;
  for (int i = 0; i < 2; i++)
    for (size_t k = 0; k < T.s[i].end; k++)
      live += T.s[i].live[k] != 0;
  cr_assert_lt(live, 6u << 20, "some live output was dropped: %llu bytes came",
               (unsigned long long)live);
  cr_assert_eq(T.outputs_after_result, 0);
  stop_agent();
}

static bool version1_refused(void) {
  return S.conn == NULL && T.hellos > 0;
}

/* Version 1 is retired (messages.md section 4): a welcome naming it is
 * refused by the agent, which closes the session and runs nothing. */
Test(agent_output, a_welcome_of_version_1_is_refused, .init = setup, .fini = teardown,
     .timeout = 90) {
  S.version = 1;
  S.agent = START("--log-level", "debug");
  cr_assert(spin(10000, version1_refused), "the agent kept a version-1 session:\n%s", slurp(S.log));
  cr_assert(!T.running && !T.result);
  stop_agent();
}
