"""The one door to the C shim: every call into `lib` and every use of `ffi` is here, and
the package's one call into CPython's own C API through ctypes (keep_forever). The only
other native door is _spirv_val (SPIRV-Tools through cffi's ABI mode);
tests/test_architecture.py refuses ctypes and cffi anywhere else.

The rest of the package calls the functions below. Each shim function has one name:
functions whose return code the caller acts on (status, wait, submit, create with an
out-parameter it frees on failure) and void functions are the C functions themselves,
bound to a typed name (no Python frame in between: the hot loop of Sequence.eval costs
what it did, and a Ctrl-C cannot land between a `pop()` and the destroy it feeds);
the others are small functions that check the return code and raise the typed error.

Constants of the shim (SG_*) and the Vulkan pipeline-stage and access masks the
recorder uses are named here too, so that no raw mask appears elsewhere.
"""
from __future__ import annotations

import ctypes
import functools
import weakref
from typing import Any, Callable, NoReturn

from scopedgpu import _ki
from scopedgpu._errors import DeviceError, NoDeviceError, OutOfMemoryError
from scopedgpu._ffi import ffi, lib

# -- constants ---------------------------------------------------------------------------
NULL: Any = ffi.NULL
TIMEOUT: int = lib.SG_TIMEOUT           # sg_seq_wait/sg_seq_status: still running
LIVE_COUNT: int = lib.SG_LIVE_COUNT
ERR_NO_LOADER: int = lib.SG_ERR_NO_LOADER
ERR_NO_DEVICE: int = lib.SG_ERR_NO_DEVICE
ERR_ARGUMENT: int = lib.SG_ERR_ARGUMENT
ERR_MEMORY_TYPE: int = lib.SG_ERR_MEMORY_TYPE
ERR_NO_QUEUE: int = lib.SG_ERR_NO_QUEUE
ERR_NO_LAYER: int = lib.SG_ERR_NO_LAYER
ERR_RANGE: int = lib.SG_ERR_RANGE
ERR_NO_FUNCTION: int = lib.SG_ERR_NO_FUNCTION
ERR_NOT_READY: int = lib.SG_ERR_NOT_READY
# VkResult codes the Python layer acts on
VK_ERROR_OUT_OF_HOST_MEMORY = -1
VK_ERROR_OUT_OF_DEVICE_MEMORY = -2
VK_ERROR_INITIALIZATION_FAILED = -3
VK_ERROR_INCOMPATIBLE_DRIVER = -9
VK_ERROR_UNKNOWN = -13
VK_ERROR_OUT_OF_POOL_MEMORY = -1000069000
VK_ERROR_FRAGMENTATION = -1000161000
VK_ERROR_INVALID_SHADER_NV = -1000012000

# VkPipelineStageFlagBits / VkAccessFlagBits used by the recorder and the uploads
STAGE_COMPUTE = 0x800
STAGE_TRANSFER = 0x1000
STAGE_HOST = 0x4000
STAGE_ALL = 0x10000              # VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
ACCESS_SHADER_READ = 0x20
ACCESS_SHADER_WRITE = 0x40
ACCESS_TRANSFER_READ = 0x800
ACCESS_TRANSFER_WRITE = 0x1000
ACCESS_HOST_READ = 0x2000
ACCESS_HOST_WRITE = 0x4000
ACCESS_MEMORY_READ = 0x8000
ACCESS_MEMORY_WRITE = 0x10000
STAGES_GPU = STAGE_COMPUTE | STAGE_TRANSFER
ACCESS_ALL_WRITES = ACCESS_SHADER_WRITE | ACCESS_TRANSFER_WRITE
ACCESS_ALL_GPU = (ACCESS_SHADER_READ | ACCESS_SHADER_WRITE | ACCESS_TRANSFER_READ
                  | ACCESS_TRANSFER_WRITE)
# fence waits without a limit
WAIT_FOREVER_NS = 2**64 - 1

# Shim live-count indices -> names reported by live_objects()
LIVE_NAMES = ("instances", "devices", "buffers", "memory_blocks", "shader_modules",
              "descriptor_set_layouts", "pipeline_layouts", "pipelines", "descriptor_pools",
              "command_pools", "fences", "query_pools", "debug_messengers")

