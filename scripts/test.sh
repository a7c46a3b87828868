#!/usr/bin/env bash
# Quick-start command 2: build distlock and run the whole test suite.
#
#   scripts/test.sh [--distcheck]
#
# 1. build/ : make check (each test program starts its own redis-server),
#    with the Redisson interop suite (tests/interop: both Redisson lines,
#    one server and a cluster) when java and mvn are there
# 1b. build/ : make torture, a 60 s torture run with its history checker
#    (bench/distlock-torture.c) through the fault proxy, then a 30 s one on
#    Sentinel with failovers; DISTLOCK_TORTURE=1/0 forces them on/off;
#    default on when CI is set; TORTURE_SECS and TORTURE_SENTINEL_SECS
#    change their lengths (TORTURE_TSAN_SECS: the 20 s one in stage 3);
#    each run's fence figures (stale writes accepted, legitimate holders
#    refused) are repeated in the summary; either above 0 fails the run
#    (TORTURE_STRICT_FENCE=0: a legitimate holder refused is a figure only)
# 2. build-asan/ : the same, built with AddressSanitizer and UBSan
#    (DISTLOCK_SANITIZE=1/0 forces it on/off; default on when CI is set);
#    the interop suite with the current Redisson line only
# 3. build-tsan/ : the same, built with ThreadSanitizer (clang; the shim
#    left out), and a 20 s torture run when 1b runs; DISTLOCK_TSAN=1/0
#    forces it on/off; default on when CI is set;
#    the interop suite with the current Redisson line only
# 4. build-fuzz/ : when clang-14 is there (DISTLOCK_FUZZ=0 skips it), the
#    fuzz targets of tests/fuzz/ built with libFuzzer, ASan and UBSan, each
#    run for DISTLOCK_FUZZ_SECONDS (60) by tests/fuzz/run.sh: a crash, a
#    leak or a timeout fails the stage; executions and coverage are printed
# 5. format: scripts/format.sh --check, the sources laid out as
#    .clang-format says; on under CI, DISTLOCK_FORMAT=1/0 forces it on/off
# 6. with --distcheck: make distcheck (the tarball builds and passes; the
#    interop suite's scenarios 1 and 2 on one server, the current line)
# DISTLOCK_INTEROP=1 (the default when CI is set) installs a JDK and Maven
# (scripts/deps.sh) and makes a missing one a failure instead of a skip.
# The log of every failed test is printed, and each stage's time.  Exits
# non-zero if any stage failed.
set -euo pipefail

log() { printf '[distlock] %s\n' "$*" >&2; }

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$script_dir/.." && pwd)

distcheck=0
for arg in "$@"; do
    case "$arg" in
    --distcheck) distcheck=1 ;;
    -h | --help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "usage: $0 [--distcheck]" >&2; exit 2 ;;
    esac
done
if [[ -n "${DISTLOCK_SANITIZE:-}" ]]; then
    sanitize=$([[ "$DISTLOCK_SANITIZE" != 0 ]] && echo 1 || echo 0)
else
    sanitize=$([[ -n "${CI:-}" ]] && echo 1 || echo 0)
fi
if [[ -n "${DISTLOCK_TSAN:-}" ]]; then
    tsan=$([[ "$DISTLOCK_TSAN" != 0 ]] && echo 1 || echo 0)
else
    tsan=$([[ -n "${CI:-}" ]] && echo 1 || echo 0)
fi
# The layout check (scripts/format.sh --check) runs under CI: the tree is
# laid out as .clang-format says.
format_in_ci=1
if [[ -n "${DISTLOCK_FORMAT:-}" ]]; then
    format=$([[ "$DISTLOCK_FORMAT" != 0 ]] && echo 1 || echo 0)
else
    format=$([[ -n "${CI:-}" ]] && echo "$format_in_ci" || echo 0)
fi
# ---- torture run (issue 16) ----
if [[ -n "${DISTLOCK_TORTURE:-}" ]]; then
    torture=$([[ "$DISTLOCK_TORTURE" != 0 ]] && echo 1 || echo 0)
