"""Algorithms: a cached compute pipeline plus the descriptor set binding its tensors."""
from __future__ import annotations

import math
import numbers
import operator
import struct
from typing import Any, Sequence as Seq

import numpy as np

from scopedgpu import _ki, _vk
from scopedgpu._base import Child, Handle
from scopedgpu._caches import Programs, _Program
from scopedgpu._engine import Engine
from scopedgpu._errors import ShaderError
from scopedgpu._spirv import ShaderInfo, SpecConstant
from scopedgpu._spirv_split import BUILTIN_NUM_WORKGROUPS, CannotSplit, Split, split_module
from scopedgpu.tensor import Tensor, binding_shapes


__all__ = ["Algorithm", "encode_push_consts", "encode_spec_consts"]


class _SplitProgram:
    """The pipeline of the module rewritten for dispatches in parts (_spirv_split), built
    for an algorithm the first time one of its dispatches exceeds the device's
    maxComputeWorkGroupCount; holds its reference as an algorithm's handle holds its own
    (Programs.get stores it in `program`)."""
    __slots__ = ("program", "split")

    def __init__(self, split: Split):
        self.program: _Program | None = None
        self.split = split


class _AlgoHandle(Handle):
    __slots__ = ("dset", "program", "programs", "split", "bound")
    close_order = 1   # after the sequences whose commands use it, before tensors

    def __init__(self, dset: Any, program: _Program | None, programs: Programs):
        self.dset = dset
        self.program: _Program | None = program
        self.programs = programs
        self.split: _SplitProgram | None = None
        # What dset's bindings were written with: the pool's Allocation objects, then the
        # binding sizes, in one tuple; None when unknown. The pool hands a freed range's
        # Allocation out again as it is (same block, offset and size) and makes a new one
        # for any other range, and this reference keeps a dropped one from being
        # mistaken for a new one: the same objects and sizes mean the same buffer ranges.
        self.bound: tuple[Any, ...] | None = None

    def release(self, state: Engine, closing: bool) -> None:
        # Each taken in the step that frees it: run again after a Ctrl-C, never freed twice.
        # (Released once no submitted work may use it: its descriptor set, allocated with
        # its program's set layout, is kept by the program for its next algorithm.)
        if self.dset is not None and (closing or self.program is None
                                      or not self.programs.keep_spare(self)):
            self.destroy_dset()
        if self.program is not None:
            self.programs.unref(self)   # takes and clears self.program in one step
        if self.split is not None and self.split.program is not None:
            self.programs.unref(self.split)

    @_ki.step
    def destroy_dset(self) -> None:
        dset, self.dset = self.dset, None
        _vk.dset_destroy(dset)


def _number_list(values: Any, what: str, name: str) -> list[Any]:
    """The items of a list/tuple of numbers; TypeError naming the first that is not one.
    (A str is a sequence too, of characters: '64' must not pass as [6.0, 4.0].)"""
    if isinstance(values, (str, bytes, bytearray, memoryview, dict, set, frozenset)) or \
            not hasattr(values, "__iter__"):
        raise TypeError(f"{what}: {name} must be a list of numbers or a numpy array, "
                        f"not {type(values).__name__} {values!r}")
    items = list(values)
    for i, v in enumerate(items):
        if not isinstance(v, (numbers.Real, np.number, np.bool_)):
            raise TypeError(f"{what}: {name}[{i}] is {v!r} ({type(v).__name__}); "
                            "each value must be a number")
    return items


def encode_push_consts(values: Any, what: str, info: ShaderInfo) -> bytes:
    """The push constants of an algorithm (or a stream) over a shader of reflection
    `info`, encoded (push_bytes) and checked: a block the shader declares must be given,
    whole (ShaderError otherwise, naming its size and members; zeros on purpose are
    given like any other values), and a shader without one takes none."""
    push = push_bytes(values, what, info)
    if not push and info.push_constant_size:
        raise missing_push(info, what)
    return check_push_bytes(push, info, what)


def push_bytes(values: Any, what: str, info: ShaderInfo) -> bytes:
    """The bytes of the push constants `values` for a shader of reflection `info`.

    A list or tuple gives the block's members in order, a dict gives them by name, and a
    numpy structured scalar by field (by name where the module names its members, else in
    order): each value is packed as its member is declared (uint, int, float, double,
    64-bit ints, vectors, arrays, matrices; at the offsets the module's decorations give)
    and must fit it, else TypeError or ValueError naming the member, the value and the
    type. A vector, array or matrix member takes a sequence (nested or flat) of its
    scalars. A numpy array is taken bit for bit with its own dtype, and bytes as they are.
    b"" when there are none (None, or an empty list or array): whether the shader needs
    them is the caller's check (check_push_bytes)."""
    if values is None:
        return b""
    if isinstance(values, (bytes, bytearray, memoryview)):
        return bytes(values)
    if isinstance(values, np.ndarray) and values.dtype.names is None:
        arr = np.ascontiguousarray(values)
        if arr.dtype.kind not in "iuf" or arr.dtype.byteorder == ">":
            raise TypeError(f"{what}: push constants of dtype {arr.dtype} are not supported")
        return arr.tobytes()
    members = info.push_constant_members
    if isinstance(values, (np.void, np.ndarray)):
        names = values.dtype.names
        if names is None:
            raise TypeError(f"{what}: push constants of dtype {values.dtype} are not supported")
        if isinstance(values, np.ndarray):
            if values.size != 1:
                raise ValueError(f"{what}: a structured array of push constants must hold "
                                 f"one record, not {values.size}")
            values = values.reshape(-1)[0]
        if members and all(m.name for m in members):
            values = {n: values[n] for n in names}
        else:
            values = tuple(values[n] for n in names)
    if isinstance(values, dict):
        return _pack_push_dict(values, what, info)
    items = _push_items(values, what)
    if not items:
        return b""
    if not members:
        raise ValueError(f"{what}: push constants were given ({_count(len(items), 'value')}) "
                         "but the shader declares none")
    if len(items) > len(members):
        raise ValueError(f"{what}: push_consts gives {_count(len(items), 'value')}, but the "
                         f"shader's push-constant block {push_block(info)} has "
                         f"{_count(len(members), 'member')}")
    if len(items) < len(members):
        missing = ", ".join(f"member {m.label}" for m in members[len(items):])
        raise ShaderError(f"{what}: push_consts gives {_count(len(items), 'value')}, but the "
                          f"shader's push-constant block {push_block(info)} has "
                          f"{_count(len(members), 'member')}: {missing} would be left unset")
    return _pack_push(list(enumerate(items)), what, info, "push_consts[{}]")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _push_items(values: Any, what: str) -> list[Any]:
    if isinstance(values, (str, set, frozenset)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{what}: push_consts must be a list of numbers, a dict by member "
                        "name or a numpy array, not "
                        f"{type(values).__name__} {values!r}")
    return list(values)


