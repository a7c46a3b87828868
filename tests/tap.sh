# tap.sh: the checks the shell tests share, sourced by them.  Each check
# prints one TAP line ("ok N - ..." or "not ok N - ..."); tap_end prints
# the plan and exits 1 when any failed.

n=0
fails=0
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
