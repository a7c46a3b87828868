#!/bin/sh
# plot.sh: pictures of a distlock-bench run, from its --csv file.
#
#   bench/plot.sh BENCH.csv OUT.svg      (or OUT.png)
#
# Draws up to three panels, each only when the run has its scenarios:
#   - hand-off latency (s3, s3f, cv): the cumulative distribution, the
#     fraction of hand-offs at or below each latency, on a log scale;
#   - the waits in dist_mutex_lock under contention (s2, s2f), the same way
#     (10 us buckets);
#   - throughput by thread count (s1t).
# Needs gnuplot (Debian: gnuplot-nox; scripts/deps.sh installs it when
# DISTLOCK_PLOT=1).  Exit 2 on a usage error, 1 when gnuplot is missing or
# fails.
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 BENCH.csv OUT.svg|OUT.png" >&2
    exit 2
fi
csv=$1 out=$2
[ -r "$csv" ] || { echo "plot.sh: cannot read $csv" >&2; exit 2; }
if ! head -n 1 "$csv" | grep -qx 'scenario,series,x,y'; then
    echo "plot.sh: $csv is not a distlock-bench --csv file" >&2
    exit 2
fi
case $out in
*.svg) term="svg size 1200,%H dynamic noenhanced background rgb 'white'" ;;
*.png) term="pngcairo size 1200,%H noenhanced" ;;
*) echo "plot.sh: OUT must end in .svg or .png" >&2; exit 2 ;;
esac
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plot.sh: gnuplot is not installed (apt-get install gnuplot-nox, or DISTLOCK_PLOT=1 scripts/deps.sh)" >&2
    exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/distlock-plot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# one data file per scenario and series: SCENARIO.SERIES, "x y" lines
awk -F, -v dir="$tmp" 'NR > 1 && NF == 4 {
    print $3, $4 > (dir "/" $1 "." $2)
}' "$csv"

# "plot" clauses of one panel: a curve per scenario that has the series
curves() { # series title-suffix scenario...
    series=$1 style=$2
    shift 2
    sep=
    for sc in "$@"; do
        f="$tmp/$sc.$series"
        [ -s "$f" ] || continue
        printf "%s'%s' using 1:2 with %s title '%s'" "$sep" "$f" "$style" "$sc"
        sep=", "
    done
}
lat=$(curves handoff_ms_cdf steps s3 s3f cv)
wait=$(curves wait_ms_cdf steps s2 s2f)
thr=$(curves pairs_per_s linespoints s1t)
panels=0
for p in "$lat" "$wait" "$thr"; do
    [ -n "$p" ] && panels=$((panels + 1))
done
if [ "$panels" -eq 0 ]; then
    echo "plot.sh: $csv has none of s3, s3f, cv, s2, s2f, s1t (run distlock-bench --csv with them)" >&2
    exit 1
fi
height=$((panels * 360))

{
    echo "set terminal $(echo "$term" | sed "s/%H/$height/")"
    echo "set output '$out'"
    echo "set datafile separator ' '"
    echo "set multiplot layout $panels,1"
    echo "set grid"
    echo "set key bottom right"
    if [ -n "$lat" ]; then
        echo "set title 'Hand-off latency: unlock in one process -> lock (or wait) returning in another'"
        echo "set logscale x"
        echo "set xlabel 'latency (ms, log scale)'"
        echo "set ylabel 'fraction of hand-offs <= x'"
        echo "set yrange [0:1]"
        echo "plot $lat"
    fi
    if [ -n "$wait" ]; then
        echo "set title 'Time spent waiting in dist_mutex_lock, 4 processes on one lock'"
        echo "set logscale x"
        echo "set xlabel 'wait (ms, log scale, 10 us buckets)'"
        echo "set ylabel 'fraction of acquisitions <= x'"
        echo "set yrange [0:1]"
        echo "plot $wait"
    fi
    if [ -n "$thr" ]; then
        echo "set title 'lock+unlock pairs/s, a lock per thread'"
        echo "unset logscale x"
        echo "set logscale x 2"
        echo "set xlabel 'threads'"
        echo "set ylabel 'pairs/s'"
        echo "set yrange [0:*]"
        echo "set key top left"
        echo "plot $thr"
    fi
    echo "unset multiplot"
} >"$tmp/plot.gp"

gnuplot "$tmp/plot.gp" || { echo "plot.sh: gnuplot failed" >&2; exit 1; }
echo "$out"
