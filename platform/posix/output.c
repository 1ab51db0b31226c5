#include "platform/posix/output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "platform/posix/launch.h"

int posix_output_open(struct posix_output *o, struct job_result *res, size_t cap,
                      const struct sandbox_job *job) {
  *o = (struct posix_output){.rd = {-1, -1},
                             .wr = {-1, -1},
                             .buf = {&res->out, &res->err},
                             .cap = cap,
                             .on_output = job ? job->on_output : NULL,
                             .output_ctx = job ? job->output_ctx : NULL};
  for (int i = 0; i < 2; i++) {
    int p[2];
    int r = launch_cloexec_pipe(p);
    if (r < 0) {
      posix_output_release(o);
      return r;
    }
    o->rd[i] = p[0];
    o->wr[i] = p[1];
    o->open[i] = true;
    fcntl(p[0], F_SETFL, O_NONBLOCK);
  }
  return 0;
}

void posix_output_close_writers(struct posix_output *o) {
  for (int i = 0; i < 2; i++) {
    if (o->wr[i] >= 0)
      close(o->wr[i]);
    o->wr[i] = -1;
  }
}

/* Read everything stream i has now into its buffer (at most cap kept,
 * and what is kept handed to on_output). False at EOF or on an error,
 * true when it would block. */
static bool drain(struct posix_output *o, int i) {
  uint8_t chunk[16384];
  struct result_buf *b = o->buf[i];
  for (;;) {
    ssize_t n = read(o->rd[i], chunk, sizeof(chunk));
    if (n > 0) {
      size_t before = b->len;
      result_buf_append(b, chunk, (size_t)n, o->cap);
      if (o->on_output && b->len > before)
        o->on_output(o->output_ctx, i, before, b->data + before, b->len - before);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return true;
    return false;
  }
}

int posix_output_poll(struct posix_output *o, struct pollfd *extra, size_t n_extra, int ms) {
  struct pollfd pf[8];
  int idx[2] = {-1, -1};
  nfds_t n = 0;
  for (int i = 0; i < 2; i++)
    if (o->open[i]) {
      pf[n] = (struct pollfd){o->rd[i], POLLIN, 0};
      idx[i] = (int)n++;
    }
  for (size_t i = 0; i < n_extra && n < 8; i++)
    pf[n++] = extra[i];
  int k = poll(n ? pf : NULL, n, ms);
  if (k < 0)
    return -errno;
  for (int i = 0; i < 2; i++)
    if (idx[i] >= 0 && (pf[idx[i]].revents & (POLLIN | POLLHUP | POLLERR)))
      o->open[i] = drain(o, i);
  for (size_t i = 0, at = (size_t)(idx[0] >= 0) + (size_t)(idx[1] >= 0); i < n_extra; i++)
    extra[i].revents = at + i < n ? pf[at + i].revents : 0;
  return k;
}

void posix_output_finish(struct posix_output *o) {
  int64_t deadline = core_mono_ms() + 2000;
  while ((o->open[0] || o->open[1]) && core_mono_ms() < deadline)
    posix_output_poll(o, NULL, 0, 100);
}

void posix_output_release(struct posix_output *o) {
  posix_output_close_writers(o);
  for (int i = 0; i < 2; i++) {
    if (o->rd[i] >= 0)
      close(o->rd[i]);
    o->rd[i] = -1;
    o->open[i] = false;
  }
}

void posix_exit_status(int status, bool signal_exits, struct job_result *res) {
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    if (signal_exits && code > 128 && code < 128 + 65) {
      res->exited = false;
      res->signal = code - 128;
    } else {
      res->exited = true;
      res->exit_code = code;
    }
  } else if (WIFSIGNALED(status)) {
    res->exited = false;
    res->signal = WTERMSIG(status);
  }
}
