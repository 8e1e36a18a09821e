#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), then runs the demo and the benchmark on the default
# device (BURNC_DEVICE if set). Extra arguments go to burnc-bench.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
echo
echo "== burnc-demo"
build/burnc-demo
echo
echo "== burnc-bench"
build/bench/burnc-bench "$@"
