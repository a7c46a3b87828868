# tap.sh: the checks the shell tests share, sourced by them.  Each check
# prints one TAP line ("ok N - ..." or "not ok N - ..."); tap_end prints
# the plan and exits 1 when any failed.

n=0
fails=0

# tool_test_start NAME ARGS...: the start of a test of the distlock tool.
# Outside scripts/with-redis.sh, runs the script again under it with ARGS,
# on a private server (never DISTLOCK_USE_EXISTING); inside, sets D (the
# built tool; fails when there is none), rcli (redis-cli on that server)
# and tmp (a fresh directory distlock-NAME.XXXXXX, for the caller to
# remove).  $here must name the tests directory.
tool_test_start() {
    local name=$1 inner
    shift
    inner="DISTLOCK_${name^^}_TEST_INNER"
    if [[ -z "${!inner:-}" ]]; then
        unset DISTLOCK_USE_EXISTING
        export "$inner=1"
        exec bash "$here/../scripts/with-redis.sh" bash "$0" "$@"
    fi
    D="$(cd "${top_builddir:-.}" && pwd)/tools/distlock"
    if [[ ! -x "$D" ]]; then
        echo "FAIL: $D not built"
        exit 1
    fi
    rcli() { redis-cli -p "$DISTLOCK_TEST_REDIS_PORT" "$@"; }
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/distlock-$name.XXXXXX")
}
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
# check DESCRIPTION COMMAND...: passes when COMMAND succeeds; returns 1
# when it failed, so that "check ... || show" shows why
check() {
    local desc=$1
    shift
    if "$@"; then ok "$desc"; else not_ok "$desc"; return 1; fi
}
tap_end() {
    echo "1..$n"
    if [[ $fails -ne 0 ]]; then
        echo "FAIL: $fails of $n checks failed"
        exit 1
    fi
    echo "PASS: $n checks"
    exit 0
}
