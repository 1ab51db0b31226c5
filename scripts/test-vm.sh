#!/usr/bin/env bash
# Run the sandbox, cgroup, seccomp and bwrap test programs of a build on a
# second kernel: Debian 12's own (the package linux-image-amd64 depends
# on), booted under QEMU with cgroup v2 only — what every current
# distribution mounts, where this machine has v1 controllers — and IA32
# emulation and AppArmor, which this machine's kernel lacks.
#
# The kernel .deb is fetched with `apt-get download` (kept in
# /var/cache/apt/archives, which scripts/test-fresh.sh keeps between runs)
# and unpacked into CORDON_VM_CACHE (default /var/cache/cordon-vm): never
# installed on this machine. The guest has no network device; its / is a
# throwaway ext4 disk, sparse, made for each run (not a tmpfs: the tests
# set user.* extended attributes, which tmpfs lacks before 6.6); this
# machine's /usr is shared read-only over 9p, its
# /etc read-only under a tmpfs overlay (the guest may add accounts; this
# machine's files do not change), and the source and build directories
# read-write at their own paths (the programs have them compiled in). In
# the guest the programs run as root in the root cgroup, one at a time,
# their output on the console (this script's stdout), each followed by a
# line "test-vm: NAME exit N (S s)".
#
# Usage: scripts/test-vm.sh BUILD_DIR [PROGRAM...]
#   BUILD_DIR is relative to the checkout. PROGRAM: test programs of
#   BUILD_DIR (default: the subset below; 195 s in all under TCG on 2
#   cores, boot 8 s, the programs about 7 times slower than on this
#   machine); each runs with --jobs 1.
# Environment: CORDON_VM_CACHE; CORDON_VM_TIMEOUT (whole VM, default 900 s);
# CORDON_VM_MEM (MiB, default 2048); CORDON_VM_CONSOLE=1 keeps the kernel's
# messages. Uses KVM where the CPU has VT-x or AMD-V (CORDON_VM_KVM=0: never),
# TCG otherwise.
# Exit status: 0 when every program passed, 1 when one failed (or the VM
# ended before reporting it), 2 on a usage or setup error.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
log() { echo "test-vm: $*" >&2; }
fail() {
  log "$*"
  exit 2
}