def _pack_push_dict(values: dict, what: str, info: ShaderInfo) -> bytes:
    members = info.push_constant_members
    if not members:
        raise ValueError(f"{what}: push constants were given by name ({sorted(map(str, values))}) "
                         "but the shader declares no push-constant block")
    if not all(m.name for m in members):
        raise ValueError(
            f"{what}: push constants were given by name, but the module does not name the "
            "members of its push-constant block (an optimizing compile such as glslc -O "
            "strips names): pass a list in the order the block declares "
            f"{push_block(info)}")
    index = {m.name: m.index for m in members}
    unknown = [k for k in values if k not in index]
    if unknown:
        raise ValueError(f"{what}: push_consts names {unknown[0]!r}, which the shader's "
                         f"push-constant block {push_block(info)} does not declare")
    missing = [f"member {m.label}" for m in members if m.name not in values]
    if missing:
        raise ShaderError(f"{what}: push_consts leaves {', '.join(missing)} of the shader's "
                          f"push-constant block {push_block(info)} unset")
    return _pack_push([(index[k], v) for k, v in values.items()], what, info,
                      "push_consts[{!r}]", keys=list(values))


def _flat(v: Any, out: list[Any]) -> bool:
    """Appends the scalars of a (nested) sequence to out; False if v is a single value."""
    if isinstance(v, np.ndarray):
        out.extend(v.reshape(-1).tolist() if v.dtype.kind in "biuf" else list(v.reshape(-1)))
        return True
    if isinstance(v, (list, tuple)):
        for x in v:
            if not _flat(x, out):
                out.append(x)
        return True
    return False


def _pack_push(items: list[tuple[int, Any]], what: str, info: ShaderInfo, label: str,
               keys: list[Any] | None = None) -> bytes:
    """Packs (member index, value) pairs into a block of the shader's size."""
    members = info.push_constant_members
    blob = bytearray(info.push_constant_size)
    for pos, (i, v) in enumerate(items):
        m = members[i]
        # Its name (push_consts[0]) is formatted only when a message needs it.
        where = _Where(label, keys[pos] if keys is not None else i)
        if not m.slots:
            raise TypeError(
                f"{what}: member {m.label} of the push-constant block is a {m.type_name}, "
                "which push constants from a list cannot give: pass the whole block as a "
                "numpy array or bytes laid out as the shader declares it")
        scalars: list[Any] = []
        if not _flat(v, scalars):
            if len(m.slots) != 1:
                raise TypeError(f"{what}: {where} is {v!r} ({type(v).__name__}), but member "
                                f"{m.label} is a {m.type_name}: give its {len(m.slots)} "
                                "values as a list")
            scalars = [v]
        elif len(scalars) != len(m.slots):
            raise ValueError(f"{what}: {where} gives {_count(len(scalars), 'value')}, but member "
                             f"{m.label} is a {m.type_name} of {len(m.slots)}")
        for k, (x, off) in enumerate(zip(scalars, m.slots)):
            part = where if len(m.slots) == 1 else f"{where}[{k}]"
            struct.pack_into(_FMT[(m.kind, m.width)], blob, off, _fit_push(x, m, part, what))
    return bytes(blob)


class _Where:
    """A push constant's place for messages (`push_consts[0]`), formatted when one is made."""
    __slots__ = ("label", "key")

    def __init__(self, label: str, key: Any):
        self.label = label
        self.key = key

    def __str__(self) -> str:
        return self.label.format(self.key)


def _fit_push(v: Any, m: Any, where: Any, what: str) -> int | float:
    """v as member m's scalar type takes it; TypeError or ValueError naming it otherwise."""
    if type(v) is float and m.kind == "float" and m.width == 32:
        # The common case first (a request's float): what the general path below returns.
        if not math.isfinite(v) or abs(v) <= _FLOAT32_MAX:
            return v
    if not isinstance(v, (numbers.Real, np.number, np.bool_)) or isinstance(
            v, (np.complexfloating, np.timedelta64, np.datetime64)):
        raise TypeError(f"{what}: {where} is {v!r} ({type(v).__name__}), but member {m.label} "
                        f"of the push-constant block is a {m.type_name}: give a number")
    if m.kind == "float":
        top = _FLOAT32_MAX if m.width == 32 else float(np.finfo(np.float64).max)
        try:
            f: float | None = float(v)
        except OverflowError:   # an int beyond any float
            f = None
        if f is not None and (not math.isfinite(f) or abs(f) <= top):
            return f   # inf and nan are values of a float like any other
        raise ValueError(f"{what}: {where}={v!r} does not fit member {m.label}, a "
                         f"{m.type_name} ({m.width}-bit float): give a number of magnitude "
                         f"at most {top:.6g}")
    bits = 1 if m.kind == "bool" else m.width
    lo = -(1 << (bits - 1)) if m.kind == "int" else 0
    hi = (1 << (bits - 1)) - 1 if m.kind == "int" else (1 << bits) - 1
    if isinstance(v, (numbers.Integral, np.integer, np.bool_)):
        n: int | None = int(v)
    else:
        f = float(v)
        n = int(f) if math.isfinite(f) and f == math.floor(f) else None
    if n is None or not lo <= n <= hi:
        raise ValueError(f"{what}: {where}={v!r} does not fit member {m.label}, a "
                         f"{m.type_name} ({m.width}-bit {m.kind}): give a whole number from "
                         f"{lo} to {hi}")
    return n


