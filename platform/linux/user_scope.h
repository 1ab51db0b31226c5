/* A cgroup for a per-user agent that has none: a transient systemd user
 * scope with Delegate=yes.
 *
 * A per-user agent started from a login shell sits in its session's scope,
 * which is not delegated to it: it may create no job cgroup, and memory,
 * processes and CPU fall back to per-process rlimits (docs/SECURITY.md).
 * Where the user has a systemd user manager (every desktop session does)
 * the agent can ask it for a scope of its own, delegated to the user, and
 * re-execute itself in it: `systemd-run --user --scope -p Delegate=yes
 * --quiet --collect -- AGENT ARGS...` (the same process: systemd-run makes
 * the scope with its own pid, then execs the agent). cgroup.c then finds
 * the scope delegated and makes the job cgroups below it.
 *
 * The decision is a pure function of the facts, unit-tested; reading the
 * facts and the trial run touch the machine. NOT VERIFIED on the test
 * hosts, which run no systemd: only the decision and the argv are tested.
 */
#ifndef CORDON_PLATFORM_LINUX_USER_SCOPE_H
#define CORDON_PLATFORM_LINUX_USER_SCOPE_H

#include <stdbool.h>
#include <stddef.h>

#include "platform/strv.h"

/* Set in the environment of the re-executed agent: it is in its scope (or
 * tried), and never asks again. */
#define USER_SCOPE_ENV "CORDON_USER_SCOPE"

struct user_scope_facts {
  bool agent_is_root; /* a root agent makes its own cgroups */
  bool has_cgroup;    /* memory and pids job cgroups can be made already */
  bool in_scope;      /* USER_SCOPE_ENV is set */
  /* started by a service manager (its parent is systemd): a service's main
   * process moved out of its unit would leave the unit empty */
  bool unit_main;
  bool unified;     /* /sys/fs/cgroup is cgroup2: user managers delegate only there */
  bool manager;     /* the user manager's socket: RUNTIME/systemd/private, ours */
  bool systemd_run; /* systemd-run is there to ask it */
};

enum user_scope_choice {
  USER_SCOPE_NOT_NEEDED, /* root, or a cgroup already */
  USER_SCOPE_ENTER,      /* re-execute in a delegated user scope */
  USER_SCOPE_UNAVAILABLE /* rlimits: the machine gives no cgroup */
};

/* What to do, and why (a static string, for status and logs). */
enum user_scope_choice user_scope_decide(const struct user_scope_facts *f, const char **out_why);

/* The facts of this process. runtime_dir: $XDG_RUNTIME_DIR, or NULL for
 * /run/user/<uid>. */
void user_scope_facts_read(const char *runtime_dir, struct user_scope_facts *out);

/* The user manager's private socket for runtime_dir (NULL: /run/user/<uid>)
 * into buf: 0 or -ENAMETOOLONG. */
int user_scope_manager_socket(const char *runtime_dir, char *buf, size_t len);

/* systemd-run's argv that runs self with argv[1..argc) in a delegated user
 * scope, into out (empty). 0 or -ENOMEM. */
int user_scope_argv(const char *systemd_run, const char *self, int argc, char *const *argv,
                    struct strv *out);

/* Where a per-user agent has no cgroup and the decision says so: try a
 * scope once (systemd-run ... /bin/true, 5 s at most) and, when that
 * works, exec argv in one (USER_SCOPE_ENV and XDG_RUNTIME_DIR set).
 * Returns only when it does not: 0 (nothing to do, or not possible:
 * *out_why says why) or a negated errno (the exec failed). */
int user_scope_enter(int argc, char *const *argv, const char **out_why);

#endif
