/* cordon-server version [--json] (and --version): what this binary is, which
 * protocol versions it speaks and what it was built with. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <uv.h>

#include "proto/cpkg.h"
#include "proto/msg.h"
#include "proto/noise.h"
#include "server/cli.h"
#include "server/db.h"

#if defined(__SANITIZE_ADDRESS__)
#define VERSION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VERSION_ASAN 1
#endif
#endif
#ifndef VERSION_ASAN
#define VERSION_ASAN 0
#endif
#ifdef __OPTIMIZE__
#define VERSION_OPTIMIZED 1
#else
#define VERSION_OPTIMIZED 0
#endif

static json_t *version_json(void) {
  return json_pack(
      "{s:s, s:s, s:{s:i, s:i, s:i, s:i, s:i}, s:{s:b, s:b, s:b}, s:{s:s, s:s, s:s, s:s}}",
      "program", SERVER_PROG, "version", SERVER_VERSION, "protocol", "session_min",
      MSG_PROTO_VERSION_MIN, "session_max", MSG_PROTO_VERSION_MAX, "noise_wire",
      (int)NOISE_WIRE_VERSION, "package_format", CPKG_FORMAT_VERSION, "database_schema",
      SERVER_DB_SCHEMA_VERSION, "build", "systemd", CORDON_WITH_SYSTEMD, "optimized",
      VERSION_OPTIMIZED, "asan", VERSION_ASAN, "libraries", "libsodium", sodium_version_string(),
      "libuv", uv_version_string(), "sqlite", sqlite3_libversion(), "jansson",
      jansson_version_str());
}

int server_cmd_version(const struct server_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, 'j'}, {"state", required_argument, NULL, 's'}, {0}};
  (void)cli;
  int json = 0, c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == 'j')
      json = 1;
    else if (c != 's')
      return server_cli_bad_option("version", NULL, argv);
  }
  if (optind != argc)
    return server_cli_usage("version", NULL, "no arguments expected");
  if (json)
    return server_cli_print_json(version_json(), 0);
  printf("%s %s\n"
         "protocol: session %d..%d, noise wire %u, package format %d, database schema %d\n"
         "build:    systemd %s, optimized %s, asan %s\n"
         "libraries: libsodium %s, libuv %s, SQLite %s, jansson %s\n",
         SERVER_PROG, SERVER_VERSION, MSG_PROTO_VERSION_MIN, MSG_PROTO_VERSION_MAX,
         (unsigned)NOISE_WIRE_VERSION, CPKG_FORMAT_VERSION, SERVER_DB_SCHEMA_VERSION,
         CORDON_WITH_SYSTEMD ? "yes" : "no", VERSION_OPTIMIZED ? "yes" : "no",
         VERSION_ASAN ? "yes" : "no", sodium_version_string(), uv_version_string(),
         sqlite3_libversion(), jansson_version_str());
  return fflush(stdout) == 0 ? 0 : server_cli_failf(-EIO, "cannot write to stdout");
}
