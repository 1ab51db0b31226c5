/* The Windows sandbox (DESIGN.md sections 4 and 8).
 *
 * contained: a restricted token derived from the agent's own (every
 *   privilege but SeChangeNotify removed, the administrator groups made
 *   deny-only) inside a Job Object: per-process and per-job memory, active
 *   processes, CPU time, UI limits, kill on close, no breakaway. The
 *   process is created suspended, assigned to the job, then resumed; the
 *   timeout terminates the whole job.
 * isolated: the same, plus an AppContainer with a profile (and so a SID)
 *   per job, ACL grants for $PACKAGE, $WORKSPACE and each fs grant made on
 *   handles opened without following reparse points and journaled first,
 *   network capabilities only with net.
 *
 * Jobs never run as SYSTEM: an agent running as LocalSystem refuses jobs
 * (job_user_missing); the service runs as the virtual account
 * NT SERVICE\cordon-agent (docs/WINDOWS.md). The policy is platform/sandbox.c's. */
#include <windows.h>

#include <aclapi.h>
#include <sddl.h>
#include <userenv.h>

#include <errno.h>
#include <io.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat/win32.h"
#include "core/clock.h"
#include "platform/fs.h"
#include "platform/strv.h"
#include "platform/windows/appcontainer.h"
#include "platform/windows/cmdline.h"
#include "platform/windows/sandbox_windows.h"

struct win_grant {
  char *path; /* absolute host path (UTF-8, '\' separators) */
  bool rw;
  bool deny; /* a forbidden path inside a read-only grant */
};

struct sandbox_os_plan {
  char *app;       /* the program CreateProcess runs */
  char *workspace; /* <job dir>\workspace */
  wchar_t profile[APPCONTAINER_NAME_MAX];
  struct win_grant *grants;
  size_t n_grants;
};

/* ---- the token ---- */

/* The agent's token, restricted for a job: no privileges but
 * SeChangeNotify, the administrator groups deny-only. */
static int job_token(HANDLE *out_token, bool low, char *err, size_t errlen);

/* Give the token the Low integrity level. */
static int set_low_integrity(HANDLE token) {
  BYTE sid[SECURITY_MAX_SID_SIZE];
  DWORD size = sizeof(sid);
  if (!CreateWellKnownSid(WinLowLabelSid, NULL, sid, &size))
    return win_last_err();
  TOKEN_MANDATORY_LABEL tml;
  tml.Label.Sid = sid;
  tml.Label.Attributes = SE_GROUP_INTEGRITY;
  if (!SetTokenInformation(token, TokenIntegrityLevel, &tml, sizeof(tml) + GetLengthSid(sid)))
    return win_last_err();
  return 0;
}

/* Set path's mandatory label from an SDDL SACL ("S:..."); protect stops
 * the parent's label from being inherited. */
static int set_label(const char *path, const wchar_t *sacl_sddl, bool protect) {
  wchar_t *w = win_wide(path);
  if (!w)
    return -EINVAL;
  PSECURITY_DESCRIPTOR sd = NULL;
  PACL sacl = NULL;
  BOOL present = FALSE, defaulted = FALSE;
  int r = 0;
  if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sacl_sddl, SDDL_REVISION_1, &sd,
                                                            NULL) ||
      !GetSecurityDescriptorSacl(sd, &present, &sacl, &defaulted)) {
    r = win_last_err();
  } else {
    DWORD e = SetNamedSecurityInfoW(w, SE_FILE_OBJECT,
                                    LABEL_SECURITY_INFORMATION |
                                        (protect ? PROTECTED_SACL_SECURITY_INFORMATION : 0),
                                    NULL, NULL, NULL, sacl);
    r = e == ERROR_SUCCESS ? 0 : win_errno(e);
  }
  LocalFree(sd);
  free(w);
  return r;
}

/* The integrity level in path's label (its RID: 0x1000 Low, 0x2000
 * Medium, ...), or -1 when it has none or it cannot be read. */
static long label_rid(const char *path) {
  wchar_t *w = win_wide(path);
  if (!w)
    return -1;
  PACL sacl = NULL;
  PSECURITY_DESCRIPTOR sd = NULL;
  long rid = -1;
  if (GetNamedSecurityInfoW(w, SE_FILE_OBJECT, LABEL_SECURITY_INFORMATION, NULL, NULL, NULL, &sacl,
                            &sd) == ERROR_SUCCESS &&
      sacl) {
    for (DWORD i = 0; i < sacl->AceCount; i++) {
      ACE_HEADER *hd;
      if (GetAce(sacl, i, (void **)&hd) && hd->AceType == SYSTEM_MANDATORY_LABEL_ACE_TYPE) {
        PSID sid = (PSID) & ((SYSTEM_MANDATORY_LABEL_ACE *)hd)->SidStart;
        rid = (long)*GetSidSubAuthority(sid, *GetSidSubAuthorityCount(sid) - 1);
        break;
      }
    }
  }
  LocalFree(sd);
  free(w);
  return rid;
}

/* The agent's state: no read, write or execute from below Medium. */
#define STATE_LABEL L"S:(ML;OICI;NRNWNX;;;ME)"
/* The job's package and workspace: a Low job may use them. */
#define JOB_LABEL L"S:(ML;OICI;NW;;;LW)"

/* Can jobs run at Low integrity here? The token takes the level and a
 * file keeps a Low label (Wine keeps no file labels: then jobs run at the
 * agent's level, and status says so). */
