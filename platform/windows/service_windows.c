/* The agent as a Windows service (platform/service.h) on the Service
 * Control Manager.
 *
 * The service is SERVICE_WIN32_OWN_PROCESS, started automatically, and
 * restarted by the SCM after a failure (5 s, three times, counter reset
 * after a day). It runs as the virtual account NT SERVICE\<name> (an
 * unrestricted per-service SID, not an administrator, no password), so
 * the jobs it runs get a restricted token of that account; LocalSystem is
 * refused. Its config directory (default %ProgramData%\cordon) is given a
 * protected DACL: SYSTEM, Administrators and the service account only.
 * There are no scopes and no --root: the SCM keeps one system-wide
 * service, named o->name (default "cordon-agent"). See docs/WINDOWS.md.
 */
#include "platform/service.h"

#include <windows.h>

#include <aclapi.h>
#include <bcrypt.h>
#include <sddl.h>

#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compat/posix.h"
#include "compat/win32.h"
#include "platform/fs.h"
#include "platform/paths.h"
#include "platform/windows/cmdline.h"
#include "platform/windows/service_windows.h"

#define SERVICE_DEFAULT_NAME "cordon-agent"
/* the service's log is started afresh (the old one kept as .1) past this */
#define SERVICE_LOG_MAX_BYTES (4L * 1024 * 1024)

int service_self_path(char *out, size_t len) {
  wchar_t w[MAX_PATH * 2];
  DWORD n = GetModuleFileNameW(NULL, w, MAX_PATH * 2);
  if (n == 0 || n >= MAX_PATH * 2)
    return n == 0 ? win_last_err() : -ENAMETOOLONG;
  char *u = win_utf8(w);
  if (!u)
    return -ENOMEM;
  int r = strlen(u) < len ? 0 : -ENAMETOOLONG;
  if (r == 0)
    memcpy(out, u, strlen(u) + 1);
  free(u);
  return r;
}

enum service_scope service_default_scope(void) {
  return SERVICE_SCOPE_SYSTEM;
}

const char *service_manager_name(void) {
  return "scm";
}

bool service_has_scopes(void) {
  return false;
}

static const char *svc_name(const struct service_options *o) {
  return o && o->name ? o->name : SERVICE_DEFAULT_NAME;
}

static int fail_w32(struct cordon_diag *diag, const char *what, DWORD e) {
  return cordon_diag_set(diag, win_errno(e), "%s: Windows error %lu", what, e);
}

/* The command line the SCM starts: "<agent>" [--config "<dir>"] <run_args>. */
static int command_line(const struct service_options *o, wchar_t **out_cmdline) {
  const char *agent = o->agent_path;
  if (!agent)
    return CORDON_E_USAGE;
  if (!(agent[0] && agent[1] == ':' && (agent[2] == '\\' || agent[2] == '/')) &&
      !(agent[0] == '\\' && agent[1] == '\\'))
    return CORDON_E_USAGE;
  /* run_args: our own words, split at single spaces */
  char words[128];
  int wn = snprintf(words, sizeof(words), "%s", o->run_args ? o->run_args : "run --service");
  if (wn < 0 || (size_t)wn >= sizeof(words))
    return -EINVAL;
  char *argv[3 + SERVICE_MAX_RUN_WORDS + 1];
  size_t n = 0;
  argv[n++] = (char *)agent;
  if (o->config_dir) {
    argv[n++] = "--config";
    argv[n++] = (char *)o->config_dir;
  }
  size_t n_words = 0;
  for (char *w = words, *save = NULL; (w = strtok_r(w, " ", &save)); w = NULL) {
    if (n_words++ == SERVICE_MAX_RUN_WORDS)
      return -EINVAL;
    argv[n++] = w;
  }
  if (n_words == 0)
    return -EINVAL;
  argv[n] = NULL;
  /* the program itself always quoted: a path with spaces must never be
   * split by the SCM into "C:\Program.exe" */
  wchar_t *rest = NULL;
  int r = cmdline_build(argv + 1, &rest);
  if (r < 0)
    return r;
  wchar_t *wa = win_wide(agent);
  if (!wa) {
    free(rest);
    return -EINVAL;
  }
  size_t len = wcslen(wa) + wcslen(rest) + 4;
  wchar_t *cl = malloc(len * sizeof(wchar_t));
  if (cl)
    _snwprintf(cl, len, L"\"%ls\" %ls", wa, rest), cl[len - 1] = 0;
  free(wa);
  free(rest);
  if (!cl)
    return -ENOMEM;
  *out_cmdline = cl;
  return 0;
}