def push_block(info: ShaderInfo) -> str:
    """The push-constant block for messages, e.g. `P { uint n; float a; }` (8 bytes)."""
    body = " ".join(f"{m.declaration};" for m in info.push_constant_members)
    name = f"{info.push_constant_block} " if info.push_constant_block else ""
    return f"`{name}{{ {body} }}` ({info.push_constant_size} bytes)"


def check_push_bytes(push: bytes, info: ShaderInfo, what: str) -> bytes:
    """Encoded push constants checked against the block the shader declares: none for a
    shader without one, exactly the block's bytes otherwise (fewer: ShaderError, the block
    would be partly unset; none at all is the caller's case)."""
    need = info.push_constant_size
    if need == 0:
        if push:
            raise ValueError(f"{what}: push constants were given ({len(push)} bytes) but "
                             "the shader declares none")
        return b""
    if len(push) < need:
        raise ShaderError(
            f"{what}: the shader's push-constant block {push_block(info)} takes {need} "
            f"bytes, {len(push)} bytes were given: the rest would be left unset (a numpy "
            "array is taken bit for bit; a list is packed member by member)")
    if len(push) > need:
        raise ValueError(f"{what}: the shader's push-constant block {push_block(info)} "
                         f"takes {need} bytes, {len(push)} bytes were given")
    return push


def missing_push(info: ShaderInfo, what: str) -> ShaderError:
    """The error for a shader whose push-constant block was given no values."""
    zeros = ", ".join("0" if len(m.slots) == 1 else f"[0] * {len(m.slots)}"
                      for m in info.push_constant_members if m.slots)
    return ShaderError(
        f"{what}: the shader declares the push-constant block {push_block(info)} and no "
        f"push constants were given, so it would read zeros it was never given: pass "
        f"push_consts (zeros on purpose: push_consts=[{zeros}])")


_FLOAT32_MAX = float(np.finfo(np.float32).max)


_FMT = {("float", 32): "<f", ("float", 64): "<d", ("int", 32): "<i", ("int", 64): "<q",
        ("uint", 32): "<I", ("uint", 64): "<Q", ("bool", 32): "<I",
        ("int", 16): "<h", ("uint", 16): "<H", ("float", 16): "<e",
        ("int", 8): "<b", ("uint", 8): "<B"}


def _float_block(info: ShaderInfo) -> tuple[int, struct.Struct] | None:
    """(members, struct) for a push-constant block of 32-bit float scalars only, whose
    values a list or tuple of Python floats gives: packed in one struct call to the bytes
    _pack_push gives them (zeros between and after the members); None for any other
    block."""
    members = info.push_constant_members
    size = info.push_constant_size
    if not members or size % 4:
        return None
    fmt = "<"
    pos = 0
    for m in members:
        if m.kind != "float" or m.width != 32 or len(m.slots) != 1 or m.slots[0] < pos:
            return None
        fmt += "x" * (m.slots[0] - pos) + "f"
        pos = m.slots[0] + 4
    if pos > size:
        return None
    packer = struct.Struct(fmt + "x" * (size - pos))
    return (len(members), packer) if packer.size == size else None


def _pack_floats(block: tuple[int, struct.Struct], values: list[Any] | tuple[Any, ...]
                 ) -> bytes | None:
    """The push constants `values` (a list or tuple) of a float block (_float_block), when
    they are one Python float a member, each one its 32-bit float takes as it is (what
    _fit_push's first case returns); None otherwise, for the general path (push_bytes)
    to pack or to refuse with its message."""
    count, packer = block
    if len(values) != count:
        return None
    for v in values:
        if type(v) is not float or _FLOAT32_MAX < abs(v) < math.inf:
            return None
    return packer.pack(*values)


def encode_spec_consts(values: Any, info: ShaderInfo, what: str) -> tuple[
        list[int], list[int], list[int], bytes]:
    """Specialization constant i gets id i. A list's values take the type the shader
    declares for that id (so [2.0] specializes a float, [2] an int); a numpy array is
    passed bit for bit with its dtype, whose width must match the declaration."""
    if values is None:
        return [], [], [], b""
    decl = info.spec_constants
    ids: list[int] = []
    offsets: list[int] = []
    sizes: list[int] = []
    blob = bytearray()
    if isinstance(values, np.ndarray):
        arr = np.ascontiguousarray(values).reshape(-1)
        items: list[Any] = [arr[i:i + 1].tobytes() for i in range(arr.size)]
    else:
        items = _number_list(values, what, "spec_consts")
    for i, v in enumerate(items):
        sc: SpecConstant | None = decl.get(i)
        if sc is None:
            declared = sorted(decl) or "none"
            raise ValueError(
                f"{what}: specialization constant {i} is not declared by the shader "
                f"(constant_id values it declares: {declared})")
        width = max(8, sc.width)
        if isinstance(v, bytes):
            if len(v) * 8 != width:
                raise ValueError(
                    f"{what}: specialization constant {i} is a {sc.width}-bit {sc.kind} in "
                    f"the shader, but the array gives {len(v) * 8} bits")
            raw = v
        else:
            fmt = _FMT.get((sc.kind, sc.width))
            if fmt is None:
                raise ValueError(f"{what}: unsupported specialization constant type "
                                 f"{sc.kind}{sc.width}")
            raw = _pack_spec(fmt, v, sc, i, what)
        ids.append(i)
        offsets.append(len(blob))
        sizes.append(len(raw))
        blob += raw
        # Each entry 4-byte aligned, as drivers expect.
        while len(blob) % 4:
            blob += b"\0"
    return ids, offsets, sizes, bytes(blob)


