"""What a user gets from `pip install scopedgpu`, checked wherever scopedgpu imports from:
the source tree (the default suite) or a fresh venv that installed the wheel or the sdist
(scripts/check_wheel.sh copies this file out of the tree and runs it there, with pytest
alone: no conftest, no hypothesis, no GLSL compiler).

Nothing here compiles GLSL: the shaders are the package's built-in SPIR-V."""
from __future__ import annotations

import gc
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


def child(code: str, **env: str) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter of this Python, from a folder outside any source
    tree, so that it imports the same scopedgpu as this process."""
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PKG.parent), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=full, cwd=os.path.expanduser("~"))


def test_package_data_is_there():
    assert (PKG / "py.typed").is_file()
    assert not (PKG / "yardstick.c").exists()  # the bench ships with the source only
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
                                  PYTHONPATH=str(PKG.parent)))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("python -m scopedgpu demo: no Vulkan device: ")
    assert "Install a Vulkan loader and a driver" in lines[0]


def test_bench_runs_from_a_source_tree_and_says_where_it_is_otherwise():
    # The benchmark suite (`bench`, with its C yardstick) ships with the source, not the
    # wheel: beside a checkout `scopedgpu bench` runs it; installed, it says where it is.
    res = child("import sys; from scopedgpu.__main__ import main; "
                "sys.exit(main(['bench', '--help'], prog='scopedgpu'))")
    in_checkout = (PKG.parent / "bench" / "yardstick.c").is_file()
    assert res.returncode == (0 if in_checkout else 2), res.stderr
    expected = "plain-C Vulkan yardstick" if in_checkout else "ships with scopedgpu's source"
    assert expected in (res.stdout if in_checkout else res.stderr)
