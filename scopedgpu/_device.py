"""Vulkan loader, device enumeration and the default device choice."""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field

import numpy as np

from scopedgpu import _vk
from scopedgpu._errors import NoDeviceError
from scopedgpu._settings import get as setting

__all__ = ["DeviceInfo", "devices", "choose_device", "load_vulkan", "loader_names",
           "dtype_feature", "check_dtype"]

INSTALL_HINT = (
    "Install a Vulkan loader and a driver: on Debian/Ubuntu `apt-get install libvulkan1 "
    "mesa-vulkan-drivers` (lavapipe runs Vulkan on the CPU), or your GPU vendor's driver; "
    "`vulkaninfo --summary` (package vulkan-tools) shows what Vulkan sees")

_TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
_RANK = {"discrete": 0, "integrated": 1, "virtual": 2, "cpu": 3, "other": 4}
_loader_lock = threading.Lock()
_loader_ok = False


@dataclass(frozen=True)
class DeviceInfo:
    """What a Vulkan device is and can do. `memory_bytes` is the device-local heap total."""
    index: int
    name: str
    type: str
    vendor_id: int
    device_id: int
    api_version: str
    driver: str
    memory_bytes: int
    max_workgroup_size: tuple[int, int, int]
    max_workgroup_invocations: int
    max_workgroup_count: tuple[int, int, int]
    subgroup_size: int
    timestamps: bool
    float64: bool
    float16: bool
    int8: bool
    int16: bool = False
    int64: bool = False
    queue_count: int = 1
    max_push_constants_size: int = 128
    max_storage_buffer_range: int = 1 << 27
    min_storage_buffer_offset_alignment: int = 256
    max_memory_allocation_size: int = 0
    max_memory_allocation_count: int = 4096
    max_storage_buffers_per_stage: int = 4
    timestamp_period: float = 1.0
    host_import_alignment: int = 0   # VK_EXT_external_memory_host; 0 when not supported
    max_shared_memory_size: int = 16384  # maxComputeSharedMemorySize (bytes)
    memory_type_flags: tuple[int, ...] = field(default=(), repr=False)
    memory_heap_sizes: tuple[int, ...] = field(default=(), repr=False)
    memory_type_heaps: tuple[int, ...] = field(default=(), repr=False)  # heap of each type

    def __str__(self) -> str:
        return f"{self.name} ({self.type}, Vulkan {self.api_version}, {self.driver})"


# dtype -> the DeviceInfo flag it needs (None: every Vulkan device)
_DTYPE_FEATURE: dict[np.dtype, str | None] = {
    np.dtype(np.float32): None, np.dtype(np.int32): None, np.dtype(np.uint32): None,
    np.dtype(np.float64): "float64", np.dtype(np.int64): "int64",
    np.dtype(np.uint64): "int64", np.dtype(np.float16): "float16",
    np.dtype(np.int16): "int16", np.dtype(np.uint16): "int16",
    np.dtype(np.int8): "int8", np.dtype(np.uint8): "int8",
    # numpy's bool is one byte holding 0 or 1: a uint8_t[] to a shader (the same feature)
    np.dtype(np.bool_): "int8",
}


def dtype_feature(dtype: np.dtype) -> str | None:
    """The device feature a dtype needs; TypeError for dtypes scopedgpu never supports."""
    dt = np.dtype(dtype)
    if dt.byteorder == ">":
        raise TypeError(f"dtype {dt} is big-endian; GPUs read little-endian data")
    dt = dt.newbyteorder("=")
    if dt not in _DTYPE_FEATURE:
        names = ", ".join(str(d) for d in _DTYPE_FEATURE)
        raise TypeError(f"dtype {dt} is not supported by scopedgpu; use one of {names}")
    return _DTYPE_FEATURE[dt]


def check_dtype(dtype: np.dtype, info: DeviceInfo) -> None:
    """The rule for the dtype of every array that reaches a device (tensor(), stream(),
    pinned()): TypeError unless it is one scopedgpu supports, little-endian, and the
    device has the feature it needs."""
    feature = dtype_feature(dtype)
    if feature is not None and not getattr(info, feature):
        raise TypeError(f"dtype {dtype} needs the device feature '{feature}', which "
                        f"{info.name} does not support")


def _version(v: int) -> str:
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def loader_names(platform: str | None = None) -> list[str]:
    """The Vulkan loader's file names to try, in order, for a platform (sys.platform)."""
    platform = sys.platform if platform is None else platform
    if platform == "darwin":  # the Vulkan SDK's loader, else MoltenVK on its own
        return ["libvulkan.1.dylib", "libvulkan.dylib", "libMoltenVK.dylib"]
    if platform.startswith("win"):
        return ["vulkan-1.dll"]
    return ["libvulkan.so.1", "libvulkan.so"]


