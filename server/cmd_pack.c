/* cordon-server pack: build and sign an executor package from a directory. */
#include <errno.h>
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/id.h"
#include "server/cli.h"
#include "server/keys.h"
#include "server/pack.h"

int server_cmd_pack(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"key", required_argument, NULL, 'k'},
                                       {"state", required_argument, NULL, 's'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  const char *state = cli->state_dir, *out = NULL, *key = NULL;
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
    switch (c) {
    case 'o':
      out = optarg;
      break;
    case 'k':
      key = optarg;
      break;
    case 's':
      state = optarg;
      break;
    case 'h':
      return server_cli_help("pack", NULL);
    default:
      return server_cli_bad_option("pack", NULL, argv);
    }
  }
  if (optind + 1 != argc || !out)
    return server_cli_usage("pack", NULL,
                            optind == argc ? "DIR is missing"
                            : !out         ? "-o FILE.cpkg is missing"
                                           : "one DIR expected");
  const char *dir = argv[optind];

  char *key_path = NULL;
  if (key)
    key_path = strdup(key);
  struct cordon_diag diag = {{0}};
  if (!key) { /* the current publisher key (after `keys rotate`, the newest) */
    char path[4096];
    int kr = server_keys_publisher_path(state, path, sizeof(path), &diag);
    if (kr < 0)
      return server_cli_fail(kr == CORDON_E_CONFIG_INVALID ? kr : CORDON_E_USAGE, &diag);
    key_path = strdup(path);
  }
  if (!key_path)
    return server_cli_failf(-ENOMEM, "out of memory");

  uint8_t *sk = NULL;
  int err = keys_load_publisher_secret(key_path, &sk, &diag);
  free(key_path);
  if (err)
    return server_cli_fail(err == CORDON_E_CONFIG_INVALID ? err : CORDON_E_USAGE, &diag);

  struct pack_summary sum;
  err = pack_dir(dir, out, sk, &sum, &diag);
  sodium_free(sk);
  if (err)
    return server_cli_fail(err, &diag);
  char hash[2 * CPKG_HASH_SIZE + 1], id[CORDON_ID_HEX_SIZE];
  sodium_bin2hex(hash, sizeof(hash), sum.index_hash, sizeof(sum.index_hash));
  cordon_id_to_hex(sum.key_id, id);
  fprintf(stderr, "%s: packed %zu files (%llu bytes) into %s (%llu bytes); index %s, key id %s\n",
          SERVER_PROG, sum.n_files, (unsigned long long)sum.total, out,
          (unsigned long long)sum.size, hash, id);
  return 0;
}