def _pack_spec(fmt: str, v: Any, sc: SpecConstant, i: int, what: str) -> bytes:
    """One specialization constant's bytes; ValueError naming the constant, the value and
    the range of its declared type when it does not fit (an integer constant takes only
    whole numbers; a float constant any float its width holds, inf and nan included)."""
    f = float(v)
    if sc.kind == "float":
        try:
            return struct.pack(fmt, f)
        except (struct.error, OverflowError):
            top = 65504.0 if sc.width == 16 else _FLOAT32_MAX
            need = f"a number of magnitude at most {top:.6g}"
    else:
        bits = 1 if sc.kind == "bool" else sc.width
        lo = -(1 << (bits - 1)) if sc.kind == "int" else 0
        hi = (1 << (bits - 1)) - 1 if sc.kind == "int" else (1 << bits) - 1
        if math.isfinite(f) and f == math.floor(f) and lo <= int(v) <= hi:
            return struct.pack(fmt, int(v))
        need = f"a whole number from {lo} to {hi}"
    raise ValueError(f"{what}: specialization constant {i}={v!r} does not fit the shader's "
                     f"{sc.width}-bit {sc.kind} (constant_id {sc.id}): give {need}")


_GLSL = {("float", 16): "float16_t", ("float", 32): "float", ("float", 64): "double",
         ("int", 8): "int8_t", ("int", 16): "int16_t", ("int", 32): "int", ("int", 64): "int64_t",
         ("uint", 8): "uint8_t", ("uint", 16): "uint16_t", ("uint", 32): "uint",
         ("uint", 64): "uint64_t"}
_KIND = {"f": "float", "i": "int", "u": "uint", "b": "uint"}   # bool: bytes of 0 or 1
_NUMPY = {("float", 16): "float16", ("float", 32): "float32", ("float", 64): "float64",
          ("int", 8): "int8", ("int", 16): "int16", ("int", 32): "int32", ("int", 64): "int64",
          ("uint", 8): "uint8", ("uint", 16): "uint16", ("uint", 32): "uint32",
          ("uint", 64): "uint64"}


def mismatched_binding(dtypes: Seq[np.dtype], info: ShaderInfo) -> int | None:
    """The rule of algorithm() and stream() for binding i taking dtypes[i]: the first
    binding whose dtype cannot be the element type of its runtime array, or None.

    float64 from np.zeros() or int64 from np.arange() into `float a[]`, float32 into
    `int a[]`, uint8 into `uint a[]` do not match: the shader would read the bytes as its
    own type, not convert them. int and uint of one width match (indices and bit patterns
    move between them freely). Bindings the module does not use have no declared type and
    take any dtype. (Dtypes that are not numbers never reach this rule: check_dtype
    refuses them first.)"""
    for i, dt in enumerate(dtypes):
        elem = info.element_types.get(i)
        kind = _KIND.get(dt.kind)
        if elem is None or kind is None:
            continue
        skind, swidth = elem
        width = dt.itemsize * 8
        if (kind, width) == elem or ({kind, skind} == {"int", "uint"} and width == swidth):
            continue
        return i
    return None


def _mismatch_message(what: str, i: int, name: str, dtype: np.dtype,
                      info: ShaderInfo) -> tuple[str, str]:
    """The start of the ShaderError for binding i, and the numpy name of the dtype the
    shader wants."""
    skind, swidth = elem = info.element_types[i]
    glsl = _GLSL.get(elem, f"{skind}{swidth}")
    want = _NUMPY.get(elem, glsl)
    return (f"{what}: binding {i} is {name} (dtype {dtype}), but the shader declares it as "
            f"`{glsl}[]` ({swidth}-bit {skind}), so every value would be misread", want)


def check_element_types(tensors: list[Tensor], info: ShaderInfo, what: str,
                        reinterpret: bool = False) -> None:
    """algorithm()'s check of each tensor's dtype against the element type of its
    binding's runtime array (mismatched_binding): ShaderError when they differ. A
    deliberate reinterpretation says so, either with a numpy view of the shader's type
    (mgr.tensor(arr.view(np.float32))) or with algorithm(..., reinterpret=True), which
    skips this check (kp's behaviour).
    """
    if reinterpret:
        return
    i = mismatched_binding([t.dtype for t in tensors], info)
    if i is None:
        return
    t = tensors[i]
    head, want = _mismatch_message(what, i, repr(t), t.dtype, info)
    raise ShaderError(
        f"{head}. Create the tensor with dtype={want} (e.g. "
        f"mgr.tensor(arr.astype(np.{want}))), or change the shader's type; to reinterpret "
        f"the bytes on purpose, pass a view (arr.view(np.{want})) or "
        "algorithm(..., reinterpret=True)")


def check_array_element_types(arrays: Seq[np.ndarray], names: Seq[str], info: ShaderInfo,
                              what: str) -> None:
    """stream()'s check of the arrays bound to a shader (binding i is arrays[i], called
    names[i] in the message): the rule of algorithm(), mismatched_binding."""
    i = mismatched_binding([a.dtype for a in arrays], info)
    if i is None:
        return
    head, want = _mismatch_message(what, i, names[i], arrays[i].dtype, info)
    raise ShaderError(
        f"{head}. Pass an array of dtype {want} (arr.astype(np.{want})), or change the "
        f"shader's type; to reinterpret the bytes on purpose, pass a view "
        f"(arr.view(np.{want}))")


def spec_values(spec: tuple[list[int], list[int], list[int], bytes],
                info: ShaderInfo) -> dict[int, Any]:
    """The values of encoded specialization constants (encode_spec_consts), by id."""
    values = {}
    for sid, off, size in zip(spec[0], spec[1], spec[2]):
        sc = info.spec_constants[sid]
        fmt = _FMT.get((sc.kind, sc.width))
        if fmt:
            values[sid] = struct.unpack(fmt, spec[3][off:off + size])[0]
    return values


