#!/usr/bin/env bash
# test_fence.sh: the Redis side of fencing tokens (fence/fence.lua), loaded
# by `distlock fence load` into a private redis-server (scripts/with-redis.sh)
# and called from redis-cli, as any client would; then with the tokens of
# real holds.  The cluster case is in test_cli.sh, beside its cluster.
set -u

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/tap.sh
. "$here/tap.sh"
tool_test_start fence "$@"     # D, rcli and tmp, under a private server
trap '[[ -n "${KEEP_TMP:-}" ]] || rm -rf -- "$tmp"' EXIT
pfx="fencetest$$"
F="fence:{$pfx}" K="{$pfx}:total"

out="$tmp/out" err="$tmp/err"
run() {
    "$@" >"$out" 2>"$err"
    rc=$?
}
show() { echo "--- rc=$rc stdout:"; cat "$out"; echo "--- stderr:"; cat "$err"; }
# fenced TOKEN COMMAND ARGS...: distlock_fenced on $F and $K
fenced() { local t=$1; shift; rcli FCALL distlock_fenced 2 "$F" "$K" "$t" "$@"; }
fence_get() { rcli FCALL_RO distlock_fence_get 1 "${1:-$F}"; }

run rcli FCALL distlock_fenced 2 "$F" "$K" 1 INCR
check "before loading, FCALL says the function is missing" \
    grep -qi "function not found" "$out" || show

run "$D" fence load
check "fence load: exit 0, naming the server and the library" \
    eval '[[ $rc -eq 0 ]] && grep -q "127.0.0.1:$DISTLOCK_TEST_REDIS_PORT: loaded function library .distlock." "$out"' ||
    show
run "$D" fence load "redis://127.0.0.1:$DISTLOCK_TEST_REDIS_PORT"
check "fence load URL, a second time: replaces it, exit 0" \
    eval '[[ $rc -eq 0 ]] && grep -q "loaded function library" "$out"' || show
check "FUNCTION LIST shows both functions" \
    eval 'rcli FUNCTION LIST LIBRARYNAME distlock | grep -q distlock_fenced &&
          rcli FUNCTION LIST LIBRARYNAME distlock | grep -q distlock_fence_get'
run "$D" --json fence load
check "fence load --json: one object per server" \
    grep -q '"library":"distlock"' "$out" || show

check "a new fence has accepted nothing: 0" test "$(fence_get)" = 0
check "the first token's command runs and its reply comes back" \
    test "$(fenced 100 INCRBY 5)" = 5
check "the fence records the token" test "$(fence_get)" = 100
check "the same token again is accepted" test "$(fenced 100 INCRBY 5)" = 10
check "a higher token is accepted" test "$(fenced 250 INCRBY 5)" = 15
run fenced 249 INCRBY 5
check "a lower token is refused with an error that starts with STALE" \
    grep -q '^STALE token 249 is lower than 250' "$out" || show
check "and the refused command did not run" test "$(rcli GET "$K")" = 15
check "leading zeros are the same token" test "$(fenced 000250 GET)" = 15
run fenced 9223372036854775808 GET
check "a token above 2^63-1 is refused as bad input" \
    grep -q '^ERR token .* is above 2^63-1' "$out" || show
run fenced 12a GET
check "a token that is not a number is refused as bad input" \
    grep -q 'is not a decimal integer' "$out" || show
check "a token past 2^53, where a Lua number loses digits, is kept exactly" \
    test "$(fenced 9007199254740993 GET)" = 15
run fenced 9007199254740992 GET
check "so 2^53 is lower than 2^53+1" grep -q '^STALE' "$out" || show
run fenced 9007199254740994 HSET field value
check "a command that fails runs nothing..." grep -q WRONGTYPE "$out" || show
check "...and records no token" test "$(fence_get)" = 9007199254740993
rcli SET "fence:{$pfx}bad" notanumber >/dev/null
run rcli FCALL distlock_fenced 2 "fence:{$pfx}bad" "$K" 1 GET
check "a fence key that holds no token is refused, naming it" \
    grep -q "fence:{$pfx}bad holds a value that" "$out" || show
run rcli FCALL_RO distlock_fenced 2 "$F" "$K" 1 GET
check "distlock_fenced is not read-only: FCALL_RO refuses it" \
    grep -qi "write flag" "$out" || show
run rcli FCALL distlock_fenced 1 "$F" 1 GET
check "distlock_fenced with one key: refused, saying it takes FENCE DATA" \
    grep -q '^ERR distlock_fenced takes 2 keys: FENCE DATA' "$out" || show
run rcli FCALL_RO distlock_fence_get 2 "$F" "$K"
check "distlock_fence_get with two keys: refused, saying it takes FENCE" \
    grep -q '^ERR distlock_fence_get takes 1 key: FENCE' "$out" || show
run "$D" fence get "$F"
check "distlock fence get prints the fence's token" \
    eval '[[ $rc -eq 0 && "$(cat "$out")" == 9007199254740993 ]]' || show
run "$D" --json fence get "$F"
check "distlock --json fence get" \
    grep -q "\"token\":9007199254740993" "$out" || show
run "$D" fence
check "fence without a subcommand: usage error, exit 2" \
    eval '[[ $rc -eq 2 ]] && grep -q "load or get" "$err"' || show
run "$D" fence get
check "fence get without FENCE: usage error, exit 2" \
    eval '[[ $rc -eq 2 ]] && grep -q "needs FENCE" "$err"' || show

# With the tokens of real holds: once a later hold has written, a write
# with an earlier hold's token is refused at the resource.
F2="fence:{$pfx:r}" K2="{$pfx:r}:n" L="$pfx:lock"
guarded() {   # guarded TOKEN: the fenced INCR of a holder
    rcli FCALL distlock_fenced 2 "$F2" "$K2" "$1" INCR
}
t1=$("$D" lock "$L" -- sh -c 'echo "$DISTLOCK_TOKEN"')
t2=$("$D" lock "$L" -- sh -c 'echo "$DISTLOCK_TOKEN"')
check "two holds, one after the other, get rising tokens" \
    eval '[[ -n "$t1" && -n "$t2" ]] && ((t2 > t1))'
check "the later hold's write is accepted" test "$(guarded "$t2")" = 1
run guarded "$t1"
check "a write with the earlier hold's token is refused: STALE" \
    grep -q '^STALE' "$out" || show

tap_end
