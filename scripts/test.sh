#!/usr/bin/env bash
# Sets up and builds, then runs every test suite twice and the install check:
#   (a) the Criterion suites in build/ (release),
#   (b) the same suites in build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer),
#   (c) scripts/install-check.sh (install, then build and run a program against the install).
# The last line printed is "N passed, N failed" (", N skipped" when any were skipped),
# counted over every test case of every suite of both builds plus the install check.
# Exits nonzero if anything failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

passed=0 failed=0 skipped=0

summary() {
    local line="$passed passed, $failed failed"
    if ((skipped > 0)); then line+=", $skipped skipped"; fi
    echo "$line"
    if ((failed > 0)); then exit 1; fi
    exit 0
}

# Adds the test cases of one meson test log (Criterion's TAP output) to the counters. A suite
# that failed without reporting a failing case (it crashed, did not build or start, or the
# sanitizer failed it at exit) counts as one failure, and so does each case it planned but
# never reported.
count_log() {
    local log=$1 p f s
    if [ ! -f "$log" ]; then
        echo "test: no test log at $log: the suites did not run" >&2
        failed=$((failed + 1))
        return
    fi
    read -r p f s < <(awk '
        function close_suite() {
            if (!in_suite) return
            if (result !~ /^exit status 0$/ && sf == 0) sf++
            if (plan > sp + sf + ss) sf += plan - (sp + sf + ss)
            P += sp; F += sf; S += ss
            in_suite = 0
        }
        /^=+ [0-9]+\/[0-9]+ =+$/ { close_suite(); in_suite = 1; result = ""; plan = 0; sp = sf = ss = 0; next }
        /^Summary of Failures:/  { close_suite(); next }
        !in_suite                { next }
        /^result:/               { sub(/^result:[ \t]*/, ""); result = $0; next }
        /^1\.\.[0-9]+/           { plan = substr($0, 4) + 0; next }
        /^not ok/                { sf++; next }
        /^ok/                    { if ($0 ~ /# SKIP/) ss++; else sp++; next }
        END { close_suite(); printf "%d %d %d\n", P, F, S }
    ' "$log")
    echo "test: $log: $p passed, $f failed, $s skipped"
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}

# Runs the suites of one build directory and counts them. Sanitizer reports are written to
# tests/sanitizer-logs/ (Criterion does not show a test child's stderr): any are printed.
run_suites() {
    local dir=$1 logs=$1/tests/sanitizer-logs f
    rm -f "$dir/meson-logs/testlog.txt"
    mkdir -p "$logs" && rm -f "$logs"/*
    echo "== meson test -C $dir"
    meson test -C "$dir" --print-errorlogs || true
    count_log "$dir/meson-logs/testlog.txt"
    for f in "$logs"/*; do
        [ -f "$f" ] || continue
        echo "== sanitizer report $f"
        head -n 80 "$f"
    done
}

echo "== setup"
if ! scripts/setup.sh; then
    echo "test: setup or build failed" >&2
    failed=$((failed + 1))
    summary
fi

# (a) the release build
run_suites build

# (b) the sanitizer build
echo "== sanitizer build"
if [ ! -f build-asan/build.ninja ]; then
    meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false || true
fi
if [ -f build-asan/build.ninja ] && ninja -C build-asan; then
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 run_suites build-asan
else
    echo "test: the sanitizer build failed" >&2
    failed=$((failed + 1))
fi

# (c) the installed library, used from outside the tree
echo "== install check"
if scripts/install-check.sh build; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi

summary
