#include "platform/linux/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "platform/posix/launch.h"

void cgroup_job_init(struct cgroup_job *cg) {
  memset(cg, 0, sizeof(*cg));
  cg->procs_fd[0] = cg->procs_fd[1] = cg->procs_fd[2] = -1;
  cg->v2_dir_fd = -1;
}

static int write_file(const char *dir, const char *name, const char *value) {
  char path[4096];
  int pn = snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (pn < 0 || (size_t)pn >= sizeof(path))
    return -ENAMETOOLONG; /* a cut path would name another file */
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  ssize_t n = write(fd, value, strlen(value));
  int r = n < 0 ? -errno : 0;
  close(fd);
  return r;
}

static int read_file(const char *dir, const char *name, char *buf, size_t len) {
  char path[4096];
  int pn = snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (pn < 0 || (size_t)pn >= sizeof(path))
    return -ENAMETOOLONG; /* a cut path would name another file */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  ssize_t n = read(fd, buf, len - 1);
  int r = n < 0 ? -errno : 0;
  close(fd);
  buf[n < 0 ? 0 : n] = '\0';
  return r;
}

static bool is_fs(const char *path, long magic) {
  struct statfs sf;
  return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

/* Our own cgroup path for a v1 controller ("memory") or v2 (ctrl NULL). */
static int own_cgroup(const char *ctrl, char *out, size_t len) {
  FILE *f = fopen("/proc/self/cgroup", "re");
  if (!f)
    return -errno;
  char line[4096];
  int r = -ENOENT;
  while (fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    *c2 = '\0';
    const char *ctrls = c1 + 1;
    bool match = false;
    if (!ctrl) {
      match = strcmp(line, "0") == 0 && *ctrls == '\0';
    } else {
      char tmp[256];
      snprintf(tmp, sizeof(tmp), "%s", ctrls);
      for (char *save, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (strcmp(t, ctrl) == 0)
          match = true;
    }
    if (match) {
      snprintf(out, len, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
      r = 0;
      break;
    }
  }
  fclose(f);
  return r;
}

static const char *v2_mount(void) {
  if (is_fs("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC))
    return "/sys/fs/cgroup";
  if (is_fs("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC))
    return "/sys/fs/cgroup/unified";
  return NULL;
}

static bool has_word(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = strstr(list, word); p; p = strstr(p + 1, word))
    if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
      return true;
  return false;
}

static char *make_child(const char *parent, const char *job_id) {
  char *dir = NULL;
  if (asprintf(&dir, "%s/cordon-%s", parent, job_id) < 0)
    return NULL;
  if (mkdir(dir, 0700) < 0) {
    free(dir);
    return NULL;
  }
  return dir;
}

/* The file the child writes "0" to: v1 `tasks`, v2 `cgroup.procs`. */
static int open_join(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  return open(path, O_WRONLY | O_CLOEXEC);
}

/* The directory job cgroups go in: the agent's own v2 cgroup, or its
 * parent when the agent already sits in its own leaf. */
static int v2_parent(char *out, size_t len) {
  const char *mnt = v2_mount();
  char own[2048];
  if (!mnt || own_cgroup(NULL, own, sizeof(own)) < 0)
    return -ENOENT;
  size_t n = strlen(own), k = strlen("/" CGROUP_AGENT_LEAF);
  if (n >= k && strcmp(own + n - k, "/" CGROUP_AGENT_LEAF) == 0)
    own[n - k] = '\0';
  snprintf(out, len, "%s%s", mnt, own);
  return 0;
}

static bool v2_delegates(const char *parent) {
  char ctl[512];
  return read_file(parent, "cgroup.subtree_control", ctl, sizeof(ctl)) == 0 &&
         has_word(ctl, "memory") && has_word(ctl, "pids");
}

/* Enable memory and pids for parent's children. When parent holds
 * processes (the agent), cgroup v2 refuses (EBUSY): move the agent into
 * a leaf child first. Fails when other processes share the cgroup. */
static int v2_enable(const char *parent) {
  char ctl[512];
  if (read_file(parent, "cgroup.controllers", ctl, sizeof(ctl)) < 0 || !has_word(ctl, "memory") ||
      !has_word(ctl, "pids"))
    return -ENOTSUP;
  int r = write_file(parent, "cgroup.subtree_control", "+memory +pids");
  if (r != -EBUSY)
    return r;
  /* only when the agent is alone there (a service's cgroup), never in a
   * login session's scope shared with a shell */
  char procs[256];
  if (read_file(parent, "cgroup.procs", procs, sizeof(procs)) < 0 ||
      strtol(procs, NULL, 10) != (long)getpid() || strchr(procs, '\n') != procs + strlen(procs) - 1)
    return -EBUSY;
  char leaf[4200];
  snprintf(leaf, sizeof(leaf), "%s/" CGROUP_AGENT_LEAF, parent);
  if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
    return -errno;
  char pid[24];
  snprintf(pid, sizeof(pid), "%ld", (long)getpid());
  if ((r = write_file(leaf, "cgroup.procs", pid)) < 0)
    return r;
  return write_file(parent, "cgroup.subtree_control", "+memory +pids");
}

static int try_v2(struct cgroup_job *cg, const char *job_id, uint64_t mem_bytes,
                  unsigned max_pids) {
  char parent[4096];
  if (v2_parent(parent, sizeof(parent)) < 0)
    return -ENOENT;
  if (!v2_delegates(parent) && v2_enable(parent) < 0)
    return -ENOTSUP;
  char *dir = make_child(parent, job_id);
  if (!dir)
    return -errno;
  char v[32];
  snprintf(v, sizeof(v), "%" PRIu64, mem_bytes);
  int r = write_file(dir, "memory.max", v);
  if (r == 0)
    (void)write_file(dir, "memory.swap.max", "0");
  snprintf(v, sizeof(v), "%u", max_pids);
  if (r == 0)
    r = write_file(dir, "pids.max", v);
  if (r == 0 && (cg->procs_fd[0] = open_join(dir, "cgroup.procs")) < 0)
    r = -errno;
  if (r == 0 && (cg->v2_dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
    r = -errno;
  if (r < 0) {
    if (cg->procs_fd[0] >= 0)
      close(cg->procs_fd[0]);
    cg->procs_fd[0] = -1;
    rmdir(dir);
    free(dir);
    return r;
  }
  cg->version = 2;
  cg->mem_dir = dir;
  cg->pids_dir = strdup(dir);
  cg->cpu_dir = strdup(dir); /* cpu.stat exists without the cpu controller */
  if (!cg->pids_dir || !cg->cpu_dir)
    return -ENOMEM;
  return 0;
}

static char *try_v1(const char *ctrl, const char *job_id, const char *file, const char *value,
                    const char *file2, const char *value2) {
  char mnt[64], own[2048], parent[4096];
  snprintf(mnt, sizeof(mnt), "/sys/fs/cgroup/%s", ctrl);
  if (!is_fs(mnt, CGROUP_SUPER_MAGIC) || own_cgroup(ctrl, own, sizeof(own)) < 0)
    return NULL;
  snprintf(parent, sizeof(parent), "%s%s", mnt, own);
  char *dir = make_child(parent, job_id);
  if (!dir)
    return NULL;
  if (file && write_file(dir, file, value) < 0) {
    rmdir(dir);
    free(dir);
    return NULL;
  }
  if (file2)
    (void)write_file(dir, file2, value2); /* memsw exists only with swap accounting */
  return dir;
}

int cgroup_job_create(struct cgroup_job *cg, const char *job_id, uint64_t mem_bytes,
                      unsigned max_pids) {
  int r = try_v2(cg, job_id, mem_bytes, max_pids);
  if (r == -ENOMEM)
    return r;
  if (r == 0)
    return 0;
  char mem[32], pids[32];
  snprintf(mem, sizeof(mem), "%" PRIu64, mem_bytes);
  snprintf(pids, sizeof(pids), "%u", max_pids);
  cg->mem_dir =
      try_v1("memory", job_id, "memory.limit_in_bytes", mem, "memory.memsw.limit_in_bytes", mem);
  cg->pids_dir = try_v1("pids", job_id, "pids.max", pids, NULL, NULL);
  cg->cpu_dir = try_v1("cpuacct", job_id, NULL, NULL, NULL, NULL);
  char **dirs[3] = {&cg->mem_dir, &cg->pids_dir, &cg->cpu_dir};
  int n = 0;
  for (int i = 0; i < 3; i++) {
    if (!*dirs[i])
      continue;
    if ((cg->procs_fd[n] = open_join(*dirs[i], "tasks")) >= 0) {
      n++;
      continue;
    }
    /* a dir the job cannot join limits nothing */
    rmdir(*dirs[i]);
    free(*dirs[i]);
    *dirs[i] = NULL;
  }
  if (cg->mem_dir || cg->pids_dir || cg->cpu_dir)
    cg->version = 1;
  return 0;
}

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* SIGKILL every process listed in dir's cgroup.procs until none is left.
 * A killed process leaves its cgroup when it exits: each round waits for
 * the killed ones' pidfds (at most 20 ms), not a fixed sleep; without
 * pidfds (an older kernel) it sleeps 1 ms. */
static unsigned kill_dir(const char *dir) {
  unsigned killed = 0;
  for (int round = 0; round < 1000; round++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "re");
    if (!f)
      return killed;
    long pid;
    bool any = false;
    struct pollfd pf[32];
    nfds_t npf = 0;
    while (fscanf(f, "%ld", &pid) == 1) {
      /* the pidfd first: it names this process even if the pid is reused */
      int pfd = npf < sizeof(pf) / sizeof(pf[0]) ? (int)syscall(SYS_pidfd_open, (pid_t)pid, 0) : -1;
      if (kill((pid_t)pid, SIGKILL) == 0 && round == 0)
        killed++;
      if (pfd >= 0)
        pf[npf++] = (struct pollfd){pfd, POLLIN, 0};
      any = true;
    }
    fclose(f);
    if (!any)
      break;
    if (npf > 0) {
      /* readable once the process has exited, which is when it leaves */
      for (nfds_t i = 0; i < npf; i++) {
        (void)poll(&pf[i], 1, 20);
        close(pf[i].fd);
      }
    } else {
      struct timespec ts = {0, 1000 * 1000}; /* a dying tree leaves within a few ms */
      nanosleep(&ts, NULL);
    }
  }
  return killed;
}

/* The job's distinct directories (v2: one for all controllers). */
static size_t distinct_dirs(const struct cgroup_job *cg, char *out[3]) {
  char *all[3] = {cg->pids_dir, cg->mem_dir, cg->cpu_dir};
  size_t n = 0;
  for (int i = 0; i < 3; i++) {
    bool seen = !all[i];
    for (size_t k = 0; k < n && !seen; k++)
      seen = strcmp(out[k], all[i]) == 0;
    if (!seen)
      out[n++] = all[i];
  }
  return n;
}

unsigned cgroup_job_kill(struct cgroup_job *cg) {
  char *dirs[3];
  size_t nd = distinct_dirs(cg, dirs);
  unsigned n = 0;
  for (size_t i = 0; i < nd; i++) {
    unsigned m = kill_dir(dirs[i]);
    n = m > n ? m : n;
  }
  return n;
}

int64_t cgroup_job_cpu_usec(const struct cgroup_job *cg) {
  if (!cg->cpu_dir)
    return -1;
  char buf[1024];
  if (cg->version == 2) {
    if (read_file(cg->cpu_dir, "cpu.stat", buf, sizeof(buf)) < 0)
      return -1;
    const char *p = strstr(buf, "usage_usec ");
    return p ? (int64_t)strtoull(p + 11, NULL, 10) : -1;
  }
  if (read_file(cg->cpu_dir, "cpuacct.usage", buf, sizeof(buf)) < 0)
    return -1;
  return (int64_t)(strtoull(buf, NULL, 10) / 1000); /* nanoseconds */
}

int cgroup_job_oom_killed(const struct cgroup_job *cg) {
  if (!cg->mem_dir)
    return -1;
  char buf[2048];
  if (read_file(cg->mem_dir, cg->version == 2 ? "memory.events" : "memory.oom_control", buf,
                sizeof(buf)) < 0)
    return -1;
  const char *p = strstr(buf, "oom_kill ");
  if (!p)
    return -1;
  return strtoul(p + 9, NULL, 10) > 0 ? 1 : 0;
}

void cgroup_job_release(struct cgroup_job *cg) {
  if (!cg)
    return;
  cgroup_job_kill(cg);
  for (int i = 0; i < 3; i++)
    if (cg->procs_fd[i] >= 0)
      close(cg->procs_fd[i]);
  if (cg->v2_dir_fd >= 0)
    close(cg->v2_dir_fd);
  char *dirs[3];
  size_t nd = distinct_dirs(cg, dirs);
  for (size_t i = 0; i < nd; i++) {
    for (int tries = 0; tries < 100 && rmdir(dirs[i]) < 0 && errno == EBUSY; tries++) {
      struct timespec ts = {0, 2 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  free(cg->mem_dir);
  free(cg->pids_dir);
  free(cg->cpu_dir);
  cgroup_job_init(cg);
}

unsigned cgroup_job_reap(const char *job_id) {
  struct cgroup_job cg;
  cgroup_job_init(&cg);
  char own[2048], path[4200], parent[4096];
  if (v2_parent(parent, sizeof(parent)) == 0) {
    snprintf(path, sizeof(path), "%s/cordon-%s", parent, job_id);
    if (access(path, F_OK) == 0) {
      cg.version = 2;
      cg.mem_dir = strdup(path);
    }
  }
  static const char *const ctrls[] = {"memory", "pids", "cpuacct"};
  for (int i = 0; i < 3 && cg.version != 2; i++) {
    if (own_cgroup(ctrls[i], own, sizeof(own)) < 0)
      continue;
    snprintf(path, sizeof(path), "/sys/fs/cgroup/%s%s/cordon-%s", ctrls[i], own, job_id);
    if (access(path, F_OK) == 0) {
      cg.version = 1;
      char **slot = i == 0 ? &cg.mem_dir : i == 1 ? &cg.pids_dir : &cg.cpu_dir;
      *slot = strdup(path);
    }
  }
  unsigned n = cgroup_job_kill(&cg);
  cgroup_job_release(&cg);
  return n;
}

static bool v1_writable(const char *ctrl) {
  char mnt[64], own[2048], parent[4096];
  snprintf(mnt, sizeof(mnt), "/sys/fs/cgroup/%s", ctrl);
  if (!is_fs(mnt, CGROUP_SUPER_MAGIC) || own_cgroup(ctrl, own, sizeof(own)) < 0)
    return false;
  snprintf(parent, sizeof(parent), "%s%s", mnt, own);
  return access(parent, W_OK | X_OK) == 0;
}

static bool v2_usable(void) {
  char parent[4096], ctl[512];
  return v2_parent(parent, sizeof(parent)) == 0 && access(parent, W_OK | X_OK) == 0 &&
         (v2_delegates(parent) || (read_file(parent, "cgroup.controllers", ctl, sizeof(ctl)) == 0 &&
                                   has_word(ctl, "memory") && has_word(ctl, "pids")));
}

void cgroup_available(struct cgroup_avail *out) {
  memset(out, 0, sizeof(*out));
  if (v2_usable()) {
    out->memory = out->pids = out->cpu = true;
    return;
  }
  out->memory = v1_writable("memory");
  out->pids = v1_writable("pids");
  out->cpu = v1_writable("cpuacct");
}

const char *cgroup_join_method(void) {
  if (v2_usable())
    return launch_clone3_into_cgroup_ok() ? "clone3(CLONE_INTO_CGROUP)" : "cgroup.procs";
  struct cgroup_avail av;
  cgroup_available(&av);
  return av.memory || av.pids || av.cpu ? "tasks" : NULL;
}

json_t *cgroup_probe_json(void) {
  json_t *o = json_object();
  const char *mnt = v2_mount();
  char own[2048], parent[4096], buf[512];
  json_object_set_new(o, "v2_mount", mnt ? json_string(mnt) : json_null());
  if (mnt && own_cgroup(NULL, own, sizeof(own)) == 0) {
    snprintf(parent, sizeof(parent), "%s%s", mnt, own);
    json_object_set_new(o, "v2_path", json_string(parent));
    if (read_file(parent, "cgroup.subtree_control", buf, sizeof(buf)) == 0) {
      buf[strcspn(buf, "\n")] = '\0';
      json_object_set_new(o, "v2_delegated", json_string(buf));
    }
  }
  struct cgroup_avail av;
  cgroup_available(&av);
  json_object_set_new(
      o, "job_tree",
      json_pack("{s:b, s:b, s:b}", "memory", av.memory, "pids", av.pids, "cpu", av.cpu));
  const char *join = cgroup_join_method();
  json_object_set_new(o, "join", join ? json_string(join) : json_null());
  static const char *const ctrls[] = {"memory", "pids", "cpuacct"};
  for (int i = 0; i < 3; i++) {
    char mnt1[64], key[32];
    snprintf(mnt1, sizeof(mnt1), "/sys/fs/cgroup/%s", ctrls[i]);
    snprintf(key, sizeof(key), "v1_%s", ctrls[i]);
    if (is_fs(mnt1, CGROUP_SUPER_MAGIC) && own_cgroup(ctrls[i], own, sizeof(own)) == 0) {
      snprintf(parent, sizeof(parent), "%s%s", mnt1, own);
      json_t *c = json_object();
      json_object_set_new(c, "path", json_string(parent));
      json_object_set_new(c, "writable", json_boolean(access(parent, W_OK) == 0));
      json_object_set_new(o, key, c);
    } else {
      json_object_set_new(o, key, json_null());
    }
  }
  return o;
}
