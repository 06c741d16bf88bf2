"""SPIR-V reflection: what a compute shader needs from the algorithm that runs it.

Reads the module once, strictly: malformed words raise ShaderError here instead of
reaching a driver (some drivers crash on garbage). Reports the entry point's local size
(literal, LocalSizeId, or a WorkgroupSize built-in, specialization constants included),
the storage-buffer bindings of set 0 with the element type of each buffer's runtime
array, the push-constant block: its size, the widths of its members and each member's
name, offset and type (PushMember: what a list of push constants is packed by), the bytes
of shared
(Workgroup) memory the entry point declares, and the declared specialization constants
with their widths, and the built-ins it declares (BuiltIn decorations).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace
from typing import Callable

from scopedgpu._errors import ShaderError

MAGIC = 0x07230203

# Opcodes
OP_NAME = 5
OP_MEMBER_NAME = 6
OP_ENTRY_POINT = 15
OP_EXECUTION_MODE = 16
OP_EXECUTION_MODE_ID = 331
OP_TYPE_BOOL = 20
OP_TYPE_INT = 21
OP_TYPE_FLOAT = 22
OP_TYPE_VECTOR = 23
OP_TYPE_MATRIX = 24
OP_TYPE_ARRAY = 28
OP_TYPE_RUNTIME_ARRAY = 29
OP_TYPE_STRUCT = 30
OP_TYPE_POINTER = 32
OP_CONSTANT_TRUE = 41
OP_CONSTANT_FALSE = 42
OP_CONSTANT = 43
OP_CONSTANT_COMPOSITE = 44
OP_SPEC_CONSTANT_TRUE = 48
OP_SPEC_CONSTANT_FALSE = 49
OP_SPEC_CONSTANT = 50
OP_SPEC_CONSTANT_COMPOSITE = 51
OP_VARIABLE = 59
OP_FUNCTION_PARAMETER = 55
OP_FUNCTION_CALL = 57
OP_LOAD = 61
OP_STORE = 62
OP_COPY_MEMORY = 63
OP_COPY_MEMORY_SIZED = 64
OP_COPY_OBJECT = 83
OP_SELECT = 169
OP_PHI = 245
OP_ATOMIC_LOAD = 227
OP_ATOMIC_STORE = 228
# access chains: result = base[...] (result id a[1], base a[2])
_CHAINS = frozenset({65, 66, 67, 70, OP_COPY_OBJECT})
# atomics that read and write their pointer (a[2]): exchange, compare-exchange, the
# arithmetic ones, and the float add/min/max extensions
_ATOMIC_RMW = frozenset({229, 230, 231, *range(232, 243), 5614, 5615, 6035})
OP_DECORATE = 71
OP_MEMBER_DECORATE = 72
OP_MEMORY_MODEL = 14

# Decorations, storage classes, modes
DEC_SPEC_ID = 1
DEC_ROW_MAJOR = 4
DEC_MATRIX_STRIDE = 7
DEC_BUFFER_BLOCK = 3
DEC_ARRAY_STRIDE = 6
DEC_BUILTIN = 11
DEC_BINDING = 33
DEC_DESCRIPTOR_SET = 34
DEC_OFFSET = 35
_BUILTIN_WORKGROUP_SIZE = 25
SC_UNIFORM = 2
SC_WORKGROUP = 4
SC_PUSH_CONSTANT = 9
SC_STORAGE_BUFFER = 12
_MODE_LOCAL_SIZE = 17
_MODE_LOCAL_SIZE_ID = 38
_MODEL_GLCOMPUTE = 5


@dataclass
class SpecConstant:
    id: int
    kind: str      # "float", "int", "uint", "bool"
    width: int     # bits
    default: float | int | bool


_SCALAR_GLSL = {("float", 32): "float", ("float", 64): "double", ("float", 16): "float16_t",
                ("int", 32): "int", ("uint", 32): "uint", ("bool", 32): "bool",
                ("int", 64): "int64_t", ("uint", 64): "uint64_t", ("int", 16): "int16_t",
                ("uint", 16): "uint16_t", ("int", 8): "int8_t", ("uint", 8): "uint8_t"}
_VEC_PREFIX = {("float", 32): "", ("float", 64): "d", ("int", 32): "i", ("uint", 32): "u",
               ("bool", 32): "b", ("int", 64): "i64", ("uint", 64): "u64",
               ("float", 16): "f16", ("int", 16): "i16", ("uint", 16): "u16",
               ("int", 8): "i8", ("uint", 8): "u8"}


@dataclass(frozen=True)
class PushMember:
    """One member of the push-constant block, laid out as the module declares it (its
    Offset, ArrayStride and MatrixStride decorations: std430, scalar or any other layout).
    A list of push constants gives member i its i-th value; `slots` are the byte offsets,
    within the block, of the member's scalars in the order its values are taken (array
    elements, then matrix columns, then vector components)."""
    index: int
    name: str                     # OpMemberName; "" when the module has no names
    offset: int                   # bytes from the start of the block
    kind: str                     # "float", "int", "uint", "bool"; "struct" (nested)
    width: int                    # bits of one scalar (0 for a struct)
    vector: int = 1               # components of a vector (rows of a matrix)
    columns: int = 1              # columns of a matrix, 1 otherwise
    array: tuple[int, ...] = ()   # array lengths, outermost first
    slots: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        """How messages name the member: `name`, or its index where the module has no
        names (messages say "member `n`", "member 1")."""
        return f"`{self.name}`" if self.name else str(self.index)

    @property
    def type_name(self) -> str:
        """The member's type as GLSL spells it, e.g. `uint`, `vec2`, `float[3]`."""
        if self.kind == "struct":
            base = "struct"
        elif self.columns > 1:
            p = "d" if self.width == 64 else ""
            base = (f"{p}mat{self.columns}" if self.columns == self.vector
                    else f"{p}mat{self.columns}x{self.vector}")
        elif self.vector > 1:
            base = f"{_VEC_PREFIX.get((self.kind, self.width), '?')}vec{self.vector}"
        else:
            base = _SCALAR_GLSL.get((self.kind, self.width), f"{self.kind}{self.width}")
        return base + "".join(f"[{n}]" for n in self.array)

    @property
    def declaration(self) -> str:
        """e.g. `uint n` or `vec2 c[3]` (the array lengths after the name, as in GLSL)."""
        t = self.type_name
        dims = t[t.index("["):] if "[" in t else ""
        return f"{t[:len(t) - len(dims)]} {self.name or f'_{self.index}'}{dims}"


