"""Big dispatches: a compute shader rewritten so that one dispatch can run as several.

A dispatch of more workgroups than the device's maxComputeWorkGroupCount allows on an
axis is recorded as several dispatches, each within the limit. vkCmdDispatchBase cannot
do it: "baseGroupX + groupCountX must be less than or equal to
VkPhysicalDeviceLimits::maxComputeWorkGroupCount[0]" (VUID-vkCmdDispatchBase-
groupCountX-00421), so a base offset never reaches past the limit. Instead each part's
first group is passed to the shader in its push constants, and the shader adds it where
it reads its position:

- each rewritten built-in (WorkgroupId, GlobalInvocationId) gets a Private variable;
  at the start of the entry point the real built-in is loaded, the part's base added
  (a uvec3: the base group for WorkgroupId, base group x local size for
  GlobalInvocationId) and the sum stored there; every other read of the built-in (loads,
  access chains, anywhere in the module) reads the Private variable instead;
- the bases are members appended to the shader's push-constant block, 16-byte aligned
  after the user's members (a new block where there is none), so one pipeline serves
  every part and the recorder pushes the base before each (a specialization constant
  would cost a pipeline per part: thousands of compiles for a large grid).

What the split changes and this module does not hide, it refuses (CannotSplit):
NumWorkgroups (each part would see its own count), several entry points (the Private
variables are set in one), and a built-in used other than by loads and access chains.
The result is validated like any user module (Reflections.get) before a driver sees it.
"""
from __future__ import annotations

from dataclasses import dataclass

from scopedgpu._spirv import (DEC_BUILTIN, DEC_OFFSET, MAGIC, OP_DECORATE, OP_ENTRY_POINT,
                              OP_LOAD, OP_MEMBER_DECORATE, OP_TYPE_INT, OP_TYPE_POINTER,
                              OP_TYPE_STRUCT, OP_VARIABLE, SC_PUSH_CONSTANT, words_of)

__all__ = ["CannotSplit", "Split", "split_module", "BUILTIN_NUM_WORKGROUPS",
           "BUILTIN_WORKGROUP_ID", "BUILTIN_GLOBAL_INVOCATION_ID"]

BUILTIN_NUM_WORKGROUPS = 24
BUILTIN_WORKGROUP_ID = 26
BUILTIN_GLOBAL_INVOCATION_ID = 28
_GLSL_NAME = {BUILTIN_NUM_WORKGROUPS: "gl_NumWorkGroups", BUILTIN_WORKGROUP_ID: "gl_WorkGroupID",
              BUILTIN_GLOBAL_INVOCATION_ID: "gl_GlobalInvocationID"}

_OP_LINE = 8
_OP_EXT_INST = 12
_OP_FUNCTION = 54
_OP_FUNCTION_END = 56
_OP_LABEL = 248
_OP_NO_LINE = 317
_OP_CONSTANT = 43
_OP_IADD = 128
_OP_STORE = 62
_OP_VECTOR_SHUFFLE = 79
_OP_COMPOSITE_EXTRACT = 81
_OP_COMPOSITE_INSERT = 82
_OP_LOOP_MERGE = 246
_OP_SELECTION_MERGE = 247
_OP_BRANCH = 249
_OP_BRANCH_CONDITIONAL = 250
_OP_SWITCH = 251
_ACCESS_CHAINS = (65, 66)   # OpAccessChain, OpInBoundsAccessChain
_DEC_BLOCK = 2
_SC_INPUT = 1
_SC_PRIVATE = 6


class CannotSplit(ValueError):
    """The shader cannot run as several dispatches without changing what it computes;
    the message says why (the caller adds what was asked)."""


@dataclass(frozen=True)
class Split:
    """A module rewritten for dispatches in parts. The push constants of a part are the
    user's block (push_size bytes of the original module) followed, at the offsets
    given, by the part's base as three uint32: the first group's WorkgroupId (group_offset)
    and its first invocation's GlobalInvocationId (invocation_offset); None where the
    module reads no such built-in. `push_size` is the whole block's size."""
    spirv: bytes
    push_size: int
    group_offset: int | None
    invocation_offset: int | None


