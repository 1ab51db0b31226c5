#!/usr/bin/env bash
# Cross-build cordon-agent.exe and the Windows tests with mingw-w64.
#
# 1. installs mingw-w64 and wine (64-bit only) when missing;
# 2. adds deb-src entries for the Debian suites this machine already uses;
# 3. fetches libsodium, libuv1, msgpack-c and jansson with `apt-get source`
#    and builds them statically for x86_64-w64-mingw32 into a cache
#    directory keyed by their versions and the compiler's (reused while
#    those stay the same);
# 4. configures and builds cordon for the windows platform layer.
#
# The LAST line printed on stdout is the path of cordon-agent.exe.
# Environment: CORDON_WIN_BUILD (default build-win), CORDON_WIN_CACHE
# (default /var/cache/cordon-win), CORDON_WIN_JOBS (default nproc).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CORDON_WIN_BUILD:-$root/build-win}
cache=${CORDON_WIN_CACHE:-/var/cache/cordon-win}
jobs=${CORDON_WIN_JOBS:-$(nproc)}
host=x86_64-w64-mingw32
srcpkgs=(libsodium libuv1 msgpack-c jansson)

log() { echo "build-windows: $*" >&2; }

# --- 1. tools -------------------------------------------------------------
need=(gcc-mingw-w64-x86-64 g++-mingw-w64-x86-64-win32 binutils-mingw-w64-x86-64 mingw-w64-x86-64-dev wine wine64
      dpkg-dev cmake make pkg-config autoconf automake libtool)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
apt_updated=0
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  apt_updated=1
  # wine64 alone runs 64-bit programs: no i386 architecture is needed
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- 2. deb-src for the same suites ---------------------------------------
have_src() { apt-cache showsrc libsodium 2>/dev/null | grep -c '^Package: libsodium' >/dev/null; }
if ! have_src; then
  list=/etc/apt/sources.list.d/cordon-deb-src.sources
  tmp=$(mktemp)
  # deb822 files: copy each stanza that is "Types: deb" from Debian as deb-src
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && [ "$f" != "$list" ] || continue
    awk 'BEGIN { RS=""; ORS="\n\n" }
         /(^|\n)Types:[ \t]*deb([ \t]|\n|$)/ && /debian/ {
           sub(/Types:[ \t]*deb/, "Types: deb-src"); print }' "$f" >>"$tmp"
  done
  # one-line format (/etc/apt/sources.list)
  if [ -f /etc/apt/sources.list ]; then
    grep -E '^deb[[:space:]]' /etc/apt/sources.list | grep debian |
      sed -E 's/^deb([[:space:]])/deb-src\1/' >"$tmp.list" || true
    [ -s "$tmp.list" ] && as_root install -m 0644 "$tmp.list" /etc/apt/sources.list.d/cordon-deb-src.list
    rm -f "$tmp.list"
  fi
  if [ -s "$tmp" ]; then
    as_root install -m 0644 "$tmp" "$list"
  fi
  rm -f "$tmp"
  log "added deb-src entries; apt-get update"
  as_root apt-get update -qq
  apt_updated=1
  have_src || { log "apt-get source cannot find libsodium after adding deb-src"; exit 1; }
fi

# --- 3. dependencies, cached by version -----------------------------------
src_version() {
  # the version apt-get source would fetch (the newest one)
  apt-cache showsrc --only-source "$1" 2>/dev/null | awk '/^Version:/ { print $2 }' |
    sort -V | tail -n1
}
key=""
for p in "${srcpkgs[@]}"; do
  v=$(src_version "$p")
  if [ -z "$v" ] && [ "$apt_updated" = 0 ]; then
    as_root apt-get update -qq
    apt_updated=1
    v=$(src_version "$p")
  fi
  [ -n "$v" ] || { log "no source version for $p"; exit 1; }
  key+="$p=$v "
done
gccv=$($host-gcc -dumpversion)
recipe=$(sed -n '/^# --- 3/,/^# --- 4/p' "$0" | sha256sum | cut -c1-12)
key+="gcc=$gccv recipe=$recipe"
hash=$(printf '%s' "$key" | sha256sum | cut -c1-16)
prefix=$cache/$hash
if [ -f "$prefix/.complete" ]; then
  log "dependencies: reusing $prefix ($key)"
