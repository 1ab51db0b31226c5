#include "platform/windows/appcontainer.h"

#include <aclapi.h>
#include <sddl.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat/win32.h"
#include "platform/fs.h"

int appcontainer_api_load(struct appcontainer_api *api) {
  memset(api, 0, sizeof(*api));
  /* system32 only: never a userenv.dll from the current or the exe's dir */
  api->userenv = LoadLibraryExW(L"userenv.dll", NULL, LOAD_LIBRARY_SEARCH_SYSTEM32);
  if (!api->userenv)
    return -ENOSYS;
  api->create = (appcontainer_create_fn)(void (*)(void))GetProcAddress(api->userenv,
                                                                       "CreateAppContainerProfile");
  api->remove = (appcontainer_delete_fn)(void (*)(void))GetProcAddress(api->userenv,
                                                                       "DeleteAppContainerProfile");
  api->derive = (appcontainer_derive_fn)(void (*)(void))GetProcAddress(
      api->userenv, "DeriveAppContainerSidFromAppContainerName");
  return api->create && api->remove && api->derive ? 0 : -ENOSYS;
}

void appcontainer_api_release(struct appcontainer_api *api) {
  if (api && api->userenv)
    FreeLibrary(api->userenv);
  if (api)
    memset(api, 0, sizeof(*api));
}

