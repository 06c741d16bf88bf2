"""scopedgpu: GPU compute on any Vulkan device, with explicit, scoped resource lifetimes.

    import numpy as np, scopedgpu as sg
    with sg.Manager() as mgr:
        a = mgr.tensor(np.arange(8, dtype=np.float32))
        ...
"""
from __future__ import annotations

from scopedgpu._device import DeviceInfo, devices
from scopedgpu._errors import (DestroyedError, DeviceError, DtypeWarning, ForkedError,
                               NoDeviceError,
                               OutOfMemoryError, ScopedGPUError, ShaderError, SyncWarning,
                               ValidationError)
from scopedgpu._version import __version__
from scopedgpu.algorithm import Algorithm
from scopedgpu.glsl import compile_glsl
from scopedgpu.manager import Manager, abandoned_managers, live_vulkan_objects
from scopedgpu.ops import (Op, OpAlgoDispatch, OpMemoryBarrier, OpMult, OpTensorCopy,
                           OpTensorSyncDevice, OpTensorSyncLocal)
from scopedgpu.pinned import Pinned
from scopedgpu.sequence import Sequence
from scopedgpu.tensor import Tensor

__all__ = [
    "__version__", "devices", "DeviceInfo", "Manager", "Tensor", "Algorithm", "Sequence",
    "Pinned",
    "Op", "OpTensorSyncDevice", "OpTensorSyncLocal", "OpAlgoDispatch", "OpTensorCopy", "OpMult",
    "OpMemoryBarrier", "compile_glsl", "live_vulkan_objects",
    "abandoned_managers",
    "ScopedGPUError", "NoDeviceError", "DeviceError", "OutOfMemoryError", "DestroyedError",
    "ForkedError", "ShaderError", "ValidationError", "DtypeWarning", "SyncWarning",
]
