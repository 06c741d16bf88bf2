#!/usr/bin/env bash
# Installs a built scopedgpu (wheel or sdist) into a fresh venv that cannot see this
# source tree, then runs what a new user would: `scopedgpu info`, `scopedgpu demo`, and
# tests/test_installed.py (copied out of the tree; pytest alone, no GLSL compiler; it runs
# `scopedgpu bench` too, with its plot where the bench extra brought matplotlib).
#   bash scripts/check_wheel.sh PYTHON DIST [PYTHON DIST ...]
# e.g. bash scripts/check_wheel.sh python3.9 dist/scopedgpu-0.1.0-cp39-abi3-manylinux_2_34_x86_64.whl
# Options through the environment:
#   CHECK_VENV_ARGS  extra `python -m venv` arguments (e.g. --system-site-packages)
#   CHECK_PIP_ARGS   extra `pip install` arguments (e.g. --no-index --find-links .whl)
#   CHECK_EXTRA      extras to install with it, comma-separated (e.g. glsl,bench); with
#                    `glsl`, also checks that sg.compile_glsl compiles and runs a shader
#                    with an empty PATH (no glslc, no glslangValidator) and a fresh shader
#                    cache (`bench` brings matplotlib: test_installed.py then checks the
#                    bench's plot)
# Prints one summary line per PYTHON/DIST pair; exits non-zero if any step failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] && [ $(($# % 2)) -eq 0 ] || { sed -n 2,16p "$0"; exit 2; }
summary=()
status=0
while [ $# -ge 2 ]; do
  py=$1; dist=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2
  work=$(mktemp -d)
  pyver=$("$py" -c 'import platform; print(platform.python_version())' 2>/dev/null) \
    || { summary+=("$py: not found"); status=1; continue; }
  # shellcheck disable=SC2086
  if ! "$py" -m venv ${CHECK_VENV_ARGS:-} "$work/venv" >"$work/venv.log" 2>&1; then
    # no ensurepip (Debian's python3 without python3-venv): a venv without pip of its own
    # runs the system's pip, which --system-site-packages lets it see
    rm -rf "$work/venv"
    # shellcheck disable=SC2086
    "$py" -m venv --without-pip ${CHECK_VENV_ARGS:-} "$work/venv" \
      || { cat "$work/venv.log"; summary+=("Python $pyver: no venv"); status=1; continue; }
  fi
  v=$work/venv/bin
  spec=$dist
  [ -n "${CHECK_EXTRA:-}" ] && spec="$dist[$CHECK_EXTRA]"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  if ! "$v/python" -m pip install -q --disable-pip-version-check ${CHECK_PIP_ARGS:-} "$spec" \
      >"$work/pip.log" 2>&1; then
    grep -v '^WARNING: Location' "$work/pip.log" | tail -20
    summary+=("Python $pyver $(basename "$dist"): pip install FAILED"); status=1; continue
  fi
  t1=$(date +%s.%N)
  install_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if ! "$v/python" -c 'import pytest' 2>/dev/null; then
    # shellcheck disable=SC2086
    "$v/python" -m pip install -q --disable-pip-version-check ${CHECK_PIP_ARGS:-} pytest \
      >>"$work/pip.log" 2>&1
  fi
  mkdir "$work/run" && cp "$root/tests/test_installed.py" "$work/run/"
  cd "$work/run" || exit 1
  where=$("$v/python" -c 'import scopedgpu, sys; print(scopedgpu.__file__)')
  case $where in
    "$work/venv/"*) loc=ok ;;
    *) loc="WRONG ($where)"; status=1 ;;
  esac
  echo "== Python $pyver, $(basename "$dist"): installed in ${install_s} s, imports from $where"
  res=()
  for step in "info" "demo --batch 64"; do
    # shellcheck disable=SC2086
    if "$v/scopedgpu" $step; then res+=("${step%% *} ok"); else res+=("${step%% *} FAILED"); status=1; fi
  done
  if [[ ",${CHECK_EXTRA:-}," == *,glsl,* ]]; then
    mkdir "$work/emptybin"
    if env PATH="$work/emptybin" SCOPEDGPU_CACHE_DIR="$work/cache" "$v/python" -c '
import shutil, numpy as np, scopedgpu as sg
assert shutil.which("glslc") is None and shutil.which("glslangValidator") is None
from scopedgpu.glsl import _compiler
print("compile_glsl with PATH empty uses", _compiler())
spirv = sg.compile_glsl("""
#version 450
layout(local_size_x = 64) in;
layout(binding = 0) buffer X { float x[]; };
void main() { uint i = gl_GlobalInvocationID.x; if (i < x.length()) x[i] = x[i] * K + 1.0; }
""", defines={"K": "3.0"})
with sg.Manager() as mgr:
    t = mgr.tensor(np.arange(1000, dtype=np.float32))
    mgr.run(sg.OpTensorSyncDevice([t]), sg.OpAlgoDispatch(mgr.algorithm([t], spirv)),
            sg.OpTensorSyncLocal([t]))
    assert np.array_equal(t.data(), np.arange(1000, dtype=np.float32) * 3 + 1)
print("compile_glsl from the glsl extra: OK,", len(spirv), "bytes of SPIR-V")
'; then res+=("glsl ok"); else res+=("glsl FAILED"); status=1; fi
  fi
  if "$v/python" -m pytest -q -p no:cacheprovider test_installed.py >"$work/pytest.log" 2>&1; then
    res+=("tests: $(tail -1 "$work/pytest.log" | tr -d '=' | sed 's/^ *//;s/ *$//')")
  else
    cat "$work/pytest.log"; res+=("tests FAILED: $(tail -1 "$work/pytest.log" | tr -d '=')"); status=1
  fi
  cd "$root" || exit 1
  summary+=("Python $pyver $(basename "$dist"): install ${install_s} s, location $loc, ${res[*]}")
  rm -rf "$work"
done
echo
echo "check_wheel summary:"
printf '  %s\n' "${summary[@]}"
exit $status
