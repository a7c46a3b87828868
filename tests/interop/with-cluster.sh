#!/usr/bin/env bash
# Run a command against a private, throw-away Redis Cluster of 3 masters
# (no replicas) on loopback, as scripts/with-redis.sh does for one server.
#
#   tests/interop/with-cluster.sh COMMAND [ARGS...]
#
# Each node runs in its own fresh temporary directory on a free port (and
# that port + 10000 for the cluster bus), is checked to be the process we
# started, and the slots are spread with `redis-cli --cluster create`.
# COMMAND runs with
#
#   INTEROP_CLUSTER=127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#   DISTLOCK_URL=redis-cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#
# The nodes are always stopped and their directories removed afterwards.
# The exit status is the command's.
set -euo pipefail

log() { printf '[interop] %s\n' "$*" >&2; }
# shellcheck source=scripts/procs.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/procs.sh"

tmpdir=$(mktemp -d /tmp/distlock-cluster.XXXXXX)
pids=()
cmd_pid=""

# shellcheck disable=SC2317  # called through the EXIT trap
on_exit() {
    local rc=$? pid
    trap '' INT TERM
    if [[ -n "$cmd_pid" ]] && kill -0 "$cmd_pid" 2>/dev/null; then
        stop_process "$cmd_pid"
    fi
    for pid in "${pids[@]}"; do
        stop_process "$pid"
    done
    rm -rf -- "$tmpdir"
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_node N: a cluster-enabled redis-server on a free port (node_port).
start_node() {
    local n=$1 port dir attempt i pid
    dir=$tmpdir/node$n
    mkdir -p "$dir"
    for ((attempt = 0; attempt < 20; attempt++)); do
        port=$(random_port)
        ((port + 10000 < 65536)) || continue
        if port_in_use "$port" || port_in_use $((port + 10000)); then
            continue
        fi
        redis-server --port "$port" --bind 127.0.0.1 --protected-mode no \
            --cluster-enabled yes --cluster-config-file "$dir/nodes.conf" \
            --cluster-node-timeout 5000 --dir "$dir" --save "" --appendonly no \
            --daemonize no --logfile "$dir/redis.log" </dev/null >/dev/null 2>&1 &
        pid=$!
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            [[ "$(redis-cli -p "$port" PING 2>/dev/null)" == PONG ]] && break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null &&
            [[ "$(redis_process_id -p "$port")" == "$pid" ]]; then
            pids+=("$pid")
            node_port=$port
            return 0
        fi
        stop_process "$pid"
    done
    log "error: could not start cluster node $n"
    return 1
}

ports=()
node_port=""
for n in 1 2 3; do
    start_node "$n"
    ports+=("$node_port")
done

addrs=()
for p in "${ports[@]}"; do
    addrs+=("127.0.0.1:$p")
done
if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
    >"$tmpdir/create.log" 2>&1; then
    cat "$tmpdir/create.log" >&2
    log "error: redis-cli --cluster create failed"
    exit 1
fi
for ((i = 0; i < 100; i++)); do
    ok=0
    for p in "${ports[@]}"; do
        redis-cli -p "$p" CLUSTER INFO | grep -q '^cluster_state:ok' && ok=$((ok + 1))
    done
    [[ $ok -eq 3 ]] && break
    sleep 0.1
done
if [[ $ok -ne 3 ]]; then
    log "error: the cluster did not become ready"
    exit 1
fi
log "cluster of 3 masters on ports ${ports[*]}"

list=$(IFS=,; echo "${addrs[*]}")
export INTEROP_CLUSTER=$list
export DISTLOCK_URL="redis-cluster://$list"
rc=0
run_command "$@" || rc=$?
exit "$rc"
