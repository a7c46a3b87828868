#!/usr/bin/env bash
# sem-pair.sh: Redis memory and the held set of a producer/consumer pair of
# leased semaphores with unowned posts, through N items (default 1000000),
# in the API (bench/sem-pair) and under the LD_PRELOAD shim
# (tests/preload_sems pair, sem_open semaphores mapped by distlock-run).
#
#   bench/sem-pair.sh [N]        from the build directory (top_builddir)
#
# Runs against a private redis-server (scripts/with-redis.sh) unless
# DISTLOCK_URL is set with DISTLOCK_USE_EXISTING=1.  Every 2 s it reads
# INFO memory's used_memory and the holds of both semaphores (the sum of
# distlock_sem_holds:{S}'s permits and its number of fields), and prints
# per mode the items/s, the smallest and largest used_memory seen, the
# largest held set and whether destroy (sem_close) succeeded.
set -u

here=$(cd "$(dirname "$0")" && pwd)
if [[ -z "${DISTLOCK_SEM_PAIR_INNER:-}" ]]; then
    export DISTLOCK_SEM_PAIR_INNER=1
    exec bash "$here/../scripts/with-redis.sh" bash "$0" "$@"
fi
n=${1:-1000000}
top=$(cd "${top_builddir:-.}" && pwd)
port=${DISTLOCK_TEST_REDIS_PORT:-6379}
rcli() { redis-cli -p "$port" "$@"; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/distlock-sem-pair.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

held() {    # permits held, fields: of semaphore $1
    rcli hvals "distlock_sem_holds:{$1}" |
        awk '{ s += $1; f++ } END { printf "%d %d\n", s + 0, f + 0 }'
}

# watch PID ITEMS SLOTS: samples until PID ends; prints the figures.
watch() {
    local pid=$1 mem lo=0 hi=0 most=0 fields=0 h f k
    while kill -0 "$pid" 2>/dev/null; do
        mem=$(rcli info memory | awk -F: '/^used_memory:/ { print $2 + 0 }')
        ((lo == 0 || mem < lo)) && lo=$mem
        ((mem > hi)) && hi=$mem
        for k in "$2" "$3"; do
            read -r h f < <(held "$k")
            ((h > most)) && most=$h
            ((f > fields)) && fields=$f
        done
        sleep 2
    done
    echo "$lo $hi $most $fields"
}

run() {     # run MODE: one pair of N items; a line of figures
    local mode=$1 t0 t1 out rc figs
    local it="pair-$mode-items-$$" sl="pair-$mode-slots-$$"
    t0=$(date +%s.%N)
    if [[ $mode == api ]]; then
        "$top/bench/sem-pair" "$it" "$sl" "$n" >"$tmp/$mode.out" 2>&1 &
    else
        printf '[semaphore %s]\nmatch = sem_open /%s\nunowned_post = yes\n' \
            "$it" "$it" "$sl" "$sl" >"$tmp/sems.ini"
        DISTLOCK_PRELOAD_LIB=$top/.libs/libdistlock_preload.so \
            "$top/tools/distlock-run" --config "$tmp/sems.ini" -- \
            "$top/tests/preload_sems" pair "/$it" "/$sl" "$n" \
            >"$tmp/$mode.out" 2>&1 &
    fi
    figs=$(watch $! "$it" "$sl")
    wait $!
    rc=$?
    t1=$(date +%s.%N)
    read -r lo hi most fields <<<"$figs"
    printf '%-5s %9d items %7.0f items/s  used_memory %s..%s B  held at most %d permits in %d fields  destroy %s  exit %d\n' \
        "$mode" "$n" "$(echo "$n / ($t1 - $t0)" | bc -l)" "$lo" "$hi" "$most" \
        "$fields" "$(grep -Eq '^(destroyed|closed) 0 0' "$tmp/$mode.out" && echo ok || echo FAILED)" "$rc"
    [[ $rc == 0 ]] || cat "$tmp/$mode.out"
}

run api
if [[ -x $top/tools/distlock-run && -x $top/tests/preload_sems ]]; then
    run shim
fi
