#!/usr/bin/env bash
# One run of the interop scenarios against the server(s) the environment
# names (run by tests/interop/run.sh under scripts/with-redis.sh or
# tests/interop/with-cluster.sh).
#
#   run-one.sh CLASSPATH LABEL C-AGENT DISTLOCK-TOOL SCENARIO...
#
# On one server with-redis.sh gives DISTLOCK_URL and DISTLOCK_TEST_REDIS_PORT;
# on a cluster with-cluster.sh gives DISTLOCK_URL and INTEROP_CLUSTER, and
# INTEROP_PUBSUB (sharded or plain) says which pub/sub the Redisson line
# uses there.  distlock keeps its default on a cluster (pubsub=both), which
# hears and reaches either kind.
set -euo pipefail
cp=$1 label=$2 agent=$3 tool=$4
shift 4
if [[ -z "${INTEROP_CLUSTER:-}" ]]; then
    export INTEROP_REDIS="127.0.0.1:$DISTLOCK_TEST_REDIS_PORT"
fi
export INTEROP_LABEL=$label INTEROP_C_AGENT=$agent INTEROP_TOOL=$tool
exec java -XX:TieredStopAtLevel=1 -Dorg.slf4j.simpleLogger.defaultLogLevel=error \
    -cp "$cp" distlock.interop.Suite "$@"
