"""Writes docs/api.md from the docstrings of scopedgpu's public names.

    python docs/gen_api.py          # rewrite docs/api.md
    python docs/gen_api.py --check  # exit 1 if docs/api.md is stale (tests/test_docs.py)

Documented: every name in the __all__ of scopedgpu, scopedgpu.testing and scopedgpu.aio;
for classes, their public methods and properties (inherited ones included, object's excluded).
"""
from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "api.md"


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj)
    return doc.strip() if doc else "(undocumented)"


class _Raw:
    """An annotation string shown as written (no quotes), a type by its short name."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _plain(value: Any) -> Any:
    if isinstance(value, str):
        return _Raw(value)
    if isinstance(value, type):
        mod = value.__module__
        return _Raw(f"np.{value.__name__}" if mod == "numpy" else value.__name__)
    return value


def _sig(obj: Any, name: str) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    params = []
    for p in sig.parameters.values():
        ann = p.annotation if p.annotation is p.empty else _plain(p.annotation)
        default = p.default if p.default is p.empty or not isinstance(p.default, type) \
            else _plain(p.default)
        params.append(p.replace(annotation=ann, default=default))
    ret = sig.return_annotation
    sig = sig.replace(parameters=params,
                      return_annotation=ret if ret is sig.empty else _plain(ret))
    return f"{name}{sig}"


def _members(cls: type) -> list[tuple[str, Any]]:
    out = []
    for name in sorted(dir(cls)):
        if name.startswith("_") and name not in ("__enter__", "__exit__", "__len__",
                                                 "__array__"):
            continue
        if name in ("__enter__", "__exit__", "__len__", "__array__"):
            continue  # listed in the class line below
        attr = inspect.getattr_static(cls, name)
        if "package-internal" in (inspect.getdoc(attr) or ""):
            continue  # the package's own interface between its modules, not the user's
        # Only what scopedgpu defines: members inherited from another library's base
        # (hypothesis's RuleBasedStateMachine) are that library's to document, and
        # would tie this file to its version (6.98 and 6.170 list different ones).
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or not owner.__module__.startswith("scopedgpu"):
            continue
        out.append((name, attr))
    return out


def _class(name: str, cls: type) -> list[str]:
    lines = []
    bases = [b.__name__ for b in cls.__bases__
             if b is not object and not b.__name__.startswith(("Child", "NoCopy", "_"))]
    base = f"({', '.join(bases)})" if bases else ""
    if dataclasses.is_dataclass(cls):
        lines.append(f"### class `{name}{base}`\n")
        lines.append(_doc(cls) + "\n")
        lines.append("Fields: " + ", ".join(
            f"`{f.name}: {f.type}`" for f in dataclasses.fields(cls)) + "\n")
        return lines
    if issubclass(cls, BaseException):
        lines.append(f"### exception `{name}{base}`\n")
        lines.append(_doc(cls) + "\n")
        return lines
    # Objects a Manager makes (their __init__ takes the manager) show no constructor.
    made = "manager" in inspect.signature(cls.__init__).parameters
    init = _sig(cls.__init__, name).replace("(self, ", "(").replace("(self)", "()") \
        if "__init__" in vars(cls) and not made else name
    lines.append(f"### class `{init}`\n")
    if bases:
        lines.append(f"Bases: {', '.join(f'`{b}`' for b in bases)}\n")
    lines.append(_doc(cls) + "\n")
    protocols = [p for p, m in (("context manager (`with`)", "__enter__"),
                                ("`len()`", "__len__"), ("`np.asarray()`", "__array__"),
                                ("`__array_interface__` (zero-copy)", "__array_interface__"),
                                ("DLPack (`__dlpack__`, `__dlpack_device__`: "
                                 "`np.from_dlpack()`, `torch.from_dlpack()`)", "__dlpack__"))
                 if hasattr(cls, m) and m in {k for c in cls.__mro__ if c is not object
                                               for k in vars(c)}]
    if protocols:
        lines.append("Supports: " + ", ".join(protocols) + ".\n")
    for mname, attr in _members(cls):
        if isinstance(attr, property):
            lines.append(f"- **`{mname}`** (property): {_doc(attr.fget) if attr.fget.__doc__ else ''}"
                         .rstrip() + "\n")
        elif isinstance(attr, (staticmethod, classmethod)):
            fn = attr.__func__
            lines.append(f"- **`{_sig(fn, mname)}`**: {_doc(fn)}\n")
        elif inspect.isfunction(attr):
            sig = _sig(attr, mname).replace("(self, ", "(").replace("(self)", "()")
            doc = _doc(attr) if attr.__doc__ else ""
            lines.append(f"- **`{sig}`**" + (f": {doc}" if doc else "") + "\n")
    return [ln.replace("\n\n", "\n\n  ") if ln.startswith("- ") else ln for ln in lines]


def render() -> str:
    sys.path.insert(0, str(ROOT))
    import scopedgpu
    import scopedgpu.aio as aio
    import scopedgpu.testing as testing

    parts = ["# API reference\n",
             "Generated from the docstrings by `python docs/gen_api.py`; do not edit by hand "
             "(tests/test_docs.py fails when this file is stale).\n"]
    for modname, mod in (("scopedgpu", scopedgpu), ("scopedgpu.testing", testing),
                         ("scopedgpu.aio", aio)):
        parts.append(f"## `{modname}`\n")
        parts.append(_doc(mod).split("\n\n")[0] + "\n")
        for name in mod.__all__:
            if name.startswith("__"):
                continue
            obj = getattr(mod, name)
            if inspect.isclass(obj) and not isinstance(obj, enum.EnumMeta):
                parts.extend(_class(name, obj))
            elif callable(obj):
                fn = getattr(obj, "__wrapped__", obj)
                label = "fixture" if hasattr(obj, "_pytestfixturefunction") or \
                    type(obj).__name__ == "FixtureFunctionDefinition" else "function"
                parts.append(f"### {label} `{_sig(fn, name)}`\n")
                parts.append(_doc(fn) + "\n")
            else:
                parts.append(f"### `{name}`\n")
                parts.append(f"`{obj!r}`\n")
    return "\n".join(parts).rstrip() + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is stale")
    args = p.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python docs/gen_api.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
