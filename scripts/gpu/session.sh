#!/bin/bash
# One GPU-machine call that measures what it is asked to, in order, within a time budget.
# Run there from the project root after TOOLCHAIN.md's unpack line, carrying .devdeps, the build
# pack (scripts/gpu/stage.sh) and, for Vulkan, the loader packages:
#
#   scripts/gpu/session.sh PACK_DIR SECONDS STEP...
#
# Logs: one per step, packed after each step into $OUT/logs.tar.gz (or ./gpu-logs.tar.gz).
#
# Steps, run in the order given, each bounded so the call ends in time:
#   compare[:GROUP]   bench/compare_torch.py (burnc-bench on cuda:0, then PyTorch, same run);
#                     GROUP is its workload list, commas for spaces (default: its default list)
#   suite:NAME[:DEV]  the test suite NAME against DEV (default cuda:0)
#   bench:NAMES:DEV   burnc-bench on DEV, NAMES comma-separated
#   VAR=VALUE+STEP    STEP with VAR=VALUE in its environment (e.g. BURNC_CUDA_MMA_TILE=0+bench:...)
# A step's time bound is STEP@SECONDS (default 120).
set -u
cd "$(dirname "$0")/../.."
pack=${1:?pack dir}; budget=${2:?seconds}; shift 2
if [ -n "${OUT:-}" ]; then pack_to=$OUT/logs.tar.gz; else pack_to=$PWD/gpu-logs.tar.gz; fi
out=$(mktemp -d /tmp/gpu-logs.XXXXXX)
start=$SECONDS
step() { # step NAME SECONDS CMD...: CMD with a bound, its output in $out/NAME.log
    local name=$1 t=$2; shift 2
    local l=$((budget - (SECONDS - start)))
    [ "$l" -lt 10 ] && { echo "== $name: no time left"; return; }
    [ "$t" -gt "$l" ] && t=$l
    echo "== $name (bound ${t}s)"
    timeout "$t" "$@" >"$out/$name.log" 2>&1; echo "   exit $? after $((SECONDS - start))s"
    grep -a -h 'Synthesis' "$out/$name.log" | tail -1
    tar -czf "$pack_to" -C "$out" .
}
tar -xJf "$pack"/*.tar.xz || { echo "session: cannot unpack $pack"; exit 1; }
B=$PWD/$(basename "$pack" -pack)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
export BURNC_CACHE_DIR=$(mktemp -d) BURNC_TEST_DATA=$PWD/tests/data BURNC_TUNE=$B/burnc-tune
[ -e "$B/burnc-llvm.so" ] && export BURNC_LLVM_MODULE=$B/burnc-llvm.so
[ -f "$B/digits.csv" ] && export BURNC_DIGITS_CSV=$B/digits.csv
export PYTHONUNBUFFERED=1
n=0
for s in "$@"; do
    n=$((n + 1)) t=120
    case $s in *@*) t=${s##*@} s=${s%@*} ;; esac
    envs=()
    while [[ $s == *=*+* ]]; do envs+=("${s%%+*}") s=${s#*+}; done
    IFS=: read -r kind a b <<<"$s"
    tag=$(tr -c 'A-Za-z0-9_.\n-' _ <<<"${envs[*]:-}" | tr -d '\n')
    case $kind in
    compare) step "$n-compare-${a:-default}$tag" "$t" env "${envs[@]}" python3 bench/compare_torch.py --bench "$B/bench/burnc-bench" \
                 --json "$out/$n-compare.json" ${a:+${a//,/ }} ;;
    suite) (cd tests && step "$n-$a-$(tr -d : <<<"${b:-cuda0}")$tag" "$t" env "${envs[@]}" BURNC_TEST_DEVICE="${b:-cuda:0}" \
                "$B/tests/test_$a" -j8) ;;
    bench) step "$n-bench-$(tr -d : <<<"$b")$tag" "$t" env "${envs[@]}" "$B/bench/burnc-bench" --device "$b" ${a//,/ } ;;
    *) echo "session: unknown step $s" ;;
    esac
done
