"""scopedgpu's benchmarks, shipped with the source (a checkout or the sdist), not the wheel.

    python -m bench [--quick] [--json FILE]     # from the repository root
    python -m scopedgpu bench ...               # the same, where this package is found

The suite (bench/suite.py, transfers.py, chain.py, serve.py) measures every figure of
SPEC.md's Performance section next to its yardstick, a plain-C Vulkan program
(bench/yardstick.c, compiled at run time) on the same device in the same run, and CuPy
where it imports, in a process of its own (bench/cupy_child.py). The other scripts here
(multi_device.py, aio_latency.py, dask_scaling.py, spirv_checks.py, plot.py) run on their
own: `python bench/NAME.py --help`.
"""
from __future__ import annotations

from .cli import HELP, add_arguments, main, parser

__all__ = ["HELP", "add_arguments", "main", "parser"]
