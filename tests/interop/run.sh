#!/usr/bin/env bash
# The Redisson interop suite: distlock and the real Redisson client on one
# lock, on a private redis-server and on a private 3-master Redis Cluster.
#
#   tests/interop/run.sh            (make check-redisson; also part of make check)
#
# For each pinned Redisson line (tests/interop/pom.xml: the current 3.x and,
# with -Pold, an older widely used one) it builds the Java side with Maven,
# then runs scenarios 1-7 and 9 on one server and 1, 2, 5 and 9 on the cluster
# (scenario 8).  Maven works offline once the artifacts are in the local
# repository (~/.m2, or MAVEN_REPO_LOCAL); the first run needs Maven Central.
#
# Environment: top_builddir (set by make), INTEROP_LINES (default
# "current old"), INTEROP_SCENARIOS (default "1 2 3 4 5 6 7 9"),
# INTEROP_CLUSTER_SCENARIOS (default "1 2 5 9"; empty: no cluster),
# INTEROP_REQUIRED=1 makes a missing java or mvn a failure, not a skip.
# Exit status: 0 passed, 77 skipped (no JDK or Maven), 1 failed.
set -euo pipefail

log() { printf '[interop] %s\n' "$*" >&2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top_srcdir=$(cd "$here/../.." && pwd)
builddir=$(cd "${top_builddir:-.}" && pwd)
agent=$builddir/tests/interop/dl-agent
tool=$builddir/tools/distlock
out=$builddir/tests/interop/java
lines=${INTEROP_LINES:-current old}
scenarios=${INTEROP_SCENARIOS:-1 2 3 4 5 6 7 9}
cluster_scenarios=${INTEROP_CLUSTER_SCENARIOS-1 2 5 9}

for tool_name in java mvn; do
    if ! command -v "$tool_name" >/dev/null 2>&1; then
        if [[ "${INTEROP_REQUIRED:-0}" == 1 ]]; then
            log "error: $tool_name not found; the Redisson interop suite needs a JDK and Maven"
            exit 1
        fi
        log "SKIPPED: $tool_name not found; the Redisson interop suite needs a JDK and Maven (apt-get install openjdk-17-jdk-headless maven, or DISTLOCK_INTEROP=1 scripts/deps.sh)"
        exit 77
    fi
done
for f in "$agent" "$tool"; do
    if [[ ! -x "$f" ]]; then
        log "error: $f is not built (run make first)"
        exit 1
    fi
done

mvn_args=(-B -q -f "$here/pom.xml")
if [[ -n "${MAVEN_REPO_LOCAL:-}" ]]; then
    mvn_args+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL")
fi

# build LINE: compiles the Java side against that Redisson line and writes
# its runtime class path; offline first, online when something is missing.
build() {
    local line=$1 dir=$out/$1 profile=()
    [[ $line == old ]] && profile=(-Pold)
    mkdir -p "$dir"
    local goals=("-Dinterop.out=$dir" "-Dmdep.outputFile=$dir/cp.txt"
                 "${profile[@]}" compile dependency:build-classpath)
    if ! mvn "${mvn_args[@]}" -o "${goals[@]}" >"$dir/mvn.log" 2>&1; then
        log "$line: resolving from Maven Central"
        if ! mvn "${mvn_args[@]}" "${goals[@]}" >"$dir/mvn.log" 2>&1; then
            cat "$dir/mvn.log" >&2
            log "error: Maven could not build the Java side ($line)"
            return 1
        fi
    fi
    printf '%s:%s' "$dir/classes" "$(cat "$dir/cp.txt")" >"$dir/classpath"
}

# The Redisson version a line's class path holds, for the output.
version_of() {
    grep -o 'redisson-[0-9][0-9.]*[0-9]\.jar' "$out/$1/classpath" | head -n 1 |
        sed 's/^redisson-//; s/\.jar$//'
}

status=0
for line in $lines; do
    build "$line" || exit 1
done
for line in $lines; do
    log "Redisson $(version_of "$line"), one server: scenarios $scenarios"
    # shellcheck disable=SC2086  # the scenario list is split on purpose
    if ! "$top_srcdir/scripts/with-redis.sh" "$here/run-one.sh" \
        "$(cat "$out/$line/classpath")" \
        "Redisson $(version_of "$line")" "$agent" "$tool" $scenarios; then
        status=1
    fi
    if [[ -n "$cluster_scenarios" ]]; then
        # Redisson releases with SPUBLISH on a Redis 7 cluster since 3.22,
        # with PUBLISH before; distlock's default (pubsub=both) must serve
        # either, so its URL is left as it is: the suite is told only
        # which kind to expect of Redisson
        pubsub=sharded
        [[ $line == old ]] && pubsub=plain
        log "Redisson $(version_of "$line"), 3-master cluster (Redisson: $pubsub pub/sub, distlock: default): scenarios $cluster_scenarios"
        # shellcheck disable=SC2086
        if ! INTEROP_PUBSUB=$pubsub "$here/with-cluster.sh" "$here/run-one.sh" \
            "$(cat "$out/$line/classpath")" "Redisson $(version_of "$line")" \
            "$agent" "$tool" $cluster_scenarios; then
            status=1
        fi
    fi
done
exit "$status"
