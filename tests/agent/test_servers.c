/* agent/servers.c and the cluster's addresses in agent/session.c: the known
 * list (the pairing address first, then a welcome's servers, then the
 * address the welcome came from) and servers.json; then the real agent
 * against two scripted servers in this process that hold the same key (one
 * cluster identity): it stores the list a welcome brings, moves to the
 * second server at once when the first is down, prefers the last that
 * worked after a restart, waits a goaway's retry_ms whichever address comes
 * next, and refuses a welcome whose list is junk without storing it. */
#include <jansson.h>
#include <msgpack.h>

#include "agent/servers.h"
#include "scripted_server.h"

/* ---- the known list, without processes ---- */

static char tmp[128];

static void tmp_setup(void) {
  snprintf(tmp, sizeof(tmp), "/tmp/cordon-servers-XXXXXX");
  cr_assert(mkdtemp(tmp));
}

static void tmp_teardown(void) {
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
  (void)!system(cmd);
}

static void paired_at(struct agent_servers *s, const char *host, int port) {
  struct agent_pairing p = {0};
  snprintf(p.host, sizeof(p.host), "%s", host);
  p.port = port;
  agent_servers_init(s, &p);
}

static void write_file(const char *name, const char *text) {
  char path[200];
  snprintf(path, sizeof(path), "%s/%s", tmp, name);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(text, f);
  fclose(f);
}

Test(servers, the_pairing_address_stays_first_and_the_used_one_is_kept, .init = tmp_setup,
     .fini = tmp_teardown) {
  struct agent_servers s;
  paired_at(&s, "a.example", 7443);
  cr_assert_eq(s.n, 1);
  cr_assert_str_eq(s.list[0].text, "a.example:7443");
  char *list[] = {"b.example:7443", "a.example:7443", "[2001:db8::3]:7443", "b.example:7443"};
  cr_assert(agent_servers_learn(&s, 0, list, 4), "a new list is a change");
  cr_assert_eq(s.n, 3, "the pairing address once, repeats dropped");
  cr_expect_str_eq(s.list[1].text, "b.example:7443");
  cr_expect_str_eq(s.list[2].text, "[2001:db8::3]:7443");
  cr_expect_str_eq(s.list[2].host, "2001:db8::3", "net_connect gets no brackets");
  cr_expect_eq(s.list[2].port, 7443);
  cr_expect_eq(s.last, 0);
  cr_assert_not(agent_servers_learn(&s, 0, list, 4), "the same list from the same address");
  cr_assert(agent_servers_learn(&s, 2, list, 4), "another address worked");
  cr_expect_eq(s.last, 2);
  /* a server that lists nothing: only the address used (and the pairing one) */
  cr_assert(agent_servers_learn(&s, 2, NULL, 0));
  cr_assert_eq(s.n, 2);
  cr_expect_str_eq(s.list[0].text, "a.example:7443");
  cr_expect_str_eq(s.list[1].text, "[2001:db8::3]:7443");
  cr_expect_eq(s.last, 1);
  /* a list that names neither the pairing address nor the one used */
  char *other[] = {"c.example:1", "d.example:2"};
  cr_assert(agent_servers_learn(&s, 1, other, 2));
  cr_assert_eq(s.n, 4);
  cr_expect_str_eq(s.list[3].text, "[2001:db8::3]:7443");
  cr_expect_eq(s.last, 3);
}

Test(servers, seventeen_plus_the_pairing_address_fit, .init = tmp_setup, .fini = tmp_teardown) {
  struct agent_servers s;
  paired_at(&s, "127.0.0.1", 1);
  char names[MSG_SERVERS_MAX][32], *list[MSG_SERVERS_MAX];
  for (int i = 0; i < MSG_SERVERS_MAX; i++) {
    snprintf(names[i], sizeof(names[i]), "s%d.example:7443", i);
    list[i] = names[i];
  }
  struct agent_servers used = s;
  char *one[] = {"u.example:7443"};
  agent_servers_learn(&used, 0, one, 1);
  cr_assert(agent_servers_learn(&used, 1, list, MSG_SERVERS_MAX));
  cr_assert_eq(used.n, AGENT_SERVERS_MAX);
  cr_expect_str_eq(used.list[AGENT_SERVERS_MAX - 1].text, "u.example:7443");
  cr_expect_eq(used.last, AGENT_SERVERS_MAX - 1);
  cr_assert_eq(agent_servers_save(tmp, &used, NULL), 0);
  struct agent_servers back;
  paired_at(&back, "127.0.0.1", 1);
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_servers_load(tmp, &back, &d), 0, "%s", d.msg);
  cr_assert_eq(back.n, AGENT_SERVERS_MAX);
  cr_expect_eq(back.last, AGENT_SERVERS_MAX - 1);
}

