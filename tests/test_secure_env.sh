#!/bin/sh
# test_secure_env.sh: a set-user-ID program never takes distlock's settings
# from its caller's environment (issue 15 item 10).
# 1. Neither libdistlock.so nor the shim imports getenv: they read
#    DISTLOCK_* with secure_getenv, which gives nothing in secure-execution
#    mode (set-user-ID, set-group-ID, file capabilities).
# 2. As root, with a user "nobody": a set-user-ID copy of tests/secure_env
#    owned by nobody, in a private temp dir, runs in secure-execution mode
#    and must report the defaults; the same copy without the bit must
#    report the environment's settings.  Skipped when not root, without
#    "nobody", or on a nosuid file system.
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
if [ "$(id -u)" != 0 ] || ! id nobody >/dev/null 2>&1; then
    echo "SKIP: the set-user-ID run needs root and a user 'nobody'"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/distlock-secure.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cp "$prog" "$tmp/secure_env"
chown nobody "$tmp/secure_env"
chmod 0755 "$tmp/secure_env"
run() {
    DISTLOCK_URL=redis://192.0.2.7:4242 DISTLOCK_TIMEOUT_MS=1234 \
        ASAN_OPTIONS="${ASAN_OPTIONS:-} detect_leaks=0" "$tmp/secure_env" report
}
plain=$(run)
want="secure=0 host=192.0.2.7 port=4242 timeout=1234"
[ "$plain" = "$want" ] || { echo "FAIL: without the bit: '$plain', want '$want'"; exit 1; }
chmod 4755 "$tmp/secure_env"
suid=$(run)
case "$suid" in
secure=0*) echo "SKIP: $tmp is on a nosuid file system: no secure-execution mode"; exit 0 ;;
esac
want="secure=1 host=127.0.0.1 port=6379 timeout=2000"
[ "$suid" = "$want" ] || { echo "FAIL: set-user-ID: '$suid', want '$want'"; exit 1; }
echo "PASS: the set-user-ID copy ignored DISTLOCK_URL and DISTLOCK_TIMEOUT_MS"
