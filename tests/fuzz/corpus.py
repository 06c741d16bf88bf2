"""The valid modules the fuzz suite mutates: every built-in shader (shaders/*.comp, as
built into scopedgpu/shaders/*.spv) and every GLSL shader of the tests and the examples,
compiled through sg.compile_glsl (cached on disk)."""
from __future__ import annotations

import ast
import glob
import os
from functools import lru_cache

import numpy as np

import scopedgpu as sg
from scopedgpu._spirv import words_of
from tests.conftest import ROOT

# Defines the examples pass to compile_glsl (examples/matmul.py).
_DEFINES = {"matmul.py": {"TILE": "16u"}}


def _glsl_constants(path: str) -> list[tuple[str, str]]:
    """Module-level string constants of a Python file that are GLSL compute shaders."""
    with open(path) as f:
        tree = ast.parse(f.read())
    out = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str) and "#version" in node.value.value:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.append((target.id, node.value.value))
    return out


@lru_cache(maxsize=None)
def builtins() -> tuple[tuple[str, bytes], ...]:
    from scopedgpu._shaders import builtin_spirv
    names = sorted(os.path.splitext(os.path.basename(p))[0]
                   for p in glob.glob(os.path.join(ROOT, "shaders", "*.comp")))
    return tuple((f"shaders/{n}.comp", builtin_spirv(n)) for n in names)


@lru_cache(maxsize=None)
def corpus() -> tuple[tuple[str, bytes], ...]:
    """(name, SPIR-V) of every shader; the built-ins first."""
    out = list(builtins())
    from tests.lifetime import lt_shaders
    sources = [(f"tests/shaders.py:{n}", s, {})
               for n, s in _glsl_constants(os.path.join(ROOT, "tests", "shaders.py"))]
    sources += [(f"tests/lifetime/lt_shaders.py:add_one({t})", lt_shaders.add_one_glsl(dt), {})
                for dt, t in lt_shaders.GLSL_TYPE.items()]
    sources += [("tests/lifetime/lt_shaders.py:SLOW", lt_shaders.SLOW, {})]
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.py"))):
        name = os.path.basename(path)
        sources += [(f"examples/{name}:{n}", s, _DEFINES.get(name, {}))
                    for n, s in _glsl_constants(path)]
    for name, src, defines in sources:
        out.append((name, sg.compile_glsl(src, defines=defines)))
    return tuple(out)


def boundaries(spirv: bytes) -> list[int]:
    """Word offsets at which an instruction starts (the header ends at word 5)."""
    w = words_of(spirv)
    i, out = 5, []
    while i < len(w):
        out.append(i)
        i += max(1, w[i] >> 16)
    return out


def words(spirv: bytes) -> np.ndarray:
    return np.frombuffer(spirv, dtype="<u4").copy()
