#!/usr/bin/env bash
# `cmake --install` into a scratch prefix gives a runnable daemon with its
# unit, config and docs, and a reinstall keeps an edited config.
# Usage: install_test.sh BUILD_DIR VERSION
set -euo pipefail
build=${1:?usage: install_test.sh BUILD_DIR VERSION}
version=${2:?usage: install_test.sh BUILD_DIR VERSION}
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "install"; }

for f in bin/lockd bin/lockctl bin/lockbench lib/systemd/system/lockd.service \
         etc/lockd/lockd.toml share/doc/lockd/README.md share/doc/lockd/LICENSE \
         share/doc/lockd/operations.md share/doc/lockd/protocol.md \
         share/doc/lockd/examples/lockd.toml share/doc/lockd/monitoring/lockd-alerts.yml \
         include/lockd/client/client.h include/lockd/common/check.h lib/liblockd_client.a \
         lib/cmake/lockd_client/lockd_clientConfig.cmake lib/cmake/lockd_client/lockd_clientTargets.cmake \
         lib/pkgconfig/lockd_client.pc; do
  expect_file "$prefix/$f"
done
[[ -x $prefix/bin/lockd ]] || fail "lockd not executable"
unit=$prefix/lib/systemd/system/lockd.service
# The unit names this prefix's binary, config and docs.
expect_line "$unit" "ExecStart=$prefix/bin/lockd --config $prefix/etc/lockd/lockd.toml"
expect_line "$unit" "Documentation=file://$prefix/share/doc/lockd/operations.md"
for line in DynamicUser=yes StateDirectory=lockd ProtectSystem=strict NoNewPrivileges=yes \
            LimitNOFILE=65536 Environment=GLIBC_TUNABLES=glibc.malloc.hugetlb=1 WantedBy=multi-user.target; do
  expect_line "$unit" "$line"
done
# LimitNOFILE stays above the config's max-connections.
max_conn=$(grep -oE '^max-connections *= *[0-9]+' "$prefix/etc/lockd/lockd.toml" | grep -oE '[0-9]+$')
(( max_conn + 100 < 65536 )) || fail "max-connections $max_conn too close to LimitNOFILE"
if command -v systemd-analyze >/dev/null; then
  # Offline lint of the unit's syntax and sandboxing options; systemd need not run.
  systemd-analyze verify "$unit" 2>&1 | tee "$work/verify.log"
  ! grep -qiE 'unknown|invalid|failed to parse' "$work/verify.log" || fail "systemd-analyze verify"
fi

check_version "$prefix/bin/lockd" "$prefix/bin/lockctl" "$prefix/bin/lockbench" "$version"
serve_once "$prefix/bin/lockd" "$prefix/etc/lockd/lockd.toml" "$work" "$version"
# The C++ client from the installed tree, in a program of its own.
client_example "$prefix" "$prefix/bin/lockd" "$work" "$(cd "$(dirname "$0")/../.." && pwd)"

# A second install keeps the operator's config.
echo 'default-lease-ms = 1234' >>"$prefix/etc/lockd/lockd.toml"
cmake --install "$build" --prefix "$prefix" >"$work/install2.log"
grep -qx 'default-lease-ms = 1234' "$prefix/etc/lockd/lockd.toml" || fail "reinstall replaced the config"
echo "PASS"
