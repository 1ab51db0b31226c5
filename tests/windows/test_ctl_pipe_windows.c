/* The agent's control endpoint on Windows (platform/windows/daemon_windows.c):
 * the pipe's name from the config directory, agent/ctl_server.c serving
 * it in a libuv loop on another thread and daemon_ctl_request asking it,
 * the DACL the pipe is given before it listens, nothing there (-ENOENT),
 * and a server that never answers (-ETIMEDOUT). */
#include <windows.h>

#include <aclapi.h>
#include <errno.h>
#include <sddl.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "agent/ctl_server.h"
#include "platform/daemon.h"
#include "tests/windows/wintest.h"

WT_TEST(ctl_pipe, the_name_is_the_directorys_whatever_its_case_or_slashes) {
  char a[256], b[256], c[256];
  WT_EQ_INT(daemon_ctl_path("C:\\Users\\x\\cordon", "agent.sock", a, sizeof(a)), 0);
  WT_EQ_INT(daemon_ctl_path("c:/users/X/cordon", "agent.sock", b, sizeof(b)), 0);
  WT_EQ_INT(daemon_ctl_path("C:\\Users\\y\\cordon", "agent.sock", c, sizeof(c)), 0);
  WT_CHECK(strncmp(a, "\\\\.\\pipe\\cordon-", 16) == 0, "%s", a);
  WT_CHECK(strstr(a, "-agent.sock") != NULL, "%s", a);
  WT_EQ_STR(a, b);
  WT_CHECK(strcmp(a, c) != 0, "another directory, another pipe: %s", c);
  char tiny[16];
  WT_EQ_INT(daemon_ctl_path("C:\\x", "agent.sock", tiny, sizeof(tiny)), -ENAMETOOLONG);
}

static char *answer(void *ctx, enum agent_ctl_op op) {
  (void)ctx;
  return strdup(op == AGENT_CTL_STATUS ? "{\"ok\":true,\"status\":{\"pid\":1}}\n"
                                       : "{\"ok\":true,\"metrics\":\"m 1\\n\"}\n");
}

static uv_loop_t loop;
static struct agent_ctl_server srv;
static uv_async_t stop_async;

static void on_stop(uv_async_t *a) {
  agent_ctl_server_close(&srv);
  uv_close((uv_handle_t *)a, NULL);
}

static DWORD WINAPI loop_thread(void *arg) {
  (void)arg;
  uv_run(&loop, UV_RUN_DEFAULT);
  return 0;
}

WT_TEST(ctl_pipe, the_agent_answers_over_the_pipe_which_only_its_account_may_open) {
  char path[256];
  WT_EQ_INT(daemon_ctl_path(wt_tmpdir(), "agent.sock", path, sizeof(path)), 0);
  WT_EQ_INT(uv_loop_init(&loop), 0);
  WT_EQ_INT(agent_ctl_server_start(&srv, &loop, path, answer, NULL), 0);
  WT_EQ_INT(uv_async_init(&loop, &stop_async, on_stop), 0);

  /* the DACL, read back from the pipe: the account, SYSTEM and
   * Administrators, nobody else */
  uv_os_fd_t h;
  WT_EQ_INT(uv_fileno((uv_handle_t *)&srv.pipe, &h), 0);
  PSECURITY_DESCRIPTOR sd = NULL;
  PACL dacl = NULL;
  DWORD e =
      GetSecurityInfo(h, SE_KERNEL_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL, &dacl, NULL, &sd);
  WT_EQ_INT(e, ERROR_SUCCESS);
  LPWSTR sddl = NULL;
  WT_CHECK(ConvertSecurityDescriptorToStringSecurityDescriptorW(
               sd, SDDL_REVISION_1, DACL_SECURITY_INFORMATION, &sddl, NULL),
           "the DACL as SDDL");
  char text[512];
  WideCharToMultiByte(CP_UTF8, 0, sddl, -1, text, sizeof(text), NULL, NULL);
  LocalFree(sddl);
  LocalFree(sd);
  printf("  the pipe's DACL: %s\n", text);
  /* "D:P" on Windows; Wine keeps the ACEs but not the protected flag,
   * which a pipe (no parent to inherit from) does not need */
  WT_CHECK(strncmp(text, "D:", 2) == 0, "%s", text);
  WT_CHECK(strstr(text, ";;;SY)") && strstr(text, ";;;BA)"), "SYSTEM, Administrators: %s", text);
  WT_CHECK(!strstr(text, ";;;WD)") && !strstr(text, ";;;AN)") && !strstr(text, ";;;BU)"),
           "not Everyone, Anonymous or Users: %s", text);
  int aces = 0;
  for (const char *p = text; (p = strstr(p, "(A;")); p++)
    aces++;
  WT_EQ_INT(aces, 3);

  HANDLE th = CreateThread(NULL, 0, loop_thread, NULL, 0, NULL);
  WT_CHECK(th != NULL, "the loop's thread");
  for (int i = 0; i < 3; i++) { /* one request per connection, again and again */
    char *reply = NULL;
    size_t len = 0;
    int r = daemon_ctl_request(path, "{\"op\":\"status\"}\n", 65536, 5000, &reply, &len);
    WT_EQ_INT(r, 0);
    WT_EQ_STR(reply, "{\"ok\":true,\"status\":{\"pid\":1}}");
    WT_EQ_INT(len, strlen(reply));
    free(reply);
  }
  char *reply = NULL;
  size_t len = 0;
  WT_EQ_INT(daemon_ctl_request(path, "{\"op\":\"nonsense\"}\n", 65536, 5000, &reply, &len), 0);
  WT_CHECK(strstr(reply, "\"ok\":false") != NULL, "%s", reply);
  free(reply);
  WT_EQ_INT(daemon_ctl_request(path, "{\"op\":\"metrics\"}\n", 8, 5000, &reply, &len), -EMSGSIZE);
  uv_async_send(&stop_async);
  WaitForSingleObject(th, 10000);
  CloseHandle(th);
  WT_EQ_INT(uv_loop_close(&loop), 0);
  WT_EQ_INT(daemon_ctl_request(path, "{\"op\":\"status\"}\n", 65536, 2000, &reply, &len), -ENOENT);
}

WT_TEST(ctl_pipe, a_server_that_never_answers_times_out) {
  char path[256];
  WT_EQ_INT(daemon_ctl_path(wt_tmpdir(), "mute.sock", path, sizeof(path)), 0);
  wchar_t w[256];
  MultiByteToWideChar(CP_UTF8, 0, path, -1, w, 256);
  HANDLE p =
      CreateNamedPipeW(w, PIPE_ACCESS_DUPLEX, PIPE_TYPE_BYTE | PIPE_WAIT, 1, 4096, 4096, 0, NULL);
  WT_CHECK(p != INVALID_HANDLE_VALUE, "a pipe nobody answers on");
  char *reply = NULL;
  size_t len = 0;
  ULONGLONG t0 = GetTickCount64();
  WT_EQ_INT(daemon_ctl_request(path, "{\"op\":\"status\"}\n", 65536, 500, &reply, &len),
            -ETIMEDOUT);
  ULONGLONG took = GetTickCount64() - t0;
  WT_CHECK(took >= 400 && took < 5000, "took %llu ms", (unsigned long long)took);
  CloseHandle(p);
}