def parse_workgroup(workgroup: Any, what: str, maxc: tuple[int, int, int]) -> tuple[int, int, int]:
    """A workgroup given by the caller: up to three integers, each from 1 to the device's
    maxComputeWorkGroupCount on its axis; TypeError or ValueError naming it otherwise."""
    return _bounded(_workgroup_tuple(workgroup, what), what, maxc)


def _workgroup_tuple(workgroup: Any, what: str) -> tuple[int, int, int]:
    """Up to three integers, padded with 1s; TypeError or ValueError naming it otherwise."""
    if isinstance(workgroup, (str, bytes)) or not hasattr(workgroup, "__iter__"):
        raise TypeError(f"{what}: workgroup must be a tuple of up to three "
                        f"integers, not {type(workgroup).__name__} {workgroup!r}")
    try:
        wg_list = [operator.index(v) for v in workgroup]
    except TypeError as exc:
        raise TypeError(f"{what}: workgroup must be up to three integers, "
                        f"not {workgroup!r}") from exc
    if not 1 <= len(wg_list) <= 3:
        raise ValueError(f"{what}: workgroup must have 1 to 3 entries, not {workgroup!r}")
    wg_list += [1] * (3 - len(wg_list))
    return (wg_list[0], wg_list[1], wg_list[2])


def _bounded(wg: tuple[int, int, int], what: str,
             maxc: tuple[int, int, int]) -> tuple[int, int, int]:
    for axis, (v, m) in enumerate(zip(wg, maxc)):
        if v < 1:
            raise ValueError(f"{what}: workgroup {wg} has {v} groups on axis {axis}; "
                             "every axis needs at least 1")
        if v > m:
            raise ValueError(f"{what}: workgroup {wg} exceeds this device's "
                             f"maxComputeWorkGroupCount {maxc} on axis {axis}")
    return wg


# Signatures (tensor dtypes and sizes) whose checks an algorithm skips, kept per module.
_SIGNATURES_KEPT = 64

# gl_GlobalInvocationID and the bases a dispatch in parts pushes are 32-bit uints.
_UINT32_END = 1 << 32


def _bounded_parts(wg: tuple[int, int, int], what: str, maxc: tuple[int, int, int],
                   local: tuple[int, int, int]) -> tuple[int, int, int]:
    """An algorithm's workgroup: from 1 on each axis; beyond maxComputeWorkGroupCount it
    is dispatched in parts, up to the 32-bit range of gl_GlobalInvocationID."""
    for axis, (v, m, n) in enumerate(zip(wg, maxc, local)):
        if v < 1:
            raise ValueError(f"{what}: workgroup {wg} has {v} groups on axis {axis}; "
                             "every axis needs at least 1")
        if v * n > _UINT32_END:
            raise ValueError(
                f"{what}: workgroup {wg} has {v} groups of {n} invocations on axis {axis}, "
                f"which would take gl_GlobalInvocationID past its 32-bit range: at most "
                f"{_UINT32_END // n} groups on that axis (beyond this device's "
                f"maxComputeWorkGroupCount {maxc} a dispatch runs in parts)")
    return wg


def dispatch_parts(workgroup: tuple[int, int, int], maxc: tuple[int, int, int]
                   ) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """(first group, group counts) of each part of a dispatch of `workgroup` groups
    split so that every part is within maxc on every axis (x fastest)."""
    axes = [[(b, min(m, n - b)) for b in range(0, n, m)] for n, m in zip(workgroup, maxc)]
    return [((bx, by, bz), (cx, cy, cz)) for bz, cz in axes[2] for by, cy in axes[1]
            for bx, cx in axes[0]]


