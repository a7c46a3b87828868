#!/bin/sh
# test_names_owner.sh: one owner per Redis name.  Every key and channel
# prefix the library and the distlock tool use is spelled in
# src/route/names.c (and described in names.h); anywhere else under src/ or
# tools/ a string literal such as "redisson_lock_token:" or "distlock_sem:"
# fails this check.  Comments may name them.  tests/ and bench/ are left
# out on purpose: they read Redis from outside and assert the layout
# itself, which a test that asked names.c would take on trust.
set -u
. "$(dirname "$0")/verdict.sh"
top=${srcdir:-$(dirname "$0")/..}
bad=0
checked=0
for f in $(find "$top/src" "$top/tools" -name '*.c' -o -name '*.h' | sort); do
    case $f in
    */src/route/names.c | */src/route/names.h) continue ;;
    esac
    checked=$((checked + 1))
    # comments blanked (lines kept, so that numbers stay true), then
    # string literals that hold a prefix or a glob of one
    hits=$(sed -e 's:/\*.*\*/::g' -e 's:^[[:space:]]*/\*.*::' \
               -e 's:^[[:space:]]*\*.*::' "$f" |
           grep -nE '"[^"]*(redisson|distlock)_[a-z_]*[:*]')
    if [ -n "$hits" ]; then
        printf '%s\n' "$hits" | sed "s|^|not ok: ${f#"$top"/}:|"
        bad=$((bad + 1))
    fi
done
verdict "$bad" "file(s) spell a Redis name prefix; take it from src/route/names.c" \
    "$checked files under src/ and tools/ take every Redis name prefix from names.c"
