#!/usr/bin/env bash
# tests/fuzz/campaign.sh BUILD SECONDS [NAME...]: the fuzz campaign (`make fuzz`): every fuzz
# target of BUILD/fuzz (or the NAMEs given) in turn, SECONDS each, from its seed corpus
# tests/fuzz/corpus/<name>/ plus what earlier campaigns found in BUILD/fuzz/found/<name>/, with
# its dictionary. One target at a time (-jobs=1): a campaign should not take the machine.
# Logs go to BUILD/fuzz/logs/<name>.log; at the end, one line per target: executions,
# libFuzzer's coverage (cov: edges, ft: features), corpus size, and the outcome. A crash, leak,
# timeout or out-of-memory input is kept in BUILD/fuzz/found/artifacts/ and the script exits 1.
set -uo pipefail
build=$1 seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in "$build"/fuzz/*_fuzz; do names+=("$(basename "${f%_fuzz}")"); done
fi
mkdir -p "$build/fuzz/logs"
status=0
summary=()
for name in "${names[@]}"; do
  fuzzer="$build/fuzz/${name}_fuzz"
  [ -x "$fuzzer" ] || { echo "campaign: no fuzzer $fuzzer (build with -DATTN_FUZZ=ON)"; exit 2; }
  dict=()
  [ -f "$here/dict/$name.dict" ] && dict=(-dict="$here/dict/$name.dict")
  log="$build/fuzz/logs/$name.log"
  echo "campaign: $name for ${seconds}s (log $log)"
  OMP_NUM_THREADS=1 bash "$here/fuzz.sh" "$fuzzer" "$seconds" "$here/corpus/$name" "$build/fuzz/found/$name" \
    "${dict[@]}" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  line=$(grep -E '^#[0-9]+.*(cov|ft):' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$line")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$line")
  outcome=clean
  if [ $rc -ne 0 ]; then
    outcome="FAILED (rc $rc): $(grep -m1 -E 'ERROR: |runtime error|property violated|ALARM' "$log")"
    status=1
  fi
  summary+=("$(printf '%-16s %12s execs  cov %6s  ft %7s  corpus %-10s %s' "$name" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$outcome")")
done
echo
printf '%s\n' "${summary[@]}"
exit $status