# -- errors -------------------------------------------------------------------------------
# What the shim's own codes mean, for the message.
_MEANING = {
    ERR_ARGUMENT: "an argument the shim refuses",
    ERR_RANGE: "an offset and size that reach outside the memory block (or the "
               "timestamps) they refer to; nothing was bound or recorded",
    ERR_NOT_READY: "results asked for before the GPU wrote them",
}
_OOM = {VK_ERROR_OUT_OF_HOST_MEMORY, VK_ERROR_OUT_OF_DEVICE_MEMORY,
        VK_ERROR_OUT_OF_POOL_MEMORY, VK_ERROR_FRAGMENTATION}

# The engines of the managers with the validation layer on. When a call fails, what the
# layer reported during it goes with the exception (Engine.validation_failed), so that
# a later, valid call never raises it as its own.
debug_states: weakref.WeakSet[Any] = weakref.WeakSet()


def result_name(code: int) -> str:
    """The name of a return code, from the shim (VkResult or SG_ERR_*)."""
    p = lib.sg_result_name(code)
    return ffi.string(p).decode() if p != ffi.NULL else f"VkResult({code})"


def last_call() -> str:
    """The Vulkan (or shim) call that failed last on this thread."""
    return ffi.string(lib.sg_last_call()).decode()


def _raise(exc: Exception, what: str) -> NoReturn:
    for state in list(debug_states):
        # Never blocks: a manager another thread holds is busy with a call of its own,
        # which collects its messages itself (and lock order is not ours to impose).
        if state.lock.acquire(blocking=False):
            try:
                state.validation_failed(exc, what)
            finally:
                state.lock.release()
    raise exc


def check(rc: int, what: str) -> None:
    """Raises the typed exception for a shim return code; `what` names the object and the
    action ("creating tensor of 4096 bytes")."""
    if rc == 0:
        return
    call = last_call()
    name = result_name(rc)
    msg = f"{what}: {call} failed with {name}"
    if rc in _MEANING:
        msg += f" ({_MEANING[rc]})"
    if rc in _OOM:
        _raise(OutOfMemoryError(msg, result=name, call=call, code=rc), what)
    if rc == ERR_NO_FUNCTION:
        _raise(NoDeviceError(f"{what}: the Vulkan loader or driver does not provide {call} "
                             f"({name}); update or reinstall the Vulkan driver"), what)
    if rc in (ERR_NO_LOADER, ERR_NO_DEVICE, VK_ERROR_INCOMPATIBLE_DRIVER):
        _raise(NoDeviceError(msg), what)
    _raise(DeviceError(msg, result=name, call=call, code=rc), what)


# -- out-parameters and memory ------------------------------------------------------------
def out(kind: str) -> Any:
    """An out-parameter for a handle of the shim: kind "instance", "device", "seq",
    "program", "dset" or "block". Made before the call that fills it, so that an
    exception arriving between the call's return and the caller's store still finds
    (and frees) what the call made."""
    return ffi.new(f"sg_{kind} **")


@_ki.step
def take(holder: Any) -> Any:
    """The handle in an out-parameter, which it clears (a step: no signal handler runs
    inside it, nor between its return and the call it is passed to)."""
    h, holder[0] = holder[0], ffi.NULL
    return h


def handle_id(h: Any) -> int:
    """A handle's address, as a dict key."""
    return int(ffi.cast("uintptr_t", h))


# Pointers for host copies: a numpy array's memory, and an address of mapped memory.
array_ptr: Callable[[Any], Any] = ffi.from_buffer
address_ptr: Callable[[int], Any] = functools.partial(ffi.cast, "void *")
memmove: Callable[[Any, Any, int], None] = ffi.memmove
byte_buffer: Callable[[Any, int], Any] = ffi.buffer


def message_buffer(size: int) -> Any:
    return ffi.new("char[]", size)


# -- loader and instance -------------------------------------------------------------------
def loader_open(name: str) -> str | None:
    """Loads the Vulkan loader by file name; None on success, else the loader's message."""
    err = ffi.new("char[512]")
    if lib.sg_loader_open(name.encode(), err, 512) == 0:
        return None
    return ffi.string(err).decode(errors="replace")


