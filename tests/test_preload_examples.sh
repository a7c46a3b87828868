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
for p in examples/prodcons examples/joblimit tests/preload_waits tests/preload_sems; do
    if [[ ! -x $top/$p ]]; then
        echo "FAIL: $top/$p not built"
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
job=()
for i in 1 2; do
    "$run_bin" --config "$tmp/joblimit.ini" -- "$top/examples/joblimit" \
        "$sem" $limit $threads $jobs "$tmp/board" \
        >"$tmp/job$i.out" 2>"$tmp/job$i.err" &
    job[i]=$!
    pids+=("$!")
done
for i in 1 2; do
    wait_for "${job[i]}" 180
    [[ $rc == 0 ]] || fail "joblimit $i ended with $rc: $(cat "$tmp/job$i.err")"
done
most=$(cat "$tmp/job1.out" "$tmp/job2.out" | awk '/^most / { if ($2 > m) m = $2 } END { print m + 0 }')
done_=$(cat "$tmp/job1.out" "$tmp/job2.out" | awk '/^most / { if ($4 > d) d = $4 } END { print d + 0 }')
[[ $done_ == $((2 * threads * jobs)) ]] || fail "joblimit: $done_ jobs done of $((2 * threads * jobs))"
((most >= 1 && most <= limit)) || fail "joblimit: $most jobs ran at once; the limit is $limit"
[[ ! -e /dev/shm/sem.${sem#/} ]] || fail "joblimit: glibc's semaphore $sem was created: sem_open not mapped"
[[ $(rcli --scan --pattern '*jobs*' | wc -l) -ge 1 ]] || fail "joblimit: no semaphore 'jobs' in Redis"
echo "joblimit: at most $most of $limit permits in use across 2 processes, $done_ jobs"

# mode = redisson: Redisson's layout, the free permits in a plain string
# key named as the section; all of them back after the jobs.
printf '[semaphore rjobs]\nmatch = sem_open %s\nmode = redisson\n' "$sem" >"$tmp/rjob.ini"
"$run_bin" --config "$tmp/rjob.ini" -- "$top/examples/joblimit" \
    "$sem" $limit 2 3 "$tmp/board3" >"$tmp/rjob.out" 2>"$tmp/rjob.err" &
pids+=("$!")
wait_for "$!" 60
[[ $rc == 0 ]] || fail "joblimit, redisson mode: ended with $rc: $(cat "$tmp/rjob.err")"
[[ $(rcli type rjobs) == string && $(rcli get rjobs) == "$limit" ]] ||
    fail "joblimit, redisson mode: key rjobs is $(rcli type rjobs) '$(rcli get rjobs)'"

# A name the configuration does not choose is glibc's semaphore.
rm -f "/dev/shm/sem.${other#/}"
"$run_bin" --config "$tmp/joblimit.ini" -- "$top/examples/joblimit" \
    "$other" 1 2 3 "$tmp/board2" >"$tmp/other.out" 2>"$tmp/other.err" &
pids+=("$!")
wait_for "$!" 60
[[ $rc == 0 ]] || fail "joblimit, unmapped name: ended with $rc: $(cat "$tmp/other.err")"
[[ -e /dev/shm/sem.${other#/} ]] || fail "joblimit, unmapped name: no glibc semaphore $other"
grep -q '^most 1 ' "$tmp/other.out" || fail "joblimit, unmapped name: $(cat "$tmp/other.out")"

# ---- semaphores: signals, cancellation, a producer and a consumer -------------

# tests/preload_sems on mapped semaphores, leased with unowned posts (the
# signalling use): sem_wait and sem_timedwait return -1/EINTR when a
# handler without SA_RESTART interrupts them (LTP sem_wait/7-1), a thread
# cancelled in sem_wait goes, and a producer/consumer pair holds one
# permit per side at most however many items pass, then closes both.
psem() {
    local t=$1
    shift
    out=$(timeout "$t" "$run_bin" --config "$tmp/sems.ini" -- \
        "$top/tests/preload_sems" "$@" 2>&1)
    rc=$?
}
cat >"$tmp/sems.ini" <<EOF
[semaphore sigsem-$$]
match = sem_open /dlsig-$$
unowned_post = yes
[semaphore items-$$]
match = sem_open /dlitems-$$
unowned_post = yes
[semaphore slots-$$]
match = sem_open /dlslots-$$
unowned_post = yes
EOF
psem 60 eintr "/dlsig-$$"
[[ $rc == 0 && $out == *"eintr 1 1"* ]] ||
    fail "a mapped sem_wait or sem_timedwait not interrupted by a signal (rc $rc): $out"
psem 60 cancel "/dlsig-$$"
[[ $rc == 0 && $out == *"cancel 1 value 0"* ]] ||
    fail "a thread cancelled in a mapped sem_wait did not go (rc $rc): $out"
held=$(rcli hvals "distlock_sem_holds:{sigsem-$$}" | awk '{ s += $1 } END { print s + 0 }')
[[ $held == 0 ]] || fail "an interrupted or cancelled wait left $held permits held"
psem 180 pair "/dlitems-$$" "/dlslots-$$" 2000
[[ $rc == 0 && $out == *"pair 2000 0 4"* && $out == *"closed 0 0"* ]] ||
    fail "producer/consumer pair on mapped semaphores (rc $rc): $out"
for k in items slots; do
    held=$(rcli hvals "distlock_sem_holds:{$k-$$}" | awk '{ s += $1 } END { print s + 0 }')
    [[ $held == 0 ]] || fail "pair: $held $k permits still held after sem_close"
done
[[ ! -e /dev/shm/sem.dlitems-$$ ]] || fail "pair: glibc's semaphore was created"
echo "semaphores: EINTR, cancellation, 2000 items through a pair, closed"

# ---- a barrier, a heap condition, a timed-out wait (tests/preload_waits) ----

waits=$top/tests/preload_waits
cat >"$tmp/waits.ini" <<'EOF'
[mutex wl]
match = symbol g_lock

[cond {wl}:ready]
match = init_site make_ready_cond
mutex = wl

[cond {wl}:idle]
match = symbol g_idle_cv
mutex = wl

[barrier phase]
match = symbol g_phase
parties = 2
EOF

# Each process thinks it is alone at its barrier (count 1); parties = 2
# makes every round wait for the other process.
rounds=5
"$run_bin" --config "$tmp/waits.ini" -- "$waits" barrier $rounds \
    >"$tmp/bar1.out" 2>"$tmp/bar1.err" &
bar1=$!
pids+=("$bar1")
wait_line "$tmp/bar1.out" 1 '^round' &&
    fail "barrier: one process alone passed a barrier of 2 parties"
"$run_bin" --config "$tmp/waits.ini" -- "$waits" barrier $rounds \
    >"$tmp/bar2.out" 2>"$tmp/bar2.err" &
bar2=$!
pids+=("$bar2")
wait_for "$bar1" 60
[[ $rc == 0 ]] || fail "barrier 1 ended with $rc: $(cat "$tmp/bar1.err")"
wait_for "$bar2" 60
[[ $rc == 0 ]] || fail "barrier 2 ended with $rc: $(cat "$tmp/bar2.err")"
serial=$(cat "$tmp/bar1.out" "$tmp/bar2.out" | awk '/^serial / { s += $2 } END { print s + 0 }')
[[ $serial == "$rounds" ]] || fail "barrier: $serial serial returns in $rounds rounds"
grep -q '^error' "$tmp/bar1.out" "$tmp/bar2.out" && fail "barrier: a wait failed"
echo "barrier: $rounds rounds across 2 processes, one serial return each"

# A heap condition (init_site, CLOCK_MONOTONIC): a broadcast in one
# process ends a timed wait in another long before its 60 s.
"$run_bin" --config "$tmp/waits.ini" -- "$waits" waiter "$tmp/flag" \
    >"$tmp/waiter.out" 2>"$tmp/waiter.err" &
wpid=$!
pids+=("$wpid")
wait_line "$tmp/waiter.out" 30 '^waiting' || fail "cond: the waiter never waited: $(cat "$tmp/waiter.err")"
"$run_bin" --config "$tmp/waits.ini" -- "$waits" waker "$tmp/flag" \
    >"$tmp/waker.out" 2>"$tmp/waker.err" &
pids+=("$!")
wait_for "$!" 30
[[ $rc == 0 ]] || fail "cond: the waker ended with $rc: $(cat "$tmp/waker.err")"
wait_for "$wpid" 40
[[ $rc == 0 ]] || fail "cond: the waiter ended with $rc"
grep -q '^woken 0$' "$tmp/waiter.out" || fail "cond: the waiter says $(tail -1 "$tmp/waiter.out")"
echo "cond: a heap condition woken from another process"

# pthread_cond_clockwait on a mapped pair times out after its deadline,
# holding the mutex again, errno as it was.
"$run_bin" --config "$tmp/waits.ini" -- "$waits" timeout 300 \
    >"$tmp/to.out" 2>"$tmp/to.err" &
pids+=("$!")
wait_for "$!" 30
read -r _ trc _ tms _ terr <"$tmp/to.out"
[[ $rc == 0 && $trc == 110 && $terr == 4242 ]] && ((tms >= 300)) ||
    fail "cond timeout: exit $rc, '$(cat "$tmp/to.out")' $(cat "$tmp/to.err")"
echo "cond: clockwait timed out after $tms ms"

# A mapped condition with an unmapped mutex: the wait stays glibc's, and
# the signal of the same process still reaches it.
"$run_bin" --config "$tmp/waits.ini" -- "$waits" local \
    >"$tmp/local.out" 2>"$tmp/local.err" &
pids+=("$!")
wait_for "$!" 40
[[ $rc == 0 ]] && grep -qx 'local 0' "$tmp/local.out" ||
    fail "cond, unmapped mutex: exit $rc, '$(cat "$tmp/local.out")' $(cat "$tmp/local.err")"

# A thread cancelled in a mapped condition wait goes (LTP's
# pthread_cond_wait/2-3 and pthread_cond_timedwait/2-6 hung): its cleanup
# handler runs holding the mutex, the real one (trylock: EBUSY) and the
# distributed one (its hash in Redis), and lets it go; nothing stays in
# Redis.  (This runs under AddressSanitizer too: the program is not
# instrumented, so the runtime's misreading of a cancelled thread's
# unwinding that keeps test_wake's cases out of that build is not met.)
for how in wait timed; do
    d=$tmp/cancel-$how
    mkdir -p "$d"
    "$run_bin" --config "$tmp/waits.ini" -- "$waits" cancel $how "$d" \
        >"$d/out" 2>"$d/err" &
    cpid=$!
    pids+=("$cpid")
    for ((i = 0; i < 300; i++)); do
        [[ $(rcli ZCARD 'distlock_cond_waiters:{wl}:idle') == 1 ]] && break
        sleep 0.1
    done
    touch "$d/go"
    if wait_line "$d/out" 30 '^cleanup'; then
        held=$(rcli EXISTS wl)
        grep -qx 'cleanup trylock 16' "$d/out" ||
            fail "cond cancel ($how): the cleanup handler did not hold the real mutex: $(cat "$d/out")"
        [[ $held == 1 ]] ||
            fail "cond cancel ($how): the cleanup handler did not hold the distributed mutex"
    else
        fail "cond cancel ($how): the cancelled thread never ran its cleanup handler: $(cat "$d/err")"
    fi
    touch "$d/release"
    wait_for "$cpid" 30
    [[ $rc == 0 ]] && grep -qx 'unlocked 0' "$d/out" && grep -qx 'joined canceled' "$d/out" ||
        fail "cond cancel ($how): exit $rc, '$(cat "$d/out")' $(cat "$d/err")"
    for key in wl 'distlock_cond_waiters:{wl}:idle' 'distlock_cond_queue:{wl}:idle'; do
        [[ $(rcli EXISTS "$key") == 0 ]] || fail "cond cancel ($how): $key left in Redis"
    done
done
echo "cond: a thread cancelled in pthread_cond_wait and timedwait goes, mutex held for its cleanup"

# ---- the shim defines every version of the new functions the programs bind

defined=$(readelf --dyn-syms -W "$shim" | awk '$7 != "UND" { sub("@@", "@", $8); print $8 }')
for prog in "$top/examples/prodcons" "$top/examples/joblimit" "$waits"; do
    for sym in $(readelf --dyn-syms -W "$prog" |
                 awk '$7 == "UND" && $8 ~ /^(sem_|pthread_cond_|pthread_barrier_)/ { sub("@@", "@", $8); print $8 }'); do
        grep -qxF -- "$sym" <<<"$defined" || fail "the shim does not define $sym (bound by ${prog##*/})"
    done
done

# ---- the configuration ----------------------------------------------------------

# Runs distlock-run with the configuration on stdin; its stderr in $out.
try_config() {
    cat >"$tmp/try.ini"
    out=$("$run_bin" --config "$tmp/try.ini" -- "$waits" timeout 1 2>&1 >/dev/null)
    rc=$?
}
# The configuration on stdin is accepted with the warning $1; $2 says
# what it is.
warned() {
    try_config
    [[ $rc == 0 && $out == *"$1"* ]] || fail "$2: no warning (rc $rc): $out"
}
warned "[cond c] mutex = nosuch: no [mutex nosuch] section" \
    "pairing with a mutex not mapped" <<'EOF'
[cond c]
match = symbol g_idle_cv
mutex = nosuch
EOF
warned "[cond c]: no [mutex] section" \
    "a condition without any mapped mutex" <<'EOF'
[cond c]
match = symbol g_idle_cv
EOF
try_config <<'EOF'
[semaphore s]
match = sem_open jobs
mode = fifo
fair = yes
[semaphore t]
match = sem_open /a
[semaphore u]
match = sem_open //a
[barrier b]
match = symbol g_phase
parties = 0
EOF
[[ $rc == 78 && $out == *":2: match: 'sem_open /NAME'"* &&
   $out == *":3: mode: leased or redisson, not 'fifo'"* &&
   $out == *":4: unknown key 'fair' in [semaphore s] (known: match, mode,"* &&
   $out == *":8: match: 'sem_open /NAME'"* &&
   $out == *":11: parties: a number of waits, not '0'"* ]] ||
    fail "configuration errors not reported by line (rc $rc): $out"

exit $failed