static void probe_low_integrity(struct sandbox_os_probe *p) {
  HANDLE tok = NULL;
  char err[160];
  int r = job_token(&tok, false, err, sizeof(err));
  if (r == 0)
    r = set_low_integrity(tok);
  if (tok)
    CloseHandle(tok);
  if (r < 0) {
    snprintf(p->low_error, sizeof(p->low_error), "the token does not take Low integrity: %s",
             strerror(-r));
    return;
  }
  /* a scratch directory in the temp dir: the state dir is not touched */
  wchar_t wtmp[MAX_PATH + 1];
  DWORD tl = GetTempPathW(MAX_PATH + 1, wtmp);
  char *tmp = tl ? win_utf8(wtmp) : NULL;
  if (!tmp) {
    snprintf(p->low_error, sizeof(p->low_error), "no temp directory to try a label in");
    return;
  }
  uint8_t raw[8];
  randombytes_buf(raw, sizeof(raw));
  char *dir = NULL;
  int n = asprintf(&dir, "%s\\cordon-label-probe-%02x%02x%02x%02x%02x%02x%02x%02x", tmp, raw[0],
                   raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7]);
  free(tmp);
  if (n < 0)
    return;
  win_backslashes(dir);
  r = fs_mkdir_p(dir, 0700);
  if (r == 0)
    r = set_label(dir, JOB_LABEL, true);
  long rid = r == 0 ? label_rid(dir) : -1;
  if (r == 0 && rid == SECURITY_MANDATORY_LOW_RID)
    p->low_ok = true;
  else
    snprintf(p->low_error, sizeof(p->low_error), "files do not keep integrity labels here (%s)",
             r < 0 ? strerror(-r) : "the label did not stick");
  wchar_t *w = win_wide(dir);
  if (w)
    RemoveDirectoryW(w);
  free(w);
  free(dir);
}

static int job_token(HANDLE *out_token, bool low, char *err, size_t errlen) {
  HANDLE self;
  if (!OpenProcessToken(GetCurrentProcess(),
                        TOKEN_DUPLICATE | TOKEN_QUERY | TOKEN_ASSIGN_PRIMARY |
                            TOKEN_ADJUST_DEFAULT | TOKEN_ADJUST_SESSIONID,
                        &self)) {
    snprintf(err, errlen, "OpenProcessToken: error %lu", GetLastError());
    return win_last_err();
  }
  BYTE sid_buf[3][SECURITY_MAX_SID_SIZE];
  SID_AND_ATTRIBUTES deny[3];
  WELL_KNOWN_SID_TYPE kinds[3] = {WinBuiltinAdministratorsSid, WinBuiltinPowerUsersSid,
                                  WinLocalAccountAndAdministratorSid};
  DWORD n = 0;
  for (int i = 0; i < 3; i++) {
    DWORD size = SECURITY_MAX_SID_SIZE;
    if (CreateWellKnownSid(kinds[i], NULL, sid_buf[n], &size)) {
      deny[n].Sid = sid_buf[n];
      deny[n].Attributes = 0;
      n++;
    }
  }
  HANDLE restricted = NULL;
  BOOL ok =
      CreateRestrictedToken(self, DISABLE_MAX_PRIVILEGE, n, deny, 0, NULL, 0, NULL, &restricted);
  int r = ok ? 0 : win_last_err();
  if (!ok)
    snprintf(err, errlen, "CreateRestrictedToken: error %lu", GetLastError());
  CloseHandle(self);
  if (r == 0 && low && (r = set_low_integrity(restricted)) < 0) {
    snprintf(err, errlen, "Low integrity: %s", strerror(-r));
    CloseHandle(restricted);
  }
  if (r == 0)
    *out_token = restricted;
  return r;
}

/* ---- the job object ---- */

int sandbox_windows_job_new(const struct job_limits_spec *spec, HANDLE *out_job) {
  HANDLE job = CreateJobObjectW(NULL, NULL);
  if (!job)
    return win_last_err();
  JOBOBJECT_EXTENDED_LIMIT_INFORMATION li;
  memset(&li, 0, sizeof(li));
  li.BasicLimitInformation.LimitFlags =
      JOB_OBJECT_LIMIT_PROCESS_MEMORY | JOB_OBJECT_LIMIT_JOB_MEMORY |
      JOB_OBJECT_LIMIT_ACTIVE_PROCESS | JOB_OBJECT_LIMIT_JOB_TIME |
      JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION;
  /* no JOB_OBJECT_LIMIT_BREAKAWAY_OK / SILENT_BREAKAWAY_OK: nothing leaves */
  li.ProcessMemoryLimit = (SIZE_T)spec->memory_bytes;
  li.JobMemoryLimit = (SIZE_T)spec->memory_bytes;
  li.BasicLimitInformation.ActiveProcessLimit = spec->processes;
  li.BasicLimitInformation.PerJobUserTimeLimit.QuadPart = (LONGLONG)spec->cpu_s * 10000000LL;
  int r = 0;
  if (!SetInformationJobObject(job, JobObjectExtendedLimitInformation, &li, sizeof(li)))
    r = win_last_err();
  JOBOBJECT_BASIC_UI_RESTRICTIONS ui = {
      JOB_OBJECT_UILIMIT_DESKTOP | JOB_OBJECT_UILIMIT_DISPLAYSETTINGS |
      JOB_OBJECT_UILIMIT_EXITWINDOWS | JOB_OBJECT_UILIMIT_GLOBALATOMS | JOB_OBJECT_UILIMIT_HANDLES |
      JOB_OBJECT_UILIMIT_READCLIPBOARD | JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS |
      JOB_OBJECT_UILIMIT_WRITECLIPBOARD};
  if (r == 0 && !SetInformationJobObject(job, JobObjectBasicUIRestrictions, &ui, sizeof(ui)))
    r = win_last_err();
  if (r < 0) {
    CloseHandle(job);
    return r;
  }
  *out_job = job;
  return 0;
}

/* ---- probing ---- */

static void probe_account(struct sandbox_os_probe *p) {
  HANDLE tok;
  if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &tok))
    return;
  p->elevated = win_token_is_elevated(tok);
  p->is_system = win_token_is_system(tok);
  union {
    TOKEN_USER tu;
    BYTE buf[256];
  } u;
  DWORD len;
  if (GetTokenInformation(tok, TokenUser, &u, sizeof(u), &len)) {
    wchar_t name[128], dom[128];
    DWORD nl = 128, dl = 128;
    SID_NAME_USE use;
    if (LookupAccountSidW(NULL, u.tu.User.Sid, name, &nl, dom, &dl, &use)) {
      char *n8 = win_utf8(name), *d8 = win_utf8(dom);
      if (n8 && d8)
        snprintf(p->account, sizeof(p->account), "%s\\%s", d8, n8);
      free(n8);
      free(d8);
    }
  }
  wchar_t prof[MAX_PATH * 2];
  DWORD pl = sizeof(prof) / sizeof(prof[0]);
  if (GetUserProfileDirectoryW(tok, prof, &pl))
    p->home = win_utf8(prof);
  CloseHandle(tok);
}

