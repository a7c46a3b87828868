#!/usr/bin/env bash
# Install the Debian/Ubuntu packages needed to build and test distlock.
#
# Only packages that are missing are installed; when everything is present
# this script prints nothing and exits 0.  Needs root (or sudo) only when
# something has to be installed.
#
# Environment:
#   DISTLOCK_DEPS_EXTRA   extra package names (space separated) to require
#   DISTLOCK_INTEROP      1: also a JDK and Maven, for the Redisson interop
#                         suite (tests/interop); the default under CI, where
#                         make check must run it (0 leaves them out)
#   DISTLOCK_PLOT         1: also gnuplot, for bench/plot.sh (pictures of a
#                         distlock-bench run); nothing else needs it
#   CI                    set: also gdb, for the stacks of a hung torture
#                         worker, clang-format, for scripts/format.sh
#                         --check, and PostgreSQL's server, for the fence's
#                         SQL side (tests/test_fence_pg.sh starts a server of
#                         its own; without CI it skips when none is installed)
#
# Note: installing redis-server may start the system's Redis service on
# port 6379.  distlock's scripts never use it; scripts/with-redis.sh starts
# a private server on a free port.
set -euo pipefail

log() { printf '[distlock] %s\n' "$*" >&2; }

packages=(
    build-essential
    autoconf
    automake
    libtool
    pkg-config
    libhiredis-dev
    uuid-dev
    libssl-dev
    openssl
    libcmocka-dev
    libinih-dev
    redis-server
    redis-tools
    valgrind
    mandoc          # make check lints the manual pages (tests/test_man.sh)
    cmake           # make check builds a CMake project against an install
    # make check builds the Debian packages of debian/ (tests/test_deb.sh)
    dpkg-dev
    debhelper       # compat 13, which runs autoreconf itself
    lintian
)
# Debian's own JDK and Maven; the suite pulls Redisson itself from Maven
# Central into Maven's local repository (~/.m2) on its first run.
if [[ "${DISTLOCK_INTEROP:-$([[ -n "${CI:-}" ]] && echo 1 || echo 0)}" == 1 ]]; then
    packages+=(openjdk-17-jdk-headless maven)
fi
# Under CI, gdb: a torture worker that hangs is shown with the stacks of
# its threads (bench/distlock-torture.c), not only counted; clang-format
# checks the layout of the sources (scripts/format.sh, .clang-format).
if [[ -n "${CI:-}" ]]; then
    packages+=(gdb postgresql clang-format)
fi
if [[ "${DISTLOCK_PLOT:-0}" == 1 ]]; then
    packages+=(gnuplot-nox)
fi
if [[ -n "${DISTLOCK_DEPS_EXTRA:-}" ]]; then
    read -r -a extra <<<"$DISTLOCK_DEPS_EXTRA"
    packages+=("${extra[@]}")
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
    log "dpkg-query not found: this script supports Debian-based systems only."
    log "Please install the equivalents of: ${packages[*]}"
    exit 1
fi

missing=()
for pkg in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    if [[ "$status" != "installed" ]]; then
        missing+=("$pkg")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi

log "missing packages: ${missing[*]}"

# Run a command as root: directly if we are root, else via sudo.
as_root=()
if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        as_root=(sudo)
    else
        log "error: not running as root and sudo is not available."
        log "Please install these packages as root: ${missing[*]}"
        exit 1
    fi
fi

log "running apt-get update"
if ! "${as_root[@]}" apt-get update -q; then
    log "error: apt-get update failed"
    exit 1
fi

log "installing: ${missing[*]}"
if ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    log "error: could not install: ${missing[*]}"
    exit 1
fi

log "dependencies installed"
