/* Everything around the AppContainer that runs without one: the run-time
 * lookup, SID naming, capabilities, the access masks, the attribute list,
 * the ACL grants and their journal and recovery. */
#include <windows.h>

#include <aclapi.h>
#include <sddl.h>
#include <stdlib.h>
#include <string.h>

#include "compat/posix.h"
#include "compat/win32.h"
#include "platform/fs.h"
#include "platform/windows/appcontainer.h"
#include "platform/windows/sandbox_windows.h"
#include "tests/windows/wintest.h"

#define JOB_A "0123456789abcdef0123456789abcdef"
#define JOB_B "fedcba9876543210fedcba9876543210"
/* an AppContainer-shaped SID (S-1-15-2-...) made up for the tests */
#define TEST_SID L"S-1-15-2-11-22-33-44-55-66-77"

WT_TEST(appcontainer, profile_names_are_per_job) {
  wchar_t a[APPCONTAINER_NAME_MAX], b[APPCONTAINER_NAME_MAX];
  WT_EQ_INT(appcontainer_profile_name(JOB_A, a, APPCONTAINER_NAME_MAX), 0);
  WT_EQ_INT(appcontainer_profile_name(JOB_B, b, APPCONTAINER_NAME_MAX), 0);
  WT_CHECK(wcscmp(a, L"cordon.job." JOB_A) == 0, "%ls", a);
  WT_CHECK(wcscmp(a, b) != 0, "two jobs share a profile");
  WT_EQ_INT(appcontainer_profile_name("short", a, APPCONTAINER_NAME_MAX), -EINVAL);
  WT_EQ_INT(appcontainer_profile_name("0123456789ABCDEF0123456789abcdef", a, APPCONTAINER_NAME_MAX),
            -EINVAL);
  WT_EQ_INT(appcontainer_profile_name("0123456789abcdef0123456789abcde/", a, APPCONTAINER_NAME_MAX),
            -EINVAL);
  WT_EQ_INT(appcontainer_profile_name(JOB_A, a, 10), -ENAMETOOLONG);
}

WT_TEST(appcontainer, network_capabilities_only_with_net) {
  const wchar_t *caps[2] = {NULL, NULL};
  WT_EQ_INT(appcontainer_capabilities(false, caps), 0);
  WT_EQ_INT(appcontainer_capabilities(true, caps), 2);
  WT_CHECK(wcscmp(caps[0], L"S-1-15-3-1") == 0, "%ls", caps[0]);
  WT_CHECK(wcscmp(caps[1], L"S-1-15-3-3") == 0, "%ls", caps[1]);
  for (int i = 0; i < 2; i++) {
    PSID sid = NULL;
    WT_CHECK(ConvertStringSidToSidW(caps[i], &sid), "not a SID: %ls", caps[i]);
    LocalFree(sid);
  }
}

WT_TEST(appcontainer, access_masks) {
  DWORD rx = appcontainer_access_mask(APPCONTAINER_RX);
  DWORD rw = appcontainer_access_mask(APPCONTAINER_RW);
  WT_CHECK((rx & FILE_READ_DATA) && (rx & FILE_EXECUTE), "rx 0x%lx", rx);
  WT_CHECK(!(rx & (FILE_WRITE_DATA | FILE_APPEND_DATA | DELETE)), "rx writes: 0x%lx", rx);
  WT_CHECK((rw & FILE_WRITE_DATA) && (rw & DELETE) && (rw & FILE_READ_DATA), "rw 0x%lx", rw);
  WT_CHECK(!((rx | rw) & (WRITE_DAC | WRITE_OWNER | ACCESS_SYSTEM_SECURITY)),
           "a grant may change ACLs or owners");
}

WT_TEST(appcontainer, api_lookup_is_at_run_time) {
  struct appcontainer_api api;
  int r = appcontainer_api_load(&api);
  /* either all three functions or an honest -ENOSYS */
  if (r == 0)
    WT_CHECK(api.create && api.remove && api.derive, "partial API");
  else
    WT_EQ_INT(r, -ENOSYS);
  appcontainer_api_release(&api);
  WT_CHECK(api.userenv == NULL, "not released");
}

WT_TEST(appcontainer, attribute_list_with_handles) {
  HANDLE h[2] = {GetStdHandle(STD_OUTPUT_HANDLE), GetStdHandle(STD_ERROR_HANDLE)};
  LPPROC_THREAD_ATTRIBUTE_LIST list = NULL;
  WT_EQ_INT(sandbox_windows_attr_list(h, 2, NULL, &list), 0);
  WT_CHECK(list != NULL, "no list");
  DeleteProcThreadAttributeList(list);
  free(list);
}

