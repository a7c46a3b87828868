# verdict.sh: the last word of the tree's static checks (test_layers.sh,
# test_names_owner.sh, test_threadlocals.sh), sourced by them.
#
#   verdict BAD FAIL-TEXT OK-TEXT
# With BAD places against the rule: "FAIL: BAD FAIL-TEXT" and exit 1;
# with none, "ok: OK-TEXT".
verdict() {
    if [ "$1" -ne 0 ]; then
        echo "FAIL: $1 $2"
        exit 1
    fi
    echo "ok: $3"
}
