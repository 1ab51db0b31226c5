#include "platform/posix/service_posix.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/file.h"

bool service_has_scopes(void) {
  return true;
}

/* systemd and launchd start a plain `run`: nothing to answer */
int service_run(const struct service_options *o, int (*run)(void *ctx), void (*stop)(void *ctx),
                void *ctx) {
  (void)o, (void)run, (void)stop, (void)ctx;
  return -ENOTSUP;
}

int posix_service_exec(char *const argv[], char *const envp[], char *capture, size_t cap_len) {
  int pfd[2] = {-1, -1};
  if (capture && (cap_len == 0 || pipe(pfd) < 0))
    return cap_len == 0 ? -EINVAL : -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int e = -errno;
    if (capture) {
      close(pfd[0]);
      close(pfd[1]);
    }
    return e;
  }
  if (pid == 0) {
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      dup2(null_fd, 0);
      dup2(capture ? pfd[1] : null_fd, 1);
      dup2(capture ? pfd[1] : null_fd, 2);
    }
    if (capture) {
      close(pfd[0]);
      close(pfd[1]);
    }
    execve(argv[0], argv, envp);
    _exit(127);
  }
  if (capture) {
    close(pfd[1]);
    size_t have = 0;
    char sink[512];
    for (;;) {
      bool room = have < cap_len - 1;
      ssize_t n = room ? read(pfd[0], capture + have, cap_len - 1 - have)
                       : read(pfd[0], sink, sizeof(sink));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      if (room)
        have += (size_t)n;
    }
    capture[have] = '\0';
    close(pfd[0]);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -errno;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int posix_service_write_definition(const char *dir, const char *name, const char *text,
                                   struct cordon_diag *diag) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= sizeof(path))
    return cordon_diag_set(diag, -ENAMETOOLONG, "%s/%s: path too long", dir, name);
  int r = core_write_file_atomic(dir, name, text, strlen(text), 0644);
  if (r == 0 && chmod(path, 0644) < 0) /* the umask may have taken bits away */
    r = -errno;
  if (r < 0)
    return cordon_diag_set(diag, r, "cannot install %s: %s", path, strerror(-r));
  return 0;
}

/* The options with the invoking user filled in when home is unset. */
static struct service_options with_user(const struct service_options *in) {
  struct service_options o = *in;
  if (!o.home) {
    const char *home = getenv("HOME");
    struct passwd *pw = getpwuid(getuid());
    if ((!home || home[0] != '/') && pw)
      home = pw->pw_dir;
    o.home = home;
    o.uid = (unsigned)getuid();
  }
  return o;
}

int service_render(const struct service_options *o_in, char **out_text) {
  struct service_options o = with_user(o_in);
  return service_os_render(&o, out_text);
}

int service_definition_path(const struct service_options *o_in, char *out, size_t len) {
  struct service_options o = with_user(o_in);
  return service_os_definition_path(&o, out, len);
}

int service_install(const struct service_options *o_in, struct cordon_diag *diag) {
  struct service_options o = with_user(o_in);
  return service_os_install(&o, diag);
}

int service_uninstall(const struct service_options *o_in, struct cordon_diag *diag) {
  struct service_options o = with_user(o_in);
  return service_os_uninstall(&o, diag);
}

int service_start(const struct service_options *o_in, struct cordon_diag *diag) {
  struct service_options o = with_user(o_in);
  return service_os_start(&o, diag);
}

int service_stop(const struct service_options *o_in, struct cordon_diag *diag) {
  struct service_options o = with_user(o_in);
  return service_os_stop(&o, diag);
}

int service_status(const struct service_options *o_in, json_t **out_status) {
  struct service_options o = with_user(o_in);
  return service_os_status(&o, out_status);
}