@dataclass
class ShaderInfo:
    version: tuple[int, int]
    local_size: tuple[int, int, int]
    bindings: list[int] = field(default_factory=list)        # set 0 storage buffers
    other_descriptors: list[tuple[int, int, str]] = field(default_factory=list)
    push_constant_size: int = 0
    spec_constants: dict[int, SpecConstant] = field(default_factory=dict)
    # local size components that come from specialization constants: axis -> spec id
    local_size_spec: dict[int, int] = field(default_factory=dict)
    # binding -> scalar type of the elements of the buffer's runtime array, e.g.
    # ("float", 32) for `buffer B { float a[]; }` or `vec4 a[]`; absent when the buffer
    # has no runtime array of scalars or vectors (structs, fixed-size members only).
    element_types: dict[int, tuple[str, int]] = field(default_factory=dict)
    # Scalar widths (bits) used in the push-constant block, e.g. {16, 32}.
    push_constant_widths: frozenset[int] = frozenset()
    # binding -> (read?, written?) as the module's instructions access it (loads, stores,
    # atomics, copies, through access chains; a pointer passed to a function counts as
    # both); None when a pointer's variable cannot be told (variable pointers): then
    # every binding may be read and written.
    binding_access: dict[int, tuple[bool, bool]] | None = None
    # The push-constant block's members in declaration order, and the block's type name
    # (OpName; "" when the module has none).
    push_constant_members: tuple[PushMember, ...] = ()
    push_constant_block: str = ""
    # Bytes of shared (Workgroup) memory with the default specialization constants, at
    # least what the driver will need (members packed, no padding); None when an array
    # length is computed from specialization constants (OpSpecConstantOp).
    shared_memory_size: int | None = 0
    # The BuiltIn decorations the module declares (on variables or block members), e.g.
    # 28 for GlobalInvocationId, 24 for NumWorkgroups: what a dispatch in parts changes.
    builtins: frozenset[int] = frozenset()
    _shared_with: Callable[[dict[int, int | float]], int | None] | None = field(
        default=None, repr=False, compare=False)

    def local_size_with(self, spec_values: dict[int, int | float]) -> tuple[int, int, int]:
        size = list(self.local_size)
        for axis, sid in self.local_size_spec.items():
            if sid in spec_values:
                size[axis] = int(spec_values[sid])
        return (size[0], size[1], size[2])

    def shared_memory_size_with(self, spec_values: dict[int, int | float]) -> int | None:
        """shared_memory_size with these specialization constant values (by id)."""
        if self._shared_with is None or not spec_values:
            return self.shared_memory_size
        return self._shared_with(spec_values)


