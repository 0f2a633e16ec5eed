#!/usr/bin/env bash
# tests/fuzz/campaign.sh BUILD SECONDS [NAME...]: the fuzz campaign (`make fuzz`): every fuzz
# target of BUILD/fuzz (or the NAMEs given), each until it has run FUZZ_RUNS executions
# (default 10^6; 0: no cap) or for SECONDS, whichever comes first, from its seed corpus
# tests/fuzz/corpus/<name>/ plus what earlier campaigns found in BUILD/fuzz/found/<name>/, with
# its dictionary. FUZZ_PARALLEL targets (default 1) run at once, each a single process on one
# core. Logs go to BUILD/fuzz/logs/<name>.log; at the end, one line per target: executions,
# seconds, libFuzzer's coverage (cov: edges, ft: features), corpus size, and the outcome. A
# crash, leak, timeout or out-of-memory input is kept in BUILD/fuzz/found/artifacts/ and the
# script exits 1.
set -uo pipefail
build=$1 seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
runs=${FUZZ_RUNS:-1000000}
parallel=${FUZZ_PARALLEL:-1}
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in "$build"/fuzz/*_fuzz; do names+=("$(basename "${f%_fuzz}")"); done
fi
for name in "${names[@]}"; do
  [ -x "$build/fuzz/${name}_fuzz" ] || { echo "campaign: no fuzzer $build/fuzz/${name}_fuzz (build with -DATTN_FUZZ=ON)"; exit 2; }
done
mkdir -p "$build/fuzz/logs"

# One target: fuzzes it, then writes its exit status and elapsed seconds next to its log.
run_one() {
  local name=$1 log="$build/fuzz/logs/$1.log" dict=() cap=() start rc
  [ -f "$here/dict/$name.dict" ] && dict=(-dict="$here/dict/$name.dict")
  [ "$runs" != 0 ] && cap=(-runs="$runs")
  start=$(date +%s)
  OMP_NUM_THREADS=1 bash "$here/fuzz.sh" "$build/fuzz/${name}_fuzz" "$seconds" "$here/corpus/$name" \
    "$build/fuzz/found/$name" "${dict[@]}" "${cap[@]}" >"$log" 2>&1
  rc=$?
  echo "$rc $(( $(date +%s) - start ))" >"$log.status"
}

for name in "${names[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n; done
  echo "campaign: $name (up to ${seconds}s or $runs executions; log $build/fuzz/logs/$name.log)"
  rm -f "$build/fuzz/logs/$name.log.status"
  run_one "$name" &
done
wait

status=0
echo
printf '%-16s %12s %6s  %10s  %11s  %-10s %s\n' target executions secs cov ft corpus outcome
for name in "${names[@]}"; do
  log="$build/fuzz/logs/$name.log"
  read -r rc secs <"$log.status" || { rc=99; secs=?; }
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  line=$(grep -E '^#[0-9]+.*(cov|ft):' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$line")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$line")
  outcome=clean
  if [ "$rc" -ne 0 ]; then
    outcome="FAILED (rc $rc): $(grep -m1 -E 'ERROR: |runtime error|property violated|ALARM' "$log")"
    status=1
  fi
  printf '%-16s %12s %6s  %10s  %11s  %-10s %s\n' "$name" "${execs:-?}" "$secs" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$outcome"
done
exit $status