else
    torture=$([[ -n "${CI:-}" ]] && echo 1 || echo 0)
fi
# ---- end of the torture block ----
DISTLOCK_INTEROP=${DISTLOCK_INTEROP:-$([[ -n "${CI:-}" ]] && echo 1 || echo 0)}
export DISTLOCK_INTEROP          # scripts/deps.sh: a JDK and Maven too
if [[ $DISTLOCK_INTEROP == 1 ]]; then
    export INTEROP_REQUIRED=1    # tests/interop/run.sh: no skipping
fi

summary=()
failed=0
stage_t0=$SECONDS
record() {   # record STAGE STATUS: its outcome and how long it took
    local took=$((SECONDS - stage_t0))
    stage_t0=$SECONDS
    log "$1: $took s"
    if [[ $2 -eq 0 ]]; then summary+=("$1: ok, $took s"); else summary+=("$1: FAILED, $took s"); failed=1; fi
}

# The logs of failed tests under DIR (automake's .trs files say which).
show_failures() {
    local trs
    while IFS= read -r -d '' trs; do
        if grep -Eq '^:test-result: (FAIL|XPASS|ERROR)' "$trs"; then
            echo "=============== ${trs%.trs}.log ===============" >&2
            cat "${trs%.trs}.log" >&2 || true
        fi
    done < <(find "$1" -name '*.trs' -print0)
}

# check NAME DIR [configure-args]: build in DIR and run make check there.
check() {
    local name=$1 dir=$2 status=0
    shift 2
    stage_t0=$SECONDS
    log "$name: building in $dir/"
    if ! "$script_dir/build.sh" --dir "$dir" "$@"; then
        record "$name" 1
        return
    fi
    log "$name: make check"
    make -C "$root/$dir" -j2 check || status=$?
    [[ $status -eq 0 ]] || show_failures "$root/$dir"
    record "$name" "$status"
}

cd "$root"
check check build
# ---- torture run (issue 16) ----
# Many workers under random faults, the history checked afterwards; a
# violation fails the stage.  In the normal build: 60 s on one server with
# the fault proxy in front of it, then 30 s on Sentinel with failovers
# (TORTURE_SECS sets the first, TORTURE_SENTINEL_SECS the second, 0 skips
# it); the ThreadSanitizer stage below runs a shorter one.  The last
# line of each run's "fence figures" goes into the summary too.  A stale
# write accepted fails a run, and so does a legitimate holder refused
# (a STALE to a holder never told its hold was lost): tokens carry the
# server's clock, so they no longer go back after a restart without data
# or a failover.  TORTURE_STRICT_FENCE=0 makes the second a figure only.
strict_fence=$([[ "${TORTURE_STRICT_FENCE:-1}" != 0 ]] && echo " --strict-fence" || true)
fence_figures() {   # fence_figures STAGE LOG: that line, for the summary
    local line
    line=$(grep -a '^fence figures:' "$2" | tail -n 1 || true)
    summary+=("$1 ${line:-fence figures: none (the run did not finish)}")
    log "$1 ${line:-fence figures: none}"
}
if [[ $torture -eq 1 ]]; then
    log "torture: make torture in build/ (${TORTURE_SECS:-60} s, --proxy)"
    stage_t0=$SECONDS
    status=0
    TORTURE_SECS=${TORTURE_SECS:-60} make -C build torture \
        TORTURE_ARGS="--proxy$strict_fence" 2>&1 | tee build/torture.log || status=$?
    record torture "$status"
    fence_figures torture build/torture.log
    if [[ "${TORTURE_SENTINEL_SECS:-30}" != 0 ]]; then
        log "torture-sentinel: ${TORTURE_SENTINEL_SECS:-30} s with failovers"
        status=0
        make -C build torture \
            TORTURE_ARGS="--sentinel --secs ${TORTURE_SENTINEL_SECS:-30}$strict_fence" 2>&1 \
            | tee build/torture-sentinel.log || status=$?
        record torture-sentinel "$status"
        fence_figures torture-sentinel build/torture-sentinel.log
    fi