int service_render(const struct service_options *o, char **out_text) {
  wchar_t *cl = NULL;
  int r = command_line(o, &cl);
  if (r < 0)
    return r;
  char *u = win_utf8(cl);
  free(cl);
  char *text = NULL;
  if (!u || asprintf(&text, "%s\n", u) < 0)
    text = NULL;
  free(u);
  if (!text)
    return -ENOMEM;
  *out_text = text;
  return 0;
}

int service_definition_path(const struct service_options *o, char *out, size_t len) {
  int n = snprintf(out, len, "%s", svc_name(o));
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static char *account_of(const struct service_options *o) {
  char *a = NULL;
  if (o->account)
    return strdup(o->account);
  if (asprintf(&a, "NT SERVICE\\%s", svc_name(o)) < 0)
    return NULL;
  return a;
}

int service_windows_sid(const char *name, char *out, size_t len) {
  wchar_t *w = win_wide(name);
  if (!w)
    return -EINVAL;
  CharUpperW(w);
  BCRYPT_ALG_HANDLE alg = NULL;
  BCRYPT_HASH_HANDLE h = NULL;
  UCHAR digest[20];
  int r = -EIO;
  if (BCryptOpenAlgorithmProvider(&alg, BCRYPT_SHA1_ALGORITHM, NULL, 0) == 0 &&
      BCryptCreateHash(alg, &h, NULL, 0, NULL, 0, 0) == 0 &&
      BCryptHashData(h, (PUCHAR)w, (ULONG)(wcslen(w) * sizeof(wchar_t)), 0) == 0 &&
      BCryptFinishHash(h, digest, sizeof(digest), 0) == 0) {
    DWORD sub[5];
    memcpy(sub, digest, sizeof(sub)); /* little-endian, as Windows reads them */
    int n = snprintf(out, len, "S-1-5-80-%lu-%lu-%lu-%lu-%lu", (unsigned long)sub[0],
                     (unsigned long)sub[1], (unsigned long)sub[2], (unsigned long)sub[3],
                     (unsigned long)sub[4]);
    r = n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
  }
  if (h)
    BCryptDestroyHash(h);
  if (alg)
    BCryptCloseAlgorithmProvider(alg, 0);
  free(w);
  return r;
}

/* The config dir: SYSTEM, Administrators and the service account only. */
static int protect_config_dir(const struct service_options *o, const char *account,
                              struct cordon_diag *diag) {
  char dflt[MAX_PATH * 3];
  const char *dir = o->config_dir;
  if (!dir) {
    int r = paths_agent_config_dir(dflt, sizeof(dflt));
    if (r < 0)
      return cordon_diag_set(diag, r, "no default config directory");
    dir = dflt;
  }
  int r = fs_mkdir_p(dir, 0700);
  if (r < 0)
    return cordon_diag_set(diag, r, "cannot create %s", dir);
  wchar_t *wacc = win_wide(account), *wdir = win_wide(dir);
  BYTE sidbuf[SECURITY_MAX_SID_SIZE];
  DWORD sidlen = sizeof(sidbuf), domlen = 256;
  wchar_t dom[256];
  SID_NAME_USE use;
  LPWSTR ssid = NULL;
  PSECURITY_DESCRIPTOR sd = NULL;
  r = 0;
  if (!wacc || !wdir) {
    r = -ENOMEM;
  } else if (LookupAccountNameW(NULL, wacc, sidbuf, &sidlen, dom, &domlen, &use)) {
    if (!ConvertSidToStringSidW(sidbuf, &ssid))
      r = fail_w32(diag, "service account SID", GetLastError());
  } else if (!o->account) {
    /* the virtual account may not be known yet (or at all, under Wine):
     * its SID is derived from the service name */
    char s8[128];
    r = service_windows_sid(svc_name(o), s8, sizeof(s8));
    if (r == 0 && !(ssid = (LPWSTR)LocalAlloc(LPTR, sizeof(wchar_t) * 128)))
      r = -ENOMEM;
    if (r == 0)
      MultiByteToWideChar(CP_UTF8, 0, s8, -1, ssid, 128);
    if (r < 0)
      cordon_diag_set(diag, r, "cannot derive the service SID");
  } else {
    r = fail_w32(diag, "cannot resolve the service account", GetLastError());
  }
  if (r == 0) {
    wchar_t sddl[256];
    _snwprintf(sddl, 256, L"D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;FA;;;%ls)", ssid);
    sddl[255] = 0;
    PACL dacl = NULL;
    BOOL present = FALSE, defaulted = FALSE;
    if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, &sd, NULL) ||
        !GetSecurityDescriptorDacl(sd, &present, &dacl, &defaulted)) {
      r = fail_w32(diag, "security descriptor", GetLastError());
    } else {
      DWORD e = SetNamedSecurityInfoW(
          wdir, SE_FILE_OBJECT, DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
          NULL, NULL, dacl, NULL);
      if (e != ERROR_SUCCESS)
        r = fail_w32(diag, "cannot protect the config directory", e);
    }
  }
  LocalFree(sd);
  LocalFree(ssid);
  free(wacc);
  free(wdir);
  return r;
}

