"""The exception classes of scopedgpu (no FFI here: scopedgpu._vk turns a shim return code
into one of them)."""
from __future__ import annotations

__all__ = [
    "ScopedGPUError", "NoDeviceError", "DeviceError", "OutOfMemoryError", "DestroyedError",
    "ForkedError", "ShaderError", "ValidationError", "DtypeWarning",
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


class SyncWarning(UserWarning):
    """Debug mode (Manager(debug=True)): a forgotten sync op. A kernel reads a tensor
    whose host data changed since its last sync, or never reached the device (a missing
    OpTensorSyncDevice); or data() of a tensor a kernel wrote after its last download
    (a missing OpTensorSyncLocal)."""


class DtypeWarning(UserWarning):
    """Kept so that code which filters it keeps working; scopedgpu no longer issues it: a
    tensor whose dtype differs from its binding's declared element type now raises
    ShaderError (Manager.algorithm(..., reinterpret=True) opts in to reinterpretation)."""
