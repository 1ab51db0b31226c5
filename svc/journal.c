/* Logging to the systemd journal in its native protocol (svc/journal.h). */
#include "svc/journal.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compat/posix.h"

#if CORDON_WITH_SYSTEMD
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#endif

#define JOURNAL_SOCKET "/run/systemd/journal/socket"

static bool installed;

#define JOURNAL_MAX_FIELDS 16 /* core_log_kv's pairs */
#define JOURNAL_FIELD_MAX 64  /* bytes of a field name */

bool journal_stream_is_stderr(void) {
  const char *js = getenv("JOURNAL_STREAM");
  if (!js || !*js)
    return false;
  unsigned long long dev, ino;
  char tail;
  if (sscanf(js, "%llu:%llu%c", &dev, &ino, &tail) != 2)
    return false;
  struct stat st;
  return fstat(2, &st) == 0 && (unsigned long long)st.st_dev == dev &&
         (unsigned long long)st.st_ino == ino;
}

bool journal_available(void) {
  return CORDON_WITH_SYSTEMD != 0;
}

bool journal_active(void) {
  return installed;
}

bool journal_install_if_stderr(void) {
  return journal_stream_is_stderr() && journal_available() && journal_install() == 0;
}

int journal_priority(enum core_log_level level) {
  switch (level) {
  case CORE_LOG_DEBUG:
    return 7; /* LOG_DEBUG */
  case CORE_LOG_INFO:
    return 6; /* LOG_INFO */
  case CORE_LOG_WARN:
    return 4; /* LOG_WARNING */
  case CORE_LOG_ERROR:
    return 3; /* LOG_ERR */
  }
  return 6;
}

void journal_field_name(const char *key, char *buf, size_t size) {
  static const char prefix[] = "CORDON_";
  if (size == 0)
    return;
  size_t o = 0;
  for (const char *p = prefix; *p && o + 1 < size; p++)
    buf[o++] = *p;
  for (const char *k = key ? key : ""; *k && o + 1 < size; k++) {
    char c = *k;
    if (c >= 'a' && c <= 'z')
      c = (char)(c - 'a' + 'A');
    else if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
      c = '_';
    buf[o++] = c;
  }
  buf[o] = '\0';
}

#if CORDON_WITH_SYSTEMD
/* One entry as the iovecs of its datagram: per field the name, then "="
 * or "\n" + the 64-bit little-endian length, the value, "\n". */
#define JOURNAL_ENTRY_FIELDS (5 + JOURNAL_MAX_FIELDS) /* + PRIORITY … DROPPED */
struct journal_entry {
  struct iovec iov[5 * JOURNAL_ENTRY_FIELDS];
  size_t n_iov, n_fields;
  uint8_t len[JOURNAL_ENTRY_FIELDS][8];
  char names[JOURNAL_MAX_FIELDS][JOURNAL_FIELD_MAX];
};

static const struct sockaddr_un journal_addr = {.sun_family = AF_UNIX, .sun_path = JOURNAL_SOCKET};
#define JOURNAL_ADDR_LEN                                                                           \
  ((socklen_t)(offsetof(struct sockaddr_un, sun_path) + sizeof(JOURNAL_SOCKET)))

static int journal_fd = -1;
static atomic_ullong dropped_total, dropped_unreported;

static void entry_add(struct journal_entry *e, const char *name, const char *value) {
  size_t vl = strlen(value);
  e->iov[e->n_iov++] = (struct iovec){(void *)name, strlen(name)};
  if (memchr(value, '\n', vl)) { /* the binary-safe form */
    uint8_t *l = e->len[e->n_fields];
    for (int i = 0; i < 8; i++)
      l[i] = (uint8_t)((uint64_t)vl >> (8 * i));
    e->iov[e->n_iov++] = (struct iovec){"\n", 1};
    e->iov[e->n_iov++] = (struct iovec){l, sizeof(e->len[0])};
  } else {
    e->iov[e->n_iov++] = (struct iovec){"=", 1};
  }
  e->iov[e->n_iov++] = (struct iovec){(void *)value, vl};
  e->iov[e->n_iov++] = (struct iovec){"\n", 1};
  e->n_fields++;
}

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return w < 0 ? -errno : -EIO;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

