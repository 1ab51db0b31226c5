/* Building what CreateProcessW takes: a command line that the Microsoft C
 * runtime's (and CommandLineToArgvW's) parser splits back into exactly the
 * given argv, and a sorted UTF-16 environment block. Pure functions. */
#ifndef CORDON_PLATFORM_WINDOWS_CMDLINE_H
#define CORDON_PLATFORM_WINDOWS_CMDLINE_H

#include <stddef.h>
#include <wchar.h>

/* argv (UTF-8, NULL-terminated) -> malloc'd UTF-16 command line. Each
 * argument is quoted when it is empty or holds a space, tab, newline or
 * quote; backslashes before a quote are doubled. Returns 0, -EINVAL (bad
 * UTF-8, or a result longer than the 32767 characters Windows allows) or
 * -ENOMEM. */
int cmdline_build(char *const *argv, wchar_t **out_cmdline);

/* "NAME=value" strings (UTF-8) -> malloc'd UTF-16 environment block, sorted
 * by name without regard to case (as Windows expects), each entry ending in
 * a NUL and the block in a second NUL. A later duplicate name (compared
 * without case) replaces an earlier one. 0, -EINVAL or -ENOMEM. */
int cmdline_env_block(char *const *envp, size_t n, wchar_t **out_block);

#endif
