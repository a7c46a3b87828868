#!/bin/sh
# run.sh BUILDDIR [SECONDS]: runs each fuzz target of a build configured
# with --enable-fuzzing (libFuzzer) for SECONDS (default 60), starting from
# its seed corpus tests/fuzz/corpus/NAME; new inputs go to
# BUILDDIR/fuzz-work/NAME, never into the source tree.  A crash, a leak
# (ASan), undefined behaviour (UBSan aborts) or an input that runs longer
# than 10 s fails the run; the input that did it is kept in
# BUILDDIR/fuzz-work/NAME/ (replay it with the ordinary build's target:
# tests/fuzz/fuzz_NAME FILE).  Prints each target's executions, coverage
# and speed.
set -u

build=${1:?usage: run.sh BUILDDIR [SECONDS]}
secs=${2:-60}
src=$(cd "$(dirname "$0")" && pwd)
fail=0
ran=0
for t in "$build"/tests/fuzz/fuzz_*; do
    [ -x "$t" ] || continue
    case "$t" in *.o | *.log | *.trs) continue ;; esac
    name=${t##*/fuzz_}
    work="$build/fuzz-work/$name"
    mkdir -p "$work/corpus"
    log="$work/fuzz.log"
    "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$work/" \
        "$work/corpus" "$src/corpus/$name" >"$log" 2>&1
    rc=$?
    ran=$((ran + 1))
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(printf '%s\n' "$last" | sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\).*/cov \1, ft \2/p')
    if [ $rc -eq 0 ]; then
        echo "fuzz_$name: ${runs:-?} executions in $secs s (${speed:-?}/s), ${cov:-cov ?}, corpus $(ls "$work/corpus" | wc -l) new + $(ls "$src/corpus/$name" | wc -l) seeds"
    else
        echo "fuzz_$name: FAILED (exit $rc) after ${runs:-?} executions; the log:"
        tail -n 60 "$log"
        fail=1
    fi
done
if [ $ran -eq 0 ]; then
    echo "run.sh: no fuzz target in $build/tests/fuzz (configure --enable-fuzzing)" >&2
    exit 1
fi
exit $fail
