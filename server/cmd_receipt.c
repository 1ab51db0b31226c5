/* Receipts (docs/protocol/receipt.md) on the command line:
 *   cordon-server job ID --receipt FILE          (server_cli_write_receipt)
 *   cordon-server verify-receipt FILE --trust server.pub
 *   cordon-server keys export-public             the ticket public key, for --trust
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file.h"
#include "proto/keyfile.h"
#include "proto/receipt.h"
#include "server/cli.h"
#include "server/keys.h"

static const char verify_usage[] = "usage: cordon-server verify-receipt FILE --trust SERVER.pub";
static const char keys_usage[] = "usage: cordon-server keys export-public [--state DIR]";

/* The ticket key pair from STATE/ticket.key (sodium_malloc'ed secret). */
static int load_ticket_key(const char *state, uint8_t **out_sk, uint8_t pk[32],
                           struct cordon_diag *diag) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", state, SERVER_TICKET_KEY_FILE);
  uint8_t *seed = NULL;
  int r = keys_read_file(path, KEYFILE_TICKET_SECRET, &seed, diag);
  if (r < 0)
    return r;
  uint8_t *sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
  if (!sk) {
    sodium_free(seed);
    return cordon_diag_set(diag, -ENOMEM, "out of memory");
  }
  crypto_sign_seed_keypair(pk, sk, seed);
  sodium_free(seed);
  *out_sk = sk;
  return 0;
}

int server_cli_write_receipt(const char *state, struct server_db *db,
                             const struct server_db_job *job, const char *path) {
  struct cordon_diag diag = {{0}};
  uint8_t blob[SERVER_DB_RECEIPT_MAX];
  size_t blob_len;
  int err = server_db_job_receipt(db, job->id, blob, sizeof(blob), &blob_len, &diag);
  if (err == -ENODATA)
    return server_cli_failf(CORDON_E_USAGE,
                            "job %s has no receipt (no result yet, or its result came unsigned)",
                            job->id);
  if (err)
    return server_cli_db_fail(err, &diag);
  if (blob_len <= RECEIPT_KEY_LEN + RECEIPT_SIG_LEN)
    return server_cli_failf(CORDON_E_INTERNAL, "job %s: the stored receipt is damaged", job->id);
  struct receipt_statement st = {0};
  if (cordon_id_from_hex(job->device_id, st.device_id) < 0 || strlen(job->user) > RECEIPT_USER_MAX)
    return server_cli_failf(CORDON_E_INTERNAL, "job %s: no device or user to bind", job->id);
  snprintf(st.user, sizeof(st.user), "%s", job->user);
  memcpy(st.device_key, blob, RECEIPT_KEY_LEN);
  uint8_t stmt[RECEIPT_STATEMENT_MAX], stmt_sig[RECEIPT_SIG_LEN], file[RECEIPT_FILE_MAX];
  size_t stmt_len, file_len;
  if (receipt_statement_encode(&st, stmt, sizeof(stmt), &stmt_len) < 0)
    return server_cli_failf(CORDON_E_INTERNAL, "job %s: the user name cannot be bound", job->id);
  uint8_t *sk = NULL, pk[32];
  if ((err = load_ticket_key(state, &sk, pk, &diag)))
    return server_cli_fail(err, &diag);
  crypto_sign_detached(stmt_sig, NULL, stmt, stmt_len, sk);
  sodium_free(sk);
  const uint8_t *rc = blob + RECEIPT_KEY_LEN + RECEIPT_SIG_LEN;
  size_t rc_len = blob_len - RECEIPT_KEY_LEN - RECEIPT_SIG_LEN;
  if (receipt_file_build(rc, rc_len, blob + RECEIPT_KEY_LEN, stmt, stmt_len, stmt_sig, file,
                         sizeof(file), &file_len) < 0)
    return server_cli_failf(CORDON_E_INTERNAL, "job %s: the stored receipt is damaged", job->id);
  int fd = strcmp(path, "-") == 0
               ? dup(STDOUT_FILENO)
               : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return server_cli_failf(-errno, "%s: %s", path, strerror(errno));
  err = core_write_all(fd, file, file_len);
  if (close(fd) < 0 && !err)
    err = -errno;
  if (err)
    return server_cli_failf(err, "%s: %s", path, strerror(-err));
  return 0;
}

