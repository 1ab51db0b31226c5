/* The one header through which shared code reaches the POSIX file,
 * directory, process and environment calls it makes (open, openat, stat,
 * mkdir, rename, unlink, opendir, pipe, fsync, setenv, geteuid, ...): the
 * way git's code reaches compat/mingw.h through git-compat-util.h.
 *
 * A file that makes such calls includes this header; it adds nothing to a
 * POSIX build but the standard headers. The windows build sets
 * CORDON_WITH_MINGW_COMPAT=1 and gets the shim of compat/mingw.h, which
 * maps those calls onto Win32 (UTF-8 paths, owner-only modes, atomic
 * rename: docs/WINDOWS.md). The switch comes from the build (CMake), never
 * from an OS test in code.
 */
#ifndef CORDON_COMPAT_POSIX_H
#define CORDON_COMPAT_POSIX_H

#if CORDON_WITH_MINGW_COMPAT
#include "compat/mingw.h"
#else
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#endif

#endif
