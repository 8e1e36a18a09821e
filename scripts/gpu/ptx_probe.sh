#!/bin/sh
# PTX probe of the kernel IR (issue 3, item 1): see scripts/gpu/NOTES.md.
#   scripts/gpu/ptx_probe.sh [build]   here: compile build-ptxprobe/ptx_probe against LLVM 19, run the
#                                      host self-test, write the PTX and let ptxas (if present) report
#                                      registers/spills for sm_90
#   scripts/gpu/ptx_probe.sh run [ARGS] on the GPU machine (repo root, .devdeps and build-ptxprobe
#                                      carried): unpack the Debian libraries, run the probe, log to $OUT
set -e
cd "$(dirname "$0")/../.."
B=build-ptxprobe
case "${1:-build}" in
build)
    mkdir -p $B
    # -ffp-contract=off: the host reference must round every op, as the kernel IR does
    gcc -std=gnu11 -O2 -Wall -Wextra -ffp-contract=off -pthread -I/usr/local/cuda/include \
        $(llvm-config-19 --cflags) scripts/gpu/ptx_probe.c -o $B/ptx_probe \
        $(llvm-config-19 --ldflags --libs) -ldl -lm
    $B/ptx_probe --selftest --no-gpu --ptx $B/probe.ptx --ll $B/probe.ll
    PTXAS=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
    if [ -x "$PTXAS" ]; then
        "$PTXAS" -arch=sm_90 -v $B/probe.ptx -o $B/probe.cubin 2>&1 | grep -E 'Compiling|registers|spill|stack' || true
    fi
    ;;
run)
    shift
    # TOOLCHAIN.md's unpack line (skipped when the command already ran it)
    [ -e /tmp/deps/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1 ] ||
        { mkdir -p /tmp/deps && for f in .devdeps/*.deb; do dpkg -x $f /tmp/deps; done; }
    export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv || true
    OUTDIR=${OUT:-/tmp}
    $B/ptx_probe "$@" --ptx "$OUTDIR/probe.ptx" 2>&1 | tee "$OUTDIR/ptx_probe.log"
    ;;
*)
    echo "usage: $0 [build | run [ARGS]]" >&2
    exit 2
    ;;
esac
