#!/usr/bin/env bash
# Build the cordon-agent and cordon-server .deb packages (Debian 12) into
# OUTDIR with dpkg-deb. The programs are built in build-deb/ from the
# working tree (CORDON_DEB_SOURCE=head: from `git archive HEAD` instead).
# Library dependencies come from dpkg-shlibdeps; the rest are listed here.
# Version: $CORDON_VERSION, default 0.1.0~git<date>.<commit>.
# Usage: scripts/build-deb.sh OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=${1:?usage: scripts/build-deb.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=$repo/build-deb
for tool in dpkg-deb dpkg-shlibdeps cmake; do
  command -v "$tool" >/dev/null || { echo "build-deb: $tool is missing (apt-get install dpkg-dev cmake)" >&2; exit 1; }
done

src=$repo
if [ "${CORDON_DEB_SOURCE:-worktree}" = head ]; then
  src=$build/src
  rm -rf "$src" && mkdir -p "$src"
  git archive HEAD | tar -x -C "$src"
fi
cmake -S "$src" -B "$build/obj" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCORDON_PLATFORM=linux \
  -DCORDON_SERVER=ON -DCORDON_TESTS=OFF >/dev/null
cmake --build "$build/obj" -j"$(nproc)" --target cordon-agent cordon-server >/dev/null

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
version=${CORDON_VERSION:-0.1.0~git$(date -u +%Y%m%d).$commit}
arch=$(dpkg --print-architecture)
maint="cordon maintainers <cordon@localhost>"

