/* cordon-server init: create the state directory and its keys. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/id.h"
#include "proto/cpkg.h"
#include "server/cli.h"
#include "server/db.h"
#include "server/keys.h"

/* 0 when the directory holds nothing, -EEXIST when it holds something. */
static int dir_is_empty(int dirfd) {
  int fd = dup(dirfd);
  if (fd < 0)
    return -errno;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -errno;
  }
  int err = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
      err = -EEXIST;
      break;
    }
  closedir(d);
  return err;
}

struct init_key {
  const char *name;
  enum keyfile_kind kind;
  mode_t mode;
};

/* Remove what a failed init made in the state directory, which was empty
 * when it began (so all of it is init's): the key files, the keys/
 * directory and its files, the URL file, the database. */
static void remove_made(int dirfd) {
  for (size_t i = 0; server_keys_top_files[i]; i++)
    unlinkat(dirfd, server_keys_top_files[i], 0);
  int kfd = openat(dirfd, SERVER_KEYS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *d = kfd >= 0 ? fdopendir(kfd) : NULL;
  if (!d && kfd >= 0)
    close(kfd);
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL)
    if (de->d_name[0] != '.')
      unlinkat(kfd, de->d_name, 0);
  if (d)
    closedir(d);
  unlinkat(dirfd, SERVER_KEYS_DIR, AT_REMOVEDIR);
  unlinkat(dirfd, SERVER_DB_URL_FILE, 0);
  unlinkat(dirfd, SERVER_DB_FILE, 0);
  unlinkat(dirfd, SERVER_DB_FILE "-wal", 0);
  unlinkat(dirfd, SERVER_DB_FILE "-shm", 0);
}

/* The keys of a new cluster, written into dirfd; *comment ("id=<the
 * publisher key's id>") for the message. A CLI status (0 or the printed
 * failure). */
static int make_keys(int dirfd, const char *state, char *comment, size_t comment_size) {
  struct cordon_diag diag = {{0}};
  const struct init_key files[] = {
      {SERVER_TICKET_KEY_FILE, KEYFILE_TICKET_SECRET, 0600},
      {SERVER_NOISE_KEY_FILE, KEYFILE_NOISE_SECRET, 0600},
      {SERVER_PUBLISHER_KEY_FILE, KEYFILE_PUBLISHER_SECRET, 0600},
      {SERVER_PUBLISHER_PUB_FILE, KEYFILE_PUBLISHER_PUBLIC, 0644},
  };
  uint8_t *secrets = sodium_malloc(3 * KEYFILE_KEY_SIZE + crypto_sign_SECRETKEYBYTES);
  if (!secrets)
    return server_cli_failf(-ENOMEM, "out of memory");
  uint8_t *ticket_seed = secrets, *noise_secret = secrets + 32, *pub_seed = secrets + 64;
  uint8_t *pub_sk = secrets + 96;
  uint8_t pub_pk[crypto_sign_PUBLICKEYBYTES], key_id[CORDON_ID_LEN];
  randombytes_buf(ticket_seed, 32);
  randombytes_buf(noise_secret, 32); /* X25519 private key; clamped where it is used */
  randombytes_buf(pub_seed, 32);
  crypto_sign_seed_keypair(pub_pk, pub_sk, pub_seed);
  cpkg_key_id(pub_pk, key_id);
  char key_hex[CORDON_ID_HEX_SIZE];
  cordon_id_to_hex(key_id, key_hex);
  snprintf(comment, comment_size, "id=%s", key_hex);
  const uint8_t *keys[] = {ticket_seed, noise_secret, pub_seed, pub_pk};
  int status = 0;
  for (size_t i = 0; status == 0 && i < sizeof(files) / sizeof(files[0]); i++) {
    bool publisher =
        files[i].kind == KEYFILE_PUBLISHER_PUBLIC || files[i].kind == KEYFILE_PUBLISHER_SECRET;
    int err = keys_write_file(dirfd, files[i].name, files[i].kind, keys[i], files[i].mode,
                              publisher ? comment : NULL, &diag);
    if (err)
      status = server_cli_failf(err, "%s/%s", state, diag.msg);
  }
  sodium_free(secrets);
  return status;
}

