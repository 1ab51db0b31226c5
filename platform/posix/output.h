/* A job's two output pipes and its exit status, for the POSIX layers
 * (Linux and macOS): at most cap bytes of each stream are kept, the rest
 * is read and discarded. What is kept is also handed to the job's
 * on_output as it is read (platform/sandbox.h). */
#ifndef CORDON_PLATFORM_POSIX_OUTPUT_H
#define CORDON_PLATFORM_POSIX_OUTPUT_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/result.h"
#include "platform/sandbox.h"

struct posix_output {
  int rd[2]; /* our ends (non-blocking); stdout, stderr */
  int wr[2]; /* the job's ends (stdout_fd, stderr_fd of the launch), until handed over */
  bool open[2];
  struct result_buf *buf[2];
  size_t cap;
  sandbox_output_fn on_output; /* NULL or the job's */
  void *output_ctx;
};

/* Two close-on-exec pipes into res->out and res->err; job gives the live
 * output callback (may be NULL). 0 or a negated errno (nothing open then). */
int posix_output_open(struct posix_output *o, struct job_result *res, size_t cap,
                      const struct sandbox_job *job);
/* Close the job's ends (once it has them, or failed to start). */
void posix_output_close_writers(struct posix_output *o);
/* Wait up to ms for output or for one of extra (the caller's fds, whose
 * revents it reads), reading what arrived. Returns poll()'s count or a
 * negated errno. With nothing to wait for it sleeps ms. */
int posix_output_poll(struct posix_output *o, struct pollfd *extra, size_t n_extra, int ms);
/* The rest of the output once the job is dead: its writers are gone, so
 * EOF comes quickly; at most 2 s. */
void posix_output_finish(struct posix_output *o);
void posix_output_release(struct posix_output *o);

/* Fill exited/exit_code or signal from a wait status. signal_exits: an
 * exit status of 128+N (bwrap's report of a job killed by signal N) is
 * that signal. */
void posix_exit_status(int status, bool signal_exits, struct job_result *res);

#endif
