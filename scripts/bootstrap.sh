#!/usr/bin/env bash
# Sets up scopedgpu on a fresh Debian/Ubuntu machine, with or without a GPU:
#   system packages: the Vulkan loader and headers, Mesa's lavapipe (Vulkan on the CPU),
#   glslc, the Khronos validation layer, vulkan-tools, a C compiler (the extension itself
#   builds against csrc/vendor's Vulkan headers; the bench's C yardstick uses the system's);
#   then a virtual environment .venv with scopedgpu (editable) and its test and lint tools
#   (pytest, hypothesis, mypy, ruff: the `dev` extra).
# Safe to run again: it installs only what is missing, and rebuilds the extension.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(mesa-vulkan-drivers libvulkan1 libvulkan-dev glslc spirv-tools vulkan-validationlayers
      vulkan-tools gcc)
python3 -c 'import ensurepip, venv' 2>/dev/null || pkgs+=(python3-venv)
# The extension is compiled against Python.h.
python3 -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || pkgs+=(python3-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "bootstrap: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,validate]'
.venv/bin/python -c 'import scopedgpu, sys; print("bootstrap: scopedgpu", scopedgpu.__version__, "ready in .venv", file=sys.stderr)'