int appcontainer_profile_name(const char *job_id, wchar_t *out, size_t len) {
  if (!job_id || strlen(job_id) != 32 || strspn(job_id, "0123456789abcdef") != 32)
    return -EINVAL;
  int n = _snwprintf(out, len, L"cordon.job.%hs", job_id);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

size_t appcontainer_capabilities(bool net, const wchar_t *out_sddl[2]) {
  if (!net)
    return 0;
  out_sddl[0] = L"S-1-15-3-1"; /* internetClient */
  out_sddl[1] = L"S-1-15-3-3"; /* privateNetworkClientServer */
  return 2;
}

DWORD appcontainer_access_mask(enum appcontainer_access a) {
  DWORD m = FILE_GENERIC_READ | FILE_GENERIC_EXECUTE;
  if (a == APPCONTAINER_RW)
    m |= FILE_GENERIC_WRITE | DELETE | FILE_DELETE_CHILD;
  return m;
}

/* ---- ACLs ---- */

static bool same_path(const wchar_t *a, const wchar_t *b) {
  size_t la = wcslen(a), lb = wcslen(b);
  while (la > 3 && (a[la - 1] == L'\\' || a[la - 1] == L'/'))
    la--;
  while (lb > 3 && (b[lb - 1] == L'\\' || b[lb - 1] == L'/'))
    lb--;
  if (la != lb)
    return false;
  for (size_t i = 0; i < la; i++) {
    wchar_t x = a[i] == L'/' ? L'\\' : a[i], y = b[i] == L'/' ? L'\\' : b[i];
    if (x != y && CompareStringOrdinal(&x, 1, &y, 1, TRUE) != CSTR_EQUAL)
      return false;
  }
  return true;
}

int acl_open_anchored(const wchar_t *path, HANDLE *out_h) {
  wchar_t full[MAX_PATH * 4];
  DWORD n = GetFullPathNameW(path, sizeof(full) / sizeof(full[0]), full, NULL);
  if (n == 0 || n >= sizeof(full) / sizeof(full[0]))
    return n == 0 ? win_last_err() : -ENAMETOOLONG;
  HANDLE h =
      CreateFileW(full, READ_CONTROL | WRITE_DAC | FILE_READ_ATTRIBUTES,
                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL, OPEN_EXISTING,
                  FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT, NULL);
  if (h == INVALID_HANDLE_VALUE)
    return win_last_err();
  int r = 0;
  BY_HANDLE_FILE_INFORMATION info;
  DWORD fsflags = 0;
  wchar_t *final = NULL;
  if (!GetFileInformationByHandle(h, &info)) {
    r = win_last_err();
  } else if (info.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT) {
    r = -ELOOP; /* the grant itself is a link or junction */
  } else if (!(final = win_handle_path(h))) {
    r = -errno;
  } else if (!same_path(final, full)) {
    r = -ELOOP; /* a junction or link on the way changed where it leads */
  } else if (!GetVolumeInformationByHandleW(h, NULL, 0, NULL, NULL, &fsflags, NULL, 0)) {
    r = win_last_err();
  } else if (!(fsflags & FILE_PERSISTENT_ACLS)) {
    r = -EOPNOTSUPP;
  }
  free(final);
  if (r < 0) {
    CloseHandle(h);
    return r;
  }
  *out_h = h;
  return 0;
}

static bool ace_names(const void *ace, PSID sid) {
  const ACE_HEADER *hd = ace;
  PSID s;
  switch (hd->AceType) {
  case ACCESS_ALLOWED_ACE_TYPE:
    s = (PSID) & ((const ACCESS_ALLOWED_ACE *)ace)->SidStart;
    break;
  case ACCESS_DENIED_ACE_TYPE:
    s = (PSID) & ((const ACCESS_DENIED_ACE *)ace)->SidStart;
    break;
  default:
    return false;
  }
  return EqualSid(s, sid) != FALSE;
}

static int dacl_of(HANDLE h, PACL *out_dacl, PSECURITY_DESCRIPTOR *out_sd) {
  DWORD e = GetSecurityInfo(h, SE_FILE_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL, out_dacl,
                            NULL, out_sd);
  return e == ERROR_SUCCESS ? 0 : win_errno(e);
}

int acl_has_sid(const wchar_t *path, PSID sid) {
  HANDLE h =
      CreateFileW(path, READ_CONTROL, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                  OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT, NULL);
  if (h == INVALID_HANDLE_VALUE)
    return win_last_err();
  PACL dacl = NULL;
  PSECURITY_DESCRIPTOR sd = NULL;
  int r = dacl_of(h, &dacl, &sd);
  CloseHandle(h);
  if (r < 0)
    return r;
  int found = 0;
  for (DWORD i = 0; dacl && i < dacl->AceCount && !found; i++) {
    void *ace;
    if (GetAce(dacl, i, &ace) && ace_names(ace, sid))
      found = 1;
  }
  LocalFree(sd);
  return found;
}

static int revoke_handle(HANDLE h, PSID sid) {
  PACL dacl = NULL;
  PSECURITY_DESCRIPTOR sd = NULL;
  int r = dacl_of(h, &dacl, &sd);
  if (r < 0)
    return r;
  if (!dacl) {
    LocalFree(sd);
    return 0;
  }
  bool any = false;
  for (DWORD i = 0; i < dacl->AceCount; i++) {
    void *ace;
    if (GetAce(dacl, i, &ace) && ace_names(ace, sid) &&
        !(((ACE_HEADER *)ace)->AceFlags & INHERITED_ACE))
      any = true;
  }
  if (!any) {
    LocalFree(sd);
    return 0;
  }
  PACL na = malloc(dacl->AclSize);
  if (!na) {
    LocalFree(sd);
    return -ENOMEM;
  }
  if (!InitializeAcl(na, dacl->AclSize, ACL_REVISION_DS)) {
    r = win_last_err();
  } else {
    for (DWORD i = 0; i < dacl->AceCount && r == 0; i++) {
      void *ace;
      if (!GetAce(dacl, i, &ace)) {
        r = win_last_err();
        break;
      }
      ACE_HEADER *hd = ace;
      if (ace_names(ace, sid) && !(hd->AceFlags & INHERITED_ACE))
        continue;
      if (!AddAce(na, ACL_REVISION_DS, MAXDWORD, ace, hd->AceSize))
        r = win_last_err();
    }
  }
  if (r == 0) {
    DWORD e = SetSecurityInfo(h, SE_FILE_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL, na, NULL);
    r = e == ERROR_SUCCESS ? 0 : win_errno(e);
  }
  free(na);
  LocalFree(sd);
  return r;
}

int acl_revoke_sid(const wchar_t *path, PSID sid) {
  HANDLE h = CreateFileW(
      path, READ_CONTROL | WRITE_DAC, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
      OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT, NULL);
  if (h == INVALID_HANDLE_VALUE) {
    DWORD e = GetLastError();
    /* gone: nothing left to undo */
    return e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND ? 0 : win_errno(e);
  }
  int r = revoke_handle(h, sid);
  CloseHandle(h);
  return r;
}

/* ---- the journal ---- */

struct acl_record {
  wchar_t *sid; /* SDDL */
  wchar_t *profile;
  wchar_t *path;
};

struct acl_journal {
  HANDLE file;
  wchar_t *file_path;
  struct acl_record *rec;
  size_t n;
};

/* <state>\acl-journal, created private when missing */
static wchar_t *journal_dir(const char *state_dir, bool create) {
  char *d = NULL;
  if (asprintf(&d, "%s/acl-journal", state_dir) < 0)
    return NULL;
  if (create && fs_mkdir_p(d, 0700) < 0) {
    free(d);
    return NULL;
  }
  wchar_t *w = win_wide(d);
  free(d);
  if (w)
    for (wchar_t *p = w; *p; p++)
      if (*p == L'/')
        *p = L'\\';
  return w;
}

int acl_journal_open(const char *state_dir, const char *job_id, struct acl_journal **out_j) {
  wchar_t *dir = journal_dir(state_dir, true);
  if (!dir)
    return -EACCES;
  char name[64];
  snprintf(name, sizeof(name), "%.32s.journal", job_id);
  wchar_t *path = win_join(dir, name);
  free(dir);
  struct acl_journal *j = calloc(1, sizeof(*j));
  if (!path || !j) {
    free(path);
    free(j);
    return -ENOMEM;
  }
  /* unshared while the job runs: recovery skips journals it cannot open */
  j->file = CreateFileW(path, GENERIC_READ | GENERIC_WRITE | DELETE, 0, NULL, CREATE_NEW,
                        FILE_ATTRIBUTE_NORMAL | FILE_FLAG_WRITE_THROUGH, NULL);
  if (j->file == INVALID_HANDLE_VALUE) {
    int e = win_last_err();
    free(path);
    free(j);
    return e;
  }
  j->file_path = path;
  *out_j = j;
  return 0;
}

static int journal_append(struct acl_journal *j, const wchar_t *sid, const wchar_t *profile,
                          const wchar_t *path) {
  char *s = win_utf8(sid), *p = win_utf8(profile), *f = win_utf8(path), *line = NULL;
  int r = -ENOMEM;
  if (s && p && f && asprintf(&line, "grant\t%s\t%s\t%s\n", s, p, f) >= 0) {
    DWORD w = 0;
    size_t len = strlen(line);
    if (!WriteFile(j->file, line, (DWORD)len, &w, NULL) || w != len || !FlushFileBuffers(j->file))
      r = win_last_err();
    else
      r = 0;
  }
  free(line);
  free(s);
  free(p);
  free(f);
  return r;
}

int acl_journal_grant(struct acl_journal *j, const wchar_t *profile, PSID sid, const char *path,
                      DWORD mask, bool deny) {
  wchar_t *wpath = win_wide(path);
  if (!wpath)
    return -EINVAL;
  for (wchar_t *p = wpath; *p; p++)
    if (*p == L'/')
      *p = L'\\';
  HANDLE h = INVALID_HANDLE_VALUE;
  LPWSTR ssid = NULL;
  struct acl_record *grown = NULL;
  int r = acl_open_anchored(wpath, &h);
  if (r == 0 && !ConvertSidToStringSidW(sid, &ssid))
    r = win_last_err();
  if (r == 0) {
    grown = realloc(j->rec, (j->n + 1) * sizeof(*j->rec));
    if (!grown)
      r = -ENOMEM;
    else
      j->rec = grown;
  }
  /* journaled (and flushed) before the change is made */
  if (r == 0)
    r = journal_append(j, ssid, profile, wpath);
  if (r == 0) {
    struct acl_record *rec = &j->rec[j->n];
    rec->sid = _wcsdup(ssid);
    rec->profile = _wcsdup(profile);
    rec->path = wpath;
    wpath = NULL;
    j->n++;
    if (!rec->sid || !rec->profile)
      r = -ENOMEM;
  }
  if (r == 0) {
    PACL dacl = NULL, na = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    r = dacl_of(h, &dacl, &sd);
    if (r == 0) {
      EXPLICIT_ACCESS_W ea;
      memset(&ea, 0, sizeof(ea));
      ea.grfAccessPermissions = mask;
      ea.grfAccessMode = deny ? DENY_ACCESS : GRANT_ACCESS;
      ea.grfInheritance = SUB_CONTAINERS_AND_OBJECTS_INHERIT;
      ea.Trustee.TrusteeForm = TRUSTEE_IS_SID;
      ea.Trustee.TrusteeType = TRUSTEE_IS_UNKNOWN;
      ea.Trustee.ptstrName = (LPWSTR)sid;
      DWORD e = SetEntriesInAclW(1, &ea, dacl, &na);
      if (e == ERROR_SUCCESS)
        e = SetSecurityInfo(h, SE_FILE_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL, na, NULL);
      r = e == ERROR_SUCCESS ? 0 : win_errno(e);
      LocalFree(na);
      LocalFree(sd);
    }
  }
  if (h != INVALID_HANDLE_VALUE)
    CloseHandle(h);
  LocalFree(ssid);
  free(wpath);
  return r;
}

/* Undo records (newest first) and delete the profiles they name. */
static int undo_records(struct acl_record *rec, size_t n, const struct appcontainer_api *api) {
  int r = 0;
  for (size_t i = n; i-- > 0;) {
    PSID sid = NULL;
    if (!rec[i].sid || !ConvertStringSidToSidW(rec[i].sid, &sid)) {
      r = -EINVAL;
      continue;
    }
    int rr = rec[i].path ? acl_revoke_sid(rec[i].path, sid) : 0;
    if (rr < 0)
      r = rr;
    LocalFree(sid);
  }
  for (size_t i = 0; i < n; i++) {
    bool seen = false;
    for (size_t k = 0; k < i && !seen; k++)
      seen = rec[k].profile && rec[i].profile && wcscmp(rec[k].profile, rec[i].profile) == 0;
    if (!seen && rec[i].profile && api && api->remove)
      (void)api->remove(rec[i].profile);
  }
  return r;
}

static void free_records(struct acl_record *rec, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(rec[i].sid);
    free(rec[i].profile);
    free(rec[i].path);
  }
  free(rec);
}

