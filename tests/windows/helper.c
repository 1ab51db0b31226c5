/* wintest_helper.exe: the job the Windows tests run inside the sandbox.
 *   exit N          exit with status N
 *   env NAME        print NAME's value, or <unset>
 *   flood BYTES     write BYTES bytes of 'x' to stdout
 *   alloc MB        commit and touch MB MiB; print "alloc ok" or "alloc failed at N"
 *   spawn K         start K children that sleep; print how many started
 *   tree SECONDS    start a child that starts a grandchild; all print "pid N"
 *                   and sleep SECONDS
 *   orphan SECONDS  start a child that prints "pid N" and sleeps SECONDS; exit
 *   sleep SECONDS
 *   service         run as the Windows service "cordon-wintest" until stopped
 */
#include <windows.h>

#include <fcntl.h>
#include <io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/windows/service_windows.h"

static HANDLE stop_event;

static int service_run(void *ctx) {
  (void)ctx;
  WaitForSingleObject(stop_event, INFINITE);
  return 0;
}

static void service_stop(void *ctx) {
  (void)ctx;
  SetEvent(stop_event);
}

static int start_self(const char *args, HANDLE *out_proc) {
  char exe[MAX_PATH];
  if (!GetModuleFileNameA(NULL, exe, sizeof(exe)))
    return -1;
  char cmd[MAX_PATH + 64];
  snprintf(cmd, sizeof(cmd), "\"%s\" %s", exe, args);
  STARTUPINFOA si;
  memset(&si, 0, sizeof(si));
  si.cb = sizeof(si);
  si.dwFlags = STARTF_USESTDHANDLES;
  si.hStdInput = GetStdHandle(STD_INPUT_HANDLE);
  si.hStdOutput = GetStdHandle(STD_OUTPUT_HANDLE);
  si.hStdError = GetStdHandle(STD_ERROR_HANDLE);
  PROCESS_INFORMATION pi;
  fflush(stdout);
  if (!CreateProcessA(exe, cmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi))
    return -1;
  CloseHandle(pi.hThread);
  if (out_proc)
    *out_proc = pi.hProcess;
  else
    CloseHandle(pi.hProcess);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  _setmode(_fileno(stdout), _O_BINARY);               /* "\n", not "\r\n" */
  if (argc > 3 && strcmp(argv[1], "--config") == 0) { /* as the service is started */
    argv += 2;
    argc -= 2;
  }
  if (argc < 2)
    return 2;
  const char *mode = argv[1];
  long n = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
  if (strcmp(mode, "service") == 0) {
    stop_event = CreateEventW(NULL, TRUE, FALSE, NULL);
    int r = service_windows_dispatch("cordon-wintest", service_run, service_stop, NULL);
    return r == 0 ? 0 : 5;
  }
  if (strcmp(mode, "exit") == 0)
    return (int)n;
  if (strcmp(mode, "env") == 0) {
    const char *v = argc > 2 ? getenv(argv[2]) : NULL;
    printf("%s\n", v ? v : "<unset>");
    return 0;
  }
  if (strcmp(mode, "flood") == 0) {
    static char buf[4096];
    memset(buf, 'x', sizeof(buf));
    HANDLE out = GetStdHandle(STD_OUTPUT_HANDLE);
    for (long left = n; left > 0;) {
      DWORD k = left < (long)sizeof(buf) ? (DWORD)left : sizeof(buf), w = 0;
      if (!WriteFile(out, buf, k, &w, NULL))
        return 3;
      left -= (long)w;
    }
    return 0;
  }
  if (strcmp(mode, "alloc") == 0) {
    for (long mb = 0; mb < n; mb++) {
      char *p = VirtualAlloc(NULL, 1 << 20, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
      if (!p) {
        printf("alloc failed at %ld\n", mb);
        return 3;
      }
      for (size_t i = 0; i < (1u << 20); i += 4096)
        p[i] = 1;
    }
    printf("alloc ok\n");
    return 0;
  }
  if (strcmp(mode, "spawn") == 0) {
    long ok = 0;
    HANDLE kids[64];
    for (long i = 0; i < n && i < 64; i++)
      if (start_self("sleep 30", &kids[ok]) == 0)
        ok++;
    printf("started %ld\n", ok);
    for (long i = 0; i < ok; i++) {
      TerminateProcess(kids[i], 0);
      CloseHandle(kids[i]);
    }
    return 0;
  }
  if (strcmp(mode, "tree") == 0 || strcmp(mode, "tree-child") == 0) {
    printf("pid %lu\n", GetCurrentProcessId());
    char args[64];
    if (strcmp(mode, "tree") == 0) {
      snprintf(args, sizeof(args), "tree-child %ld", n);
      if (start_self(args, NULL) < 0)
        return 4;
    } else if (argc > 3) {
      /* the grandchild */
    } else {
      snprintf(args, sizeof(args), "tree-child %ld leaf", n);
      if (start_self(args, NULL) < 0)
        return 4;
    }
    Sleep((DWORD)n * 1000);
    return 0;
  }
  if (strcmp(mode, "orphan") == 0) {
    char args[64];
    snprintf(args, sizeof(args), "pidsleep %ld", n);
    if (start_self(args, NULL) < 0)
      return 4;
    Sleep(1000); /* let the child print its pid */
    return 0;
  }
  if (strcmp(mode, "pidsleep") == 0)
    printf("pid %lu\n", GetCurrentProcessId());
  if (strcmp(mode, "sleep") == 0 || strcmp(mode, "pidsleep") == 0) {
    Sleep((DWORD)n * 1000);
    return 0;
  }
  return 2;
}
