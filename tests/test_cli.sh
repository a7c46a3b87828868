#!/usr/bin/env bash
# test_cli.sh: the distlock command-line tool (tools/distlock) against a
# private redis-server.
#
# The script re-runs itself under scripts/with-redis.sh, the project's
# launcher that starts redis-server on a free loopback port and checks that
# the process answering there is the one it started; DISTLOCK_URL then
# points at it.  Every lock name starts with a per-run prefix.  Timing
# bounds are generous: they must hold on a loaded 2-core machine.
set -u

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/tap.sh
. "$here/tap.sh"
tool_test_start cli "$@"     # D, rcli and tmp, under a private server
pfx="clitest$$"
bg_pids=()
srv_pids=()     # the cluster and sentinel servers this script started
cleanup() {
    local p i
    for p in "${bg_pids[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    for p in "${srv_pids[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in "${srv_pids[@]}"; do
        for ((i = 0; i < 30; i++)); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    [[ -n "${KEEP_TMP:-}" ]] || rm -rf -- "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

have_python=0
command -v python3 >/dev/null 2>&1 && have_python=1

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# until COMMAND... succeeds, at most about SECONDS
wait_for() {
    local secs=$1 i
    shift
    for ((i = 0; i < secs * 20; i++)); do
        "$@" && return 0
        sleep 0.05
    done
    return 1
}
has() { grep -q -- "$1" "$2"; }
# spawn CMD...: runs CMD in the background, killed at exit; its pid in $spawned
spawn() {
    "$@" &
    spawned=$!
    bg_pids+=("$spawned")
}
# fair_queue NAME N: the fair mutex NAME held by 'distlock lock' (30 s),
# then N more queued behind it, one after the other; the holder's pid in
# $fh, the waiters' in ${fwaiters[@]}
fair_queue() {
    local f=$1 n=$2 i
    spawn "$D" lock --fair "$f" -- sleep 30
    fh=$spawned
    wait_for 5 eval 'rcli exists "$f" | grep -q 1'
    fwaiters=()
    for ((i = 1; i <= n; i++)); do
        spawn "$D" lock --fair "$f" -- true
        fwaiters+=("$spawned")
        # (the count goes in as text: wait_for has an i of its own)
        wait_for 5 eval '[[ $(rcli llen "redisson_lock_queue:{$f}") == '"$i"' ]]'
    done
}
# run CMD...: sets $rc, $out (stdout) and $err (stderr) files
out="$tmp/out" err="$tmp/err"
run() {
    "$@" >"$out" 2>"$err"
    rc=$?
}
# json_ok FILE [PYTHON EXPRESSION over the list of parsed lines, "l"]
json_ok() {
    if [[ $have_python -eq 1 ]]; then
        python3 - "$@" <<'EOF'
import json, sys
l = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
ok = len(l) > 0 and (len(sys.argv) < 3 or eval("(" + sys.argv[2] + ")"))
if not ok:
    print("json check failed:", sys.argv[2:], l, file=sys.stderr)
sys.exit(0 if ok else 1)
EOF
    else
        grep -q '^{.*}$' "$1"
    fi
}
show() { echo "--- rc=$rc stdout:"; cat "$out"; echo "--- stderr:"; cat "$err"; }

uuid1=2c5ea1a8-9d0e-4a51-8b35-2a0f3e4c9b11
uuid2=7a1b0c2d-3e4f-4a51-9b35-0123456789ab

# ---- usage errors --------------------------------------------------------
run "$D"
check "no command: exit 2" test $rc -eq 2
run "$D" status
check "status without NAME: exit 2 and says so" \
    eval '[[ $rc -eq 2 ]] && has "missing the lock NAME" "$err"'
run "$D" frobnicate
check "unknown command: exit 2" eval '[[ $rc -eq 2 ]] && has "no command" "$err"'
run "$D" status --bogus x
check "unknown option: exit 2" eval '[[ $rc -eq 2 ]] && has "unknown option" "$err"'
run "$D" lock "$pfx-u"
check "lock without COMMAND: exit 2" eval '[[ $rc -eq 2 ]] && has "COMMAND" "$err"'
run "$D" lock --timeout soon "$pfx-u" -- true
check "lock --timeout soon: exit 2" eval '[[ $rc -eq 2 ]] && has "timeout" "$err"'
run "$D" unlock "$pfx-u"
check "unlock without --force or --reset: exit 2" eval '[[ $rc -eq 2 ]] && has "force" "$err"'
run "$D" --url http://127.0.0.1:80 status x
check "a bad --url: exit 2 and why" eval '[[ $rc -eq 2 ]] && has "redis://" "$err"'
# issue 27: no reason quotes a passphrase or password, whatever is wrong
for u in 'redis://h:1?tls_key_pass=Pa55phrase' \
    'redis-cluster://u:Sup3rS3cret@h:1/x?tls_key_pass=Pa55phrase' \
    'rediss-cluster://u:Sup3rS3cret@h:1/x?tls_key_pass=Pa55phrase' \
    'redis://h:1?key_pass=Pa55phrase'; do
    run env DISTLOCK_URL="$u" "$D" status x
    check "DISTLOCK_URL=$u: exit 2, no secret in the reason" \
        eval '[[ $rc -eq 2 && -s "$err" ]] && ! grep -q -e Pa55phrase -e Sup3rS3cret "$err" "$out"' || show
    run "$D" --url "$u" status x
    check "--url $u: exit 2, no secret in the reason" \
        eval '[[ $rc -eq 2 && -s "$err" ]] && ! grep -q -e Pa55phrase -e Sup3rS3cret "$err" "$out"' || show
done
for c in status list lock unlock watch top; do
    run "$D" "$c" --help
    check "$c --help" eval '[[ $rc -eq 0 ]] && has "Usage: distlock $c" "$out"'
done
run "$D" --help
check "--help lists the commands" eval '[[ $rc -eq 0 ]] && has "unlock --force" "$out"'

# ---- Redis unreachable ---------------------------------------------------
for c in "status x" "list" "lock x -- true" "unlock --force --yes x" "watch x"; do
    # shellcheck disable=SC2086
    run env DISTLOCK_URL=redis://127.0.0.1:1 "$D" $c
    check "$c, Redis unreachable: exit 3 naming the address" \
        eval '[[ $rc -eq 3 ]] && has "cannot connect to Redis at 127.0.0.1:1" "$err"'
done
run "$D" --url redis://127.0.0.1:1 status x
check "--url overrides DISTLOCK_URL" eval '[[ $rc -eq 3 ]] && has "127.0.0.1:1" "$err"'

# ---- --url-file and --tls-key-pass-file: one line, bounded (issue 27) -----
# Each read its file's first line whole: /dev/zero grew the tool by
# gigabytes.  Now at most 8192 bytes are read; a line of 100000 bytes (which
# the old reading took whole, then refused as no URL) is refused for its
# length, one of exactly 8192 is taken.
long="$tmp/long-line"
head -c 100000 /dev/zero | tr '\0' a >"$long"
for flag in --url-file --tls-key-pass-file; do
    run "$D" "$flag" "$long" status x
    check "$flag, a 100000-byte line: exit 2, too long" \
        eval '[[ $rc -eq 2 ]] && has "$flag $long: its first line is longer than 8192 bytes" "$err"' || show
    # bounded by ulimit as well, so that an unbounded read fails rather than
    # eat the machine (not under a sanitizer: its shadow memory needs more)
    run bash -c '[[ -n "${SAN_CFLAGS:-}" ]] || ulimit -v 1000000; exec timeout 20 "$@"' \
        _ "$D" "$flag" /dev/zero status x
    check "$flag /dev/zero: exit 2, too long" \
        eval '[[ $rc -eq 2 ]] && has "longer than 8192 bytes" "$err"' || show
done
{ printf 'redis://'; head -c 8184 /dev/zero | tr '\0' a; printf '\r\n'; } >"$long"
run "$D" --url-file "$long" status x
check "--url-file, a line of 8192 bytes and CRLF: taken as the URL" \
    eval '[[ $rc -ne 0 ]] && ! has "longer than" "$err" && ! has "NUL" "$err"' || show
printf 'redis://127.0.0.1:1\0junk\n' >"$long"
run "$D" --url-file "$long" status x
check "--url-file, a NUL in the line: exit 2, says so" \
    eval '[[ $rc -eq 2 ]] && has "a NUL byte in its first line" "$err"' || show
: >"$long"
run "$D" --tls-key-pass-file "$long" status x
check "--tls-key-pass-file, empty: exit 2, no passphrase" \
    eval '[[ $rc -eq 2 ]] && has "no passphrase on its first line" "$err"' || show

# ---- status: mutex -------------------------------------------------------
m="$pfx-m"
run "$D" status "$m"
check "status of a lock that does not exist: free" \
    eval '[[ $rc -eq 0 ]] && has "state:    free" "$out"'

# Redisson's layout, written directly as a Java client would: held twice
rcli hset "$m" "$uuid1:57" 2 >/dev/null
rcli pexpire "$m" 20000 >/dev/null
rcli set "redisson_lock_token:{$m}" 41 >/dev/null
run "$D" status "$m"
check "status of a Redisson-layout mutex held twice" \
    eval '[[ $rc -eq 0 ]] && has "kind:     mutex" "$out" && has "state:    held" "$out" &&
          has "client $uuid1, thread 57, 2 holds" "$out" && has "lease:    1[0-9].[0-9] s left" "$out" &&
          has "token:    41" "$out"' || show
run "$D" --json status "$m"
check "status --json of that mutex" json_ok "$out" \
    "l[0]['kind'] == 'mutex' and l[0]['state'] == 'held' and l[0]['holders'][0]['holds'] == 2
     and l[0]['holders'][0]['thread'] == 57 and l[0]['holders'][0]['client'] == '$uuid1'
     and 10000 < l[0]['lease_ms'] <= 20000 and l[0]['token'] == 41"

# held by `distlock lock`
spawn "$D" lock "$m-live" -- sleep 30
live=$spawned
wait_for 5 eval 'rcli exists "$m-live" | grep -q 1'
run "$D" --json status "$m-live"
check "status of a lock held by 'distlock lock'" json_ok "$out" \
    "l[0]['kind'] == 'mutex' and len(l[0]['holders']) == 1 and l[0]['holders'][0]['holds'] == 1
     and l[0]['lease_ms'] > 20000 and l[0]['token'] >= 1"

# ---- status: "q" and "{q}" share every derived key -----------------------
# Redisson's brace rule gives both the same queue, channels and token
# (issue 15 item 9): status warns when the other one is held.
tw="$pfx-tw"
rcli hset "{$tw}" "$uuid1:5" 1 >/dev/null
run "$D" status "$tw"
check "status q while {q} is held: warns, naming both" \
    eval '[[ $rc -eq 0 ]] && has "warning: the lock .{$tw}. is held too, and shares every derived key of .$tw." "$err" &&
          has "state:    free" "$out"' || show
run "$D" status "{$tw}"
check "status {q} while q is free: no warning" \
    eval '[[ $rc -eq 0 ]] && ! has "warning" "$err" && has "state:    held" "$out"' || show
rcli hset "$tw" "$uuid2:6" 1 >/dev/null
run "$D" status "{$tw}"
check "status {q} while q is held: warns" \
    eval '[[ $rc -eq 0 ]] && has "warning: the lock .$tw. is held too" "$err"' || show
run "$D" status "a{$tw}b"
check "a name with a tag of its own has no twin: no warning" \
    eval '[[ $rc -eq 0 ]] && ! has "warning" "$err"' || show
rcli del "$tw" "{$tw}" >/dev/null

# ---- status: fair mutex with a queue of two -------------------------------
f="$pfx-f"
fair_queue "$f" 2
run "$D" status "$f"
check "status of a fair mutex with a queue of 2" \
    eval '[[ $rc -eq 0 ]] && has "kind:     fair mutex" "$out" && has "queue:    1\. client" "$out" &&
          has "^          2\. client .*window [0-9]" "$out"' || show
run "$D" --json status "$f"
queue=$(rcli lrange "redisson_lock_queue:{$f}" 0 -1 | tr '\n' ' ')
check "status --json: the queue in order, with windows" json_ok "$out" \
    "l[0]['kind'] == 'fair mutex' and l[0]['state'] == 'held'
     and [w['owner'] for w in l[0]['queue']] == '$queue'.split()
     and all(0 < w['window_ms'] <= 5000 for w in l[0]['queue'])"
kill -TERM "$fh"
wait "$fh"
wait "${fwaiters[0]}"
r1=$?
wait "${fwaiters[1]}"
r2=$?
check "the fair waiters ran after the holder, both exit 0" test "$r1$r2" = 00
run "$D" status "$f"
check "the fair mutex is free afterwards" has "state:    free" "$out"

# ---- status: rwlock, in Redisson's layout ----------------------------------
rw="$pfx-rw"
rcli hset "$rw" mode read "$uuid1:1" 2 "$uuid2:9" 1 >/dev/null
rcli pexpire "$rw" 25000 >/dev/null
rcli set "{$rw}:$uuid1:1:rwlock_timeout:1" 1 px 15000 >/dev/null
rcli set "{$rw}:$uuid1:1:rwlock_timeout:2" 1 px 22000 >/dev/null
rcli set "{$rw}:$uuid2:9:rwlock_timeout:1" 1 px 25000 >/dev/null
run "$D" status "$rw"
check "status of an rwlock read-held by two owners" \
    eval '[[ $rc -eq 0 ]] && has "kind:     rwlock" "$out" && has "state:    read-held" "$out" &&
          has "reader:   client $uuid1, thread 1, 2 read holds (read lease 2[01]\." "$out" &&
          has "reader:   client $uuid2, thread 9, 1 read hold" "$out"' || show
run "$D" --json status "$rw"
check "status --json of the read-held rwlock" json_ok "$out" \
    "l[0]['state'] == 'read-held' and sorted(h['reads'] for h in l[0]['holders']) == [1, 2]"
rw2="$pfx-rw2"
rcli hset "$rw2" mode write "$uuid2:3:write" 1 "$uuid2:3" 1 >/dev/null
rcli pexpire "$rw2" 25000 >/dev/null
rcli zadd "distlock_rwlock_writers:{$rw2}" $(( $(rcli time | head -1) * 1000 + 4000 )) "$uuid1:4" >/dev/null
run "$D" status "$rw2"
check "status of an rwlock write-held, a writer waiting" \
    eval '[[ $rc -eq 0 ]] && has "state:    write-held" "$out" &&
          has "writer:   client $uuid2, thread 3, 1 write hold, 1 read hold" "$out" &&
          has "waiting writer: client $uuid1, thread 4, window" "$out"' || show
run "$D" --json status "$rw2"
check "status --json of the write-held rwlock" json_ok "$out" \
    "l[0]['state'] == 'write-held' and l[0]['holders'][0]['writes'] == 1
     and l[0]['waiting_writers'][0]['thread'] == 4"

# ---- status of something that is not a lock ----------------------------------
rcli set "$pfx-str" hello >/dev/null
run "$D" status "$pfx-str"
check "status of a string: unknown" eval '[[ $rc -eq 0 ]] && has "unknown (not a lock: a Redis string)" "$out"'
# node-redisson's default owner is "<uuid>:<uuid>": a holder all the same
nr="x$pfx-node"
rcli hset "$nr" "$uuid1:$uuid2" 1 >/dev/null
rcli pexpire "$nr" 20000 >/dev/null
run "$D" status "$nr"
check "status of a mutex held by '<uuid>:<uuid>' (node-redisson)" \
    eval '[[ $rc -eq 0 ]] && has "kind:     mutex" "$out" && has "state:    held" "$out" &&
          has "client $uuid1, thread $uuid2, 1 hold" "$out"' || show
run "$D" --json status "$nr"
check "status --json of it: the thread is a string" json_ok "$out" \
    "l[0]['holders'][0]['thread'] == '$uuid2' and l[0]['holders'][0]['client'] == '$uuid1'"
run "$D" list "x$pfx-*"
check "list finds it" eval '[[ $rc -eq 0 ]] && has "^$nr .* mutex .* held" "$out"' || show
rcli hset "x$pfx-kv" "user:alice" admin >/dev/null
run "$D" status "x$pfx-kv"
check "a hash of '<id>:<id>' fields without integer counts is no lock" \
    eval '[[ $rc -eq 0 ]] && has "unknown (not a lock: a Redis hash)" "$out"' || show
rcli del "$nr" "x$pfx-kv" >/dev/null

# ---- list ----------------------------------------------------------------------
rcli hset "$pfx-a-1" "$uuid1:1" 1 >/dev/null
rcli hset "$pfx-a-2" "$uuid2:2" 1 >/dev/null
rcli pexpire "$pfx-a-2" 60000 >/dev/null
rcli hset "$pfx-a-hash" name alice age 30 >/dev/null
rcli set "$pfx-a-str" x >/dev/null
run "$D" list "$pfx-a-*"
check "list PATTERN: the locks matching, nothing else" \
    eval '[[ $rc -eq 0 ]] && has "^$pfx-a-1 .* mutex .* held .* no expiry" "$out" &&
          has "^$pfx-a-2 .* mutex .* held .* [0-9.]* s " "$out" &&
          ! has "hash" "$out" && ! has "str" "$out" && ! has "$pfx-rw" "$out" &&
          [[ $(wc -l <"$out") -eq 3 ]]' || show
run "$D" list "$pfx-*"
check "list: every kind, no derived keys" \
    eval 'has "^$pfx-rw .*rwlock .*read-held" "$out" && has "^$pfx-m-live .*mutex" "$out" &&
          ! has "redisson_lock_token" "$out" && ! has "rwlock_timeout" "$out"' || show
run "$D" --json list "$pfx-*"
check "list --json: one object per lock" json_ok "$out" \
    "sorted(x['name'] for x in l) == sorted(['$m', '$m-live', '$rw', '$rw2', '$pfx-a-1', '$pfx-a-2'])
     and all('kind' in x and 'state' in x and 'lease_ms' in x for x in l)"
run "$D" list "$pfx-none-*"
check "list with no match" eval '[[ $rc -eq 0 ]] && has "no locks" "$out"'

# ---- lock -- COMMAND ------------------------------------------------------------
x="$pfx-x"
log="$tmp/intervals"
: >"$log"
for i in 1 2 3; do
    spawn "$D" lock "$x" -- sh -c "for k in 1 2; do :; done; echo start $i >>'$log'; sleep 0.2; echo end $i >>'$log'"
done
for i in 1 2 3; do
    spawn "$D" lock "$x" -- sh -c "echo start b$i >>'$log'; sleep 0.1; echo end b$i >>'$log'"
done
wait_for 15 eval '[[ $(wc -l <"$log") -ge 12 ]]'
check "lock excludes across processes: intervals never overlap" \
    awk '$1 == "start" { if (open) bad = 1; open = $2 } $1 == "end" { if (open != $2) bad = 1; open = "" }
         END { exit bad || NR != 12 }' "$log" || cat "$log"

run "$D" lock "$pfx-code" -- sh -c 'exit 7'
check "lock returns the command's exit code (7)" test $rc -eq 7
run "$D" lock "$pfx-code" -- sh -c 'kill -TERM $$'
check "a command killed by SIGTERM: 143" test $rc -eq 143
run "$D" lock "$pfx-code" -- /nonexistent/program
check "a command that cannot run: 127" eval '[[ $rc -eq 127 ]] && has "cannot run" "$err"'
run "$D" lock "$pfx-code" -- sh -c 'echo "token=$DISTLOCK_TOKEN"'
check "the command gets the fencing token" has "^token=[0-9][0-9]*$" "$out"
ls /proc/self/fd >"$tmp/fds" 2>/dev/null
run "$D" lock "$pfx-code" -- ls /proc/self/fd
check "the command inherits our descriptors, no Redis connection" \
    cmp -s "$tmp/fds" "$out" || { show; cat "$tmp/fds"; }
run "$D" lock "$pfx-code" flock-style true
check "lock without '--' (flock(1) style)" eval '[[ $rc -eq 127 ]]'
run "$D" lock "$pfx-code" true
check "lock NAME COMMAND without '--'" test $rc -eq 0
run "$D" status "$pfx-code"
check "the lock is free after the command" has "state:    free" "$out"

t0=$(now_ms)
run "$D" lock --timeout 1 "$m-live" -- true
t1=$(now_ms)
check "--timeout 1 on a held lock: exit 1 in 0.9-2.5 s, naming the holder" \
    eval '[[ $rc -eq 1 && $((t1 - t0)) -ge 900 && $((t1 - t0)) -le 2500 ]] && has "held by client" "$err"' ||
    { show; echo "took $((t1 - t0)) ms"; }
run "$D" lock --timeout 0 "$m-live" -- true
check "--timeout 0 tries once" test $rc -eq 1
run "$D" lock -v "$pfx-v" -- true
check "-v says when it took and released" \
    eval 'has "acquired mutex .$pfx-v. (token [0-9]\{16\})" "$err" && has "released mutex" "$err"' || show

# ---- signals ------------------------------------------------------------------
s="$pfx-sig"
spawn "$D" lock "$s" -- sh -c 'trap "echo child got TERM >'"$tmp/sig"'; exit 5" TERM; sleep 10 & wait'
sp=$spawned
wait_for 5 eval 'rcli exists "$s" | grep -q 1'
sleep 0.2
kill -TERM "$sp"
wait "$sp"
rc=$?
check "SIGTERM is passed to the command; its status is returned" \
    eval '[[ $rc -eq 5 ]] && has "child got TERM" "$tmp/sig"'
run "$D" status "$s"
check "... and the lock is released" has "state:    free" "$out"

fair_queue "$f" 1
t0=$(now_ms)
kill -TERM "${fwaiters[0]}"
wait "${fwaiters[0]}"
rc=$?
t1=$(now_ms)
check "SIGTERM while waiting: exit 143 at once, out of the queue" \
    eval '[[ $rc -eq 143 && $((t1 - t0)) -lt 1500 && $(rcli llen "redisson_lock_queue:{$f}") == 0 ]]' ||
    echo "rc=$rc took $((t1 - t0)) ms"

# SIGINT: typed on the terminal it reaches the whole foreground group, the
# command too, so distlock does not pass it on again (two deliveries that
# close together often merge, so this cannot always catch a second one);
# sent to distlock alone, it is passed on.  (python3: a pty, and a child
# whose SIGINT is not ignored, as a non-interactive shell's '&' makes it.)
if [[ $have_python -eq 1 ]]; then
    cat >"$tmp/count_int.py" <<'EOF'
import os, signal, sys, time
r, w = os.pipe()
os.set_blocking(r, False)
os.set_blocking(w, False)
signal.signal(signal.SIGINT, lambda sig, frame: None)
signal.set_wakeup_fd(w)             # a byte per delivery, however close
open(sys.argv[1] + ".ready", "w").close()
end = time.time() + 1.0
while time.time() < end:
    time.sleep(0.02)
try:
    n = len(os.read(r, 100))
except BlockingIOError:
    n = 0
open(sys.argv[1], "w").write("ints=%d" % n)
sys.exit(9)
EOF
    cat >"$tmp/sigint.py" <<'EOF'
import os, pty, signal, subprocess, sys, time
d, name, out, counter, how = sys.argv[1:6]
cmd = [d, "lock", name, "--", sys.executable, counter, out]
def ready():
    for _ in range(200):
        if os.path.exists(out + ".ready"):
            return
        time.sleep(0.02)
if how == "tty":
    pid, fd = pty.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execv(d, cmd)
    ready()
    os.write(fd, b"\x03")          # Ctrl-C on the terminal
    try:
        while os.read(fd, 1024):
            pass
    except OSError:
        pass
    rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
else:
    p = subprocess.Popen(cmd, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ready()
    p.send_signal(signal.SIGINT)    # to distlock alone
    rc = p.wait()
print("rc=%d %s" % (rc, open(out).read()))
EOF
    for how in tty kill; do
        run python3 "$tmp/sigint.py" "$D" "$pfx-int-$how" "$tmp/ints-$how" "$tmp/count_int.py" "$how"
        check "SIGINT ($how): the command gets it once, its status is returned" \
            has "^rc=9 ints=1$" "$out" || show
    done
fi

# ---- lock --read / --write ------------------------------------------------------
r="$pfx-rl"
spawn "$D" lock --read "$r" -- sleep 30
rr1=$spawned
spawn "$D" lock --read "$r" -- sleep 30
rr2=$spawned
wait_for 5 eval '[[ $(rcli hlen "$r") == 3 ]]'
run "$D" --json status "$r"
check "lock --read twice: read-held by two owners" json_ok "$out" \
    "l[0]['kind'] == 'rwlock' and l[0]['state'] == 'read-held'
     and [h['reads'] for h in l[0]['holders']] == [1, 1]
     and all(h['read_lease_ms'] > 20000 for h in l[0]['holders'])"
run "$D" lock --read --timeout 0 "$r" -- sh -c 'echo "token=${DISTLOCK_TOKEN-none}"'
check "a third reader gets in at once; a read hold has no token" \
    eval '[[ $rc -eq 0 ]] && has "^token=none$" "$out"'
spawn "$D" lock --write --prefer-writer "$r" -- true
ww=$spawned
wait_for 5 eval '[[ $(rcli zcard "distlock_rwlock_writers:{$r}") == 1 ]]'
run "$D" status "$r"
check "status shows the waiting writer" has "^waiting writer: client" "$out" || show
run "$D" lock --read --timeout 0.5 "$r" -- true
check "a waiting preferring writer keeps new readers out (exit 1)" test $rc -eq 1
kill -TERM "$rr1" "$rr2"
wait "$rr1" "$rr2" 2>/dev/null
wait "$ww"
rc=$?
check "the writer ran once the readers left" test $rc -eq 0
spawn "$D" lock --write "$r" -- sleep 30
wh=$spawned
wait_for 5 eval 'rcli exists "$r" | grep -q 1'
run "$D" status "$r"
check "lock --write: write-held" \
    eval 'has "state:    write-held" "$out" && has "^writer:   client .*1 write hold" "$out"' || show
run "$D" lock --read --timeout 0.3 "$r" -- true
check "a reader cannot enter while a writer holds it" test $rc -eq 1
spawn "$D" lock --write --prefer-writer "$r" -- true
ww=$spawned
wait_for 5 eval '[[ $(rcli zcard "distlock_rwlock_writers:{$r}") == 1 ]]'
kill -TERM "$ww"
wait "$ww"
rc=$?
check "SIGTERM to a waiting writer: 143, no longer a waiting writer" \
    eval '[[ $rc -eq 143 && $(rcli zcard "distlock_rwlock_writers:{$r}") == 0 ]]'
kill -TERM "$wh"
wait "$wh" 2>/dev/null
run "$D" lock --read --write "$r" -- true
check "--read with --write: exit 2" test $rc -eq 2
run "$D" lock --fair --read "$r" -- true
check "--fair with --read: exit 2" test $rc -eq 2

# ---- unlock --force ---------------------------------------------------------
run "$D" unlock --force "$m" </dev/null
check "unlock --force without a terminal and without --yes: exit 2" \
    eval '[[ $rc -eq 2 ]] && has "without --yes" "$err" && [[ $(rcli exists "$m") == 1 ]]'
run "$D" unlock --force --yes "$m"
check "unlock --force --yes removes a Redisson-layout lock" \
    eval '[[ $rc -eq 0 ]] && has "forced free" "$out" && [[ $(rcli exists "$m") == 0 ]]' || show
run "$D" unlock --force --yes "$m"
check "unlock --force of a free lock: nothing to do" \
    eval '[[ $rc -eq 0 ]] && has "not locked" "$out"'
run "$D" unlock --force --yes "$pfx-str"
check "unlock --force of a string: refused, kept" \
    eval '[[ $rc -eq 2 ]] && [[ $(rcli get "$pfx-str") == hello ]]'

# a waiter blocked behind a holder wakes at once
spawn "$D" lock "$m-live" -- true
waiter=$spawned
sleep 0.5
t0=$(now_ms)
run "$D" --json unlock --force --yes "$m-live"
wait "$waiter"
wrc=$?
t1=$(now_ms)
check "force unlock wakes a blocked waiter within 1 s" \
    eval '[[ $wrc -eq 0 && $((t1 - t0)) -lt 1000 ]]' || echo "waiter rc=$wrc, $((t1 - t0)) ms"
check "unlock --json" json_ok "$out" "l[0]['forced'] is True and l[0]['kind'] == 'mutex'"
kill -TERM "$live"
wait "$live" 2>/dev/null

# the head of a fair queue wakes too
spawn "$D" lock --fair "$f" -- true
fw=$spawned
wait_for 5 eval '[[ $(rcli llen "redisson_lock_queue:{$f}") == 1 ]]'
sleep 0.3
t0=$(now_ms)
run "$D" unlock --force --yes "$f"
wait "$fw"
wrc=$?
t1=$(now_ms)
check "force unlock of a fair mutex wakes the head of its queue" \
    eval '[[ $wrc -eq 0 && $((t1 - t0)) -lt 1000 ]] && has "head of its queue" "$out"' ||
    { show; echo "waiter rc=$wrc, $((t1 - t0)) ms"; }
kill -TERM "$fh"
wait "$fh" 2>/dev/null

rcli zadd "distlock_rwlock_readers:{$rw}" 1 "$uuid1:1" >/dev/null
run "$D" unlock --force --yes "$rw"
check "unlock --force of an rwlock deletes its read-hold keys and readers" \
    eval '[[ $rc -eq 0 && $(rcli exists "$rw" "{$rw}:$uuid1:1:rwlock_timeout:1" "{$rw}:$uuid1:1:rwlock_timeout:2" "{$rw}:$uuid2:9:rwlock_timeout:1" "distlock_rwlock_readers:{$rw}") == 0 ]]'

# ---- robust mutexes: status and unlock --reset (issue 29) --------------------
rb="$pfx-robust"
rcli hset "distlock_robust:{$rb}" held "$uuid1:3" keep 0 >/dev/null
run "$D" status "$rb"
check "status of a free lock whose robust holder died: owner-dead, and who" \
    eval '[[ $rc -eq 0 ]] && has "owner-dead" "$out" && has "$uuid1" "$out"' || show
rcli del "distlock_robust:{$rb}" >/dev/null
rcli hset "distlock_robust:{$rb}" dead "$uuid1:3" nr "$uuid2:4" keep 0 >/dev/null
run "$D" status "$rb"
check "status of a not recoverable lock: says so, who died, who left it so" \
    eval '[[ $rc -eq 0 ]] && has "NOT RECOVERABLE" "$out" && has "$uuid1" "$out" && has "$uuid2" "$out"' || show
run "$D" --json status "$rb"
check "status --json: robust state not_recoverable" \
    json_ok "$out" "l[0]['robust']['state'] == 'not_recoverable' and l[0]['robust']['died_holding'] == '$uuid1:3'"
run "$D" unlock --reset "$rb"
check "unlock --reset deletes the record" \
    eval '[[ $rc -eq 0 ]] && has "reset" "$out" && [[ $(rcli exists "distlock_robust:{$rb}") == 0 ]]' || show
run "$D" unlock --reset "$rb"
check "unlock --reset without a record: nothing to do" \
    eval '[[ $rc -eq 0 ]] && has "nothing to do" "$out"' || show
run "$D" --json status "$rb"
check "status --json without a record: robust null" json_ok "$out" "l[0]['robust'] is None"

# ---- watch --------------------------------------------------------------------
w="$pfx-w"
spawn "$D" watch "$w" >"$tmp/watch" 2>&1
wp=$spawned
spawn "$D" --json watch "$w" >"$tmp/watchj" 2>&1
wj=$spawned
wait_for 5 eval '[[ -s "$tmp/watch" && -s "$tmp/watchj" ]]'
"$D" lock "$w" -- sleep 0.5
spawn "$D" lock --fair "$w" -- sleep 1
wait_for 5 eval 'rcli exists "$w" | grep -q 1'
spawn "$D" lock --fair "$w" -- true
wait_for 5 eval 'grep -q queued "$tmp/watch"'
wait_for 5 eval '[[ $(rcli exists "$w") == 0 ]]'
sleep 0.3
rcli hset "$w" "$uuid1:1" 1 >/dev/null
rcli pexpire "$w" 400 >/dev/null
wait_for 5 eval 'grep -q expired "$tmp/watch"'
sleep 0.2
kill -TERM "$wp" "$wj"
wait "$wp"
rc=$?
wait "$wj"
check "watch exits 0 when interrupted" test $rc -eq 0
check "watch: acquired, released, queued, expired" \
    eval 'has "  $w  free" "$tmp/watch" && has "acquired by" "$tmp/watch" &&
          has "released by" "$tmp/watch" && has "queued .* (position 1)" "$tmp/watch" &&
          has "expired, was held by $uuid1:1" "$tmp/watch" &&
          [[ $(grep -c "expired" "$tmp/watch") -eq 1 ]]' || cat "$tmp/watch"
check "watch --json" json_ok "$tmp/watchj" \
    "l[0]['event'] == 'state' and {'acquired', 'released', 'queued', 'expired'} <= {x['event'] for x in l}"


# ---- conditions, semaphores and barriers ----------------------------------
# Real participants (tests/cli_objs) with a short liveness window, so that a
# killed one's deadline passes quickly; nothing here signals or posts, so
# what the tool shows stays put while it is checked.
O="$(cd "${top_builddir:-.}" && pwd)/tests/cli_objs"
ocn="$pfx-cond" osn="$pfx-sem" obn="$pfx-bar" orn="$pfx-rsem"
export DISTLOCK_WAITER_MS=300
spawn "$O" cond "$ocn" "$pfx-cm" >"$tmp/c1"
c1=$spawned
wait_for 10 eval '[[ $(rcli zcard "distlock_cond_waiters:{$ocn}") == 1 ]]'
spawn "$O" cond "$ocn" "$pfx-cm" >"$tmp/c2"
wait_for 10 eval '[[ $(rcli zcard "distlock_cond_waiters:{$ocn}") == 2 ]]'
kill -KILL "$c1"
# the dead waiter's deadline passes within its window; it stays listed
# (dropped by the next signal)
cond_dead() { "$D" --json status "$ocn" | grep -q '"live":false'; }
wait_for 10 cond_dead
run "$D" --json status "$ocn"
check "status of a condition (--json): one live waiter, one dead" json_ok "$out" \
    "l[0]['kind'] == 'cond' and sorted(w['live'] for w in l[0]['waiters']) == [False, True] and l[0]['live'] == 1 and l[0]['queued'] == 2" || show
run "$D" status "$ocn"
check "status of a condition: waiters live and not live" \
    eval '[[ $rc -eq 0 ]] && has "condition variable" "$out" &&
          has "waiters:  2 (1 live)" "$out" && has ", not live" "$out" &&
          has ", live, window" "$out"' || show
unset DISTLOCK_WAITER_MS

spawn "$O" sem "$osn" 5 2 >"$tmp/s1"
wait_for 10 eval 'grep -q held "$tmp/s1"'
run "$D" --json status "$osn"
check "status of a semaphore (--json): free, held, holder with its lease" \
    json_ok "$out" "l[0]['kind'] == 'sem' and l[0]['free'] == 3 and l[0]['held'] == 2 and l[0]['total'] == 5 and l[0]['holders'][0]['permits'] == 2 and l[0]['holders'][0]['lease_ms'] > 0" || show
run "$D" status "$osn"
check "status of a semaphore" \
    eval '[[ $rc -eq 0 ]] && has "3 free, 2 held (total 5)" "$out" &&
          has "2 permits, lease .* left" "$out"' || show
run "$D" sem-set "$osn" 1
check "sem-set: free := 1, the holder's permits stay held" \
    eval '[[ $rc -eq 0 ]] && has "1 free permit" "$out" &&
          [[ $(rcli hget "distlock_sem:{$osn}" free) == 1 ]] &&
          [[ $(rcli hget "distlock_sem_holds:{$osn}" $(rcli hkeys "distlock_sem_holds:{$osn}")) == 2 ]]' || show
for bad in -1 abc 2147483648 ""; do
    run "$D" sem-set "$osn" "$bad"
    check "sem-set refuses N '$bad' (exit 2), changes nothing" \
        eval '[[ $rc -eq 2 ]] && [[ $(rcli hget "distlock_sem:{$osn}" free) == 1 ]]' || show
done
run "$D" --json sem-set --redisson "$orn" 4
check "sem-set --redisson: RSemaphore's count" json_ok "$out" \
    "l[0]['kind'] == 'rsem' and l[0]['free'] == 4" || show
check "sem-set --redisson: the count at NAME" test "$(rcli get "$orn")" = 4
run "$D" status "$orn"
check "status of a Redisson semaphore" \
    eval '[[ $rc -eq 0 ]] && has "semaphore (Redisson)" "$out" && has "permits:  4" "$out"' || show
run "$D" --json status "$orn"
check "status of a Redisson semaphore (--json)" json_ok "$out" \
    "l[0]['kind'] == 'rsem' and l[0]['permits'] == 4" || show

export DISTLOCK_WAITER_MS=300
spawn "$O" barrier "$obn" 3 >"$tmp/b1"
wait_for 10 eval '[[ $(rcli hget "distlock_barrier:{$obn}" arrived) == 1 ]]'
spawn "$O" barrier "$obn" 3 >"$tmp/b2"
b2=$spawned
wait_for 10 eval '[[ $(rcli hget "distlock_barrier:{$obn}" arrived) == 2 ]]'
run "$D" --json status "$obn"
check "status of a barrier mid-round (--json)" json_ok "$out" \
    "l[0]['kind'] == 'barrier' and l[0]['arrived'] == 2 and l[0]['count'] == 3 and l[0]['round'] == 0 and not l[0]['broken'] and len(l[0]['members']) == 2" || show
kill -KILL "$b2"
wait_for 10 eval 'grep -q EOWNERDEAD "$tmp/b1"'
check "barrier: the member left gets EOWNERDEAD" has EOWNERDEAD "$tmp/b1"
unset DISTLOCK_WAITER_MS
run "$D" --json status "$obn"
check "status of a broken barrier (--json)" json_ok "$out" \
    "l[0]['broken'] and l[0]['broken_round'] == 0 and l[0]['round'] == 1 and l[0]['arrived'] == 0 and [m['live'] for m in l[0]['members']] == [True]" || show
run "$D" status "$obn"
check "status of a broken barrier" \
    eval '[[ $rc -eq 0 ]] && has "arrived:  0/3" "$out" && has "round:    1" "$out" &&
          has "broken:   round 0" "$out" && has "member: .*, live" "$out"' || show

run "$D" list "$pfx-*"
check "list shows the condition, semaphore and barrier with their kinds" \
    eval '[[ $rc -eq 0 ]] && has "^$ocn  *cond  *1 live" "$out" &&
          has "^$osn  *sem  *1 free" "$out" && has "^$obn  *barrier  *broken" "$out" &&
          ! has "$orn" "$out" && ! has "distlock_" "$out"' || show
run "$D" --json list "$pfx-*"
check "list --json: their kinds" json_ok "$out" \
    "sorted(x['kind'] for x in l if x['kind'] in ('barrier', 'cond', 'sem', 'rsem')) == ['barrier', 'cond', 'sem'] and [x['broken'] for x in l if x['kind'] == 'barrier'] == [True]" || show
rcli hset "distlock_barrier:{$osn}" count 2 >/dev/null
run "$D" status "$osn"
check "status: two kinds under one name: exit 2, asks for --kind" \
    eval '[[ $rc -eq 2 ]] && has "choose one with --kind" "$err"' || show
run "$D" status --kind sem "$osn"
check "status --kind sem picks the semaphore" \
    eval '[[ $rc -eq 0 ]] && has "semaphore (leased)" "$out"' || show
run "$D" status --kind bogus "$osn"
check "status --kind bogus: exit 2" test $rc -eq 2
rcli del "distlock_barrier:{$osn}" >/dev/null

# ---- top ---------------------------------------------------------------------
# A held mutex, a fair mutex with one waiter, a free lock whose fencing
# counter exists (taken 3 times, the last of them about 2 s ago), a free
# lock whose counter only Redisson's RFencedLock moved (a count: it says no
# time), and the semaphore above.
th="$pfx-top-h" tf="$pfx-top-f" tb="$pfx-top-b" tr="$pfx-top-r"
for i in 1 2 3; do "$D" lock "$tb" -- true; done
tb_token=$(rcli GET "redisson_lock_token:{$tb}")
rcli SET "redisson_lock_token:{$tr}" 5 >/dev/null
sleep 2
spawn "$D" lock "$th" -- sleep 30
thp=$spawned
fair_queue "$tf" 1
wait_for 5 eval 'rcli exists "$th" | grep -q 1'
run "$D" --json top --once --interval 100 "$pfx-top-*"
check "top --once --json: holders, waiters, the free locks by their counters" json_ok "$out" \
    "len(l) == 1 and [x['name'] for x in l[0]['locks']] == ['$tb', '$tf', '$th', '$tr']
     and l[0]['locks'][0]['state'] == 'free' and l[0]['locks'][0]['kind'] is None
     and l[0]['locks'][0]['token'] == $tb_token
     and 1500 <= l[0]['locks'][0]['last_taken_ms'] <= 60000
     and l[0]['locks'][1]['kind'] == 'fair mutex' and l[0]['locks'][1]['holders'] == 1
     and l[0]['locks'][1]['waiting'] == 1 and l[0]['locks'][2]['state'] == 'held'
     and l[0]['locks'][2]['holders'] == 1 and l[0]['locks'][2]['waiting'] is None
     and 0 <= l[0]['locks'][2]['last_taken_ms'] <= l[0]['locks'][0]['last_taken_ms']
     and 0 < l[0]['locks'][2]['lease_ms'] <= 30000
     and l[0]['locks'][3]['token'] == 5 and l[0]['locks'][3]['last_taken_ms'] is None
     and l[0]['objects'] == []" || show
run "$D" top --once --interval 100 "$pfx-top-*"
check "top --once: a table with a heading, one line per lock" \
    eval '[[ $rc -eq 0 ]] && has "^NAME .*HOLDERS .*WAITING .*TAKEN" "$out" &&
          has "^$th  *mutex  *held  *1  *-  *[0-9.]* s " "$out" &&
          has "^$tf  *fair mutex  *held  *1  *1 " "$out" &&
          has "^$tb  *-  *free  *0  *-  *[0-9.]* s " "$out" &&
          has "^$tr  *-  *free  *0  *-  *- " "$out" && [[ $(wc -l <"$out") -eq 6 ]]' || show
run "$D" --json top --once --interval 100 "$osn"
check "top shows a semaphore with its holders" json_ok "$out" \
    "l[0]['locks'] == [] and [(x['kind'], x['holders']) for x in l[0]['objects']] == [('sem', 1)]" || show
# $tb taken again while top looks every 100 ms: a later look sees a newer
# token, taken more recently than the looks before it said
spawn "$D" --json top --interval 100 "$tb" >"$tmp/top"
tp=$spawned
wait_for 10 eval 'grep -q "\"token\":$tb_token" "$tmp/top"'
"$D" lock "$tb" -- true
tb_token2=$(rcli GET "redisson_lock_token:{$tb}")
wait_for 10 eval 'grep -q "\"token\":$tb_token2" "$tmp/top"'
kill -INT "$tp"
wait "$tp"
rc=$?
check "top exits 0 on SIGINT" test $rc -eq 0
check "top --json: a look per interval; a new taking shows a newer token, taken later" json_ok "$tmp/top" \
    "len(l) >= 2 and $tb_token2 > $tb_token
     and l[0]['locks'][0]['token'] == $tb_token and l[0]['locks'][0]['last_taken_ms'] >= 1500
     and l[-1]['locks'][0]['token'] == $tb_token2
     and l[-1]['locks'][0]['last_taken_ms'] < l[0]['locks'][0]['last_taken_ms']" || cat "$tmp/top"
run "$D" top --interval 5 x
check "top --interval below 10: exit 2" test $rc -eq 2
# on a terminal (script(1) gives it one): drawn in place, q quits (without
# the key it would run until timeout kills it, status 124)
if command -v script >/dev/null 2>&1; then
    (sleep 1; printf q) | timeout 20 script -qec "'$D' top --interval 100 '$pfx-top-*'" \
        /dev/null >"$tmp/topq" 2>&1
    rc=$?
    check "top on a terminal: clears and redraws, q quits" \
        eval '[[ $rc -eq 0 ]] && grep -q "$(printf "\033\\[2J")" "$tmp/topq" &&
              [[ $(grep -c "^NAME " "$tmp/topq") -ge 2 ]]' || cat -v "$tmp/topq"
fi
kill -TERM "$fh" "$thp"
wait "$fh" "$thp" "${fwaiters[@]}"


# ---- servers of our own for Redis Cluster and Sentinel ----------------------
# As scripts/with-redis.sh does: a random loopback port that is free, and
# (for a cluster bus) whose port+10000 is free too, a private directory,
# and a check that the process answering there is the one started.
port_in_use() {
    if command -v ss >/dev/null 2>&1; then
        [[ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}
# start_server DIR ARGS...: sets $started_port, or returns 1
start_server() {
    local dir=$1 port pid i try
    shift
    mkdir -p "$dir"
    for ((try = 0; try < 10; try++)); do
        port=$((20000 + (RANDOM * 32768 + RANDOM) % 35000))
        if port_in_use "$port" || port_in_use $((port + 10000)); then
            continue
        fi
        redis-server "$@" --port "$port" --bind 127.0.0.1 --dir "$dir" \
            --save "" --appendonly no --protected-mode no --daemonize no \
            --logfile "$dir/redis.log" </dev/null >/dev/null 2>&1 &
        pid=$!
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            if [[ "$(redis-cli -p "$port" INFO server 2>/dev/null | tr -d '\r' |
                     sed -n 's/^process_id://p')" == "$pid" ]]; then
                srv_pids+=("$pid")
                started_port=$port
                return 0
            fi
            sleep 0.05
        done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    return 1
}

# ---- Redis Cluster -------------------------------------------------------------
# Three masters; each command must reach the master of the lock's slot.
run "$D" list --help
check "list --help says it covers every master of a cluster" has "every master" "$out"
t_cluster=$(now_ms)
cports=()
for i in 1 2 3; do
    start_server "$tmp/cluster$i" --cluster-enabled yes \
        --cluster-config-file nodes.conf --cluster-node-timeout 5000 || break
    cports+=("$started_port")
done
cluster_ok() {
    local p
    for p in "${cports[@]}"; do
        redis-cli -p "$p" CLUSTER INFO | tr -d '\r' | grep -q '^cluster_state:ok$' || return 1
    done
}
cluster_up=0
if [[ ${#cports[@]} -eq 3 ]] &&
    timeout 30 redis-cli --cluster create "${cports[@]/#/127.0.0.1:}" \
        --cluster-yes >"$tmp/cluster-create" 2>&1 &&
    wait_for 10 cluster_ok; then
    cluster_up=1
fi
check "a 3-master cluster of our own is up" test $cluster_up -eq 1 ||
    cat "$tmp/cluster-create"

# the port of the master serving a slot
slot_owner() {
    redis-cli -p "${cports[0]}" CLUSTER NODES | awk -v s="$1" '
        $3 ~ /master/ {
            split($2, a, "[:@]")
            for (i = 9; i <= NF; i++) {
                if ($i ~ /^\[/) continue          # a slot being moved
                n = split($i, r, "-")
                if (s >= r[1] + 0 && s <= (n > 1 ? r[2] : r[1]) + 0) print a[2]
            }
        }'
}
# move_slot SLOT FROM TO: hands a slot and its keys to another master, as
# resharding does
move_slot() {
    local slot=$1 from=$2 to=$3 fid tid keys p
    fid=$(redis-cli -p "$from" CLUSTER MYID)
    tid=$(redis-cli -p "$to" CLUSTER MYID)
    redis-cli -p "$to" CLUSTER SETSLOT "$slot" IMPORTING "$fid" >/dev/null
    redis-cli -p "$from" CLUSTER SETSLOT "$slot" MIGRATING "$tid" >/dev/null
    while keys=$(redis-cli -p "$from" CLUSTER GETKEYSINSLOT "$slot" 100) && [[ -n "$keys" ]]; do
        # shellcheck disable=SC2086
        redis-cli -p "$from" MIGRATE 127.0.0.1 "$to" "" 0 5000 KEYS $keys >/dev/null || return 1
    done
    for p in "$to" "$from" "${cports[@]}"; do
        redis-cli -p "$p" CLUSTER SETSLOT "$slot" NODE "$tid" >/dev/null || return 1
    done
}

if [[ $cluster_up -eq 1 ]]; then
    DC=(env "DISTLOCK_URL=redis-cluster://127.0.0.1:${cports[0]}" "$D")
    ccli() { redis-cli -c -p "${cports[0]}" "$@"; }    # follows MOVED
    # one lock name on each master
    cn=() co=() cs=()
    for ((k = 0; k < 300 && ${#cn[@]} < 3; k++)); do
        slot=$(redis-cli -p "${cports[0]}" CLUSTER KEYSLOT "$pfx-c$k")
        o=$(slot_owner "$slot")
        [[ -n "$o" && " ${co[*]} " != *" $o "* ]] || continue
        cn+=("$pfx-c$k")
        co+=("$o")
        cs+=("$slot")
    done
    check "lock names on 3 different masters: ${cn[*]} (${co[*]})" test ${#cn[@]} -eq 3

    for i in 0 1 2; do
        ccli HSET "${cn[i]}" "$uuid1:$((i + 1))" 2 >/dev/null
        ccli PEXPIRE "${cn[i]}" 60000 >/dev/null
        ccli SET "redisson_lock_token:{${cn[i]}}" $((i + 10)) >/dev/null
    done
    good=0
    for i in 0 1 2; do
        run "${DC[@]}" status "${cn[i]}"
        [[ $rc -eq 0 ]] && has "client $uuid1, thread $((i + 1)), 2 holds" "$out" &&
            has "token:    $((i + 10))" "$out" && good=$((good + 1))
    done
    check "cluster: status reads each lock from the master of its slot" test $good -eq 3 || show

    run "${DC[@]}" --json list "$pfx-c*"
    check "cluster: list --json covers every master" json_ok "$out" \
        "[x['name'] for x in l] == sorted(['${cn[0]}', '${cn[1]}', '${cn[2]}'])
         and all(x['kind'] == 'mutex' and x['holders'] == 1 for x in l)"
    run "${DC[@]}" list "$pfx-c*"
    check "cluster: list, one line per lock" \
        eval '[[ $rc -eq 0 && $(wc -l <"$out") -eq 4 ]] && has "^${cn[2]} .* mutex .* held" "$out"' || show

    good=0
    for i in 0 1 2; do
        run "${DC[@]}" unlock --force --yes "${cn[i]}"
        [[ $rc -eq 0 ]] && has "forced free" "$out" &&
            [[ $(redis-cli -p "${co[i]}" EXISTS "${cn[i]}") == 0 ]] && good=$((good + 1))
    done
    check "cluster: unlock --force on each master" test $good -eq 3 || show

    # a semaphore on each master (named with each lock's tag), set and read
    # through the route
    good=0
    for i in 0 1 2; do
        run "${DC[@]}" sem-set "{${cn[i]}}:s" $((i + 2))
        [[ $rc -eq 0 ]] &&
            [[ $(redis-cli -p "${co[i]}" HGET "distlock_sem:{${cn[i]}}:s" free) == $((i + 2)) ]] &&
            good=$((good + 1))
        run "${DC[@]}" --json status "{${cn[i]}}:s"
        json_ok "$out" "l[0]['kind'] == 'sem' and l[0]['free'] == $((i + 2))" &&
            good=$((good + 1))
    done
    check "cluster: sem-set and status of a semaphore on each master" test $good -eq 6 || show
    run "${DC[@]}" --json list "{$pfx-c*"
    check "cluster: list --json shows the semaphores of every master" json_ok "$out" \
        "sorted(x['free'] for x in l if x['kind'] == 'sem') == [2, 3, 4]" || show

    # (the token counter was set to 11 above: the next token is above it,
    # and at least the server's clock in microseconds)
    t_us=$(($(date +%s%N) / 1000 - 5000000))
    run "${DC[@]}" lock "${cn[1]}" -- sh -c 'echo "token=$DISTLOCK_TOKEN"'
    tok=$(sed -n 's/^token=//p' "$out")
    check "cluster: lock -- CMD runs it with a token above the counter, from the clock" \
        eval '[[ $rc -eq 0 && -n "$tok" ]] && ((tok > 11 && tok >= t_us))' || show
    spawn "${DC[@]}" lock "${cn[2]}" -- sleep 30
    ch=$spawned
    wait_for 5 eval '[[ $(redis-cli -p "${co[2]}" EXISTS "${cn[2]}") == 1 ]]'
    run "${DC[@]}" --json status "${cn[2]}"
    check "cluster: status of a lock held by 'distlock lock'" json_ok "$out" \
        "l[0]['state'] == 'held' and l[0]['holders'][0]['holds'] == 1 and l[0]['lease_ms'] > 20000"
    run "${DC[@]}" lock --timeout 0 "${cn[2]}" -- true
    check "cluster: lock --timeout 0 on a held lock: exit 1, naming the holder" \
        eval '[[ $rc -eq 1 ]] && has "held by client" "$err"' || show
    kill -TERM "$ch"
    wait "$ch" 2>/dev/null

    # watch: SSUBSCRIBE on the master of the slot.  With a 60 s interval
    # it looks again only when a release message comes.
    spawn "${DC[@]}" watch --interval 60000 "${cn[0]}" >"$tmp/cwatch" 2>&1
    cw=$spawned
    wait_for 5 eval '[[ -s "$tmp/cwatch" ]]'
    wait_for 5 eval '[[ $(redis-cli -p "${co[0]}" PUBSUB SHARDNUMSUB "redisson_lock__channel:{${cn[0]}}" | tail -1) == 1 ]]'
    check "cluster: watch subscribes (sharded) on the master of the lock's slot" \
        eval '[[ $(redis-cli -p "${co[0]}" PUBSUB SHARDNUMSUB "redisson_lock__channel:{${cn[0]}}" "redisson_rwlock:{${cn[0]}}" | tr "\n" " ") == *" 1 "*" 1 " ]]'
    "${DC[@]}" lock "${cn[0]}" -- true
    wait_for 5 eval '[[ $(grep -c "acquired and released" "$tmp/cwatch") -ge 1 ]]'
    check "cluster: watch hears the release (SPUBLISH) and looks" \
        has "acquired and released" "$tmp/cwatch" || cat "$tmp/cwatch"
    # by default (pubsub=both) it listens plainly too, on the same master,
    # as a Redisson line before 3.22 releases with PUBLISH: a plain message
    # sent on another master (the cluster passes it on) makes it look
    check "cluster: watch subscribes plainly too (pubsub=both)" \
        eval '[[ $(redis-cli -p "${co[0]}" PUBSUB NUMSUB "redisson_lock__channel:{${cn[0]}}" | tail -1) == 1 ]]'
    ccli HSET "${cn[0]}" "$uuid2:7" 1 >/dev/null
    redis-cli -p "${co[2]}" PUBLISH "redisson_lock__channel:{${cn[0]}}" 0 >/dev/null
    wait_for 5 has "acquired by $uuid2:7" "$tmp/cwatch"
    check "cluster: watch hears a plain PUBLISH and looks" \
        has "acquired by $uuid2:7" "$tmp/cwatch" || cat "$tmp/cwatch"
    ccli DEL "${cn[0]}" >/dev/null
    redis-cli -p "${co[2]}" PUBLISH "redisson_lock__channel:{${cn[0]}}" 0 >/dev/null
    wait_for 5 has "released by $uuid2:7" "$tmp/cwatch"
    check "cluster: watch hears the plain release and looks" \
        has "released by $uuid2:7" "$tmp/cwatch" || cat "$tmp/cwatch"

    # the fence function library goes to every master; FCALL then works on
    # whichever master holds the fence's slot
    run "${DC[@]}" fence load
    check "cluster: fence load loads the library on each of the 3 masters" \
        eval '[[ $rc -eq 0 && $(grep -c "loaded function library" "$out") -eq 3 ]]' || show
    good=0
    for i in 0 1 2; do
        [[ $(ccli FCALL distlock_fenced 2 "fence:{${cn[$i]}}" "{${cn[$i]}}:n" 7 INCR) == 1 ]] &&
            [[ $(ccli FCALL distlock_fenced 2 "fence:{${cn[$i]}}" "{${cn[$i]}}:n" 6 INCR) == STALE* ]] &&
            good=$((good + 1))
    done
    check "cluster: distlock_fenced accepts and refuses on each master" test $good -eq 3

    # the slot moves to another master while watch runs: it follows
    to=${co[1]}
    if move_slot "${cs[0]}" "${co[0]}" "$to"; then
        # watch may look while the lock is held (it looks again when it
        # resubscribes on the new master), so the release shows either as
        # "acquired and released" or as "acquired by" then "released by"
        seen=$(wc -l <"$tmp/cwatch")
        "${DC[@]}" lock "${cn[0]}" -- true
        wait_for 5 eval '[[ $(tail -n +$((seen + 1)) "$tmp/cwatch" | grep -c "acquired and released\|released by") -ge 1 ]]'
        wait_for 5 eval '[[ $(redis-cli -p "$to" PUBSUB SHARDNUMSUB "redisson_lock__channel:{${cn[0]}}" | tail -1) == 1 ]]'
        check "cluster: after the lock's slot moved, watch follows it" \
            eval '[[ $(tail -n +$((seen + 1)) "$tmp/cwatch" | grep -c "acquired and released\|released by") -ge 1 ]] &&
                  [[ $(redis-cli -p "$to" PUBSUB SHARDNUMSUB "redisson_lock__channel:{${cn[0]}}" | tail -1) == 1 ]]' ||
            cat "$tmp/cwatch"
        ccli HSET "${cn[0]}" "$uuid2:5" 1 >/dev/null
        run "${DC[@]}" status "${cn[0]}"
        check "cluster: status after the slot moved" has "thread 5, 1 hold" "$out" || show
    else
        not_ok "cluster: moving slot ${cs[0]} to $to"
    fi
    kill -TERM "$cw"
    wait "$cw"
    check "cluster: watch exits 0 when interrupted" test $? -eq 0

    # a fair lock: watch subscribes each queued waiter's own channel; a
    # waiter that gives up leaves the queue (on the slot's master)
    f=${cn[1]}
    spawn "${DC[@]}" watch "$f" >"$tmp/cwatchf" 2>&1
    cw=$spawned
    spawn "${DC[@]}" lock --fair "$f" -- sleep 30
    fh=$spawned
    wait_for 5 eval '[[ $(redis-cli -p "${co[1]}" EXISTS "$f") == 1 ]]'
    spawn "${DC[@]}" lock --fair "$f" -- true
    fw=$spawned
    wait_for 5 eval 'grep -q queued "$tmp/cwatchf"'
    # shellcheck disable=SC2034  # used in the evals below
    head=$(redis-cli -p "${co[1]}" LINDEX "redisson_lock_queue:{$f}" 0)
    # two subscribers: the waiter itself, and watch
    wait_for 3 eval '[[ $(redis-cli -p "${co[1]}" PUBSUB SHARDNUMSUB "redisson_lock__channel:{$f}:$head" | tail -1) -ge 2 ]]'
    check "cluster: watch subscribes a queued fair waiter's own channel" \
        eval '[[ -n "$head" && $(redis-cli -p "${co[1]}" PUBSUB SHARDNUMSUB "redisson_lock__channel:{$f}:$head" | tail -1) -ge 2 ]]' ||
        cat "$tmp/cwatchf"
    kill -TERM "$fw"
    wait "$fw"
    rc=$?
    check "cluster: SIGTERM to a fair waiter: 143, out of the queue" \
        eval '[[ $rc -eq 143 && $(redis-cli -p "${co[1]}" LLEN "redisson_lock_queue:{$f}") == 0 ]]'
    wait_for 3 eval 'grep -q "left queue" "$tmp/cwatchf"'
    check "cluster: watch saw the waiter queue and leave" \
        eval 'has "queued" "$tmp/cwatchf" && has "left queue" "$tmp/cwatchf"' || cat "$tmp/cwatchf"
    kill -TERM "$fh" "$cw"
    wait "$fh" "$cw" 2>/dev/null

    run "${DC[@]}" status "$pfx-a{b"
    check "cluster: a name whose keys would span slots: exit 2" \
        eval '[[ $rc -eq 2 ]] && has "different slots" "$err"'
    run env "DISTLOCK_URL=redis-cluster://127.0.0.1:1,127.0.0.1:${cports[2]}" "$D" status "${cn[0]}"
    check "cluster: a URL whose first node is down" test $rc -eq 0 || show
fi
for c in "status x" "list" "lock x -- true" "unlock --force --yes x" "watch x"; do
    # shellcheck disable=SC2086
    run env DISTLOCK_URL=redis-cluster://127.0.0.1:1 "$D" $c
    check "$c, cluster unreachable: exit 3 naming the node" \
        eval '[[ $rc -eq 3 ]] && has "127.0.0.1:1" "$err"' || show
done
echo "# cluster section: $(($(now_ms) - t_cluster)) ms"

# ---- Redis Sentinel ----------------------------------------------------------
# One master, one replica, one sentinel: the commands go to the master.
t_sentinel=$(now_ms)
sentinel_up=0
# The replica's first sync starts at once (Redis 7 waits 5 s for more
# replicas by default) and is done before the checks begin: a check of
# what the replica has must not race it.
if start_server "$tmp/smaster" --repl-diskless-sync-delay 0; then
    sm=$started_port
    if start_server "$tmp/sreplica" --replicaof 127.0.0.1 "$sm" &&
        sr=$started_port &&
        wait_for 30 eval 'redis-cli -p "$sr" INFO replication | tr -d "\r" |
                          grep -qx "master_link_status:up"'; then
        mkdir -p "$tmp/sentinel"
        printf 'sentinel monitor dlm 127.0.0.1 %s 1\n' "$sm" >"$tmp/sentinel/sentinel.conf"
        if start_server "$tmp/sentinel" "$tmp/sentinel/sentinel.conf" --sentinel; then
            ss=$started_port
            wait_for 5 eval 'redis-cli -p "$ss" SENTINEL GET-MASTER-ADDR-BY-NAME dlm | grep -qx "$sm"' &&
                sentinel_up=1
        fi
    fi
fi
check "a master, a replica and a sentinel of our own are up" test $sentinel_up -eq 1
if [[ $sentinel_up -eq 1 ]]; then
    DS=(env "DISTLOCK_URL=redis-sentinel://127.0.0.1:$ss/dlm" "$D")
    redis-cli -p "$sm" HSET "$pfx-s" "$uuid2:7" 1 >/dev/null
    run "${DS[@]}" status "$pfx-s"
    check "sentinel: status reads the master the sentinel names" \
        eval '[[ $rc -eq 0 ]] && has "client $uuid2, thread 7, 1 hold" "$out"' || show
    run "${DS[@]}" list "$pfx-s*"
    check "sentinel: list" has "^$pfx-s .* mutex" "$out" || show
    run "${DS[@]}" lock "$pfx-s2" -- sh -c 'echo "token=$DISTLOCK_TOKEN"'
    check "sentinel: lock -- CMD" eval '[[ $rc -eq 0 ]] && has "^token=[0-9]\{16\}$" "$out"' || show
    run "${DS[@]}" fence load
    check "sentinel: fence load loads the library on the master alone" \
        eval '[[ $rc -eq 0 && $(grep -c "loaded function library" "$out") -eq 1 ]] &&
              has "127.0.0.1:$sm:" "$out"' || show
    check "sentinel: the replica has it from the master" \
        wait_for 15 eval 'redis-cli -p "$sr" FUNCTION LIST LIBRARYNAME distlock | grep -q distlock_fenced'
    run env "DISTLOCK_URL=redis-sentinel://127.0.0.1:$ss/nosuch" "$D" status "$pfx-s"
    check "sentinel: an unknown master name: exit 3 naming the sentinel" \
        eval '[[ $rc -eq 3 ]] && has "127.0.0.1:$ss" "$err"' || show
fi
echo "# sentinel section: $(($(now_ms) - t_sentinel)) ms"

tap_end