int acl_journal_undo(struct acl_journal *j, const struct appcontainer_api *api) {
  if (!j)
    return 0;
  int r = undo_records(j->rec, j->n, api);
  CloseHandle(j->file);
  /* keep the journal for the next start if something could not be undone */
  if (r == 0 && !DeleteFileW(j->file_path))
    r = win_last_err();
  free_records(j->rec, j->n);
  free(j->file_path);
  free(j);
  return r;
}

void acl_journal_abandon(struct acl_journal *j) {
  if (!j)
    return;
  CloseHandle(j->file);
  free_records(j->rec, j->n);
  free(j->file_path);
  free(j);
}

/* Parse "grant\t<sid>\t<profile>\t<path>\n" lines; a torn last line (the
 * agent died while writing it) is ignored: its change was never made. */
static int parse_journal(char *text, struct acl_record **out, size_t *out_n) {
  struct acl_record *rec = NULL;
  size_t n = 0;
  char *save = NULL;
  for (char *line = text; line && *line;) {
    char *nl = strchr(line, '\n');
    if (!nl)
      break;
    *nl = '\0';
    char *f[4] = {0};
    int k = 0;
    for (char *tok = strtok_r(line, "\t", &save); tok && k < 4; tok = strtok_r(NULL, "\t", &save))
      f[k++] = tok;
    if (k == 4 && strcmp(f[0], "grant") == 0) {
      struct acl_record *g = realloc(rec, (n + 1) * sizeof(*rec));
      if (!g) {
        free_records(rec, n);
        return -ENOMEM;
      }
      rec = g;
      rec[n].sid = win_wide(f[1]);
      rec[n].profile = win_wide(f[2]);
      rec[n].path = win_wide(f[3]);
      n++;
    }
    line = nl + 1;
  }
  *out = rec;
  *out_n = n;
  return 0;
}

