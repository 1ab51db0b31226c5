/* platform/daemon.h on Win32: the instance lock is LockFileEx on a byte
 * far past the end of the lock file (so the pid in its first bytes stays
 * readable: Windows locks are mandatory). There is no control endpoint
 * (a named pipe would need its own DACL; docs/WINDOWS.md), no sd_notify
 * (the SCM is answered by platform/service.h), and jobs reach their
 * staging through the AppContainer's ACLs, so the reach check passes. */
#include <windows.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat/win32.h"
#include "platform/daemon.h"

/* the locked byte: past any pid the file holds */
#define LOCK_OFFSET_HIGH 0x40000000u

struct daemon_lock {
  HANDLE h;
};

static wchar_t *lock_path(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (!p)
    return NULL;
  snprintf(p, n, "%s/%s", dir, name);
  wchar_t *w = win_wide(p);
  free(p);
  return w;
}

int daemon_lock_take(const char *dir, const char *name, struct daemon_lock **out_lock) {
  wchar_t *w = lock_path(dir, name);
  if (!w)
    return -ENOMEM;
  HANDLE h = CreateFileW(w, GENERIC_READ | GENERIC_WRITE,
                         FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL, OPEN_ALWAYS,
                         FILE_ATTRIBUTE_NORMAL, NULL);
  free(w);
  if (h == INVALID_HANDLE_VALUE)
    return win_last_err();
  OVERLAPPED ov = {0};
  ov.OffsetHigh = LOCK_OFFSET_HIGH;
  if (!LockFileEx(h, LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ov)) {
    DWORD e = GetLastError();
    CloseHandle(h);
    return e == ERROR_LOCK_VIOLATION || e == ERROR_IO_PENDING ? -EAGAIN : win_errno(e);
  }
  char pid[32];
  int n = snprintf(pid, sizeof(pid), "%lu\n", (unsigned long)GetCurrentProcessId());
  DWORD wrote = 0;
  LARGE_INTEGER zero = {0};
  if (!SetFilePointerEx(h, zero, NULL, FILE_BEGIN) || !SetEndOfFile(h) ||
      !WriteFile(h, pid, (DWORD)n, &wrote, NULL) || wrote != (DWORD)n) {
    int r = win_last_err();
    CloseHandle(h);
    return r;
  }
  struct daemon_lock *l = malloc(sizeof(*l));
  if (!l) {
    CloseHandle(h);
    return -ENOMEM;
  }
  l->h = h;
  *out_lock = l;
  return 0;
}

void daemon_lock_release(struct daemon_lock *lock) {
  if (!lock)
    return;
  OVERLAPPED ov = {0};
  ov.OffsetHigh = LOCK_OFFSET_HIGH;
  UnlockFileEx(lock->h, 0, 1, 0, &ov);
  CloseHandle(lock->h);
  free(lock);
}

int daemon_ctl_path(const char *dir, const char *name, char *out, size_t len) {
  (void)dir, (void)name, (void)out, (void)len;
  return -ENOTSUP;
}

int daemon_ctl_request(const char *path, const char *request, size_t max_reply, int timeout_ms,
                       char **out_reply, size_t *out_len) {
  (void)path, (void)request, (void)max_reply, (void)timeout_ms, (void)out_reply, (void)out_len;
  return -ENOTSUP;
}

uint64_t daemon_notify_init(void) {
  return 0;
}

int daemon_notify(const char *state) {
  (void)state;
  return 1;
}

int daemon_job_reach_check(const char *job_user, const char *dir, struct cordon_diag *diag) {
  (void)job_user, (void)dir, (void)diag;
  return 0;
}
