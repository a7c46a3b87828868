#!/bin/sh
# test_links.sh: no dead link inside the documentation.
#   Every relative link of README.md, HACKING.md and docs/*.md, [text](target)
#   or a reference definition "[name]: target", must name a file or folder
#   of the tree, and its #anchor, if any, a heading of the Markdown file it
#   points to (GitHub's slug of the heading: lower case, punctuation dropped,
#   spaces made hyphens, "-1", "-2" ... added to repeats).  Links with a
#   scheme (https:, mailto:) are not followed: the check must not need the
#   network.  Fenced code blocks and `code spans` are not read for links.
# It runs from the source tree ($srcdir), so that make distcheck checks the
# files the tarball carries.
set -u

srcdir=${srcdir:-$(dirname "$0")/..}
cd "$srcdir" || { echo "FAIL: cannot enter $srcdir"; exit 1; }

files="README.md HACKING.md"
for f in docs/*.md; do
    [ -f "$f" ] && files="$files $f"
done
for f in $files; do
    [ -f "$f" ] || { echo "FAIL: $f is missing"; exit 1; }
done

# One line per heading ("A<TAB>file<TAB>slug") and per link
# ("L<TAB>file<TAB>line<TAB>target"), from every file.
scan() {
    LC_ALL=C awk '
    FNR == 1 { fence = ""; delete seen }
    # a fence opens with 3 or more backticks or tildes and closes with the
    # same kind
    /^ *(```|~~~)/ {
        mark = substr($0, match($0, /[`~]/), 3)
        if (fence == "") fence = mark
        else if (mark == fence) fence = ""
        next
    }
    fence != "" { next }
    /^ *#+ / {
        h = $0
        sub(/^ *#+ +/, "", h); sub(/ +#+ *$/, "", h)
        # a link in a heading reads as its text
        while (match(h, /\[[^]]*\]\([^)]*\)/)) {
            t = substr(h, RSTART + 1, RLENGTH - 1); sub(/\]\(.*/, "", t)
            h = substr(h, 1, RSTART - 1) t substr(h, RSTART + RLENGTH)
        }
        h = tolower(h)
        s = ""
        for (i = 1; i <= length(h); i++) {
            c = substr(h, i, 1)
            if (c ~ /[a-z0-9_-]/) s = s c
            else if (c == " ") s = s "-"
            else if (c > "\177") s = s c      # a byte of a UTF-8 letter
        }
        if (s in seen) { seen[s]++; s = s "-" seen[s] } else seen[s] = 0
        printf "A\t%s\t%s\n", FILENAME, s
    }
    {
        line = $0
        gsub(/`[^`]*`/, "", line)
        if (match(line, /^ *\[[^]]+\]: */)) {
            t = substr(line, RLENGTH + 1); sub(/ .*/, "", t)
            printf "L\t%s\t%d\t%s\n", FILENAME, FNR, t
            next
        }
        while (match(line, /\]\([^) ]+( "[^"]*")?\)/)) {
            t = substr(line, RSTART + 2, RLENGTH - 3); sub(/ .*/, "", t)
            sub(/^</, "", t); sub(/>$/, "", t)
            printf "L\t%s\t%d\t%s\n", FILENAME, FNR, t
            line = substr(line, RSTART + RLENGTH)
        }
    }' "$@"
}

found=$(scan $files) || { echo "FAIL: awk could not read the files"; exit 1; }
anchors=$(printf '%s\n' "$found" | grep '^A')
links=$(printf '%s\n' "$found" | grep '^L')

# a path made plain: "docs/../man/x.7" is "man/x.7"
normal() {
    printf '%s\n' "$1" | awk -F/ '{
        n = 0
        for (i = 1; i <= NF; i++) {
            if ($i == "" || $i == ".") continue
            if ($i == ".." && n > 0 && p[n] != "..") { n--; continue }
            p[++n] = $i
        }
        s = ""
        for (i = 1; i <= n; i++) s = s (i > 1 ? "/" : "") p[i]
        print s
    }'
}

fail=0
n=0
tab=$(printf '\t')
while IFS="$tab" read -r kind file line target; do
    [ "$kind" = L ] || continue
    case "$target" in
    [a-zA-Z]*:*) continue ;;        # https:, mailto:, ...: not followed
    esac
    n=$((n + 1))
    path=${target%%#*}
    anchor=
    case "$target" in *#*) anchor=${target#*#} ;; esac
    if [ -z "$path" ]; then
        to=$file
    else
        case "$path" in
        /*) to=$(normal "$path") ;;
        *) to=$(normal "$(dirname "$file")/$path") ;;
        esac
        if [ ! -e "$to" ]; then
            echo "FAIL: $file:$line: $target: no file $to"
            fail=1
            continue
        fi
    fi
    [ -n "$anchor" ] || continue
    case "$to" in
    *.md) ;;
    *) echo "FAIL: $file:$line: $target: an anchor in $to, which is not Markdown"
       fail=1; continue ;;
    esac
    printf '%s\n' "$anchors" | grep -qxF "A$tab$to$tab$anchor" || {
        echo "FAIL: $file:$line: $target: no heading of $to has the anchor #$anchor"
        fail=1
    }
done <<EOF
$links
EOF

[ "$n" -gt 0 ] || { echo "FAIL: no links found in $files"; exit 1; }
[ $fail -eq 0 ] && echo "PASS: $n relative links in $(echo $files | wc -w) files resolve"
exit $fail
