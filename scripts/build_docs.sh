#!/usr/bin/env bash
# Builds the docs site (mkdocs.yml: docs/, README.md as the home page, CHANGELOG.md, and the
# API reference from the docstrings) with warnings as errors, as CI does:
#   bash scripts/build_docs.sh [OUTDIR]      (default build/site)
# The tools are pyproject.toml's [docs] extra, installed into a venv of their own,
# build/docs-venv, made on first use and installed into again only when the extra changes.
# The package itself is not installed there: mkdocstrings reads scopedgpu's source
# (Griffe's static analysis), so the docs build needs no compiler, Vulkan or built shim.
# Needs python3 (3.9+) with venv and the package index (on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/site}
venv=build/docs-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py=$venv/bin/python
"$py" -c 'import tomllib' 2>/dev/null || "$py" -m pip install -q --disable-pip-version-check tomli
reqs=$("$py" - <<'PY'
try:
    import tomllib
except ImportError:   # Python < 3.11
    import tomli as tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["docs"]))
PY
)
stamp=$venv/docs-requirements.txt
if [ "$reqs" != "$(cat "$stamp" 2>/dev/null)" ]; then
  printf '%s\n' "$reqs" >"$venv/requirements.new"
  "$py" -m pip install -q --disable-pip-version-check -r "$venv/requirements.new"
  mv "$venv/requirements.new" "$stamp"
fi
# NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor (pyproject keeps
# mkdocs below 2), printed on every build; not a warning of this build.
NO_MKDOCS_2_WARNING=1 "$venv/bin/mkdocs" build --strict -d "$out"
echo "built the docs site into $out (open $out/index.html)"
