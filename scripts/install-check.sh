#!/usr/bin/env bash
# Installs a build (default build/) into a temporary DESTDIR, then compiles the example at the
# top of include/burnc.h OUTSIDE the tree with `cc app.c $(pkg-config --cflags --libs burnc)`,
# runs it against the installed library and checks what it prints.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
build=${1:-build}

fail() { echo "install-check: FAILED: $*" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest

meson install -C "$build" --destdir "$dest" >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log" >&2
    fail "meson install"
}
pc=$(find "$dest" -name burnc.pc -print -quit)
[ -n "$pc" ] || fail "no burnc.pc installed"
[ -n "$(find "$dest" -name burnc.h -print -quit)" ] || fail "no burnc.h installed"
[ -n "$(find "$dest" -path '*/bin/burnc-bench' -print -quit)" ] || fail "no burnc-bench installed"
# A build with the code generator installs it beside libburnc.so, where the cpu device looks.
if [ -f "$build/burnc-llvm.so" ]; then
    so=$(find "$dest" -name 'libburnc.so' -print -quit)
    [ -n "$so" ] && [ -f "$(dirname "$so")/burnc-llvm.so" ] || fail "burnc-llvm.so is not installed beside libburnc.so"
fi

# The example: the lines of the header comment from `#include <burnc.h>` to the closing brace
# of main, without the comment's " *     " margin.
app=$tmp/app
mkdir -p "$app"
sed -n '/^ \*     #include <burnc.h>/,/^ \*     }$/p' "$root/include/burnc.h" |
    sed -e 's/^ \*     //' -e 's/^ \*$//' >"$app/app.c"
grep -q 'int main' "$app/app.c" || fail "no example found in include/burnc.h"

# pkg-config paths point at the prefix; the sysroot variable redirects them into DESTDIR.
export PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_SYSROOT_DIR=$dest
cflags=$(pkg-config --cflags burnc) || fail "pkg-config --cflags burnc"
libs=$(pkg-config --libs burnc) || fail "pkg-config --libs burnc"
libdir=$(pkg-config --libs-only-L burnc | sed -e 's/^ *-L//' -e 's/ .*//')
[ -d "$libdir" ] || fail "library directory $libdir (from pkg-config) does not exist"
case "$cflags $libs" in *"$dest"*) ;; *) fail "pkg-config flags do not point into the install: $cflags $libs" ;; esac

cd "$app"
# shellcheck disable=SC2086 # the flags are lists of words
cc -std=c11 -Wall -Wextra -o app app.c $cflags $libs || fail "compiling the header's example"
# Kernels compiled by the check go to a cache of its own (burnc wants it private: mode 0700).
mkdir -m 700 "$tmp/cache"
export BURNC_CACHE_DIR=$tmp/cache

# y[r] = sum over the row of 2 * exp(x): rows {1,2,3} and {4,5,6}.
want=$(awk 'BEGIN { printf "%g %g", 2 * (exp(1) + exp(2) + exp(3)), 2 * (exp(4) + exp(5) + exp(6)) }')
# On the default device, then on ref (the same unless the default is another device).
for device in "" ref; do
    out=$(BURNC_DEVICE=$device LD_LIBRARY_PATH=$libdir ./app) ||
        fail "the example exited with an error on ${device:-the default device}"
    echo "install-check: on ${device:-the default device} the example printed: $out"
    awk -v out="$out" -v want="$want" 'BEGIN {
        if (split(out, got, " ") != 2 || split(want, w, " ") != 2) exit 1
        for (i = 1; i <= 2; i++) {
            d = got[i] - w[i]; if (d < 0) d = -d
            if (d > 1e-4 * w[i]) exit 1
        }
    }' || fail "expected $want"
done
# The program must have used the installed library. ldd's output is captured first: under
# pipefail, `ldd | grep -q` fails whenever grep exits before ldd has written everything.
linked=$(LD_LIBRARY_PATH=$libdir ldd ./app) || fail "ldd ./app"
case "$linked" in *"$dest"*) ;; *) fail "the example did not load the installed libburnc: $linked" ;; esac
echo "install-check: ok"
