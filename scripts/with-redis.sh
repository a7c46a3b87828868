#!/usr/bin/env bash
# Run a command against a private, throw-away Redis server.
#
#   scripts/with-redis.sh COMMAND [ARGS...]
#
# Starts redis-server (not daemonized) on 127.0.0.1 on a free port and on a
# unix socket inside a fresh temporary directory, checks that the server
# answering on both is really the one we started, then runs COMMAND with
#
#   DISTLOCK_URL=redis://127.0.0.1:PORT
#   DISTLOCK_TEST_REDIS_PORT=PORT
#   DISTLOCK_TEST_REDIS_SOCK=/tmp/.../redis.sock
#
# The server is always stopped and the directory removed afterwards (also
# on Ctrl-C / SIGTERM).  The exit status is the command's.
#
# If DISTLOCK_USE_EXISTING=1 and DISTLOCK_URL is already set, no server is
# started and COMMAND simply runs against that URL.
set -euo pipefail

log() { printf '[distlock] %s\n' "$*" >&2; }
# shellcheck source=scripts/procs.sh
. "$(dirname "${BASH_SOURCE[0]}")/procs.sh"

if [[ $# -eq 0 ]]; then
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
fi

if [[ "${DISTLOCK_USE_EXISTING:-0}" == 1 ]]; then
    if [[ -n "${DISTLOCK_URL:-}" ]]; then
        log "using existing Redis at $DISTLOCK_URL"
        exec "$@"
    fi
    log "DISTLOCK_USE_EXISTING=1 but DISTLOCK_URL is not set; starting a private Redis"
fi

for tool in redis-server redis-cli; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        log "error: $tool not found (run scripts/deps.sh)"
        exit 1
    fi
done

tmpdir=""
redis_pid=""
cmd_pid=""

stop_redis() {
    if [[ -n "$redis_pid" ]]; then
        stop_process "$redis_pid"
        redis_pid=""
    fi
}

# Called through "trap ... EXIT" (shellcheck cannot see that).
# shellcheck disable=SC2317
on_exit() {
    local rc=$?
    trap '' INT TERM # do not let a second Ctrl-C interrupt the cleanup
    if [[ -n "$cmd_pid" ]] && kill -0 "$cmd_pid" 2>/dev/null; then
        log "stopping command (pid $cmd_pid)"
        stop_process "$cmd_pid"
    fi
    if [[ -n "$redis_pid" ]]; then
        log "stopping redis-server (pid $redis_pid)"
        stop_redis
    fi
    if [[ -n "$tmpdir" ]]; then
        rm -rf -- "$tmpdir"
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A fresh directory for socket, log and (disabled) persistence.  Unix socket
# paths are limited to ~107 bytes, so fall back to /tmp if TMPDIR is long.
tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/distlock-redis.XXXXXX")
if (( ${#tmpdir} > 90 )); then
    rm -rf -- "$tmpdir"
    tmpdir=$(mktemp -d /tmp/distlock-redis.XXXXXX)
fi
sock="$tmpdir/redis.sock"

# Start redis-server on port $1 and check that it is really ours.
try_start() {
    local port=$1 i
    rm -f -- "$sock"
    : >"$tmpdir/redis.log"
    redis-server \
        --port "$port" \
        --bind 127.0.0.1 \
        --unixsocket "$sock" \
        --unixsocketperm 700 \
        --dir "$tmpdir" \
        --save "" \
        --appendonly no \
        --protected-mode no \
        --daemonize no \
        --logfile "$tmpdir/redis.log" \
        </dev/null >/dev/null 2>&1 &
    redis_pid=$!

    # Wait (up to ~5 s) for it to answer on the unix socket.
    for ((i = 0; i < 50; i++)); do
        if ! kill -0 "$redis_pid" 2>/dev/null; then
            break # it exited, e.g. because the port is taken
        fi
        if [[ -S "$sock" ]] &&
            [[ "$(redis-cli -s "$sock" PING 2>/dev/null)" == PONG ]]; then
            break
        fi
        sleep 0.1
    done

    if ! kill -0 "$redis_pid" 2>/dev/null; then
        stop_redis # reap it
        return 1
    fi

    # Both the socket and the TCP port must lead to the process we started.
    local sock_pid tcp_pid
    sock_pid=$(redis_process_id -s "$sock")
    tcp_pid=$(redis_process_id -h 127.0.0.1 -p "$port")
    if [[ "$sock_pid" == "$redis_pid" && "$tcp_pid" == "$redis_pid" ]]; then
        return 0
    fi
    stop_redis
    return 1
}

port=""
for ((attempt = 1; attempt <= 10; attempt++)); do
    candidate=$(random_port)
    if port_in_use "$candidate"; then
        log "port $candidate is busy, trying another"
        continue
    fi
    if try_start "$candidate"; then
        port=$candidate
        break
    fi
    log "redis-server on port $candidate did not come up as expected, retrying"
done

if [[ -z "$port" ]]; then
    log "error: could not start a private redis-server after 10 attempts"
    if [[ -s "$tmpdir/redis.log" ]]; then
        log "last lines of redis.log:"
        tail -n 20 "$tmpdir/redis.log" >&2
    fi
    exit 1
fi

log "redis-server running (pid $redis_pid) on 127.0.0.1:$port and $sock"

export DISTLOCK_URL="redis://127.0.0.1:$port"
export DISTLOCK_TEST_REDIS_PORT="$port"
export DISTLOCK_TEST_REDIS_SOCK="$sock"

rc=0
run_command "$@" || rc=$?
exit "$rc"
