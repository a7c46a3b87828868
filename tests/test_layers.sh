#!/bin/sh
# test_layers.sh: the library's folders are its layers.  Each file under
# src/ may include headers of its own folder and of the folders below it,
# never of one above: base < net < route < engine < kinds < api < preload.
# A quoted include names a header of another folder by its folder
# ("engine/engine.h"); a bare name must be a header of the file's own folder
# (or one made by the build, such as scripts.h).  Inside a folder, the
# floors listed below hold too.  Prints each include that breaks the rule
# and fails.
set -u
. "$(dirname "$0")/verdict.sh"
src=${srcdir:-$(dirname "$0")/..}/src
layers="base net route engine kinds api preload"

rank() {
    r=0
    for l in $layers; do
        [ "$l" = "$1" ] && { echo $r; return; }
        r=$((r + 1))
    done
    echo -1
}

bad=0
checked=0
for dir in "$src"/*/; do
    folder=$(basename "$dir")
    own=$(rank "$folder")
    if [ "$own" -lt 0 ]; then
        echo "not ok: src/$folder/ is not a layer (known: $layers)"
        bad=$((bad + 1))
        continue
    fi
    for f in "$dir"*.c "$dir"*.h; do
        [ -e "$f" ] || continue
        # every quoted include: folder/name.h or name.h
        incs=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
        for inc in $incs; do
            checked=$((checked + 1))
            case $inc in
            */*/* | ../* | ./*)
                echo "not ok: src/$folder/$(basename "$f") includes \"$inc\": name a header as folder/name.h"
                bad=$((bad + 1)) ;;
            */*)
                to=${inc%%/*}
                r=$(rank "$to")
                if [ "$r" -lt 0 ] || [ ! -e "$src/$inc" ]; then
                    echo "not ok: src/$folder/$(basename "$f") includes \"$inc\", which is no header of a layer"
                    bad=$((bad + 1))
                elif [ "$r" -gt "$own" ]; then
                    echo "not ok: src/$folder/$(basename "$f") includes \"$inc\": $folder lies below $to"
                    bad=$((bad + 1))
                fi ;;
            *)
                for other in "$src"/*/"$inc"; do
                    [ -e "$other" ] || continue
                    [ "$other" = "$dir$inc" ] && continue
                    echo "not ok: src/$folder/$(basename "$f") includes \"$inc\" by its bare name; it lives in $(basename "$(dirname "$other")")/"
                    bad=$((bad + 1))
                done ;;
            esac
        done
    done
done

# Floors inside a folder: a header and the files below it that may not
# include it (topo.c asks where a key lives, route.c calls there; the
# renewal thread and the pub/sub thread sit under what every kind shares).
floors="route/route.h:route/topo.h,route/topo.c,route/names.h,route/names.c
engine/engine.h:engine/internal.h,engine/renew.c,engine/pubsub.h,engine/pubsub_int.h,engine/pubsub.c,engine/pubsub_thread.c"
for floor in $floors; do
    hdr=${floor%%:*}
    name=$(basename "$hdr")
    for low in $(echo "${floor#*:}" | tr ',' ' '); do
        [ -e "$src/$low" ] || continue
        checked=$((checked + 1))
        if sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$src/$low" |
           grep -qx "$name\|$hdr"; then
            echo "not ok: src/$low includes \"$name\", a floor above it in its folder"
            bad=$((bad + 1))
        fi
    done
done

verdict "$bad" "include(s) against the layers ($layers, lowest first)" \
    "$checked includes in src/ follow the layers ($layers, lowest first)"