/* Optional settings some service managers (Wine's) do not know: a missing
 * level is tolerated, any other failure is not. */
static int config2(SC_HANDLE s, DWORD level, void *info, const char *what,
                   struct cordon_diag *diag) {
  if (ChangeServiceConfig2W(s, level, info))
    return 0;
  DWORD e = GetLastError();
  if (e == ERROR_INVALID_LEVEL || e == ERROR_CALL_NOT_IMPLEMENTED || e == ERROR_NOT_SUPPORTED)
    return 0;
  return fail_w32(diag, what, e);
}

int service_install(const struct service_options *o, struct cordon_diag *diag) {
  char *account = account_of(o);
  wchar_t *cl = NULL, *wname = win_wide(svc_name(o)), *wacc = account ? win_wide(account) : NULL;
  SC_HANDLE scm = NULL, s = NULL;
  int r = 0;
  if (!account || !wname || !wacc) {
    r = -ENOMEM;
    goto out;
  }
  if (_stricmp(account, "LocalSystem") == 0 || _stricmp(account, "NT AUTHORITY\\SYSTEM") == 0 ||
      _stricmp(account, ".\\LocalSystem") == 0) {
    r = cordon_diag_set(diag, CORDON_E_USAGE,
                        "the service never runs as LocalSystem (its jobs would be SYSTEM)");
    goto out;
  }
  r = command_line(o, &cl);
  if (r < 0) {
    cordon_diag_set(diag, r, "the agent path must be absolute");
    goto out;
  }
  scm = OpenSCManagerW(NULL, NULL, SC_MANAGER_CONNECT | SC_MANAGER_CREATE_SERVICE);
  if (!scm) {
    r = fail_w32(diag, "cannot open the Service Control Manager (run as an administrator)",
                 GetLastError());
    goto out;
  }
  s = CreateServiceW(scm, wname, L"cordon agent", SERVICE_ALL_ACCESS, SERVICE_WIN32_OWN_PROCESS,
                     SERVICE_AUTO_START, SERVICE_ERROR_NORMAL, cl, NULL, NULL, NULL, wacc, NULL);
  if (!s && GetLastError() == ERROR_SERVICE_EXISTS) {
    s = OpenServiceW(scm, wname, SERVICE_ALL_ACCESS);
    if (s && !ChangeServiceConfigW(s, SERVICE_WIN32_OWN_PROCESS, SERVICE_AUTO_START,
                                   SERVICE_ERROR_NORMAL, cl, NULL, NULL, NULL, wacc, NULL,
                                   L"cordon agent")) {
      r = fail_w32(diag, "ChangeServiceConfig", GetLastError());
      goto out;
    }
  }
  if (!s) {
    r = fail_w32(diag, "CreateService", GetLastError());
    goto out;
  }
  SERVICE_DESCRIPTIONW desc = {L"Runs signed cordon executor packages in a sandbox."};
  SC_ACTION acts[3] = {
      {SC_ACTION_RESTART, 5000}, {SC_ACTION_RESTART, 5000}, {SC_ACTION_RESTART, 5000}};
  SERVICE_FAILURE_ACTIONSW fa = {86400, NULL, NULL, 3, acts};
  SERVICE_FAILURE_ACTIONS_FLAG ff = {TRUE};
  SERVICE_SID_INFO sid = {SERVICE_SID_TYPE_UNRESTRICTED};
  static wchar_t privs[] = L"SeChangeNotifyPrivilege\0SeIncreaseQuotaPrivilege\0";
  SERVICE_REQUIRED_PRIVILEGES_INFOW rp = {privs};
  r = config2(s, SERVICE_CONFIG_DESCRIPTION, &desc, "description", diag);
  if (r == 0)
    r = config2(s, SERVICE_CONFIG_FAILURE_ACTIONS, &fa, "restart on failure", diag);
  if (r == 0)
    r = config2(s, SERVICE_CONFIG_FAILURE_ACTIONS_FLAG, &ff, "restart on failure", diag);
  if (r == 0)
    r = config2(s, SERVICE_CONFIG_SERVICE_SID_INFO, &sid, "service SID", diag);
  if (r == 0)
    r = config2(s, SERVICE_CONFIG_REQUIRED_PRIVILEGES_INFO, &rp, "required privileges", diag);
  if (r == 0)
    r = protect_config_dir(o, account, diag);
out:
  if (s)
    CloseServiceHandle(s);
  if (scm)
    CloseServiceHandle(scm);
  free(cl);
  free(wname);
  free(wacc);
  free(account);
  return r;
}

