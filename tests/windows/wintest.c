#include "tests/windows/wintest.h"

#include <windows.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>

#include "platform/fs.h"

static struct wt_test *head;
static jmp_buf jump;
static int outcome; /* 0 pass, 1 fail, 2 skip */
static unsigned tmp_seq;

/* constructors run last-first: prepend, so tests run in file order */
void wt_register(struct wt_test *t) {
  t->next = head;
  head = t;
}

const char *wine_version(void) {
  HMODULE ntdll = GetModuleHandleA("ntdll.dll");
  if (!ntdll)
    return NULL;
  const char *(*get)(void) =
      (const char *(*)(void))(void (*)(void))GetProcAddress(ntdll, "wine_get_version");
  return get ? get() : NULL;
}

void wt_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "    %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  outcome = 1;
  longjmp(jump, 1);
}

void wt_skip(const char *why) {
  fprintf(stderr, "    skipped: %s\n", why);
  outcome = 2;
  longjmp(jump, 1);
}

const char *wt_tmpdir(void) {
  char base[MAX_PATH], tmp[MAX_PATH * 3];
  DWORD n = GetTempPathA(sizeof(base), base);
  if (n == 0 || n >= sizeof(base))
    wt_fail(__FILE__, __LINE__, "GetTempPath failed");
  /* Wine reuses process ids: never a directory left by an earlier run */
  for (;;) {
    snprintf(tmp, sizeof(tmp), "%scordon-wintest-%lu-%u", base, GetCurrentProcessId(), ++tmp_seq);
    if (CreateDirectoryA(tmp, NULL))
      break;
    if (GetLastError() != ERROR_ALREADY_EXISTS || tmp_seq > 100000)
      wt_fail(__FILE__, __LINE__, "cannot create %s: error %lu", tmp, GetLastError());
  }
  char *dup = strdup(tmp);
  if (!dup)
    wt_fail(__FILE__, __LINE__, "out of memory");
  return dup;
}

/* setjmp in its own frame: nothing of main's is live across the longjmp */
static int run_one(const struct wt_test *t) {
  outcome = 0;
  if (setjmp(jump) == 0)
    t->fn();
  return outcome;
}

int main(int argc, char **argv) {
  const char *filter = NULL;
  bool list = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--list") == 0)
      list = true;
    else
      filter = argv[i];
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  setvbuf(stderr, NULL, _IONBF, 0);
  int pass = 0, fail = 0, skip = 0;
  for (struct wt_test *t = head; t; t = t->next) {
    char full[256];
    snprintf(full, sizeof(full), "%s::%s", t->suite, t->name);
    if (filter && !strstr(full, filter))
      continue;
    if (list) {
      printf("%s\n", full);
      continue;
    }
    fprintf(stderr, "[ RUN  ] %s\n", full);
    DWORD t0 = GetTickCount();
    int res = run_one(t);
    DWORD ms = GetTickCount() - t0;
    if (res == 0) {
      pass++;
      fprintf(stderr, "[  OK  ] %s (%lu ms)\n", full, ms);
    } else if (res == 2) {
      skip++;
      fprintf(stderr, "[ SKIP ] %s\n", full);
    } else {
      fail++;
      fprintf(stderr, "[ FAIL ] %s (%lu ms)\n", full, ms);
    }
  }
  if (!list)
    fprintf(stderr, "%d passed, %d failed, %d skipped\n", pass, fail, skip);
  return fail > 100 ? 100 : fail;
}
