"""The package's structure (docs/architecture.md): the modules of scopedgpu/ import each
other without a cycle (module-level, TYPE_CHECKING and function-level imports all count),
only scopedgpu/_vk.py touches the C extension (through _ffi.py, the raw loader), only
scopedgpu/_settings.py reads a SCOPEDGPU_ environment variable, no module reads or
writes a private attribute (`x._name`) that only another module defines, and the benchmark
suite (the subpackage scopedgpu.bench) stays outside the library: only __main__ imports
it, inside the function of the `bench` sub-command; and the Ctrl-C rule of scopedgpu/_ki.py
holds: every function marked `@_ki.step` is one indivisible step by its bytecode (dis), and
no statement line is `;`-joined (the old convention for a step); and every `x._destroyed =
True` counts in its engine's `destroys` (Sequence.eval's short path relies on it).
Each checker takes a directory, so the tests below also feed it planted violations."""
from __future__ import annotations

import ast
import dis
import io
import subprocess
import sys
import tokenize
from pathlib import Path
from types import CodeType

import pytest

import scopedgpu
from tests.conftest import source_env

pytestmark = pytest.mark.plain_only("static checks of the source and its bytecode: no "
                                    "Vulkan call for the layer to check")

PKG = Path(scopedgpu.__file__).resolve().parent
EXCLUDED: set[str] = set()
# Only _vk may import the raw loader; only the loader imports the compiled extension.
C_DOOR = {"_ffi": {"_vk"}, "_sg": {"_ffi"}}


def _modules(pkg: Path) -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(pkg.glob("*.py"))
            if p.name not in EXCLUDED}


def _targets(node: ast.AST, package: str, names: set[str]) -> list[str]:
    """The package's modules an import statement refers to ("__init__" for the package)."""
    out = []
    if isinstance(node, ast.Import):
        for a in node.names:
            parts = a.name.split(".")
            if parts[0] == package:
                out.append(parts[1] if len(parts) > 1 else "__init__")
    elif isinstance(node, ast.ImportFrom):
        if node.level:          # relative: from . import x / from .x import y
            mod = node.module
        elif node.module and node.module.split(".")[0] == package:
            parts = node.module.split(".")
            mod = parts[1] if len(parts) > 1 else None
        else:
            return out
        if mod is None:         # from scopedgpu import x: a module, or a name of __init__
            out += [a.name if a.name in names else "__init__" for a in node.names]
        else:
            out.append(mod.split(".")[0])
    return out