static SC_HANDLE open_service(const struct service_options *o, DWORD access, SC_HANDLE *out_scm,
                              DWORD *out_err) {
  *out_err = 0;
  wchar_t *wname = win_wide(svc_name(o));
  if (!wname) {
    *out_err = ERROR_NOT_ENOUGH_MEMORY;
    return NULL;
  }
  SC_HANDLE scm = OpenSCManagerW(NULL, NULL, SC_MANAGER_CONNECT);
  SC_HANDLE s = scm ? OpenServiceW(scm, wname, access) : NULL;
  if (!s) {
    *out_err = GetLastError();
    if (scm)
      CloseServiceHandle(scm);
    scm = NULL;
  }
  free(wname);
  *out_scm = scm;
  return s;
}

static DWORD wait_state(SC_HANDLE s, DWORD want, DWORD timeout_ms) {
  SERVICE_STATUS_PROCESS st;
  DWORD got = 0;
  ULONGLONG end = GetTickCount64() + timeout_ms;
  for (;;) {
    if (!QueryServiceStatusEx(s, SC_STATUS_PROCESS_INFO, (BYTE *)&st, sizeof(st), &got))
      return 0;
    if (st.dwCurrentState == want || GetTickCount64() >= end)
      return st.dwCurrentState;
    /* a start that failed ends in STOPPED */
    if (want == SERVICE_RUNNING && st.dwCurrentState == SERVICE_STOPPED)
      return st.dwCurrentState;
    Sleep(100);
  }
}

int service_start(const struct service_options *o, struct cordon_diag *diag) {
  SC_HANDLE scm, s;
  DWORD e;
  s = open_service(o, SERVICE_START | SERVICE_QUERY_STATUS, &scm, &e);
  if (!s)
    return fail_w32(diag, "cannot open the service (is it installed?)", e);
  int r = 0;
  if (!StartServiceW(s, 0, NULL) && GetLastError() != ERROR_SERVICE_ALREADY_RUNNING)
    r = fail_w32(diag, "StartService", GetLastError());
  else if (wait_state(s, SERVICE_RUNNING, 30000) != SERVICE_RUNNING)
    r = cordon_diag_set(diag, CORDON_E_SPAWN_FAILED, "the service did not reach RUNNING");
  CloseServiceHandle(s);
  CloseServiceHandle(scm);
  return r;
}

int service_stop(const struct service_options *o, struct cordon_diag *diag) {
  SC_HANDLE scm, s;
  DWORD e;
  s = open_service(o, SERVICE_STOP | SERVICE_QUERY_STATUS, &scm, &e);
  if (!s)
    return fail_w32(diag, "cannot open the service (is it installed?)", e);
  int r = 0;
  SERVICE_STATUS st;
  if (!ControlService(s, SERVICE_CONTROL_STOP, &st) && GetLastError() != ERROR_SERVICE_NOT_ACTIVE)
    r = fail_w32(diag, "ControlService(STOP)", GetLastError());
  else if (wait_state(s, SERVICE_STOPPED, 30000) != SERVICE_STOPPED)
    r = cordon_diag_set(diag, CORDON_E_INTERNAL, "the service did not stop within 30 s");
  CloseServiceHandle(s);
  CloseServiceHandle(scm);
  return r;
}

int service_uninstall(const struct service_options *o, struct cordon_diag *diag) {
  SC_HANDLE scm, s;
  DWORD e;
  s = open_service(o, SERVICE_STOP | SERVICE_QUERY_STATUS | DELETE, &scm, &e);
  if (!s)
    return e == ERROR_SERVICE_DOES_NOT_EXIST ? 0 : fail_w32(diag, "cannot open the service", e);
  SERVICE_STATUS st;
  if (ControlService(s, SERVICE_CONTROL_STOP, &st))
    wait_state(s, SERVICE_STOPPED, 30000);
  int r = 0;
  if (!DeleteService(s) && GetLastError() != ERROR_SERVICE_MARKED_FOR_DELETE)
    r = fail_w32(diag, "DeleteService", GetLastError());
  CloseServiceHandle(s);
  CloseServiceHandle(scm);
  return r;
}

