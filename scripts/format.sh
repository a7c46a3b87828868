#!/usr/bin/env bash
# The house layout of the C and C++ sources, written down in .clang-format.
#
#   scripts/format.sh --check   list the files clang-format would change;
#                               exit 1 when there is one
#   scripts/format.sh --stat    how many lines it would change, per folder
#   scripts/format.sh --apply   reformat those files in place
#   scripts/format.sh ... FILE...   the same, on the files named only
#
# The files are those git tracks that end in .c, .h, .cpp or .hpp, less the
# patterns of .clang-format-ignore (one glob a line, matched against the
# path from the top; clang-format 18 reads the same file, older ones do
# not, so this script applies it).  Needs clang-format (scripts/deps.sh
# installs it under CI); CLANG_FORMAT names another binary.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cf=${CLANG_FORMAT:-clang-format}

usage() { sed -n '4,7p' "$0" | sed 's/^# *//' >&2; exit 2; }
[[ $# -ge 1 ]] || usage
mode=$1
shift
case "$mode" in --check | --stat | --apply) ;; *) usage ;; esac
if ! command -v "$cf" >/dev/null 2>&1; then
    echo "format.sh: $cf not found (apt-get install clang-format)" >&2
    exit 2
fi

# Whether path $1 matches a pattern of .clang-format-ignore.
ignored() {
    local pat
    [[ -f .clang-format-ignore ]] || return 1
    while IFS= read -r pat; do
        [[ -z "$pat" || "$pat" == \#* ]] && continue
        # shellcheck disable=SC2053  # the pattern is a glob on purpose
        [[ "$1" == $pat ]] && return 0
    done <.clang-format-ignore
    return 1
}

files=()
if [[ $# -gt 0 ]]; then
    files=("$@")
else
    while IFS= read -r f; do
        ignored "$f" || files+=("$f")
    done < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp')
fi

# Lines of $1 that clang-format would change (removed or rewritten).
changed_lines() {
    diff -U0 "$1" <("$cf" --style=file "$1") | grep -c '^-[^-]' || true
}

status=0
declare -A per_dir=()
total=0
for f in "${files[@]}"; do
    case "$mode" in
    --apply) "$cf" --style=file -i "$f" ;;
    --check)
        if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
            echo "$f"
            status=1
        fi
        ;;
    --stat)
        n=$(changed_lines "$f")
        d=$(dirname "$f")
        per_dir[$d]=$((${per_dir[$d]:-0} + n))
        total=$((total + n))
        ;;
    esac
done
if [[ $mode == --stat ]]; then
    for d in $(printf '%s\n' "${!per_dir[@]}" | sort); do
        printf '%6d  %s\n' "${per_dir[$d]}" "$d"
    done
    printf '%6d  lines in %d files\n' "$total" "${#files[@]}"
fi
if [[ $mode == --check && $status -ne 0 ]]; then
    echo "format.sh: the files above are not laid out as .clang-format says;" \
        "scripts/format.sh --apply FILE... fixes them" >&2
fi
exit $status