int server_cmd_init(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                       {"db", required_argument, NULL, 'D'},
                                       {"keys-from", required_argument, NULL, 'k'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *state = cli->state_dir, *db_url = NULL, *keys_from = NULL;
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      state = optarg;
      break;
    case 'k':
      keys_from = optarg;
      break;
    case 'D':
      db_url = optarg;
      break;
    case 'h':
      return server_cli_help("init", NULL);
    default:
      return server_cli_bad_option("init", NULL, argv);
    }
  }
  if (optind != argc)
    return server_cli_usage("init", NULL, "init takes no arguments");
  /* servers of one identity over two SQLite files would each refuse the
   * devices the other paired: a cluster shares one database */
  if (keys_from && !db_url)
    return server_cli_usage("init", NULL,
                            "--keys-from needs --db postgresql://...: the servers of a cluster "
                            "share one database");
  if (db_url && (!server_db_url_is_pg(db_url) || strlen(db_url) > SERVER_DB_URL_MAX))
    return server_cli_usage("init", NULL, "--db: a postgresql:// URL of at most %d bytes",
                            SERVER_DB_URL_MAX);

  int created = mkdir(state, 0700) == 0;
  if (!created && errno != EEXIST)
    return server_cli_failf(-errno, "cannot create state directory %s: %s", state, strerror(errno));
  int dirfd = open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) {
    int e = errno;
    if (created)
      rmdir(state);
    return server_cli_failf(-e, "%s: %s", state, strerror(e));
  }
  if (!created) {
    int err = dir_is_empty(dirfd);
    if (err) {
      close(dirfd);
      if (err == -EEXIST)
        return server_cli_failf(err,
                                "state directory %s already exists and is not empty; "
                                "refusing to overwrite it",
                                state);
      return server_cli_failf(err, "%s: %s", state, strerror(-err));
    }
    if (fchmod(dirfd, 0700) < 0) {
      int e = errno;
      close(dirfd);
      return server_cli_failf(-e, "%s: %s", state, strerror(e));
    }
  }
  /* the keys: a new identity, or (--keys-from A --db URL) A's, for a
   * second server of A's cluster on A's database, with nothing else of A's
   * state (docs/SECURITY.md, "Several servers, one identity") */
  struct cordon_diag diag = {{0}};
  char comment[sizeof("id=") + CORDON_ID_HEX_LEN] = "";
  int status = 0;
  if (!keys_from)
    status = make_keys(dirfd, state, comment, sizeof(comment));
  else {
    int err = server_keys_copy(keys_from, state, &diag);
    if (err)
      status = server_cli_fail(err, &diag);
  }
  if (status == 0 && db_url) {
    /* PostgreSQL: the URL is kept in the state directory (0600, it may
     * hold a password), and every later command with --state uses it */
    int err = server_db_save_url(state, db_url, &diag);
    if (err)
      status = server_cli_fail(err, &diag);
  }
  if (status == 0) {
    /* The state database, schema and all (server/db.h). */
    struct server_db *db = NULL;
    int err = server_db_open(state, SERVER_DB_CREATE, &db, &diag);
    server_db_close(db);
    if (err)
      status = server_cli_fail(err, &diag);
  }
  if (status == 0 && fsync(dirfd) < 0)
    status = server_cli_failf(-errno, "%s: %s", state, strerror(errno));
  if (status != 0) {
    remove_made(dirfd); /* leave nothing half-made behind */
    if (created)
      rmdir(state);
  } else if (keys_from) {
    fprintf(stderr,
            "%s: initialised %s with the keys of %s (one identity: agents paired "
            "with either trust both)\n",
            SERVER_PROG, state, keys_from);
  } else {
    fprintf(stderr, "%s: initialised %s; publisher key %s, public half in %s/%s\n", SERVER_PROG,
            state, comment, state, SERVER_PUBLISHER_PUB_FILE);
  }
  close(dirfd);
  return status;
}