def import_graph(pkg: Path) -> dict[str, dict[str, bool]]:
    """module -> {imported module: True when every such import is inside a function}."""
    mods = _modules(pkg)
    subpackages = {p.name for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    names = set(mods) | subpackages | {p.stem for p in pkg.glob("*.so")} | {"_sg"}
    graph: dict[str, dict[str, bool]] = {m: {} for m in mods}

    def visit(mod: str, node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            for target in _targets(child, pkg.name, names):
                if target != mod:
                    graph[mod][target] = graph[mod].get(target, True) and inner
            visit(mod, child, inner)

    for mod, tree in mods.items():
        visit(mod, tree, False)
    return graph


def find_cycle(graph: dict[str, dict[str, bool]],
               tolerated: set[tuple[str, str]] = frozenset()) -> list[str] | None:  # type: ignore[assignment]
    """A cycle of imports (as a list of modules, the first repeated at the end), or None.
    Tolerated edges are skipped."""
    edges = {m: [t for t in ts if t in graph and (m, t) not in tolerated]
             for m, ts in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                found = dfs(t)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state:
            found = dfs(m)
            if found:
                return found
    return None


def c_door_violations(pkg: Path) -> list[str]:
    """Imports of the C extension (or its loader) outside the one door."""
    bad = []
    for mod, targets in import_graph(pkg).items():
        for target in targets:
            allowed = C_DOOR.get(target)
            if allowed is not None and mod not in allowed:
                bad.append(f"{mod}.py imports {target}")
    return bad


# The other native doors: CPython's C API through ctypes (_vk: keep_forever) and
# SPIRV-Tools through cffi's ABI mode (_spirv_val).
NATIVE_DOORS = {"ctypes": {"_vk", "_spirv_val"}, "cffi": {"_ffi", "_spirv_val"}}


def native_door_violations(pkg: Path) -> list[str]:
    """Imports of ctypes or cffi (any submodule, at any depth of the module) outside their
    doors."""
    bad = []
    for mod, tree in _modules(pkg).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in NATIVE_DOORS and mod not in NATIVE_DOORS[top]:
                    bad.append(f"{mod}.py:{node.lineno}: {name}")
    return bad


def private_reach(pkg: Path) -> list[str]:
    """Accesses `x._name` (x not self or cls, _name not a dunder) in a module that does not
    define _name itself (as a function, class, name, attribute it assigns, or a string in
    __slots__): a reach into another module's private state. A heuristic on names: an
    access to an attribute its own module also defines is not caught."""
    found = []
    for mod, tree in _modules(pkg).items():
        defined: set[str] = set()
        uses: list[tuple[str, int, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                defined.add(node.value)
            elif isinstance(node, ast.Attribute):
                if isinstance(node.ctx, ast.Store):
                    defined.add(node.attr)
                base = node.value
                if node.attr.startswith("_") and not node.attr.startswith("__") and not (
                        isinstance(base, ast.Name) and base.id in ("self", "cls")):
                    uses.append((node.attr, node.lineno, ast.unparse(base)))
        found += [f"{mod}.py:{line}: {base}.{attr}" for attr, line, base in uses
                  if attr not in defined]
    return found


def _is_environ(node: ast.AST) -> bool:
    """os.environ, or a bare environ (from os import environ)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
        (isinstance(node, ast.Name) and node.id == "environ")


def _sg_name(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        node.value.startswith("SCOPEDGPU_")


def settings_door_violations(pkg: Path) -> list[str]:
    """Reads of a SCOPEDGPU_ variable outside _settings.py: os.environ.get / [] / pop /
    setdefault / `in` and os.getenv with a SCOPEDGPU_ name written out (a name held in a
    variable is not caught: manager.py's old _env_flag(name) read SCOPEDGPU_DEBUG so)."""
    found = []
    for mod, tree in _modules(pkg).items():
        if mod == "_settings":
            continue
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    (_is_environ(node.func.value) and node.func.attr in
                     ("get", "pop", "setdefault")) or node.func.attr == "getenv"):
                name = node.args[0] if node.args else None
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id == "getenv":
                name = node.args[0] if node.args else None
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                name = node.slice
            elif isinstance(node, ast.Compare) and any(_is_environ(c)
                                                       for c in node.comparators):
                name = node.left
            if _sg_name(name):
                found.append(f"{mod}.py:{node.lineno}: {name.value}")  # type: ignore[union-attr]
    return sorted(found)


# The shim's functions that make and free a command buffer and its fence: called by
# _submission.py only (every command buffer is a Submission, with one release path).
SUBMISSION_LIFECYCLE = {"seq_create", "seq_destroy"}


def submission_door_violations(pkg: Path) -> list[str]:
    """Uses of sg_seq_create / sg_seq_destroy (through _vk, by attribute or by name)
    outside _submission.py and _vk.py."""
    found = []
    for mod, tree in _modules(pkg).items():
        if mod in ("_submission", "_vk"):
            continue
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and node.attr in SUBMISSION_LIFECYCLE:
                name = node.attr
            elif isinstance(node, ast.ImportFrom):
                name = next((a.name for a in node.names if a.name in SUBMISSION_LIFECYCLE),
                            None)
            if name is not None:
                found.append(f"{mod}.py:{node.lineno}: {name}")
    return sorted(found)


def destroy_count_violations(pkg: Path) -> list[str]:
    """Assignments `x._destroyed = True` not followed at once by a statement `<engine>.destroys
    += 1`: every destroyed child counts in its engine's `destroys`, or a sequence's short
    path (Sequence.eval, which skips its look at its objects while the count stands)
    would submit commands that use a destroyed object."""
    found = []
    for mod, tree in _modules(pkg).items():
        for node in ast.walk(tree):
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(node, field, None)
                if not isinstance(stmts, list):
                    continue
                for i, st in enumerate(stmts):
                    if not (isinstance(st, ast.Assign) and len(st.targets) == 1
                            and isinstance(st.targets[0], ast.Attribute)
                            and st.targets[0].attr == "_destroyed"
                            and isinstance(st.value, ast.Constant) and st.value.value is True):
                        continue
                    nxt = stmts[i + 1] if i + 1 < len(stmts) else None
                    if not (isinstance(nxt, ast.AugAssign) and isinstance(nxt.op, ast.Add)
                            and isinstance(nxt.target, ast.Attribute)
                            and nxt.target.attr == "destroys"
                            and isinstance(nxt.value, ast.Constant) and nxt.value.value == 1):
                        found.append(f"{mod}.py:{st.lineno}")
    return sorted(found)


def bench_importers(pkg: Path) -> list[str]:
    """Imports of the benchmark suite (scopedgpu.bench) by the library's modules: allowed
    only in __main__, and there only inside a function (the `bench` sub-command), so that
    neither `import scopedgpu` nor any other command loads it."""
    return sorted(f"{mod}.py imports bench" + ("" if in_function else " at module level")
                  for mod, targets in import_graph(pkg).items()
                  for target, in_function in targets.items()
                  if target == "bench" and not (mod == "__main__" and in_function))


def test_the_bench_stays_outside_the_library():
    assert bench_importers(PKG) == []
    assert (PKG / "bench" / "__init__.py").is_file()
    assert import_graph(PKG)["__main__"].get("bench") is True   # the one door, used lazily
    # and at run time: importing every module of the library loads no part of it
    code = ("import importlib, sys\n"
            f"for name in {sorted(m for m in _modules(PKG) if m != '__main__')!r}:\n"
            "    try:\n"
            "        importlib.import_module('scopedgpu.' + name)\n"
            "    except ImportError as exc:\n"
            "        if (exc.name or '').startswith('scopedgpu'):\n"
            "            raise\n"           # an optional dependency (dask) may be missing
            "print(sorted(m for m in sys.modules if m.startswith('scopedgpu.bench')))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=source_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "[]", res.stdout


def test_a_planted_import_of_the_bench_is_found(tmp_path):
    pkg = _write(tmp_path / "scopedgpu", {
        "__init__.py": "from . import bench\n",
        "__main__.py": "def cmd_bench():\n    from scopedgpu.bench import cli\n",
        "aio.py": "def f():\n    import scopedgpu.bench.suite\n",
        "kp.py": "from .bench.report import table\n",
    })
    (pkg / "bench").mkdir()
    (pkg / "bench" / "__init__.py").write_text("")
    assert bench_importers(pkg) == ["__init__.py imports bench at module level",
                                    "aio.py imports bench",
                                    "kp.py imports bench at module level"]
    (pkg / "__main__.py").write_text("from scopedgpu.bench import cli\n")
    (pkg / "__init__.py").write_text("")
    assert bench_importers(pkg) == ["__main__.py imports bench at module level",
                                    "aio.py imports bench",
                                    "kp.py imports bench at module level"]


def test_only_settings_reads_scopedgpu_variables():
    assert settings_door_violations(PKG) == []
    assert "_settings" in _modules(PKG)


def test_a_planted_read_of_a_scopedgpu_variable_is_found(tmp_path):
    pkg = _write(tmp_path / "scopedgpu", {
        "__init__.py": "",
        "_settings.py": "import os\nDEBUG = os.environ.get('SCOPEDGPU_DEBUG')\n",
        "stream.py": "import os\n"
                     "def f():\n"
                     "    return os.environ.get('SCOPEDGPU_STREAM_TRACE')\n"
                     "def g():\n"
                     "    return os.environ['SCOPEDGPU_DEVICE'], 'SCOPEDGPU_X' in os.environ\n",
        "kp.py": "from os import environ, getenv\n"
                 "A = getenv('SCOPEDGPU_DEVICE')\n"
                 "B = environ.get('HOME'), environ.get('SCOPEDGPU_QUEUES', '8')\n",
    })
    assert settings_door_violations(pkg) == [
        "kp.py:2: SCOPEDGPU_DEVICE", "kp.py:3: SCOPEDGPU_QUEUES",
        "stream.py:3: SCOPEDGPU_STREAM_TRACE", "stream.py:5: SCOPEDGPU_DEVICE",
        "stream.py:5: SCOPEDGPU_X"]


def test_only_submission_makes_and_frees_command_buffers():
    assert submission_door_violations(PKG) == []
    assert "_submission" in _modules(PKG)


def test_a_planted_command_buffer_outside_submission_is_found(tmp_path):
    pkg = _write(tmp_path / "scopedgpu", {
        "__init__.py": "",
        "_submission.py": "from scopedgpu import _vk\ndef make(c):\n    _vk.seq_create(c)\n",
        "stream.py": "from scopedgpu import _vk\n"
                     "def setup(h):\n"
                     "    _vk.check(_vk.seq_create(h), 'x')\n"
                     "    _vk.seq_submit(h)\n",
        "_transfer.py": "from scopedgpu._vk import seq_destroy as free\n",
    })
    assert submission_door_violations(pkg) == ["_transfer.py:1: seq_destroy",
                                               "stream.py:3: seq_create"]


def test_every_destroyed_child_is_counted():
    assert destroy_count_violations(PKG) == []
    # (not vacuous: Child, Tensor's destroy and failed creation, Sequence's release)
    sites = sum(p.read_text().count("._destroyed = True") for p in PKG.glob("*.py"))
    assert sites >= 4, sites


def test_a_planted_uncounted_destroy_is_found(tmp_path):
    pkg = _write(tmp_path / "scopedgpu", {
        "__init__.py": "",
        "tensor.py": "class Tensor:\n"
                     "    def destroy(self, state):\n"
                     "        with state.lock:\n"
                     "            self._destroyed = True\n"
                     "            state.destroys += 1\n"
                     "    def unmake(self, state):\n"
                     "        self._destroyed = True\n"
                     "        state.other += 1\n",
        "ops.py": "def drop(o):\n    if o:\n        o._destroyed = True\n",
    })
    assert destroy_count_violations(pkg) == ["ops.py:3", "tensor.py:7"]


def test_no_module_reaches_into_another_modules_private_attributes():
    assert private_reach(PKG) == []


def test_a_planted_private_reach_is_found(tmp_path):
    pkg = _write(tmp_path / "scopedgpu", {
        "__init__.py": "",
        "tensor.py": "class Tensor:\n    def __init__(self):\n        self._gpu = 1\n"
                     "    def same(self, other):\n        return other._gpu\n",
        "ops.py": "def record(t):\n    return t._gpu\n",
    })
    assert private_reach(pkg) == ["ops.py:2: t._gpu"]


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph(PKG))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_only_vk_touches_the_c_extension():
    assert c_door_violations(PKG) == []
    graph = import_graph(PKG)
    assert "_ffi" in graph["_vk"]       # the door exists and is the one used
    users = {m for m, ts in graph.items() if "_vk" in ts}
    assert {"_pool", "_device", "_engine", "sequence", "manager"} <= users


def test_native_code_is_reached_through_its_doors_only():
    """ctypes and cffi only in _vk, _ffi and _spirv_val (issue 25: _engine.abandon and
    Tensor._adopt_stage used ctypes on live numpy memory outside any door)."""
    assert native_door_violations(PKG) == []


def test_a_planted_native_side_door_is_found(tmp_path):
    pkg = _write(tmp_path / "scopedgpu", {
        "__init__.py": "",
        "_vk.py": "import ctypes\n",
        "_spirv_val.py": "import ctypes.util\nfrom cffi import FFI\n",
        "tensor.py": "import numpy\ndef f():\n    import ctypes\n",
        "_engine.py": "from ctypes import pythonapi\nimport cffi.backend_ctypes\n",
    })
    assert native_door_violations(pkg) == ["_engine.py:1: ctypes", "_engine.py:2: cffi.backend_ctypes",
                                           "tensor.py:3: ctypes"]


def test_the_layers_hold():
    """The order of docs/architecture.md: no module imports one of a higher layer."""
    layers = ["_errors", "_lazy", "_ki", "_settings", "_ffi", "_vk", "_base", "_spirv",
              "_spirv_split", "_pool", "_validation", "_submission", "_engine", "_caches",
              "_transfer", "pinned", "tensor", "algorithm", "_record", "ops", "_synccheck",
              "sequence", "stream", "manager"]
    rank = {m: i for i, m in enumerate(layers)}
    graph = import_graph(PKG)
    bad = [f"{m} -> {t}" for m in layers for t in graph[m] if t in rank and rank[t] > rank[m]]
    assert bad == []


def _write(pkg: Path, files: dict[str, str]) -> Path:
    pkg.mkdir()
    for name, text in files.items():
        (pkg / name).write_text(text)
    return pkg


def test_a_planted_cycle_through_type_checking_and_function_imports_is_found(tmp_path):
    pkg = _write(tmp_path / "scopedgpu", {
        "__init__.py": "",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from scopedgpu.b import B\n",
        "b.py": "def f():\n    from scopedgpu import c\n",
        "c.py": "from . import a\n",
        "d.py": "import scopedgpu.a\n",
    })
    assert find_cycle(import_graph(pkg)) == ["a", "b", "c", "a"]
    # and the real checker reports it the same way the package test would
    with pytest.raises(AssertionError, match="a -> b -> c -> a"):
        cycle = find_cycle(import_graph(pkg))
        assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
    (pkg / "c.py").write_text("")
    assert find_cycle(import_graph(pkg)) is None


def test_a_planted_use_of_the_extension_outside_vk_is_found(tmp_path):
    pkg = _write(tmp_path / "scopedgpu", {
        "__init__.py": "",
        "_ffi.py": "from scopedgpu._sg import ffi, lib\n",
        "_vk.py": "from scopedgpu._ffi import ffi, lib\n",
        "ops.py": "def f():\n    from scopedgpu._ffi import lib\n",
        "tensor.py": "from ._sg import ffi\n",
    })
    assert c_door_violations(pkg) == ["ops.py imports _ffi", "tensor.py imports _sg"]


# -- Ctrl-C: steps (scopedgpu/_ki.py) ------------------------------------------------------
# What a step may not do after its one call: another call, or a store to anything but its
# own locals. (CALL_INTRINSIC_* are not calls: they run no Python code and check nothing.)
_EFFECTS = {"STORE_ATTR", "STORE_SUBSCR", "STORE_SLICE", "STORE_GLOBAL", "STORE_DEREF",
            "STORE_NAME", "DELETE_ATTR", "DELETE_SUBSCR", "DELETE_GLOBAL", "DELETE_DEREF",
            "DELETE_NAME"}
# Instructions that call (or may run) Python code, or wait: one per path, the last thing.
_CALLS = {"CALL", "CALL_KW", "CALL_FUNCTION_EX", "BEFORE_WITH", "BEFORE_ASYNC_WITH", "SEND",
          "YIELD_VALUE", "GET_AWAITABLE", "GET_ITER", "FOR_ITER", "IMPORT_NAME",
          "LOAD_BUILD_CLASS"}
_GOTO = {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP",
         "JUMP_NO_INTERRUPT", "JUMP_ABSOLUTE"}
_END = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)


def step_violations(code: CodeType) -> list[str]:
    """Why `code` is not one indivisible step (docstring of scopedgpu/_ki.py): a loop (a
    backward jump), a `try` or `with` (an exception table), a generator, or a path with a
    call followed by another call or a store to anything but a local. [] when it is one."""
    name = code.co_qualname if hasattr(code, "co_qualname") else code.co_name
    out = []
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):   # generator, coroutine, async
        out.append(f"{name}: a generator or coroutine")
    if code.co_exceptiontable:
        out.append(f"{name}: a try or with block")
    ins = list(dis.get_instructions(code))
    index = {x.offset: i for i, x in enumerate(ins)}
    succ: list[list[int]] = []
    for i, x in enumerate(ins):
        nxt = [] if x.opname in _END or x.opname in _GOTO else [i + 1]
        if x.opcode in _JUMPS:
            if "BACKWARD" in x.opname or x.argval <= x.offset:
                out.append(f"{name}: a loop (backward jump at line {x.positions.lineno})")
            else:
                nxt.append(index[x.argval])
        succ.append([j for j in nxt if j < len(ins)])

    def line(x: dis.Instruction) -> int | None:
        return x.positions.lineno if x.positions else None

    calls = [i for i, x in enumerate(ins) if x.opname in _CALLS]
    for i in calls:
        seen, todo = set(), list(succ[i])
        while todo:
            j = todo.pop()
            if j in seen:
                continue
            seen.add(j)
            y = ins[j]
            if y.opname in _CALLS or y.opname in _EFFECTS:
                what = "another call" if y.opname in _CALLS else y.opname
                out.append(f"{name}: the call at line {line(ins[i])} is followed by "
                           f"{what} at line {line(y)}")
                break
            todo += succ[j]
    return out


def _is_step(dec: ast.expr) -> bool:
    return (isinstance(dec, ast.Name) and dec.id == "step") or \
        (isinstance(dec, ast.Attribute) and dec.attr == "step")


def _codes(code: CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, CodeType):
            yield from _codes(c)


def declared_steps(pkg: Path) -> dict[str, CodeType]:
    """"module.qualname" -> code of every function decorated @step / @_ki.step, read from
    the source (nothing imported)."""
    found = {}
    for path in sorted(pkg.glob("*.py")):
        text = path.read_text()
        tree = ast.parse(text, str(path))
        names: set[str] = set()

        def visit(node: ast.AST, prefix: str, names: set[str] = names) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    q = prefix + child.name
                    if any(_is_step(d) for d in child.decorator_list):
                        names.add(q)
                    visit(child, q + ".<locals>.")
                elif isinstance(child, ast.ClassDef):
                    visit(child, prefix + child.name + ".")
                else:
                    visit(child, prefix)

        visit(tree, "")
        for code in _codes(compile(text, str(path), "exec")):
            q = code.co_qualname if hasattr(code, "co_qualname") else code.co_name
            if q in names:
                found[f"{path.stem}.{q}"] = code
    return found


def step_rule_violations(pkg: Path) -> list[str]:
    return [f"{mod}.py: {v}" for key, code in declared_steps(pkg).items()
            for mod in [key.split(".")[0]] for v in step_violations(code)]


# Files still allowed `;`-joined lines: none (the step rule holds everywhere).
SEMICOLON_PENDING: set[str] = set()


def semicolon_lines(pkg: Path, pending: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """Statement lines joined with `;` (tokens, so strings and comments do not count)."""
    out = []
    for path in sorted(pkg.glob("*.py")):
        if path.name in pending:
            continue
        toks = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        out += [f"{path.name}:{t.start[0]}" for t in toks
                if t.type == tokenize.OP and t.string == ";"]
    return out


def test_every_step_is_one_indivisible_step():
    steps = declared_steps(PKG)
    assert len(steps) >= 10, sorted(steps)   # the hot paths are steps
    assert step_rule_violations(PKG) == []


def test_the_registry_of_steps_is_the_declared_one():
    """_ki.STEPS, which the line sweeps skip, holds exactly the functions declared as
    steps in the source (every module imported), each passing the check."""
    import importlib

    from scopedgpu import _ki
    for mod in sorted(_modules(PKG)):
        if mod not in ("__main__", "dask"):
            importlib.import_module("scopedgpu." + mod)
    declared = declared_steps(PKG)
    registered = {f"{c.co_filename.rsplit('/', 1)[-1][:-3]}.{q}" for c, q in _ki.STEPS.items()}
    assert registered == set(declared)
    assert all(step_violations(c) == [] for c in _ki.STEPS)


def test_no_statement_line_is_joined_with_a_semicolon():
    assert semicolon_lines(PKG, SEMICOLON_PENDING) == []


def test_planted_violations_of_the_step_rule_are_found(tmp_path):
    pkg = _write(tmp_path / "scopedgpu", {
        "__init__.py": "",
        "_ki.py": "def step(f):\n    return f\n",
        "pool.py": (
            "from scopedgpu import _ki\n"
            "from scopedgpu._ki import step\n"
            "class Pool:\n"
            "    @_ki.step\n"
            "    def good(self, holder, lib):\n"              # take, then the C call
            "        h, holder.h = holder.h, None\n"
            "        if h is None:\n"
            "            return None\n"
            "        self.n -= 1\n"
            "        return lib.destroy(h)\n"
            "    @_ki.step\n"
            "    def call_in_the_middle(self, holder, lib):\n"
            "        h = lib.pop(holder)\n"
            "        self.n -= 1\n"
            "        return h\n"
            "    @step\n"
            "    def two_calls(self, a, lib):\n"
            "        lib.free(a)\n"
            "        x = lib.count()\n"
            "        return x\n"
            "    @step\n"
            "    def loop(self, items):\n"
            "        for a in items:\n"
            "            self.n -= a\n"
            "    @step\n"
            "    def looped(self, n):\n"
            "        while n:\n"
            "            n -= 1\n"
            "    @step\n"
            "    def guarded(self, lock):\n"
            "        with lock:\n"
            "            self.n = 0\n"
            "    @step\n"
            "    def tried(self):\n"
            "        try:\n"
            "            self.n = 0\n"
            "        except KeyError:\n"
            "            pass\n"
            "    def not_a_step(self, lib):\n"
            "        lib.a(); lib.b()\n"),
    })
    found = step_rule_violations(pkg)
    assert set(declared_steps(pkg)) == {f"pool.Pool.{n}" for n in (
        "good", "call_in_the_middle", "two_calls", "loop", "looped", "guarded", "tried")}
    bad = {v.split(": ")[1].split(".")[1] for v in found}
    assert bad == {"call_in_the_middle", "two_calls", "loop", "looped", "guarded", "tried"}
    assert "pool.py: Pool.call_in_the_middle: the call at line 13 is followed by " \
           "STORE_ATTR at line 14" in found
    assert "pool.py: Pool.two_calls: the call at line 18 is followed by another call " \
           "at line 19" in found
    assert any(v.startswith("pool.py: Pool.loop: a loop") for v in found)
    assert any(v.startswith("pool.py: Pool.looped: a loop") for v in found)
    assert "pool.py: Pool.guarded: a try or with block" in found
    assert "pool.py: Pool.tried: a try or with block" in found
    # and the one-line convention is refused, wherever it is (not in a string)
    (pkg / "kp.py").write_text("s = 'a; b'  # c; d\nx = 1; y = 2\n")
    assert semicolon_lines(pkg) == ["kp.py:2", "pool.py:40"]
    assert semicolon_lines(pkg, {"pool.py"}) == ["kp.py:2"]