else
  log "dependencies: building into $prefix ($key)"
  # owned by whoever builds, so a non-root developer can write the cache
  [ -w "$cache" ] || as_root install -d -o "$(id -u)" -g "$(id -g)" "$cache"
  rm -rf "$prefix" "$prefix.work"
  mkdir -p "$prefix.work"
  work=$prefix.work
  (cd "$work" && for p in "${srcpkgs[@]}"; do
     apt-get source -qq --only-source "$p" >/dev/null 2>"$work/$p.source.log" ||
       { cat "$work/$p.source.log" >&2; exit 1; }
   done)
  srcdir() { find "$work" -mindepth 1 -maxdepth 1 -type d -name "$1-*" | head -n1; }
  tc=$root/cmake/mingw-w64.cmake
  cm=(-DCMAKE_TOOLCHAIN_FILE="$tc" -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_BUILD_TYPE=Release
      -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=OFF)

  d=$(srcdir libsodium)
  log "libsodium: $(basename "$d")"
  # Debian's source is the upstream git tree: generate configure first
  (cd "$d" && { [ -x configure ] || autoreconf -fi >"$work/libsodium.log" 2>&1; } &&
   ./configure --host=$host --prefix="$prefix" --disable-shared --enable-static \
     --disable-dependency-tracking >>"$work/libsodium.log" 2>&1 &&
   make -j"$jobs" >>"$work/libsodium.log" 2>&1 && make install >>"$work/libsodium.log" 2>&1) ||
    { tail -n 40 "$work/libsodium.log" >&2; exit 1; }

  d=$(srcdir libuv1)
  log "libuv: $(basename "$d")"
  (cmake -S "$d" -B "$work/uv-build" "${cm[@]}" -DLIBUV_BUILD_TESTS=OFF -DLIBUV_BUILD_BENCH=OFF \
     -DBUILD_TESTING=OFF >"$work/libuv.log" 2>&1 &&
   cmake --build "$work/uv-build" -j"$jobs" >>"$work/libuv.log" 2>&1 &&
   cmake --install "$work/uv-build" >>"$work/libuv.log" 2>&1) ||
    { tail -n 40 "$work/libuv.log" >&2; exit 1; }

  d=$(srcdir msgpack-c)
  log "msgpack-c: $(basename "$d")"
  (cmake -S "$d" -B "$work/msgpack-build" "${cm[@]}" -DMSGPACK_BUILD_TESTS=OFF \
     -DMSGPACK_BUILD_EXAMPLES=OFF -DMSGPACK_ENABLE_SHARED=OFF -DMSGPACK_ENABLE_STATIC=ON \
     -DMSGPACK_GEN_COVERAGE=OFF >"$work/msgpack.log" 2>&1 &&
   cmake --build "$work/msgpack-build" -j"$jobs" >>"$work/msgpack.log" 2>&1 &&
   cmake --install "$work/msgpack-build" >>"$work/msgpack.log" 2>&1) ||
    { tail -n 40 "$work/msgpack.log" >&2; exit 1; }

  d=$(srcdir jansson)
  log "jansson: $(basename "$d")"
  (cmake -S "$d" -B "$work/jansson-build" "${cm[@]}" -DJANSSON_BUILD_DOCS=OFF \
     -DJANSSON_WITHOUT_TESTS=ON -DJANSSON_EXAMPLES=OFF -DJANSSON_BUILD_SHARED_LIBS=OFF \
     -DJANSSON_STATIC_CRT=OFF >"$work/jansson.log" 2>&1 &&
   cmake --build "$work/jansson-build" -j"$jobs" >>"$work/jansson.log" 2>&1 &&
   cmake --install "$work/jansson-build" >>"$work/jansson.log" 2>&1) ||
    { tail -n 40 "$work/jansson.log" >&2; exit 1; }

  # pkg-config files for a static link: the system libraries each needs go
  # into Libs (CMake's pkg_check_modules does not ask for --static), and
  # libuv's static archive is the one linked.
  pc=$prefix/lib/pkgconfig
  mkdir -p "$pc"
  rm -f "$prefix"/lib/*.dll.a "$prefix"/bin/*.dll
  uvlib=uv
  [ -f "$prefix/lib/libuv_a.a" ] && uvlib=uv_a
  uvver=$(grep -E '^Version:' "$pc/libuv.pc" 2>/dev/null | awk '{print $2}')
  cat >"$pc/libuv.pc" <<EOF
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include
Name: libuv
Description: multi-platform support library with a focus on asynchronous I/O (static)
Version: ${uvver:-1}
Libs: -L\${libdir} -l$uvlib -lpsapi -luser32 -ladvapi32 -liphlpapi -luserenv -lws2_32 -ldbghelp -lole32 -lshell32
Cflags: -I\${includedir}
EOF
  # msgpack-c 4.x installs msgpack.pc naming -lmsgpackc; make sure it exists
  if [ ! -f "$pc/msgpack.pc" ]; then
    mver=$(basename "$(srcdir msgpack-c)" | sed 's/^msgpack-c-//')
    mlib=$(basename "$(ls "$prefix"/lib/libmsgpack*.a | head -n1)" .a)
    cat >"$pc/msgpack.pc" <<EOF
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include
Name: MessagePack
Description: Binary-based efficient object serialization library (static)
Version: $mver
Libs: -L\${libdir} -l${mlib#lib}
Cflags: -I\${includedir}
EOF
  fi
  # libsodium's static build wants SODIUM_STATIC so its headers do not
  # declare dllimport symbols
  sed -i 's/^Cflags: \(.*\)$/Cflags: \1 -DSODIUM_STATIC/' "$pc/libsodium.pc"
  grep -q -- '-DSODIUM_STATIC' "$pc/libsodium.pc"
  echo "$key" >"$prefix/versions"
  rm -rf "$work"
  touch "$prefix/.complete"
  log "dependencies ready in $prefix"
fi

# --- 4. cordon --------------------------------------------------------------
export PKG_CONFIG_LIBDIR=$prefix/lib/pkgconfig
export PKG_CONFIG_PATH=
unset PKG_CONFIG_SYSROOT_DIR || true
# a build dir configured against another dependency prefix keeps stale
# pkg-config results in its cache: start it afresh
if [ -f "$build/CMakeCache.txt" ] &&
   ! grep -qx "SODIUM_PREFIX:INTERNAL=$prefix" "$build/CMakeCache.txt"; then
  log "dependencies changed: reconfiguring $build from scratch"
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi
log "configuring cordon in $build"
cmake -S "$root" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/mingw-w64.cmake" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCORDON_PLATFORM=windows -DCORDON_SERVER=OFF -DCORDON_WERROR=ON \
  -DCORDON_TESTS=OFF -DCORDON_WIN_DEPS="$prefix" >"$cache/configure-$$.log" 2>&1 ||
  { cat "$cache/configure-$$.log" >&2; rm -f "$cache/configure-$$.log"; exit 1; }
rm -f "$cache/configure-$$.log"
log "building"
cmake --build "$build" -j"$jobs" >&2
exe=$build/cordon-agent.exe
[ -f "$exe" ] || { log "no $exe"; exit 1; }
echo "$exe"
