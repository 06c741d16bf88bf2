"""`python -m scopedgpu.bench`: the benchmark suite (see scopedgpu/bench/__init__.py)."""
from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