static void print_receipt(const struct receipt *r, const struct receipt_statement *s) {
  char job[CORDON_ID_HEX_SIZE], dev[CORDON_ID_HEX_SIZE], out[65], err[65], user[3 * 128 + 1];
  cordon_id_to_hex(r->job_id, job);
  cordon_id_to_hex(r->device_id, dev);
  server_cli_escape(s->user, user, sizeof(user));
  printf("valid: receipt of job %s\n", job);
  printf("device:    %s\nuser:      %s\n", dev, user);
  if (r->bound) {
    char ih[65], ah[65], th[65];
    sodium_bin2hex(ih, sizeof(ih), r->index_hash, 32);
    sodium_bin2hex(ah, sizeof(ah), r->args_hash, 32);
    sodium_bin2hex(th, sizeof(th), r->ticket_hash, 32);
    printf("package:   %s\nargs_hash: %s\nticket:    %s\n", ih, ah, th);
  } else {
    printf("ticket:    none (the device no longer had it)\n");
  }
  printf("started:   %llu\nended:     %llu\n", (unsigned long long)r->started_ms,
         (unsigned long long)r->ended_ms);
  if (r->end == RECEIPT_END_EXITED)
    printf("exit_code: %lld\n", (long long)r->status);
  else if (r->end == RECEIPT_END_SIGNALLED)
    printf("signal:    %lld\n", (long long)r->status);
  else
    printf("ran:       no\n");
  printf("error:     %s\n", r->error_code[0] ? r->error_code : "-");
  sodium_bin2hex(out, sizeof(out), r->stdout_hash, 32);
  sodium_bin2hex(err, sizeof(err), r->stderr_hash, 32);
  printf("stdout:    blake2b-256 %s%s\nstderr:    blake2b-256 %s%s\n", out,
         r->stdout_truncated ? " (truncated)" : "", err, r->stderr_truncated ? " (truncated)" : "");
  static const char *const levels[] = {"none", "contained", "isolated"};
  printf("sandbox:   requested %s, level %s, mechanism %s, downgrade %s\n", levels[r->requested],
         r->level == RECEIPT_LEVEL_NULL ? "-" : levels[r->level],
         r->mechanism[0] ? r->mechanism : "-", r->downgrade_reason[0] ? r->downgrade_reason : "-");
  printf("limits:    memory %s, processes %s, cpu %s, time %s, disk %s\n",
         msg_enforce_name(r->limits[0]), msg_enforce_name(r->limits[1]),
         msg_enforce_name(r->limits[2]), msg_enforce_name(r->limits[3]),
         msg_enforce_name(r->limits[4]));
  printf("timed_out: %s\n", r->timed_out ? "yes" : "no");
}

int server_cmd_verify_receipt(const struct server_cli *cli, int argc, char **argv) {
  (void)cli;
  static const struct option opts[] = {
      {"trust", required_argument, NULL, 't'}, {"help", no_argument, NULL, 'h'}, {0}};
  const char *trust = NULL;
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 't':
      trust = optarg;
      break;
    case 'h':
      printf("%s\n", verify_usage);
      return 0;
    default:
      return server_cli_failf(CORDON_E_USAGE, "%s", verify_usage);
    }
  }
  if (argc - optind != 1 || !trust)
    return server_cli_failf(CORDON_E_USAGE, "%s", verify_usage);
  struct cordon_diag diag = {{0}};
  char *text = NULL, *buf = NULL;
  size_t text_len, len;
  uint8_t server_key[32];
  int err = core_read_file(trust, KEYFILE_MAX_BYTES, CORDON_E_CONFIG_INVALID, trust, &text,
                           &text_len, &diag);
  if (!err)
    err = keyfile_parse(KEYFILE_TICKET_PUBLIC, text, text_len, server_key, &diag);
  free(text);
  if (err) {
    if (err == CORDON_E_CONFIG_INVALID)
      return server_cli_failf(err, "%s: %s", trust, diag.msg);
    return server_cli_fail(err, &diag);
  }
  err = core_read_file(argv[optind], RECEIPT_FILE_MAX, CORDON_E_LIMIT, argv[optind], &buf, &len,
                       &diag);
  struct receipt r;
  struct receipt_statement s;
  if (!err)
    err = receipt_file_verify((const uint8_t *)buf, len, server_key, &r, &s, &diag);
  free(buf);
  if (err) {
    fprintf(stderr, "%s: receipt invalid: %s\n", SERVER_PROG,
            diag.msg[0] ? diag.msg : cordon_err_message(err));
    return 1;
  }
  print_receipt(&r, &s);
  return fflush(stdout) == 0 ? 0 : 1;
}

int server_cmd_keys(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {
      {"state", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {0}};
  const char *state = cli->state_dir;
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      state = optarg;
      break;
    case 'h':
      printf("%s\n", keys_usage);
      return 0;
    default:
      return server_cli_failf(CORDON_E_USAGE, "%s", keys_usage);
    }
  }
  if (argc - optind != 1 || strcmp(argv[optind], "export-public") != 0)
    return server_cli_failf(CORDON_E_USAGE, "%s", keys_usage);
  struct cordon_diag diag = {{0}};
  uint8_t *sk = NULL, pk[32];
  int err = load_ticket_key(state, &sk, pk, &diag);
  if (err)
    return server_cli_fail(err, &diag);
  sodium_free(sk);
  char line[KEYFILE_MAX_BYTES];
  size_t n;
  if (keyfile_format(KEYFILE_TICKET_PUBLIC, pk, "cordon-server ticket key", line, sizeof(line),
                     &n) < 0)
    return server_cli_failf(CORDON_E_INTERNAL, "cannot format the key");
  if (fwrite(line, 1, n, stdout) != n || fflush(stdout) != 0)
    return server_cli_failf(-EIO, "cannot write to stdout");
  return 0;
}
