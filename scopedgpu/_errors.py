"""Exception classes and the one function that turns a shim return code into one."""
from __future__ import annotations

import weakref
from typing import Any, NoReturn

from scopedgpu._ffi import ffi, lib

__all__ = [
    "ScopedGPUError", "NoDeviceError", "DeviceError", "OutOfMemoryError", "DestroyedError",
    "ForkedError", "ShaderError", "ValidationError", "DtypeWarning", "check", "result_name",
]


class ScopedGPUError(Exception):
    """Base class of every error scopedgpu raises itself."""


class NoDeviceError(ScopedGPUError):
    """No Vulkan loader, no driver, or no device matching the request."""


class DeviceError(ScopedGPUError):
    """A Vulkan call failed. `result` is the VkResult name, `call` the Vulkan call."""

    def __init__(self, message: str, *, result: str = "", call: str = "", code: int = 0):
        super().__init__(message)
        self.result = result
        self.call = call
        self.code = code


class OutOfMemoryError(DeviceError, MemoryError):
    """Device or host memory ran out, after the pool released its cache and retried."""


class DestroyedError(ScopedGPUError):
    """An object was used after destroy() or after its manager closed."""


class ForkedError(DestroyedError):
    """A manager, or an object made on it, was used in a child process after os.fork():
    GPU objects belong to the process that created them."""


class ShaderError(ScopedGPUError, ValueError):
    """Invalid SPIR-V, a GLSL compile error, or a shader that does not fit its bindings."""


class ValidationError(ScopedGPUError):
    """The Khronos validation layer reported an error for the call that raised this."""


class DtypeWarning(UserWarning):
    """Kept so that code which filters it keeps working; scopedgpu no longer issues it: a
    tensor whose dtype differs from its binding's declared element type now raises
    ShaderError (Manager.algorithm(..., reinterpret=True) opts in to reinterpretation)."""


_RESULTS = {
    1: "VK_NOT_READY", 2: "VK_TIMEOUT", 3: "VK_EVENT_SET", 4: "VK_EVENT_RESET",
    5: "VK_INCOMPLETE",
    -1: "VK_ERROR_OUT_OF_HOST_MEMORY", -2: "VK_ERROR_OUT_OF_DEVICE_MEMORY",
    -3: "VK_ERROR_INITIALIZATION_FAILED", -4: "VK_ERROR_DEVICE_LOST",
    -5: "VK_ERROR_MEMORY_MAP_FAILED", -6: "VK_ERROR_LAYER_NOT_PRESENT",
    -7: "VK_ERROR_EXTENSION_NOT_PRESENT", -8: "VK_ERROR_FEATURE_NOT_PRESENT",
    -9: "VK_ERROR_INCOMPATIBLE_DRIVER", -10: "VK_ERROR_TOO_MANY_OBJECTS",
    -11: "VK_ERROR_FORMAT_NOT_SUPPORTED", -12: "VK_ERROR_FRAGMENTED_POOL",
    -13: "VK_ERROR_UNKNOWN", -1000069000: "VK_ERROR_OUT_OF_POOL_MEMORY",
    -1000072003: "VK_ERROR_INVALID_EXTERNAL_HANDLE", -1000161000: "VK_ERROR_FRAGMENTATION",
    -1000257000: "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS",
    -1000012000: "VK_ERROR_INVALID_SHADER_NV",
    lib.SG_ERR_NO_LOADER: "SG_ERR_NO_LOADER", lib.SG_ERR_NO_DEVICE: "SG_ERR_NO_DEVICE",
    lib.SG_ERR_ARGUMENT: "SG_ERR_ARGUMENT", lib.SG_ERR_MEMORY_TYPE: "SG_ERR_MEMORY_TYPE",
    lib.SG_ERR_NO_QUEUE: "SG_ERR_NO_QUEUE", lib.SG_ERR_NO_LAYER: "SG_ERR_NO_LAYER",
    lib.SG_ERR_RANGE: "SG_ERR_RANGE", lib.SG_ERR_NO_FUNCTION: "SG_ERR_NO_FUNCTION",
    lib.SG_ERR_NOT_READY: "SG_ERR_NOT_READY",
}
# What the shim's own codes mean, for the message.
_MEANING = {
    lib.SG_ERR_ARGUMENT: "an argument the shim refuses",
    lib.SG_ERR_RANGE: "an offset and size that reach outside the memory block (or the "
                      "timestamps) they refer to; nothing was bound or recorded",
    lib.SG_ERR_NOT_READY: "results asked for before the GPU wrote them",
}
_OOM = {-1, -2, -1000069000, -1000161000}


# The states of the managers with the validation layer on. When a call fails, what the
# layer reported during it goes with the exception (manager._State.validation_failed),
# so that a later, valid call never raises it as its own.
debug_states: weakref.WeakSet[Any] = weakref.WeakSet()


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


def result_name(code: int) -> str:
    return _RESULTS.get(code, f"VkResult({code})")


def check(rc: int, what: str) -> None:
    """Raises the typed exception for a shim return code; `what` names the object and the
    action ("creating tensor of 4096 bytes")."""
    if rc == 0:
        return
    call = ffi.string(lib.sg_last_call()).decode()
    name = result_name(rc)
    msg = f"{what}: {call} failed with {name}"
    if rc in _MEANING:
        msg += f" ({_MEANING[rc]})"
    if rc in _OOM:
        _raise(OutOfMemoryError(msg, result=name, call=call, code=rc), what)
    if rc == lib.SG_ERR_NO_FUNCTION:
        _raise(NoDeviceError(f"{what}: the Vulkan loader or driver does not provide {call} "
                             f"({name}); update or reinstall the Vulkan driver"), what)
    if rc in (lib.SG_ERR_NO_LOADER, lib.SG_ERR_NO_DEVICE, -9):
        _raise(NoDeviceError(msg), what)
    _raise(DeviceError(msg, result=name, call=call, code=rc), what)