def load_vulkan() -> None:
    """Loads the Vulkan loader once; NoDeviceError says what to install when it is missing.
    SCOPEDGPU_VULKAN_LIBRARY names the loader's file; else the platform's usual names are
    tried in order, and the error quotes the first (the one a working system has)."""
    global _loader_ok
    if _loader_ok:
        return
    with _loader_lock:
        if _loader_ok:
            return
        path = setting("SCOPEDGPU_VULKAN_LIBRARY")
        names = [path] if path else loader_names()
        first = ""
        for name in names:
            err = _vk.loader_open(name)
            if err is None:
                _loader_ok = True
                return
            first = first or err
        raise NoDeviceError(
            f"the Vulkan loader could not be loaded ({first}). " + INSTALL_HINT)


def _info_from(index: int, raw) -> DeviceInfo:
    heaps = [raw.memory_heap_size[i] for i in range(raw.memory_heap_count)]
    local = sum(heaps[i] for i in range(raw.memory_heap_count) if raw.memory_heap_flags[i] & 1)
    driver = _vk.c_string(raw.driver_name)
    dinfo = _vk.c_string(raw.driver_info)
    if dinfo:
        driver = f"{driver} {dinfo}".strip()
    return DeviceInfo(
        index=index,
        name=_vk.c_string(raw.name),
        type=_TYPES.get(raw.device_type, "other"),
        vendor_id=raw.vendor_id,
        device_id=raw.device_id,
        api_version=_version(raw.api_version),
        driver=driver or f"driver {raw.driver_version:#x}",
        memory_bytes=local,
        max_workgroup_size=tuple(raw.max_workgroup_size),  # type: ignore[arg-type]
        max_workgroup_invocations=raw.max_workgroup_invocations,
        max_workgroup_count=tuple(raw.max_workgroup_count),  # type: ignore[arg-type]
        subgroup_size=raw.subgroup_size,
        timestamps=raw.timestamp_valid_bits > 0,
        float64=bool(raw.shader_float64),
        float16=bool(raw.shader_float16 and raw.storage_16bit),
        int8=bool(raw.shader_int8 and raw.storage_8bit),
        int16=bool(raw.shader_int16 and raw.storage_16bit),
        int64=bool(raw.shader_int64),
        queue_count=raw.queue_count,
        max_push_constants_size=raw.max_push_constants_size,
        max_storage_buffer_range=raw.max_storage_buffer_range,
        min_storage_buffer_offset_alignment=raw.min_storage_buffer_offset_alignment,
        max_memory_allocation_size=raw.max_memory_allocation_size,
        max_memory_allocation_count=raw.max_memory_allocation_count,
        max_storage_buffers_per_stage=raw.max_storage_buffers_per_stage,
        timestamp_period=raw.timestamp_period,
        host_import_alignment=raw.host_import_alignment if raw.host_import else 0,
        max_shared_memory_size=raw.max_shared_memory_size,
        memory_type_flags=tuple(raw.memory_type_flags[i] for i in range(raw.memory_type_count)),
        memory_heap_sizes=tuple(heaps),
        memory_type_heaps=tuple(raw.memory_type_heap[i] for i in range(raw.memory_type_count)),
    )


def enumerate_devices(inst) -> list[DeviceInfo]:
    out = []
    raw = _vk.device_info_buffer()
    for i in range(_vk.instance_device_count(inst)):
        out.append(_info_from(i, _vk.instance_device_info(inst, i, raw)))
    return out


def devices() -> list[DeviceInfo]:
    """The Vulkan devices of this machine; needs no Manager. Raises NoDeviceError when no
    loader or driver is installed."""
    load_vulkan()
    out = _vk.out("instance")
    rc = _vk.instance_create(0, out)
    if rc != 0:
        try:
            _vk.check(rc, "creating a Vulkan instance")
        except NoDeviceError:
            raise
        except Exception as exc:
            raise NoDeviceError(f"{exc}. {INSTALL_HINT}") from exc
    try:
        return enumerate_devices(out[0])
    finally:
        _vk.instance_destroy(out[0])


def choose_device(infos: list[DeviceInfo], device: int | str | None) -> DeviceInfo:
    """Picks by index, by case-insensitive name substring, or (None) as SCOPEDGPU_DEVICE
    says, else the best by type."""
    if not infos:
        raise NoDeviceError("Vulkan found no device. " + INSTALL_HINT)
    where = ""
    if device is None:
        device = setting("SCOPEDGPU_DEVICE")
        where = " (SCOPEDGPU_DEVICE)"
    if device is None:
        return min(infos, key=lambda d: (_RANK.get(d.type, 9), d.index))
    names = ", ".join(f"{d.index}: {d.name}" for d in infos)
    if isinstance(device, bool) or not isinstance(device, (int, str)):
        raise TypeError(f"device must be an index, a name substring or None, not {device!r}")
    if isinstance(device, int):
        if 0 <= device < len(infos):
            return infos[device]
        raise NoDeviceError(f"no Vulkan device with index {device}{where}; devices: {names}")
    matches = [d for d in infos if device.lower() in d.name.lower()]
    if not matches:
        raise NoDeviceError(f"no Vulkan device whose name contains {device!r}{where}; "
                            f"devices: {names}")
    return matches[0]