/* Try a profile: under Wine (and before Windows 8) this fails. */
static void probe_appcontainer(struct sandbox_os_probe *p) {
  p->ac_tried = true;
  uint8_t raw[16];
  char id[33];
  randombytes_buf(raw, sizeof(raw));
  for (int i = 0; i < 16; i++)
    snprintf(id + 2 * i, 3, "%02x", raw[i]);
  wchar_t name[APPCONTAINER_NAME_MAX];
  if (appcontainer_profile_name(id, name, APPCONTAINER_NAME_MAX) < 0)
    return;
  PSID sid = NULL;
  HRESULT hr = p->ac.create(name, L"cordon probe", L"cordon probe", NULL, 0, &sid);
  if (SUCCEEDED(hr)) {
    p->ac_works = true;
    FreeSid(sid);
    p->ac.remove(name);
  } else {
    snprintf(p->ac_error, sizeof(p->ac_error), "CreateAppContainerProfile failed: 0x%08lx%s",
             (unsigned long)hr, hr == E_NOTIMPL ? " (not implemented)" : "");
  }
}

int sandbox_os_probe_new(const struct sandbox_policy *policy, bool thorough,
                         struct sandbox_os_probe **out_probe, struct sandbox_facts *out_facts) {
  struct sandbox_os_probe *p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  probe_account(p);

  HANDLE tok = NULL;
  p->token_ok = job_token(&tok, false, p->token_error, sizeof(p->token_error)) == 0;
  if (tok)
    CloseHandle(tok);
  if (p->token_ok)
    probe_low_integrity(p);

  struct job_limits_spec spec = {64u << 20, 4, 10};
  HANDLE job = NULL;
  int r = sandbox_windows_job_new(&spec, &job);
  p->job_ok = r == 0;
  if (r < 0)
    snprintf(p->job_error, sizeof(p->job_error), "CreateJobObject/SetInformationJobObject: %s",
             strerror(-r));
  if (job)
    CloseHandle(job);

  if (appcontainer_api_load(&p->ac) == 0) {
    p->ac_api = true;
    probe_appcontainer(p);
  } else {
    snprintf(p->ac_error, sizeof(p->ac_error),
             "userenv.dll exports no CreateAppContainerProfile (Windows before 8, or Wine)");
  }
  /* undo the ACL grants of jobs whose agent died (journals not held open) */
  if (policy && policy->state_dir && p->ac_api)
    p->recovered = acl_journal_recover(policy->state_dir, &p->ac);

  struct sandbox_facts f = {
      .best = SANDBOX_LEVEL_ISOLATED,
      .user_error = p->is_system ? "the agent runs as LocalSystem and jobs never do: run the "
                                   "agent as its service account (NT SERVICE\\cordon-agent) "
                                   "or as a user"
                                 : NULL,
      .user_name = p->account,
      .has_home = p->home != NULL,
      .lowest_runnable = SANDBOX_LEVEL_CONTAINED, /* no `none` level on Windows */
  };
  if (!p->job_ok || !p->token_ok) {
    f.best = SANDBOX_LEVEL_NONE;
    f.reason = !p->job_ok ? "job_object_unavailable" : "restricted_token_unavailable";
  } else if (!p->ac_works) {
    f.best = SANDBOX_LEVEL_CONTAINED;
    f.reason = "appcontainer_unavailable";
  }
  *out_facts = f;
  *out_probe = p;
  return 0;
}

void sandbox_os_probe_free(struct sandbox_os_probe *p) {
  if (!p)
    return;
  appcontainer_api_release(&p->ac);
  free(p->home);
  free(p);
}

static json_t *str_or_null(const char *s) {
  return s && s[0] ? json_string(s) : json_null();
}

json_t *sandbox_os_probe_json(const struct sandbox_os_probe *p) {
  json_t *o = json_object();
  json_t *a = json_object();
  json_object_set_new(a, "api_present", json_boolean(p->ac_api));
  json_object_set_new(a, "trial", p->ac_tried ? json_boolean(p->ac_works) : json_null());
  json_object_set_new(a, "error", str_or_null(p->ac_error));
  json_object_set_new(a, "journals_recovered", json_integer(p->recovered));
  json_object_set_new(o, "appcontainer", a);
  json_t *j = json_object();
  json_object_set_new(j, "available", json_boolean(p->job_ok));
  json_object_set_new(j, "error", str_or_null(p->job_error));
  json_object_set_new(o, "job_object", j);
  json_t *t = json_object();
  json_object_set_new(t, "restricted_token", json_boolean(p->token_ok));
  json_object_set_new(t, "error", str_or_null(p->token_error));
  json_object_set_new(t, "low_integrity", json_boolean(p->low_ok));
  json_object_set_new(t, "low_integrity_error", str_or_null(p->low_error));
  json_object_set_new(o, "token", t);
  json_t *u = json_object();
  json_object_set_new(u, "account", str_or_null(p->account));
  json_object_set_new(u, "elevated", json_boolean(p->elevated));
  json_object_set_new(u, "local_system", json_boolean(p->is_system));
  json_object_set_new(u, "home", str_or_null(p->home));
  json_object_set_new(u, "error",
                      p->is_system ? json_string("the agent runs as LocalSystem: jobs are refused")
                                   : json_null());
  json_object_set_new(o, "job_user", u);
  return o;
}

/* ---- planning ---- */

static int add_grant(struct sandbox_os_plan *os, char *path, bool rw, bool deny) {
  if (!path)
    return -ENOMEM;
  struct win_grant *grown = realloc(os->grants, (os->n_grants + 1) * sizeof(*grown));
  if (!grown) {
    free(path);
    return -ENOMEM;
  }
  os->grants = grown;
  os->grants[os->n_grants++] = (struct win_grant){path, rw, deny};
  return 0;
}

/* The ACL grants of the judged grants: each grant's path, the secrets
 * inside a read-only one as deny entries before it, a $WORKSPACE grant
 * below the workspace. */
