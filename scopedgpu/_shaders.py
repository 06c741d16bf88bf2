"""The built-in shaders, compiled to SPIR-V at build time and shipped as package data."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

_DIR = Path(__file__).resolve().parent / "shaders"


@lru_cache(maxsize=None)
def builtin_spirv(name: str) -> bytes:
    path = _DIR / f"{name}.spv"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"built-in shader {path} is missing: the package was built without its shaders; "
            "rebuild with `python build_ffi.py` (needs glslc)") from None
