"""Build hooks: the cffi extension (cffi_modules) and the built-in shaders (compiled into
scopedgpu/shaders/ before the package data is collected)."""
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))


def _shaders():
    from build_ffi import compile_shaders
    compile_shaders(ROOT / "scopedgpu" / "shaders")


class BuildPy(build_py):
    def run(self):
        _shaders()
        super().run()


class BuildExt(build_ext):
    def run(self):
        _shaders()  # editable installs run build_ext but may skip build_py
        super().run()


os.chdir(ROOT)
setup(cffi_modules=["build_ffi.py:ffibuilder"], cmdclass={"build_py": BuildPy, "build_ext": BuildExt})
