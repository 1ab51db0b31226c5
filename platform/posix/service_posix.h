/* The POSIX part of the service layer (platform/service.h), shared by the
 * systemd (platform/linux/service_linux.c) and launchd
 * (platform/macos/service_macos.c) implementations.
 *
 * service_posix.c owns the service.h calls that take options: it fills in
 * the invoking user when o->home is unset ($HOME when absolute, else the
 * passwd entry, and getuid()) and hands over to the layer's service_os_*
 * function, which therefore always sees o->home set (possibly NULL when
 * there is no user). Same contracts as in service.h.
 */
#ifndef CORDON_PLATFORM_POSIX_SERVICE_POSIX_H
#define CORDON_PLATFORM_POSIX_SERVICE_POSIX_H

#include <stddef.h>

#include "platform/service.h"

/* Implemented by the Linux and macOS layers. */
int service_os_render(const struct service_options *o, char **out_text);
int service_os_definition_path(const struct service_options *o, char *out, size_t len);
int service_os_install(const struct service_options *o, struct cordon_diag *diag);
int service_os_uninstall(const struct service_options *o, struct cordon_diag *diag);
int service_os_start(const struct service_options *o, struct cordon_diag *diag);
int service_os_stop(const struct service_options *o, struct cordon_diag *diag);
int service_os_status(const struct service_options *o, json_t **out_status);

/* Run the service manager's tool: argv[0] is an absolute path, envp its
 * whole environment, stdin /dev/null. With capture, stdout and stderr go
 * there (NUL-terminated; the first cap_len - 1 bytes are kept, the rest is
 * read and dropped so the tool never blocks); without, to /dev/null.
 * Returns the exit status (128 + the signal when killed) or a negated
 * errno when it could not be started. */
int posix_service_exec(char *const argv[], char *const envp[], char *capture, size_t cap_len);

/* Install text as dir/name with mode 0644 (whatever the umask): written
 * beside it, fsynced and renamed over it (core_write_file_atomic). On
 * failure diag says "cannot install <dir>/<name>: <reason>". */
int posix_service_write_definition(const char *dir, const char *name, const char *text,
                                   struct cordon_diag *diag);

#endif
