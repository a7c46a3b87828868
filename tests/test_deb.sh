#!/bin/sh
# test_deb.sh: the Debian packages of debian/, built as a user would build
# them and used as a user would use them.
#   - the tree that make dist ships (make distdir, into a temp dir) is
#     packed as the .orig tarball and unpacked again, and
#     dpkg-buildpackage -us -uc -b builds it there (nocheck: this test is
#     already inside make check), out of this build and its source tree;
#   - lintian, when installed, must report no error on the .changes;
#   - the three .deb files are unpacked with dpkg-deb -x into a temp root,
#     where each package must hold its own files (and no other's);
#   - a C program is compiled against the unpacked libdistlock-dev with
#     pkg-config (PKG_CONFIG_SYSROOT_DIR into the root) and run on the
#     unpacked libdistlock0; then, under scripts/with-redis.sh, it takes a
#     lock twice and the unpacked distlock tool a third time (tokens 1..3).
# Without dpkg-buildpackage, debhelper or the build dependencies the test
# reports itself skipped (77), saying what is missing.
set -u

top_builddir=${top_builddir:-.}
here=$(cd "$(dirname "$0")" && pwd)
srcdir=$(cd "$here/.." && pwd)

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
. "$here/pcflags.sh"

# The packages are built from the tarball with Debian's own flags, the same
# whatever this build's: a sanitizer build (of scripts/test.sh's several)
# leaves them to the plain one and to make distcheck.
if [ -n "${SAN_CFLAGS:-}" ]; then
    skip "a sanitizer build: the Debian packages do not depend on its flags and are checked by the plain build's make check"
fi

missing=
for tool in dpkg-buildpackage:dpkg-dev dh:debhelper dpkg-deb:dpkg \
            dpkg-checkbuilddeps:dpkg-dev; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing="$missing ${tool#*:}"
done
[ -z "$missing" ] ||
    skip "the Debian packages were not built: missing$missing (apt-get install$missing)"
# what debian/control asks for, less what only its tests need
deps=$(dpkg-checkbuilddeps -P nocheck "$srcdir/debian/control" 2>&1) ||
    skip "the Debian packages were not built: $deps"

version=$(sed -n 's/^PACKAGE_VERSION = //p' "$top_builddir/Makefile")
[ -n "$version" ] || fail "no PACKAGE_VERSION in $top_builddir/Makefile"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/distlock-deb.XXXXXX") || exit 1
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
log="$tmp/log"

# ---- the tarball, then the packages from it ----
# MAKEFLAGS of an outer make -j would hand these makes a job server they
# cannot reach; the build's compiler and flags (a sanitizer build's) are not
# the package's: dpkg-buildpackage sets Debian's own.
clean_env="env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u CC -u CXX -u CFLAGS \
    -u CXXFLAGS -u CPPFLAGS -u LDFLAGS -u SAN_CFLAGS"
mkdir "$tmp/ship" &&
    $clean_env ${MAKE:-make} -s -C "$top_builddir" distdir \
    distdir="$tmp/ship/distlock-$version" >"$log" 2>&1 ||
    { cat "$log"; fail "make distdir failed"; }
tar -C "$tmp/ship" -czf "$tmp/distlock_$version.orig.tar.gz" \
    "distlock-$version" || fail "could not pack the tree"
mkdir "$tmp/pkg" && tar -C "$tmp/pkg" -xzf "$tmp/distlock_$version.orig.tar.gz" ||
    fail "could not unpack the tarball"
# under make distcheck the source tree, and so what make distdir copied
# from it, is read-only; the package build writes into its tree
chmod -R u+w "$tmp/pkg"
echo "building the packages of distlock $version (dpkg-buildpackage -b)"
(cd "$tmp/pkg/distlock-$version" &&
 $clean_env DEB_BUILD_OPTIONS="nocheck parallel=2" \
     dpkg-buildpackage -us -uc -b -Pnocheck) >"$log" 2>&1 ||
    { tail -n 60 "$log"; fail "dpkg-buildpackage failed"; }

arch=$(dpkg-architecture -qDEB_HOST_ARCH)
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for p in libdistlock0 libdistlock-dev distlock-tools; do
    deb=$(ls "$tmp/pkg/${p}_"*"_$arch.deb" 2>/dev/null | head -n 1)
    [ -n "$deb" ] || fail "dpkg-buildpackage made no $p package"
    eval "deb_$(echo "$p" | tr -c 'a-z0-9\n' _)=\$deb"
done

# ---- lintian ----
if command -v lintian >/dev/null 2>&1; then
    lintian --fail-on error "$tmp/pkg/"*.changes >"$log" 2>&1 ||
        { cat "$log"; fail "lintian reports errors"; }
    echo "lintian: no errors; its other findings:"
    cat "$log"
else
    echo "lintian is not installed (apt-get install lintian): not run"
fi