Test(servers, saved_0600_and_loaded_back, .init = tmp_setup, .fini = tmp_teardown) {
  struct agent_servers s;
  paired_at(&s, "127.0.0.1", 7000);
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_servers_load(tmp, &s, &d), 0, "no file: the pairing address alone");
  cr_assert_eq(s.n, 1);
  char *list[] = {"127.0.0.1:7000", "127.0.0.1:7001", "[::1]:7002"};
  agent_servers_learn(&s, 0, list, 3);
  agent_servers_learn(&s, 2, list, 3);
  cr_assert_eq(agent_servers_save(tmp, &s, &d), 0, "%s", d.msg);
  char path[200];
  snprintf(path, sizeof(path), "%s/%s", tmp, AGENT_SERVERS_FILE);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600);
  json_t *j = json_load_file(path, 0, NULL);
  cr_assert(j);
  cr_expect_eq(json_array_size(json_object_get(j, "servers")), 2, "without the pairing address");
  cr_expect_str_eq(json_string_value(json_object_get(j, "last")), "[::1]:7002");
  json_decref(j);
  struct agent_servers back;
  paired_at(&back, "127.0.0.1", 7000);
  cr_assert_eq(agent_servers_load(tmp, &back, &d), 0, "%s", d.msg);
  cr_assert_eq(back.n, 3);
  cr_expect_str_eq(back.list[1].text, "127.0.0.1:7001");
  cr_expect_str_eq(back.list[2].host, "::1");
  cr_expect_eq(back.last, 2);
}

Test(servers, a_damaged_file_is_refused_and_leaves_the_pairing_address, .init = tmp_setup,
     .fini = tmp_teardown) {
  static const char *const damaged[] = {
      "not json",
      "[]",
      "{\"servers\": [\"b.example:7443\"], \"extra\": 1}",
      "{\"servers\": \"b.example:7443\"}",
      "{\"servers\": [\"b.example:0\"]}",
      "{\"servers\": [\"b.example:7443\", 7]}",
      "{\"servers\": [\"b.example:7443\"], \"last\": \"c.example:7443\"}",
      "{\"servers\": [\"b.example:7443\"], \"last\": 1}",
      "{\"last\": \"a.example:7443\"}",
  };
  for (size_t i = 0; i < sizeof(damaged) / sizeof(damaged[0]); i++) {
    write_file(AGENT_SERVERS_FILE, damaged[i]);
    struct agent_servers s;
    paired_at(&s, "a.example", 7443);
    struct cordon_diag d = {{0}};
    cr_expect_eq(agent_servers_load(tmp, &s, &d), CORDON_E_CONFIG_INVALID, "%s", damaged[i]);
    cr_expect(strstr(d.msg, "servers.json is damaged") || strstr(d.msg, "too large"), "%s", d.msg);
    cr_expect_eq(s.n, 1, "%s", damaged[i]);
    cr_expect_eq(s.last, 0);
  }
  write_file(AGENT_SERVERS_FILE, "{\"servers\": [], \"last\": \"a.example:7443\"}");
  struct agent_servers s;
  paired_at(&s, "a.example", 7443);
  cr_expect_eq(agent_servers_load(tmp, &s, NULL), 0, "an empty list naming the pairing address");
}

/* ---- the real agent against two scripted servers of one identity ---- */

static struct {
  struct net_server *b;   /* the second server (S.srv is the first, the pairing address) */
  int b_tag;              /* net_server_data of b */
  int hellos_a, hellos_b; /* hellos each server received */
  int64_t first_hello_ms[2];
  uint32_t goaway_retry_ms; /* answer the first hello at the first server with goaway and this */
  int64_t goaway_ms;
  bool junk_welcome; /* answer every hello with a welcome whose servers list is junk */
  char addr_a[32], addr_b[32];
  char *list[2];
} T;

static bool at_b(struct net_conn *c) {
  return net_server_data(net_conn_server(c)) == &T.b_tag;
}

static void junk_welcome(struct net_conn *c) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 7);
  uint8_t id[16] = {0};
