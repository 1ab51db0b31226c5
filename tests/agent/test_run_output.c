/* cordon-agent run sends a job's output live (`output`, protocol version
 * 2), against a scripted server in this process (the real net/conn layer,
 * message codec, tickets and a .cpkg signed by server/pack.c) and real
 * isolated jobs: the first line of a job that prints, sleeps and prints
 * arrives before its result; the live bytes are the result's bytes; a
 * flood stops at the output cap while the result is as it always was; a
 * server that stops reading loses live output but never holds a job or
 * its result up; a version-1 session gets no `output` at all. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/state.h"
#include "net/conn.h"
#include "proto/msg.h"
#include "proto/ticket.h"
#include "server/pack.h"

#define AGENT CORDON_BINARY_DIR "/cordon-agent"
#define CAPTURE_MAX (1u << 20)

struct stream_seen {
  uint8_t *live; /* the live bytes, placed at their offsets */
  uint64_t end;  /* the largest offset + length seen */
  uint64_t next; /* where the next message should start without a gap */
  bool gap, overlap;
};

static struct {
  uv_loop_t loop;
  uv_timer_t tick;
  struct net_server *srv;
  uint8_t server_priv[32], server_pub[32];
  uint8_t ticket_pk[32], ticket_sk[64];
  uint8_t pub_pk[32], pub_sk[64];
  uint8_t device_id[16], session_id[16], job_id[16];
  /* more jobs beside job_id (the slow-server test): their live bytes and
   * whole results are counted only */
  uint8_t more_ids[4][16];
  int n_more, more_results, more_complete;
  uint64_t more_live;
  uint16_t version; /* what the welcome says */
  struct net_conn *conn;
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
  char dir[128], cfg[200], log[240];
  pid_t agent;
} T;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return strdup("");
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strdup(buf);
}

/* ---- the scripted server ---- */

static void send_msg(struct net_conn *c, const struct msg *m) {
  uint8_t *buf;
  size_t len;
  cr_assert_eq(msg_encode_alloc(m, &buf, &len, NULL), 0);
  net_conn_send(c, buf, len);
  free(buf);
}

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

static void on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct msg m;
  if (msg_decode(data, len, &m, NULL) < 0)
    return;
  if (m.type == MSG_HELLO) {
    struct msg w = {.type = MSG_WELCOME};
    w.welcome.version = T.version;
    w.welcome.time_ms = (uint64_t)now_ms();
    randombytes_buf(w.welcome.server_id, 16);
    randombytes_buf(T.session_id, 16);
    memcpy(w.welcome.session_id, T.session_id, 16);
    w.welcome.ping_ms = 15000;
    send_msg(c, &w);
    T.conn = c;
  } else if (m.type == MSG_RUNNING) {
    T.running = true;
    if (T.stall_ms) /* a slow server: the loop does nothing meanwhile */
      usleep((useconds_t)T.stall_ms * 1000);
  } else if (m.type == MSG_PING) {
    struct msg p = {.type = MSG_PONG};
    p.pong.nonce = m.ping.nonce;
    send_msg(c, &p);
  } else if (m.type == MSG_OUTPUT) {
    on_output(&m.output);
  } else if (m.type == MSG_RESULT) {
    on_result(&m.result);
    struct msg ack = {.type = MSG_ACK};
    memcpy(ack.ack.job_id, m.result.job_id, 16);
    send_msg(c, &ack);
  }
  msg_release(&m);
}

static void on_close(struct net_conn *c, int err) {
  (void)err;
  if (c == T.conn)
    T.conn = NULL;
}

static int on_ready(struct net_conn *c) {
  (void)c;
  return 0;
}

static const struct net_conn_ops ops = {
    .on_ready = on_ready, .on_record = on_record, .on_close = on_close};

static void on_tick(uv_timer_t *t) {
  (void)t;
}

static bool spin(int ms, bool (*cond)(void)) {
  int64_t end = now_ms() + ms;
  while (!(cond && cond()) && now_ms() < end)
    uv_run(&T.loop, UV_RUN_ONCE);
  return cond && cond();
}

