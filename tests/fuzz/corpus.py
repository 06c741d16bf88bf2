"""The valid modules the fuzz suite mutates: every built-in shader (shaders/*.comp, as
built into scopedgpu/shaders/*.spv), every GLSL shader of the tests and the examples,
compiled through sg.compile_glsl (cached on disk), the shaders of Kompute's own tests
(tests/kompute), and the wild corpus (wild/*.comp, wild/kompute/*.comp: compute shaders
written as people outside this project write them, see wild/README.md), each of these
twice: through sg.compile_glsl and unoptimized."""
from __future__ import annotations

import ast
import glob
import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

import scopedgpu as sg
from scopedgpu._spirv import words_of
from tests.conftest import ROOT

WILD_DIR = os.path.join(ROOT, "tests", "fuzz", "wild")

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
    out += kompute_tests()
    # The wild corpus: what compiles here (or is cached). A shader that does not is left
    # out of the mutations, and test_wild_corpus.py says why (a skip without a
    # compiler, a failure with one).
    for shader in wild():
        for unoptimized in (False, True):
            try:
                out.append((shader.label(unoptimized), shader.spirv(unoptimized)))
            except sg.ShaderError:
                pass
    return tuple(out)


def kompute_tests() -> list[tuple[str, bytes]]:
    """Each distinct shader of Kompute's own tests (tests/kompute, Kompute 0.9.0's Python
    tests), compiled as they compile it: compile_glsl, or without a compiler the SPIR-V
    committed beside them."""
    from tests.kompute.utils import compile_source
    out, seen = [], set()
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "kompute", "test_*.py"))):
        with open(path) as f:
            tree = ast.parse(f.read())
        for fn in tree.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                        "#version" in node.value and " ".join(node.value.split()) not in seen:
                    seen.add(" ".join(node.value.split()))
                    out.append((f"tests/kompute/{os.path.basename(path)}:{fn.name}",
                                compile_source(node.value)))
    return out


@dataclass(frozen=True)
class WildShader:
    """One file of wild/: its GLSL and what its header comments say."""
    name: str                    # relative to wild/, e.g. "kompute/op_mult.comp"
    source: str
    exercises: str               # the first line: "// exercises: ..."
    expect_refusal: str | None   # "// expect-refusal: ...": part of scopedgpu's message

    def label(self, unoptimized: bool) -> str:
        return f"tests/fuzz/wild/{self.name}" + (" (unoptimized)" if unoptimized else "")

    def spirv(self, unoptimized: bool) -> bytes:
        return compile_unoptimized(self.source) if unoptimized else sg.compile_glsl(self.source)


@lru_cache(maxsize=None)
def wild() -> tuple[WildShader, ...]:
    """The wild shaders, wild/*.comp then wild/kompute/*.comp, each in name order."""
    out = []
    for pattern in ("*.comp", os.path.join("kompute", "*.comp")):
        for path in sorted(glob.glob(os.path.join(WILD_DIR, pattern))):
            with open(path) as f:
                source = f.read()
            notes = {}
            for line in source.splitlines():
                key, sep, value = line.removeprefix("// ").partition(":")
                if line.startswith("// ") and sep and key in ("exercises", "expect-refusal"):
                    notes[key] = value.strip()
            out.append(WildShader(os.path.relpath(path, WILD_DIR).replace(os.sep, "/"), source,
                                  notes.get("exercises", ""), notes.get("expect-refusal")))
    return tuple(out)


def compile_unoptimized(source: str) -> bytes:
    """SPIR-V as glslangValidator -V writes it, without spirv-opt: sg.compile_glsl runs
    glslc with -O, which inlines every function and folds locals into SSA values, so
    OpFunctionCall, OpFunctionParameter and Function-storage variables never reach the
    validator from it; many projects ship unoptimized glslang output. Cached (by content
    hash, in sg.compile_glsl's cache directory) so that a machine without a compiler can
    reuse what another compiled; ShaderError where there is neither a compiler nor an
    entry, or the compiler refuses the source."""
    from scopedgpu.glsl import _compiler, _compiler_env, cache_dir
    from scopedgpu._spirv_val import check_structure
    key = hashlib.sha256(repr((source, "vulkan1.1", "unoptimized")).encode()).hexdigest()
    entry = cache_dir() / "fuzz-unoptimized" / f"{key}.spv"
    try:
        spirv = entry.read_bytes()
        check_structure(spirv)
        return spirv
    except (OSError, sg.ShaderError):
        pass
    comp = _compiler()
    if comp is None:
        raise sg.ShaderError("no GLSL compiler found (and no cached unoptimized SPIR-V)")
    name, exe = comp
    with tempfile.TemporaryDirectory(prefix="scopedgpu-fuzz-") as tmp:
        src, out = Path(tmp) / "shader.comp", Path(tmp) / "shader.spv"
        src.write_text(source)
        cmd = ([exe, "--target-env=vulkan1.1", "-O0", str(src), "-o", str(out)]
               if name == "glslc" else
               [exe, "-V", "--target-env", "vulkan1.1", str(src), "-o", str(out)])
        res = subprocess.run(cmd, capture_output=True, text=True, env=_compiler_env(exe))
        if res.returncode != 0:
            raise sg.ShaderError(f"GLSL compilation failed ({name}):\n"
                                 f"{(res.stderr + res.stdout).strip()}")
        spirv = out.read_bytes()
    check_structure(spirv)
    entry.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=entry.parent, delete=False) as f:
        f.write(spirv)      # written whole, then renamed: a reader never sees half of it
    os.replace(f.name, entry)
    return spirv


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
