#!/bin/sh
# test_threadlocals.sh: what a thread-local of the library carries is said
# where it is defined.  A call's deadline and its other arguments go down
# by argument (link.h: a call's limit), so src/net/ has none at all; every
# other __thread definition under src/ has a comment with "thread-local:"
# and its reason on the line or in the six lines above.  Prints each that
# breaks the rule and fails.
set -u
. "$(dirname "$0")/verdict.sh"
src=${srcdir:-$(dirname "$0")/..}/src
bad=0
n=0
for f in "$src"/*/*.c "$src"/*/*.h; do
    rel=src/${f#"$src"/}
    for line in $(grep -nw '__thread' "$f" | grep -v 'extern' |
                  grep -v '^[0-9]*:[[:space:]]*\*' | cut -d: -f1); do
        n=$((n + 1))
        case $rel in
        src/net/*)
            echo "not ok: $rel:$line: a thread-local in src/net/ (pass it down by argument)"
            bad=$((bad + 1))
            continue ;;
        esac
        from=$((line > 6 ? line - 6 : 1))
        if ! sed -n "${from},${line}p" "$f" | grep -q 'thread-local:'; then
            echo "not ok: $rel:$line: a thread-local without a 'thread-local:' reason"
            bad=$((bad + 1))
        fi
    done
done
verdict "$bad" "thread-local(s) without their reason" \
    "$n thread-local definitions in src/ say why"
