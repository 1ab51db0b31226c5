#include "agent/ctl_server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat/posix.h"
#include "platform/daemon.h"

struct agent_ctl_client {
  uv_pipe_t pipe;
  uv_timer_t timer;
  struct agent_ctl_server *srv;
  struct agent_ctl_reader rd;
  char in[512];
  int open_handles;
  bool closing;
  struct agent_ctl_client *next;
};

struct reply_write {
  uv_write_t req;
  char *line;
  struct agent_ctl_client *c;
};

static void client_handle_closed(uv_handle_t *h) {
  struct agent_ctl_client *c = h->data;
  if (--c->open_handles == 0)
    free(c);
}

static void client_close(struct agent_ctl_client *c) {
  if (c->closing)
    return;
  c->closing = true;
  struct agent_ctl_server *s = c->srv;
  for (struct agent_ctl_client **pp = &s->clients; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  s->n_clients--;
  uv_close((uv_handle_t *)&c->pipe, client_handle_closed);
  uv_close((uv_handle_t *)&c->timer, client_handle_closed);
}

static void on_written(uv_write_t *req, int status) {
  (void)status;
  struct reply_write *w = req->data;
  client_close(w->c); /* one request per connection */
  free(w->line);
  free(w);
}

/* Send line (taken) and close once it is written. */
static void reply_and_close(struct agent_ctl_client *c, char *line) {
  uv_read_stop((uv_stream_t *)&c->pipe);
  struct reply_write *w = line ? malloc(sizeof(*w)) : NULL;
  if (!w) {
    free(line);
    client_close(c);
    return;
  }
  w->line = line;
  w->c = c;
  w->req.data = w;
  uv_buf_t b = uv_buf_init(line, (unsigned)strlen(line));
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_written) < 0) {
    free(line);
    free(w);
    client_close(c);
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  struct agent_ctl_client *c = h->data;
  *buf = uv_buf_init(c->in, sizeof(c->in));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  struct agent_ctl_client *c = st->data;
  if (nread < 0) {
    client_close(c);
    return;
  }
  size_t used, len;
  int r = agent_ctl_reader_feed(&c->rd, buf->base, (size_t)nread, &used, &len);
  if (r == 0)
    return;
  if (r < 0) {
    reply_and_close(c, agent_ctl_reply_error(CORDON_E_LIMIT, "the request line is too long"));
    return;
  }
  enum agent_ctl_op op;
  struct cordon_diag diag = {{0}};
  if (agent_ctl_parse_request(c->rd.buf, len, &op, &diag) < 0)
    reply_and_close(c, agent_ctl_reply_error(CORDON_E_USAGE, diag.msg));
  else
    reply_and_close(c, c->srv->answer(c->srv->ctx, op));
}

static void on_client_timeout(uv_timer_t *t) {
  client_close(t->data);
}

static void free_handle(uv_handle_t *h) {
  free(h);
}

static void on_connection(uv_stream_t *listener, int status) {
  struct agent_ctl_server *s = listener->data;
  if (status < 0)
    return;
  struct agent_ctl_client *c = NULL;
  if (s->n_clients < AGENT_CTL_MAX_CLIENTS)
    c = calloc(1, sizeof(*c));
  if (!c) { /* over the cap: accept and close, so the backlog keeps moving */
    uv_pipe_t *p = malloc(sizeof(*p));
    if (!p)
      return;
    uv_pipe_init(listener->loop, p, 0);
    (void)uv_accept(listener, (uv_stream_t *)p);
    uv_close((uv_handle_t *)p, free_handle);
    return;
  }
  c->srv = s;
  agent_ctl_reader_init(&c->rd);
  uv_pipe_init(listener->loop, &c->pipe, 0);
  uv_timer_init(listener->loop, &c->timer);
  c->pipe.data = c->timer.data = c;
  c->open_handles = 2;
  c->next = s->clients;
  s->clients = c;
  s->n_clients++;
  if (uv_accept(listener, (uv_stream_t *)&c->pipe) < 0 ||
      uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) < 0) {
    client_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_client_timeout, AGENT_CTL_CLIENT_MS, 0);
}

int agent_ctl_server_start(struct agent_ctl_server *s, uv_loop_t *loop, const char *path,
                           agent_ctl_answer_fn answer, void *ctx) {
  memset(s, 0, sizeof(*s));
  s->answer = answer;
  s->ctx = ctx;
  if (snprintf(s->path, sizeof(s->path), "%s", path) >= (int)sizeof(s->path))
    return -ENAMETOOLONG;
  int r = uv_pipe_init(loop, &s->pipe, 0);
  if (r < 0)
    return r;
  s->open = true;
  s->pipe.data = s;
  r = daemon_ctl_prepare(path); /* what a killed agent left */
  if (r == 0)
    r = uv_pipe_bind(&s->pipe, path);
  /* no one else can connect once restricted: it does not listen yet */
  uv_os_fd_t fd;
  if (r == 0)
    r = uv_fileno((uv_handle_t *)&s->pipe, &fd);
  if (r == 0)
    r = daemon_ctl_restrict(path, (intptr_t)fd);
  if (r == 0)
    r = uv_listen((uv_stream_t *)&s->pipe, AGENT_CTL_MAX_CLIENTS, on_connection);
  if (r < 0)
    agent_ctl_server_close(s);
  return r;
}

void agent_ctl_server_close(struct agent_ctl_server *s) {
  if (!s->open)
    return;
  s->open = false;
  while (s->clients)
    client_close(s->clients);
  uv_close((uv_handle_t *)&s->pipe, NULL);
  daemon_ctl_remove(s->path);
}
