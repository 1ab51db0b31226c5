/* platform/daemon.h on Win32: the instance lock is LockFileEx on a byte
 * far past the end of the lock file (so the pid in its first bytes stays
 * readable: Windows locks are mandatory). The control endpoint is a named
 * pipe that libuv creates (uv_pipe_bind) and daemon_ctl_restrict gives a
 * protected DACL of the account, SYSTEM and Administrators before it
 * listens (docs/WINDOWS.md); the client side is overlapped I/O with one
 * deadline. No sd_notify (the SCM is answered by platform/service.h), and
 * jobs reach their staging through the AppContainer's ACLs, so the reach
 * check passes. */
#include <windows.h>

#include <aclapi.h>

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

/* ---- the control endpoint ---- */

int daemon_ctl_path(const char *dir, const char *name, char *out, size_t len) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a of the directory as given */
  for (const unsigned char *p = (const unsigned char *)dir; *p; p++) {
    unsigned char c = *p == '\\' ? '/' : *p;
    if (c >= 'A' && c <= 'Z') /* Windows paths ignore case */
      c = (unsigned char)(c - 'A' + 'a');
    h = (h ^ c) * 1099511628211ull;
  }
  int n = snprintf(out, len, "\\\\.\\pipe\\cordon-%016llx-%s", (unsigned long long)h, name);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int daemon_ctl_prepare(const char *path) {
  (void)path; /* a pipe goes with the process that made it */
  return 0;
}

int daemon_ctl_restrict(const char *path, intptr_t os_handle) {
  (void)path;
  HANDLE h = (HANDLE)os_handle;
  if (h == INVALID_HANDLE_VALUE || !h)
    return -EBADF;
  PSECURITY_DESCRIPTOR sd = win_owner_only_sd(); /* what 0600 is here */
  if (!sd)
    return win_last_err();
  BOOL present = FALSE, defaulted = FALSE;
  PACL dacl = NULL;
  DWORD e = ERROR_INVALID_SECURITY_DESCR;
  if (GetSecurityDescriptorDacl(sd, &present, &dacl, &defaulted) && present)
    /* the DACL is the named pipe's, every instance's: set through the
     * first one, which libuv opened with WRITE_DAC for uv_pipe_chmod */
    e = SetSecurityInfo(h, SE_KERNEL_OBJECT,
                        DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION, NULL, NULL,
                        dacl, NULL);
  LocalFree(sd);
  return e == ERROR_SUCCESS ? 0 : win_errno(e);
}

void daemon_ctl_remove(const char *path) {
  (void)path;
}

/* Wait for an overlapped operation on h until deadline (GetTickCount64
 * ms): 0 and *n its bytes, or -errno; cancelled on a timeout. */
static int overlapped_wait(HANDLE h, OVERLAPPED *ov, BOOL started, ULONGLONG deadline, DWORD *n) {
  if (!started && GetLastError() != ERROR_IO_PENDING)
    return win_last_err();
  ULONGLONG now = GetTickCount64();
  DWORD left = now >= deadline ? 0 : (DWORD)(deadline - now);
  if (WaitForSingleObject(ov->hEvent, left) != WAIT_OBJECT_0) {
    CancelIo(h);
    GetOverlappedResult(h, ov, n, TRUE);
    return -ETIMEDOUT;
  }
  if (!GetOverlappedResult(h, ov, n, FALSE)) {
    DWORD e = GetLastError();
    return e == ERROR_BROKEN_PIPE || e == ERROR_PIPE_NOT_CONNECTED ? -EPROTO : win_errno(e);
  }
  return 0;
}

struct pipe_reader {
  HANDLE h;
  OVERLAPPED *ov;
  ULONGLONG deadline;
};

static int pipe_read_some(void *ctx, char *buf, size_t cap, size_t *out_n) {
  struct pipe_reader *rd = ctx;
  DWORD n = 0;
  ResetEvent(rd->ov->hEvent);
  BOOL ok = ReadFile(rd->h, buf, (DWORD)cap, NULL, rd->ov);
  int r = overlapped_wait(rd->h, rd->ov, ok, rd->deadline, &n);
  *out_n = n;
  return r;
}

int daemon_ctl_request(const char *path, const char *request, size_t max_reply, int timeout_ms,
                       char **out_reply, size_t *out_len) {
  ULONGLONG deadline = GetTickCount64() + (ULONGLONG)(timeout_ms > 0 ? timeout_ms : 0);
  wchar_t *w = win_wide(path);
  if (!w)
    return -ENOMEM;
  HANDLE h;
  for (;;) {
    h = CreateFileW(w, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING,
                    FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION, NULL);
    if (h != INVALID_HANDLE_VALUE)
      break;
    DWORD e = GetLastError();
    ULONGLONG now = GetTickCount64();
    if (e != ERROR_PIPE_BUSY || now >= deadline) { /* every instance taken: wait */
      free(w);
      if (e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND)
        return -ENOENT;
      return e == ERROR_PIPE_BUSY ? -ETIMEDOUT : win_errno(e);
    }
    (void)WaitNamedPipeW(w, (DWORD)(deadline - now));
  }
  free(w);
  OVERLAPPED ov = {0};
  ov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
  if (!ov.hEvent) {
    CloseHandle(h);
    return win_last_err();
  }
  int r = 0;
  size_t sent = 0, want = strlen(request);
  while (r == 0 && sent < want) {
    DWORD n = 0;
    ResetEvent(ov.hEvent);
    BOOL ok = WriteFile(h, request + sent, (DWORD)(want - sent), NULL, &ov);
    r = overlapped_wait(h, &ov, ok, deadline, &n);
    sent += n;
  }
  struct pipe_reader rd = {.h = h, .ov = &ov, .deadline = deadline};
  if (r == 0)
    r = daemon_ctl_read_reply(pipe_read_some, &rd, max_reply, out_reply, out_len);
  CloseHandle(ov.hEvent);
  CloseHandle(h);
  return r;
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
