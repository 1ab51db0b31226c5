#!/usr/bin/env bash
# Run a command — by default scripts/test.sh, the whole suite — on a copy of
# this checkout inside a clean, minimal Debian 12 root, so that everything
# the suite needs is installed by the project's own scripts and nothing
# installed by hand on this machine can make it pass.
#
# 1. the base: `debootstrap --variant=minbase bookworm` from the mirror this
#    machine's apt sources use, kept untouched as a tarball in the cache
#    (CORDON_FRESH_CACHE, default /var/cache/cordon-fresh) and unpacked
#    afresh for every run (CORDON_FRESH_REBUILD=1 makes it again);
# 2. in the copy: this machine's apt sources (not the deb-src entries
#    scripts/build-windows.sh adds: it adds them itself), keyrings and the
#    apt settings that say how to reach the mirror; /etc/resolv.conf;
#    downloaded .debs are kept in the cache (archives/) between runs,
#    CORDON_FRESH_APT_CACHE=0 downloads them every time;
# 3. the checkout, as a clone of HEAD with the working tree's changes on
#    top (tracked files as they are now, untracked files that are not
#    ignored; build directories are not copied), at /src/cordon;
# 4. the command runs as root in a new mount namespace whose root is the
#    copy (bwrap --bind ROOT /, which is pivot_root: the kernel refuses
#    user namespaces to a chrooted process, and the suite's unprivileged
#    bwrap needs one), with this machine's /proc, /sys (so its cgroup
#    hierarchies) and /dev bound in: a new procfs cannot be mounted in a
#    user namespace while the visible one is partly covered, so a fresh
#    --proc here would stop the inner bwrap from mounting its own. The
#    environment is cleared but for PATH, HOME=/root, LANG and CORDON_*.
#    On a cgroup v2-only machine the command is moved to the root cgroup
#    first (CORDON_FRESH_CGROUP=keep leaves it where it is): the agent
#    makes a job's cgroup below its own, and v2 lets a cgroup that holds
#    processes enable controllers for its children only at the root.
# The copy is deleted afterwards (CORDON_FRESH_KEEP=1 keeps it and prints
# where). Needs root. Exit status: the command's.
# Usage: scripts/test-fresh.sh [COMMAND [ARG...]]   (run from /src/cordon)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CORDON_FRESH_CACHE:-/var/cache/cordon-fresh}
suite=bookworm
start=$(date +%s)
log() { echo "test-fresh: $*" >&2; }
((${#})) || set -- scripts/test.sh

if [ "$(id -u)" -ne 0 ]; then
  log "needs root (debootstrap, a mount namespace)"
  exit 1
fi

# --- the host's tools --------------------------------------------------------
missing=()
for p in debootstrap bubblewrap debian-archive-keyring git; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]} on this machine"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- which mirror and which sources ----------------------------------------
# the host's own source files; cordon-* are written by scripts/build-windows.sh
host_sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && [[ "$(basename "$f")" != cordon-* ]] && host_sources+=("$f")
done
mirror=${CORDON_FRESH_MIRROR:-}
if [ -z "$mirror" ] && ((${#host_sources[@]})); then
  # the first "deb" source of the suite: deb822 stanzas, then one-line entries
  mirror=$(awk -v s="$suite" 'BEGIN { RS = "" }
    { t = ""; u = ""; v = ""; n = split($0, l, "\n")
      for (i = 1; i <= n; i++) {
        if (l[i] ~ /^Types:/) t = " " substr(l[i], 7) " "
        else if (l[i] ~ /^Suites:/) v = " " substr(l[i], 8) " "
        else if (l[i] ~ /^URIs:/) u = substr(l[i], 6)
      }
      gsub(/[ \t]+/, " ", t); gsub(/[ \t]+/, " ", v)
      if (index(t, " deb ") && index(v, " " s " ")) { split(u, w, " "); print w[1]; exit } }' \
    $(printf '%s\n' "${host_sources[@]}" | grep '\.sources$') /dev/null)
  [ -n "$mirror" ] || mirror=$(sed -E 's/\[[^]]*\]//' $(printf '%s\n' "${host_sources[@]}" | grep '\.list$') /dev/null |
    awk -v s="$suite" '$1 == "deb" && $3 == s { print $2; exit }')
fi
use_host_sources=1
if [ -z "$mirror" ]; then
  mirror=http://deb.debian.org/debian
  use_host_sources=0
  log "this machine's apt sources have no $suite: using $mirror and Debian's default sources"
fi
arch=$(dpkg --print-architecture)

# --- 1. the base, cached ----------------------------------------------------
mkdir -p "$cache"
base=$cache/$suite-minbase-$arch-$(printf '%s' "$mirror" | sha256sum | cut -c1-8).tar.gz
exec 9>"$cache/lock"
flock 9
if [ ! -f "$base" ] || [ "${CORDON_FRESH_REBUILD:-0}" = 1 ]; then
  log "debootstrap --variant=minbase $suite from $mirror"
  t0=$(date +%s)
  boot=$(mktemp -d /var/tmp/cordon-fresh-base.XXXXXX)
  if ! debootstrap --variant=minbase "$suite" "$boot/root" "$mirror" >"$boot/debootstrap.log" 2>&1; then
    tail -n 30 "$boot/debootstrap.log" >&2
    rm -rf "$boot"
    exit 1
  fi
  tar -C "$boot/root" --numeric-owner -czf "$base.tmp" .
  mv "$base.tmp" "$base"
  rm -rf "$boot"
  log "base made in $(($(date +%s) - t0))s: $base"
fi
flock -u 9
exec 9>&-

work=$(mktemp -d /var/tmp/cordon-fresh.XXXXXX)
root=$work/root
cleanup() {
  if [ "${CORDON_FRESH_KEEP:-0}" = 1 ]; then
    log "kept the root: $root"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
mkdir "$root"
tar -C "$root" --numeric-owner -xpzf "$base"

# --- 2. apt, DNS -------------------------------------------------------------
if [ "$use_host_sources" = 1 ]; then
  rm -f "$root/etc/apt/sources.list"
  for f in "${host_sources[@]}"; do cp "$f" "$root$f"; done
  for d in /etc/apt/trusted.gpg.d /etc/apt/keyrings; do
    [ -d "$d" ] && mkdir -p "$root$d" && cp -a "$d/." "$root$d/"
  done
  [ -f /etc/apt/trusted.gpg ] && cp /etc/apt/trusted.gpg "$root/etc/apt/trusted.gpg"
  # local settings (owned by no package) about reaching the mirror: proxies,
  # TLS, release-file dates
  for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
    [ -f "$f" ] && ! dpkg -S "$f" >/dev/null 2>&1 &&
      grep -Eqi 'Acquire::(https?::|ftp::)?(Proxy|Check-Valid-Until|Check-Date)|Acquire::https?::' "$f" &&
      cp "$f" "$root$f"
  done
else
  cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb http://security.debian.org/debian-security $suite-security main
EOF
fi
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# debootstrap writes no /etc/hosts; every installed Debian has one (the
# installer's), and getaddrinfo("localhost") without network needs it
[ -s "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
binds=()
if [ "${CORDON_FRESH_APT_CACHE:-1}" = 1 ]; then
  mkdir -p "$cache/archives/partial"
  binds+=(--bind "$cache/archives" /var/cache/apt/archives)
fi

# --- 3. the checkout ---------------------------------------------------------
dst=$root/src/cordon
mkdir -p "$dst"
if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$dst" init -q
  git -C "$dst" fetch -q --depth 1 "file://$repo" HEAD
  git -C "$dst" checkout -q --detach FETCH_HEAD
  # the working tree on top: what is there now, tracked or not ignored
  git -C "$repo" ls-files -z --cached --others --exclude-standard |
    (cd "$repo" && while IFS= read -r -d '' f; do
       if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
     done) |
    tar -C "$repo" --null -T - -cf - | tar -C "$dst" -xf -
  git -C "$repo" ls-files -z --deleted | (cd "$dst" && xargs -0r rm -f --)
  log "checkout: $(git -C "$repo" rev-parse --short HEAD) plus $(git -C "$repo" status --porcelain | wc -l) changed or new files"
else
  tar -C "$repo" --exclude='./build*' -cf - . | tar -C "$dst" -xf -
fi

# --- 4. run ------------------------------------------------------------------
if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] && [ "${CORDON_FRESH_CGROUP:-root}" = root ]; then
  echo $$ >/sys/fs/cgroup/cgroup.procs 2>/dev/null ||
    log "could not move to the root cgroup: the suite's jobs may get no cgroup"
fi
envs=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root USER=root
      LOGNAME=root LANG=C.UTF-8 TERM="${TERM:-dumb}")
while IFS= read -r v; do
  [[ "$v" == CORDON_FRESH_* ]] || envs+=("$v")
done < <(env | grep '^CORDON_' || true)
log "running $* in a clean $suite root ($root)"
set +e
bwrap --bind "$root" / --bind /proc /proc --dev-bind /dev /dev --bind /sys /sys \
  "${binds[@]}" --cap-add ALL --die-with-parent --chdir /src/cordon \
  /usr/bin/env -i "${envs[@]}" "$@"
rc=$?
set -e
log "$* exited $rc; $(($(date +%s) - start))s in all"
exit "$rc"