#define PS(x) (msgpack_pack_str(&pk, strlen(x)), msgpack_pack_str_body(&pk, x, strlen(x)))
  PS("t"), PS("welcome");
  PS("version"), msgpack_pack_uint16(&pk, MSG_PROTO_VERSION_SERVERS);
  PS("time_ms"), msgpack_pack_uint64(&pk, (uint64_t)server_now());
  PS("server_id"), msgpack_pack_bin(&pk, 16), msgpack_pack_bin_body(&pk, id, 16);
  PS("session_id"), msgpack_pack_bin(&pk, 16), msgpack_pack_bin_body(&pk, id, 16);
  PS("ping_ms"), msgpack_pack_uint32(&pk, 15000);
  PS("servers"), msgpack_pack_array(&pk, 2), PS("127.0.0.1:7443"), PS("junk; rm -rf /");
#undef PS
  net_conn_send(c, (const uint8_t *)sb.data, sb.size);
  msgpack_sbuffer_destroy(&sb);
}

static bool on_msg(struct net_conn *c, const struct msg *m) {
  if (m->type != MSG_HELLO)
    return false;
  int *n = at_b(c) ? &T.hellos_b : &T.hellos_a;
  if ((*n)++ == 0)
    T.first_hello_ms[at_b(c)] = now_ms();
  if (T.junk_welcome) {
    junk_welcome(c);
    return true;
  }
  if (!at_b(c) && T.goaway_retry_ms && T.hellos_a == 1) {
    struct msg g = {.type = MSG_GOAWAY};
    g.goaway.code = MSG_GOAWAY_SHUTDOWN;
    g.goaway.message = "scripted";
    g.goaway.has_retry_ms = true;
    g.goaway.retry_ms = T.goaway_retry_ms;
    send_msg(c, &g);
    net_conn_flush_close(c, 0);
    T.goaway_ms = now_ms();
    return true;
  }
  return false; /* the scripted server's welcome, with S.servers */
}

static void open_a(int port) {
  struct net_limits lim;
  net_limits_default(&lim);
  cr_assert_eq(net_server_new(&S.loop, "127.0.0.1", port, S.server_priv, 1u << NOISE_MODE_SESSION,
                              &lim, &ss_ops, NULL, &S.srv),
               0, "the first server's port again");
}

static void setup(void) {
  memset(&T, 0, sizeof(T));
  ss_setup("cordon-cluster", on_msg);
  struct net_limits lim;
  net_limits_default(&lim);
  /* the same static key: one cluster identity */
  cr_assert_eq(net_server_new(&S.loop, "127.0.0.1", 0, S.server_priv, 1u << NOISE_MODE_SESSION,
                              &lim, &ss_ops, &T.b_tag, &T.b),
               0);
  snprintf(T.addr_a, sizeof(T.addr_a), "127.0.0.1:%d", net_server_port(S.srv));
  snprintf(T.addr_b, sizeof(T.addr_b), "127.0.0.1:%d", net_server_port(T.b));
  T.list[0] = T.addr_a;
  T.list[1] = T.addr_b;
  S.servers = T.list;
  S.n_servers = 2;
}

static void teardown(void) {
  if (!S.srv) /* a test that failed with the first server closed */
    open_a(0);
  if (T.b)
    net_server_close(T.b);
  cr_assert_eq(ss_teardown(), 0);
}

static bool b_connected(void) {
  return S.conn && at_b(S.conn);
}

static bool a_connected(void) {
  return S.conn && !at_b(S.conn);
}

/* servers.json, parsed (NULL when absent). */
static json_t *stored(void) {
  char path[300];
  snprintf(path, sizeof(path), "%s/%s", S.cfg, AGENT_SERVERS_FILE);
  return json_load_file(path, 0, NULL);
}

static const char *stored_last(json_t *j) {
  return json_string_value(json_object_get(j, "last"));
}

static void stop_agent(void) {
  kill(S.agent, SIGKILL);
  waitpid(S.agent, NULL, 0);
  S.agent = 0;
}

/* `cordon-agent status --json` for the agent's config, parsed. */
static json_t *status_json(void) {
  char cmd[400];
  snprintf(cmd, sizeof(cmd), "%s --config %s status --json 2>/dev/null", AGENT, S.cfg);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, p);
  buf[n] = '\0';
  pclose(p);
  json_t *j = json_loads(buf, 0, NULL);
  cr_assert(j, "status --json: %s", buf);
  return j;
}

