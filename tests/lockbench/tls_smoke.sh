#!/usr/bin/env bash
# Smoke test of lockbench's TLS (--tls-ca, --tls-cert/--tls-key): against a
# real `lockd --client-tls` with certificates from make-test-pki, the
# uncontended load (pipelined, with a client certificate) completes with
# exit 0, zero protocol errors, "tls": true and the negotiated "tls_suite"; the cluster target's leader
# search works over TLS; redis-server --tls-port likewise when redis-server
# is installed (it is for the benchmarks). Refusals are clear: a server
# certificate from another CA, or a name it does not show, is one line and
# exit 3; plaintext against the TLS port is exit 3. Never asserts speed.
set -euo pipefail

LOCKD=${1:?usage: tls_smoke.sh LOCKD LOCKBENCH}
LOCKBENCH=${2:?usage: tls_smoke.sh LOCKD LOCKBENCH}
STARTUP_TIMEOUT_S=10
here=$(cd "$(dirname "$0")" && pwd)

work=$(mktemp -d)
lockd_pid=
redis_pid=
cleanup() {
  for p in $lockd_pid $redis_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
"$here/../support/make-test-pki" "$work/pki"
pki=$work/pki

"$LOCKD" --mode=single --listen 127.0.0.1:0 --admin off --client-tls \
  --tls-cert "$pki/server.pem" --tls-key "$pki/server.key" --tls-ca "$pki/ca.pem" \
  2>"$work/lockd.log" &
lockd_pid=$!
port=
for _ in $(seq $((STARTUP_TIMEOUT_S * 10))); do
  port=$(grep -m1 'listening' "$work/lockd.log" | grep -oE '127\.0\.0\.1:[0-9]+' | cut -d: -f2 || true)
  [[ -n $port ]] && break
  kill -0 "$lockd_pid" 2>/dev/null || { echo "lockd exited:"; cat "$work/lockd.log"; exit 1; }
  sleep 0.1
done
[[ -n $port ]] || { echo "lockd did not log 'listening'"; cat "$work/lockd.log"; exit 1; }
echo "lockd --client-tls on port $port"

ok_json() {  # file
  grep -q '"protocol_errors": 0' "$1" && grep -q '"tls": true' "$1" && grep -qE '"released": [1-9]' "$1" &&
    grep -qE '"tls_suite": "TLSv1\.3 TLS_[A-Z0-9_]+"' "$1" ||
    { echo "bad report:"; cat "$1"; exit 1; }
}
expect_exit() {  # status pattern -- lockbench args
  local want=$1 pattern=$2 rc
  shift 3
  set +e
  "$LOCKBENCH" --quiet -d 1 "$@" 2>"$work/err" >/dev/null; rc=$?
  set -e
  cat "$work/err"
  [[ $rc -eq $want && $(wc -l <"$work/err") -eq 1 ]] && grep -q "$pattern" "$work/err" ||
    { echo "expected exit $want with one line matching '$pattern', got $rc"; exit 1; }
}

echo "+ lockbench TLS, pipelined, with a client certificate"
"$LOCKBENCH" --addr "127.0.0.1:$port" --quiet -w uncontended -c 8 -P 8 -d 1 --json \
  --tls-ca "$pki/ca.pem" --tls-cert "$pki/client-alice.pem" --tls-key "$pki/client-alice.key" \
  >"$work/tls.json"
ok_json "$work/tls.json"

echo "+ lockbench TLS, the cluster target's leader search (a dead member first)"
dead_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$LOCKBENCH" --cluster "127.0.0.1:$dead_port,127.0.0.1:$port" --quiet -w uncontended -c 4 -d 0.5 \
  --json --tls-ca "$pki/ca.pem" --tls-server-name localhost >"$work/cluster.json"
ok_json "$work/cluster.json"
grep -q "\"leader\": \"127.0.0.1:$port\"" "$work/cluster.json"

echo "+ refusals"
expect_exit 3 "certificate verify failed" -- --addr "127.0.0.1:$port" --tls-ca "$pki/other-ca.pem"
expect_exit 3 "certificate verify failed" -- --addr "127.0.0.1:$port" --tls-ca "$pki/ca.pem" \
  --tls-server-name lockd-node-9
expect_exit 3 "closed connection" -- --addr "127.0.0.1:$port"

if command -v redis-server >/dev/null; then
  rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --port 0 --tls-port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
    --tls-cert-file "$pki/server.pem" --tls-key-file "$pki/server.key" \
    --tls-ca-cert-file "$pki/ca.pem" --tls-auth-clients no >"$work/redis.log" 2>&1 &
  redis_pid=$!
  echo "+ lockbench --backend redis over TLS (redis-server --tls-port $rport)"
  for _ in $(seq $((STARTUP_TIMEOUT_S * 10))); do
    grep -q 'Ready to accept connections' "$work/redis.log" && break
    kill -0 "$redis_pid" 2>/dev/null || { echo "redis-server exited:"; cat "$work/redis.log"; exit 1; }
    sleep 0.1
  done
  "$LOCKBENCH" --backend redis --addr "127.0.0.1:$rport" --quiet -w uncontended -c 8 -P 4 -d 1 \
    --json --tls-ca "$pki/ca.pem" >"$work/redis.json"
  ok_json "$work/redis.json"
else
  echo "redis-server not installed: its TLS run is not checked here"
fi
echo "tls smoke: ok"
