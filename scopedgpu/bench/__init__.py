"""scopedgpu's benchmarks, shipped in the package (the `[bench]` extra adds matplotlib for
the plots and psutil for the memory figures: `pip install 'scopedgpu[bench]'`).

    scopedgpu bench [--quick] [--json FILE]     # also python -m scopedgpu bench
    python -m bench ...                         # the same, from a source checkout

The suite (suite.py, transfers.py, chain.py, serve.py) measures every figure of SPEC.md's
Performance section next to its yardstick, a plain-C Vulkan program (yardstick.c,
compiled at run time where a C compiler and Vulkan's headers are found: yardstick.py) on
the same device in the same run, and CuPy where it imports, in a process of its own
(cupy_child.py). The other scripts here (multi_device, aio_latency, dask_scaling,
spirv_checks, plot, ab) run on their own: `python -m scopedgpu.bench.NAME --help`.

Nothing in the library imports this package: only `scopedgpu.__main__` does, when the
`bench` sub-command runs (tests/test_architecture.py checks it).
"""
from __future__ import annotations

from .cli import HELP, add_arguments, main, parser

__all__ = ["HELP", "add_arguments", "main", "parser"]
