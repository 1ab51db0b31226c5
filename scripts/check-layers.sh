#!/usr/bin/env bash
# The layering rule of docs/ARCHITECTURE.md, checked: fails when a file
# includes across a forbidden boundary, when shared code tests the OS, or
# (given a build directory) when a program's library calls into its main.c.
#
#   compat/    -> compat/ (the POSIX shim every layer may include)
#   core/      -> compat/ core/
#   proto/     -> compat/ core/ proto/
#   net/       -> compat/ core/ proto/ net/
#   svc/       -> compat/ core/ svc/ (daemon services: the journal writer;
#                 nothing of the sandbox or the wire)
#   platform/  -> core/ compat/ platform/ (a platform/<os>/ file: only its
#                 own OS folder, platform/posix/ for linux and macos, and
#                 the OS-neutral platform/*.h; an OS-neutral file: no OS folder)
#   server/    -> compat/ core/ proto/ net/ svc/ server/
#   agent/     -> core/ proto/ net/ svc/ compat/ agent/ and the public platform/*.h
#
# Usage: scripts/check-layers.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
fail=0
bad() {
  echo "check-layers: $*" >&2
  fail=1
}

allowed_for() { # the include prefixes a file may use, by its path
  case "$1" in
  core/*) echo "compat/ core/" ;;
  proto/*) echo "compat/ core/ proto/" ;;
  net/*) echo "compat/ core/ proto/ net/" ;;
  compat/*) echo "compat/" ;;
  svc/*) echo "compat/ core/ svc/" ;;
  platform/linux/* | platform/macos/*)
    local os=${1#platform/}
    os=${os%%/*}
    echo "core/ compat/ platform/$os/ platform/posix/ platform/TOP"
    ;;
  platform/windows/*) echo "core/ compat/ platform/windows/ platform/TOP" ;;
  platform/posix/*) echo "core/ compat/ platform/posix/ platform/TOP" ;;
  platform/*) echo "core/ compat/ platform/TOP" ;;
  server/*) echo "compat/ core/ proto/ net/ svc/ server/" ;;
  agent/*) echo "core/ proto/ net/ svc/ compat/ agent/ platform/TOP" ;;
  esac
}

while IFS= read -r f; do
  allowed=$(allowed_for "$f")
  [ -n "$allowed" ] || continue
  while IFS= read -r inc; do
    ok=0
    for a in $allowed; do
      if [ "$a" = platform/TOP ]; then
        # the OS-neutral headers directly under platform/
        case "$inc" in platform/*/*) ;; platform/*.h) ok=1 ;; esac
      else
        case "$inc" in "$a"*) ok=1 ;; esac
      fi
    done
    # anything not in a cordon folder is a system or library header
    case "$inc" in core/* | proto/* | net/* | compat/* | svc/* | platform/* | server/* | agent/*) ;; *) ok=1 ;; esac
    [ $ok = 1 ] || bad "$f includes \"$inc\", outside its layer (allowed: ${allowed//platform\/TOP/platform\/*.h})"
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(git ls-files 'core/*' 'proto/*' 'net/*' 'compat/*' 'svc/*' 'platform/*' 'server/*' 'agent/*' |
  grep -E '\.(c|h)$')

# Shared code never tests the OS: feature macros come from the build.
while IFS= read -r hit; do
  bad "OS test in shared code: $hit"
done < <(git ls-files 'core/*' 'proto/*' 'net/*' 'svc/*' 'server/*' 'agent/*' 'platform/*.c' 'platform/*.h' |
  grep -E '\.(c|h)$' | grep -v -E '^platform/(linux|macos|windows|posix)/' |
  xargs grep -n -E '^[[:space:]]*#[[:space:]]*(if|ifdef|ifndef|elif).*(_WIN32|_WIN64|__linux__|__APPLE__|__MACH__|_MSC_VER|__MINGW32__|__MINGW64__|__CYGWIN__)' 2>/dev/null)

# No library file calls into its program's main.c.
build=${1:-}
if [ -n "$build" ]; then
  for prog in agent server; do
    lib="$build/libcordon_$prog.a"
    main=$(find "$build/CMakeFiles/cordon-$prog.dir" -name 'main.c.o' 2>/dev/null | head -n1)
    [ -f "$lib" ] && [ -n "$main" ] || continue
    defined=$(nm --defined-only -g "$main" | awk '$2 ~ /[TDBR]/ && $3 != "main" {print $3}' | sort -u)
    [ -n "$defined" ] || continue
    used=$(nm -u "$lib" | awk '{print $NF}' | sort -u)
    for sym in $(comm -12 <(echo "$defined") <(echo "$used")); do
      bad "libcordon_$prog.a calls $sym, which is defined in $prog/main.c"
    done
  done
fi

# The programs load no library they do not need at every start: libpq is
# opened by server/pq.c on the first PostgreSQL open, never linked (a CLI
# command linking it pays ~2.5 ms of loading at each start).
if [ -n "$build" ]; then
  for prog in cordon-server cordon-agent; do
    [ -f "$build/$prog" ] || continue
    if readelf -d "$build/$prog" | grep -q 'NEEDED.*libpq'; then
      bad "$prog links libpq: open it with pq_load (server/pq.h) instead"
    fi
  done
fi

if [ $fail = 0 ]; then
  echo "check-layers: ok"
fi
exit $fail
