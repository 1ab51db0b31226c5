/* Logging to the systemd journal natively (svc/journal.h). */
#include "svc/journal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compat/posix.h"

#if CORDON_WITH_SYSTEMD
#include <sys/uio.h>
/* CODE_FILE, CODE_LINE and CODE_FUNC would name this file, not the event */
#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>
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
static void journal_write(const struct core_log_event *ev, void *ctx) {
  (void)ctx;
  /* MESSAGE: the line without ts, level and prog, which the journal has */
  const char *text = strstr(ev->line, " msg=");
  text = text ? text + 1 : ev->line;
  char prio[16], *msg = NULL, *ident = NULL, *summary = NULL;
  char *fields[JOURNAL_MAX_FIELDS] = {0};
  struct iovec iov[4 + JOURNAL_MAX_FIELDS];
  size_t n = 0, nf = 0;
  int r = 0;
  snprintf(prio, sizeof(prio), "PRIORITY=%d", journal_priority(ev->level));
  iov[n++] = (struct iovec){prio, strlen(prio)};
  if (asprintf(&msg, "MESSAGE=%s", text) < 0 ||
      asprintf(&ident, "SYSLOG_IDENTIFIER=%s", ev->program ? ev->program : "cordon") < 0 ||
      asprintf(&summary, "CORDON_MSG=%s", ev->msg ? ev->msg : "") < 0) {
    r = -ENOMEM;
    goto out;
  }
  iov[n++] = (struct iovec){msg, strlen(msg)};
  iov[n++] = (struct iovec){ident, strlen(ident)};
  iov[n++] = (struct iovec){summary, strlen(summary)};
  for (size_t i = 0; i < ev->n_kv && nf < JOURNAL_MAX_FIELDS; i++) {
    char name[JOURNAL_FIELD_MAX];
    journal_field_name(ev->kv[2 * i], name, sizeof(name));
    if (asprintf(&fields[nf], "%s=%s", name, ev->kv[2 * i + 1]) < 0) {
      fields[nf] = NULL;
      r = -ENOMEM;
      goto out;
    }
    iov[n++] = (struct iovec){fields[nf], strlen(fields[nf])};
    nf++;
  }
  r = sd_journal_sendv(iov, (int)n);
out:
  if (r < 0) /* the journal is gone or refused it: the line is not lost */
    fprintf(stderr, "%s\n", ev->line);
  for (size_t i = 0; i < nf; i++)
    free(fields[i]);
  free(msg);
  free(ident);
  free(summary);
}

int journal_install(void) {
  /* libsystemd drops lines silently when the socket is not there */
  if (access(JOURNAL_SOCKET, F_OK) < 0)
    return -errno;
  core_log_set_writer(journal_write, NULL);
  installed = true;
  return 0;
}
#else
int journal_install(void) {
  return -ENOTSUP;
}
#endif