def exit_guard() -> int:
    """1 when the exit handler that skips the drivers' own is registered (sg.h), 0 when
    no Vulkan loader was ever loaded here, ERR_NO_FUNCTION where there is no on_exit."""
    return int(lib.sg_exit_guard())


# rc-returning (the caller tells a missing layer from a failure): instance_create(debug, out)
instance_create: Callable[[int, Any], int] = lib.sg_instance_create
instance_destroy: Callable[[Any], None] = lib.sg_instance_destroy
instance_pending: Callable[[Any], int] = lib.sg_instance_pending


def instance_messages(inst: Any, buf: Any) -> tuple[str, int]:
    """The validation layer's messages since the last call (text, error count)."""
    nerr = ffi.new("int *")
    lib.sg_instance_messages(inst, buf, len(buf), nerr)
    return ffi.string(buf).decode(errors="replace"), nerr[0]


def instance_device_count(inst: Any) -> int:
    count = ffi.new("uint32_t *")
    check(lib.sg_instance_device_count(inst, count), "enumerating Vulkan devices")
    return int(count[0])


def device_info_buffer() -> Any:
    return ffi.new("sg_device_info *")


def instance_device_info(inst: Any, index: int, raw: Any) -> Any:
    """Fills `raw` (device_info_buffer()) with device `index`'s properties."""
    check(lib.sg_instance_device_info(inst, index, raw), f"reading device {index}")
    return raw


def c_string(p: Any) -> str:
    """A char array of a shim struct, as str."""
    return ffi.string(p).decode(errors="replace")


# -- device ------------------------------------------------------------------------------
def device_create(inst: Any, index: int, nqueues: int, holder: Any, what: str) -> None:
    check(lib.sg_device_create(inst, index, nqueues, holder), what)


device_destroy: Callable[[Any], None] = lib.sg_device_destroy
device_queue_count: Callable[[Any], int] = lib.sg_device_queue_count
device_transfer_queue_count: Callable[[Any], int] = lib.sg_device_transfer_queue_count
device_wait_idle: Callable[[Any], int] = lib.sg_device_wait_idle


def live_counts(dev: Any = None) -> dict[str, int]:
    """The shim's live Vulkan objects: of one device, or of the process (dev None)."""
    buf = ffi.new("int64_t[]", LIVE_COUNT)
    lib.sg_live_counts(dev if dev is not None else ffi.NULL, buf)
    return {name: int(buf[i]) for i, name in enumerate(LIVE_NAMES)}


# -- memory blocks -------------------------------------------------------------------------
# block_create(dev, size, mem_type, mapped, out) -> rc (ERR_MEMORY_TYPE: try another type)
block_create: Callable[[Any, int, int, int, Any], int] = lib.sg_block_create
block_destroy: Callable[[Any], None] = lib.sg_block_destroy
# A host copy far larger than the caches (streaming stores on x86-64), GIL released.
copy_large: Callable[[int, int, int], None] = lib.sg_copy_large


def block_address(blk: Any) -> int:
    """The host address a mapped block is mapped at."""
    return int(ffi.cast("uintptr_t", lib.sg_block_ptr(blk)))


def host_pointer_types(dev: Any, address: int) -> int:
    """The memory types that can import host memory at `address` (a bit mask; 0 when
    none, or when the device cannot import)."""
    bits = ffi.new("uint32_t *")
    if lib.sg_host_pointer_types(dev, ffi.cast("void *", address), bits) != 0:
        return 0
    return int(bits[0])


def block_import(dev: Any, address: int, size: int, mem_type: int, holder: Any) -> int:
    return int(lib.sg_block_import(dev, ffi.cast("void *", address), size, mem_type, holder))


# -- pipelines and descriptor sets ------------------------------------------------------
def program_create(dev: Any, spirv: bytes, nbindings: int, push_size: int, ids: list[int],
                   offsets: list[int], sizes: list[int], blob: bytes, holder: Any) -> int:
    """sg_program_create; the return code (the caller tells a rejected shader apart)."""
    code = ffi.from_buffer("uint32_t[]", spirv)
    return int(lib.sg_program_create(
        dev, code, len(spirv), nbindings, push_size, len(ids),
        ffi.new("uint32_t[]", ids or [0]), ffi.new("uint32_t[]", offsets or [0]),
        ffi.new("uint32_t[]", sizes or [0]), blob or ffi.NULL, len(blob), holder))


