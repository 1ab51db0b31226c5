#!/usr/bin/env bash
# Build cordon-agent.msi on Linux with wixl (Debian's msitools) from
# installers/windows/cordon-agent.wxs, around the cordon-agent.exe that
# scripts/build-windows.sh cross-builds (CORDON_WIN_BUILD, default
# build-win/), or $CORDON_AGENT_EXE when set. Installs wixl and msitools
# when missing (apt-get, as root).
# Version: $CORDON_MSI_VERSION, default the project version in CMakeLists.txt
# (numbers only: MSI versions are a.b.c).
# The LAST line printed on stdout is the path of the .msi.
# Usage: scripts/build-msi.sh [OUTDIR]   (default build-msi/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build-msi}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { echo "build-msi: $*" >&2; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v wixl >/dev/null || ! command -v msiinfo >/dev/null; then
  log "installing wixl msitools"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -qq --no-install-recommends wixl msitools >/dev/null ||
    { as_root apt-get update -qq && as_root apt-get install -y -qq --no-install-recommends wixl msitools >/dev/null; }
fi

exe=${CORDON_AGENT_EXE:-}
if [ -z "$exe" ]; then
  exe=$("$root/scripts/build-windows.sh" | tail -n1)
fi
[ -f "$exe" ] || { log "no cordon-agent.exe ($exe)"; exit 1; }

version=${CORDON_MSI_VERSION:-$(sed -n 's/^project(cordon VERSION \([0-9][0-9.]*\) .*/\1/p' "$root/CMakeLists.txt")}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { log "MSI version must be a.b.c, got '$version'"; exit 1; }

# one version, one ProductCode (a name-based UUID): wixl's "*" would make
# every rebuild another product, installable beside the first
product=$(python3 -c 'import sys, uuid; print(str(uuid.uuid5(uuid.UUID("885E32F0-9AAA-4EC8-BC52-480ABB2D8816"), "cordon-agent " + sys.argv[1])).upper())' "$version")

msi=$out/cordon-agent.msi
log "wixl: cordon-agent.msi $version from $exe"
# wixl finds sources relative to its working directory only (an absolute
# Source fails): run it next to the program
(cd "$(dirname "$exe")" && wixl -a x64 -D Version="$version" -D ProductCode="$product" -D AgentExe="$(basename "$exe")" \
  -o "$msi.tmp" "$root/installers/windows/cordon-agent.wxs")
# what an MSI must hold to do its job: the file, the service row, the
# custom action between InstallFiles and InstallFinalize
trap 'rm -f "$msi.tmp"' EXIT
seq=$(msiinfo export "$msi.tmp" InstallExecuteSequence | tr -d '\r')
at() { awk -F'\t' -v a="$1" '$1 == a { print $3 }' <<<"$seq"; }
ca=$(at RegisterService) fin=$(at InstallFinalize) files=$(at InstallFiles)
[ -n "$ca" ] && [ "$ca" -gt "$files" ] && [ "$ca" -lt "$fin" ] ||
  { log "RegisterService is not sequenced between InstallFiles and InstallFinalize"; exit 1; }
msiinfo export "$msi.tmp" File | grep 'cordon-agent\.exe' >/dev/null || { log "no cordon-agent.exe in the File table"; exit 1; }
mv "$msi.tmp" "$msi"
echo "$msi"
