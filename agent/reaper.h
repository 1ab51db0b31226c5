/* A job never outlives its agent (Linux). bwrap's --die-with-parent does
 * not reach the init of the job's PID namespace (the kernel drops a
 * parent-death SIGKILL to a namespace's init), so after a kill -9 of the
 * agent its running jobs went on, unsupervised and past their timeouts,
 * until the agent's next start swept them (sandbox_sweep_leftovers). The
 * reaper is a small process forked by `run` once it holds the agent lock,
 * before any thread starts: it waits on a pipe only the agent writes to;
 * when the pipe ends (the agent is gone, whatever killed it) it takes the
 * agent lock (held: a new agent runs, which sweeps at its own start) and
 * kills and removes this instance's job cgroups (sandbox_reap_instance),
 * then exits. It ignores the signals
 * a terminal or a service manager sends the agent's group: only the
 * pipe's end makes it act. Elsewhere (Windows: Job Objects close with the
 * agent; macOS: no containers) it is not started. */
#ifndef CORDON_AGENT_REAPER_H
#define CORDON_AGENT_REAPER_H

/* Start the reaper for config_dir (whose agent lock the caller holds, with
 * lock_name its file). 0, or a negated errno (logged by the caller: the
 * jobs are then swept at the next start only). */
int agent_reaper_start(const char *config_dir, const char *lock_name);

#endif
