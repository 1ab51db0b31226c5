/* The macOS probe, shared by sandbox_macos.c and grants_macos.c. */
#ifndef CORDON_PLATFORM_MACOS_SANDBOX_MACOS_H
#define CORDON_PLATFORM_MACOS_SANDBOX_MACOS_H

#include <stdbool.h>

#include "platform/posix/job_user.h"
#include "platform/sandbox_os.h"

struct sandbox_os_probe {
  struct posix_job_user_probe user;
  bool dedicated_user; /* jobs run under another uid than the agent's */
  bool table_tried, table_works;
  char table_error[160];
};

#endif
