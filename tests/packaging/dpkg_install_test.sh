#!/usr/bin/env bash
# A real `dpkg -i`, upgrade, remove and purge of the package, with the
# maintainer scripts running for real (adduser, deb-systemd-helper), inside
# a private mount namespace whose /etc, /usr and /var are throwaway overlays:
# the host's files, users and dpkg database never change. Needs root (for
# unshare and the mounts); systemd is not running there, as in an image
# build, so the unit is enabled but not started.
# Usage: dpkg_install_test.sh BUILD_DIR VERSION
set -euo pipefail
build=${1:?usage: dpkg_install_test.sh BUILD_DIR VERSION}
version=${2:?usage: dpkg_install_test.sh BUILD_DIR VERSION}
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || fail "needs root for unshare and overlay mounts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/out" >"$work/cpack.log" 2>&1 \
  || { cat "$work/cpack.log"; fail "cpack"; }
deb=$(echo "$work"/out/lockd_*.deb)
for d in etc usr var; do mkdir -p "$work/$d.upper" "$work/$d.work"; done

export work deb version
unshare --mount --propagation private bash -euo pipefail -c '
  source "'"$(dirname "$0")"'/lib.sh"
  for d in etc usr var; do
    mount -t overlay overlay -o "lowerdir=/$d,upperdir=$work/$d.upper,workdir=$work/$d.work" "/$d"
  done
  ! dpkg-query -W lockd >/dev/null 2>&1 || fail "lockd already installed on this host"

  echo "== dpkg -i"
  dpkg -i "$deb" >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "dpkg -i"; }
  [[ $(dpkg-query -W -f="\${Status} \${Version}" lockd) == "install ok installed $version" ]] \
    || fail "dpkg status"
  getent passwd lockd >/dev/null || fail "no lockd user"
  [[ $(getent passwd lockd | cut -d: -f7) == */nologin || $(getent passwd lockd | cut -d: -f7) == */false ]] \
    || fail "lockd user has a login shell"
  getent group lockd >/dev/null || fail "no lockd group"
  [[ -L /etc/systemd/system/multi-user.target.wants/lockd.service ]] || fail "unit not enabled"
  out=$(/usr/bin/lockd --version) || fail "lockd --version"
  [[ $out == "lockd $version"* ]] || fail "lockd --version: $out"
  expect_file /etc/lockd/lockd.toml
  [[ $(dpkg-query -W -f="\${Conffiles}" lockd) == *"/etc/lockd/lockd.toml"* ]] || fail "conffile"

  echo "== reinstall over an edited config (the upgrade path)"
  echo "default-lease-ms = 1234" >>/etc/lockd/lockd.toml
  dpkg -i "$deb" >"$work/upgrade.log" 2>&1 || { cat "$work/upgrade.log"; fail "dpkg -i again"; }
  grep -qx "default-lease-ms = 1234" /etc/lockd/lockd.toml || fail "upgrade replaced the config"
  [[ -L /etc/systemd/system/multi-user.target.wants/lockd.service ]] || fail "upgrade disabled the unit"

  echo "== dpkg -r"
  dpkg -r lockd >"$work/remove.log" 2>&1 || { cat "$work/remove.log"; fail "dpkg -r"; }
  [[ ! -e /usr/bin/lockd ]] || fail "lockd left after remove"
  expect_file /etc/lockd/lockd.toml  # a removed package keeps its conffiles

  echo "== dpkg --purge"
  dpkg --purge lockd >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "dpkg --purge"; }
  [[ ! -e /etc/lockd/lockd.toml ]] || fail "config left after purge"
  [[ ! -e /etc/systemd/system/multi-user.target.wants/lockd.service ]] || fail "enable link left"
  [[ ! -e /etc/systemd/system/lockd.service ]] || fail "mask left after purge"
  ! dpkg-query -W lockd >/dev/null 2>&1 || fail "still known to dpkg"
' "$0"
echo "PASS"
