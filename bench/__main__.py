"""`python -m bench` from a source checkout: scopedgpu.bench's command line, unchanged."""
from __future__ import annotations

import sys

from scopedgpu.bench.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m bench"))
