#!/bin/sh
# bench/dist_bench.sh — data-parallel training speed for 1 and 2 ranks, one thread each:
# steps/s, examples/s and the share of each step spent in communication, as a Markdown table
# (bench/dist_bench.cpp does the timing). Usage: bench/dist_bench.sh [BUILD_DIR] [dist_bench options]
# Needs an MPI build (libopenmpi-dev); as root, Open MPI wants the two OMPI_ALLOW_* variables.
set -eu
BUILD=${1:-build}
[ $# -gt 0 ] && shift
cmake --build "$BUILD" --target dist_bench >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
echo "| ranks | threads/rank | batch/rank | steps/s | examples/s | communication | blocked in wait | buckets overlapped | bytes/step |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in 1 2; do
  mpirun --oversubscribe --bind-to core -np "$n" "$BUILD/bench/dist_bench" "$@" | /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
print("| %d | %d | %d | %.2f | %.0f | %.1f%% | %.1f%% | %d/%d | %d |" % (r["ranks"], r["threads_per_rank"],
      r["per_rank_batch"], r["steps_per_s"], r["examples_per_s"], 100 * r["comm_share"], 100 * r["wait_share"],
      r["buckets_started_in_backward"] // r["steps"], r["buckets"], r["bytes_per_step"]))'
done
