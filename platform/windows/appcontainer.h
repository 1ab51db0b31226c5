/* AppContainer mode (level `isolated` on Windows): the APIs found at run
 * time, one profile (and so one SID) per job, its capabilities, the access
 * each grant gives, and the journaled ACL changes that give it.
 *
 * Nothing here can run under Wine (CreateAppContainerProfile is not
 * implemented there): the pure parts and the journal are unit-tested;
 * docs/WINDOWS.md says what was not. */
#ifndef CORDON_PLATFORM_WINDOWS_APPCONTAINER_H
#define CORDON_PLATFORM_WINDOWS_APPCONTAINER_H

#include <windows.h>

#include <stdbool.h>
#include <stddef.h>

/* userenv.dll's AppContainer functions (Windows 8 and later). */
typedef HRESULT(WINAPI *appcontainer_create_fn)(PCWSTR name, PCWSTR display, PCWSTR desc,
                                                PSID_AND_ATTRIBUTES caps, DWORD n_caps,
                                                PSID *out_sid);
typedef HRESULT(WINAPI *appcontainer_delete_fn)(PCWSTR name);
typedef HRESULT(WINAPI *appcontainer_derive_fn)(PCWSTR name, PSID *out_sid);

struct appcontainer_api {
  HMODULE userenv;
  appcontainer_create_fn create;
  appcontainer_delete_fn remove;
  appcontainer_derive_fn derive;
};

/* LoadLibraryExW("userenv.dll", LOAD_LIBRARY_SEARCH_SYSTEM32), then
 * GetProcAddress. Returns 0 when all three exist, -ENOSYS otherwise
 * (api->userenv may still be set: release it). */
int appcontainer_api_load(struct appcontainer_api *api);
void appcontainer_api_release(struct appcontainer_api *api);

#define APPCONTAINER_NAME_MAX 64
/* "cordon.job.<job id>": job ids are unique (80 random bits after the
 * time), so concurrent jobs never share a profile or a SID. -EINVAL
 * unless job_id is 32 hex chars. */
int appcontainer_profile_name(const char *job_id, wchar_t *out, size_t len);

/* The capability SIDs a job gets: none, or with net internetClient
 * (S-1-15-3-1) and privateNetworkClientServer (S-1-15-3-3). Returns the
 * count written (at most 2) of static SDDL strings. */
size_t appcontainer_capabilities(bool net, const wchar_t *out_sddl[2]);

enum appcontainer_access { APPCONTAINER_RX, APPCONTAINER_RW };
/* The file access mask for a grant: read+execute, or that and modify
 * (write, append, delete) — never WRITE_DAC, WRITE_OWNER. */
DWORD appcontainer_access_mask(enum appcontainer_access a);

/* ---- ACL grants, journaled ----
 * Before each change a line "grant\t<sid>\t<profile>\t<path>\n" is
 * appended to <state>/acl-journal/<job id>.journal and flushed to disk.
 * The journal file stays open and unshared while the job runs: a journal
 * that can be opened exclusively belongs to an agent that died, and
 * acl_journal_recover() undoes it. Undo = remove every ACE of the job's
 * SID (unique to the job) from each journaled path, delete the profile,
 * delete the journal. Paths are opened without following reparse points;
 * a grant that is (or passes through) a junction or symlink is refused. */
struct acl_journal;

int acl_journal_open(const char *state_dir, const char *job_id, struct acl_journal **out_j);
/* Journal, then add an inheritable allow ACE for sid to path. Errors:
 * -ELOOP for a reparse point on the way, -EOPNOTSUPP when the volume keeps
 * no ACLs (path_not_anchorable), or a mapped Win32 error. */
int acl_journal_grant(struct acl_journal *j, const wchar_t *profile, PSID sid, const char *path,
                      DWORD mask, bool deny);
/* Undo everything this journal recorded, delete it, free j (NULL-safe). */
int acl_journal_undo(struct acl_journal *j, const struct appcontainer_api *api);
/* Close and free j without undoing anything: what an agent that dies
 * leaves behind (the next start's recovery undoes it). For tests. */
void acl_journal_abandon(struct acl_journal *j);
/* Undo the journals of agents that died. Returns how many were undone. */
int acl_journal_recover(const char *state_dir, const struct appcontainer_api *api);

/* Remove every ACE naming sid from path's DACL (opened without following
 * reparse points). 0 also when there were none. */
int acl_revoke_sid(const wchar_t *path, PSID sid);
/* Does path's DACL hold an ACE for sid? 1 yes, 0 no, <0 error (tests). */
int acl_has_sid(const wchar_t *path, PSID sid);
/* Open path for an ACL change: no reparse point anywhere on the way (the
 * final path must equal the requested one), on a volume with persistent
 * ACLs. The handle has READ_CONTROL|WRITE_DAC. */
int acl_open_anchored(const wchar_t *path, HANDLE *out_h);

#endif
