/* What `cordon-agent run` needs from the OS besides the sandbox: one
 * instance per config directory, a local control endpoint for `status`
 * and `metrics`, the service manager's readiness protocol, and a check
 * that the account jobs run as can reach the staging directory.
 *
 *   POSIX    platform/posix/daemon_posix.c: flock(2), a UNIX stream socket,
 *            sd_notify datagrams to $NOTIFY_SOCKET, a probe child that
 *            takes the job user's identity
 *   Windows  platform/windows/daemon_windows.c: LockFileEx, a named pipe
 *            whose DACL admits the account, SYSTEM and Administrators only,
 *            and no notifications (the SCM is answered by
 *            platform/service.h)
 *
 * Nothing here prints or logs. Failures are negated errno values; the
 * staging check fills diag with a one-line reason. */
#ifndef CORDON_PLATFORM_DAEMON_H
#define CORDON_PLATFORM_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* ---- one instance per directory ---- */

struct daemon_lock;

/* Take an exclusive lock on DIR/NAME (created 0600 if missing) without
 * waiting, and write this process's pid into the file. 0 and *out_lock;
 * -EAGAIN when another process holds it (daemon_lock_holder tells who);
 * when the pid in the file is dead but the lock is still held (a killed
 * agent's job tree still dying), it waits up to 5 s for it to go;
 * another -errno when the file cannot be opened. The lock lives as long
 * as the process or until daemon_lock_release; the descriptor is
 * close-on-exec, so jobs never hold it. */
int daemon_lock_take(const char *dir, const char *name, struct daemon_lock **out_lock);
/* The pid written in DIR/NAME by its holder: > 0, or 0 when the file has
 * none (unreadable, empty, or written an instant ago). */
long daemon_lock_holder(const char *dir, const char *name);
/* Unlock and free (the file stays: removing it would race a new holder).
 * NULL is fine. */
void daemon_lock_release(struct daemon_lock *lock);

/* ---- the control endpoint ---- */

/* The endpoint for DIR/NAME, for the server (libuv's uv_pipe_bind) and
 * daemon_ctl_request: on POSIX the path of a UNIX stream socket; on
 * Windows a named pipe, \\.\pipe\cordon-<a hash of DIR>-NAME. 0;
 * -ENAMETOOLONG when it does not fit a socket address (libuv would cut
 * it) or out. */
int daemon_ctl_path(const char *dir, const char *name, char *out, size_t len);
/* Before binding path (the caller holds the instance lock): remove what a
 * killed holder left (POSIX: the socket file; Windows: nothing, a pipe
 * goes with its process). 0 or -errno. */
int daemon_ctl_prepare(const char *path);
/* After binding path, before listening: let only this account in. POSIX:
 * mode 0600. Windows: os_handle is the pipe's server handle (libuv's
 * uv_fileno), which gets a protected DACL admitting the account, SYSTEM
 * and Administrators. 0 or -errno. */
int daemon_ctl_restrict(const char *path, intptr_t os_handle);
/* After closing the server: remove what binding made (POSIX: unlink). */
void daemon_ctl_remove(const char *path);
/* Send request (one line, '\n' included by the caller) to the endpoint at
 * path and read one reply line. 0 and *out_reply (malloc'd, NUL-terminated,
 * the '\n' removed; *out_len its length); -ECONNREFUSED or -ENOENT when
 * nothing listens there; -ETIMEDOUT after timeout_ms in all; -EMSGSIZE
 * when the reply passes max_reply bytes before its newline (nothing more
 * is read); -EPROTO when the peer closed before a newline. */
int daemon_ctl_request(const char *path, const char *request, size_t max_reply, int timeout_ms,
                       char **out_reply, size_t *out_len);

/* For the implementations of daemon_ctl_request: read one reply line
 * through read_some (up to cap bytes into buf: 0 and *out_n bytes, 0 with
 * *out_n = 0 at the peer's close, or -errno; it waits as its OS needs) and
 * return it as daemon_ctl_request does, with its errors. */
typedef int (*daemon_read_fn)(void *ctx, char *buf, size_t cap, size_t *out_n);
int daemon_ctl_read_reply(daemon_read_fn read_some, void *ctx, size_t max_reply, char **out_reply,
                          size_t *out_len);

/* ---- the service manager's notifications (systemd's sd_notify) ---- */

/* Read $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID once and unset
 * them, so no child sees them. Call before any thread starts. Returns
 * the watchdog interval in microseconds for this process (0: none). */
uint64_t daemon_notify_init(void);
/* Send state ("READY=1", "STATUS=...", "WATCHDOG=1", lines joined by
 * '\n') as one datagram to the socket daemon_notify_init found: 0 sent,
 * 1 when there is no socket (not started by a service manager that
 * listens), -errno. Safe from the loop thread; not thread-safe with
 * daemon_notify_init. */
int daemon_notify(const char *state);

/* ---- staging reachable by the job user ---- */

/* Can the account jobs run as reach dir by path, as the launcher makes
 * it (uid and gid of job_user, no supplementary groups)? Checked for
 * real by a short-lived child that takes that identity and enters every
 * ancestor of dir in turn. 0 when it can, or when jobs run as the agent's
 * own account (the agent is not root; Windows, whose AppContainer layer
 * grants its own access). CORDON_E_CONFIG_INVALID with diag naming the
 * first directory it cannot search, its mode and owner, and the mode it
 * needs; -ENOENT when dir does not exist; CORDON_E_JOB_USER_MISSING when
 * job_user is not an account; another -errno when the check could not
 * run. Forks a child that makes only system calls before it exits. */
int daemon_job_reach_check(const char *job_user, const char *dir, struct cordon_diag *diag);

#endif
