#!/usr/bin/env bash
# test_preload_examples.sh: the LD_PRELOAD examples, two processes each,
# through distlock-run against a private redis-server.
#
#   examples/prodcons: a consumer waiting in pthread_cond_wait in one
#     process is woken by a producer in another (without the shim the
#     consumer would wait for ever: the test's time bound catches that), and
#     receives every item that process produced.
#   examples/joblimit: two processes of 4 threads share 2 permits of a
#     sem_open semaphore mapped to a dist_sem_t: never more than 2 jobs at
#     once across both (a board in a shared file records the most), and
#     glibc's semaphore is never created.  A name the configuration does not
#     choose stays glibc's.
#
# Re-runs itself under scripts/with-redis.sh (DISTLOCK_URL is the private
# server's).  Bounds are generous: they hold on a loaded 2-core machine.
set -u

here=$(cd "$(dirname "$0")" && pwd)
if [[ -z "${DISTLOCK_PLEX_TEST_INNER:-}" ]]; then
    unset DISTLOCK_USE_EXISTING      # always a private server
    export DISTLOCK_PLEX_TEST_INNER=1
    exec bash "$here/../scripts/with-redis.sh" bash "$0" "$@"
fi

top=$(cd "${top_builddir:-.}" && pwd)
src=$(cd "$here/.." && pwd)
run_bin=$top/tools/distlock-run
shim=$top/.libs/libdistlock_preload.so
if [[ ! -x $run_bin || ! -f $shim ]]; then
    echo "SKIP: built without the LD_PRELOAD shim (--disable-preload)"
    exit 77
fi
for p in prodcons joblimit; do
    if [[ ! -x $top/examples/$p ]]; then
        echo "FAIL: $top/examples/$p not built"
        exit 1
    fi
done
export DISTLOCK_PRELOAD_LIB=$shim
unset LD_PRELOAD DISTLOCK_PRELOAD_CONFIG

# In a sanitizer build the shim (through libdistlock.so) needs the
# sanitizer runtime, loaded first into these uninstrumented programs.
asan=$(ldd "$shim" 2>/dev/null | awk '/libasan\.so/ { print $3; exit }')
if [[ -n $asan ]]; then
    export LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0
fi

rcli() { redis-cli -p "$DISTLOCK_TEST_REDIS_PORT" "$@"; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/distlock-plex.XXXXXX")
sem="/dlplex-$$"
other="/dlplex-other-$$"
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -f "/dev/shm/sem.${sem#/}" "/dev/shm/sem.${other#/}"
    [[ -n "${KEEP_TMP:-}" ]] || rm -rf -- "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

failed=0
fail() {
    echo "FAIL: $*"
    failed=1
}

# Waits up to $2 seconds for process $1 to end; its status in $rc (-1:
# still running, killed).
wait_for() {
    local pid=$1 secs=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid"
            rc=$?
            return
        fi
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=-1
}

# Waits up to $2 seconds for a line matching $3 in file $1.
wait_line() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        grep -q -- "$3" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# ---- producer and consumer ----------------------------------------------------

items=50
"$run_bin" --config "$src/examples/prodcons.ini" -- \
    "$top/examples/prodcons" consume "$tmp/queue" $items \
    >"$tmp/cons.out" 2>"$tmp/cons.err" &
cons=$!
pids+=("$cons")
if ! wait_line "$tmp/cons.out" 60 '^waiting'; then
    fail "prodcons: the consumer never began to wait: $(cat "$tmp/cons.err")"
fi
"$run_bin" --config "$src/examples/prodcons.ini" -- \
    "$top/examples/prodcons" produce "$tmp/queue" $items \
    >"$tmp/prod.out" 2>"$tmp/prod.err" &
prod=$!
pids+=("$prod")
wait_for "$prod" 120
prc=$rc
wait_for "$cons" 60
crc=$rc
[[ $prc == 0 ]] || fail "prodcons: producer ended with $prc: $(cat "$tmp/prod.err")"
[[ $crc == 0 ]] || fail "prodcons: consumer ended with $crc (-1: still waiting, not woken): $(cat "$tmp/cons.err")"
ppid_=$(awk '/^pid / { print $2; exit }' "$tmp/prod.out")
cpid_=$(awk '/^pid / { print $2; exit }' "$tmp/cons.out")
got=$(grep -c '^item ' "$tmp/cons.out")
from=$(awk '/^item / { print $4 }' "$tmp/cons.out" | sort -u)
[[ $got == "$items" ]] || fail "prodcons: the consumer got $got items of $items"
[[ -n $ppid_ && $from == "$ppid_" && $ppid_ != "$cpid_" ]] ||
    fail "prodcons: items from '$from', producer '$ppid_', consumer '$cpid_'"
echo "prodcons: $got items, consumer woken across processes"

# ---- the job limiter ----------------------------------------------------------

limit=2
threads=4
jobs=15
sed "s|sem_open /jobs|sem_open $sem|" "$src/examples/joblimit.ini" >"$tmp/joblimit.ini"
rm -f "/dev/shm/sem.${sem#/}"
for i in 1 2; do
    "$run_bin" --config "$tmp/joblimit.ini" -- "$top/examples/joblimit" \
        "$sem" $limit $threads $jobs "$tmp/board" \
        >"$tmp/job$i.out" 2>"$tmp/job$i.err" &
    eval "job$i=\$!"
    pids+=("$!")
done
# shellcheck disable=SC2154  # job1, job2: set by the eval above
for i in 1 2; do
    pid=$([[ $i == 1 ]] && echo "$job1" || echo "$job2")
    wait_for "$pid" 180
    [[ $rc == 0 ]] || fail "joblimit $i ended with $rc: $(cat "$tmp/job$i.err")"
done
most=$(cat "$tmp/job1.out" "$tmp/job2.out" | awk '/^most / { if ($2 > m) m = $2 } END { print m + 0 }')
done_=$(cat "$tmp/job1.out" "$tmp/job2.out" | awk '/^most / { if ($4 > d) d = $4 } END { print d + 0 }')
[[ $done_ == $((2 * threads * jobs)) ]] || fail "joblimit: $done_ jobs done of $((2 * threads * jobs))"
((most >= 1 && most <= limit)) || fail "joblimit: $most jobs ran at once; the limit is $limit"
[[ ! -e /dev/shm/sem.${sem#/} ]] || fail "joblimit: glibc's semaphore $sem was created: sem_open not mapped"
[[ $(rcli --scan --pattern '*jobs*' | wc -l) -ge 1 ]] || fail "joblimit: no semaphore 'jobs' in Redis"
echo "joblimit: at most $most of $limit permits in use across 2 processes, $done_ jobs"

# A name the configuration does not choose is glibc's semaphore.
rm -f "/dev/shm/sem.${other#/}"
"$run_bin" --config "$tmp/joblimit.ini" -- "$top/examples/joblimit" \
    "$other" 1 2 3 "$tmp/board2" >"$tmp/other.out" 2>"$tmp/other.err" &
pids+=("$!")
wait_for "$!" 60
[[ $rc == 0 ]] || fail "joblimit, unmapped name: ended with $rc: $(cat "$tmp/other.err")"
[[ -e /dev/shm/sem.${other#/} ]] || fail "joblimit, unmapped name: no glibc semaphore $other"
grep -q '^most 1 ' "$tmp/other.out" || fail "joblimit, unmapped name: $(cat "$tmp/other.out")"

exit $failed