# dpkg-shlibdeps wants a debian/control next to it
shl=$build/shlibs
rm -rf "$shl" && mkdir -p "$shl/debian"
printf 'Source: cordon\n\nPackage: cordon\nArchitecture: any\n' >"$shl/debian/control"
libdeps() {
  (cd "$shl" && dpkg-shlibdeps -O "$1" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
}

# stage NAME: an empty package root with DEBIAN/
stage() {
  local d=$build/pkg/$1
  rm -rf "$d"
  mkdir -p "$d/DEBIAN" "$d/usr/bin" "$d/usr/share/doc/$1"
  echo "$d"
}

install_doc() {
  local d=$1 name=$2
  install -m 0644 "$src/docs/OPERATIONS.md" "$src/docs/SECURITY.md" "$d/usr/share/doc/$name/"
  cat >"$d/usr/share/doc/$name/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: cordon
Files: *
Copyright: the cordon authors
License: see the source repository
EOF
  chmod 0644 "$d/usr/share/doc/$name/copyright"
}

control() { # DIR NAME DEPENDS DESCRIPTION...
  local d=$1 name=$2 deps=$3
  shift 3
  local size
  size=$(du -sk --exclude=DEBIAN "$d" | cut -f1)
  {
    echo "Package: $name"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: $maint"
    echo "Installed-Size: $size"
    echo "Depends: $deps"
    echo "Section: admin"
    echo "Priority: optional"
    echo "Homepage: https://localhost/cordon"
    echo "Description: $1"
    shift
    for line in "$@"; do echo " $line"; done
  } >"$d/DEBIAN/control"
}

# ---- cordon-agent ----
a=$(stage cordon-agent)
install -m 0755 -s "$build/obj/cordon-agent" "$a/usr/bin/cordon-agent"
install -D -m 0644 "$src/installers/linux/cordon-agent.service" "$a/lib/systemd/system/cordon-agent.service"
install -D -m 0644 "$src/installers/linux/cordon-agent-user.service" "$a/usr/lib/systemd/user/cordon-agent.service"
install_doc "$a" cordon-agent
if [ -d "$src/examples/hello" ]; then
  mkdir -p "$a/usr/share/doc/cordon-agent/examples"
  cp -r "$src/examples/hello" "$a/usr/share/doc/cordon-agent/examples/"
  find "$a/usr/share/doc/cordon-agent/examples" -type f -exec chmod 0644 {} + -o -type d -exec chmod 0755 {} +
  find "$a/usr/share/doc/cordon-agent/examples" -type f -name '*.sh' -exec chmod 0755 {} +
fi
control "$a" cordon-agent "$(libdeps "$a/usr/bin/cordon-agent"), bubblewrap, passwd" \
  "run signed executor packages in a sandbox (cordon agent)" \
  "The cordon agent verifies signed executor packages and runs them in the" \
  "strongest sandbox the device has: bubblewrap and seccomp, as the" \
  "unprivileged cordon-job account. The systemd unit is installed but not" \
  "enabled: pair the device first, then enable cordon-agent.service."
cat >"$a/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# cordon-agent: the job account and the state directory. The unit is not
# enabled here: the agent must be paired first (docs/OPERATIONS.md).
set -e
if [ "$1" = configure ]; then
  mkdir -p /var/lib/cordon-agent
  chmod 0711 /var/lib/cordon-agent
  if ! getent passwd cordon-job >/dev/null; then
    useradd --system --user-group --home-dir /var/lib/cordon-job --create-home \
      --shell /usr/sbin/nologin --comment "cordon jobs" cordon-job
    # purge removes the account only if this package made it
    touch /var/lib/cordon-agent/.job-user-created-by-package
  fi
  if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
  fi
fi
exit 0
EOF
cat >"$a/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
  deb-systemd-invoke stop cordon-agent.service >/dev/null || true
fi
exit 0
EOF
cat >"$a/DEBIAN/postrm" <<'EOF'
#!/bin/sh
# remove: the unit is masked (it is gone). purge: the agent's state (keys,
# spool, config) and, if this package made it, the cordon-job account and
# its home.
set -e
if [ "$1" = remove ] && command -v deb-systemd-helper >/dev/null; then
  deb-systemd-helper mask cordon-agent.service >/dev/null || true
fi
if [ "$1" = purge ]; then
  if command -v deb-systemd-helper >/dev/null; then
    deb-systemd-helper purge cordon-agent.service >/dev/null || true
    deb-systemd-helper unmask cordon-agent.service >/dev/null || true
  fi
  if [ -e /var/lib/cordon-agent/.job-user-created-by-package ] && getent passwd cordon-job >/dev/null; then
    userdel cordon-job >/dev/null 2>&1 || true
    getent group cordon-job >/dev/null && groupdel cordon-job >/dev/null 2>&1 || true
    rm -rf /var/lib/cordon-job
  fi
  rm -rf /var/lib/cordon-agent
fi
if [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
fi
exit 0
EOF

# ---- cordon-server ----
s=$(stage cordon-server)
install -m 0755 -s "$build/obj/cordon-server" "$s/usr/bin/cordon-server"
install -D -m 0644 "$src/installers/linux/cordon-server.service" "$s/lib/systemd/system/cordon-server.service"
install -D -m 0644 /dev/stdin "$s/etc/default/cordon-server" <<'EOF'
# cordon-server: where the daemon listens (HOST:PORT). Read by
# cordon-server.service; restart it after a change.
CORDON_SERVER_LISTEN=0.0.0.0:7443
EOF
echo /etc/default/cordon-server >"$s/DEBIAN/conffiles"
install_doc "$s" cordon-server
control "$s" cordon-server "$(libdeps "$s/usr/bin/cordon-server"), passwd" \
  "pair devices and dispatch signed jobs (cordon server)" \
  "The cordon server keeps users, paired devices and jobs in SQLite and" \
  "sends signed executor packages to agents over Noise-encrypted TCP. The" \
  "package creates the cordon-server account and its state (keys and" \
  "database) in /var/lib/cordon-server, and enables cordon-server.service."
cat >"$s/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# cordon-server: its account, its state (made once with `init`, as that
# account) and the unit, enabled and started where systemd runs.
set -e
if [ "$1" = configure ]; then
  if ! getent passwd cordon-server >/dev/null; then
    useradd --system --user-group --home-dir /var/lib/cordon-server --no-create-home \
      --shell /usr/sbin/nologin --comment "cordon server" cordon-server
  fi
  mkdir -p /var/lib/cordon-server
  chown cordon-server:cordon-server /var/lib/cordon-server
  chmod 0700 /var/lib/cordon-server
  if [ ! -e /var/lib/cordon-server/cordon.db ]; then
    if ! runuser -u cordon-server -- /usr/bin/cordon-server --state /var/lib/cordon-server init >/dev/null; then
      echo "cordon-server: init failed; run: runuser -u cordon-server -- cordon-server init" >&2
    fi
  fi
  deb-systemd-helper unmask cordon-server.service >/dev/null || true
  if deb-systemd-helper --quiet was-enabled cordon-server.service; then
    deb-systemd-helper enable cordon-server.service >/dev/null || true
  else
    deb-systemd-helper update-state cordon-server.service >/dev/null || true
    deb-systemd-helper enable cordon-server.service >/dev/null || true
  fi
  if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
    deb-systemd-invoke start cordon-server.service >/dev/null || true
  fi
fi
exit 0
EOF
cat >"$s/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
  deb-systemd-invoke stop cordon-server.service >/dev/null || true
fi
exit 0
EOF
cat >"$s/DEBIAN/postrm" <<'EOF'
#!/bin/sh
# remove: the unit is disabled. purge: the state (keys, database) and the
# cordon-server account go too.
set -e
if [ "$1" = remove ] && command -v deb-systemd-helper >/dev/null; then
  deb-systemd-helper mask cordon-server.service >/dev/null || true
fi
if [ "$1" = purge ]; then
  if command -v deb-systemd-helper >/dev/null; then
    deb-systemd-helper purge cordon-server.service >/dev/null || true
    deb-systemd-helper unmask cordon-server.service >/dev/null || true
  fi
  rm -rf /var/lib/cordon-server
  if getent passwd cordon-server >/dev/null; then
    userdel cordon-server >/dev/null 2>&1 || true
  fi
  getent group cordon-server >/dev/null && groupdel cordon-server >/dev/null 2>&1 || true
fi
if [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
fi
exit 0
EOF

for d in "$a" "$s"; do
  chmod 0755 "$d/DEBIAN/postinst" "$d/DEBIAN/prerm" "$d/DEBIAN/postrm"
  name=$(basename "$d")
  dpkg-deb --root-owner-group -Zxz --build "$d" "$out/${name}_${version}_${arch}.deb" >/dev/null
  echo "$out/${name}_${version}_${arch}.deb"
done
