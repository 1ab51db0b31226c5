/* Who runs a job (docs/DESIGN.md section 4), shared by the Linux and macOS
 * layers: a root agent runs jobs as job_user, which must exist and must not
 * be root; any other agent runs them as itself. */
#ifndef CORDON_PLATFORM_POSIX_JOB_USER_H
#define CORDON_PLATFORM_POSIX_JOB_USER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct posix_job_user {
  uid_t uid;
  gid_t gid;
  char *name; /* owned */
  char *home; /* owned: the account's home from its passwd entry (never $HOME) */
};

/* 0 and *out on success; -EPERM with a one-line reason in why when the
 * account is missing or is root; -ENOMEM. */
int posix_job_user_lookup(const char *job_user, bool agent_is_root, struct posix_job_user *out,
                          char *why, size_t why_len);
void posix_job_user_release(struct posix_job_user *u);

/* The job user as a probe finds it. */
struct posix_job_user_probe {
  bool is_root;    /* the agent runs as root: jobs run as job_user */
  bool ok;         /* jobs may run: u is set */
  char error[160]; /* why they may not */
  struct posix_job_user u;
};

/* Look the job user up for an agent of this euid. 0 (ok or not), or
 * -ENOMEM. */
int posix_job_user_probe(const char *job_user, struct posix_job_user_probe *out);
/* {"agent_is_root", "name", "uid", "home", "error"} for `status`. */
json_t *posix_job_user_json(const struct posix_job_user_probe *p);

#endif