static int plan_grants(const struct sandbox_plan *plan, struct sandbox_os_plan *os,
                       const struct sandbox_grants *grants, struct job_result *result) {
  char *state = plan->policy->state_dir ? strdup(plan->policy->state_dir) : NULL;
  if (plan->policy->state_dir && !state)
    return -ENOMEM;
  if (state)
    win_backslashes(state);
  int r = 0;
  for (size_t i = 0; i < grants->n && r == 0; i++) {
    const struct sandbox_grant *sg = &grants->v[i];
    const struct manifest_grant *g = sg->g;
    if (!sg->place) {
      char *path = NULL;
      if (asprintf(&path, "%s%s%s", os->workspace, g->rel[0] ? "\\" : "", g->rel) < 0)
        path = NULL;
      else
        win_backslashes(path);
      r = add_grant(os, path, true, false);
      continue;
    }
    for (size_t k = 0; k < sg->n_hidden && r == 0; k++) {
      const char *h = sg->hidden[k]->path;
      /* the agent's state inside a grant is refused, not denied */
      if (state && _stricmp(h, state) == 0)
        r = job_result_fail(result, CORDON_E_SCOPE_TOO_BROAD,
                            "%s: contains the agent's state directory", g->path);
      else
        r = add_grant(os, strdup(h), false, true);
    }
    if (r == 0)
      r = add_grant(os, strdup(sg->place->path), g->rw, false);
  }
  free(state);
  return r;
}

/* Every granted path must take an ACL on a handle that followed no
 * reparse point; if one cannot, the job is downgraded (the policy layer
 * then refuses it if that is too little). */
static int anchor_grants(struct sandbox_plan *plan, struct sandbox_os_plan *os,
                         struct job_result *result) {
  int r = appcontainer_profile_name(plan->job->job_id, os->profile, APPCONTAINER_NAME_MAX);
  if (r < 0)
    return job_result_fail(result, CORDON_E_INTERNAL, "bad job id");
  for (size_t i = 0; i < os->n_grants; i++) {
    const struct win_grant *g = &os->grants[i];
    if (g->deny || sandbox_path_within(g->path, os->workspace, '\\', true))
      continue;
    wchar_t *w = win_wide(g->path);
    HANDLE h;
    int a = w ? acl_open_anchored(w, &h) : -ENOMEM;
    free(w);
    if (a == 0) {
      CloseHandle(h);
    } else if (a == -ELOOP) {
      return job_result_fail(result, CORDON_E_CAPABILITY_DENIED,
                             "%s: a junction or symbolic link is not granted", g->path);
    } else if (a == -ENOENT) {
      return job_result_fail(result, CORDON_E_CAPABILITY_DENIED, "%s: does not exist", g->path);
    } else {
      plan->level = SANDBOX_LEVEL_CONTAINED;
      plan->reason = "path_not_anchorable";
      break;
    }
  }
  return 0;
}

/* argv: entry[0] is "/..." on the system drive or a file of the package;
 * an explicit environment: nothing of the agent's leaks in. */
static int plan_command(struct sandbox_plan *plan, struct sandbox_os_plan *os) {
  const struct sandbox_job *job = plan->job;
  const struct manifest *m = job->manifest;
  const struct manifest_argv *entry = plan->entry;
  const char *home = plan->probe->os->home;
  const char *argv0 = entry->argv[0];
  if (argv0[0] == '/' || manifest_path_is_windows_absolute(argv0)) {
    os->app = win_system_path(argv0);
  } else if (asprintf(&os->app, "%s\\%s", job->package_path, argv0) < 0) {
    os->app = NULL;
  }
  if (!os->app)
    return -ENOMEM;
  win_backslashes(os->app);
  strv_add(&plan->argv, os->app);
  for (size_t i = 1; i < entry->argc; i++)
    strv_add(&plan->argv, entry->argv[i]);
  for (size_t i = 0; i < job->n_args; i++)
    strv_add(&plan->argv, job->args[i]);

  wchar_t wsys[MAX_PATH];
  UINT sl = GetSystemWindowsDirectoryW(wsys, MAX_PATH);
  char *sysroot = sl ? win_utf8(wsys) : strdup("C:\\Windows");
  char *pkg = strdup(job->package_path);
  if (!sysroot || !pkg) {
    free(sysroot);
    free(pkg);
    return -ENOMEM;
  }
  win_backslashes(pkg);
  struct strv *e = &plan->envp;
  strv_addf(e, "SystemRoot=%s", sysroot);
  strv_addf(e, "windir=%s", sysroot);
  strv_addf(e, "SystemDrive=%.2s", sysroot);
  strv_addf(e, "ComSpec=%s\\System32\\cmd.exe", sysroot);
  strv_addf(e, "PATH=%s\\System32;%s;%s\\System32\\Wbem", sysroot, sysroot, sysroot);
  strv_add(e, "PATHEXT=.COM;.EXE;.BAT;.CMD");
  if (home) {
    strv_addf(e, "USERPROFILE=%s", home);
    strv_addf(e, "HOME=%s", home);
  }
  strv_addf(e, "PACKAGE=%s", pkg);
  strv_addf(e, "WORKSPACE=%s", os->workspace);
  strv_addf(e, "TEMP=%s", os->workspace);
  strv_addf(e, "TMP=%s", os->workspace);
  for (size_t i = 0; i < m->n_env; i++)
    strv_addf(e, "%s=%s", m->env[i].name, m->env[i].value);
  free(sysroot);
  free(pkg);
  return 0;
}

int sandbox_os_plan_new(struct sandbox_plan *plan, const struct sandbox_grants *grants,
                        struct job_result *result, struct sandbox_os_plan **out_os) {
  struct sandbox_os_plan *os = calloc(1, sizeof(*os));
  if (!os)
    return -ENOMEM;
  int r = asprintf(&os->workspace, "%s\\workspace", plan->job->job_dir) < 0 ? -ENOMEM : 0;
  if (r < 0)
    os->workspace = NULL;
  else
    win_backslashes(os->workspace);
  if (r == 0)
    r = plan_grants(plan, os, grants, result);
  if (r == 0 && plan->level == SANDBOX_LEVEL_ISOLATED)
    r = anchor_grants(plan, os, result);
  if (r == 0)
    r = plan_command(plan, os);
  if (r < 0) {
    sandbox_os_plan_free(os);
    return r;
  }
  *out_os = os;
  return 0;
}

