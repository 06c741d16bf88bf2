"""The built-in shaders, compiled to SPIR-V at build time and shipped as package data."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from scopedgpu._errors import ShaderError
from scopedgpu._spirv_val import check_structure

_DIR = Path(__file__).resolve().parent / "shaders"


@lru_cache(maxsize=None)
def builtin_spirv(name: str) -> bytes:
    path = _DIR / f"{name}.spv"
    try:
        data = path.read_bytes()
        check_structure(data)   # a damaged install: say which file (the device check follows)
        return data
    except ShaderError as exc:
        raise ShaderError(f"built-in shader {path} is damaged ({exc}); reinstall scopedgpu "
                          "or rebuild with `python build_ffi.py`") from None
    except FileNotFoundError:
        raise FileNotFoundError(
            f"built-in shader {path} is missing: the package was built without its shaders; "
            "rebuild with `python build_ffi.py` (needs glslc)") from None