(($# >= 1)) || fail "usage: scripts/test-vm.sh BUILD_DIR [PROGRAM...]"
build=$(cd "$1" && pwd -P) || fail "no build directory $1"
shift
[ -f "$build/CMakeCache.txt" ] || fail "$build is no cmake build directory"
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
src=$(cd "$src" && pwd -P) || fail "the source directory of $build is gone"
# the cgroup v2 tests (memory OOM, pids, cgroup.kill, the pool and the
# reaper, as root and as a per-user agent), the seccomp filter with its
# i386 entry, bwrap's argv and its jobs, the limits of every kind
programs=("$@")
((${#programs[@]})) || programs=(
  platform_test_cgroup_linux
  agent_test_run_cgroup_sandbox_linux
  platform_test_sandbox_limits_linux
  platform_test_sandbox_seccomp_linux
  platform_test_seccomp_linux
  platform_test_bwrap_linux
)
for p in "${programs[@]}"; do
  [[ "$p" =~ ^[A-Za-z0-9_]+$ ]] || fail "not a program name: $p"
  [ -x "$build/$p" ] || fail "$build/$p is not built"
done
[ "$(id -u)" -eq 0 ] || fail "needs root (the sandbox tests run jobs as cordon-job)"

# --- this machine's tools ----------------------------------------------------
for t in qemu-system-x86_64:qemu-system-x86 busybox:busybox-static mkfs.ext4:e2fsprogs; do
  command -v "${t%%:*}" >/dev/null || fail "${t%%:*} is missing: scripts/deps.sh installs ${t#*:}"
done
busybox=$(command -v busybox)
file -L "$busybox" 2>/dev/null | grep -q 'statically linked' ||
  [ "$(ldd "$busybox" 2>&1 | grep -c 'not a dynamic')" = 1 ] ||
  fail "$busybox is not static (busybox-static): the guest's first stage runs it before /usr"

# --- the kernel: Debian 12's own, cached --------------------------------------
cache=${CORDON_VM_CACHE:-/var/cache/cordon-vm}
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
if [ -z "$kpkg" ]; then
  apt-get update -qq
  kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
fi
[ -n "$kpkg" ] || fail "apt knows no linux-image-amd64 (no Debian sources?)"
kver=${kpkg#linux-image-}
kdir=$cache/$kpkg
# in load order; those built into the kernel (modules.builtin) are skipped
mods=(virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci
      netfs fscache 9pnet 9pnet_virtio 9p overlay
      virtio_blk crc16 mbcache jbd2 crc32c_generic ext4)
if [ ! -f "$kdir/done" ]; then
  debs=/var/cache/apt/archives
  deb=$(ls "$debs/${kpkg}"_*_amd64.deb 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$deb" ]; then
    log "apt-get download $kpkg"
    mkdir -p "$debs"
    (cd "$debs" && apt-get download -q "$kpkg" >&2) || fail "apt-get download $kpkg failed"
    deb=$(ls "$debs/${kpkg}"_*_amd64.deb | sort -V | tail -n 1)
  fi
  log "unpacking $(basename "$deb") into $kdir"
  x=$(mktemp -d "$cache/unpack.XXXXXX")
  dpkg-deb --fsys-tarfile "$deb" |
    tar -C "$x" -x --wildcards './boot/vmlinuz-*' "./lib/modules/$kver/modules.builtin" \
      "./lib/modules/$kver/kernel/*"
  rm -rf "$kdir"
  mkdir -p "$kdir/mods"
  cp "$x/boot/vmlinuz-$kver" "$kdir/vmlinuz"
  for m in "${mods[@]}"; do
    f=$(find "$x/lib/modules/$kver/kernel" -name "$m.ko*" | head -n 1)
    if [ -z "$f" ]; then
      grep -q "/$m.ko\$" "$x/lib/modules/$kver/modules.builtin" ||
        fail "$kpkg has no module $m, built in or not"
      continue
    fi
    case "$f" in
      *.ko.xz) xz -dc "$f" >"$kdir/mods/$m.ko" ;;
      *.ko.zst) zstd -qdc "$f" >"$kdir/mods/$m.ko" ;;
      *) cp "$f" "$kdir/mods/$m.ko" ;;
    esac
    echo "$m" >>"$kdir/mods/order"
  done
  rm -rf "$x"
  touch "$kdir/done"
fi

# --- the first stage: an initramfs of busybox and the modules -----------------
# (remade when this script, busybox or the kernel changes)
key=$( (cat "$0" "$busybox"; echo "$kpkg") | sha256sum | cut -c1-16)
initrd=$cache/initrd-$key.cpio.gz
if [ ! -f "$initrd" ]; then
  t=$(mktemp -d "$cache/initrd.XXXXXX")
  mkdir -p "$t/bin" "$t/mods" "$t/proc" "$t/sys" "$t/dev" "$t/new"
  cp "$busybox" "$t/bin/busybox"
  cp "$kdir"/mods/* "$t/mods/"
  cat >"$t/init" <<'EOF'
#!/bin/busybox sh
# stage 1: modules, the guest's / (tmpfs) with this machine's /usr and
# /etc and the shared directories in it, then stage 2 (ctl/run) there
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
die() {
  echo "test-vm guest: $*" >/dev/console
  echo o >/proc/sysrq-trigger
  sleep 60
}
for m in $(cat /mods/order); do insmod "/mods/$m.ko" || die "insmod $m"; done
R=/new
opt=trans=virtio,version=9p2000.L,msize=512000
mount -t ext4 -o noatime /dev/vda $R || die "ext4 /"
chmod 755 $R
mkdir -p $R/usr $R/etc $R/.vm/ctl $R/.vm/etc $R/.vm/etc-rw $R/proc $R/sys $R/dev $R/run \
  $R/tmp $R/var/tmp $R/var/lib $R/root $R/home
chmod 1777 $R/tmp $R/var/tmp
chmod 700 $R/root
mount -t 9p -o $opt,ro,cache=loose usr $R/usr || die "9p /usr"
mount -t 9p -o $opt ctl $R/.vm/ctl || die "9p ctl"
mount -t 9p -o $opt,ro etc $R/.vm/etc || die "9p /etc"
mount -t tmpfs etc-rw $R/.vm/etc-rw
mkdir -p $R/.vm/etc-rw/upper $R/.vm/etc-rw/work
mount -t overlay -o lowerdir=$R/.vm/etc,upperdir=$R/.vm/etc-rw/upper,workdir=$R/.vm/etc-rw/work \
  etc $R/etc || die "overlay /etc"
. $R/.vm/ctl/mounts
mount --move /proc $R/proc
mount --move /sys $R/sys
mount --move /dev $R/dev
exec switch_root $R /bin/sh /.vm/ctl/run
EOF
  chmod 755 "$t/init"
  (cd "$t" && find . | "$busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$initrd.tmp"
  mv "$initrd.tmp" "$initrd"
  rm -rf "$t"
fi
flock -u 9
exec 9>&-

# --- this run: what stage 1 mounts, and stage 2 ---------------------------------
ctl=$(mktemp -d /tmp/cordon-vm.XXXXXX)
trap 'rm -rf "$ctl"' EXIT
truncate -s 8G "$ctl/root.img"
mkfs.ext4 -q -F -m 0 -O ^has_journal -E root_owner=0:0,lazy_itable_init=1 "$ctl/root.img"
shares=("$src")
case "$build/" in "$src"/*) ;; *) shares+=("$build") ;; esac
{
  # this machine's top-level links into /usr (merged /usr: /bin, /lib...)
  for l in /bin /sbin /lib /lib32 /lib64 /libx32; do
    [ -L "$l" ] && printf 'ln -s %q $R%q\n' "$(readlink "$l")" "$l"
  done
  for i in "${!shares[@]}"; do
    printf 'mkdir -p $R%q && mount -t 9p -o $opt share%d $R%q || die %q\n' \
      "${shares[$i]}" "$i" "${shares[$i]}" "9p ${shares[$i]}"
  done
} >"$ctl/mounts"
{
  printf 'build=%q\n' "$build"
  printf 'programs=%q\n' "${programs[*]}"
} >"$ctl/conf"
cat >"$ctl/run" <<'EOF'
# stage 2, this machine's /bin/sh in the guest's /: what a distribution's
# early boot gives (cgroup v2 alone, with nsdelegate as systemd mounts it),
# the accounts' homes, then each program
. /.vm/ctl/conf
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
mount -t tmpfs -o mode=755 run /run
mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
stty -onlcr </dev/console 2>/dev/null
hostname cordon-vm
ip link set lo up
for u in cordon-job cordon-test; do
  home=$(getent passwd "$u" | cut -d: -f6)
  [ -n "$home" ] && mkdir -p "$home" && chown "$u:" "$home"
done
echo "test-vm: $(uname -r), cgroup $(stat -f -c %T /sys/fs/cgroup)," \
  "controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
cd "$build"
for p in $programs; do
  echo "== $p"
  t0=$(date +%s)
  rc=0
  ./"$p" --jobs 1 --color=never </dev/null || rc=$?
  echo "test-vm: $p exit $rc ($(($(date +%s) - t0)) s)"
  echo "$p $rc" >>/.vm/ctl/results
done
sync
echo o >/proc/sysrq-trigger
sleep 60 2>/dev/null
EOF

# --- boot ------------------------------------------------------------------------
accel=tcg,thread=multi
cpu=max
# KVM only with the CPU's own virtualisation: a /dev/kvm without it (a
# paravirtual one, such as kvm-pvm on a cloud VM) runs no stock kernel
if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo && [ "${CORDON_VM_KVM:-1}" = 1 ]; then
  accel=kvm
  cpu=host
fi
ncpu=$(nproc)
((ncpu <= 4)) || ncpu=4
append="console=ttyS0 rdinit=/init panic=-1 cgroup_no_v1=all mitigations=off i8042.noaux i8042.nokbd"
[ "${CORDON_VM_CONSOLE:-0}" = 1 ] || append="$append quiet loglevel=0"
qemu=(qemu-system-x86_64 -M pc -accel "$accel" -cpu "$cpu" -smp "$ncpu" -m "${CORDON_VM_MEM:-2048}"
  -kernel "$kdir/vmlinuz" -initrd "$initrd" -append "$append"
  -nodefaults -no-user-config -display none -monitor none -no-reboot -nic none
  -chardev stdio,id=console,signal=off -serial chardev:console
  -virtfs local,path=/usr,mount_tag=usr,security_model=none,readonly=on,multidevs=remap
  -virtfs local,path=/etc,mount_tag=etc,security_model=none,readonly=on,multidevs=remap
  -virtfs "local,path=$ctl,mount_tag=ctl,security_model=none"
  -drive "file=$ctl/root.img,if=virtio,format=raw,cache=unsafe,discard=unmap")
for i in "${!shares[@]}"; do
  qemu+=(-virtfs "local,path=${shares[$i]},mount_tag=share$i,security_model=none,multidevs=remap")
done
log "booting $kpkg ($accel, $ncpu cpus): ${programs[*]}"
qrc=0
timeout -k 10 "${CORDON_VM_TIMEOUT:-900}" "${qemu[@]}" </dev/null || qrc=$?
((qrc != 124)) || log "the VM timed out after ${CORDON_VM_TIMEOUT:-900} s"

# --- what each program gave --------------------------------------------------------
failed=0
for p in "${programs[@]}"; do
  rc=$(awk -v p="$p" '$1 == p { print $2 }' "$ctl/results" 2>/dev/null || true)
  if [ "$rc" != 0 ]; then
    log "FAILED: $p (${rc:-no status: the VM ended before it did})"
    failed=1
  fi
done
log "$kpkg, ${#programs[@]} programs: $([ $failed = 0 ] && echo passed || echo FAILED) in $(($(date +%s) - start)) s"
exit $failed