static bool connected(void) {
  return T.conn != NULL;
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

struct pkg {
  char path[300];
  uint8_t hash[32];
  uint64_t size;
};

static struct pkg make_package(const char *manifest, const char *script) {
  struct pkg p;
  char src[300], path[340];
  snprintf(src, sizeof(src), "%s/src", T.dir);
  cr_assert_eq(mkdir(src, 0755), 0);
  snprintf(path, sizeof(path), "%s/manifest.json", src);
  FILE *f = fopen(path, "w");
  fputs(manifest, f);
  fclose(f);
  snprintf(path, sizeof(path), "%s/run.sh", src);
  f = fopen(path, "w");
  fputs(script, f);
  fclose(f);
  snprintf(p.path, sizeof(p.path), "%s/job.cpkg", T.dir);
  struct pack_summary sum;
  struct cordon_diag d = {{0}};
  cr_assert_eq(pack_dir(src, p.path, T.pub_sk, &sum, &d), 0, "%s", d.msg);
  memcpy(p.hash, sum.index_hash, 32);
  p.size = sum.size;
  return p;
}

static void send_job_id(const struct pkg *p, const uint8_t id[16]) {
  cr_assert(T.conn, "no session to send the job on");
  struct ticket t = {0};
  memcpy(t.job_id, id, 16);
  memcpy(t.device_id, T.device_id, 16);
  ticket_user_tag("alice", t.user_tag);
  memcpy(t.session_id, T.session_id, 16);
  memcpy(t.index_hash, p->hash, 32);
  ticket_args_hash(NULL, 0, t.args_hash);
  t.issued_ms = (uint64_t)now_ms();
  t.expires_ms = t.issued_ms + 600000;
  uint8_t body[TICKET_BODY_LEN];
  ticket_encode(&t, body);
  struct msg m = {.type = MSG_JOB};
  memcpy(m.job.job_id, id, 16);
  m.job.ticket.data = body;
  m.job.ticket.len = sizeof(body);
  ticket_sign(body, T.ticket_sk, m.job.ticket_sig);
  memcpy(m.job.pkg_hash, p->hash, 32);
  m.job.pkg_size = p->size;
  send_msg(T.conn, &m);
  FILE *f = fopen(p->path, "rb");
  cr_assert(f);
  static uint8_t buf[32768];
  uint64_t off = 0;
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
    struct msg ch = {.type = MSG_CHUNK};
    memcpy(ch.chunk.job_id, id, 16);
    ch.chunk.offset = off;
    ch.chunk.data.data = buf;
    ch.chunk.data.len = n;
    send_msg(T.conn, &ch);
    off += n;
  }
  fclose(f);
}

static void send_job(const struct pkg *p) {
  send_job_id(p, T.job_id);
}

/* ---- the agent ---- */

static void pair_agent(void) {
  uint8_t agent_pub[32], *agent_priv = sodium_malloc(32);
  noise_keypair_generate(agent_pub, agent_priv);
  struct agent_pairing p = {0};
  snprintf(p.host, sizeof(p.host), "127.0.0.1");
  p.port = net_server_port(T.srv);
  memcpy(p.server_key, T.server_pub, 32);
  memcpy(p.device_id, T.device_id, 16);
  snprintf(p.user, sizeof(p.user), "alice");
  snprintf(p.name, sizeof(p.name), "test");
  memcpy(p.ticket_key, T.ticket_pk, 32);
  uint8_t pubs[1][32];
  memcpy(pubs[0], T.pub_pk, 32);
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_pairing_save(T.cfg, agent_priv, &p, (const uint8_t(*)[32])pubs, 1, &d), 0,
               "%s", d.msg);
  sodium_free(agent_priv);
}

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  memset(&T, 0, sizeof(T));
  T.version = MSG_PROTO_VERSION_OUTPUT;
  for (int i = 0; i < 2; i++) {
    T.s[i].live = calloc(1, CAPTURE_MAX);
    T.out[i] = calloc(1, CAPTURE_MAX);
    cr_assert(T.s[i].live && T.out[i]);
  }
  snprintf(T.dir, sizeof(T.dir), "/tmp/cordon-output-XXXXXX");
  cr_assert(mkdtemp(T.dir));
  chmod(T.dir, 0755);
  snprintf(T.cfg, sizeof(T.cfg), "%s/agent", T.dir);
  snprintf(T.log, sizeof(T.log), "%s/agent.log", T.dir);
  noise_keypair_generate(T.server_pub, T.server_priv);
  crypto_sign_keypair(T.ticket_pk, T.ticket_sk);
  crypto_sign_keypair(T.pub_pk, T.pub_sk);
  randombytes_buf(T.device_id, 16);
  randombytes_buf(T.job_id, 16);
  uv_loop_init(&T.loop);
  uv_timer_init(&T.loop, &T.tick);
  uv_timer_start(&T.tick, on_tick, 10, 10);
  struct net_limits lim;
  net_limits_default(&lim);
  cr_assert_eq(net_server_new(&T.loop, "127.0.0.1", 0, T.server_priv, 1u << NOISE_MODE_SESSION,
                              &lim, &ops, NULL, &T.srv),
               0);
  pair_agent();
}

