"""What `python -m scopedgpu info` checks besides the device table: the Vulkan loader, the
drivers (ICDs), the Khronos validation layer, a GLSL compiler and the SPIR-V validator;
for each, what was found, or exactly what is missing and how to install it."""
from __future__ import annotations

import glob
import os
import platform
import sys
from dataclasses import dataclass

__all__ = ["Check", "environment", "DEBIAN_PACKAGES"]

# What to install on Debian/Ubuntu for each part; other systems get a generic line.
DEBIAN_PACKAGES = {
    "loader": "libvulkan1",
    "driver": "mesa-vulkan-drivers",
    "layer": "vulkan-validationlayers",
    "compiler": "glslc",
}


@dataclass
class Check:
    """One line of the report: `ok` False means missing; `fix` says what to do."""
    what: str
    ok: bool
    found: str
    fix: str = ""
    required: bool = True


def _install(part: str, other: str) -> str:
    if sys.platform.startswith("linux"):
        return f"install it: `sudo apt-get install {DEBIAN_PACKAGES[part]}` (Debian/Ubuntu); {other}"
    return other


def _loader_path() -> str:
    """The loader's file, as mapped into this process (Linux), else a generic word."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                # the loader itself, not a driver such as libvulkan_radeon.so
                if os.path.basename(path).startswith(("libvulkan.so", "libvulkan.1.")):
                    return path
    except OSError:
        pass
    return "loaded"


def _icd_dirs() -> list[str]:
    config = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    data = os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share"
    home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    dirs = [os.path.join(d, "vulkan") for d in config.split(":") if d]
    dirs += ["/etc/vulkan"]
    dirs += [os.path.join(d, "vulkan") for d in [home] + data.split(":") if d]
    return dirs


def _manifests(sub: str, env_names: tuple[str, ...]) -> list[str]:
    for name in env_names:
        value = os.environ.get(name)
        if value:
            return [p for p in value.split(os.pathsep) if p]
    found: list[str] = []
    for d in _icd_dirs():
        for p in sorted(glob.glob(os.path.join(d, sub, "*.json"))):
            if p not in found:
                found.append(p)
    return found


def check_loader() -> Check:
    from scopedgpu import _device
    from scopedgpu._errors import NoDeviceError
    try:
        _device.load_vulkan()
    except NoDeviceError as exc:
        return Check("Vulkan loader", False, str(exc).split(". ")[0],
                     _install("loader", "or your GPU vendor's Vulkan runtime; "
                              "SCOPEDGPU_VULKAN_LIBRARY names a loader elsewhere"))
    return Check("Vulkan loader", True, _loader_path())


def check_drivers(devices: list | None, error: str) -> Check:
    icds = _manifests("icd.d", ("VK_DRIVER_FILES", "VK_ICD_FILENAMES"))
    names = ", ".join(os.path.basename(p) for p in icds) or "no ICD manifests"
    if devices:
        drivers = sorted({d.driver for d in devices})
        return Check("Vulkan driver", True, f"{'; '.join(drivers)} (ICDs: {names})")
    why = error or "Vulkan found no device"
    return Check("Vulkan driver", False, f"{why} (ICDs: {names})",
                 _install("driver", "or your GPU vendor's driver (NVIDIA, AMD, Intel); "
                          "Mesa's lavapipe runs Vulkan on the CPU"))


def check_layer(have_driver: bool) -> Check:
    from scopedgpu import _vk
    layers = [p for p in _manifests("explicit_layer.d", ("VK_LAYER_PATH",))
              if "khronos_validation" in os.path.basename(p).lower()
              or os.path.isdir(p)]
    if not have_driver:  # an instance cannot be made: judge by the manifest alone
        if layers:
            return Check("Validation layer", True, layers[0], required=False)
        return Check("Validation layer", False, "VK_LAYER_KHRONOS_validation not found",
                     _install("layer", "or the Vulkan SDK (https://vulkan.lunarg.com)"),
                     required=False)
    out = _vk.out("instance")
    rc = _vk.instance_create(1, out)
    if rc == 0:
        _vk.instance_destroy(out[0])
        where = layers[0] if layers else "VK_LAYER_KHRONOS_validation"
        return Check("Validation layer", True, f"{where} (Manager(debug=True) or "
                     "SCOPEDGPU_DEBUG=1 turns it on)", required=False)
    if rc == _vk.ERR_NO_LAYER:
        return Check("Validation layer", False, "VK_LAYER_KHRONOS_validation not found; "
                     "debug=True runs without validation",
                     _install("layer", "or the Vulkan SDK (https://vulkan.lunarg.com)"),
                     required=False)
    return Check("Validation layer", False, f"could not create a debug instance "
                 f"({_vk.result_name(rc)})", "", required=False)


def check_compiler() -> Check:
    from scopedgpu.glsl import _compiler, cache_dir
    comp = _compiler()
    if comp is None:
        return Check("GLSL compiler", False, "neither glslc nor glslangValidator on PATH; "
                     "sg.compile_glsl only serves shaders already in its cache "
                     f"({cache_dir()})",
                     _install("compiler", "or `pip install scopedgpu[glsl]`, or "
                              "glslang-tools (glslangValidator), or the Vulkan SDK; SPIR-V "
                              "bytes work without a compiler"),
                     required=False)
    return Check("GLSL compiler", True, f"{comp[1]} (cache {cache_dir()})", required=False)


def check_validator() -> Check:
    """The Khronos SPIR-V validator (SPIRV-Tools), which checks every shader before the
    driver sees it; without it only scopedgpu's structural checks run."""
    from scopedgpu._spirv_val import how_to_get, validator
    try:
        v = validator()
    except ValueError as exc:     # a setting it reads is invalid
        return Check("SPIR-V validator", False, str(exc), "", required=False)
    if v.ok:
        return Check("SPIR-V validator", True, f"SPIRV-Tools {v.version} ({v.found})",
                     required=False)
    return Check("SPIR-V validator", False,
                 f"{v.found}; shaders get structural checks only (malformed SPIR-V that "
                 "passes them may crash the driver)", how_to_get(), required=False)


def environment() -> tuple[list[Check], list, str]:
    """(checks, devices, error): the checks in order, the devices (empty when none), and
    the reason there are none."""
    checks = [check_loader()]
    devices: list = []
    error = ""
    if checks[0].ok:
        import scopedgpu as sg
        try:
            devices = sg.devices()
        except sg.NoDeviceError as exc:
            error = str(exc).split(". Install")[0]
        checks.append(check_drivers(devices, error))
        checks.append(check_layer(bool(devices)))
    else:
        checks.append(Check("Vulkan driver", False, "not checked: no loader",
                            _install("driver", "or your GPU vendor's driver")))
        checks.append(Check("Validation layer", False, "not checked: no loader",
                            _install("layer", "or the Vulkan SDK"), required=False))
    checks.append(check_compiler())
    checks.append(check_validator())
    return checks, devices, error


def header() -> str:
    import numpy as np

    from scopedgpu._version import __version__
    return (f"scopedgpu {__version__} (Python {platform.python_version()}, "
            f"numpy {np.__version__}, {platform.system()} {platform.machine()})")
