/* cordon-server keys rotate [--ticket] [--publisher] | retire KEY_ID |
 * list [--json]: the server's ticket and publisher keys (server/keys.h).
 * rotate and retire commit STATE/keys.json, then tell a running daemon
 * with SIGHUP (its pid is in STATE/daemon.lock, which it holds), which
 * reloads its keys and announces them to every connected agent; agents
 * that are offline get the announcements when they next connect. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "server/cli.h"
#include "server/keys.h"
#include "server/lock.h"

/* SIGHUP to the daemon holding STATE/daemon.lock: 1 told, 0 none runs. */
static int tell_daemon(const char *state) {
  char path[4096], buf[32] = "";
  snprintf(path, sizeof(path), "%s/%s", state, SERVER_LOCK_FILE);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return 0;
  int told = 0;
  if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
    flock(fd, LOCK_UN); /* nobody holds it: no daemon */
  } else if (errno == EWOULDBLOCK) {
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    long pid = n > 0 ? strtol(buf, NULL, 10) : 0;
    if (pid > 0 && kill((pid_t)pid, SIGHUP) == 0)
      told = 1;
  }
  close(fd);
  return told;
}

static void say_done(const char *state, const char *what, uint64_t serial) {
  int told = tell_daemon(state);
  fprintf(stderr, "%s: %s (announcement %llu); %s\n", SERVER_PROG, what, (unsigned long long)serial,
          told ? "the running daemon announces it to connected agents now, others on connect"
               : "no daemon runs: agents get it when they connect to the next one");
}

/* The options of a keys subcommand (argv[0] is the subcommand): --state
 * for all, --ticket and --publisher for rotate, --json for list; n_args
 * operands. 0 parsed, or the exit status (help printed: 0 through
 * *out_done; usage: 2). */
struct keys_opts {
  const char *state;
  bool ticket, publisher, json;
  char **args;
};

static int parse(int argc, char **argv, bool rotate, bool list, int n_args, struct keys_opts *o,
                 bool *out_done) {
  static const struct option opts[] = {
      {"ticket", no_argument, NULL, 't'}, {"publisher", no_argument, NULL, 'p'},
      {"json", no_argument, NULL, 'j'},   {"state", required_argument, NULL, 's'},
      {"help", no_argument, NULL, 'h'},   {0}};
  const char *sub = argv[0];
  int c;
  optind = 0;
  opterr = 0;
  *out_done = false;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 's') {
      o->state = optarg;
    } else if (c == 'h') {
      server_cli_help("keys", sub);
      *out_done = true;
      return 0;
    } else if (rotate && (c == 't' || c == 'p')) {
      *(c == 't' ? &o->ticket : &o->publisher) = true;
    } else if (list && c == 'j') {
      o->json = true;
    } else {
      *out_done = true;
      return server_cli_bad_option("keys", sub, argv);
    }
  }
  if (argc - optind != n_args) {
    *out_done = true;
    return server_cli_usage("keys", sub,
                            argc - optind < n_args ? "KEY_ID is missing" : "unexpected arguments");
  }
  o->args = argv + optind;
  return 0;
}

static int cmd_rotate(struct keys_opts *o) {
  if (!o->ticket && !o->publisher)
    o->ticket = o->publisher = true;
  uint64_t serial = 0;
  char tid[33], pid[33];
  struct cordon_diag diag = {{0}};
  int r = server_keys_rotate(o->state, o->ticket, o->publisher, &serial, tid, pid, &diag);
  if (r < 0)
    return server_cli_fail(r, &diag);
  if (tid[0])
    printf("ticket %s\n", tid);
  if (pid[0])
    printf("publisher %s\n", pid);
  fflush(stdout);
  say_done(o->state, "keys rotated", serial);
  return 0;
}

static int cmd_retire(struct keys_opts *o) {
  uint64_t serial = 0;
  char id[33];
  struct cordon_diag diag = {{0}};
  int r = server_keys_retire(o->state, o->args[0], &serial, id, &diag);
  if (r < 0)
    return server_cli_fail(r, &diag);
  char what[80];
  snprintf(what, sizeof(what), "publisher key %s retired", id);
  say_done(o->state, what, serial);
  return 0;
}

static int cmd_list(struct keys_opts *o) {
  json_t *list = NULL;
  struct cordon_diag diag = {{0}};
  int r = server_keys_list(o->state, &list, &diag);
  if (r < 0)
    return server_cli_fail(r, &diag);
  if (o->json) {
    char *s = json_dumps(list, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s)
      printf("%s\n", s);
    free(s);
  } else {
    printf("%-32s  %-9s  %-20s  %-20s  %s\n", "ID", "ROLE", "CREATED", "RETIRED", "CURRENT");
    size_t i;
    json_t *k;
    json_array_foreach(list, i, k) {
      const char *ret = json_string_value(json_object_get(k, "retired"));
      printf("%-32s  %-9s  %-20s  %-20s  %s\n", json_string_value(json_object_get(k, "id")),
             json_string_value(json_object_get(k, "role")),
             json_string_value(json_object_get(k, "created")), ret ? ret : "-",
             json_is_true(json_object_get(k, "current")) ? "yes" : "");
    }
  }
  fflush(stdout);
  json_decref(list);
  return 0;
}

int server_cmd_keys(const struct server_cli *cli, int argc, char **argv) {
  if (argc < 2)
    return server_cli_usage("keys", NULL, "a keys subcommand is missing");
  const char *sub = argv[1];
  if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0) {
    server_cli_help("keys", NULL);
    return 0;
  }
  if (strcmp(sub, "export-public") == 0)
    return server_cmd_keys_export_public(cli, argc - 1, argv + 1);
  bool rotate = strcmp(sub, "rotate") == 0, retire = strcmp(sub, "retire") == 0,
       list = strcmp(sub, "list") == 0;
  if (!rotate && !retire && !list)
    return server_cli_usage("keys", NULL, "unknown keys subcommand '%s'", sub);
  struct keys_opts o = {.state = cli->state_dir};
  bool done;
  int st = parse(argc - 1, argv + 1, rotate, list, retire ? 1 : 0, &o, &done);
  if (done)
    return st;
  return rotate ? cmd_rotate(&o) : retire ? cmd_retire(&o) : cmd_list(&o);
}
