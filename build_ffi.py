"""Builds scopedgpu's C extension (cffi, out-of-line API mode) and its built-in shaders.

`python build_ffi.py` builds both in place (scopedgpu/_sg*.so, scopedgpu/shaders/*.spv);
`pip install .` does the same through setup.py's cffi_modules and build_py hook.
The cdef is the shim's own header, sg.h, never vulkan.h.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / "csrc"
SHADERS = ROOT / "shaders"


def source_hash(root: Path = CSRC) -> str:
    """Hash of the shim's sources: embedded in the extension so that scopedgpu/_ffi.py
    can refuse a build that no longer matches csrc/."""
    h = hashlib.sha256()
    for p in sorted(root.glob("*.[ch]")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _cdef_text() -> str:
    text = (CSRC / "sg.h").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    lines = [ln for ln in text.splitlines()
             if not ln.startswith(("#include", "#ifndef", "#endif"))
             and not re.match(r"#define SG_H\b", ln)]
    return "\n".join(lines)


ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "scopedgpu._sg",
    '#include "sg.h"',
    sources=[str(p) for p in sorted(CSRC.glob("*.c"))],
    include_dirs=[str(CSRC)],
    define_macros=[("SG_BUILD_ID", f'"{source_hash()}"')],
    extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers"],
    libraries=["dl", "pthread"],
)


def find_glsl_compiler() -> list[str] | None:
    for name in ("glslc", "glslangValidator"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


def compile_shaders(out_dir: Path) -> list[Path]:
    """Compiles shaders/*.comp to out_dir/*.spv. A .spv newer than its source is kept, so a
    machine without a compiler can build from shaders compiled elsewhere; a missing or
    stale one without a compiler fails loudly."""
    out_dir.mkdir(parents=True, exist_ok=True)
    compiler = find_glsl_compiler()
    made = []
    for src in sorted(SHADERS.glob("*.comp")):
        dst = out_dir / (src.stem + ".spv")
        made.append(dst)
        if dst.exists() and compiler is None:
            # Shaders compiled on another machine travel as files; copying them may leave
            # them older than their sources, so without a compiler any .spv is used.
            if dst.stat().st_mtime < src.stat().st_mtime:
                print(f"scopedgpu build: no GLSL compiler; using {dst.name}, which is older "
                      f"than {src.name}", file=sys.stderr)
            continue
        if compiler is None:
            sys.exit(
                f"scopedgpu build: cannot compile {src.name}: no GLSL compiler found. "
                "Install glslc (Debian/Ubuntu: apt-get install glslc) or glslangValidator "
                "(apt-get install glslang-tools), then build again.")
        if Path(compiler[0]).name == "glslc":
            cmd = compiler + ["--target-env=vulkan1.1", "-O", str(src), "-o", str(dst)]
        else:
            cmd = compiler + ["-V", "--target-env", "vulkan1.1", str(src), "-o", str(dst)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"scopedgpu build: {src.name} failed to compile:\n{res.stderr}{res.stdout}")
    return made


if __name__ == "__main__":
    os.chdir(ROOT)
    compile_shaders(ROOT / "scopedgpu" / "shaders")
    ffibuilder.compile(tmpdir=str(ROOT / "build" / "cffi"), verbose=False)
    # compile() leaves the module under tmpdir/scopedgpu/; move it into the package,
    # replacing any other build of it (pip's abi3 one would shadow or be shadowed).
    for old in (ROOT / "scopedgpu").glob("_sg*.so"):
        old.unlink()
    for so in (ROOT / "build" / "cffi" / "scopedgpu").glob("_sg*.so"):
        shutil.copy2(so, ROOT / "scopedgpu" / so.name)
    print("built scopedgpu._sg", source_hash())