# ---- what each package holds ----
holds() { # package file...: every file is in the package, and only there
    pkg=$1; shift
    eval "deb=\$deb_$(echo "$pkg" | tr -c 'a-z0-9\n' _)"
    list=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
    for f in "$@"; do
        echo "$list" | grep -Fqx "$f" || fail "$pkg lacks $f"
    done
}
holds libdistlock0 "/usr/lib/$ma/libdistlock.so.0"
holds libdistlock-dev /usr/include/distlock.h /usr/include/distlock.hpp \
    "/usr/lib/$ma/libdistlock.so" "/usr/lib/$ma/pkgconfig/distlock.pc" \
    "/usr/lib/$ma/cmake/distlock/distlockConfig.cmake" \
    /usr/share/man/man3/dist_mutex_lock.3.gz /usr/share/man/man7/distlock.7.gz
holds distlock-tools /usr/bin/distlock /usr/bin/distlock-run \
    "/usr/lib/$ma/distlock/libdistlock_preload.so" \
    /usr/share/man/man1/distlock.1.gz /usr/share/man/man5/distlock-preload.conf.5.gz \
    /usr/share/distlock/fence.lua /usr/share/distlock/fence.sql \
    /usr/share/man/man7/distlock-fence.7.gz
if dpkg-deb -c "$deb_libdistlock0" | grep -q '/usr/include/\|\.so$'; then
    fail "libdistlock0 holds development files"
fi

# ---- a program built against the unpacked packages ----
root="$tmp/root"
for deb in "$deb_libdistlock0" "$deb_libdistlock_dev" "$deb_distlock_tools"; do
    dpkg-deb -x "$deb" "$root" || fail "dpkg-deb -x $deb failed"
done
libdir="$root/usr/lib/$ma"
cat >"$tmp/consumer.c" <<'C'
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <distlock.h>

/* Without Redis: a refusal with its reason, the counters, the version.
 * With DISTLOCK_URL: a lock taken and released, and its fencing token. */
int main(void)
{
    dist_mutex_t m;
    struct dist_stats st;
    uint64_t token = 0;
    int rc = dist_mutex_init(&m, "", NULL);

    if (rc != EINVAL || strstr(dist_last_error(), "empty") == NULL) {
        fprintf(stderr, "dist_mutex_init(\"\"): %d, '%s'\n", rc,
                dist_last_error());
        return 1;
    }
    if (getenv("DISTLOCK_URL")) {
        if ((rc = dist_mutex_init(&m, "deb-consumer", NULL)) != 0 ||
            (rc = dist_mutex_lock(&m)) != 0 ||
            (rc = dist_mutex_token(&m, &token)) != 0 ||
            (rc = dist_mutex_unlock(&m)) != 0) {
            fprintf(stderr, "the lock: %s (%s)\n", strerror(rc),
                    dist_last_error());
            return 1;
        }
        dist_mutex_destroy(&m);
        printf("held deb-consumer, token %" PRIu64 "; ", token);
    }
    if (dist_stats_get(&st) != 0)
        return 1;
    printf("distlock %d.%d.%d\n", DIST_VERSION_MAJOR, DIST_VERSION_MINOR,
           DIST_VERSION_PATCH);
    return 0;
}
C
pc_flags "$root" "$libdir" "$root/usr/lib/$ma" "the unpacked libdistlock-dev"
cc -o "$tmp/consumer" "$tmp/consumer.c" $flags ||
    fail "the consumer did not build against libdistlock-dev ($flags)"
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/consumer") || fail "consumer: $out"
echo "consumer: $out"
LD_LIBRARY_PATH="$libdir" ldd "$tmp/consumer" 2>/dev/null |
    grep -q "libdistlock.so.0 => $libdir/" ||
    fail "the consumer does not run on the unpacked libdistlock0"
LD_LIBRARY_PATH="$libdir" "$root/usr/bin/distlock" --help >"$log" 2>&1 ||
    { cat "$log"; fail "the packaged distlock tool does not run"; }

# ---- the unpacked library and tool against a private redis-server ----
if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis-server is not installed: the packages were not tried on Redis"
    echo "PASS: the packages build, pass lintian and serve a pkg-config build"
    exit 0
fi
cat >"$tmp/on-redis.sh" <<'SH'
# the consumer takes its lock twice; the packaged tool then takes it and
# sees the token of the third taking
set -e
"$1/consumer" && "$1/consumer"
"$2/usr/bin/distlock" lock deb-consumer -- sh -c 'echo "tool: token $DISTLOCK_TOKEN"'
SH
out=$(unset DISTLOCK_USE_EXISTING; LD_LIBRARY_PATH="$libdir" \
      bash "$srcdir/scripts/with-redis.sh" sh "$tmp/on-redis.sh" "$tmp" "$root" 2>"$log") ||
    { echo "$out"; cat "$log"; fail "the packaged library or tool failed on Redis"; }
echo "$out"
# three takings: three tokens, each above the one before
toks=$(echo "$out" | sed -n 's/.*held deb-consumer, token \([0-9]*\);.*/\1/p;
                             s/^tool: token \([0-9]*\)$/\1/p' | tr '\n' ' ')
set -- $toks
[ $# -eq 3 ] && [ "$1" -lt "$2" ] && [ "$2" -lt "$3" ] ||
    fail "the fencing tokens of three takings do not rise: $toks"
echo "PASS: the packages build, pass lintian, serve a pkg-config build and work on Redis"
