/* Start-up recovery of `cordon-agent run`: what a crash (kill -9, a power
 * cut) can leave in the config directory, finished or removed before the
 * first connection (docs/OPERATIONS.md, "Faults"):
 *
 * - SEEN/.<id>.tmp: the agent died while it accepted the job: the entry is
 *   removed and the job spooled as running, so it is reported
 *   agent_restarted (the job never ran);
 * - SPOOL/.<id>.running.tmp: the same one step later: it becomes
 *   SPOOL/<id>.running (agent_restarted); SPOOL/.<id>.result.tmp and any
 *   other temp: removed (the job's .running still says it died);
 * - CONFIG/jobs/<id>: a staging directory whose job is over (its result
 *   is spooled) or that holds nothing but empty directories is removed.
 *   A staging directory of a job that was running is removed by
 *   agent_dispatch_recover; one of another kind (an `exec` in progress,
 *   with files) is left alone;
 * - CONFIG/jobs/exec-*: the ad-hoc package of a `cordon-agent exec`: removed
 *   when it is older than this sweep and no process holds its
 *   AGENT_EXEC_LOCK (its exec is gone; a directory without the file, from
 *   an earlier version, counts as unheld).
 *
 * Call agent_recover_sandbox, agent_recover_temps, then
 * agent_dispatch_recover, then agent_recover_staging, with the agent lock
 * held. Nothing logged (the counts are returned). */
#ifndef CORDON_AGENT_RECOVER_H
#define CORDON_AGENT_RECOVER_H

#include "agent/seen.h"
#include "agent/spool.h"

/* The temps of SEEN and SPOOL: returns how many files were removed. */
int agent_recover_temps(const struct agent_spool *sp, const struct agent_seen *seen);
/* The leftover staging directories below CONFIG/jobs: returns how many
 * were removed. */
int agent_recover_staging(const char *config_dir, const struct agent_spool *sp);
/* In CONFIG/jobs/exec-*: held locked by the `cordon-agent exec` that made
 * the directory, for as long as it exists. */
#define AGENT_EXEC_LOCK ".exec.lock"
/* What earlier agent processes of this config directory left running or
 * allocated in the sandbox (sandbox_sweep_leftovers: on Linux the job
 * cgroups below this instance's parent, their processes killed). Call
 * once, with the agent lock held, before any job. Returns how many
 * processes were killed. */
int agent_recover_sandbox(const char *config_dir);

#endif
