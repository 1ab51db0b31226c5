/* File-system helpers for the agent's private directories (POSIX
 * implementation in platform/posix/). Nothing here follows a symbolic link. */
#ifndef CORDON_PLATFORM_FS_H
#define CORDON_PLATFORM_FS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define STAGE_MAX_FILES 100000
#define STAGE_MAX_DEPTH 64
#define STAGE_MAX_BYTES (1ull << 30)

/* Remove name (a file or a whole tree) below dirfd without following links. */
int fs_remove_tree_at(int dirfd, const char *name);

/* Copy the regular files and directories of src_dirfd into the empty
 * dst_dirfd, modes masked to 0755/0644. A symlink, device, fifo or socket
 * is refused with CORDON_E_USAGE naming it;
 * limits give CORDON_E_PACKAGE_TOO_LARGE. On failure dst is left empty. */
int fs_copy_tree(int src_dirfd, int dst_dirfd, struct cordon_diag *diag);

/* mkdir -p with mode for each created component. */
int fs_mkdir_p(const char *path, unsigned mode);

#endif
