#!/bin/bash
# One GPU-machine call that measures everything, in order of importance, within a time budget.
# Run there from the project root after TOOLCHAIN.md's unpack line, carrying .devdeps, the build
# pack (scripts/gpu/stage.sh) and, for Vulkan, the loader packages:
#
#   scripts/gpu/session.sh PACK_DIR [SECONDS]      (logs go to $OUT, or ./gpu-logs)
#
# Steps: unpack the build; burnc-bench against PyTorch (compare_torch.py, which runs burnc-bench
# on cuda:0 itself); the cuda, ops and matmul suites on cuda:0; burnc-bench on vulkan:0; then the
# other suites on cuda:0 while time remains. Each step is bounded so the call ends in time.
set -u
cd "$(dirname "$0")/../.."
pack=${1:?pack dir}; budget=${2:-560}
out=${OUT:-$PWD/gpu-logs}; mkdir -p "$out"
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
step() { # step NAME SECONDS CMD...: runs CMD with a bound, output to $out/NAME.log and stdout tail
    local name=$1 t=$2; shift 2
    local l; l=$(left); [ "$l" -lt 10 ] && { echo "== $name: no time left"; return; }
    [ "$t" -gt "$l" ] && t=$l
    echo "== $name (bound ${t}s)"
    timeout "$t" "$@" >"$out/$name.log" 2>&1; echo "   exit $? after $((SECONDS - start))s"
}
tar -xJf "$pack"/*.tar.xz || { echo "session: cannot unpack $pack"; exit 1; }
B=$PWD/$(basename "$pack" -pack)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
export BURNC_CACHE_DIR=$(mktemp -d) BURNC_TEST_DATA=$PWD/tests/data BURNC_TUNE=$B/burnc-tune
[ -e "$B/burnc-llvm.so" ] && export BURNC_LLVM_MODULE=$B/burnc-llvm.so
[ -f "$B/digits.csv" ] && export BURNC_DIGITS_CSV=$B/digits.csv
export PYTHONUNBUFFERED=1
step compare "${COMPARE_S:-240}" python3 bench/compare_torch.py --bench "$B/bench/burnc-bench" --json "$out/compare.json"
suite() { # suite NAME DEVICE SECONDS
    (cd tests && step "$1-${2/:/}" "$3" env BURNC_TEST_DEVICE="$2" "$B/tests/test_$1" -j8)
}
for s in ${FIRST_SUITES:-cuda ops}; do suite "$s" cuda:0 90; done
step bench-vulkan 60 "$B/bench/burnc-bench" --device vulkan:0 gelu softmax bcast sum
suite ops vulkan:0 60
for s in ${LATER_SUITES:-fusion random autodiff nn}; do suite "$s" cuda:0 120; done
grep -a -h 'Synthesis' "$out"/*.log /dev/null | head -20