WT_TEST(appcontainer, attribute_list_with_security_capabilities) {
  PSID sid = NULL;
  WT_CHECK(ConvertStringSidToSidW(TEST_SID, &sid), "sid");
  SECURITY_CAPABILITIES sc = {sid, NULL, 0, 0};
  HANDLE h[1] = {GetStdHandle(STD_OUTPUT_HANDLE)};
  LPPROC_THREAD_ATTRIBUTE_LIST list = NULL;
  int r = sandbox_windows_attr_list(h, 1, &sc, &list);
  LocalFree(sid);
  /* Wine's UpdateProcThreadAttribute may not know the attribute: then the
   * AppContainer path is unavailable anyway; the error must be honest */
  if (r == 0) {
    DeleteProcThreadAttributeList(list);
    free(list);
  } else {
    WT_CHECK(r == -ENOSYS || r == -EINVAL, "unexpected %d", r);
  }
}

static wchar_t *wide_dir(const char *dir) {
  wchar_t *w = win_wide(dir);
  WT_CHECK(w != NULL, "wide");
  return w;
}

/* Does this host keep a DACL set on a directory? Checked with plain
 * SetNamedSecurityInfo, not with the code under test. Wine 8 does not. */
static bool host_keeps_dacls(const char *dir, PSID sid) {
  wchar_t *w = wide_dir(dir);
  PACL old = NULL, na = NULL;
  PSECURITY_DESCRIPTOR sd = NULL;
  bool kept = false;
  if (GetNamedSecurityInfoW(w, SE_FILE_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL, &old, NULL,
                            &sd) == ERROR_SUCCESS) {
    EXPLICIT_ACCESS_W ea;
    memset(&ea, 0, sizeof(ea));
    ea.grfAccessPermissions = FILE_GENERIC_READ;
    ea.grfAccessMode = GRANT_ACCESS;
    ea.Trustee.TrusteeForm = TRUSTEE_IS_SID;
    ea.Trustee.ptstrName = (LPWSTR)sid;
    if (SetEntriesInAclW(1, &ea, old, &na) == ERROR_SUCCESS &&
        SetNamedSecurityInfoW(w, SE_FILE_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL, na, NULL) ==
            ERROR_SUCCESS)
      kept = acl_has_sid(w, sid) == 1;
    LocalFree(na);
    LocalFree(sd);
  }
  free(w);
  return kept;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  WT_CHECK(f != NULL, "cannot read %s", path);
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

WT_TEST(acl_journal, each_grant_is_journaled_before_it_is_made) {
  const char *state = wt_tmpdir();
  char target[MAX_PATH * 3];
  snprintf(target, sizeof(target), "%s\\granted", state);
  WT_EQ_INT(fs_mkdir_p(target, 0755), 0);
  PSID sid = NULL;
  WT_CHECK(ConvertStringSidToSidW(TEST_SID, &sid), "sid");
  struct acl_journal *j = NULL;
  WT_EQ_INT(acl_journal_open(state, JOB_A, &j), 0);
  int r = acl_journal_grant(j, L"cordon.job." JOB_A, sid, target,
                            appcontainer_access_mask(APPCONTAINER_RW), false);
  if (r == -EOPNOTSUPP) {
    acl_journal_undo(j, NULL);
    LocalFree(sid);
    wt_skip("this volume keeps no ACLs: grants are refused (path_not_anchorable)");
  }
  WT_EQ_INT(r, 0);
  /* a live job's journal is held unshared: recovery leaves it alone */
  char jpath[MAX_PATH * 3];
  snprintf(jpath, sizeof(jpath), "%s\\acl-journal\\" JOB_A ".journal", state);
  WT_EQ_INT(acl_journal_recover(state, NULL), 0);
  WT_CHECK(GetFileAttributesA(jpath) != INVALID_FILE_ATTRIBUTES, "live journal removed");
  FILE *f = fopen(jpath, "rb");
  WT_CHECK(f == NULL, "a live journal could be opened by another reader");
  acl_journal_abandon(j);
  char want[MAX_PATH * 4];
  snprintf(want, sizeof(want), "grant\tS-1-15-2-11-22-33-44-55-66-77\tcordon.job." JOB_A "\t%s\n",
           target);
  WT_EQ_STR(read_all(jpath), want);
  /* now that nothing holds it, it is a dead agent's: undone and removed */
  WT_EQ_INT(acl_journal_recover(state, NULL), 1);
  WT_CHECK(GetFileAttributesA(jpath) == INVALID_FILE_ATTRIBUTES, "journal left behind");
  LocalFree(sid);
}

WT_TEST(acl_journal, grant_is_made_and_undone) {
  const char *state = wt_tmpdir();
  char target[MAX_PATH * 3];
  snprintf(target, sizeof(target), "%s\\granted", state);
  WT_EQ_INT(fs_mkdir_p(target, 0755), 0);
  PSID sid = NULL, probe = NULL;
  WT_CHECK(ConvertStringSidToSidW(TEST_SID, &sid), "sid");
  WT_CHECK(ConvertStringSidToSidW(L"S-1-15-2-99-98-97-96-95-94-93", &probe), "sid");
  bool keeps = host_keeps_dacls(state, probe);
  LocalFree(probe);
  if (!keeps) {
    LocalFree(sid);
    wt_skip("NOT VERIFIED: this host does not keep file DACLs (Wine 8 does not)");
  }
  wchar_t *wt = wide_dir(target);
  struct acl_journal *j = NULL;
  WT_EQ_INT(acl_journal_open(state, JOB_A, &j), 0);
  WT_EQ_INT(acl_journal_grant(j, L"cordon.job." JOB_A, sid, target,
                              appcontainer_access_mask(APPCONTAINER_RW), false),
            0);
  WT_EQ_INT(acl_has_sid(wt, sid), 1);
  WT_EQ_INT(acl_journal_undo(j, NULL), 0);
  WT_EQ_INT(acl_has_sid(wt, sid), 0);
  free(wt);
  LocalFree(sid);
}

WT_TEST(acl_journal, a_dead_agents_grants_are_undone_at_next_start) {
  const char *state = wt_tmpdir();
  char target[MAX_PATH * 3];
  snprintf(target, sizeof(target), "%s\\granted", state);
  WT_EQ_INT(fs_mkdir_p(target, 0755), 0);
  PSID sid = NULL, probe = NULL;
  WT_CHECK(ConvertStringSidToSidW(TEST_SID, &sid), "sid");
  WT_CHECK(ConvertStringSidToSidW(L"S-1-15-2-99-98-97-96-95-94-93", &probe), "sid");
  bool keeps = host_keeps_dacls(state, probe);
  LocalFree(probe);
  wchar_t *wt = wide_dir(target);
  /* the agent "dies" after granting: its journal handle closes with it,
   * the undo never runs */
  struct acl_journal *j = NULL;
  WT_EQ_INT(acl_journal_open(state, JOB_B, &j), 0);
  int r = acl_journal_grant(j, L"cordon.job." JOB_B, sid, target,
                            appcontainer_access_mask(APPCONTAINER_RX), false);
  if (r == -EOPNOTSUPP) {
    acl_journal_undo(j, NULL);
    wt_skip("this volume keeps no ACLs: grants are refused (path_not_anchorable)");
  }
  WT_EQ_INT(r, 0);
  WT_EQ_INT(acl_journal_grant(j, L"cordon.job." JOB_B, sid, target, GENERIC_ALL, true), 0);
  if (keeps)
    WT_EQ_INT(acl_has_sid(wt, sid), 1);
  acl_journal_abandon(j);
  /* and a torn last line (the agent died while writing it) is ignored */
  char jpath[MAX_PATH * 3];
  snprintf(jpath, sizeof(jpath), "%s\\acl-journal\\" JOB_B ".journal", state);
  FILE *f = fopen(jpath, "ab");
  WT_CHECK(f != NULL, "append");
  fputs("grant\tS-1-15-2-1", f);
  fclose(f);
  WT_EQ_INT(acl_journal_recover(state, NULL), 1);
  WT_CHECK(GetFileAttributesA(jpath) == INVALID_FILE_ATTRIBUTES, "journal left behind");
  if (keeps)
    WT_EQ_INT(acl_has_sid(wt, sid), 0);
  /* a second start finds nothing more to do */
  WT_EQ_INT(acl_journal_recover(state, NULL), 0);
  free(wt);
  LocalFree(sid);
}

WT_TEST(acl_journal, a_symlinked_grant_is_refused) {
  const char *dir = wt_tmpdir();
  char target[MAX_PATH * 3], link[MAX_PATH * 3];
  snprintf(target, sizeof(target), "%s\\real", dir);
  snprintf(link, sizeof(link), "%s\\link", dir);
  WT_EQ_INT(fs_mkdir_p(target, 0755), 0);
  DWORD attr = INVALID_FILE_ATTRIBUTES;
  if (CreateSymbolicLinkA(link, target,
                          SYMBOLIC_LINK_FLAG_DIRECTORY |
                              SYMBOLIC_LINK_FLAG_ALLOW_UNPRIVILEGED_CREATE))
    attr = GetFileAttributesA(link);
  /* Wine's CreateSymbolicLink reports success and makes nothing */
  if (attr == INVALID_FILE_ATTRIBUTES || !(attr & FILE_ATTRIBUTE_REPARSE_POINT))
    wt_skip("NOT VERIFIED: no directory symlink can be made here");
  wchar_t *wl = wide_dir(link);
  HANDLE h;
  int r = acl_open_anchored(wl, &h);
  if (r == 0)
    CloseHandle(h);
  WT_EQ_INT(r, -ELOOP);
  /* and a path through the link */
  char below[MAX_PATH * 3 + 8];
  snprintf(below, sizeof(below), "%s\\sub", target);
  WT_EQ_INT(fs_mkdir_p(below, 0755), 0);
  snprintf(below, sizeof(below), "%s\\sub", link);
  wchar_t *wb = wide_dir(below);
  r = acl_open_anchored(wb, &h);
  if (r == 0)
    CloseHandle(h);
  WT_EQ_INT(r, -ELOOP);
  free(wl);
  free(wb);
}
