#!/usr/bin/env bash
# S2 beside other clients' locks, interleaved on one private redis-server.
#
#   bench/peer-s2.sh BUILDDIR [ROUNDS=5]
#   make -C build bench-peers [PEER_ROUNDS=5]
#
# Each round runs distlock's S2 (distlock-bench --only s2: 4 processes, one
# lock, GET+SET of a counter inside, 5 s) and the same loop with Node.js peers
# (bench/peers/s2-peer.js): node-redlock 4 retrying every 10 ms and every
# 1 ms, and a hand-written SET NX PX lock polling every 1 ms.  The order
# turns round every round (A B C D, D C B A, ...), so a machine that gets
# busier or quieter meanwhile favours nobody.  Prints every round and, per
# client, the median acquisitions/s, the longest wait and the smallest
# share, and distlock's acquisitions/s over the best peer's of the same
# round.  Needs node, npm and python3 (for the table); the peers' packages are
# installed into bench/peers/node_modules from its package-lock.json on the
# first run.  A benchmark: it measures, it asserts nothing.
set -euo pipefail

log() { printf '[distlock] %s\n' "$*" >&2; }

build=${1:?usage: bench/peer-s2.sh BUILDDIR [ROUNDS]}
rounds=${2:-5}
secs=5      # distlock-bench's S2 runs 5 s
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "$build" && pwd)

if ! command -v node >/dev/null || ! command -v npm >/dev/null \
   || ! command -v python3 >/dev/null; then
    log "peer-s2: skipped: node, npm and python3 are needed (Debian: apt-get install nodejs npm python3)"
    exit 0
fi
if [[ ! -d "$here/peers/node_modules/redlock" ]]; then
    log "peer-s2: installing the peers' packages (npm ci in bench/peers)"
    (cd "$here/peers" && npm ci --no-audit --no-fund --loglevel=error)
fi
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { log "peer-s2: ROUNDS is a whole number"; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Runs inside with-redis.sh: DISTLOCK_URL is the private server.
cat >"$out/rounds.sh" <<'EOF'
set -euo pipefail
build=$1 here=$2 rounds=$3 secs=$4 out=$5
clients=(distlock redlock10 redlock1 setnx1)
one() {
    case $1 in
    distlock) "$build/bench/distlock-bench" --json --only s2 \
                  | grep '"scenario":"s2"' ;;
    redlock10) node "$here/peers/s2-peer.js" "$DISTLOCK_URL" 4 "$secs" 10 redlock ;;
    redlock1) node "$here/peers/s2-peer.js" "$DISTLOCK_URL" 4 "$secs" 1 redlock ;;
    setnx1) node "$here/peers/s2-peer.js" "$DISTLOCK_URL" 4 "$secs" 1 setnx ;;
    esac
}
for ((r = 1; r <= rounds; r++)); do
    order=("${clients[@]}")
    if ((r % 2 == 0)); then
        order=(); for ((i = ${#clients[@]} - 1; i >= 0; i--)); do order+=("${clients[i]}"); done
    fi
    for c in "${order[@]}"; do
        printf '[distlock] round %d/%d: %s\n' "$r" "$rounds" "$c" >&2
        if ! res=$(one "$c") || [[ -z $res ]]; then
            printf '[distlock] peer-s2: %s gave no result in round %d\n' "$c" "$r" >&2
            exit 1
        fi
        printf '%d %s %s\n' "$r" "$c" "$res" >>"$out/results"
    done
done
EOF
"$root/scripts/with-redis.sh" bash "$out/rounds.sh" "$build" "$here" "$rounds" "$secs" "$out"

python3 - "$out/results" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r, client, js = line.split(' ', 2)
    rows.setdefault(client, {})[int(r)] = json.loads(js)
names = {'distlock': 'distlock (default mutex)',
         'redlock10': 'node-redlock 4.2.0, retry 10 ms',
         'redlock1': 'node-redlock 4.2.0, retry 1 ms',
         'setnx1': 'SET NX PX by hand, poll 1 ms'}
print('\nround  client                            acq/s   longest wait  smallest share  lost')
for r in sorted(rows['distlock']):
    for c in rows:
        x = rows[c][r]
        print('%5d  %-32s %7.0f  %9.1f ms  %14.3f  %4d' % (
            r, names[c], x['acq_per_s'], x['max_wait_ms'], x['min_share'],
            x['lost_updates']))
print('\nmedians over %d rounds                     acq/s   longest wait  smallest share'
      % len(rows['distlock']))
for c in rows:
    xs = rows[c].values()
    print('       %-32s %7.0f  %9.1f ms  %14.3f' % (
        names[c], statistics.median(x['acq_per_s'] for x in xs),
        statistics.median(x['max_wait_ms'] for x in xs),
        statistics.median(x['min_share'] for x in xs)))
ratios = []
for r in sorted(rows['distlock']):
    best = max(rows[c][r]['acq_per_s'] for c in rows if c != 'distlock')
    ratios.append(rows['distlock'][r]['acq_per_s'] / best)
print('\ndistlock / best peer of the same round: median %.2f (%.2f..%.2f)'
      % (statistics.median(ratios), min(ratios), max(ratios)))
EOF
