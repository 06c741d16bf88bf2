"""A Griffe extension for the API reference (mkdocs.yml's mkdocstrings options): what a
user of scopedgpu may call and read, and nothing of the package's own plumbing.

docs/api.md renders, with `filters: public` and `show_if_no_docstring`, what each module's
`__all__` exports and the public members of those classes. Before that, this drops from
each class of the loaded package:

- members whose docstring says "package-internal" (the interface between scopedgpu's
  own modules, which docs/architecture.md lists), and a subclass's undocumented override
  of one (the ops' `record`, `objects`...);
- special methods without a docstring (`__repr__`, `__slots__`, `__copy__`...): a
  documented one (`__array__`, `__dlpack__`) is a protocol users call;
- undocumented attributes set on instances, except a dataclass's fields: the class's
  docstring says which of them users read (`DeviceError.result`, `Pinned.arrays`).

They are removed rather than marked private: the reference reaches classes through the
aliases that `scopedgpu/__init__.py` re-exports, and an alias's members do not inherit
their target's `public` flag.
"""
from __future__ import annotations

from typing import Any

import griffe


def _documented(obj: griffe.Object) -> bool:
    return obj.docstring is not None and bool(obj.docstring.value.strip())


def _marked(obj: griffe.Object) -> bool:
    return _documented(obj) and "package-internal" in obj.docstring.value  # type: ignore[union-attr]


def _classes(obj: griffe.Object) -> list[griffe.Class]:
    found = []
    for member in obj.members.values():
        if not member.is_alias and (member.is_class or member.is_module):
            found += ([member] if member.is_class else []) + _classes(member)
    return found


def _dropped(member: griffe.Object, cls: griffe.Class, internal: set[str]) -> bool:
    if _documented(member):
        return _marked(member)
    if member.name in internal:
        return True
    if member.name.startswith("__") and member.name.endswith("__"):
        return True
    return (member.is_attribute and "dataclass" not in cls.labels
            and "class-attribute" not in member.labels)


class PackageInternal(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        classes = _classes(pkg)
        marked = {cls.path: {name for name, m in cls.members.items()
                             if not m.is_alias and _marked(m)} for cls in classes}
        for cls in classes:
            internal: set[str] = set()
            for base in [cls, *cls.mro()]:
                internal |= marked.get(base.path, set())
            for name, member in list(cls.members.items()):
                if not member.is_alias and _dropped(member, cls, internal):
                    cls.del_member(name)
