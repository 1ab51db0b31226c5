/* `cordon-server run --log-file PATH`: the log lines go to PATH (opened
 * for appending, 0640, onto fd 2, so that everything written to stderr
 * lands there), and SIGHUP reopens it, for logrotate's move-then-signal.
 * Not thread-safe; the daemon has one thread. */
#ifndef CORDON_SERVER_LOGFILE_H
#define CORDON_SERVER_LOGFILE_H

#include <stdbool.h>

#include "core/error.h"

/* Open path and put it on fd 2; the path is remembered for reopen (copied).
 * 0, or a negated errno with diag. */
int logfile_open(const char *path, struct cordon_diag *diag);
/* Whether a log file is in use. */
bool logfile_active(void);
/* The remembered path, or NULL. */
const char *logfile_path(void);
/* Open the path again (a new file if it was moved away) and put it on fd
 * 2. On failure fd 2 keeps the old file. 0 or a negated errno with diag. */
int logfile_reopen(struct cordon_diag *diag);

#endif