static int send_retry(const struct msghdr *mh) {
  ssize_t r;
  do
    r = sendmsg(journal_fd, mh, MSG_NOSIGNAL);
  while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : 0;
}

/* Too large for a datagram: the entry in a sealed memfd, passed alone. */
static int entry_send_memfd(const struct journal_entry *e) {
  int mfd = memfd_create("cordon-journal", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (mfd < 0)
    return -errno;
  int r = 0;
  for (size_t i = 0; i < e->n_iov && r == 0; i++)
    r = write_all(mfd, e->iov[i].iov_base, e->iov[i].iov_len);
  if (r == 0 &&
      fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
    r = -errno;
  if (r == 0) {
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof(control));
    struct msghdr mh = {.msg_name = (void *)&journal_addr,
                        .msg_namelen = JOURNAL_ADDR_LEN,
                        .msg_control = control.buf,
                        .msg_controllen = sizeof(control.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
    r = send_retry(&mh);
  }
  close(mfd);
  return r;
}

static int entry_send(const struct journal_entry *e) {
  struct msghdr mh = {.msg_name = (void *)&journal_addr,
                      .msg_namelen = JOURNAL_ADDR_LEN,
                      .msg_iov = (struct iovec *)e->iov,
                      .msg_iovlen = e->n_iov};
  int r = send_retry(&mh);
  if (r == -EMSGSIZE || r == -ENOBUFS)
    r = entry_send_memfd(e);
  return r;
}

static void journal_write(const struct core_log_event *ev, void *ctx) {
  (void)ctx;
  struct journal_entry e;
  e.n_iov = e.n_fields = 0;
  /* MESSAGE: the line without ts, level and prog, which the journal has */
  const char *text = strstr(ev->line, " msg=");
  text = text ? text + 1 : ev->line;
  char prio[8], dropped[24];
  snprintf(prio, sizeof(prio), "%d", journal_priority(ev->level));
  entry_add(&e, "PRIORITY", prio);
  entry_add(&e, "MESSAGE", text);
  entry_add(&e, "SYSLOG_IDENTIFIER", ev->program ? ev->program : "cordon");
  entry_add(&e, "CORDON_MSG", ev->msg ? ev->msg : "");
  for (size_t i = 0; i < ev->n_kv && i < JOURNAL_MAX_FIELDS; i++) {
    journal_field_name(ev->kv[2 * i], e.names[i], sizeof(e.names[i]));
    entry_add(&e, e.names[i], ev->kv[2 * i + 1] ? ev->kv[2 * i + 1] : "");
  }
  unsigned long long unreported = atomic_exchange(&dropped_unreported, 0);
  if (unreported) {
    snprintf(dropped, sizeof(dropped), "%llu", unreported);
    entry_add(&e, "CORDON_JOURNAL_DROPPED", dropped);
  }
  int r = entry_send(&e);
  if (r == 0)
    return;
  if (unreported) /* not reported after all */
    atomic_fetch_add(&dropped_unreported, unreported);
  if (r == -EAGAIN || r == -EWOULDBLOCK) { /* the journal's queue is full */
    atomic_fetch_add(&dropped_total, 1);
    atomic_fetch_add(&dropped_unreported, 1);
  } else { /* the journal is gone or refused it: the line is not lost */
    fprintf(stderr, "%s\n", ev->line);
  }
}

unsigned long long journal_dropped(void) {
  return atomic_load(&dropped_total);
}

int journal_install(void) {
  /* the socket is journald's (PID 1 holds it): without it, stay on stderr */
  if (access(JOURNAL_SOCKET, F_OK) < 0)
    return -errno;
  if (journal_fd < 0) {
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
      return -errno;
    journal_fd = fd;
  }
  core_log_set_writer(journal_write, NULL);
  installed = true;
  return 0;
}
#else
unsigned long long journal_dropped(void) {
  return 0;
}

int journal_install(void) {
  return -ENOTSUP;
}
#endif
