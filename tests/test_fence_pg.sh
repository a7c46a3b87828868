#!/usr/bin/env bash
# test_fence_pg.sh: fence/fence.sql, the PostgreSQL side of fencing tokens,
# against a real PostgreSQL server that this script starts itself: initdb
# and pg_ctl on a private data and socket directory (no TCP listener), and
# stopped at the end.  Skipped (exit 77) when the server binaries are
# missing, unless CI is set: there the test needs them (scripts/deps.sh
# installs Debian's postgresql under CI).
set -u

here=$(cd "$(dirname "$0")" && pwd)
sql="$here/../fence/fence.sql"

pg_bin=
for d in /usr/lib/postgresql/*/bin; do
    [[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" ]] && pg_bin=$d
done
if [[ -z "$pg_bin" ]] || ! command -v psql >/dev/null 2>&1; then
    if [[ -n "${CI:-}" ]]; then
        echo "FAIL: PostgreSQL's server binaries or psql are missing (Debian: postgresql)"
        exit 1
    fi
    echo "SKIP: PostgreSQL's server binaries are missing (Debian: apt-get install postgresql)"
    exit 77
fi

# PostgreSQL refuses to run as root: then the server runs as the package's
# user (or nobody), in a directory of its own.
as_pg=()
if [[ $(id -u) -eq 0 ]]; then
    pg_user=postgres
    id -u "$pg_user" >/dev/null 2>&1 || pg_user=nobody
    as_pg=(runuser -u "$pg_user" --)
fi

export PGOPTIONS='-c client_min_messages=warning'
tmp=$(mktemp -d "${TMPDIR:-/tmp}/distlock-pg.XXXXXX")
chmod 0755 "$tmp"
[[ ${#as_pg[@]} -eq 0 ]] || chown "$pg_user" "$tmp"
bg_pids=()
session_fds=()
started=0
cleanup() {
    local p fd
    # a session whose input ends quits (rolling back what it left open)
    for fd in "${session_fds[@]}"; do exec {fd}>&-; done
    for p in "${bg_pids[@]}"; do
        timeout 10 tail --pid="$p" -f /dev/null 2>/dev/null || kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    if [[ $started -eq 1 ]]; then
        "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$tmp/data" -m immediate -w stop >/dev/null 2>&1
    fi
    [[ -n "${KEEP_TMP:-}" ]] || rm -rf -- "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=tests/tap.sh
. "$here/tap.sh"

if ! "${as_pg[@]}" "$pg_bin/initdb" -D "$tmp/data" -A trust -U distlock \
        --no-sync >"$tmp/initdb.log" 2>&1; then
    echo "FAIL: initdb failed:"
    cat "$tmp/initdb.log"
    exit 1
fi
if ! "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 60 \
        -o "-k $tmp -c listen_addresses= -c fsync=off" start >/dev/null; then
    echo "FAIL: the server did not start:"
    cat "$tmp/server.log"
    exit 1
fi
started=1

# q SQL...: each argument one command, on a session of its own; stdout only
q() {
    local a args=()
    for a in "$@"; do args+=(-c "$a"); done
    psql -h "$tmp" -U distlock -d postgres -X -q -A -t -v ON_ERROR_STOP=1 "${args[@]}"
}
# session NAME: a psql reading its commands from the fifo $tmp/NAME.in,
# its output (stdout and stderr) in $tmp/NAME.out
session() {
    mkfifo "$tmp/$1.in"
    psql -h "$tmp" -U distlock -d postgres -X -q -A -t -v VERBOSITY=verbose \
        <"$tmp/$1.in" >"$tmp/$1.out" 2>&1 &
    bg_pids+=($!)
    eval "exec {fd_$1}>\"\$tmp/$1.in\""
    local fd="fd_$1"
    session_fds+=("${!fd}")
}
say_to() { local fd="fd_$1"; printf '%s\n' "$2" >&"${!fd}"; }
# until the file has the text, at most 20 s
wait_text() {
    local i
    for ((i = 0; i < 400; i++)); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}
# how many sessions wait for a lock now
lock_waiters() {
    q "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
}
wait_lock_waiters() {
    local i
    for ((i = 0; i < 400; i++)); do
        [[ $(lock_waiters) == "$1" ]] && return 0
        sleep 0.05
    done
    return 1
}

check "fence.sql loads" psql -h "$tmp" -U distlock -d postgres -X -q \
    -v ON_ERROR_STOP=1 -f "$sql"
check "fence.sql loads again over itself (an upgrade)" psql -h "$tmp" \
    -U distlock -d postgres -X -q -v ON_ERROR_STOP=1 -f "$sql"

check "no token accepted yet: distlock_fence_get says 0" \
    test "$(q "SELECT distlock_fence_get('orders')")" = 0
check "a first token is accepted and returned" \
    test "$(q "SELECT distlock_fence('orders', 1000)")" = 1000
check "the same token again is accepted (one hold, several writes)" \
    test "$(q "SELECT distlock_fence('orders', 1000)")" = 1000
check "a higher token is accepted" \
    test "$(q "SELECT distlock_fence('orders', 2000)")" = 2000
out=$(q "SELECT distlock_fence('orders', 1999)" 2>&1)
check "a lower token is refused: STALE" grep -q 'STALE token 1999' <<<"$out" ||
    echo "$out"
out=$(psql -h "$tmp" -U distlock -d postgres -X -q -A -t -v VERBOSITY=verbose \
    -c "SELECT distlock_fence('orders', 1)" 2>&1)
check "the refusal's SQLSTATE is DL001" grep -q 'DL001' <<<"$out" || echo "$out"
check "the refusal changed nothing" \
    test "$(q "SELECT distlock_fence_get('orders')")" = 2000
check "another resource has a fence of its own" \
    test "$(q "SELECT distlock_fence('users', 5)")" = 5
out=$(q "SELECT distlock_fence('orders', -1)" 2>&1)
check "a negative token is refused as bad input, not as STALE" \
    bash -c '! grep -q STALE <<<"$1" && grep -q "a token of 0 or more" <<<"$1"' _ "$out" ||
    echo "$out"

# A write guarded in its own transaction: refused means rolled back.
q "CREATE TABLE ledger (n int)"
q "BEGIN" "SELECT distlock_fence('ledger', 10)" "INSERT INTO ledger VALUES (10)" \
    "COMMIT" >/dev/null
psql -h "$tmp" -U distlock -d postgres -X -q -v ON_ERROR_STOP=1 >/dev/null 2>&1 <<'EOF'
BEGIN;
SELECT distlock_fence('ledger', 9);
INSERT INTO ledger VALUES (9);
COMMIT;
EOF
check "a stale writer's transaction keeps none of its writes" \
    test "$(q "SELECT string_agg(n::text, ',') FROM ledger")" = 10

# Crossing tokens, case 1: the higher token's transaction is open when the
# lower one comes; the lower one waits for it and fails once it commits.
session hi
session lo
say_to hi "BEGIN; SELECT distlock_fence('cross', 20);"
wait_text "$tmp/hi.out" '^20$'
say_to lo "BEGIN; SELECT distlock_fence('cross', 15); SELECT 'lo-passed';"
check "crossing: the lower token waits behind the open higher one" \
    wait_lock_waiters 1
check "crossing: and has not passed while it waits" \
    bash -c '! grep -q lo-passed "$1"' _ "$tmp/lo.out"
say_to hi "COMMIT; SELECT 'hi-done';"
wait_text "$tmp/hi.out" 'hi-done'
check "crossing: once the higher one commits, the lower one fails STALE" \
    wait_text "$tmp/lo.out" 'STALE token 15' || cat "$tmp/lo.out"
check "crossing: and never passed" bash -c '! grep -q lo-passed "$1"' _ "$tmp/lo.out"
say_to lo "ROLLBACK;"
check "crossing: the fence keeps the higher token" \
    test "$(q "SELECT distlock_fence_get('cross')")" = 20

# Case 2: the higher token waits behind an open lower one, then passes.
session lo2
session hi2
say_to lo2 "BEGIN; SELECT distlock_fence('cross2', 30);"
wait_text "$tmp/lo2.out" '^30$'
say_to hi2 "BEGIN; SELECT distlock_fence('cross2', 31); SELECT 'hi2-passed';"
check "in order: the higher token waits behind the open lower one" \
    wait_lock_waiters 1
say_to lo2 "COMMIT;"
check "in order: then passes once the lower one commits" \
    wait_text "$tmp/hi2.out" 'hi2-passed' || cat "$tmp/hi2.out"
say_to hi2 "COMMIT; SELECT 'hi2-done';"
wait_text "$tmp/hi2.out" 'hi2-done'
check "in order: the fence holds the higher token" \
    test "$(q "SELECT distlock_fence_get('cross2')")" = 31

# Case 3: a higher token rolled back leaves the lower one free to pass.
session rb
session lo3
say_to rb "BEGIN; SELECT distlock_fence('cross3', 50);"
wait_text "$tmp/rb.out" '^50$'
say_to lo3 "BEGIN; SELECT distlock_fence('cross3', 40); SELECT 'lo3-passed';"
wait_lock_waiters 1
say_to rb "ROLLBACK;"
check "rollback: a rolled-back higher token does not fence the lower one out" \
    wait_text "$tmp/lo3.out" 'lo3-passed' || cat "$tmp/lo3.out"
say_to lo3 "COMMIT; SELECT 'lo3-done';"
wait_text "$tmp/lo3.out" 'lo3-done'
check "rollback: the fence holds what was committed" \
    test "$(q "SELECT distlock_fence_get('cross3')")" = 40

tap_end
