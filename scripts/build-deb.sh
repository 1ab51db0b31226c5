#!/usr/bin/env bash
# Build the cordon-agent and cordon-server .deb packages (and their -dbgsym
# packages) into OUTDIR with dpkg-buildpackage, from debian/. The source is
# copied to build-deb/src first (the working tree's tracked and untracked,
# not ignored, files; CORDON_DEB_SOURCE=head: `git archive HEAD`), so the
# checkout is not written to. Missing build dependencies are installed with
# `apt-get build-dep` (as root). Version: debian/changelog's, or
# $CORDON_VERSION (a changelog entry is added to the copy).
# Prints the path of each .deb, one a line.
# Usage: scripts/build-deb.sh OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=${1:?usage: scripts/build-deb.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=$repo/build-deb
log() { echo "build-deb: $*" >&2; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# the tools of the build itself (dpkg-dev and debhelper), then the
# package's Build-Depends
tools=()
command -v dpkg-buildpackage >/dev/null || tools+=(dpkg-dev)
command -v dh >/dev/null || tools+=(debhelper)
if ((${#tools[@]})); then
  log "installing ${tools[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -qq --no-install-recommends "${tools[@]}" >/dev/null ||
    { as_root apt-get update -qq && as_root apt-get install -y -qq --no-install-recommends "${tools[@]}" >/dev/null; }
fi

rm -rf "$build/src"
src=$build/src/cordon
mkdir -p "$src"
if [ "${CORDON_DEB_SOURCE:-worktree}" = head ]; then
  git archive HEAD | tar -x -C "$src"
else
  git ls-files -z --cached --others --exclude-standard |
    (while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done) |
    tar --null -T - -c | tar -x -C "$src"
fi

[ -f "$src/debian/control" ] || { log "no debian/ in the source ($src)"; exit 1; }
if ! (cd "$src" && dpkg-checkbuilddeps >/dev/null 2>&1); then
  log "installing the build dependencies (apt-get build-dep)"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get build-dep -y -qq "$src" >/dev/null ||
    { as_root apt-get update -qq && as_root apt-get build-dep -y -qq "$src" >/dev/null; }
fi

if [ -n "${CORDON_VERSION:-}" ]; then
  # a snapshot entry on top, in the changelog's own format
  commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
  maint=$(sed -n 's/^Maintainer: //p' "$src/debian/control")
  {
    printf 'cordon (%s) unstable; urgency=medium\n\n' "$CORDON_VERSION"
    printf '  * Snapshot of commit %s.\n\n' "$commit"
    printf ' -- %s  %s\n\n' "$maint" "$(date -R)"
    cat "$src/debian/changelog"
  } >"$src/debian/changelog.new"
  mv "$src/debian/changelog.new" "$src/debian/changelog"
fi

version=$(cd "$src" && dpkg-parsechangelog -S Version)
arch=$(dpkg --print-architecture)
log "dpkg-buildpackage: cordon $version ($build/src/build.log)"
(cd "$src" && dpkg-buildpackage -us -uc -b -j"$(nproc)" >"$build/src/build.log" 2>&1) ||
  { tail -n 40 "$build/src/build.log" >&2; log "dpkg-buildpackage failed"; exit 1; }

changes=$build/src/cordon_${version}_${arch}.changes
# the files the .changes lists: the .debs, -dbgsym .debs, the .buildinfo
listed=$(sed -n '/^Files:/,/^[^ ]/s/^ [0-9a-f]\{32\} [0-9]* [^ ]* [^ ]* //p' "$changes")
cp "$changes" "$out/"
while IFS= read -r f; do
  cp "$build/src/$f" "$out/"
done <<<"$listed"
while IFS= read -r f; do
  case $f in *.deb) echo "$out/$f" ;; esac
done <<<"$listed"
