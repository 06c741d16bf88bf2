"""The wild corpus (wild/*.comp, see wild/README.md) unmutated: each shader compiles, both
through sg.compile_glsl and unoptimized, passes the validator and the structural and
interface checks, and, run as the fuzz worker runs every case (worker.run_case: zeroed
tensors for its bindings, zeroed push constants, one workgroup), dispatches; or, where
its `// expect-refusal:` line says so, is refused with that message. A shader that needs
a feature this device lacks skips with the reason."""
from __future__ import annotations

import pytest

import scopedgpu as sg
from scopedgpu._spirv import words_of
from scopedgpu._spirv_val import check_module, how_to_get, validator
from scopedgpu.glsl import _compiler
from tests.fuzz.corpus import compile_unoptimized, corpus, wild
from tests.fuzz.worker import run_case


def test_wild_corpus_is_annotated():
    """Every shader says what it exercises; those taken from Kompute say where from."""
    shaders = wild()
    assert 15 <= len(shaders) <= 40, [s.name for s in shaders]
    for s in shaders:
        assert s.source.startswith("// exercises: ") and s.exercises, s.name
        if s.name.startswith("kompute/"):
            assert "// source: kp 0.9.0 sdist, " in s.source, s.name


def _compiled(shader, unoptimized: bool) -> bytes:
    """The module, or a skip where there is no GLSL compiler and nothing cached."""
    try:
        return shader.spirv(unoptimized)
    except sg.ShaderError as exc:
        if _compiler() is None:
            pytest.skip(f"no GLSL compiler installed and no cached SPIR-V for {shader.name}")
        raise AssertionError(f"{shader.name} does not compile: {exc}") from None


@pytest.mark.parametrize("unoptimized", [False, True], ids=["compile_glsl", "unoptimized"])
@pytest.mark.parametrize("shader", wild(), ids=lambda s: s.name)
def test_wild_shader_runs_unmutated(mgr, shader, unoptimized):
    assert validator().ok, f"the SPIR-V validator is missing: {how_to_get()}"
    spirv = _compiled(shader, unoptimized)
    expect = shader.expect_refusal
    try:
        check_module(spirv, mgr.device)   # validator, structure, interface, capabilities
    except sg.ShaderError as exc:
        msg = str(exc)
        # A capability comes last: the validator and the other checks have passed.
        assert "SPIR-V capability" in msg, f"{shader.name}: {msg}"
        if expect is None:
            pytest.skip(f"{shader.name} needs what this device lacks: {msg}")
        assert expect in msg, f"{shader.name}: refused, but not for {expect!r}: {msg}"
        return
    res = run_case(mgr, spirv, lambda stage: None)
    if expect is None:
        assert res == {"outcome": "dispatched"}, f"{shader.name}: {res}"
    else:
        assert res["outcome"].startswith("rejected_") and expect in res["message"], \
            f"{shader.name}: expected a refusal naming {expect!r}, got {res}"


def test_project_shaders_dispatch_unmutated(mgr):
    """The rest of the corpus (built-ins, tests, examples, Kompute's tests) fits the
    worker's generic tensors too: every module dispatches unmutated."""
    try:
        modules = corpus()
    except sg.ShaderError:
        if _compiler() is None:
            pytest.skip("no GLSL compiler installed and the tests' and examples' shaders "
                        "are not in the compile cache")
        raise
    ran = {name: run_case(mgr, spirv, lambda stage: None)
           for name, spirv in modules if not name.startswith("tests/fuzz/wild/")}
    assert ran and all(r == {"outcome": "dispatched"} for r in ran.values()), \
        {n: r for n, r in ran.items() if r != {"outcome": "dispatched"}}


def test_unoptimized_keeps_function_calls():
    """Why the corpus holds an unoptimized form: glslc -O (compile_glsl's) inlines every
    function, so only that form brings OpFunctionCall and OpFunctionParameter."""
    shader = next(s for s in wild() if s.name == "functions_inout.comp")
    w = words_of(_compiled(shader, unoptimized=True))
    i, opcodes = 5, set()
    while i < len(w):
        opcodes.add(w[i] & 0xFFFF)
        i += w[i] >> 16
    assert {57, 55} <= opcodes      # OpFunctionCall, OpFunctionParameter
    with pytest.raises(sg.ShaderError):
        compile_unoptimized("#version 450\nvoid main() { undefined_call(); }\n")
