#!/bin/sh
# test_secure_env.sh: a set-user-ID program never takes distlock's settings
# from its caller's environment (issue 15 item 10).
# 1. Neither libdistlock.so nor the shim imports getenv: they read
#    DISTLOCK_* with secure_getenv, which gives nothing in secure-execution
#    mode (set-user-ID, set-group-ID, file capabilities).
# 2. As root: a set-group-ID copy of tests/secure_env (group 65534, owner
#    still root), in a private temp dir, runs in secure-execution mode and
#    must report the defaults; the same copy without the bit must report
#    the environment's settings.  Skipped when not root or on a nosuid file
#    system.
#    Why set-group-ID and not set-user-ID to "nobody": secure_getenv sees
#    the same mode either way (AT_SECURE), but a copy running as nobody has
#    its libraries looked up with nobody's rights, and a library it finds
#    only under a directory only root may enter (a clone in /root, mode
#    0700) does not load: "error while loading shared libraries", exit 127
#    (issue 27).  With its owner kept, the copy's loader reads with root's
#    rights wherever the tree lies.
set -eu

top="${top_builddir:-.}"
fail=0
for lib in "$top/.libs/libdistlock.so" "$top/.libs/libdistlock_preload.so"; do
    [ -f "$lib" ] || continue
    if nm -D --undefined-only "$lib" | awk '{print $2}' | grep -q '^getenv@'; then
        echo "FAIL: $lib imports getenv: a set-user-ID program would take its settings from its caller"
        fail=1
    elif ! nm -D --undefined-only "$lib" | awk '{print $2}' | grep -q '^secure_getenv@'; then
        echo "FAIL: $lib reads no environment at all (secure_getenv missing)"
        fail=1
    else
        echo "ok: $lib reads the environment with secure_getenv only"
    fi
done
[ $fail -eq 0 ] || exit 1

prog="$top/tests/secure_env"
[ -x "$prog" ] || { echo "FAIL: $prog not built"; exit 1; }
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: the set-group-ID run needs root"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/distlock-secure.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cp "$prog" "$tmp/secure_env"
chgrp 65534 "$tmp/secure_env"
chmod 0755 "$tmp/secure_env"
run() {
    DISTLOCK_URL=redis://192.0.2.7:4242 DISTLOCK_TIMEOUT_MS=1234 \
        ASAN_OPTIONS="${ASAN_OPTIONS:-} detect_leaks=0" "$tmp/secure_env" report
}
plain=$(run)
want="secure=0 host=192.0.2.7 port=4242 timeout=1234"
[ "$plain" = "$want" ] || { echo "FAIL: without the bit: '$plain', want '$want'"; exit 1; }
chmod 2755 "$tmp/secure_env"
suid=$(run)
case "$suid" in
secure=0*) echo "SKIP: $tmp is on a nosuid file system: no secure-execution mode"; exit 0 ;;
esac
want="secure=1 host=127.0.0.1 port=6379 timeout=2000"
[ "$suid" = "$want" ] || { echo "FAIL: set-group-ID: '$suid', want '$want'"; exit 1; }
echo "PASS: the set-group-ID copy ignored DISTLOCK_URL and DISTLOCK_TIMEOUT_MS"
