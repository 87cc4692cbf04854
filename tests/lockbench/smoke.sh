#!/usr/bin/env bash
# Smoke test: every lockbench workload for ~2 s against a fresh lockd on a
# free loopback port. Passes when each run completes with exit status 0
# (zero protocol errors, every waiter served in FIFO order); never asserts
# speed. Also checks the clear-error paths: a server that is down (exit 3)
# and one that speaks another protocol (exit 4). The cluster target runs
# against a real cluster in cluster_smoke.sh.
set -euo pipefail

LOCKD=${1:?usage: smoke.sh LOCKD LOCKBENCH}
LOCKBENCH=${2:?usage: smoke.sh LOCKD LOCKBENCH}
RUN_S=2               # per workload
STARTUP_TIMEOUT_S=10  # for lockd's "listening" line
WAITERS=500           # connections queued on one key

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
work=$(mktemp -d)
lockd_pid=
cleanup() {
  if [[ -n $lockd_pid ]]; then kill "$lockd_pid" 2>/dev/null || true; wait "$lockd_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$LOCKD" --mode=single --listen 127.0.0.1:0 --admin off --max-connections $((WAITERS + 100)) \
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
echo "lockd on port $port"

run() {
  echo "+ lockbench $*"
  "$LOCKBENCH" --addr "127.0.0.1:$port" --quiet "$@"
}
run -w uncontended -c 8 -P 1 -d $RUN_S
run -w uncontended -c 8 -P 16 -d $RUN_S
run -w contended -c 8 --hot-keys 2 -d $RUN_S
run -w readers-heavy -c 8 --hot-keys 2 -d $RUN_S --json >"$work/readers.json"
grep -qE '"granted": [1-9]' "$work/readers.json"
run -w semaphore -c 8 --limit 3 -d $RUN_S --json >"$work/semaphore.json"
grep -qE '"granted": [1-9]' "$work/semaphore.json"
run -w hold -c 8 -P 4 --keys 20000 -d 30
run -w hold-keep -c 8 -P 4 --keeps 5 -d $RUN_S --json >"$work/hold_keep.json"
grep -q '"not_kept": 0' "$work/hold_keep.json"
grep -qE '"kept": [1-9]' "$work/hold_keep.json"
run -w waiters --waiters $WAITERS -d 30 --json >"$work/waiters.json"
grep -q '"fifo_violations": 0' "$work/waiters.json"
grep -q "\"served\": $WAITERS" "$work/waiters.json"

# The cluster target's leader search, against one single-mode lockd listed
# after a dead member: it skips the dead one and settles on the node that
# answers the no-op probe itself.
dead_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$LOCKBENCH" --cluster "127.0.0.1:$dead_port,127.0.0.1:$port" --quiet -w uncontended -c 4 -d 1 \
  --json >"$work/cluster.json"
grep -q "\"leader\": \"127.0.0.1:$port\"" "$work/cluster.json"
grep -q '"protocol_errors": 0' "$work/cluster.json"

# A server that answers in another protocol: one line, exit 4.
set +e
"$LOCKBENCH" --addr "127.0.0.1:$port" --backend redis --quiet -d 1 2>"$work/err"; rc=$?
set -e
cat "$work/err"
[[ $rc -eq 4 && $(wc -l <"$work/err") -eq 1 ]] || { echo "expected exit 4 with one line, got $rc"; exit 1; }

# A server that is down: one line, exit 3.
kill "$lockd_pid"; wait "$lockd_pid" 2>/dev/null || true; lockd_pid=
set +e
"$LOCKBENCH" --addr "127.0.0.1:$port" --quiet -d 1 2>"$work/err"; rc=$?
set -e
cat "$work/err"
[[ $rc -eq 3 && $(wc -l <"$work/err") -eq 1 ]] || { echo "expected exit 3 with one line, got $rc"; exit 1; }
echo "smoke: ok"
