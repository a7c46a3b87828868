#!/bin/sh
# test_symbols.sh: libdistlock.so exports the public API and nothing else.
# Internals use hidden visibility and a dist__ prefix; this catches a
# forgotten `static`, a leaked helper, or an API function that lost its
# export macro.
set -eu

lib="${top_builddir:-.}/.libs/libdistlock.so"
[ -f "$lib" ] || { echo "FAIL: $lib not built"; exit 1; }
hdr="${srcdir:-.}/include/distlock.h"
[ -f "$hdr" ] || hdr="$(dirname "$0")/../include/distlock.h"

exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort)
declared=$(sed -n 's/^DIST_EXPORT[^(]*[ *]\(dist_[a-z_]*\)(.*/\1/p' "$hdr" | sort)

fail=0
for s in $exported; do
    case "$s" in
    dist__*) echo "FAIL: internal symbol exported: $s"; fail=1 ;;
    dist_*) ;;
    *) echo "FAIL: non-API symbol exported: $s"; fail=1 ;;
    esac
done
for s in $declared; do
    echo "$exported" | grep -qx "$s" || { echo "FAIL: declared but not exported: $s"; fail=1; }
done
for s in $exported; do
    echo "$declared" | grep -qx "$s" || { echo "FAIL: exported but not declared in distlock.h: $s"; fail=1; }
done
n=$(echo "$exported" | wc -l)
[ "$n" -ge 19 ] || { echo "FAIL: only $n symbols exported"; fail=1; }
[ $fail -eq 0 ] && echo "PASS: $n symbols exported, all dist_* and declared"
exit $fail