void sandbox_os_plan_free(struct sandbox_os_plan *os) {
  if (!os)
    return;
  for (size_t i = 0; i < os->n_grants; i++)
    free(os->grants[i].path);
  free(os->grants);
  free(os->app);
  free(os->workspace);
  free(os);
}

static void set_limits(const struct sandbox_plan *plan, struct job_result *res) {
  bool iso = plan->level == SANDBOX_LEVEL_ISOLATED;
  res->lim_memory = LIMIT_MECH_JOB;
  res->lim_processes = LIMIT_MECH_JOB;
  res->lim_cpu = LIMIT_MECH_JOB;
  res->lim_time = LIMIT_MECH_JOB;
  res->lim_disk = LIMIT_MECH_NONE;
  snprintf(res->mechanism, sizeof(res->mechanism), "%sjob", iso ? "appcontainer+" : "");
}

json_t *sandbox_os_plan_explain(const struct sandbox_plan *plan, struct job_result *limits) {
  const struct manifest *m = plan->job->manifest;
  const struct sandbox_os_plan *os = plan->os;
  const struct sandbox_os_probe *probe = plan->probe->os;
  set_limits(plan, limits);
  bool iso = plan->level == SANDBOX_LEVEL_ISOLATED;
  json_t *o = json_object();
  wchar_t *cl = NULL;
  if (cmdline_build(plan->argv.v, &cl) == 0) {
    char *c8 = win_utf8(cl);
    json_object_set_new(o, "command_line", str_or_null(c8));
    free(c8);
    free(cl);
  }
  json_t *tok = json_object();
  json_object_set_new(tok, "derived_from", str_or_null(probe->account));
  json_object_set_new(tok, "privileges", json_string("all removed but SeChangeNotifyPrivilege"));
  json_t *deny = json_array();
  json_array_append_new(deny, json_string("BUILTIN\\Administrators"));
  json_array_append_new(deny, json_string("BUILTIN\\Power Users"));
  json_array_append_new(
      deny, json_string("NT AUTHORITY\\Local account and member of Administrators group"));
  json_object_set_new(tok, "deny_only_groups", deny);
  json_object_set_new(
      tok, "integrity",
      json_string(probe->low_ok
                      ? "low: the state directory is labelled no-read/write/execute-up at "
                        "Medium, the package and workspace Low (the agent's own level if a "
                        "label cannot be set at run time)"
                      : "the agent's own: this host keeps no file integrity labels"));
  json_object_set_new(o, "token", tok);

  json_t *jo = json_object();
  json_object_set_new(jo, "process_memory_mb", json_integer(m->memory_mb));
  json_object_set_new(jo, "job_memory_mb", json_integer(m->memory_mb));
  json_object_set_new(jo, "active_processes", json_integer(m->processes));
  json_object_set_new(jo, "job_user_time_s", json_integer(m->cpu_s));
  json_object_set_new(jo, "ui_restrictions", json_string("all"));
  json_object_set_new(jo, "kill_on_job_close", json_true());
  json_object_set_new(jo, "breakaway", json_false());
  json_object_set_new(jo, "start", json_string("created suspended, assigned, then resumed"));
  json_object_set_new(o, "job_object", jo);

  if (iso) {
    json_t *ac = json_object();
    char *prof = win_utf8(os->profile);
    json_object_set_new(ac, "profile", str_or_null(prof));
    free(prof);
    const wchar_t *caps[2];
    size_t nc = appcontainer_capabilities(plan->net, caps);
    json_t *cj = json_array();
    for (size_t i = 0; i < nc; i++) {
      char *c = win_utf8(caps[i]);
      json_array_append_new(cj, str_or_null(c));
      free(c);
    }
    json_object_set_new(ac, "capabilities", cj);
    json_t *acl = json_array();
    char *pkg = strdup(plan->job->package_path);
    if (pkg)
      win_backslashes(pkg);
    json_t *row = json_object();
    json_object_set_new(row, "path", str_or_null(pkg));
    json_object_set_new(row, "access", json_string("rx"));
    json_array_append_new(acl, row);
    free(pkg);
    row = json_object();
    json_object_set_new(row, "path", json_string(os->workspace));
    json_object_set_new(row, "access", json_string("rw"));
    json_array_append_new(acl, row);
    for (size_t i = 0; i < os->n_grants; i++) {
      row = json_object();
      json_object_set_new(row, "path", json_string(os->grants[i].path));
      json_object_set_new(row, "access",
                          json_string(os->grants[i].deny ? "deny"
                                      : os->grants[i].rw ? "rw"
                                                         : "rx"));
      json_array_append_new(acl, row);
    }
    json_object_set_new(ac, "acl_grants", acl);
    json_object_set_new(ac, "journal", json_string("<config>\\acl-journal\\<job id>.journal"));
    json_object_set_new(o, "appcontainer", ac);
  } else {
    json_object_set_new(o, "appcontainer", json_null());
    json_t *g = json_array();
    for (size_t i = 0; i < os->n_grants; i++)
      if (!os->grants[i].deny)
        json_array_append_new(g, json_string(os->grants[i].path));
    json_object_set_new(o, "grants_note",
                        json_string("contained: files are not isolated; grants are checked "
                                    "but the job has the restricted token's file authority"));
    json_object_set_new(o, "grants", g);
  }

  return o;
}

/* ---- running ---- */
struct reader {
  HANDLE pipe;
  struct result_buf *buf;
  size_t cap;
  int stream;                  /* 0 stdout, 1 stderr: for on_output */
  sandbox_output_fn on_output; /* NULL or the job's */
  void *output_ctx;
};

static DWORD WINAPI read_pipe(void *arg) {
  struct reader *rd = arg;
  uint8_t chunk[16384];
  for (;;) {
    DWORD n = 0;
    if (!ReadFile(rd->pipe, chunk, sizeof(chunk), &n, NULL) || n == 0)
      break;
    size_t room = rd->cap > rd->buf->len ? rd->cap - rd->buf->len : 0;
    size_t take = n < room ? n : room;
    if (take) {
      memcpy(rd->buf->data + rd->buf->len, chunk, take);
      if (rd->on_output)
        rd->on_output(rd->output_ctx, rd->stream, rd->buf->len, rd->buf->data + rd->buf->len, take);
      rd->buf->len += take;
    }
    if (take < n) /* the rest is read and discarded */
      rd->buf->truncated = true;
  }
  return 0;
}

