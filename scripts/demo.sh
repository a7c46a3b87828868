#!/usr/bin/env bash
# Quick-start command 1: build distlock and run the counter demo against a
# private, throw-away redis-server on a free loopback port.
#
#   scripts/demo.sh [counter_demo options: -p procs -t threads -n increments]
set -euo pipefail

log() { printf '[distlock] %s\n' "$*" >&2; }

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$script_dir/.." && pwd)

"$script_dir/build.sh" >&2
log "starting a private redis-server and running examples/counter_demo"
exec "$script_dir/with-redis.sh" "$root/build/examples/counter_demo" "$@"