class Algorithm(Child):
    """A compute shader bound to tensors (binding i is tensors[i]).

    The pipeline is cached by the manager by (SPIR-V, specialization constants): another
    algorithm with the same shader reuses it. destroy() frees the descriptor set after
    the GPU work that uses it; the tensors are only referred to, never freed.
    """
    _what = "algorithm"

    def __init__(self, manager: object, engine: Engine, tensors: Seq[Tensor], spirv: bytes,
                 workgroup: Seq[int] | None, spec_consts: Any, push_consts: Any, *,
                 reinterpret: bool = False):
        state = engine
        seen = state.destroys   # (a tensor destroyed after the checks below: see the lock)
        tensors = list(tensors)
        # (dtype, bytes) of each tensor, when every one is a live Tensor of this manager
        # (the common case, in one call); else the checks below say which is not.
        shapes = binding_shapes(tensors, manager)
        if shapes is None:
            for i, t in enumerate(tensors):
                if not isinstance(t, Tensor):
                    raise TypeError(f"algorithm binding {i} must be a Tensor, not "
                                    f"{type(t).__name__}")
                if t.manager is not manager:
                    raise ValueError(f"algorithm binding {i}: {t!r} belongs to another manager")
                t.check_alive()
            shapes = tuple([(t.dtype, t.nbytes) for t in tensors])
        info = state.reflections.get(spirv)
        what = f"algorithm over {len(tensors)} tensors"
        if info.other_descriptors:
            dset, binding, kind = info.other_descriptors[0]
            raise ShaderError(
                f"{what}: the shader declares a {kind} at set {dset}, binding {binding}; "
                "scopedgpu binds tensors as storage buffers of set 0")
        # What depends on the module and this device alone (specialization constants
        # encoded, local size and push-constant block checked against the device's
        # limits, the bindings it needs) is derived once per module, for algorithms
        # without specialization constants, by the first one made: every check it stands
        # for passed for it, and none of them can differ.
        reflections = state.reflections
        key = spirv if type(spirv) is bytes else bytes(spirv)
        derived = reflections.derived.get(key) if spec_consts is None else None
        if derived is not None and derived[0] is not info:
            derived = None
        # Tensors of the dtypes and sizes an earlier algorithm of this module (derived,
        # without a workgroup) was made with: the binding, dtype and size checks below
        # passed for them and pass again, and the default workgroup is the one it got
        # (derived[5]: signature -> (workgroup, whether it exceeds the device's
        # maxComputeWorkGroupCount, its pipeline's key)). Errors come from the full path only.
        sig = None
        known = None
        if derived is not None and workgroup is None:
            sig = (not reinterpret, *shapes)
            known = derived[5].get(sig)
        dev = state.info
        if known is None:
            self._check_bindings(tensors, info, what, reinterpret, derived, dev)

        if derived is not None:
            spec, local, block = derived[1], derived[2], derived[3]
        else:
            spec = encode_spec_consts(spec_consts, info, what)
            values = spec_values(spec, info)
            local = info.local_size_with(values)
            if (any(v < 1 for v in local)
                    or any(v > m for v, m in zip(local, dev.max_workgroup_size))
                    or local[0] * local[1] * local[2] > dev.max_workgroup_invocations):
                raise ShaderError(
                    f"{what}: local size {local} exceeds this device's limits "
                    f"(maxComputeWorkGroupSize {dev.max_workgroup_size}, "
                    f"maxComputeWorkGroupInvocations {dev.max_workgroup_invocations})")
            if info.push_constant_size > dev.max_push_constants_size:
                raise ShaderError(f"{what}: the shader's push constants take "
                                  f"{info.push_constant_size} bytes; this device allows "
                                  f"{dev.max_push_constants_size}")
            narrow = sorted(w for w in info.push_constant_widths if w < 32)
            if narrow or info.push_constant_size % 4:
                # VkPushConstantRange: "size must be a multiple of 4"; 8- and 16-bit members
                # need storagePushConstant8/16, which scopedgpu does not enable.
                raise ShaderError(
                    f"{what}: the shader's push-constant block takes {info.push_constant_size} "
                    f"bytes with {'/'.join(map(str, narrow)) or 'no'}-bit members; scopedgpu "
                    "takes push constants of 32- and 64-bit members only (a whole number of "
                    "4-byte words): use uint/int/float members and unpack narrow values in "
                    "the shader (e.g. unpackHalf2x16)")
            shared = info.shared_memory_size_with(values)
            if shared is not None and shared > dev.max_shared_memory_size:
                raise ShaderError(
                    f"{what}: the shader declares {shared} bytes of shared memory (Workgroup "
                    f"variables, specialization constants applied), more than this device's "
                    f"maxComputeSharedMemorySize ({dev.max_shared_memory_size} bytes)")
            block = _float_block(info)
            if spec_consts is None:
                need = max(info.bindings) + 1 if info.bindings else 0
                reflections.derived[key] = (info, spec, local, block, need, {})
        self._info = info
        self._block = block
        self._engine_info = dev   # the DeviceInfo (check_workgroup runs before Child.__init__)
        self._local_size = local
        push = None
        if block is not None and (type(push_consts) is list or type(push_consts) is tuple):
            push = _pack_floats(block, push_consts)
        self._push = push if push is not None else encode_push_consts(push_consts, what, info)
        self._push_values = push_consts
        if known is None:
            wg = self._workgroup = self.check_workgroup(workgroup, tensors, what,
                                                        dev.max_workgroup_count)
            oversized = self._oversized(wg)
            program_key = None
            if sig is not None and len(derived[5]) < _SIGNATURES_KEPT:  # type: ignore[index]
                # (with the key of its pipeline: the same for every algorithm of the
                # signature, whose module, constants and binding count are the same)
                program_key = state.programs.key_of(spirv, spec, len(tensors))
                derived[5][sig] = (wg, oversized, program_key)  # type: ignore[index]
        else:
            self._workgroup, oversized, program_key = known
        self._parts: list[tuple[bytes, tuple[int, int, int]]] | None = None
        self._tensors = tensors
        self._spec_consts = spec_consts
        self._spirv = spirv
        self._spec = spec

        with state.lock:
            if state.closed:
                state.check_open()
            if state.destroys != seen:   # a child destroyed since the checks above
                for t in tensors:        # (by another thread): none of the tensors?
                    t.check_alive()
            state.collect()
            if state.debug:
                state.stale_validation(f"creating {what}")
            # Ctrl-C may arrive anywhere below: the handle owns the program reference
            # as soon as it is taken, and the descriptor set as soon as the shim returns it.
            handle = _AlgoHandle(None, None, state.programs)
            out = None
            try:
                program = state.programs.get(spirv, info, spec, len(tensors), handle,
                                             program_key)
                ranges = self._ranges = [t.gpu_range for t in tensors]
                sizes = [nbytes for _, nbytes in shapes]
                bound = (*ranges, *sizes)
                # A destroyed algorithm's set, whose work completed, is bound again
                # unless it holds these bindings already (a service's requests of one
                # shape get the ranges and the set a finished one gave back).
                spare = state.programs.take_spare(program, handle)
                if spare and handle.bound == bound:
                    bound = handle.bound   # (the old tuple: one object less made to last)
                else:
                    blocks = [r.block.handle for r in ranges]
                    offsets = [r.offset for r in ranges]
                    if spare:
                        handle.bound = None   # (unknown if the rebind fails midway)
                        _vk.dset_rebind(handle.dset, program.handle, blocks, offsets, sizes,
                                        what)
                    else:
                        out = _vk.out("dset")
                        _vk.dset_create(state.dev, program.handle, blocks, offsets, sizes,
                                        out, f"creating the descriptor set of {what}")
                        handle.dset = out[0]
                handle.bound = bound
                super().__init__(manager, engine, handle)
                state.algorithms.refs[self._ref] = None   # (ChildSet.add, inlined)
                if oversized:
                    self._parts = self._split_parts(self._push, self._workgroup, what)
                self._defaults = (self._push, self._workgroup, self._parts)
            except BaseException as exc:
                ref = getattr(self, "_ref", None)
                if ref is not None:
                    state.algorithms.refs.pop(ref, None)
                    state.handles.pop(ref, None)
                if handle.dset is None and out is not None and out[0] != _vk.NULL:
                    handle.dset = out[0]
                handle.release(state, False)
                if state.debug:
                    state.validation_failed(exc, f"creating {what}")
                raise
            if state.debug:
                try:
                    state.check_validation(f"creating {self!r}")
                except BaseException:
                    self.destroy()
                    raise

    @staticmethod
    def _check_bindings(tensors: list[Tensor], info: ShaderInfo, what: str, reinterpret: bool,
                        derived: Any, dev: Any) -> None:
        """The checks of the tensors against the module's bindings and the device's
        limits (each depends on the tensors' count, dtypes and sizes alone)."""
        # Bindings are matched by number: binding i is tensors[i]. A tensor whose binding
        # the module does not use (never declared, or removed by an optimizer) is bound
        # and skipped by the shader; every binding the module uses needs a tensor.
        unbound = [b for b in info.bindings if b >= len(tensors)] if (
            derived is None or len(tensors) < derived[4]) else None
        if unbound:
            raise ShaderError(
                f"{what}: the shader declares storage-buffer bindings {info.bindings}, but "
                f"only {len(tensors)} tensors were given (binding i is tensors[i], so "
                f"binding {unbound[0]} needs at least {unbound[-1] + 1} tensors)")
        check_element_types(tensors, info, what, reinterpret)
        limit = dev.max_storage_buffer_range
        for i, t in enumerate(tensors):
            if t.nbytes > limit:
                # VkWriteDescriptorSet: a storage buffer's range "must be less than or
                # equal to VkPhysicalDeviceLimits::maxStorageBufferRange".
                raise ValueError(
                    f"{what}: binding {i}, {t!r}, is {t.nbytes} bytes, more than this "
                    f"device's maxStorageBufferRange ({limit} bytes) that one binding can "
                    f"span: use smaller tensors (at most {limit} bytes each), split the "
                    "data over several bindings, or run on a device with a larger "
                    "maxStorageBufferRange")
        if len(tensors) > dev.max_storage_buffers_per_stage:
            raise ValueError(f"{what}: this device binds at most "
                             f"{dev.max_storage_buffers_per_stage} storage buffers per shader")

    def check_workgroup(self, workgroup: Seq[int] | None, tensors: list[Tensor],
                        what: str, maxc: tuple[int, int, int]) -> tuple[int, int, int]:
        """The number of workgroups: `workgroup` checked, or by default enough groups of
        the shader's local size to cover tensors[0]. Beyond the device's
        maxComputeWorkGroupCount it is dispatched in parts (split_parts), where the shader
        allows it; ValueError saying why where it does not."""
        local = self._local_size
        if workgroup is None:
            if not tensors:
                raise ValueError(f"{what}: give a workgroup when there are no tensors")
            n = tensors[0].size
            wg = ((n + local[0] - 1) // local[0], 1, 1)
            if wg[0] <= maxc[0] and wg[0] * local[0] <= _UINT32_END:
                return wg   # what _bounded_parts returns: n >= 1, one group on y and z
            if wg[0] > maxc[0]:
                why = self._unsplittable()
                if why is not None:
                    t = tensors[0]
                    dev = self._engine_info
                    need = -(-n // maxc[0])
                    raise ValueError(
                        f"{what}: no workgroup was given, and the default (one invocation "
                        f"per element of tensors[0], {t!r}: {n} elements, {t.nbytes} bytes) "
                        f"needs {wg[0]} groups of the shader's local size {local[0]} on "
                        f"axis 0, more than this device's maxComputeWorkGroupCount[0] "
                        f"({maxc[0]}), and it cannot be dispatched in parts: {why}. Either "
                        f"use a local_size_x of at least {need} (this device allows up to "
                        f"{min(dev.max_workgroup_size[0], dev.max_workgroup_invocations)}), "
                        f"or pass an explicit 2D grid, e.g. workgroup=({maxc[0]}, "
                        f"{-(-wg[0] // maxc[0])}, 1), with the shader indexing "
                        "gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + "
                        "gl_GlobalInvocationID.x")
            return _bounded_parts(wg, what, maxc, local)
        wg = _bounded_parts(_workgroup_tuple(workgroup, what), what, maxc, local)
        if self._oversized(wg):
            why = self._unsplittable()
            if why is not None:
                axis = next(a for a in range(3) if wg[a] > maxc[a])
                raise ValueError(f"{what}: workgroup {wg} exceeds this device's "
                                 f"maxComputeWorkGroupCount {maxc} on axis {axis}, and it "
                                 f"cannot be dispatched in parts: {why}")
        return wg

    def _oversized(self, wg: tuple[int, int, int]) -> bool:
        maxc = self._engine_info.max_workgroup_count
        return wg[0] > maxc[0] or wg[1] > maxc[1] or wg[2] > maxc[2]

    def _unsplittable(self) -> str | None:
        """Why this shader cannot run as several dispatches (as reflection tells; the
        rewrite may still refuse what reflection does not see), or None."""
        if BUILTIN_NUM_WORKGROUPS in self._info.builtins:
            return ("the shader reads gl_NumWorkGroups, which each part would see as its "
                    "own count of groups, not the whole dispatch's")
        return None

    def _split_parts(self, push: bytes, workgroup: tuple[int, int, int], what: str
                     ) -> list[tuple[bytes, tuple[int, int, int]]]:
        """The (push constants, group counts) of the parts of a dispatch of `workgroup`
        groups beyond the device's limit, building the rewritten module's pipeline the
        first time (_spirv_split); ValueError or ShaderError where it cannot be."""
        state = self._engine
        dev = self._engine_info
        handle = self._handle
        with state.lock:
            state.check_open()
            holder = handle.split  # type: ignore[attr-defined]
            if holder is None:
                info = self._info
                try:
                    split = split_module(bytes(self._spirv), info.push_constant_size)
                except CannotSplit as exc:
                    raise ValueError(
                        f"{what}: workgroup {workgroup} exceeds this device's "
                        f"maxComputeWorkGroupCount {dev.max_workgroup_count}, and it cannot "
                        f"be dispatched in parts: {exc}") from None
                if split.push_size > dev.max_push_constants_size:
                    raise ValueError(
                        f"{what}: workgroup {workgroup} exceeds this device's "
                        f"maxComputeWorkGroupCount {dev.max_workgroup_count}, and it cannot "
                        f"be dispatched in parts: each part's base goes in the push "
                        f"constants after the shader's {info.push_constant_size} bytes, "
                        f"{split.push_size} bytes in all, more than this device's "
                        f"maxPushConstantsSize ({dev.max_push_constants_size})")
                # The handle holds the holder before the reference is taken, so that a
                # Ctrl-C anywhere leaves it where release() finds it (Programs.get stores
                # the reference in holder.program in the line that takes it).
                holder = handle.split = _SplitProgram(split)  # type: ignore[attr-defined]
            if holder.program is None:   # (again, where an interrupt cut it short)
                # Validated like any module before a driver sees it (Reflections.get).
                spirv = holder.split.spirv
                state.programs.get(spirv, state.reflections.get(spirv), self._spec,
                                   len(self._tensors), holder)
        split = holder.split
        local = self._local_size
        template = push.ljust(split.push_size, b"\0")
        parts = []
        for base, counts in dispatch_parts(workgroup, dev.max_workgroup_count):
            blob = bytearray(template)
            if split.group_offset is not None:
                struct.pack_into("<3I", blob, split.group_offset, *base)
            if split.invocation_offset is not None:
                struct.pack_into("<3I", blob, split.invocation_offset,
                                 *(b * n for b, n in zip(base, local)))
            parts.append((bytes(blob), counts))
        return parts

    # -- public -------------------------------------------------------------------
    @property
    def tensors(self) -> list[Tensor]:
        """The bound tensors: binding i is tensors[i]. Referred to, never owned."""
        return list(self._tensors)

    @property
    def workgroup(self) -> tuple[int, int, int]:
        """The number of workgroups (x, y, z) dispatched by default."""
        return self._workgroup

    @property
    def local_size(self) -> tuple[int, int, int]:
        """The shader's local size, specialization constants applied."""
        return self._local_size

    @property
    def spec_consts(self) -> Any:
        """The specialization constants, as given."""
        return self._spec_consts

    @property
    def push_consts(self) -> Any:
        """The default push constants, as given (OpAlgoDispatch may override them)."""
        return self._push_values

    def __repr__(self) -> str:
        state = " destroyed" if self._destroyed else ""
        return (f"<Algorithm #{self._id} bindings={len(self._tensors)} "
                f"workgroup={self._workgroup} local_size={self._local_size}{state}>")

    # -- the package's interface (ops and sequences) ----------------------------------
    @property
    def bound(self) -> list[Tensor]:
        """The bound tensors themselves, not a copy (package-internal)."""
        return self._tensors

    @property
    def bound_ranges(self) -> list[Any]:
        """The pool ranges of the bound tensors, binding i's at i: what a dispatch
        accesses (package-internal; a tensor's range never changes while it lives, and a
        dispatch is recorded only while every bound tensor does)."""
        return self._ranges

    @property
    def push_bytes(self) -> bytes:
        """The default push constants, encoded (package-internal)."""
        return self._push

    @property
    def max_workgroup_count(self) -> tuple[int, int, int]:
        """The device's limit on workgroups per axis (package-internal)."""
        return self._engine_info.max_workgroup_count

    @property
    def binding_access(self) -> dict[int, tuple[bool, bool]] | None:
        """binding -> (read?, written?) by the shader's instructions; None when not known
        (package-internal)."""
        return self._info.binding_access

    def check_push(self, push: bytes, what: str) -> bytes:
        """Push-constant bytes checked against the shader (package-internal)."""
        return check_push_bytes(push, self._info, what)

    def encode_push(self, values: Any, what: str) -> bytes:
        """An OpAlgoDispatch override, encoded as the shader's block declares and checked
        (package-internal); none (None, or empty) gives the algorithm's own."""
        block = self._block
        if block is not None and (type(values) is list or type(values) is tuple):
            fast = _pack_floats(block, values)
            if fast is not None:
                return fast
        push = push_bytes(values, what, self._info)
        return check_push_bytes(push, self._info, what) if push else self._push

    @property
    def handle(self) -> Handle:
        """What this algorithm owns (package-internal: a sequence's in-flight set)."""
        return self._handle

    def dispatch_handles(self) -> tuple[Any, Any]:
        """(pipeline, descriptor set) of a live algorithm, for a dispatch
        (package-internal)."""
        h = self._handle
        return h.program.handle, h.dset  # type: ignore[attr-defined]

    @property
    def dispatch_defaults(self) -> tuple[bytes, tuple[int, int, int], Any]:
        """(push_bytes, workgroup, parts): what OpAlgoDispatch(algo) records, in one
        read (package-internal)."""
        return self._defaults

    @property
    def parts(self) -> list[tuple[bytes, tuple[int, int, int]]] | None:
        """The (push constants, group counts) of the parts its default dispatch is
        recorded as (its workgroup beyond the device's maxComputeWorkGroupCount), or None
        for one dispatch (package-internal)."""
        return self._parts

    def split_parts(self, push: bytes, workgroup: tuple[int, int, int],
                    what: str) -> list[tuple[bytes, tuple[int, int, int]]] | None:
        """The parts of a dispatch with these push constants and workgroup (checked by
        check_workgroup), or None when it fits the device's limit (package-internal)."""
        if not self._oversized(workgroup):
            return None
        self._check()
        return self._split_parts(push, workgroup, what)

    def split_handle(self) -> Any:
        """The pipeline of the module rewritten for dispatches in parts, of a live
        algorithm whose split_parts() gave parts (package-internal)."""
        return self._handle.split.program.handle  # type: ignore[attr-defined]

    def _forget(self) -> None:
        self._engine.algorithms.discard(self)
        # Unregistered (destroy() took its handle first): its weak reference goes, with
        # the callback that would only find nothing to release (see Tensor.destroy).
        self._ref = None  # type: ignore[assignment]
