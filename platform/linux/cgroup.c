#include "platform/linux/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "platform/linux/pidfd.h"
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

int cgroup_parse_self(const char *text, const char *ctrl, char *out, size_t len) {
  for (const char *line = text; *line;) {
    const char *eol = strchr(line, '\n');
    size_t n = eol ? (size_t)(eol - line) : strlen(line);
    const char *next = eol ? eol + 1 : line + n;
    const char *c1 = memchr(line, ':', n);
    const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - line)) : NULL;
    if (!c2) {
      line = next;
      continue;
    }
    /* hierarchy-ID:controller-list:path; the path may hold ':' itself */
    const char *id = line, *ctrls = c1 + 1, *path = c2 + 1;
    size_t id_len = (size_t)(c1 - id), ctrls_len = (size_t)(c2 - ctrls);
    size_t path_len = n - (size_t)(path - line);
    bool match = false;
    if (!ctrl) {
      match = id_len == 1 && id[0] == '0' && ctrls_len == 0;
    } else {
      size_t k = strlen(ctrl);
      for (const char *t = ctrls; t < c2 && !match;) {
        const char *comma = memchr(t, ',', (size_t)(c2 - t));
        const char *end = comma ? comma : c2;
        match = (size_t)(end - t) == k && memcmp(t, ctrl, k) == 0;
        t = end + 1;
      }
      match = match && !(id_len == 1 && id[0] == '0');
    }
    if (!match) {
      line = next;
      continue;
    }
    /* a path the mount cannot show: outside our cgroup namespace's root
     * ("/../x"), removed (" (deleted)"), or not absolute */
    if (path_len == 0 || path[0] != '/')
      return -EINVAL;
    for (size_t i = 0; i + 1 < path_len; i++)
      if (path[i] == '/' && path[i + 1] == '.' &&
          (i + 2 == path_len || path[i + 2] == '/' ||
           (path[i + 2] == '.' && (i + 3 == path_len || path[i + 3] == '/'))))
        return -EINVAL;
    static const char deleted[] = " (deleted)";
    if (path_len >= sizeof(deleted) - 1 &&
        memcmp(path + path_len - (sizeof(deleted) - 1), deleted, sizeof(deleted) - 1) == 0)
      return -EINVAL;
    if (path_len == 1)
      path_len = 0; /* the root: "" so that mount + path names it */
    if (path_len >= len)
      return -ENAMETOOLONG;
    memcpy(out, path, path_len);
    out[path_len] = '\0';
    return 0;
  }
  return -ENOENT;
}

/* Our own cgroup path for a v1 controller ("memory") or v2 (ctrl NULL). */
static int own_cgroup(const char *ctrl, char *out, size_t len) {
  int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  size_t cap = 65536, got = 0;
  char *buf = malloc(cap);
  int r = buf ? 0 : -ENOMEM;
  while (r == 0 && got < cap - 1) {
    ssize_t n = read(fd, buf + got, cap - 1 - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      r = -errno;
    else if (n == 0)
      break;
    else
      got += (size_t)n;
  }
  close(fd);
  if (r == 0 && got == cap - 1)
    r = -E2BIG; /* a cut file could end in the middle of our line */
  if (r == 0) {
    buf[got] = '\0';
    r = cgroup_parse_self(buf, ctrl, out, len);
  }
  free(buf);
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

/* pid is this process or a child of it (the agent's reaper). */
static bool self_or_child(long pid) {
  if (pid == (long)getpid())
    return true;
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0)
    return false;
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')'); /* "pid (comm) S ppid ...", comm may hold ')' */
  char state;
  long ppid;
  return rp && sscanf(rp + 1, " %c %ld", &state, &ppid) == 2 && ppid == (long)getpid();
}

/* Enable memory and pids for parent's children. When parent holds
 * processes (the agent), cgroup v2 refuses (EBUSY): move the agent and
 * its children (the reaper) into a leaf child first. Fails when any other
 * process shares the cgroup. */