int acl_journal_recover(const char *state_dir, const struct appcontainer_api *api) {
  wchar_t *dir = journal_dir(state_dir, false);
  if (!dir)
    return -ENOMEM;
  wchar_t *pat = win_join(dir, "*.journal");
  if (!pat) {
    free(dir);
    return -ENOMEM;
  }
  WIN32_FIND_DATAW fd;
  HANDLE f = FindFirstFileExW(pat, FindExInfoBasic, &fd, FindExSearchNameMatch, NULL, 0);
  free(pat);
  int undone = 0;
  if (f == INVALID_HANDLE_VALUE) {
    free(dir);
    return 0;
  }
  do {
    if (fd.dwFileAttributes & (FILE_ATTRIBUTE_DIRECTORY | FILE_ATTRIBUTE_REPARSE_POINT))
      continue;
    size_t dl = wcslen(dir), nl = wcslen(fd.cFileName);
    wchar_t *path = malloc((dl + nl + 2) * sizeof(wchar_t));
    if (!path)
      break;
    memcpy(path, dir, dl * sizeof(wchar_t));
    path[dl] = L'\\';
    memcpy(path + dl + 1, fd.cFileName, (nl + 1) * sizeof(wchar_t));
    /* a live job holds its journal open unshared: skip it */
    HANDLE h = CreateFileW(path, GENERIC_READ | DELETE, 0, NULL, OPEN_EXISTING,
                           FILE_FLAG_OPEN_REPARSE_POINT, NULL);
    if (h != INVALID_HANDLE_VALUE) {
      LARGE_INTEGER size;
      char *text = NULL;
      if (GetFileSizeEx(h, &size) && size.QuadPart < (1 << 20) &&
          (text = malloc((size_t)size.QuadPart + 1))) {
        DWORD got = 0;
        if (ReadFile(h, text, (DWORD)size.QuadPart, &got, NULL)) {
          text[got] = '\0';
          struct acl_record *rec = NULL;
          size_t n = 0;
          if (parse_journal(text, &rec, &n) == 0) {
            int r = undo_records(rec, n, api);
            free_records(rec, n);
            CloseHandle(h);
            h = INVALID_HANDLE_VALUE;
            if (r == 0 && DeleteFileW(path))
              undone++;
          }
        }
      }
      free(text);
      if (h != INVALID_HANDLE_VALUE)
        CloseHandle(h);
    }
    free(path);
  } while (FindNextFileW(f, &fd));
  FindClose(f);
  free(dir);
  return undone;
}