static void teardown(void) {
  if (T.agent > 0) {
    kill(T.agent, SIGKILL);
    waitpid(T.agent, NULL, 0);
  }
  net_server_close(T.srv);
  uv_close((uv_handle_t *)&T.tick, NULL);
  uv_run(&T.loop, UV_RUN_DEFAULT);
  uv_loop_close(&T.loop);
  for (int i = 0; i < 2; i++) {
    free(T.s[i].live);
    free(T.out[i]);
  }
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", T.dir);
  (void)!system(cmd);
}

static void start_agent(void) {
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int fd = open(T.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 2);
    execl(AGENT, AGENT, "--config", T.cfg, "run", "--log-level", "debug", (char *)NULL);
    _exit(127);
  }
  T.agent = pid;
  cr_assert(spin(10000, connected), "the agent did not connect:\n%s", slurp(T.log));
}

/* SIGTERM: the agent stops cleanly (under ASan, without a leak). */
static void stop_agent(void) {
  kill(T.agent, SIGTERM);
  int64_t end = now_ms() + 15000;
  int st = -1;
  while (now_ms() < end) {
    if (waitpid(T.agent, &st, WNOHANG) == T.agent)
      break;
    st = -1;
    uv_run(&T.loop, UV_RUN_ONCE);
  }
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "the agent did not stop cleanly:\n%s", slurp(T.log));
  T.agent = 0;
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
  struct pkg p =
      make_package("{\"name\":\"talk\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "echo first; echo warn >&2; sleep 2; echo second\n");
  start_agent();
  send_job(&p);
  cr_assert(spin(30000, have_output), "no output came:\n%s", slurp(T.log));
  cr_assert(!T.result, "the first output came before the result");
  cr_assert_eq(T.outputs_before_run, 0, "output follows `running`");
  cr_assert(spin(30000, have_result), "no result:\n%s", slurp(T.log));
  cr_assert_geq(T.result_ms - T.first_output_ms, 1000,
                "the first line was live, %lld ms before the result",
                (long long)(T.result_ms - T.first_output_ms));
  cr_assert_str_eq(T.code, "", "%s\n%s", T.code, slurp(T.log));
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
  struct pkg p = make_package("{\"name\":\"flood\",\"version\":\"1\",\"entry\":[\"/bin/sh\","
                              "\"run.sh\"],\"limits\":{\"output_kb\":64}}",
                              "yes 0123456789abcdef | head -c 3000000; echo done >&2\n");
  start_agent();
  send_job(&p);
  cr_assert(spin(30000, have_result), "no result:\n%s", slurp(T.log));
  cr_assert_str_eq(T.code, "", "%s\n%s", T.code, slurp(T.log));
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
  uv_walk(&T.loop, small_receive_buffer, NULL); /* the listener's, inherited */
  T.stall_ms = 4000;
  T.n_more = 2;
  for (int i = 0; i < T.n_more; i++)
    randombytes_buf(T.more_ids[i], 16);
  struct pkg p = make_package("{\"name\":\"flood\",\"version\":\"1\",\"entry\":[\"/bin/sh\","
                              "\"run.sh\"],\"limits\":{\"output_kb\":1024}}",
                              "yes 0123456789abcdef | head -c 1048576\n"
                              "yes 0123456789abcdef | head -c 1048576 >&2\n");
  start_agent();
  send_job(&p);
  for (int i = 0; i < T.n_more; i++)
    send_job_id(&p, T.more_ids[i]);
  cr_assert(spin(60000, all_results), "results: %d of %d:\n%s", T.more_results + T.result,
            T.n_more + 1, slurp(T.log));
  cr_assert_str_eq(T.code, "", "%s\n%s", T.code, slurp(T.log));
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

Test(agent_output, a_version_1_session_gets_no_output_and_the_same_result, .init = setup,
     .fini = teardown, .timeout = 90) {
  T.version = 1;
  struct pkg p =
      make_package("{\"name\":\"talk\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "echo first; echo second\n");
  start_agent();
  send_job(&p);
  cr_assert(spin(30000, have_result), "no result:\n%s", slurp(T.log));
  cr_assert_str_eq(T.code, "", "%s", T.code);
  cr_assert_eq(T.outputs, 0, "a version-1 server does not know `output`");
  cr_assert_eq(T.out_len[0], strlen("first\nsecond\n"));
  cr_assert(memcmp(T.out[0], "first\nsecond\n", T.out_len[0]) == 0);
  cr_assert(T.conn, "the session is still up");
}