static int v2_enable(const char *parent) {
  char ctl[512];
  if (read_file(parent, "cgroup.controllers", ctl, sizeof(ctl)) < 0 || !has_word(ctl, "memory") ||
      !has_word(ctl, "pids"))
    return -ENOTSUP;
  int r = write_file(parent, "cgroup.subtree_control", "+memory +pids");
  if (r != -EBUSY)
    return r;
  /* only when nothing but the agent is there (a service's cgroup), never
   * in a login session's scope shared with a shell */
  char procs[1024];
  long pids[16];
  size_t np = 0;
  bool self = false, others = false;
  if (read_file(parent, "cgroup.procs", procs, sizeof(procs)) < 0 ||
      strlen(procs) >= sizeof(procs) - 1)
    return -EBUSY; /* unreadable, or more than we would move */
  for (char *p = procs, *end; *p; p = end) {
    long pid = strtol(p, &end, 10);
    if (end == p)
      break;
    if (pid == (long)getpid())
      self = true;
    if (np == sizeof(pids) / sizeof(pids[0]) || !self_or_child(pid))
      others = true;
    else
      pids[np++] = pid;
  }
  if (!self || others)
    return -EBUSY;
  char leaf[4200];
  snprintf(leaf, sizeof(leaf), "%s/" CGROUP_AGENT_LEAF, parent);
  if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
    return -errno;
  for (size_t i = 0; i < np; i++) {
    char pid[24];
    snprintf(pid, sizeof(pid), "%ld", pids[i]);
    r = write_file(leaf, "cgroup.procs", pid);
    if (r < 0 && !(r == -ESRCH && pids[i] != (long)getpid())) /* a child that just ended */
      return r;
  }
  return write_file(parent, "cgroup.subtree_control", "+memory +pids");
}

/* ---- the instance parent and the job directories (see cgroup.h) ---- */

static const char *const v1_ctrls[3] = {"memory", "pids", "cpuacct"};

