"""What is loaded on first use (the SPIR-V validator, through cffi and its C parser
pycparser; importlib.metadata, for the compiler wheels), loaded so that an interrupt
cannot leave it half made.

An import cut short (a Ctrl-C in the module's body) removes the module it was running
from sys.modules, but not the submodules it had already imported: `pycparser.c_ast`
stayed without its package, the next `import pycparser` made a package without that
attribute, and cffi's `pycparser.c_ast.Decl` raised AttributeError in every later
algorithm() of the process. first_use() runs such a load so that the orphans it leaves
are dropped: when it raises, and again before the next attempt (in case a second
interrupt cut the first clean-up short), so the next attempt imports them whole. What the
load itself builds is kept only once it returned (the caller stores its result), so an
attempt cut short is simply made again.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable, TypeVar

T = TypeVar("T")

_lock = threading.RLock()
# The names in sys.modules before the oldest first_use() attempt not known to have
# finished (None when every attempt returned).
_before: frozenset[str] | None = None


def first_use(load: Callable[[], T]) -> T:
    """load(), with any module it leaves half made dropped if it raises (see above).
    Loads run one at a time."""
    global _before
    with _lock:
        drop_orphans()
        if _before is None:
            _before = frozenset(sys.modules)
        try:
            result = load()
        except BaseException:
            drop_orphans()
            raise
        _before = None
        return result


def drop_orphans() -> list[str]:
    """Drops from sys.modules the modules imported since an unfinished first_use()
    attempt whose package is gone, or no longer holds them (what an import cut short
    leaves); returns their names."""
    before = _before
    if before is None:
        return []
    dropped: list[str] = []
    changed = True
    while changed:
        changed = False
        for name in [n for n in list(sys.modules) if n not in before and "." in n]:
            mod = sys.modules.get(name)
            if getattr(getattr(mod, "__spec__", None), "_initializing", False):
                continue    # being imported (by another thread): its package gets it after
            parent, _, child = name.rpartition(".")
            pkg = sys.modules.get(parent)
            if pkg is None or child not in getattr(pkg, "__dict__", {child: None}):
                sys.modules.pop(name, None)
                dropped.append(name)
                changed = True
    return dropped