/* Is pid the console host Windows (and Wine) start for the job's hidden
 * console? It lives in the job but is not the package's. */
static bool is_conhost(HANDLE h) {
  wchar_t img[MAX_PATH * 2], sys[MAX_PATH];
  DWORD n = sizeof(img) / sizeof(img[0]);
  UINT sl = GetSystemDirectoryW(sys, MAX_PATH);
  if (!sl || sl >= MAX_PATH - 16 || !QueryFullProcessImageNameW(h, 0, img, &n))
    return false;
  wcscat(sys, L"\\conhost.exe");
  return CompareStringOrdinal(img, -1, sys, -1, TRUE) == CSTR_EQUAL;
}

/* Processes of the job still alive, other than `except` (the entry) and
 * the console host. The job's process list, each checked for life:
 * ActiveProcesses alone may still count a process that has just exited. */
static unsigned live_processes(HANDLE job, DWORD except) {
  union {
    JOBOBJECT_BASIC_PROCESS_ID_LIST list;
    BYTE buf[sizeof(JOBOBJECT_BASIC_PROCESS_ID_LIST) + 4096 * sizeof(ULONG_PTR)];
  } u;
  memset(&u, 0, sizeof(u));
  if (!QueryInformationJobObject(job, JobObjectBasicProcessIdList, &u, sizeof(u), NULL)) {
    JOBOBJECT_BASIC_ACCOUNTING_INFORMATION acc;
    if (!QueryInformationJobObject(job, JobObjectBasicAccountingInformation, &acc, sizeof(acc),
                                   NULL))
      return 0;
    return acc.ActiveProcesses > 0 ? (unsigned)acc.ActiveProcesses - 1 : 0;
  }
  unsigned n = 0;
  for (DWORD i = 0; i < u.list.NumberOfProcessIdsInList; i++) {
    DWORD pid = (DWORD)u.list.ProcessIdList[i];
    if (pid == except)
      continue;
    HANDLE h = OpenProcess(SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid);
    if (!h)
      continue;
    if (WaitForSingleObject(h, 0) == WAIT_TIMEOUT && !is_conhost(h))
      n++;
    CloseHandle(h);
  }
  return n;
}

/* Apply the AppContainer's ACL grants (journaled). */
static int grant_all(struct sandbox_plan *plan, PSID sid, struct acl_journal *j,
                     struct job_result *res) {
  const DWORD rx = appcontainer_access_mask(APPCONTAINER_RX);
  const DWORD rw = appcontainer_access_mask(APPCONTAINER_RW);
  int r = acl_journal_grant(j, plan->os->profile, sid, plan->job->package_path, rx, false);
  if (r == 0)
    r = acl_journal_grant(j, plan->os->profile, sid, plan->os->workspace, rw, false);
  for (size_t i = 0; r == 0 && i < plan->os->n_grants; i++) {
    const struct win_grant *g = &plan->os->grants[i];
    if (g->deny) {
      wchar_t *w = win_wide(g->path);
      DWORD attr = w ? GetFileAttributesW(w) : INVALID_FILE_ATTRIBUTES;
      free(w);
      if (attr == INVALID_FILE_ATTRIBUTES)
        continue; /* a forbidden place that does not exist */
    }
    r = acl_journal_grant(j, plan->os->profile, sid, g->path,
                          g->deny ? (GENERIC_ALL | FILE_ALL_ACCESS)
                          : g->rw ? rw
                                  : rx,
                          g->deny);
    if (r < 0)
      job_result_fail(res, CORDON_E_SPAWN_FAILED, "ACL grant on %s: %s", g->path, strerror(-r));
  }
  if (r < 0 && !res->error)
    job_result_fail(res, CORDON_E_SPAWN_FAILED, "ACL grant: %s", strerror(-r));
  return r;
}

