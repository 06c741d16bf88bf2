"""Build hooks: the cffi extension (cffi_modules) and the built-in shaders (compiled into
scopedgpu/shaders/ before the package data is collected, and before an sdist is made, so
that building from the sdist needs no GLSL compiler).

The extension uses only CPython's stable ABI (cffi defines Py_LIMITED_API), so one wheel,
tagged cp39-abi3, serves every CPython from 3.9 on."""
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

# The lowest CPython the code runs on (pyproject's requires-python): the wheel's tag.
LIMITED_API = "cp39"


def _shaders():
    from build_ffi import compile_shaders
    compile_shaders(ROOT / "scopedgpu" / "shaders")


class BuildPy(build_py):
    def run(self):
        _shaders()
        super().run()


class BuildExt(build_ext):
    def run(self):
        from build_ffi import check_build_tools
        check_build_tools()  # a clear message instead of a bare compiler error
        _shaders()  # editable installs run build_ext but may skip build_py
        super().run()


class SDist(sdist):
    def run(self):
        _shaders()  # MANIFEST.in ships scopedgpu/shaders/*.spv and their manifest
        super().run()


os.chdir(ROOT)
setup(cffi_modules=["build_ffi.py:ffibuilder"],
      cmdclass={"build_py": BuildPy, "build_ext": BuildExt, "sdist": SDist},
      options={"bdist_wheel": {"py_limited_api": LIMITED_API}})
