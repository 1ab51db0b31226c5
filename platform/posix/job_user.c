#include "platform/posix/job_user.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int posix_job_user_lookup(const char *job_user, bool agent_is_root, struct posix_job_user *out,
                          char *why, size_t why_len) {
  struct passwd pwbuf, *pw = NULL;
  char buf[4096];
  if (agent_is_root) {
    const char *name = job_user ? job_user : "";
    getpwnam_r(name, &pwbuf, buf, sizeof(buf), &pw);
    if (!pw) {
      snprintf(why, why_len, "job user '%s' does not exist", name);
      return -EPERM;
    }
    if (pw->pw_uid == 0 || pw->pw_gid == 0) {
      snprintf(why, why_len, "job user '%s' is root", name);
      return -EPERM;
    }
  } else {
    getpwuid_r(getuid(), &pwbuf, buf, sizeof(buf), &pw);
    if (!pw) {
      snprintf(why, why_len, "uid %u has no passwd entry", getuid());
      return -EPERM;
    }
  }
  /* the passwd entry, never $HOME: the forbidden set hangs on it */
  const char *home = pw->pw_dir;
  struct posix_job_user u = {.uid = pw->pw_uid, .gid = pw->pw_gid};
  u.name = strdup(pw->pw_name);
  u.home = strdup(home);
  if (!u.name || !u.home) {
    posix_job_user_release(&u);
    return -ENOMEM;
  }
  *out = u;
  return 0;
}

void posix_job_user_release(struct posix_job_user *u) {
  if (!u)
    return;
  free(u->name);
  free(u->home);
  u->name = u->home = NULL;
}

int posix_job_user_probe(const char *job_user, struct posix_job_user_probe *out) {
  memset(out, 0, sizeof(*out));
  out->is_root = geteuid() == 0;
  int r = posix_job_user_lookup(job_user, out->is_root, &out->u, out->error, sizeof(out->error));
  if (r == -ENOMEM)
    return r;
  out->ok = r == 0;
  return 0;
}

json_t *posix_job_user_json(const struct posix_job_user_probe *p) {
  json_t *ju = json_object();
  json_object_set_new(ju, "agent_is_root", json_boolean(p->is_root));
  json_object_set_new(ju, "name", p->u.name ? json_string(p->u.name) : json_null());
  json_object_set_new(ju, "uid", p->ok ? json_integer(p->u.uid) : json_null());
  json_object_set_new(ju, "home", p->u.home ? json_string(p->u.home) : json_null());
  json_object_set_new(ju, "error", p->error[0] ? json_string(p->error) : json_null());
  return ju;
}
