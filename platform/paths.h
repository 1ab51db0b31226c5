/* Per-OS defaults: where the agent keeps its state, the lowest level a
 * device owner accepts by default, the platform name. */
#ifndef CORDON_PLATFORM_PATHS_H
#define CORDON_PLATFORM_PATHS_H

#include <stddef.h>

#include "core/manifest.h"

/* The agent's default config dir (docs/DESIGN.md section 7). Returns 0, or
 * -ENAMETOOLONG / -ENOENT when no home is known. */
int paths_agent_config_dir(char *out, size_t len);
enum sandbox_level paths_default_lowest_level(void);
/* "linux", "windows", "macos" */
const char *paths_platform_name(void);
unsigned paths_platform_bit(void);
/* The running OS and its version, one line for people ("Linux
 * 6.1.0-18-amd64", "Darwin 23.4.0", "Windows 10.0.19045"), into out;
 * "unknown" when the OS does not say. */
void paths_os_version(char *out, size_t len);

#endif