def words_of(spirv: bytes | bytearray | memoryview) -> tuple[int, ...]:
    data = bytes(spirv)
    if len(data) < 20 or len(data) % 4:
        raise ShaderError(
            f"not SPIR-V: {len(data)} bytes (a module is a whole number of 32-bit words, "
            "at least 5)")
    (magic,) = struct.unpack_from("<I", data)
    order = "<"
    if magic != MAGIC:
        if struct.unpack_from(">I", data)[0] == MAGIC:
            order = ">"
        else:
            raise ShaderError(
                f"not SPIR-V: magic number 0x{magic:08x}, expected 0x{MAGIC:08x} "
                "(pass SPIR-V bytes, or GLSL through sg.compile_glsl)")
    return struct.unpack(f"{order}{len(data) // 4}I", data)


def _string(words: tuple[int, ...], start: int, end: int) -> tuple[str, int]:
    raw = bytearray()
    i = start
    while i < end:
        w = words[i]
        i += 1
        chunk = w.to_bytes(4, "little")
        if 0 in chunk:
            raw += chunk[: chunk.index(0)]
            return raw.decode("utf-8", "replace"), i
        raw += chunk
    raise ShaderError("malformed SPIR-V: unterminated string literal")


def reflect(spirv: bytes) -> ShaderInfo:
    """Parses `spirv` and returns what it declares; ShaderError on anything malformed."""
    w = words_of(spirv)
    version = ((w[1] >> 16) & 0xFF, (w[1] >> 8) & 0xFF)
    if version[0] != 1 or version[1] > 6:
        raise ShaderError(f"unsupported SPIR-V version {version[0]}.{version[1]}")
    bound = w[3]
    if bound == 0 or bound > 4_194_304:
        raise ShaderError(f"malformed SPIR-V: id bound {bound}")

    entry_id = None
    has_memory_model = False
    local_size: list[int] | None = None
    local_size_ids: list[int] | None = None
    decorations: dict[int, dict[int, list[int]]] = {}
    member_offsets: dict[int, dict[int, int]] = {}
    member_decs: dict[tuple[int, int], dict[int, list[int]]] = {}
    names: dict[int, str] = {}
    member_names: dict[tuple[int, int], str] = {}
    matrices: set[int] = set()
    types: dict[int, tuple] = {}
    pointers: dict[int, tuple[int, int]] = {}
    variables: list[tuple[int, int, int]] = []   # (type id, id, storage class)
    constants: dict[int, tuple[int, list[int]]] = {}   # id -> (type, value words)
    spec_scalars: dict[int, tuple[int, list[int] | bool]] = {}
    composites: dict[int, list[int]] = {}
    base_of: dict[int, int] = {}      # access chain -> its base pointer
    reads: list[int] = []             # pointers loaded from (or atomically accessed)
    writes: list[int] = []            # pointers stored to
    params: set[int] = set()          # function parameters (their calls count instead)
    chosen: set[int] = set()          # OpSelect / OpPhi results (maybe pointers)

    i = 5
    n = len(w)
    while i < n:
        wc = w[i] >> 16
        op = w[i] & 0xFFFF
        if wc == 0 or i + wc > n:
            raise ShaderError(f"malformed SPIR-V: bad instruction length at word {i}")
        a = w[i + 1: i + wc]
        if op == OP_ENTRY_POINT:
            if len(a) < 3:
                raise ShaderError("malformed SPIR-V: short OpEntryPoint")
            name, _ = _string(w, i + 3, i + wc)
            if a[0] == _MODEL_GLCOMPUTE and name == "main":
                entry_id = a[1]
        elif op == OP_MEMORY_MODEL:
            has_memory_model = True
        elif op == OP_EXECUTION_MODE and len(a) >= 5 and a[1] == _MODE_LOCAL_SIZE:
            if a[0] == entry_id or entry_id is None:
                local_size = list(a[2:5])
        elif op == OP_EXECUTION_MODE_ID and len(a) >= 5 and a[1] == _MODE_LOCAL_SIZE_ID:
            local_size_ids = list(a[2:5])
        elif op == OP_DECORATE and len(a) >= 2:
            decorations.setdefault(a[0], {})[a[1]] = list(a[2:])
        elif op == OP_MEMBER_DECORATE and len(a) >= 3:
            if a[2] == DEC_OFFSET and len(a) >= 4:
                member_offsets.setdefault(a[0], {})[a[1]] = a[3]
            member_decs.setdefault((a[0], a[1]), {})[a[2]] = list(a[3:])
        elif op == OP_NAME and len(a) >= 2:
            names[a[0]] = _string(w, i + 2, i + wc)[0]
        elif op == OP_MEMBER_NAME and len(a) >= 3:
            member_names[(a[0], a[1])] = _string(w, i + 3, i + wc)[0]
        elif op == OP_TYPE_BOOL:
            types[a[0]] = ("bool", 32)
        elif op == OP_TYPE_INT and len(a) >= 3:
            types[a[0]] = ("int" if a[2] else "uint", a[1])
        elif op == OP_TYPE_FLOAT and len(a) >= 2:
            types[a[0]] = ("float", a[1])
        elif op in (OP_TYPE_VECTOR, OP_TYPE_MATRIX) and len(a) >= 3:
            types[a[0]] = ("vector", a[1], a[2])
            if op == OP_TYPE_MATRIX:
                matrices.add(a[0])
        elif op == OP_TYPE_ARRAY and len(a) >= 3:
            types[a[0]] = ("array", a[1], a[2])
        elif op == OP_TYPE_RUNTIME_ARRAY and len(a) >= 2:
            types[a[0]] = ("runtime_array", a[1])
        elif op == OP_TYPE_STRUCT and len(a) >= 1:
            types[a[0]] = ("struct", list(a[1:]))
        elif op == OP_TYPE_POINTER and len(a) >= 3:
            pointers[a[0]] = (a[1], a[2])
        elif op == OP_CONSTANT and len(a) >= 3:
            constants[a[1]] = (a[0], list(a[2:]))
        elif op in (OP_CONSTANT_TRUE, OP_CONSTANT_FALSE) and len(a) >= 2:
            constants[a[1]] = (a[0], [1 if op == OP_CONSTANT_TRUE else 0])
        elif op == OP_SPEC_CONSTANT and len(a) >= 3:
            spec_scalars[a[1]] = (a[0], list(a[2:]))
        elif op in (OP_SPEC_CONSTANT_TRUE, OP_SPEC_CONSTANT_FALSE) and len(a) >= 2:
            spec_scalars[a[1]] = (a[0], op == OP_SPEC_CONSTANT_TRUE)
        elif op in (OP_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_COMPOSITE) and len(a) >= 2:
            composites[a[1]] = list(a[2:])
        elif op == OP_VARIABLE and len(a) >= 3:
            variables.append((a[0], a[1], a[2]))
        elif op in _CHAINS and len(a) >= 3:
            base_of[a[1]] = a[2]
        elif op in (OP_LOAD, OP_ATOMIC_LOAD) and len(a) >= 3:
            reads.append(a[2])
        elif op in (OP_STORE, OP_ATOMIC_STORE) and len(a) >= 1:
            writes.append(a[0])
        elif op in (OP_COPY_MEMORY, OP_COPY_MEMORY_SIZED) and len(a) >= 2:
            writes.append(a[0])
            reads.append(a[1])
        elif op in _ATOMIC_RMW and len(a) >= 3:
            reads.append(a[2])
            writes.append(a[2])
        elif op == OP_FUNCTION_CALL and len(a) >= 3:
            reads.extend(a[3:])    # (values as well as pointers: those resolve to nothing)
            writes.extend(a[3:])
        elif op == OP_FUNCTION_PARAMETER and len(a) >= 2:
            params.add(a[1])
        elif op in (OP_SELECT, OP_PHI) and len(a) >= 2:
            chosen.add(a[1])
        i += wc

    if not has_memory_model:
        raise ShaderError("malformed SPIR-V: no OpMemoryModel")
    if entry_id is None:
        raise ShaderError(
            "the SPIR-V has no GLCompute entry point named 'main' (is it a compute shader?)")

    def scalar_value(cid: int) -> int | float:
        vals: list[int] | bool
        if cid in constants:
            tid, vals = constants[cid]
        elif cid in spec_scalars:
            tid, vals = spec_scalars[cid]
            if isinstance(vals, bool):
                return int(vals)
        else:
            raise ShaderError(f"malformed SPIR-V: id {cid} is not a scalar constant")
        kind = types.get(tid, ("uint", 32))
        v = vals[0] if vals else 0
        if kind[0] == "float" and kind[1] == 32:
            return struct.unpack("<f", struct.pack("<I", v))[0]
        return v

    spec_constants: dict[int, SpecConstant] = {}
    spec_id_of: dict[int, int] = {}
    for cid, (tid, vals) in spec_scalars.items():
        dec = decorations.get(cid, {})
        if DEC_SPEC_ID not in dec or not dec[DEC_SPEC_ID]:
            continue
        sid = dec[DEC_SPEC_ID][0]
        kind, width = types.get(tid, ("uint", 32))[:2]
        spec_constants[sid] = SpecConstant(sid, kind, width, scalar_value(cid))
        spec_id_of[cid] = sid

    local_size_spec: dict[int, int] = {}
    # A WorkgroupSize built-in overrides the execution mode.
    for cid, parts in composites.items():
        dec = decorations.get(cid, {})
        if dec.get(DEC_BUILTIN, [None])[0] == _BUILTIN_WORKGROUP_SIZE and len(parts) == 3:
            local_size = [int(scalar_value(p)) for p in parts]
            local_size_spec = {ax: spec_id_of[p] for ax, p in enumerate(parts) if p in spec_id_of}
    if local_size is None and local_size_ids is not None:
        local_size = [int(scalar_value(p)) for p in local_size_ids]
        local_size_spec = {ax: spec_id_of[p] for ax, p in enumerate(local_size_ids)
                           if p in spec_id_of}
    if local_size is None:
        raise ShaderError("the SPIR-V declares no local size for its entry point")

    def size_of(tid: int, depth: int = 0) -> int:
        if depth > 32:
            raise ShaderError("malformed SPIR-V: type nesting too deep")
        t = types.get(tid)
        if t is None:
            raise ShaderError(f"malformed SPIR-V: unknown type id {tid}")
        if t[0] in ("bool", "int", "uint", "float"):
            return max(4, t[1] // 8) if t[0] == "bool" else t[1] // 8
        if t[0] == "vector":
            return t[2] * size_of(t[1], depth + 1)
        if t[0] == "array":
            stride = decorations.get(tid, {}).get(DEC_ARRAY_STRIDE, [0])[0]
            count = int(scalar_value(t[2]))
            return count * (stride or size_of(t[1], depth + 1))
        if t[0] == "runtime_array":
            return 0
        if t[0] == "struct":
            offs = member_offsets.get(tid, {})
            end = 0
            off = 0
            for m, mt in enumerate(t[1]):
                off = offs.get(m, off)
                off_end = off + size_of(mt, depth + 1)
                end = max(end, off_end)
                off = off_end
            return end
        raise ShaderError(f"malformed SPIR-V: unsized type {t[0]}")

    def scalar_widths(tid: int, depth: int = 0) -> set[int]:
        t = types.get(tid)
        if t is None or depth > 32:
            return set()
        if t[0] in ("int", "uint", "float"):
            return {t[1]}
        if t[0] == "bool":
            return {32}
        if t[0] in ("vector", "array", "runtime_array"):
            return scalar_widths(t[1], depth + 1)
        if t[0] == "struct":
            return set().union(*(scalar_widths(m, depth + 1) for m in t[1]))
        return set()

    def element_type(struct_id: int) -> tuple[str, int] | None:
        """The scalar type of the block's trailing runtime array, if it has one."""
        t = types.get(struct_id)
        if t is None or t[0] != "struct" or not t[1]:
            return None
        last = types.get(t[1][-1])
        if last is None or last[0] != "runtime_array":
            return None
        elem = types.get(last[1])
        for _ in range(2):  # vector, then matrix columns
            if elem is not None and elem[0] == "vector":
                elem = types.get(elem[1])
        if elem is None or elem[0] not in ("int", "uint", "float"):
            return None
        return (elem[0], elem[1])

    def member_layout(tid: int, base: int, mstride: int, row_major: bool
                      ) -> PushMember | None:
        """The type and scalar offsets of a push-constant member of type tid at byte
        offset base (index and name left blank); None for a nested struct."""
        layout: dict[str, int] = {"width": 0, "vector": 1, "columns": 1}
        kind = ["struct"]
        array: list[int] = []
        slots: list[int] = []

        def walk(tid: int, base: int, depth: int) -> bool:
            ty = types.get(tid)
            if ty is None or depth > 32:
                raise ShaderError(f"malformed SPIR-V: bad push-constant type {tid}")
            if ty[0] in ("bool", "int", "uint", "float"):
                kind[0] = ty[0]
                layout["width"] = ty[1]
                slots.append(base)
                return True
            if ty[0] == "vector" and tid in matrices:
                col = types.get(ty[1])
                if col is None or col[0] != "vector":
                    raise ShaderError(f"malformed SPIR-V: bad matrix type {tid}")
                scalar = size_of(col[1])
                stride = mstride or size_of(ty[1])
                layout.update(vector=col[2], columns=ty[2])
                return all(walk(col[1], base + (r * stride + c * scalar if row_major
                                                else c * stride + r * scalar), depth + 1)
                           for c in range(ty[2]) for r in range(col[2]))
            if ty[0] == "vector":
                scalar = size_of(ty[1])
                layout["vector"] = ty[2]
                return all(walk(ty[1], base + k * scalar, depth + 1) for k in range(ty[2]))
            if ty[0] == "array":
                n = int(scalar_value(ty[2]))
                if len(array) == depth:
                    array.append(n)
                stride = (decorations.get(tid, {}).get(DEC_ARRAY_STRIDE, [0])[0]
                          or size_of(ty[1]))
                return all(walk(ty[1], base + k * stride, depth + 1) for k in range(n))
            return False   # a nested struct: a list cannot give it (bytes or numpy can)

        if not walk(tid, base, 0):
            return None
        return PushMember(index=0, name="", offset=base, kind=kind[0], array=tuple(array),
                          slots=tuple(slots), **layout)

    def push_members(struct_id: int) -> tuple[PushMember, ...]:
        """The members of the push-constant block, each with the byte offsets of its
        scalars (laid out by the module's decorations)."""
        t = types.get(struct_id)
        if t is None or t[0] != "struct":
            return ()
        out = []
        offs = member_offsets.get(struct_id, {})
        end = 0
        for m, mt in enumerate(t[1]):
            off = offs.get(m, end)
            end = off + size_of(mt)
            mdec = member_decs.get((struct_id, m), {})
            name = member_names.get((struct_id, m), "")
            found = member_layout(mt, off, mdec.get(DEC_MATRIX_STRIDE, [0])[0],
                                  DEC_ROW_MAJOR in mdec)
            out.append(replace(found, index=m, name=name) if found is not None else
                       PushMember(index=m, name=name, offset=off, kind="struct", width=0))
        return tuple(out)

    bindings: list[int] = []
    elements: dict[int, tuple[str, int]] = {}
    other: list[tuple[int, int, str]] = []
    push_size = 0
    push_widths: set[int] = set()
    push_struct = 0
    shared_types: list[int] = []
    for ptype, vid, sc in variables:
        if sc == SC_PUSH_CONSTANT:
            pointee = pointers.get(ptype, (0, 0))[1]
            size = size_of(pointee)
            if size >= push_size:
                push_size, push_struct = size, pointee
            push_widths |= scalar_widths(pointee)
            continue
        if sc == SC_WORKGROUP:
            shared_types.append(pointers.get(ptype, (0, 0))[1])
            continue
        dec = decorations.get(vid, {})
        if DEC_BINDING not in dec:
            continue
        binding = dec[DEC_BINDING][0]
        dset = dec.get(DEC_DESCRIPTOR_SET, [0])[0]
        pointee = pointers.get(ptype, (0, 0))[1]
        is_storage = sc == SC_STORAGE_BUFFER or (
            sc == SC_UNIFORM and DEC_BUFFER_BLOCK in decorations.get(pointee, {}))
        if is_storage and dset == 0:
            bindings.append(binding)
            elem = element_type(pointee)
            if elem is not None:
                elements[binding] = elem
        else:
            kind = "uniform buffer" if sc == SC_UNIFORM else f"storage class {sc}"
            other.append((dset, binding, kind))

    def shared_size(spec_values: dict[int, int | float]) -> int | None:
        """Bytes of the Workgroup variables: members and elements packed without padding
        (no explicit layout applies to them), array lengths from `spec_values` where a
        specialization constant gives them."""
        def count_of(cid: int) -> int | None:
            if cid in spec_id_of and spec_id_of[cid] in spec_values:
                return int(spec_values[spec_id_of[cid]])
            if cid in constants or cid in spec_scalars:
                return int(scalar_value(cid))
            return None   # OpSpecConstantOp and the like: not evaluated here

        def size(tid: int, depth: int = 0) -> int | None:
            t = types.get(tid)
            if t is None or depth > 32:
                raise ShaderError(f"malformed SPIR-V: bad Workgroup variable type {tid}")
            if t[0] in ("bool", "int", "uint", "float"):
                return 4 if t[0] == "bool" else max(1, t[1] // 8)
            if t[0] in ("vector", "array"):
                n = t[2] if t[0] == "vector" else count_of(t[2])
                elem = size(t[1], depth + 1)
                return None if n is None or elem is None else n * elem
            if t[0] == "struct":
                parts = [size(m, depth + 1) for m in t[1]]
                return None if None in parts else sum(p for p in parts if p is not None)
            raise ShaderError(f"malformed SPIR-V: a Workgroup variable of type {t[0]}")

        total = 0
        for tid in shared_types:
            n = size(tid)
            if n is None:
                return None
            total += n
        return total

    binding_vars = {vid: decorations[vid][DEC_BINDING][0] for _, vid, sc in variables
                    if DEC_BINDING in decorations.get(vid, {})
                    and decorations[vid].get(DEC_DESCRIPTOR_SET, [0])[0] == 0}

    def binding_access() -> dict[int, tuple[bool, bool]] | None:
        """Which bindings the module reads and writes, or None when a pointer's
        variable cannot be told."""
        var_ids = {vid for _, vid, _ in variables}
        access = {b: [False, False] for b in binding_vars.values()}
        for which, pointers_ in ((0, reads), (1, writes)):
            for p in pointers_:
                for _ in range(256):   # up the access chains to a variable
                    if p not in base_of:
                        break
                    p = base_of[p]
                if p in binding_vars:
                    access[binding_vars[p]][which] = True
                elif p in chosen:
                    return None
                elif p not in var_ids and p not in params:
                    continue   # a value, not a pointer (a function call's argument)
        return {b: (r, w) for b, (r, w) in access.items()}

    return ShaderInfo(
        version=version,
        local_size=(local_size[0], local_size[1], local_size[2]),
        bindings=sorted(set(bindings)),
        other_descriptors=other,
        push_constant_size=push_size,
        spec_constants=spec_constants,
        local_size_spec=local_size_spec,
        element_types=elements,
        push_constant_widths=frozenset(push_widths),
        binding_access=binding_access(),
        push_constant_members=push_members(push_struct) if push_struct else (),
        push_constant_block=names.get(push_struct, "") if push_struct else "",
        shared_memory_size=shared_size({}),
        builtins=frozenset(d[DEC_BUILTIN][0] for d in (*decorations.values(),
                                                          *member_decs.values())
                           if d.get(DEC_BUILTIN)),
        _shared_with=shared_size if shared_types else None,
    )
