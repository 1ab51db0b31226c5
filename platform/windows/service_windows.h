/* Inside the Windows service layer (platform/windows/service_windows.c,
 * which implements platform/service.h on the Service Control Manager):
 * the two calls its tests and the test helper program use directly. */
#ifndef CORDON_PLATFORM_WINDOWS_SERVICE_WINDOWS_H
#define CORDON_PLATFORM_WINDOWS_SERVICE_WINDOWS_H

#include <stddef.h>

/* The SID of the virtual account NT SERVICE\<name>: S-1-5-80- and the
 * SHA-1 of the upper-cased UTF-16 name as five 32-bit numbers. */
int service_windows_sid(const char *name, char *out, size_t len);

/* The service's main under the SCM (what service_run does, without the
 * log): when the SCM started this process, reports RUNNING, calls
 * run(ctx) and returns its result after reporting STOPPED; a STOP or
 * SHUTDOWN control calls stop(ctx) from the SCM's thread. Returns
 * CORDON_E_USAGE without calling anything when the process was not
 * started by the SCM. name NULL: "cordon-agent". */
int service_windows_dispatch(const char *name, int (*run)(void *ctx), void (*stop)(void *ctx),
                             void *ctx);

#endif