int sandbox_os_run(struct sandbox_plan *plan, struct job_result *res) {
  const struct manifest *m = plan->job->manifest;
  bool iso = plan->level == SANDBOX_LEVEL_ISOLATED;
  size_t cap = (size_t)m->output_kb * 1024;
  int r = 0;
  HANDLE out_r = NULL, out_w = NULL, err_r = NULL, err_w = NULL, nul = INVALID_HANDLE_VALUE;
  HANDLE job = NULL, token = NULL, threads[2] = {NULL, NULL};
  PROCESS_INFORMATION pi = {0};
  LPPROC_THREAD_ATTRIBUTE_LIST attrs = NULL;
  wchar_t *cmdline = NULL, *envblock = NULL, *wapp = NULL, *wcwd = NULL;
  PSID ac_sid = NULL;
  SID_AND_ATTRIBUTES caps[2];
  PSID cap_sids[2] = {NULL, NULL};
  size_t ncaps = 0;
  struct acl_journal *journal = NULL;
  bool profile_made = false;
  struct reader rd_out = {0}, rd_err = {0};

  set_limits(plan, res);

  r = fs_mkdir_p(plan->os->workspace, 0755);
  if (r < 0)
    return job_result_fail(res, CORDON_E_SPAWN_FAILED, "workspace: %s", strerror(-r));

  if (iso) {
    const wchar_t *cap_sddl[2];
    ncaps = appcontainer_capabilities(plan->net, cap_sddl);
    for (size_t i = 0; i < ncaps; i++) {
      if (!ConvertStringSidToSidW(cap_sddl[i], &cap_sids[i])) {
        r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "capability SID: error %lu",
                            GetLastError());
        goto out;
      }
      caps[i].Sid = cap_sids[i];
      caps[i].Attributes = SE_GROUP_ENABLED;
    }
    HRESULT hr = plan->probe->os->ac.create(plan->os->profile, plan->os->profile, L"cordon job",
                                            ncaps ? caps : NULL, (DWORD)ncaps, &ac_sid);
    if (FAILED(hr)) {
      r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "CreateAppContainerProfile: 0x%08lx",
                          (unsigned long)hr);
      goto out;
    }
    profile_made = true;
    r = acl_journal_open(plan->policy->state_dir, plan->job->job_id, &journal);
    if (r < 0) {
      job_result_fail(res, CORDON_E_SPAWN_FAILED, "ACL journal: %s", strerror(-r));
      goto out;
    }
    r = grant_all(plan, ac_sid, journal, res);
    if (r < 0)
      goto out;
  }

  SECURITY_ATTRIBUTES inherit = {sizeof(inherit), NULL, TRUE};
  if (!CreatePipe(&out_r, &out_w, &inherit, 0) || !CreatePipe(&err_r, &err_w, &inherit, 0)) {
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "CreatePipe: error %lu", GetLastError());
    goto out;
  }
  /* our ends are not inherited */
  SetHandleInformation(out_r, HANDLE_FLAG_INHERIT, 0);
  SetHandleInformation(err_r, HANDLE_FLAG_INHERIT, 0);
  nul = CreateFileW(L"NUL", GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE, &inherit,
                    OPEN_EXISTING, 0, NULL);
  if (nul == INVALID_HANDLE_VALUE) {
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "NUL: error %lu", GetLastError());
    goto out;
  }

  struct job_limits_spec spec = {(uint64_t)m->memory_mb << 20, m->processes, m->cpu_s};
  r = sandbox_windows_job_new(&spec, &job);
  if (r < 0) {
    job_result_fail(res, CORDON_E_SPAWN_FAILED, "Job Object: %s", strerror(-r));
    goto out;
  }
  /* Low integrity: the agent's state unreadable from below Medium, the
   * package and workspace usable at Low; if a label cannot be set, the
   * job runs at the agent's level (what contained promises anyway) */
  bool low = plan->probe->os->low_ok;
  if (low && plan->policy->state_dir) {
    char *state = strdup(plan->policy->state_dir), *pkg = strdup(plan->job->package_path);
    if (state && pkg) {
      win_backslashes(state);
      win_backslashes(pkg);
      low = set_label(state, STATE_LABEL, false) == 0 && set_label(pkg, JOB_LABEL, true) == 0 &&
            set_label(plan->os->workspace, JOB_LABEL, true) == 0;
    } else {
      low = false;
    }
    free(state);
    free(pkg);
  } else {
    low = false;
  }
  char terr[160];
  r = job_token(&token, low, terr, sizeof(terr));
  if (r < 0) {
    job_result_fail(res, CORDON_E_SPAWN_FAILED, "%s", terr);
    goto out;
  }

  /* only these three handles are inherited, whatever else is inheritable */
  HANDLE inherit_list[3] = {nul, out_w, err_w};
  SECURITY_CAPABILITIES sc = {ac_sid, ncaps ? caps : NULL, (DWORD)ncaps, 0};
  r = sandbox_windows_attr_list(inherit_list, 3, iso ? &sc : NULL, &attrs);
  if (r < 0) {
    job_result_fail(res, CORDON_E_SPAWN_FAILED, "attribute list: %s", strerror(-r));
    goto out;
  }
  r = cmdline_build(plan->argv.v, &cmdline);
  if (r == 0)
    r = cmdline_env_block(plan->envp.v, plan->envp.n, &envblock);
  if (r < 0) {
    job_result_fail(res, CORDON_E_SPAWN_FAILED, "command line or environment: %s", strerror(-r));
    goto out;
  }
  wapp = win_wide(plan->os->app);
  char *cwd = strdup(plan->job->package_path);
  if (cwd) {
    win_backslashes(cwd);
    wcwd = win_wide(cwd);
    free(cwd);
  }
  if (!wapp || !wcwd) {
    r = -ENOMEM;
    goto out;
  }

  STARTUPINFOEXW si;
  memset(&si, 0, sizeof(si));
  si.StartupInfo.cb = sizeof(si);
  si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
  si.StartupInfo.hStdInput = nul;
  si.StartupInfo.hStdOutput = out_w;
  si.StartupInfo.hStdError = err_w;
  si.lpAttributeList = attrs;
  DWORD flags = CREATE_SUSPENDED | CREATE_UNICODE_ENVIRONMENT | EXTENDED_STARTUPINFO_PRESENT |
                CREATE_NO_WINDOW | CREATE_NEW_PROCESS_GROUP;
  int64_t start = core_mono_ms();
  if (!CreateProcessAsUserW(token, wapp, cmdline, NULL, NULL, TRUE, flags, envblock, wcwd,
                            &si.StartupInfo, &pi)) {
    DWORD e = GetLastError();
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "cannot start %s: error %lu", plan->os->app, e);
    goto out;
  }
  if (!AssignProcessToJobObject(job, pi.hProcess)) {
    DWORD e = GetLastError();
    TerminateProcess(pi.hProcess, 1);
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "AssignProcessToJobObject: error %lu", e);
    goto out;
  }
  /* our copies of the child's ends: EOF comes when the job's copies close */
  CloseHandle(out_w);
  CloseHandle(err_w);
  out_w = err_w = NULL;
  rd_out = (struct reader){out_r, &res->out, cap, 0, plan->job->on_output, plan->job->output_ctx};
  rd_err = (struct reader){err_r, &res->err, cap, 1, plan->job->on_output, plan->job->output_ctx};
  threads[0] = CreateThread(NULL, 0, read_pipe, &rd_out, 0, NULL);
  threads[1] = CreateThread(NULL, 0, read_pipe, &rd_err, 0, NULL);
  if (!threads[0] || !threads[1]) {
    TerminateJobObject(job, 1);
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "CreateThread: error %lu", GetLastError());
    goto out;
  }
  if (ResumeThread(pi.hThread) == (DWORD)-1) {
    TerminateJobObject(job, 1);
    r = job_result_fail(res, CORDON_E_SPAWN_FAILED, "ResumeThread: error %lu", GetLastError());
    goto out;
  }
  res->ran = true;

  /* the cancel fd (a CRT pipe): readable or closed means cancel */
  HANDLE cancel_h = INVALID_HANDLE_VALUE;
  if (plan->job->cancel_fd >= 0) {
    cancel_h = (HANDLE)_get_osfhandle(plan->job->cancel_fd);
    if (cancel_h != INVALID_HANDLE_VALUE && GetFileType(cancel_h) != FILE_TYPE_PIPE)
      cancel_h = INVALID_HANDLE_VALUE;
  }
  int64_t deadline = start + (int64_t)m->timeout_s * 1000;
  bool cancelled = false;
  DWORD w = WAIT_TIMEOUT;
  for (;;) {
    int64_t left = deadline - core_mono_ms();
    if (left <= 0)
      break;
    DWORD step = cancel_h != INVALID_HANDLE_VALUE && left > 50 ? 50 : (DWORD)left;
    w = WaitForSingleObject(pi.hProcess, step);
    if (w != WAIT_TIMEOUT)
      break;
    DWORD avail = 0;
    if (cancel_h != INVALID_HANDLE_VALUE &&
        (!PeekNamedPipe(cancel_h, NULL, 0, NULL, &avail, NULL) || avail > 0)) {
      cancelled = true;
      break;
    }
  }
  /* whatever the entry left behind (or, at the timeout, started) is
   * killed and counted */
  if (w != WAIT_OBJECT_0 && !cancelled)
    res->timed_out = true;
  res->orphans_killed = live_processes(job, pi.dwProcessId);
  if (res->orphans_killed > 0 || res->timed_out || cancelled)
    res->kill_scope = KILL_SCOPE_JOB;
  /* the whole tree, whatever happened to the entry */
  TerminateJobObject(job, SANDBOX_WINDOWS_KILLED_EXIT);
  WaitForSingleObject(pi.hProcess, 5000);
  res->wall_ms = (uint64_t)(core_mono_ms() - start);

  /* the rest of the output: the writers are dead, so EOF comes quickly */
  if (WaitForMultipleObjects(2, threads, TRUE, 2000) == WAIT_TIMEOUT) {
    CancelSynchronousIo(threads[0]);
    CancelSynchronousIo(threads[1]);
    WaitForMultipleObjects(2, threads, TRUE, 1000);
  }
  DWORD code = 0;
  if (GetExitCodeProcess(pi.hProcess, &code)) {
    res->exited = true;
    res->exit_code = (int)code;
  }
  if (cancelled)
    job_result_fail(res, CORDON_E_CANCELLED, "the job was cancelled");
  /* memory limit hits are not reported as kills by Windows: a process
   * whose allocation fails exits by itself; we cannot tell */
  res->oom_killed = -1;
  r = 0;
