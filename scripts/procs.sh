# Shell functions for scripts that run private redis-servers on loopback
# (scripts/with-redis.sh, tests/interop/with-cluster.sh).  Sourced, not run.

# Send SIGTERM to a process, give it a few seconds, then SIGKILL it.
stop_process() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# Is something already listening on 127.0.0.1:$1?
port_in_use() {
    local port=$1
    if command -v ss >/dev/null 2>&1; then
        [[ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
    fi
}

# A port to try, in 20000-60000.
random_port() {
    echo $((20000 + (RANDOM * 32768 + RANDOM) % 40001))
}

# Print the process_id reported by "redis-cli ARGS INFO server", if any.
# (With a time limit, in case some other, silent program owns the port.)
redis_process_id() {
    local limit=()
    if command -v timeout >/dev/null 2>&1; then
        limit=(timeout 5)
    fi
    "${limit[@]}" redis-cli "$@" INFO server 2>/dev/null |
        tr -d '\r' | sed -n 's/^process_id://p' || true
}

# Runs "$@" in the background with our stdin and waits for it, so that a
# SIGTERM sent to the script is handled at once (bash defers traps until a
# foreground child exits); cmd_pid names it meanwhile, for the EXIT trap.
# Returns its status.
run_command() {
    local rc=0
    "$@" <&0 &
    cmd_pid=$!
    wait "$cmd_pid" || rc=$?
    cmd_pid=""
    return "$rc"
}
