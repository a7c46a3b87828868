#!/usr/bin/env bash
# Build distlock out of tree.
#
#   scripts/build.sh [--dir DIR] [configure-args...]
#
# Installs missing Debian packages (scripts/deps.sh), generates configure in
# the source tree when it is missing or older than its inputs, configures
# DIR (default build/) when it is new or the arguments changed, and runs
# make there.  The source tree itself is never configured, so several build
# directories (build/, build-asan/) can live side by side.
set -euo pipefail

log() { printf '[distlock] %s\n' "$*" >&2; }

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$script_dir/.." && pwd)

dir=build
if [[ "${1:-}" == --dir ]]; then
    dir=$2
    shift 2
fi

"$script_dir/deps.sh"

cd "$root"
if [[ -f config.status ]]; then
    log "the source tree was configured in place; run 'make distclean' there first"
    exit 1
fi
if [[ ! -f configure || configure.ac -nt configure || Makefile.am -nt Makefile.in ]]; then
    log "generating configure (autoreconf -fi)"
    autoreconf -fi
fi

mkdir -p "$dir"
cd "$dir"
stamp=.distlock-configure-args
wanted=$(printf '%q ' "$@")
if [[ ! -f Makefile || ! -f "$stamp" || "$(cat "$stamp")" != "$wanted" ||
      "$root/configure" -nt Makefile ]]; then
    log "configuring $dir/ ${*:-(default options)}"
    if [[ -f Makefile && -f "$stamp" && "$(cat "$stamp")" != "$wanted" ]]; then
        # other options (a compiler, sanitizers): make tracks no flags, so
        # objects built with the old ones would be linked with the new
        log "options changed: make clean in $dir/ first"
        make -s clean >/dev/null 2>&1 || true
    fi
    rm -f "$stamp"
    "$root/configure" -q "$@"
    printf '%s' "$wanted" >"$stamp"
fi

jobs=$(nproc 2>/dev/null || echo 2)
log "building in $dir/ (make -j$jobs)"
make -s -j"$jobs"
