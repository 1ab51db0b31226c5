/* The cluster's addresses the agent knows (agent/servers.h). */
#include "agent/servers.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file.h"

void agent_servers_init(struct agent_servers *s, const struct agent_pairing *p) {
  memset(s, 0, sizeof(*s));
  struct agent_server *a = &s->list[0];
  /* an IPv6 literal is written in brackets, as `pair --server` takes it */
  snprintf(a->text, sizeof(a->text), strchr(p->host, ':') ? "[%s]:%d" : "%s:%d", p->host, p->port);
  snprintf(a->host, sizeof(a->host), "%s", p->host);
  a->port = p->port;
  s->n = 1;
}

static size_t find(const struct agent_server *list, size_t n, const char *text) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(list[i].text, text) == 0)
      return i;
  return n;
}

/* Append addr (valid for msg_addr_parse) unless it is there already. */
static int add(struct agent_server *list, size_t *n, const char *addr) {
  if (find(list, *n, addr) < *n)
    return 0;
  if (*n == AGENT_SERVERS_MAX)
    return CORDON_E_LIMIT;
  struct agent_server *a = &list[*n];
  uint16_t port;
  int r = msg_addr_parse(addr, strlen(addr), a->host, &port);
  if (r < 0)
    return r;
  snprintf(a->text, sizeof(a->text), "%s", addr);
  a->port = port;
  (*n)++;
  return 0;
}

int agent_servers_load(const char *dir, struct agent_servers *s, struct cordon_diag *diag) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", dir, AGENT_SERVERS_FILE);
  struct stat st;
  if (stat(path, &st) < 0)
    return 0;
  s->n = 1;
  s->last = 0;
  if (st.st_size > AGENT_SERVERS_FILE_MAX)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s is too large", path);
  json_error_t je;
  json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!json_is_object(o)) {
    json_decref(o);
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s is damaged: not a JSON object", path);
  }
  struct agent_server list[AGENT_SERVERS_MAX];
  size_t n = 1, last = 0;
  list[0] = s->list[0];
  const char *key, *why = NULL;
  json_t *v;
  json_object_foreach(o, key, v) {
    if (strcmp(key, "servers") != 0 && strcmp(key, "last") != 0)
      why = "an unknown key";
  }
  json_t *servers = json_object_get(o, "servers"), *jl = json_object_get(o, "last");
  if (!why && (!json_is_array(servers) || json_array_size(servers) > AGENT_SERVERS_MAX - 1))
    why = "\"servers\" is not an array of at most 17 addresses";
  for (size_t i = 0; !why && i < json_array_size(servers); i++) {
    const char *a = json_string_value(json_array_get(servers, i));
    if (!a || strlen(a) != json_string_length(json_array_get(servers, i)) || add(list, &n, a) < 0)
      why = "an entry of \"servers\" is not HOST:PORT";
  }
  if (!why && jl) {
    const char *t = json_string_value(jl);
    last = t ? find(list, n, t) : n;
    if (last == n)
      why = "\"last\" is not one of the servers";
  }
  json_decref(o);
  if (why)
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s is damaged: %s", path, why);
  memcpy(s->list, list, n * sizeof(list[0]));
  s->n = n;
  s->last = last;
  return 0;
}

bool agent_servers_learn(struct agent_servers *s, size_t used, char *const *list, size_t n) {
  struct agent_server next[AGENT_SERVERS_MAX];
  size_t m = 1;
  next[0] = s->list[0];
  for (size_t i = 0; list && i < n; i++)
    (void)add(next, &m, list[i]); /* a welcome's entries are valid and at most 16 */
  size_t at = find(next, m, s->list[used].text);
  if (at == m && m < AGENT_SERVERS_MAX)
    next[m++] = s->list[used];
  if (at == m)
    at = 0; /* cannot happen: 1 + 16 + 1 fit */
  bool changed = m != s->n || at != s->last;
  for (size_t i = 0; !changed && i < m; i++)
    changed = strcmp(next[i].text, s->list[i].text) != 0;
  memcpy(s->list, next, m * sizeof(next[0]));
  s->n = m;
  s->last = at;
  return changed;
}

int agent_servers_save(const char *dir, const struct agent_servers *s, struct cordon_diag *diag) {
  json_t *o = json_object(), *a = json_array();
  int r = o && a ? 0 : -ENOMEM;
  for (size_t i = 1; r == 0 && i < s->n; i++)
    if (json_array_append_new(a, json_string(s->list[i].text)) < 0)
      r = -ENOMEM;
  if (r == 0 && (json_object_set(o, "servers", a) < 0 ||
                 json_object_set_new(o, "last", json_string(s->list[s->last].text)) < 0))
    r = -ENOMEM;
  json_decref(a);
  char *text = r == 0 ? json_dumps(o, JSON_INDENT(2)) : NULL;
  json_decref(o);
  if (!text)
    return cordon_diag_set(diag, -ENOMEM, "cannot write %s: out of memory", AGENT_SERVERS_FILE);
  r = core_write_file_atomic(dir, AGENT_SERVERS_FILE, text, strlen(text), 0600);
  free(text);
  if (r < 0)
    return cordon_diag_set(diag, r, "cannot write %s: %s", AGENT_SERVERS_FILE, strerror(-r));
  return 0;
}

void agent_servers_text(const struct agent_servers *s, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < s->n && o < len; i++) {
    int k = snprintf(buf + o, len - o, "%s%s", i ? "," : "", s->list[i].text);
    if (k < 0)
      break;
    o += (size_t)k;
  }
}
