#!/bin/bash
# Packs a release build for the GPU machine: what the tests, the benchmark and the examples need
# to run there, stripped, as OUT_DIR-pack/OUT_DIR.tar.xz. Every test executable links libburnc
# statically, glslang and SPIRV-Tools included (~8 MB each, ~125 MB in all); xz shares that
# content across them (~9 MB), so the pack travels with .devdeps (~42 MB) within the 64 MiB a
# GPU call may carry (TOOLCHAIN.md, "The GPU machine").
#
#   scripts/gpu/stage.sh [BUILD_DIR] [OUT_DIR]     (defaults: build, build-gpu)
#
# On the GPU machine (carry .devdeps and OUT_DIR-pack), after TOOLCHAIN.md's unpack line:
#   tar -xJf build-gpu-pack/build-gpu.tar.xz
#   scripts/gpu-check.sh build-gpu          # every suite against cuda:0, then burnc-bench
#   bench/compare_torch.py --bench build-gpu/bench/burnc-bench   # burnc / PyTorch, same run
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:-build} out=${2:-build-gpu}
[ -f "$src/build.ninja" ] || { echo "stage: $src is not a build directory" >&2; exit 1; }
ninja -C "$src"
rm -rf "$out"
mkdir -p "$out/tests" "$out/bench"
copy() { # copy FILE DEST: a stripped copy (symlinks kept as links)
    if [ -L "$1" ]; then cp -P "$1" "$2"; else cp "$1" "$2" && strip --strip-unneeded "$2/${1##*/}" 2>/dev/null || true; fi
}
for f in "$src"/tests/test_*; do [ -f "$f" ] && [ -x "$f" ] && copy "$f" "$out/tests"; done
for f in "$src"/libburnc.so "$src"/libburnc.so.[0-9]* "$src"/burnc-llvm.so "$src"/burnc-tune "$src"/burnc-digits "$src"/burnc-demo; do
    if [ -L "$f" ] || [ -f "$f" ]; then copy "$f" "$out"; fi
done
[ -f "$src/digits.csv" ] && cp "$src/digits.csv" "$out/"
copy "$src/bench/burnc-bench" "$out/bench"
mkdir -p "$out-pack"
tar -cf - "$out" | xz -6 --lzma2=dict=64MiB >"$out-pack/$out.tar.xz"
echo "stage: $out-pack/$out.tar.xz: $(du -sh "$out-pack/$out.tar.xz" | cut -f1) (.devdeps: $(du -sh .devdeps 2>/dev/null | cut -f1))"