out:
  for (int i = 0; i < 2; i++)
    if (threads[i]) {
      if (WaitForSingleObject(threads[i], 0) == WAIT_TIMEOUT) {
        CancelSynchronousIo(threads[i]);
        WaitForSingleObject(threads[i], 1000);
      }
      CloseHandle(threads[i]);
    }
  if (pi.hThread)
    CloseHandle(pi.hThread);
  if (pi.hProcess)
    CloseHandle(pi.hProcess);
  if (job) {
    TerminateJobObject(job, SANDBOX_WINDOWS_KILLED_EXIT);
    CloseHandle(job); /* KILL_ON_JOB_CLOSE */
  }
  if (token)
    CloseHandle(token);
  if (attrs) {
    DeleteProcThreadAttributeList(attrs);
    free(attrs);
  }
  HANDLE hs[] = {out_r, out_w, err_r, err_w};
  for (size_t i = 0; i < 4; i++)
    if (hs[i])
      CloseHandle(hs[i]);
  if (nul != INVALID_HANDLE_VALUE)
    CloseHandle(nul);
  if (journal) {
    int u = acl_journal_undo(journal, &plan->probe->os->ac);
    if (u < 0 && r == 0 && !res->error)
      job_result_fail(res, CORDON_E_INTERNAL,
                      "ACL grants could not all be removed (%s); the next start retries",
                      strerror(-u));
  } else if (profile_made) {
    plan->probe->os->ac.remove(plan->os->profile);
  }
  if (ac_sid)
    FreeSid(ac_sid);
  for (size_t i = 0; i < 2; i++)
    if (cap_sids[i])
      LocalFree(cap_sids[i]);
  free(cmdline);
  free(envblock);
  free(wapp);
  free(wcwd);
  return r;
}

int sandbox_windows_attr_list(HANDLE *inherit, size_t n_inherit, SECURITY_CAPABILITIES *sc,
                              LPPROC_THREAD_ATTRIBUTE_LIST *out_list) {
  DWORD count = (n_inherit ? 1 : 0) + (sc ? 1 : 0);
  SIZE_T size = 0;
  InitializeProcThreadAttributeList(NULL, count, 0, &size);
  if (size == 0)
    return win_last_err();
  LPPROC_THREAD_ATTRIBUTE_LIST list = malloc(size);
  if (!list)
    return -ENOMEM;
  if (!InitializeProcThreadAttributeList(list, count, 0, &size)) {
    int e = win_last_err();
    free(list);
    return e;
  }
  int r = 0;
  if (n_inherit && !UpdateProcThreadAttribute(list, 0, PROC_THREAD_ATTRIBUTE_HANDLE_LIST, inherit,
                                              n_inherit * sizeof(HANDLE), NULL, NULL))
    r = win_last_err();
  if (r == 0 && sc &&
      !UpdateProcThreadAttribute(list, 0, PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES, sc,
                                 sizeof(*sc), NULL, NULL))
    r = win_last_err();
  if (r < 0) {
    DeleteProcThreadAttributeList(list);
    free(list);
    return r;
  }
  *out_list = list;
  return 0;
}

int sandbox_os_sweep_leftovers(const char *state_dir) {
  (void)state_dir; /* a Job Object dies with its last handle */
  return 0;
}

int sandbox_os_reaper_start(const char *state_dir) {
  (void)state_dir; /* as above: nothing to reap */
  return 0;
}

int sandbox_os_enter_user_cgroup(int argc, char *const *argv, const char **out_why) {
  (void)argc;
  (void)argv;
  *out_why = "a Job Object holds every job here";
  return 0;
}

int sandbox_os_reap_leftovers(const char *job_id) {
  /* The Job Object is created KILL_ON_JOB_CLOSE: the agent's death closed
   * its last handle and killed the whole job already. */
  (void)job_id;
  return 0;
}
