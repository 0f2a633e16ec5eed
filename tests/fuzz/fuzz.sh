#!/usr/bin/env bash
# tests/fuzz/fuzz.sh FUZZER SECONDS SEEDS FOUND [-dict=FILE]: fuzzes for SECONDS from the seed
# corpus SEEDS (read only) and the scratch corpus FOUND (created; new inputs go there), under
# the limits of docs/fuzzing.md. A crash, leak, timeout or out-of-memory input is written to
# FOUND/../artifacts/ and fails the run.
set -euo pipefail
fuzzer=$1 seconds=$2 seeds=$3 found=$4
shift 4
mkdir -p "$found" "$found/../artifacts"
# Scratch files in memory when the machine has a tmpfs (the targets write their input to a file).
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
exec "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$found/../artifacts/$(basename "$fuzzer")-" "$@" "$found" "$seeds"
