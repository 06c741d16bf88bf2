"""Builds scopedgpu's C extension (cffi, out-of-line API mode) and its built-in shaders.

`python build_ffi.py` builds both in place (scopedgpu/_sg*.so, scopedgpu/shaders/*.spv);
`pip install .` does the same through setup.py's cffi_modules and build_py hook.
The cdef is the shim's own header, sg.h, never vulkan.h. The Vulkan headers come from
csrc/vendor/ (see its README.md), so a build needs only a C compiler and Python's headers;
an sdist carries the built-in shaders' SPIR-V, so building from it needs no GLSL compiler.
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
VENDOR = CSRC / "vendor"  # the Khronos Vulkan headers the shim includes
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
    include_dirs=[str(VENDOR), str(CSRC)],
    define_macros=[("SG_BUILD_ID", f'"{source_hash()}"')],
    extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers"],
    libraries=["dl", "pthread"],
)


def _install_hint(what: str) -> str:
    """What to install for `what` ("compiler" or "headers"), for the platforms we know."""
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    if sys.platform == "darwin":
        return "install the Xcode command line tools: `xcode-select --install`"
    if what == "compiler":
        return ("install a C compiler: Debian/Ubuntu `apt-get install gcc`, Fedora/RHEL "
                "`dnf install gcc`, Alpine `apk add gcc musl-dev`")
    return (f"install the headers of this Python ({ver}): Debian/Ubuntu `apt-get install "
            f"python{ver}-dev` (or python3-dev), Fedora/RHEL `dnf install python3-devel`, "
            "Alpine `apk add python3-dev`; a pyenv or python.org build has them already")


def check_build_tools(cc: str | None = None, include_dir: str | None = None) -> None:
    """Exits with a message naming what to install when the C compiler or Python.h is
    missing, instead of the compiler's bare error (FileNotFoundError: 'gcc',
    fatal error: Python.h). cc and include_dir default to what the build would use."""
    import shlex
    import sysconfig
    if cc is None:
        cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(cc)
    exe = words[0] if words else "cc"
    if shutil.which(exe) is None:
        sys.exit(f"scopedgpu build: no C compiler: {exe!r} was not found (the compiler "
                 f"this Python builds extensions with; CC overrides it). "
                 f"{_install_hint('compiler')}; then build again.")
    if include_dir is None:
        include_dir = sysconfig.get_paths()["include"]
    if not (Path(include_dir) / "Python.h").exists():
        sys.exit(f"scopedgpu build: Python.h not found in {include_dir}. "
                 f"{_install_hint('headers')}; then build again.")


def find_glsl_compiler() -> list[str] | None:
    for name in ("glslc", "glslangValidator"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


def compile_shaders(out_dir: Path) -> list[Path]:
    """Compiles shaders/*.comp to out_dir/*.spv. A manifest of source hashes tells which
    .spv files are current, so a machine without a compiler can build from shaders
    compiled elsewhere; a missing or stale one without a compiler fails loudly."""
    import json
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out_dir / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    compiler = find_glsl_compiler()
    made = []
    for src in sorted(SHADERS.glob("*.comp")):
        dst = out_dir / (src.stem + ".spv")
        made.append(dst)
        digest = hashlib.sha256(src.read_bytes()).hexdigest()
        if dst.exists() and manifest.get(src.name) == digest:
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
        manifest[src.name] = digest
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return made


if __name__ == "__main__":
    os.chdir(ROOT)
    check_build_tools()
    compile_shaders(ROOT / "scopedgpu" / "shaders")
    ffibuilder.compile(tmpdir=str(ROOT / "build" / "cffi"), verbose=False)
    # compile() leaves the module under tmpdir/scopedgpu/; move it into the package,
    # replacing any other build of it (pip's abi3 one would shadow or be shadowed).
    for old in (ROOT / "scopedgpu").glob("_sg*.so"):
        old.unlink()
    for so in (ROOT / "build" / "cffi" / "scopedgpu").glob("_sg*.so"):
        shutil.copy2(so, ROOT / "scopedgpu" / so.name)
    print("built scopedgpu._sg", source_hash())
