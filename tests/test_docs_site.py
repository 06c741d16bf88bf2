"""The docs site (mkdocs.yml): its nav lists every page, the API reference (docs/api.md)
renders every module users import, and the built site documents every name those modules'
`__all__` export and none of the package-internal members.

The last test builds the site with mkdocs (--strict, as scripts/build_docs.sh does) and
reads the inventory mkdocstrings writes (objects.inv); it skips where mkdocs is not
installed. CI installs it: .ci/run runs scripts/build_docs.sh, which makes
build/docs-venv, before the test suite."""
from __future__ import annotations

import importlib
import inspect
import os
import re
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GENERATED = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}   # docs/site_hooks.py


def user_modules() -> list[str]:
    """scopedgpu and the modules docs/architecture.md lists as the layers for users (less
    __main__, the command line)."""
    row = next(line for line in (ROOT / "docs" / "architecture.md").read_text().splitlines()
               if "the layers for users" in line)
    names = [m[:-3] for m in re.findall(r"`(\w+\.py)`", row) if m != "__main__.py"]
    assert {"kp", "aio", "dask", "testing"} <= set(names), row
    return ["scopedgpu"] + [f"scopedgpu.{n}" for n in names]


def test_the_nav_lists_every_page():
    nav = re.findall(r"^  - [^:\n]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert sorted(nav) == sorted(pages | set(GENERATED))
    assert not pages & set(GENERATED), "a page of docs/ has the name of a generated one"
    assert all((ROOT / src).exists() for src in GENERATED.values())


def test_the_api_reference_renders_every_user_module():
    directives = re.findall(r"^::: (\S+)$", (ROOT / "docs" / "api.md").read_text(), re.M)
    assert set(user_modules()) <= set(directives)


def inventory(site: Path) -> set[str]:
    """The object names of a Sphinx inventory (objects.inv): four header lines, then
    zlib-compressed lines 'name domain:role priority uri display-name'."""
    body = (site / "objects.inv").read_bytes().split(b"\n", 4)[4]
    return {line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines()}


def mkdocs() -> str | None:
    venv = ROOT / "build" / "docs-venv" / "bin" / "mkdocs"
    return str(venv) if venv.exists() else shutil.which("mkdocs")


def internal_members(cls: type) -> set[str]:
    """Members whose docstring, in any class that defines them, says package-internal."""
    out = set()
    for name in dir(cls):
        for k in cls.__mro__:
            if name in vars(k) and "package-internal" in (inspect.getdoc(vars(k)[name]) or ""):
                out.add(name)
    return out


def test_the_site_documents_every_public_name_and_no_internal_one(tmp_path):
    exe = mkdocs()
    if exe is None:
        pytest.skip("mkdocs is not installed: bash scripts/build_docs.sh installs it into "
                    "build/docs-venv (CI does)")
    res = subprocess.run([exe, "build", "--strict", "-d", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    documented = inventory(tmp_path / "site")
    missing, internal = [], []
    for modname in user_modules():
        mod = importlib.import_module(modname)
        for name in mod.__all__:
            obj = getattr(mod, name)
            fn = getattr(obj, "__wrapped__", obj)   # sg_manager: pytest's fixture wrapper
            # a name reached through the module's __getattr__ or defined under another name
            # (LifetimeMachine, sg_manager) is documented where it is defined
            where = {f"{modname}.{name}"} | ({f"{fn.__module__}.{fn.__qualname__}"}
                                            if hasattr(fn, "__qualname__") else set())
            if not where & documented:
                missing.append(f"{modname}.{name}")
            if inspect.isclass(obj):
                internal += [f"{modname}.{name}.{m}" for m in internal_members(obj)
                             if f"{modname}.{name}.{m}" in documented]
    assert missing == [], "not in the API reference"
    assert internal == [], "package-internal members in the API reference"
    # the check above has something to find: the members that must stay out are there
    assert {"read_back", "write_mapped", "ranges"} <= internal_members(
        importlib.import_module("scopedgpu").Tensor)
    assert "scopedgpu.Tensor.data" in documented and "scopedgpu.kp.Manager.sequence" in documented
