#!/usr/bin/env bash
# Builds the Debian package from BUILD_DIR with cpack, then checks it the
# way dpkg would see it: control fields and runtime dependencies, conffiles,
# maintainer scripts (syntax, and their calls with systemd and adduser
# stubbed), and the files it unpacks (dpkg -x into a scratch root, no root
# needed) including a lockd that runs from there.
# Usage: deb_test.sh BUILD_DIR VERSION
set -euo pipefail
build=${1:?usage: deb_test.sh BUILD_DIR VERSION}
version=${2:?usage: deb_test.sh BUILD_DIR VERSION}
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/out" >"$work/cpack.log" 2>&1 \
  || { cat "$work/cpack.log"; fail "cpack"; }
debs=("$work"/out/lockd_*.deb)
[[ ${#debs[@]} -eq 1 && -f ${debs[0]} ]] || { ls -l "$work/out"; fail "expected one lockd_*.deb"; }
deb=${debs[0]}
devs=("$work"/out/liblockd-client-dev_*.deb)
[[ ${#devs[@]} -eq 1 && -f ${devs[0]} ]] || { ls -l "$work/out"; fail "expected one liblockd-client-dev_*.deb"; }
dev=${devs[0]}
[[ $(ls "$work"/out/*.deb | wc -l) -eq 2 ]] || { ls -l "$work/out"; fail "expected exactly two packages"; }
echo "built $(basename "$deb") $(basename "$dev")"

# Control fields.
[[ $(dpkg-deb -f "$deb" Package) == lockd ]] || fail "Package"
[[ $(dpkg-deb -f "$deb" Version) == "$version" ]] || fail "Version $(dpkg-deb -f "$deb" Version)"
[[ $(dpkg-deb -f "$deb" Architecture) == "$(dpkg --print-architecture)" ]] || fail "Architecture"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
# From dpkg-shlibdeps: the shared libraries the binaries link, e.g.
# libevent-core-2.1-7 (>= 2.1.8-stable), libspdlog1.10-fmt9.
names=" $(sed -E 's/ \([^)]*\)//g; s/,//g' <<<"$depends") "
for dep in 'libevent-core-[0-9a-z.-]+' 'libspdlog[0-9a-z.-]+' 'libfmt[0-9]+' 'libtomlplusplus[0-9]+' \
           'libstdc\+\+6' libc6 \
           adduser; do
  [[ $names =~ \ $dep\  ]] || fail "Depends lacks $dep"
done
# Header-only at build time: nothing at run time.
[[ $depends != *cli11* && $depends != *nlohmann* && $depends != *gtest* ]] || fail "Depends: $depends"

# Control area: conffiles and the maintainer scripts, executable, valid sh.
dpkg-deb -e "$deb" "$work/control"
expect_line "$work/control/conffiles" /etc/lockd/lockd.toml
for script in postinst prerm postrm; do
  [[ -x $work/control/$script ]] || fail "$script missing or not executable"
  sh -n "$work/control/$script" || fail "$script: syntax"
done

# The files, unpacked as dpkg would place them.
root=$work/root
dpkg -x "$deb" "$root"
for f in usr/bin/lockd usr/bin/lockctl usr/bin/lockbench usr/lib/systemd/system/lockd.service \
         etc/lockd/lockd.toml usr/share/doc/lockd/README.md usr/share/doc/lockd/operations.md \
         usr/share/doc/lockd/examples/lockd.toml; do
  expect_file "$root/$f"
done
unit=$root/usr/lib/systemd/system/lockd.service
expect_line "$unit" "ExecStart=/usr/bin/lockd --config /etc/lockd/lockd.toml"
expect_line "$unit" "Documentation=file:///usr/share/doc/lockd/operations.md"
expect_line "$unit" "User=lockd"
expect_line "$unit" "StateDirectory=lockd"
# Nothing outside the places a package may write; the C++ client is in
# liblockd-client-dev, not here.
allowed='^\./((usr/(bin|lib/systemd/system|share/doc/lockd)|etc/lockd)(/.*)?|usr/|usr/lib/|usr/lib/systemd/|usr/share/|usr/share/doc/|etc/)?$'
unexpected=$(dpkg-deb -c "$deb" | awk '{print $6}' | grep -vE "$allowed" || true)
[[ -z $unexpected ]] || fail "unexpected paths: $unexpected"
check_version "$root/usr/bin/lockd" "$root/usr/bin/lockctl" "$root/usr/bin/lockbench" "$version"
serve_once "$root/usr/bin/lockd" "$root/etc/lockd/lockd.toml" "$work" "$version"

# liblockd-client-dev: the C++ client's library, headers, CMake package and
# pkg-config file, and nothing else; unpacked beside lockd it builds a
# program of its own both ways.
[[ $(dpkg-deb -f "$dev" Package) == liblockd-client-dev ]] || fail "dev Package"
[[ $(dpkg-deb -f "$dev" Version) == "$version" ]] || fail "dev Version"
[[ $(dpkg-deb -f "$dev" Section) == libdevel ]] || fail "dev Section $(dpkg-deb -f "$dev" Section)"
dev_allowed='^\./(usr/(include/lockd|lib/cmake/lockd_client)(/.*)?|usr/lib/liblockd_client\.a|usr/lib/pkgconfig/lockd_client\.pc|usr/|usr/include/|usr/lib/|usr/lib/cmake/|usr/lib/pkgconfig/)?$'
unexpected=$(dpkg-deb -c "$dev" | awk '{print $6}' | grep -vE "$dev_allowed" || true)
[[ -z $unexpected ]] || fail "unexpected paths in the dev package: $unexpected"
dpkg -x "$dev" "$root"
for f in usr/include/lockd/client/client.h usr/include/lockd/common/check.h usr/lib/liblockd_client.a \
         usr/lib/cmake/lockd_client/lockd_clientConfig.cmake usr/lib/cmake/lockd_client/lockd_clientConfigVersion.cmake \
         usr/lib/pkgconfig/lockd_client.pc; do
  expect_file "$root/$f"
done
client_example "$root/usr" "$root/usr/bin/lockd" "$work" "$(cd "$(dirname "$0")/../.." && pwd)"

# Maintainer scripts against stubs that log their calls (adduser,
# deb-systemd-*, systemctl, rm): checks what they would do, touches nothing.
stubs=$work/stubs
mkdir -p "$stubs"
calls=$work/calls
for cmd in adduser deb-systemd-helper deb-systemd-invoke systemctl rm; do
  printf '#!/bin/sh\necho "%s $*" >>"%s"\n' "$cmd" "$calls" >"$stubs/$cmd"
done
# getent: no lockd user yet. was-enabled: true on a first install.
printf '#!/bin/sh\nexit 2\n' >"$stubs/getent"
printf '#!/bin/sh\necho "deb-systemd-helper $*" >>"%s"\n[ "$2" != was-enabled ] || exit "${WAS_ENABLED:-0}"\n' \
  "$calls" >"$stubs/deb-systemd-helper"
chmod +x "$stubs"/*
run_script() {  # run_script EXPECTED_CALLS SCRIPT ARGS...
  local expected=$1; shift
  : >"$calls"
  PATH=$stubs:$PATH sh "$work/control/$1" "${@:2}" || fail "$* exited $?"
  diff -u <(printf '%s' "$expected") "$calls" || fail "calls of $*"
}
# Where systemd runs, the scripts also reload it and start/stop the unit:
# the stubs catch those calls too, so this host is never touched.
reload= start= restart= stop=
if [[ -d /run/systemd/system ]]; then
  reload=$'systemctl --system daemon-reload\n'
  start=$'deb-systemd-invoke start lockd.service\n'
  restart=$'deb-systemd-invoke restart lockd.service\n'
  stop=$'deb-systemd-invoke stop lockd.service\n'
fi
adduser_call=$'adduser --system --group --quiet --home /var/lib/lockd --no-create-home --gecos lockd lock server lockd\n'
run_script "${adduser_call}deb-systemd-helper unmask lockd.service
deb-systemd-helper --quiet was-enabled lockd.service
deb-systemd-helper enable lockd.service
${reload}${start}" postinst configure
WAS_ENABLED=1 run_script "${adduser_call}deb-systemd-helper unmask lockd.service
deb-systemd-helper --quiet was-enabled lockd.service
deb-systemd-helper update-state lockd.service
${reload}${restart}" postinst configure 0.0.9
run_script "${stop}" prerm remove
run_script "${reload}deb-systemd-helper mask lockd.service
" postrm remove
run_script "${reload}deb-systemd-helper purge lockd.service
deb-systemd-helper unmask lockd.service
rm -rf /var/lib/lockd /var/lib/private/lockd
" postrm purge
echo "maintainer scripts ok"
echo "PASS"
