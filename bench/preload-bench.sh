#!/bin/sh
# bench/preload-bench.sh BUILDDIR [PAIRS] [ROUNDS]   ("make bench-preload")
#
# Runs bench/preload-bench ROUNDS times (default 5) without and with
# libdistlock_preload.so, alternating, and prints the best and the median
# ns per lock+unlock pair of an unmapped mutex for each, and the difference.
# The shim's configuration maps another mutex of the program; no Redis is
# contacted (nothing mapped is ever locked).
set -eu

b=${1:-.}
pairs=${2:-50000000}
rounds=${3:-5}
bin=$b/bench/preload-bench
shim=$b/.libs/libdistlock_preload.so
for f in "$bin" "$shim"; do
    [ -e "$f" ] || { echo "preload-bench: $f is not built" >&2; exit 1; }
done
shim=$(cd "$(dirname "$shim")" && pwd)/$(basename "$shim")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/preload-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cat >"$tmp/bench.ini" <<'INI'
[redis]
url = redis://127.0.0.1:1      ; never contacted
[mutex preload-bench]
match = symbol g_mapped
INI

pin=
if command -v taskset >/dev/null 2>&1 && taskset -c 0 true 2>/dev/null; then
    pin="taskset -c 0"
fi

: >"$tmp/plain"
: >"$tmp/shim"
r=0
while [ "$r" -lt "$rounds" ]; do
    $pin "$bin" "$pairs" >>"$tmp/plain"
    # (env after taskset: only the benchmark itself gets the shim)
    $pin env LD_PRELOAD="$shim" DISTLOCK_PRELOAD_CONFIG="$tmp/bench.ini" \
        "$bin" "$pairs" >>"$tmp/shim"
    r=$((r + 1))
done

# best and median of a file of numbers
stats() {
    sort -n "$1" | awk '{ v[NR] = $1 } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.2f %.2f\n", v[1], m }'
}
set -- $(stats "$tmp/plain") $(stats "$tmp/shim")
echo "preload-bench: $pairs lock+unlock pairs of an unmapped mutex, $rounds runs each${pin:+, on CPU 0}"
echo "                      best    median   (ns per pair)"
printf "  without the shim  %7s  %7s\n" "$1" "$2"
printf "  with the shim     %7s  %7s\n" "$3" "$4"
awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" \
    'BEGIN { printf "  shim overhead     %7.2f  %7.2f\n", c - a, d - b }'