static const char *state_name(DWORD st) {
  switch (st) {
  case SERVICE_STOPPED:
    return "stopped";
  case SERVICE_START_PENDING:
    return "start_pending";
  case SERVICE_STOP_PENDING:
    return "stop_pending";
  case SERVICE_RUNNING:
    return "running";
  case SERVICE_CONTINUE_PENDING:
    return "continue_pending";
  case SERVICE_PAUSE_PENDING:
    return "pause_pending";
  case SERVICE_PAUSED:
    return "paused";
  default:
    return "unknown";
  }
}

int service_status(const struct service_options *o, json_t **out_status) {
  json_t *j = json_object();
  if (!j)
    return -ENOMEM;
  json_object_set_new(j, "manager", json_string("scm"));
  json_object_set_new(j, "name", json_string(svc_name(o)));
  SC_HANDLE scm, s;
  DWORD e;
  s = open_service(o, SERVICE_QUERY_STATUS | SERVICE_QUERY_CONFIG, &scm, &e);
  json_object_set_new(j, "installed", json_boolean(s != NULL));
  if (!s) {
    json_object_set_new(j, "state", json_null());
    json_object_set_new(j, "start", json_null());
    json_object_set_new(j, "account", json_null());
    json_object_set_new(j, "command_line", json_null());
    char d[96];
    snprintf(d, sizeof(d), "%s (Windows error %lu)",
             e == ERROR_SERVICE_DOES_NOT_EXIST ? "not installed" : "cannot open the service", e);
    json_object_set_new(j, "detail", json_string(d));
    *out_status = j;
    return 0;
  }
  SERVICE_STATUS_PROCESS st;
  DWORD got = 0;
  if (QueryServiceStatusEx(s, SC_STATUS_PROCESS_INFO, (BYTE *)&st, sizeof(st), &got))
    json_object_set_new(j, "state", json_string(state_name(st.dwCurrentState)));
  else
    json_object_set_new(j, "state", json_null());
  union {
    QUERY_SERVICE_CONFIGW c;
    BYTE buf[8192];
  } u;
  if (QueryServiceConfigW(s, &u.c, sizeof(u), &got)) {
    const char *start = u.c.dwStartType == SERVICE_AUTO_START     ? "auto"
                        : u.c.dwStartType == SERVICE_DEMAND_START ? "demand"
                        : u.c.dwStartType == SERVICE_DISABLED     ? "disabled"
                                                                  : "other";
    json_object_set_new(j, "start", json_string(start));
    char *acc = u.c.lpServiceStartName ? win_utf8(u.c.lpServiceStartName) : NULL;
    char *bin = u.c.lpBinaryPathName ? win_utf8(u.c.lpBinaryPathName) : NULL;
    json_object_set_new(j, "account", acc ? json_string(acc) : json_null());
    json_object_set_new(j, "command_line", bin ? json_string(bin) : json_null());
    free(acc);
    free(bin);
  }
  json_object_set_new(j, "detail", json_null());
  CloseServiceHandle(s);
  CloseServiceHandle(scm);
  *out_status = j;
  return 0;
}

/* ---- running as the service ---- */

static struct {
  wchar_t name[256];
  int (*run)(void *);
  void (*stop)(void *);
  void *ctx;
  int result;
  SERVICE_STATUS_HANDLE handle;
  SERVICE_STATUS status;
} svc;

static void report(DWORD state, DWORD exit_code, DWORD wait_hint) {
  static DWORD checkpoint = 1;
  svc.status.dwServiceType = SERVICE_WIN32_OWN_PROCESS;
  svc.status.dwCurrentState = state;
  svc.status.dwControlsAccepted =
      state == SERVICE_RUNNING ? SERVICE_ACCEPT_STOP | SERVICE_ACCEPT_SHUTDOWN : 0;
  svc.status.dwWin32ExitCode = exit_code ? ERROR_SERVICE_SPECIFIC_ERROR : NO_ERROR;
  svc.status.dwServiceSpecificExitCode = exit_code;
  svc.status.dwWaitHint = wait_hint;
  svc.status.dwCheckPoint = state == SERVICE_RUNNING || state == SERVICE_STOPPED ? 0 : checkpoint++;
  SetServiceStatus(svc.handle, &svc.status);
}