def _ids_read(op: int, a: list[int]) -> list[int]:
    """The operands of a function-body instruction that may name a pointer: every word
    except the literals of the common instructions that have some (a literal equal to a
    built-in's id elsewhere only makes the rewrite refuse, never go wrong)."""
    if op in (_OP_LINE, _OP_NO_LINE, _OP_LABEL, _OP_FUNCTION, _OP_FUNCTION_END,
              _OP_LOOP_MERGE, _OP_SELECTION_MERGE, _OP_BRANCH):
        return []
    if op == OP_LOAD:
        return a[2:3]
    if op == _OP_STORE:
        return a[0:2]
    if op == _OP_COMPOSITE_EXTRACT:
        return a[2:3]
    if op in (_OP_COMPOSITE_INSERT, _OP_VECTOR_SHUFFLE):
        return a[2:4]
    if op in (_OP_SWITCH, _OP_BRANCH_CONDITIONAL):
        return a[0:1]
    if op == _OP_EXT_INST:
        return a[4:]
    return a


def split_module(spirv: bytes, push_size: int) -> Split:
    """The module `spirv` (whose push-constant block takes push_size bytes) rewritten so
    that WorkgroupId and GlobalInvocationId read as they would in one dispatch when it
    runs as parts that push their base (see the module docstring); CannotSplit where
    that would change what it computes or where the module uses them in a way this
    rewrite does not handle."""
    w = list(words_of(spirv))
    bound = w[3]
    version = ((w[1] >> 16) & 0xFF, (w[1] >> 8) & 0xFF)
    instrs: list[list[int]] = []   # [opcode, operands...]
    i = 5
    while i < len(w):
        wc = w[i] >> 16
        instrs.append([w[i] & 0xFFFF, *w[i + 1:i + wc]])
        i += wc

    entries = [k for k, ins in enumerate(instrs) if ins[0] == OP_ENTRY_POINT]
    if len(entries) != 1:
        raise CannotSplit(f"the module has {len(entries)} entry points (the rewrite that "
                          "gives each part its base serves one)")
    builtin_of: dict[int, int] = {}
    for ins in instrs:
        if ins[0] == OP_DECORATE and len(ins) >= 4 and ins[2] == DEC_BUILTIN:
            builtin_of[ins[1]] = ins[3]
        elif (ins[0] == OP_MEMBER_DECORATE and len(ins) >= 5 and ins[3] == DEC_BUILTIN
              and ins[4] in _GLSL_NAME):
            raise CannotSplit(f"the module declares {_GLSL_NAME[ins[4]]} as a member of a "
                              "block, which the rewrite that gives each part its base does "
                              "not handle")
    if BUILTIN_NUM_WORKGROUPS in builtin_of.values():
        raise CannotSplit("the shader reads gl_NumWorkGroups, which each part would see as "
                          "its own count of groups, not the whole dispatch's")
    first_fn = next((k for k, ins in enumerate(instrs) if ins[0] == _OP_FUNCTION), len(instrs))
    # The global declarations: id -> index of the instruction that makes it.
    decl: dict[int, int] = {}
    var_type: dict[int, int] = {}
    pointers: dict[tuple[int, int], int] = {}
    pointee: dict[int, tuple[int, int]] = {}
    int_types: dict[int, int] = {}   # 32-bit int type id -> signedness
    constants: dict[tuple[int, int], int] = {}
    push_vars: list[int] = []
    for k, ins in enumerate(instrs[:first_fn]):
        op = ins[0]
        if op == OP_TYPE_POINTER:
            decl[ins[1]] = k
            pointers.setdefault((ins[2], ins[3]), ins[1])
            pointee[ins[1]] = (ins[2], ins[3])
        elif op == OP_VARIABLE:
            decl[ins[2]] = k
            var_type[ins[2]] = ins[1]
            if ins[3] == SC_PUSH_CONSTANT:
                push_vars.append(ins[2])
        elif op == OP_TYPE_INT:
            decl[ins[1]] = k
            if ins[2] == 32:
                int_types[ins[1]] = ins[3]
        elif op == _OP_CONSTANT:
            decl[ins[2]] = k
            if ins[1] in int_types and len(ins) == 4:
                constants.setdefault((ins[1], ins[3]), ins[2])
        elif op == OP_TYPE_STRUCT:
            decl[ins[1]] = k

    rewritten = [b for b in (BUILTIN_WORKGROUP_ID, BUILTIN_GLOBAL_INVOCATION_ID)
                 if b in builtin_of.values()]
    if not rewritten:   # nothing reads a group's place: every part runs as the whole did
        return Split(bytes(spirv), push_size, None, None)

    new_globals: list[list[int]] = []

    def new_id() -> int:
        nonlocal bound
        bound += 1
        return bound - 1

    def pointer(sc: int, target: int) -> int:
        pid = pointers.get((sc, target))
        if pid is None:
            pid = pointers[(sc, target)] = new_id()
            pointee[pid] = (sc, target)
            new_globals.append([OP_TYPE_POINTER, pid, sc, target])
        return pid

    def uint_constant(value: int) -> int:
        for tid in int_types:
            if (tid, value) in constants:
                return constants[(tid, value)]
        found = next(iter(int_types), None)
        tid = new_id() if found is None else found
        if found is None:
            int_types[tid] = 0
            new_globals.append([OP_TYPE_INT, tid, 32, 0])
        cid = constants[(tid, value)] = new_id()
        new_globals.append([_OP_CONSTANT, tid, cid, value])
        return cid

    # The built-ins' variables (each an Input pointer to a 3-vector of 32-bit ints).
    private: dict[int, int] = {}      # built-in variable -> its Private variable
    vec_of: dict[int, int] = {}       # built-in variable -> its vector type
    kind_of: dict[int, int] = {}
    for vid, b in builtin_of.items():
        if b not in rewritten:
            continue
        if vid not in var_type or pointee.get(var_type[vid], (0, 0))[0] != _SC_INPUT:
            raise CannotSplit(f"the module's {_GLSL_NAME[b]} is not an Input variable")
        vec_of[vid] = pointee[var_type[vid]][1]
        kind_of[vid] = b

    # The push-constant block, extended by one uvec3 per rewritten built-in.
    base_at = -(-push_size // 16) * 16
    offsets = {b: base_at + 16 * j for j, b in enumerate(rewritten)}
    moved: list[int] = []   # global instructions moved to the end (they name the block)
    new_annotations: list[list[int]] = []
    vec_for = {b: vec_of[v] for v, b in kind_of.items()}
    members = [vec_for[b] for b in rewritten]
    if len(push_vars) > 1:
        raise CannotSplit("the module declares several push-constant variables")
    if push_vars:
        pvar = push_vars[0]
        sc, block = pointee.get(var_type[pvar], (0, 0))
        if block not in decl or instrs[decl[block]][0] != OP_TYPE_STRUCT:
            raise CannotSplit("the module's push-constant variable is not a struct")
        first_member = len(instrs[decl[block]]) - 2
        instrs[decl[block]].extend(members)
        # The block now names types that may be declared after it: it moves to the end
        # of the declarations, with every declaration that names it (its pointer types,
        # the variable, ...), in their order; nothing that stays names them.
        names = {block}
        for k in range(decl[block], first_fn):
            ins = instrs[k]
            if k == decl[block] or any(x in names for x in _result_free(ins)):
                moved.append(k)
                rid = _result_id(ins)
                if rid is not None:
                    names.add(rid)
    else:
        block = new_id()
        pvar = new_id()
        first_member = 0
        new_globals.append([OP_TYPE_STRUCT, block, *members])
        new_annotations.append([OP_DECORATE, block, _DEC_BLOCK])
        new_globals.append([OP_VARIABLE, pointer(SC_PUSH_CONSTANT, block), pvar,
                            SC_PUSH_CONSTANT])
    for j, b in enumerate(rewritten):
        new_annotations.append([OP_MEMBER_DECORATE, block, first_member + j, DEC_OFFSET,
                                offsets[b]])
    member_index = {b: uint_constant(first_member + j) for j, b in enumerate(rewritten)}
    for vid, vec in vec_of.items():
        private[vid] = new_id()
        new_globals.append([OP_VARIABLE, pointer(_SC_PRIVATE, vec), private[vid], _SC_PRIVATE])

    # Every read of a built-in reads its Private variable: loads and access chains (whose
    # results become Private pointers), in every function.
    derived: set[int] = set()
    entry = instrs[entries[0]]
    entry_fn = entry[2]
    prologue_at = None
    for k in range(first_fn, len(instrs)):
        ins = instrs[k]
        op = ins[0]
        a = ins[1:]
        if op == _OP_FUNCTION and a[1] == entry_fn:
            j = k + 1   # after the OpLabel of the first block and its OpVariables
            while j < len(instrs) and instrs[j][0] != _OP_LABEL:
                j += 1
            j += 1
            while j < len(instrs) and instrs[j][0] in (OP_VARIABLE, _OP_LINE, _OP_NO_LINE):
                j += 1
            prologue_at = j
        if op in _ACCESS_CHAINS and len(a) >= 3 and (a[2] in private or a[2] in derived):
            if a[2] in private:
                ins[3] = private[a[2]]
            sc, target = pointee.get(a[0], (0, 0))
            if sc != _SC_INPUT:
                raise CannotSplit("an access chain into a built-in is not an Input pointer")
            ins[1] = pointer(_SC_PRIVATE, target)
            derived.add(a[1])
            continue
        if op == OP_LOAD and len(a) >= 3 and a[2] in private:
            ins[3] = private[a[2]]
            continue
        if op == OP_LOAD and len(a) >= 3 and a[2] in derived:
            continue
        hit = next((x for x in _ids_read(op, a) if x in private or x in derived), None)
        if hit is not None:
            v = hit if hit in private else None
            name = _GLSL_NAME[kind_of[v]] if v is not None else "a built-in's element"
            raise CannotSplit(f"the shader uses {name} in an instruction (opcode {op}) "
                              "other than a load or an access chain, which the rewrite "
                              "that gives each part its base does not handle")
    if prologue_at is None:
        raise CannotSplit("the module has no function for its entry point")

    prologue: list[list[int]] = []
    for vid, vec in vec_of.items():
        b = kind_of[vid]
        real, slot, base, total = new_id(), new_id(), new_id(), new_id()
        prologue += [[OP_LOAD, vec, real, vid],
                     [_ACCESS_CHAINS[0], pointer(SC_PUSH_CONSTANT, vec), slot, pvar,
                      member_index[b]],
                     [OP_LOAD, vec, base, slot],
                     [_OP_IADD, vec, total, real, base],
                     [_OP_STORE, private[vid], total]]
    if version >= (1, 4):
        # From SPIR-V 1.4 the interface lists every global variable the entry point uses.
        entry.extend(private.values())
        if not push_vars:
            entry.append(pvar)

    last_annotation = max(k for k, ins in enumerate(instrs[:first_fn])
                          if ins[0] in (OP_DECORATE, OP_MEMBER_DECORATE))
    moved_set = set(moved)
    out_instrs = (instrs[:last_annotation + 1] + new_annotations
                  + [ins for k, ins in enumerate(instrs[last_annotation + 1:first_fn],
                                                 last_annotation + 1) if k not in moved_set]
                  + [instrs[k] for k in moved] + new_globals
                  + instrs[first_fn:prologue_at] + prologue + instrs[prologue_at:])
    out = [MAGIC, w[1], w[2], bound, w[4]]
    for ins in out_instrs:
        out.append((len(ins) << 16) | ins[0])
        out.extend(ins[1:])
    size = max(offsets.values()) + 12
    return Split(b"".join(x.to_bytes(4, "little") for x in out), size,
                 offsets.get(BUILTIN_WORKGROUP_ID), offsets.get(BUILTIN_GLOBAL_INVOCATION_ID))


# The result id's place in a global declaration: word 1 for types (OpType*, opcodes 19-38;
# OpTypeForwardPointer, 39, has none), word 2 for constants, variables, OpUndef and
# OpExtInst.
def _result_id(ins: list[int]) -> int | None:
    op = ins[0]
    if 19 <= op <= 38:
        return ins[1] if len(ins) > 1 else None
    if op in (1, 41, 42, 43, 44, 45, 46, 48, 49, 50, 51, 52, OP_VARIABLE, _OP_EXT_INST):
        return ins[2] if len(ins) > 2 else None
    return None


def _result_free(ins: list[int]) -> list[int]:
    """The operand words of a global declaration other than its own result id (any of
    them may name another id: a literal that happens to equal one only moves more)."""
    rid = _result_id(ins)
    return [x for k, x in enumerate(ins[1:], 1) if not (x == rid and k <= 2)]
