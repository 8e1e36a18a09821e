#!/usr/bin/env bash
# Installs what the build needs (Debian packages, only when something is missing), configures
# build/ (release) if it is not configured yet, and builds it. Safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Debian packages, each with a way to see that what it provides is already here.
have_pkg() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = 'install ok installed' ]; }
missing=()
need() { # need PACKAGE CHECK-COMMAND...
    local pkg=$1
    shift
    if ! "$@" >/dev/null 2>&1 && ! have_pkg "$pkg"; then missing+=("$pkg"); fi
}
need meson command -v meson
need ninja-build command -v ninja
need pkg-config command -v pkg-config
need gcc command -v cc
need libc6-dev test -f /usr/include/stdio.h
need libcriterion-dev have_pkg libcriterion-dev
need python3-numpy /usr/bin/python3 -c 'import numpy'
# The digits data set of the training example and its test (sklearn/datasets/data/digits.csv.gz).
need python3-sklearn /usr/bin/python3 -c 'import sklearn'
# SQLite: the persistent autotune store.
need libsqlite3-dev pkg-config --exists sqlite3
# OpenBLAS: burnc-bench's yardstick for matmul (linked by the benchmark only).
need libopenblas-dev have_pkg libopenblas-dev
# LLVM 19: the cpu device's code generator (without it the build has no cpu device).
need llvm-19-dev command -v llvm-config-19
# The vulkan device: glslang and SPIRV-Tools (compiled in), the Vulkan headers and loader, and
# Mesa's lavapipe, a CPU Vulkan device for the tests.
need glslang-dev test -f /usr/include/glslang/Include/glslang_c_interface.h
need glslang-tools command -v glslangValidator
need spirv-tools pkg-config --exists SPIRV-Tools
need libvulkan-dev test -f /usr/include/vulkan/vulkan.h
need mesa-vulkan-drivers have_pkg mesa-vulkan-drivers

if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null; then sudo=(sudo); else
            echo "setup: not root and no sudo: install ${missing[*]} yourself" >&2
            exit 1
        fi
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ ! -f build/build.ninja ]; then
    meson setup build --buildtype=release
fi
ninja -C build
