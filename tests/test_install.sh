#!/bin/sh
# test_install.sh: what a user of an installed distlock builds with.
# make install DESTDIR=<temp dir>, then against that tree:
#   - a C program compiled with pkg-config --cflags --libs distlock
#     (PKG_CONFIG_SYSROOT_DIR points it into the DESTDIR tree), run;
#   - a CMake project: find_package(distlock 0.1) and the imported target
#     distlock::distlock, for a C program and (when CMake finds a C++
#     compiler) a C++ one over distlock.hpp, built and run; and the version
#     file refusing a request for another major version.
# The programs make calls that need no server (a bad name gives EINVAL and
# a reason, the library's version).  Without cmake the pkg-config part
# still runs and the test reports itself skipped (77), saying so.
set -u

top_builddir=${top_builddir:-.}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/distlock-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
dest="$tmp/dest"

fail() { echo "FAIL: $*"; exit 1; }
. "$(dirname "$0")/pcflags.sh"

# the tree, with the build's own prefix; MAKEFLAGS of an outer make -j
# would hand this make a job server it cannot reach
(unset MAKEFLAGS MFLAGS; ${MAKE:-make} -s -C "$top_builddir" install \
    DESTDIR="$dest" >"$tmp/install.log" 2>&1) ||
    { cat "$tmp/install.log"; fail "make install DESTDIR=... failed"; }
pc=$(find "$dest" -name distlock.pc | head -n 1)
[ -n "$pc" ] || fail "no distlock.pc installed"
libdir=$(dirname "$(dirname "$pc")")      # DESTDIR + libdir
cmakedir="$libdir/cmake/distlock"
for f in distlockConfig.cmake distlockConfigVersion.cmake; do
    [ -f "$cmakedir/$f" ] || fail "$f not installed in libdir/cmake/distlock"
done
prefix=${libdir%/lib*}                    # DESTDIR + prefix
for f in fence.lua fence.sql; do
    [ -f "$prefix/share/distlock/$f" ] || fail "$f not installed in share/distlock"
done

cat >"$tmp/consumer.c" <<'C'
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <distlock.h>

int main(void)
{
    dist_mutex_t m;
    int rc = dist_mutex_init(&m, "", NULL);

    if (rc != EINVAL || strstr(dist_last_error(), "empty") == NULL) {
        fprintf(stderr, "dist_mutex_init(\"\"): %d, '%s'\n", rc,
                dist_last_error());
        return 1;
    }
    printf("distlock %d.%d.%d\n", DIST_VERSION_MAJOR, DIST_VERSION_MINOR,
           DIST_VERSION_PATCH);
    return 0;
}
C
cat >"$tmp/consumer.cpp" <<'CXX'
#include <cerrno>
#include <cstdio>
#include <system_error>
#include <distlock.hpp>

int main()
{
    try {
        distlock::mutex m("");
    } catch (const std::system_error &e) {
        if (e.code().value() == EINVAL) {
            std::printf("distlock.hpp: %s\n", e.what());
            return 0;
        }
    }
    return 1;
}
CXX

# ---- pkg-config ----
pc_flags "$dest" "$libdir" "$dest" "in the installed tree"
# A sanitizer build's library wants its runtime in the program too: the
# consumers get the build's own compiler and sanitizer flags (SAN_CFLAGS,
# empty in an ordinary build), as a user of such a build would.
${CC:-cc} ${SAN_CFLAGS-} -o "$tmp/pc-consumer" "$tmp/consumer.c" $flags ||
    fail "the pkg-config build failed ($flags)"
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/pc-consumer") || fail "pc-consumer: $out"
echo "pkg-config: $out"
LD_LIBRARY_PATH="$libdir" ldd "$tmp/pc-consumer" 2>/dev/null | grep -q "$dest" ||
    fail "pc-consumer does not run with the installed libdistlock"

# ---- CMake ----
if ! command -v cmake >/dev/null 2>&1; then
    echo "SKIP: cmake is not installed (apt-get install cmake): the CMake package was installed but not tried"
    exit 77
fi
mkdir -p "$tmp/proj"
cxx_arg=
if [ -n "${CXX-}" ] && command -v "${CXX%% *}" >/dev/null 2>&1; then
    cxx_arg="-DCMAKE_CXX_COMPILER=${CXX%% *}"
fi
cp "$tmp/consumer.c" "$tmp/consumer.cpp" "$tmp/proj/"
cat >"$tmp/proj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.5)
project(consumer C)
find_package(distlock 1.0 QUIET)
if(distlock_FOUND)
  message(FATAL_ERROR "find_package(distlock 1.0) accepted ${distlock_VERSION}")
endif()
find_package(distlock 0.1 REQUIRED)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE distlock::distlock)
include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
  add_executable(consumer_cxx consumer.cpp)
  target_link_libraries(consumer_cxx PRIVATE distlock::distlock)
endif()
CMAKE
(cd "$tmp/proj" && cmake -S . -B build -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="${CC:-cc}" -DCMAKE_C_FLAGS="${SAN_CFLAGS-}" \
    $cxx_arg -DCMAKE_CXX_FLAGS="${SAN_CFLAGS-}" \
    >"$tmp/cmake.log" 2>&1 && cmake --build build >>"$tmp/cmake.log" 2>&1) ||
    { cat "$tmp/cmake.log"; fail "the CMake project did not build"; }
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/proj/build/consumer") || fail "consumer: $out"
echo "cmake: $out"
if [ -x "$tmp/proj/build/consumer_cxx" ]; then
    out=$(LD_LIBRARY_PATH="$libdir" "$tmp/proj/build/consumer_cxx") ||
        fail "consumer_cxx: $out"
    echo "cmake, C++: $out"
else
    echo "cmake: no C++ compiler, distlock.hpp not tried"
fi
echo "PASS: pkg-config and CMake builds against the DESTDIR tree run"