static DWORD WINAPI on_control(DWORD ctl, DWORD type, void *data, void *ctx) {
  (void)type, (void)data, (void)ctx;
  switch (ctl) {
  case SERVICE_CONTROL_STOP:
  case SERVICE_CONTROL_SHUTDOWN:
    report(SERVICE_STOP_PENDING, 0, 30000);
    svc.stop(svc.ctx);
    return NO_ERROR;
  case SERVICE_CONTROL_INTERROGATE:
    return NO_ERROR;
  default:
    return ERROR_CALL_NOT_IMPLEMENTED;
  }
}

static void WINAPI service_main(DWORD argc, LPWSTR *argv) {
  (void)argc, (void)argv;
  svc.handle = RegisterServiceCtrlHandlerExW(svc.name, on_control, NULL);
  if (!svc.handle) {
    svc.result = CORDON_E_INTERNAL;
    return;
  }
  report(SERVICE_START_PENDING, 0, 10000);
  report(SERVICE_RUNNING, 0, 0);
  svc.result = svc.run(svc.ctx);
  report(SERVICE_STOPPED, svc.result == 0 ? 0 : 1, 0);
}

int service_windows_dispatch(const char *name, int (*run)(void *ctx), void (*stop)(void *ctx),
                             void *ctx) {
  wchar_t *w = win_wide(name ? name : SERVICE_DEFAULT_NAME);
  if (!w || wcslen(w) >= sizeof(svc.name) / sizeof(svc.name[0])) {
    free(w);
    return -EINVAL;
  }
  wcscpy(svc.name, w);
  free(w);
  svc.run = run;
  svc.stop = stop;
  svc.ctx = ctx;
  svc.result = 0;
  SERVICE_TABLE_ENTRYW table[] = {{svc.name, service_main}, {NULL, NULL}};
  if (!StartServiceCtrlDispatcherW(table)) {
    DWORD e = GetLastError();
    return e == ERROR_FAILED_SERVICE_CONTROLLER_CONNECT ? CORDON_E_USAGE : win_errno(e);
  }
  return svc.result;
}

/* A service has no console: its log lines go to <config>\service.log. */
static void log_to_file(const char *dir) {
  char path[MAX_PATH * 3], old[MAX_PATH * 3 + 2];
  snprintf(path, sizeof(path), "%s/service.log", dir);
  snprintf(old, sizeof(old), "%s.1", path);
  struct stat st;
  if (stat(path, &st) == 0 && st.st_size > SERVICE_LOG_MAX_BYTES)
    rename(path, old);
  /* A service starts without standard handles: the CRT's stderr has no
   * descriptor (-2). freopen gives it the file; Wine's msvcrt refuses to
   * reopen a stream without a descriptor, so there fd 2 is made the file
   * and the (msvcrt, not opaque) stream pointed at it. */
  wchar_t *w = win_wide(path);
  if (!w)
    return;
  bool ok = _wfreopen(w, L"ab", stderr) != NULL;
#ifndef _UCRT
  if (!ok && _fileno(stderr) < 0) {
    int fd = _wopen(w, _O_WRONLY | _O_CREAT | _O_APPEND | _O_BINARY | _O_NOINHERIT,
                    _S_IREAD | _S_IWRITE);
    if (fd >= 0 && (fd == 2 || _dup2(fd, 2) == 0)) {
      stderr->_file = 2;
      clearerr(stderr);
      ok = true;
    }
    if (fd >= 0 && fd != 2)
      _close(fd);
  }
#endif
  free(w);
  if (!ok)
    return;
  setvbuf(stderr, NULL, _IONBF, 0);
  SetStdHandle(STD_ERROR_HANDLE, (HANDLE)_get_osfhandle(_fileno(stderr)));
}

/* service_run's own run: the log first, once the SCM has the process */
static struct {
  const char *config_dir;
  int (*run)(void *);
  void *ctx;
} logged;

static int run_logged(void *ctx) {
  (void)ctx;
  if (logged.config_dir)
    log_to_file(logged.config_dir);
  return logged.run(logged.ctx);
}

int service_run(const struct service_options *o, int (*run)(void *ctx), void (*stop)(void *ctx),
                void *ctx) {
  logged.config_dir = o->config_dir;
  logged.run = run;
  logged.ctx = ctx;
  return service_windows_dispatch(svc_name(o), run_logged, stop, ctx);
}
