/* The Windows probe (shared by sandbox_windows.c and grants_windows.c) and
 * pieces of the Windows sandbox exposed for tests (tests/windows/). */
#ifndef CORDON_PLATFORM_WINDOWS_SANDBOX_WINDOWS_H
#define CORDON_PLATFORM_WINDOWS_SANDBOX_WINDOWS_H

#include <windows.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/sandbox_os.h"
#include "platform/windows/appcontainer.h"

struct sandbox_os_probe {
  bool elevated, is_system;
  char account[256]; /* DOMAIN\user of the agent */
  char *home;        /* the profile directory of the agent's account (UTF-8) */
  bool token_ok;
  char token_error[160];
  bool low_ok; /* Low integrity jobs: the token and file labels both work */
  char low_error[160];
  bool job_ok;
  char job_error[160];
  struct appcontainer_api ac;
  bool ac_api; /* userenv exports the functions */
  bool ac_tried, ac_works;
  char ac_error[160];
  int recovered; /* journals of dead agents undone at this start */
};

/* The exit code every process of a job gets when the agent terminates the
 * job (timeout, cancel, or cleanup of what the entry left behind). */
#define SANDBOX_WINDOWS_KILLED_EXIT 0xC000013Au /* STATUS_CONTROL_C_EXIT */

struct job_limits_spec {
  uint64_t memory_bytes; /* per process and for the whole job */
  uint32_t processes;    /* active processes */
  uint64_t cpu_s;        /* user time of the whole job */
};

/* A Job Object with the limits, UI restrictions, kill on close and no
 * breakaway. Returns 0 or a negated errno. */
int sandbox_windows_job_new(const struct job_limits_spec *spec, HANDLE *out_job);

/* The attribute list for CreateProcess: the handles to inherit (only
 * those) and, for AppContainer mode, the security capabilities. Free with
 * DeleteProcThreadAttributeList() then free(). */
int sandbox_windows_attr_list(HANDLE *inherit, size_t n_inherit, SECURITY_CAPABILITIES *sc,
                              LPPROC_THREAD_ATTRIBUTE_LIST *out_list);

#endif