Test(cluster, the_list_is_stored_the_second_server_takes_over_and_is_preferred_after_a_restart,
     .init = setup, .fini = teardown, .timeout = 60) {
  S.agent = START("--drain-timeout", "0");
  cr_assert(spin(10000, a_connected), "the agent connects to the pairing address first");
  /* the welcome's list is stored, 0600, the pairing address not repeated */
  json_t *j = NULL;
  for (int i = 0; i < 200 && !(j = stored()); i++)
    spin(20, NULL);
  cr_assert(j, "servers.json is written");
  cr_expect_eq(json_array_size(json_object_get(j, "servers")), 1);
  cr_expect_str_eq(json_string_value(json_array_get(json_object_get(j, "servers"), 0)), T.addr_b);
  cr_expect_str_eq(stored_last(j), T.addr_a);
  json_decref(j);
  char path[300];
  snprintf(path, sizeof(path), "%s/%s", S.cfg, AGENT_SERVERS_FILE);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600);
  for (int i = 0; i < 100 && !log_has("the cluster's addresses stored"); i++)
    spin(20, NULL);
  cr_expect(log_has("the cluster's addresses stored"));

  /* the first server goes away: the agent is on the second within its
   * first backoff step (0.5 s at most) and one failed attempt */
  int port_a = net_server_port(S.srv);
  int64_t down = now_ms();
  net_server_close(S.srv);
  S.srv = NULL;
  cr_assert(spin(5000, b_connected), "the agent moves to the second server");
  cr_expect_lt(T.first_hello_ms[1] - down, 2000, "took %lld ms",
               (long long)(T.first_hello_ms[1] - down));
  for (int i = 0; i < 200; i++) {
    j = stored();
    if (j && stored_last(j) && strcmp(stored_last(j), T.addr_b) == 0)
      break;
    json_decref(j);
    j = NULL;
    spin(20, NULL);
  }
  cr_assert(j, "the second server is stored as the last that worked");
  json_decref(j);

  /* status: the known servers and the current one */
  j = status_json();
  json_t *known = json_object_get(j, "servers");
  cr_assert_eq(json_array_size(known), 2);
  cr_expect_str_eq(json_string_value(json_array_get(known, 0)), T.addr_a);
  cr_expect_str_eq(json_string_value(json_array_get(known, 1)), T.addr_b);
  cr_expect_str_eq(json_string_value(json_object_get(j, "last_server")), T.addr_b);
  cr_expect_str_eq(json_string_value(json_object_get(j, "current_server")), T.addr_b);
  json_decref(j);

  /* a restart with both up: the last that worked is tried first */
  stop_agent();
  spin(300, NULL);
  open_a(port_a);
  T.hellos_a = T.hellos_b = 0;
  S.agent = START("--drain-timeout", "0");
  cr_assert(spin(10000, b_connected), "after the restart the agent is on the second server");
  cr_expect_eq(T.hellos_a, 0, "the pairing address was not tried first");
  cr_expect_eq(T.hellos_b, 1);
}

Test(cluster, a_goaway_retry_ms_holds_back_the_next_address_too, .init = setup, .fini = teardown,
     .timeout = 60) {
  T.goaway_retry_ms = 1500;
  /* the list a welcome brought before */
  char path[300], text[200];
  snprintf(path, sizeof(path), "%s/%s", S.cfg, AGENT_SERVERS_FILE);
  snprintf(text, sizeof(text), "{\"servers\": [\"%s\"], \"last\": \"%s\"}", T.addr_b, T.addr_a);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(text, f);
  fclose(f);
  S.agent = START("--drain-timeout", "0");
  cr_assert(spin(10000, b_connected), "after the goaway the agent goes to the second server");
  cr_assert_gt(T.goaway_ms, 0);
  int64_t waited = T.first_hello_ms[1] - T.goaway_ms;
  cr_expect_geq(waited, 1400, "the next attempt came after %lld ms", (long long)waited);
  cr_expect_lt(waited, 5000, "and not much later: %lld ms", (long long)waited);
  cr_expect_eq(T.hellos_a, 1, "the first server was tried first, once");
  cr_expect(log_has("reconnecting when the server asked"));
}

Test(cluster, a_welcome_with_a_junk_list_is_refused_and_nothing_is_stored, .init = setup,
     .fini = teardown, .timeout = 60) {
  T.junk_welcome = true;
  S.agent = START("--drain-timeout", "0");
  for (int i = 0; i < 750 && !log_has("bad message from the server"); i++)
    spin(20, NULL);
  cr_assert(log_has("welcome.servers"), "the log names the field");
  spin(1500, NULL);
  cr_expect_gt(T.hellos_a, 1, "it keeps trying, with the backoff");
  cr_expect_eq(T.hellos_b, 0, "an address it never learned");
  cr_expect_null(stored(), "nothing was stored");
  cr_expect_eq(waitpid(S.agent, NULL, WNOHANG), 0, "the agent is still running");
}
