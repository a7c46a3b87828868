#!/bin/sh
# test_man.sh: the manual pages are clean and complete.
#   - every page under man/ passes mandoc's lint at warning level (or, when
#     mandoc is missing, groff's with every warning on);
#   - every function distlock.h exports is named (.Nm) in the NAME section
#     of a section-3 page, so 'man dist_...' finds it once installed, and
#     so is every symbol the built libdistlock.so exports (when it is
#     built: $top_builddir/.libs), which a declaration the header scan
#     misreads cannot hide;
#   - every name a section-3 page gives (.Nm) is a function or macro of
#     distlock.h: no page installs an alias for a name that is gone;
#   - every section-3 page has RETURN VALUES, and every page that names a
#     function returning an error number has ERRORS;
#   - every DISTLOCK_* environment variable the library, the shim or the
#     tools read or set (a string in src/ or tools/) is an .Ev of a page;
#   - every key the shim's configuration accepts (src/preload/config.c) is
#     an item (.It Ic) of distlock-preload.conf(5).
set -u

srcdir=${srcdir:-$(dirname "$0")/..}
man="$srcdir/man"
hdr="$srcdir/include/distlock.h"
fail=0

pages=$(ls "$man"/*.[1-8] 2>/dev/null)
[ -n "$pages" ] || { echo "FAIL: no pages in $man"; exit 1; }

if command -v mandoc >/dev/null 2>&1; then
    linter="mandoc -T lint -W warning"
elif command -v groff >/dev/null 2>&1; then
    linter="groff -ww -z -mdoc"
else
    echo "SKIP: neither mandoc nor groff is installed (apt-get install mandoc)"
    exit 77
fi
for p in $pages; do
    out=$($linter "$p" 2>&1)
    if [ $? -ne 0 ] || [ -n "$out" ]; then
        echo "FAIL: $linter $(basename "$p"):"
        echo "$out"
        fail=1
    fi
done

# the names each section-3 page documents, as "name page" lines
named=$(for p in "$man"/*.3; do
            sed -n 's/^\.Nm \([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' "$p" |
                sed "s|\$| $(basename "$p")|"
        done)
declared=$(sed -n 's/^DIST_EXPORT[^(]*[ *]\(dist_[a-z_]*\)(.*/\1/p' "$hdr" | sort -u)
[ -n "$declared" ] || { echo "FAIL: no DIST_EXPORT functions found in $hdr"; exit 1; }
n=0
for f in $declared; do
    n=$((n + 1))
    echo "$named" | grep -q "^$f " ||
        { echo "FAIL: $f (distlock.h) is in no section-3 page's NAME"; fail=1; }
done
# the symbols the built library exports, when it is built
lib="${top_builddir:-}/.libs/libdistlock.so"
nsyms=0
if [ -n "${top_builddir:-}" ] && [ -f "$lib" ] && command -v nm >/dev/null 2>&1; then
    for s in $(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}'); do
        nsyms=$((nsyms + 1))
        echo "$named" | grep -q "^$s " ||
            { echo "FAIL: $s (exported by libdistlock.so) is in no section-3 page's NAME"; fail=1; }
    done
    [ $nsyms -gt 0 ] || { echo "FAIL: nm found no symbols in $lib"; fail=1; }
fi
# every name of a page is the header's (a function, or a macro such as
# DIST_MUTEX_INITIALIZER)
macros=$(sed -n 's/^#define \(DIST_[A-Z_]*\).*/\1/p' "$hdr")
for nm_ in $(echo "$named" | cut -d' ' -f1 | sort -u); do
    echo "$declared $macros" | tr ' ' '\n' | grep -qx "$nm_" ||
        { echo "FAIL: $nm_ is named by $(echo "$named" | grep "^$nm_ " | cut -d' ' -f2 | head -n 1) but is not in distlock.h"; fail=1; }
done
# the environment: each DISTLOCK_* string of the sources is documented
nenv=0
for v in $(cat "$srcdir"/src/*/*.c "$srcdir"/src/*/*.h "$srcdir"/tools/*.c \
               "$srcdir"/tools/cli/*.c 2>/dev/null |
           grep -o '"DISTLOCK_[A-Z0-9_]*"' | tr -d '"' | sort -u); do
    nenv=$((nenv + 1))
    grep -qE "^\.(It )?Ev $v( |\$)" $pages ||
        { echo "FAIL: the environment variable $v (in src/ or tools/) is no .Ev of any page"; fail=1; }
done
[ $nenv -gt 0 ] || { echo "FAIL: no DISTLOCK_* variables found under $srcdir/src"; fail=1; }
# the shim's configuration keys
nkeys=0
conf5="$man/distlock-preload.conf.5"
for k in $(grep -o 'strcmp(k, "[a-z_]*")' "$srcdir/src/preload/config.c" |
           sed 's/.*"\(.*\)".*/\1/' | sort -u); do
    nkeys=$((nkeys + 1))
    grep -qE "^\.It .*Ic $k( |\$)" "$conf5" ||
        { echo "FAIL: the configuration key '$k' (src/preload/config.c) is no item of distlock-preload.conf.5"; fail=1; }
done
[ $nkeys -gt 0 ] || { echo "FAIL: no configuration keys found in src/preload/config.c"; fail=1; }
for p in "$man"/*.3; do
    grep -q '^\.Sh RETURN VALUES' "$p" ||
        { echo "FAIL: $(basename "$p") has no RETURN VALUES"; fail=1; }
    # a page whose functions return int error numbers lists them
    if grep -q '^\.Ft int' "$p" && ! grep -q '^\.Sh ERRORS' "$p"; then
        echo "FAIL: $(basename "$p") has int functions but no ERRORS"
        fail=1
    fi
done
[ $fail -eq 0 ] &&
    echo "PASS: $(echo "$pages" | wc -w) pages lint clean ($linter); all $n functions of distlock.h documented ($nsyms exported symbols checked), $nenv environment variables, $nkeys configuration keys"
exit $fail
