#!/bin/sh
# test_man.sh: the manual pages are clean and complete.
#   - every page under man/ passes mandoc's lint at warning level (or, when
#     mandoc is missing, groff's with every warning on);
#   - every function distlock.h exports is named (.Nm) in the NAME section
#     of a section-3 page, so 'man dist_...' finds it once installed;
#   - every section-3 page has RETURN VALUES, and every page that names a
#     function returning an error number has ERRORS.
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
    echo "PASS: $(echo "$pages" | wc -w) pages lint clean ($linter); all $n functions of distlock.h documented"
exit $fail
