/* Clocks. Deadlines and durations use the monotonic clock, which never
 * steps; timestamps that are stored or sent (job created/expires, ticket
 * expiry) use the wall clock. Both in milliseconds. */
#ifndef CORDON_CORE_CLOCK_H
#define CORDON_CORE_CLOCK_H

#include <stdint.h>

/* Milliseconds of CLOCK_MONOTONIC: for timeouts and measured durations. */
int64_t core_mono_ms(void);
/* Milliseconds of a clock that never steps and goes on while the machine
 * sleeps: CLOCK_BOOTTIME where the system has it (Linux); elsewhere
 * CLOCK_MONOTONIC, which on macOS counts sleep too (docs/DESIGN.md, "The
 * server's clock on the agent"). For time carried across a suspend: the
 * agent's estimate of the server's clock. */
int64_t core_boot_ms(void);
/* Milliseconds since the Unix epoch (CLOCK_REALTIME). */
uint64_t core_wall_ms(void);

#endif
