#!/usr/bin/env bash
# tests/sanitize.sh BUILD LABELS JOBS: runs `ctest -L LABELS` in the sanitizer build folder BUILD
# (cmake/sanitizers.cmake) so that a report of AddressSanitizer, LeakSanitizer or
# UndefinedBehaviorSanitizer fails the step even where the test itself would not notice.
#
# A sanitized test binary that trips a sanitizer ends with an error and fails its test. But the
# e2e tests run the sanitized `attn` as a child and often expect it to fail (status 1, a message
# on stderr): a report on such an error path (a leak at exit, say) would pass unseen. So every
# process of the run writes its reports to BUILD/sanitizer-reports/<kind>.<pid> (log_path), and
# the step fails when any is there, printing each one in full.
set -uo pipefail
build=$1 labels=$2 jobs=${3:-2}
reports="$(cd "$build" && pwd)/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
# detect_leaks: LeakSanitizer at each process's exit. print_stacktrace: UBSan's reports with a
# stack. The sanitizers' other defaults hold (the first report ends the process, status 1).
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
(cd "$build" && ctest --output-on-failure -j "$jobs" -L "$labels")
status=$?
shopt -s nullglob
found=("$reports"/*)
if [ ${#found[@]} -gt 0 ]; then
  echo "attn: ${#found[@]} sanitizer report(s) under $reports:" >&2
  for f in "${found[@]}"; do
    echo "==== $f" >&2
    cat "$f" >&2
  done
  exit 1
fi
echo "attn: no sanitizer report (ctest -L '$labels' in $build)"
exit $status