/* Where job cgroups of v1 hierarchy ctrl may go: our own cgroup there. */
static int v1_base(const char *ctrl, char *out, size_t len) {
  char mnt[64], own[2048];
  snprintf(mnt, sizeof(mnt), "/sys/fs/cgroup/%s", ctrl);
  if (!is_fs(mnt, CGROUP_SUPER_MAGIC) || own_cgroup(ctrl, own, sizeof(own)) < 0)
    return -ENOENT;
  int n = snprintf(out, len, "%s%s", mnt, own);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* v2: the same, with memory and pids delegated to its children. */
static int v2_base(char *out, size_t len) {
  if (v2_parent(out, len) < 0)
    return -ENOENT;
  if (!v2_delegates(out) && v2_enable(out) < 0)
    return -ENOTSUP;
  return 0;
}

static uint64_t fnv1a(uint64_t h, const char *s) {
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
  return h;
}

void cgroup_instance_name(const char *state_dir, uid_t uid, char out[CGROUP_INSTANCE_NAME_SIZE]) {
  char real[PATH_MAX], who[24];
  const char *dir = !state_dir ? "" : realpath(state_dir, real) ? real : state_dir;
  snprintf(who, sizeof(who), "%lu:", (unsigned long)uid);
  uint64_t h = fnv1a(fnv1a(0xcbf29ce484222325ULL, who), dir);
  snprintf(out, CGROUP_INSTANCE_NAME_SIZE, CGROUP_INSTANCE_PREFIX "%016" PRIx64, h);
}

/* base/inst, made when missing; on v2 with memory and pids enabled for
 * its children (it never holds a process itself). */
static int instance_dir(int version, const char *base, const char *inst, char *out, size_t len) {
  int n = snprintf(out, len, "%s/%s", base, inst);
  if (n < 0 || (size_t)n >= len)
    return -ENAMETOOLONG;
  if (mkdir(out, 0755) < 0 && errno != EEXIST)
    return -errno;
  char ctl[256];
  if (version == 1 || (read_file(out, "cgroup.subtree_control", ctl, sizeof(ctl)) == 0 &&
                       has_word(ctl, "memory") && has_word(ctl, "pids")))
    return 0;
  return write_file(out, "cgroup.subtree_control", "+memory +pids");
}

static atomic_uint job_seq;

/* A new job directory base/inst/<prefix><n>, n from *seq (the same in
 * each hierarchy unless taken there: then the next free one). An instance
 * directory that a `cordon-agent exec` of the same instance removed
 * meanwhile (it tidies up when empty) is made again. NULL with errno set
 * on failure. */
static char *make_child(int version, const char *base, const char *inst, const char *prefix,
                        unsigned *seq) {
  char idir[4200];
  for (int tries = 0; tries < 16; tries++) {
    int r = instance_dir(version, base, inst, idir, sizeof(idir));
    if (r < 0) {
      errno = -r;
      return NULL;
    }
    char *dir = NULL;
    if (asprintf(&dir, "%s/%s%u", idir, prefix, *seq) < 0) {
      errno = ENOMEM;
      return NULL;
    }
    if (mkdir(dir, 0700) == 0)
      return dir;
    int e = errno;
    free(dir);
    if (e != EEXIST && e != ENOENT) {
      errno = e;
      return NULL;
    }
    if (e == EEXIST)
      *seq = atomic_fetch_add(&job_seq, 1);
  }
  errno = EEXIST;
  return NULL;
}

/* The job directories, without limits: one v2 directory, or one per v1
 * hierarchy. Returns 0 (cg->version 0 when none could be made), or
 * -ENOMEM. */
static int make_dirs(struct cgroup_job *cg, const char *inst, const char *prefix, bool v2) {
  char base[4096];
  unsigned seq = atomic_fetch_add(&job_seq, 1);
  if (v2 && v2_base(base, sizeof(base)) == 0) {
    char *dir = make_child(2, base, inst, prefix, &seq);
    if (dir) {
      cg->version = 2;
      cg->mem_dir = dir;
      cg->pids_dir = strdup(dir);
      cg->cpu_dir = strdup(dir); /* cpu.stat exists without the cpu controller */
      return cg->pids_dir && cg->cpu_dir ? 0 : -ENOMEM;
    }
    if (errno == ENOMEM)
      return -ENOMEM;
  }
  char **slots[3] = {&cg->mem_dir, &cg->pids_dir, &cg->cpu_dir};
  for (int i = 0; i < 3; i++) {
    if (v1_base(v1_ctrls[i], base, sizeof(base)) == 0 &&
        (*slots[i] = make_child(1, base, inst, prefix, &seq)) != NULL)
      cg->version = 1;
    else if (errno == ENOMEM)
      return -ENOMEM;
  }
  return 0;
}

static void drop_dir(char **dir) {
  rmdir(*dir);
  free(*dir);
  *dir = NULL;
}

/* v2: the job's limits and the fds it joins by. */
static int apply_v2(struct cgroup_job *cg, uint64_t mem_bytes, unsigned max_pids) {
  char v[32];
  snprintf(v, sizeof(v), "%" PRIu64, mem_bytes);
  int r = write_file(cg->mem_dir, "memory.max", v);
  if (r == 0)
    (void)write_file(cg->mem_dir, "memory.swap.max", "0");
  snprintf(v, sizeof(v), "%u", max_pids);
  if (r == 0)
    r = write_file(cg->mem_dir, "pids.max", v);
  if (r == 0 && (cg->procs_fd[0] = open_join(cg->mem_dir, "cgroup.procs")) < 0)
    r = -errno;
  if (r == 0 && (cg->v2_dir_fd = open(cg->mem_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
    r = -errno;
  return r;
}

/* v1: each hierarchy's limit; a directory whose limit cannot be written
 * or that the job cannot join limits nothing and is removed. */
static void apply_v1(struct cgroup_job *cg, uint64_t mem_bytes, unsigned max_pids) {
  char mem[32], pids[32];
  snprintf(mem, sizeof(mem), "%" PRIu64, mem_bytes);
  snprintf(pids, sizeof(pids), "%u", max_pids);
  if (cg->mem_dir && write_file(cg->mem_dir, "memory.limit_in_bytes", mem) < 0)
    drop_dir(&cg->mem_dir);
  if (cg->mem_dir) /* memsw exists only with swap accounting */
    (void)write_file(cg->mem_dir, "memory.memsw.limit_in_bytes", mem);
  if (cg->pids_dir && write_file(cg->pids_dir, "pids.max", pids) < 0)
    drop_dir(&cg->pids_dir);
  char **dirs[3] = {&cg->mem_dir, &cg->pids_dir, &cg->cpu_dir};
  int n = 0;
  for (int i = 0; i < 3; i++) {
    if (!*dirs[i])
      continue;
    if ((cg->procs_fd[n] = open_join(*dirs[i], "tasks")) >= 0)
      n++;
    else
      drop_dir(dirs[i]);
  }
  if (!cg->mem_dir && !cg->pids_dir && !cg->cpu_dir)
    cg->version = 0;
}

/* ---- the pool and the release worker (the agent that swept) ---- */

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bool owner;   /* this process swept inst: it names its jobs job-<n> */
  bool running; /* the worker thread runs */
  bool stop;
  bool refill_failed; /* no cgroup could be made: wait for the next take */
  char prefix[40];    /* job-<pid>-: unique across the instance's restarts */
  pid_t pid;          /* the owner process (a forked child that exits is not) */
  char inst[CGROUP_INSTANCE_NAME_SIZE];
  struct cgroup_job pool[CGROUP_POOL_SIZE];
  size_t n_pool;
  struct cgroup_job *released[64];
  size_t n_released;
  pthread_t thread;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static bool pool_take(const char *inst, struct cgroup_job *cg) {
  bool got = false;
  pthread_mutex_lock(&P.lock);
  if (P.owner && strcmp(P.inst, inst) == 0) {
    if (P.n_pool > 0) {
      *cg = P.pool[--P.n_pool];
      got = true;
    }
    P.refill_failed = false;
    pthread_cond_signal(&P.wake);
  }
  pthread_mutex_unlock(&P.lock);
  return got;
}

static bool is_owner(const char *inst) {
  pthread_mutex_lock(&P.lock);
  bool owner = P.owner && strcmp(P.inst, inst) == 0;
  pthread_mutex_unlock(&P.lock);
  return owner;
}

int cgroup_job_create(struct cgroup_job *cg, const char *state_dir, uint64_t mem_bytes,
                      unsigned max_pids) {
  char inst[CGROUP_INSTANCE_NAME_SIZE], prefix[40];
  cgroup_instance_name(state_dir, getuid(), inst);
  if (is_owner(inst))
    snprintf(prefix, sizeof(prefix), CGROUP_JOB_PREFIX "%ld-", (long)getpid());
  else
    snprintf(prefix, sizeof(prefix), CGROUP_EXEC_PREFIX "%ld-", (long)getpid());
  int r = 0;
  if (!pool_take(inst, cg))
    r = make_dirs(cg, inst, prefix, true);
  if (r == 0 && cg->version == 2 && apply_v2(cg, mem_bytes, max_pids) < 0) {
    /* v2 without the controllers after all: v1 then, as before */
    if (cg->procs_fd[0] >= 0)
      close(cg->procs_fd[0]);
    rmdir(cg->mem_dir);
    free(cg->mem_dir);
    free(cg->pids_dir);
    free(cg->cpu_dir);
    cgroup_job_init(cg);
    r = make_dirs(cg, inst, prefix, false);
  }
  if (r == 0 && cg->version == 1)
    apply_v1(cg, mem_bytes, max_pids);
  return r;
}

/* Up to max pids listed in dir's cgroup.procs into out: how many are
 * listed (may exceed max), or -1 when the cgroup is gone. */
static long read_procs(const char *dir, pid_t *out, size_t max) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  long pid, n = 0;
  while (fscanf(f, "%ld", &pid) == 1) {
    if ((size_t)n < max)
      out[n] = (pid_t)pid;
    n++;
  }
  fclose(f);
  return n;
}

#define KILL_DIR_BATCH 256

/* SIGKILL every process listed in dir's cgroup.procs until none is left,
 * through pidfds: a pidfd is opened for each listed pid, the list is read
 * again, and only a pid still listed is signalled, through its pidfd, so a
 * pid that a process outside the cgroup took over between the first read
 * and the open is never hit. A killed process leaves its cgroup when it
 * exits: each round waits for the killed ones' pidfds (at most 20 ms
 * each), not a fixed sleep. Without pidfds (Linux < 5.3) it signals by
 * pid, as listed, and sleeps 1 ms. */
static unsigned kill_dir(const char *dir) {
  unsigned killed = 0;
  pid_t pids[KILL_DIR_BATCH], again[KILL_DIR_BATCH];
  int fds[KILL_DIR_BATCH];
  for (int round = 0; round < 1000; round++) {
    long n = read_procs(dir, pids, KILL_DIR_BATCH);
    if (n <= 0)
      break;
    size_t k = (size_t)n < KILL_DIR_BATCH ? (size_t)n : KILL_DIR_BATCH;
    for (size_t i = 0; i < k; i++)
      fds[i] = pidfd_linux_open(pids[i]);
    long m = read_procs(dir, again, KILL_DIR_BATCH);
    size_t km = m < 0 ? 0 : (size_t)m < KILL_DIR_BATCH ? (size_t)m : KILL_DIR_BATCH;
    bool waited = false;
    for (size_t i = 0; i < k; i++) {
      bool listed = false;
      for (size_t j = 0; j < km && !listed; j++)
        listed = again[j] == pids[i];
      int r = -ESRCH;
      if (fds[i] >= 0 && listed)
        r = pidfd_linux_signal(fds[i], SIGKILL);
      else if (fds[i] == -ENOSYS && listed)
        r = kill(pids[i], SIGKILL) < 0 ? -errno : 0;
      if (r == 0 && round == 0)
        killed++;
    }
    for (size_t i = 0; i < k; i++) {
      if (fds[i] < 0)
        continue;
      /* readable once the process has exited, which is when it leaves */
      struct pollfd pf = {fds[i], POLLIN, 0};
      (void)poll(&pf, 1, 20);
      close(fds[i]);
      waited = true;
    }
    if (!waited) {
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

/* How many processes dir's cgroup.procs lists now. */
static unsigned count_procs(const char *dir) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
  FILE *f = fopen(path, "re");
  unsigned n = 0;
  long pid;
  while (f && fscanf(f, "%ld", &pid) == 1)
    n++;
  if (f)
    fclose(f);
  return n;
}

unsigned cgroup_job_kill(struct cgroup_job *cg) {
  char *dirs[3];
  size_t nd = distinct_dirs(cg, dirs);
  unsigned n = 0;
  for (size_t i = 0; i < nd; i++) {
    /* v2: the kernel kills the whole subtree at once, a process that forks
     * meanwhile and child cgroups included (cgroup.kill, 5.14); kill_dir
     * then waits for them to leave. Counted as listed before. */
    unsigned listed = cg->version == 2 ? count_procs(dirs[i]) : 0;
    bool all = cg->version == 2 && write_file(dirs[i], "cgroup.kill", "1") == 0;
    unsigned m = kill_dir(dirs[i]);
    m = all && listed > m ? listed : m;
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

/* Kill everything in dir's subtree and remove it, children first (a job
 * with a delegated subtree may have made some). Each round waits for the
 * killed processes' pidfds (kill_dir); bounded. Returns how many
 * processes were signalled. */
static unsigned remove_tree(const char *dir, bool v2, int depth) {
  unsigned killed = 0;
  if (v2) /* the whole subtree at once, where the kernel has it (5.14) */
    (void)write_file(dir, "cgroup.kill", "1");
  for (int tries = 0; tries < 50; tries++) {
    unsigned k = kill_dir(dir);
    killed += k;
    DIR *d = depth > 0 ? opendir(dir) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d))) {
      if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
        continue;
      char sub[4400];
      if (snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name) < (int)sizeof(sub))
        killed += remove_tree(sub, v2, depth - 1);
    }
    if (d)
      closedir(d);
    if (rmdir(dir) == 0 || errno != EBUSY)
      break;
    if (k == 0) { /* nothing left to wait for: the kernel's count lags a moment */
      struct timespec ts = {0, 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  return killed;
}

static void free_dirs(struct cgroup_job *cg) {
  free(cg->mem_dir);
  free(cg->pids_dir);
  free(cg->cpu_dir);
  cgroup_job_init(cg);
}

/* Kill what is left and remove the directories; tidy: also the instance
 * directories when that leaves them empty (not the owner's: its pool is
 * there). */
static void release_now(struct cgroup_job *cg, bool tidy) {
  char *dirs[3];
  size_t nd = distinct_dirs(cg, dirs);
  for (size_t i = 0; i < nd; i++) {
    remove_tree(dirs[i], cg->version == 2, 4);
    char *slash = tidy ? strrchr(dirs[i], '/') : NULL;
    if (slash) {
      *slash = '\0';
      (void)rmdir(dirs[i]); /* fails while anything else is in it */
    }
  }
  free_dirs(cg);
}

static void close_fds(struct cgroup_job *cg) {
  for (int i = 0; i < 3; i++)
    if (cg->procs_fd[i] >= 0)
      close(cg->procs_fd[i]);
  if (cg->v2_dir_fd >= 0)
    close(cg->v2_dir_fd);
  cg->procs_fd[0] = cg->procs_fd[1] = cg->procs_fd[2] = -1;
  cg->v2_dir_fd = -1;
}

/* The owner hands the release to its worker: the caller goes on to
 * deliver the result while the kill and rmdir happen. */
static bool hand_over(struct cgroup_job *cg) {
  if (cg->version == 0)
    return false;
  struct cgroup_job *copy = malloc(sizeof(*copy));
  if (!copy)
    return false;
  bool queued = false;
  pthread_mutex_lock(&P.lock);
  if (P.owner && P.running && !P.stop &&
      P.n_released < sizeof(P.released) / sizeof(P.released[0])) {
    *copy = *cg;
    P.released[P.n_released++] = copy;
    pthread_cond_signal(&P.wake);
    queued = true;
  }
  pthread_mutex_unlock(&P.lock);
  if (!queued)
    free(copy);
  return queued;
}

void cgroup_job_release(struct cgroup_job *cg) {
  if (!cg)
    return;
  close_fds(cg);
  if (hand_over(cg)) {
    cgroup_job_init(cg);
    return;
  }
  pthread_mutex_lock(&P.lock);
  bool owner = P.owner;
  pthread_mutex_unlock(&P.lock);
  release_now(cg, !owner);
}

/* Releases first (they hold processes), then the pool back to its size. */
static void *pool_worker(void *arg) {
  (void)arg;
  pthread_mutex_lock(&P.lock);
  while (!P.stop) {
    if (P.n_released > 0) {
      struct cgroup_job *cg = P.released[--P.n_released];
      pthread_mutex_unlock(&P.lock);
      release_now(cg, false);
      free(cg);
      pthread_mutex_lock(&P.lock);
      continue;
    }
    if (P.n_pool < CGROUP_POOL_SIZE && !P.refill_failed) {
      char inst[CGROUP_INSTANCE_NAME_SIZE], prefix[sizeof(P.prefix)];
      memcpy(inst, P.inst, sizeof(inst));
      memcpy(prefix, P.prefix, sizeof(prefix));
      pthread_mutex_unlock(&P.lock);
      struct cgroup_job e;
      cgroup_job_init(&e);
      int r = make_dirs(&e, inst, prefix, true);
      pthread_mutex_lock(&P.lock);
      if (r == 0 && e.version != 0 && P.n_pool < CGROUP_POOL_SIZE && !P.stop) {
        P.pool[P.n_pool++] = e;
      } else {
        P.refill_failed = r < 0 || e.version == 0;
        pthread_mutex_unlock(&P.lock);
        release_now(&e, false);
        pthread_mutex_lock(&P.lock);
      }
      continue;
    }
    pthread_cond_wait(&P.wake, &P.lock);
  }
  pthread_mutex_unlock(&P.lock);
  return NULL;
}

static size_t bases(char out[4][4096], bool v2[4]);

/* The instance's directories, where empty. */
static void instance_rmdirs(const char *inst) {
  char base[4][4096];
  bool v2[4];
  size_t nb = bases(base, v2);
  for (size_t i = 0; i < nb; i++) {
    char idir[4200];
    if (snprintf(idir, sizeof(idir), "%s/%s", base[i], inst) < (int)sizeof(idir))
      (void)rmdir(idir);
  }
}

/* At exit: the queued releases done, the pool and the instance
 * directories removed. */
static void pool_shutdown(void) {
  if (getpid() != P.pid)
    return; /* a child forked after the sweep: the worker and pool are not its own */
  pthread_mutex_lock(&P.lock);
  bool running = P.running;
  P.stop = true;
  pthread_cond_signal(&P.wake);
  pthread_mutex_unlock(&P.lock);
  if (running)
    pthread_join(P.thread, NULL);
  while (P.n_released > 0) {
    struct cgroup_job *cg = P.released[--P.n_released];
    release_now(cg, false);
    free(cg);
  }
  while (P.n_pool > 0)
    release_now(&P.pool[--P.n_pool], true);
  instance_rmdirs(P.inst);
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

/* A job directory named <prefix><pid>-<n> (job- or exec-) whose process
 * is gone (a reused pid keeps it: the safe side). */
static bool owner_gone(const char *name) {
  size_t k = strncmp(name, CGROUP_JOB_PREFIX, strlen(CGROUP_JOB_PREFIX)) == 0
                 ? strlen(CGROUP_JOB_PREFIX)
             : strncmp(name, CGROUP_EXEC_PREFIX, strlen(CGROUP_EXEC_PREFIX)) == 0
                 ? strlen(CGROUP_EXEC_PREFIX)
                 : 0;
  if (k == 0)
    return false;
  char *end;
  long pid = strtol(name + k, &end, 10);
  return end != name + k && *end == '-' && pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* Another instance's directory: only the empty job directories whose
 * process is gone (a pool left by a kill -9, whose config dir may be gone
 * too) are removed, then the directory itself if that empties it. Nothing
 * is killed and nothing a living process made is touched. */
static void tidy_other_instance(const char *idir) {
  DIR *d = opendir(idir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d)))
    if (de->d_type == DT_DIR && owner_gone(de->d_name))
      (void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR); /* refused unless empty */
  closedir(d);
  (void)rmdir(idir);
}

/* The job directories below one instance directory that no process of
 * this instance owns any more; only: those whose name starts so (NULL:
 * every job directory and the exec ones whose process is gone). */
static unsigned sweep_instance(const char *idir, bool v2, const char *only) {
  DIR *d = opendir(idir);
  if (!d)
    return 0;
  char names[256][64];
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)) && n < sizeof(names) / sizeof(names[0])) {
    bool job = strncmp(de->d_name, CGROUP_JOB_PREFIX, strlen(CGROUP_JOB_PREFIX)) == 0;
    size_t len = strlen(de->d_name);
    bool pick = only ? strncmp(de->d_name, only, strlen(only)) == 0 : job || owner_gone(de->d_name);
    if (de->d_type == DT_DIR && len < sizeof(names[0]) && pick)
      memcpy(names[n++], de->d_name, len + 1); /* fits: checked */
  }
  closedir(d);
  unsigned killed = 0;
  for (size_t i = 0; i < n; i++) {
    char dir[4400];
    if (snprintf(dir, sizeof(dir), "%s/%s", idir, names[i]) < (int)sizeof(dir))
      killed += remove_tree(dir, v2, 4);
  }
  return killed;
}

/* Directly below base: other instances' abandoned empty job directories
 * (tidy_other_instance), and cordon-<job id> directories of earlier versions:
 * only empty ones (the kernel refuses to remove any other) older than a
 * minute (never one an older agent just made and is about to fill). */
static void sweep_legacy(const char *base, const char *inst) {
  DIR *d = opendir(base);
  if (!d)
    return;
  struct dirent *de;
  time_t now = time(NULL);
  while ((de = readdir(d))) {
    if (de->d_type == DT_DIR &&
        strncmp(de->d_name, CGROUP_INSTANCE_PREFIX, strlen(CGROUP_INSTANCE_PREFIX)) == 0 &&
        strcmp(de->d_name, inst) != 0) {
      char other[4400];
      if (snprintf(other, sizeof(other), "%s/%s", base, de->d_name) < (int)sizeof(other))
        tidy_other_instance(other);
      continue;
    }
    const char *id = de->d_name + strlen("cordon-");
    if (de->d_type != DT_DIR || strncmp(de->d_name, "cordon-", strlen("cordon-")) != 0 ||
        strlen(id) != 32 || strspn(id, "0123456789abcdef") != 32)
      continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && now - st.st_mtime > 60)
      (void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
  }
  closedir(d);
}

/* Each hierarchy's base and whether it is v2. */
static size_t bases(char out[4][4096], bool v2[4]) {
  size_t n = 0;
  if (v2_parent(out[n], sizeof(out[n])) == 0)
    v2[n++] = true;
  for (int i = 0; i < 3; i++)
    if (v1_base(v1_ctrls[i], out[n], sizeof(out[n])) == 0)
      v2[n++] = false;
  return n;
}

/* Kill and remove the job directories of instance inst in every
 * hierarchy; reap (those of one agent process only, named by its prefix):
 * the instance's directory too (once it is empty), else the legacy
 * directories of earlier versions. */
static unsigned sweep_all(const char *inst, const char *reap) {
  char base[4][4096];
  bool v2[4];
  size_t nb = bases(base, v2);
  unsigned killed = 0;
  for (size_t i = 0; i < nb; i++) {
    char idir[4200];
    if (snprintf(idir, sizeof(idir), "%s/%s", base[i], inst) < (int)sizeof(idir)) {
      killed += sweep_instance(idir, v2[i], reap);
      if (reap)
        (void)rmdir(idir); /* empty now, unless a new agent made its pool already */
    }
    if (!reap)
      sweep_legacy(base[i], inst);
  }
  return killed;
}

unsigned cgroup_instance_reap(const char *state_dir, long agent_pid) {
  char inst[CGROUP_INSTANCE_NAME_SIZE], only[64];
  cgroup_instance_name(state_dir, getuid(), inst);
  snprintf(only, sizeof(only), CGROUP_JOB_PREFIX "%ld-", agent_pid);
  return sweep_all(inst, only);
}

unsigned cgroup_instance_sweep(const char *state_dir) {
  char inst[CGROUP_INSTANCE_NAME_SIZE];
  cgroup_instance_name(state_dir, getuid(), inst);
  unsigned killed = sweep_all(inst, NULL);
  pthread_mutex_lock(&P.lock);
  bool first = !P.owner;
  P.owner = true;
  memcpy(P.inst, inst, sizeof(inst));
  snprintf(P.prefix, sizeof(P.prefix), CGROUP_JOB_PREFIX "%ld-", (long)getpid());
  P.pid = getpid();
  if (!P.running && !P.stop) {
    /* the worker takes no signal meant for the agent's loop */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    P.running = pthread_create(&P.thread, NULL, pool_worker, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  pthread_cond_signal(&P.wake);
  pthread_mutex_unlock(&P.lock);
  if (first)
    atexit(pool_shutdown);
  return killed;
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