else
    summary+=("torture: skipped (DISTLOCK_TORTURE=1 runs it)")
fi
# ---- end of the torture block ----
if [[ $sanitize -eq 1 ]]; then
    INTEROP_LINES=current check check-asan build-asan --enable-sanitizers
else
    summary+=("check-asan: skipped")
fi
if [[ $tsan -eq 1 ]]; then
    # clang: GCC 12's ThreadSanitizer kills a child forked from a threaded
    # process as soon as it starts a thread ("dup thread with used id"), and
    # the suite forks such children.  No shim: it needs GCC's symver
    # attribute, and under TSan it is not tested (see Makefile.am).  The
    # C++ tests with clang++ too: one sanitizer runtime per program.
    DISTLOCK_DEPS_EXTRA="${DISTLOCK_DEPS_EXTRA:-} clang-14 libclang-rt-14-dev" \
        INTEROP_LINES=current check check-tsan build-tsan --enable-sanitizers=thread \
        --disable-preload CC=clang-14 CXX=clang++-14
    if [[ $torture -eq 1 ]]; then
        # the library's threads under TSan with many workers and faults; a
        # report makes a worker exit non-zero, which fails the run
        log "torture-tsan: make torture in build-tsan/ (${TORTURE_TSAN_SECS:-20} s)"
        stage_t0=$SECONDS
        status=0
        TSAN_OPTIONS="die_after_fork=0 atexit_sleep_ms=0 ${TSAN_OPTIONS-}" \
            make -C build-tsan torture \
            TORTURE_ARGS="--secs ${TORTURE_TSAN_SECS:-20}$strict_fence" 2>&1 \
            | tee build-tsan/torture.log || status=$?
        record torture-tsan "$status"
        fence_figures torture-tsan build-tsan/torture.log
    fi
else
    summary+=("check-tsan: skipped (DISTLOCK_TSAN=1 runs it)")
fi
if [[ "${DISTLOCK_FUZZ:-1}" != 0 ]] && command -v clang-14 >/dev/null 2>&1; then
    # the shim is left out as for TSan (clang lacks GCC's symver
    # attribute); the INI and ELF targets compile its readers themselves
    stage_t0=$SECONDS
    log "fuzz: building in build-fuzz/"
    status=0
    DISTLOCK_DEPS_EXTRA="${DISTLOCK_DEPS_EXTRA:-} libclang-rt-14-dev" \
        "$script_dir/build.sh" --dir build-fuzz --enable-fuzzing \
        --enable-sanitizers --disable-preload CC=clang-14 || status=$?
    if [[ $status -eq 0 ]]; then
        log "fuzz: each target for ${DISTLOCK_FUZZ_SECONDS:-60} s"
        "$root/tests/fuzz/run.sh" "$root/build-fuzz" "${DISTLOCK_FUZZ_SECONDS:-60}" || status=$?
    fi
    record fuzz "$status"
else
    summary+=("fuzz: skipped (no clang-14, or DISTLOCK_FUZZ=0)")
fi
if [[ $format -eq 1 ]]; then
    log "format: scripts/format.sh --check"
    stage_t0=$SECONDS
    status=0
    "$script_dir/format.sh" --check || status=$?
    record format "$status"
fi
if [[ $distcheck -eq 1 ]]; then
    log "distcheck: make distcheck in build/"
    stage_t0=$SECONDS
    status=0
    INTEROP_LINES=current INTEROP_SCENARIOS="1 2" INTEROP_CLUSTER_SCENARIOS= \
        make -C build distcheck || status=$?
    [[ $status -eq 0 ]] || show_failures build
    record distcheck "$status"
fi

if [[ $failed -eq 0 ]]; then
    log "summary: all passed (${summary[*]})"
else
    log "summary: FAILED (${summary[*]})"
fi
exit "$failed"
