#!/bin/bash
# Runs the whole test suite against cuda:0, then burnc-bench on cuda:0, on the GPU machine.
#
#   scripts/gpu-check.sh [BUILD_DIR]     (from the project root; BUILD_DIR defaults to build)
#
# The build folder is made elsewhere (a release build with the tests and the bench) and carried
# here with the project; the Debian libraries its binaries need (LLVM 19, Criterion, SQLite,
# OpenBLAS) come as .devdeps/*.deb (TOOLCHAIN.md, "The GPU machine") and are unpacked into
# /tmp/deps (once) and put first on LD_LIBRARY_PATH unless it already has them. meson need not exist here: each
# suite's executable runs directly, with the environment tests/meson.build gives it, and
# BURNC_TEST_DEVICE=cuda:0 for the suites that honour that variable. Prints Criterion's
# synthesis per suite, a total, and the benchmark table (BENCH_WORKLOADS=NAMES picks its
# workloads, BENCH_SKIP=REGEX leaves some out: see below; SUITE_TIMEOUT=SECONDS bounds each
# suite, default 1800: on cuda:0 the fusion and random suites compile thousands of distinct kernels, each through LLVM and the driver's JIT). Exit status: 0 when every suite passed, 1 otherwise (or when something is
# missing).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
B=${1:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
[ -d "$B/tests" ] || { echo "gpu-check: $B/tests not found (build with the tests first)" >&2; exit 1; }

DEPS=/tmp/deps/usr/lib/x86_64-linux-gnu
if [ -d .devdeps ] && [[ ":${LD_LIBRARY_PATH:-}:" != *":$DEPS:"* ]]; then
    if [ ! -e /tmp/deps/.unpacked ]; then
        mkdir -p /tmp/deps
        for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/deps; done
        touch /tmp/deps/.unpacked
    fi
    export LD_LIBRARY_PATH=$DEPS:$DEPS/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,temperature.gpu --format=csv,noheader

# What tests/meson.build puts in every suite's environment; a fresh kernel cache per run.
CACHE=$(mktemp -d /tmp/burnc-gpu-check.XXXXXX)
export BURNC_TEST_DATA=$ROOT/tests/data
export BURNC_CACHE_DIR=$CACHE
export BURNC_TUNE=$B/burnc-tune
[ -e "$B/burnc-llvm.so" ] && export BURNC_LLVM_MODULE=$B/burnc-llvm.so
digits=$(find "$B" -maxdepth 3 -name 'digits*.csv' 2>/dev/null | head -1)
[ -n "$digits" ] && export BURNC_DIGITS_CSV=$digits

total=0 passing=0 failing=0 crashing=0 bad_suites=""
for exe in "$B"/tests/test_*; do
    [ -x "$exe" ] && [ -f "$exe" ] || continue
    suite=${exe##*/test_}
    env_dev=()
    if grep -q BURNC_TEST_DEVICE "tests/test_$suite.c" 2>/dev/null; then
        env_dev=(BURNC_TEST_DEVICE=cuda:0)
    fi
    log=$CACHE/$suite.log
    # the suites' working directory is tests/, as under meson
    (cd tests && env "${env_dev[@]}" timeout "${SUITE_TIMEOUT:-1800}" "$exe" -j8 >"$log" 2>&1)
    rc=$?
    line=$(grep -a 'Synthesis:' "$log" | tail -1)
    if [ -z "$line" ]; then
        printf '%-12s no synthesis (exit %d); last lines:\n' "$suite" "$rc"
        tail -5 "$log" | sed 's/^/    /'
        bad_suites="$bad_suites $suite"
        continue
    fi
    printf '%-12s %s%s\n' "$suite" "${env_dev[*]:+[cuda:0] }" "${line#*Synthesis: }"
    t=$(sed -n 's/.*Tested: \([0-9]*\).*/\1/p' <<<"$line")
    p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$line")
    f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$line")
    c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$line")
    total=$((total + ${t:-0})) passing=$((passing + ${p:-0})) failing=$((failing + ${f:-0}))
    crashing=$((crashing + ${c:-0}))
    if [ "${f:-0}" != 0 ] || [ "${c:-0}" != 0 ] || [ "$rc" != 0 ]; then
        bad_suites="$bad_suites $suite"
        grep -a -E '^\[----\]|^\[FAIL\]' "$log" | head -20 | sed 's/^/    /'
    fi
done
echo "total: Tested: $total | Passing: $passing | Failing: $failing | Crashing: $crashing"
[ -n "$bad_suites" ] && echo "suites with failures:$bad_suites (logs in $CACHE)"

# Which workloads: BENCH_WORKLOADS=NAMES picks them ("all": every one); else every workload but
# those whose name matches BENCH_SKIP, an extended regex. Its default leaves out the training and
# the GPU matmul workloads, which take minutes while matmuls on cuda run on the host
# (BENCH_SKIP='^train_' keeps the matmul ones, BENCH_SKIP= keeps them all). The name gelu still
# selects matmul_gelu (names are substrings); it skips itself while matmuls run on the host.
BENCH_SKIP=${BENCH_SKIP-'^(train_|matmul_(f32|tf32|bf16|f16|gelu)$)'}
BENCH_WORKLOADS=${BENCH_WORKLOADS:-$("$B/bench/burnc-bench" --list 2>/dev/null | awk '{print $1}' |
    { if [ -n "$BENCH_SKIP" ]; then grep -Ev "$BENCH_SKIP"; else cat; fi; })}
[ "$BENCH_WORKLOADS" = all ] && BENCH_WORKLOADS=
if [ -x "$B/bench/burnc-bench" ]; then
    echo
    # shellcheck disable=SC2086 # one argument per workload name
    "$B/bench/burnc-bench" --device cuda:0 $BENCH_WORKLOADS || echo "burnc-bench exited with status $?"
else
    echo "gpu-check: $B/bench/burnc-bench not built: no benchmark" >&2
fi
[ -z "$bad_suites" ]