program_destroy: Callable[[Any], None] = lib.sg_program_destroy


# The bindings' arrays (blocks, offsets, ranges) go to the shim as Python lists: cffi
# passes a list as a temporary C array for the call (a third of the time of ffi.new's
# owned arrays, which a served request's algorithm paid on every creation).
def dset_create(dev: Any, program: Any, blocks: list[Any], offsets: list[int],
                ranges: list[int], holder: Any, what: str) -> None:
    """A descriptor set binding buffer i to (blocks[i], offsets[i], ranges[i])."""
    rc = lib.sg_dset_create(dev, program, len(blocks), blocks or [ffi.NULL], offsets or [0],
                            ranges or [0], holder)
    if rc:
        check(rc, what)


def dset_rebind(dset: Any, program: Any, blocks: list[Any], offsets: list[int],
                ranges: list[int], what: str) -> None:
    """Binds a recycled set of `program` to (blocks[i], offsets[i], ranges[i]); what:
    the algorithm, named in an error ("binding the descriptor set of {what}")."""
    rc = lib.sg_dset_rebind(dset, program, len(blocks), blocks or [ffi.NULL], offsets or [0],
                            ranges or [0])
    if rc:
        check(rc, f"binding the descriptor set of {what}")


dset_destroy: Callable[[Any], None] = lib.sg_dset_destroy

# -- sequences (the hot path: the C functions themselves) -----------------------------------
# seq_create(dev, queue, nqueries, out) -> rc
seq_create: Callable[[Any, int, int, Any], int] = lib.sg_seq_create
seq_destroy: Callable[[Any], None] = lib.sg_seq_destroy
seq_begin: Callable[[Any], int] = lib.sg_seq_begin
seq_end: Callable[[Any], int] = lib.sg_seq_end
# seq_barrier(h, src_stages, src_access, dst_stages, dst_access)
seq_barrier: Callable[[Any, int, int, int, int], None] = lib.sg_seq_barrier
# seq_copy(h, src_block, src_offset, dst_block, dst_offset, nbytes)
seq_copy: Callable[[Any, Any, int, Any, int, int], None] = lib.sg_seq_copy
# seq_zero(h, block, offset, nbytes): a transfer write of zeros
seq_zero: Callable[[Any, Any, int, int], None] = lib.sg_seq_zero
# seq_dispatch(h, program, dset, push, push_size, x, y, z)
seq_dispatch: Callable[..., None] = lib.sg_seq_dispatch
seq_timestamp: Callable[[Any, int], None] = lib.sg_seq_timestamp
seq_submit: Callable[[Any], int] = lib.sg_seq_submit
seq_status: Callable[[Any], int] = lib.sg_seq_status
# seq_wait(h, timeout_ns, spin_ns) -> 0, TIMEOUT or an error
seq_wait: Callable[[Any, int, int], int] = lib.sg_seq_wait
# seq_submit_wait(h, timeout_ns, spin_ns, submit_rc) -> the wait's result; submit_rc (a
# status_box()) holds the submission's: not 0, nothing was submitted (and it is returned)
seq_submit_wait: Callable[[Any, int, int, Any], int] = lib.sg_seq_submit_wait


def status_box() -> Any:
    """The out-parameter of seq_submit_wait: box[0] is the submission's result."""
    return ffi.new("int[1]")


def seq_timestamps(h: Any, n: int, what: str) -> list[int]:
    """The first n raw timestamps the last submission wrote."""
    buf = ffi.new("uint64_t[]", n)
    check(lib.sg_seq_timestamps(h, n, buf), what)
    return [int(buf[i]) for i in range(n)]


# -- CPython's C API (ctypes): the package's only other native call ---------------------------
def keep_forever(obj: object) -> None:
    """One reference to obj that is never given back: numpy memory the GPU may still use
    after its manager gave up on its work must never be freed (Engine abandon)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))

