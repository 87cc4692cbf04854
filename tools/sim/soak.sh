#!/usr/bin/env bash
# Runs lockd-sim for hours: fresh seed ranges, 3 and 5 nodes, until a seed
# fails or HOURS pass. Every failure prints its one-line replay command.
#
#   tools/sim/soak.sh [build-dir] [hours] [seeds-per-batch] [steps] [lockd-sim flags...]
#   e.g. tools/sim/soak.sh build 8 2000 5000
#        tools/sim/soak.sh build 1 500 5000 --lifecycle   # a node's lifecycle (docs/safety.md)
# SOAK_MINUTES=N runs N minutes instead of HOURS hours.
set -u
BUILD=${1:-build}
HOURS=${2:-4}
BATCH=${3:-2000}
STEPS=${4:-5000}
shift $(( $# < 4 ? $# : 4 ))
EXTRA=("$@")
SIM="$BUILD/bin/lockd-sim"
END=$(( $(date +%s) + ${SOAK_MINUTES:-$(( HOURS * 60 ))} * 60 ))
# Start from a time-derived seed so every soak explores new ground; the
# seeds are printed, so any failure replays exactly.
SEED=${SOAK_FIRST_SEED:-$(( $(date +%s) * 1000 ))}
while [ "$(date +%s)" -lt "$END" ]; do
  for NODES in 3 5; do
    echo "== nodes=$NODES seeds $SEED..$((SEED + BATCH - 1)) steps=$STEPS ${EXTRA[*]}"
    if ! "$SIM" --nodes "$NODES" --seeds "$BATCH" --steps "$STEPS" --seed "$SEED" "${EXTRA[@]}"; then
      echo "soak: failure found (replay line above)"
      exit 1
    fi
  done
  SEED=$((SEED + BATCH))
done
echo "soak: no failure in ${SOAK_MINUTES:-$(( HOURS * 60 ))} min"
