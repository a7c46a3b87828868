# pcflags.sh: what test_install.sh and test_deb.sh ask pkg-config, sourced
# by them (each defines fail).
#
#   pc_flags SYSROOT LIBDIR WANT_L WHAT
# The flags pkg-config gives for distlock from LIBDIR/pkgconfig under
# SYSROOT, in $flags; fails unless they have -L<WANT_L> (WHAT says what
# that directory is).
pc_flags() {
    PKG_CONFIG=${PKG_CONFIG:-pkg-config}
    flags=$(PKG_CONFIG_PATH="$2/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
            PKG_CONFIG_SYSROOT_DIR="$1" \
            "$PKG_CONFIG" --cflags --libs distlock) || fail "pkg-config distlock failed"
    case "$flags" in
    *"-L$3"*) ;;
    *) fail "pkg-config's -L is not $4: $flags" ;;
    esac
}
