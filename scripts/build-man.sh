#!/usr/bin/env bash
# Build the manual pages from their scdoc sources.
#
# Usage: scripts/build-man.sh OUTDIR
#
# Every docs/man/NAME.SECTION.scd becomes OUTDIR/NAME.SECTION (roff, not
# compressed): today cordon-server.8, cordon-agent.8 and cordon-manifest.5.
# OUTDIR (relative to the current directory) is created if missing; the
# path of each page written is printed on stdout, one per line. Needs
# scdoc (Debian package `scdoc`; $SCDOC overrides the program); it is not
# installed from here, so a package build can declare it instead. The page
# date is SOURCE_DATE_EPOCH when set, else the last commit that touched
# docs/man (so two builds of one commit are identical), else today.
# Exit status: 0 every page built, 1 a page failed (none is left half
# written), 2 bad usage.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: scripts/build-man.sh OUTDIR" >&2
  exit 2
fi
src=$(cd "$(dirname "$0")/../docs/man" && pwd)
scdoc=${SCDOC:-scdoc}
if ! command -v "$scdoc" >/dev/null 2>&1; then
  echo "build-man: $scdoc not found (apt-get install scdoc)" >&2
  exit 1
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && command -v git >/dev/null 2>&1; then
  t=$(git -C "$src" log -1 --format=%ct -- . 2>/dev/null || true)
  [ -n "$t" ] && export SOURCE_DATE_EPOCH=$t
fi
shopt -s nullglob
pages=("$src"/*.scd)
if [ ${#pages[@]} -eq 0 ]; then
  echo "build-man: no *.scd in $src" >&2
  exit 1
fi
for scd in "${pages[@]}"; do
  name=$(basename "$scd" .scd)
  tmp=$(mktemp "$out/.$name.XXXXXX")
  if ! "$scdoc" <"$scd" >"$tmp"; then
    rm -f "$tmp"
    echo "build-man: scdoc failed on docs/man/$name.scd" >&2
    exit 1
  fi
  chmod 0644 "$tmp"
  mv -f "$tmp" "$out/$name"
  echo "$out/$name"
done
