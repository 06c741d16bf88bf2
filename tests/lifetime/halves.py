"""Which points a sweep of this pass runs. CI runs the suite twice, without the
validation layer and with it, and each pass runs every other point of the line sweeps of
test_interrupts.py (a KeyboardInterrupt at the k-th line) and of the fault sweeps of
test_faults.py (the k-th Vulkan call fails): without the layer k = 1, 3, 5, ..., with it
k = 2, 4, 6, ..., so that the two passes together run every point within CI's time
budget. SCOPEDGPU_SWEEP=all runs every point in one pass (scripts/device_suite.sh sets
it: the H200 has no validation layer, so no second pass); odd or even forces one half."""
from __future__ import annotations

import os

from tests.conftest import DEBUG   # the pass under the layer, as plain_only reads it

SWEEP = os.environ.get("SCOPEDGPU_SWEEP", "") or ("even" if DEBUG else "odd")
if SWEEP not in ("all", "odd", "even"):
    raise ValueError(f"SCOPEDGPU_SWEEP must be all, odd or even, not {SWEEP!r}")


def points(last: int) -> range:
    """The k of 1 ... last (inclusive) that this pass runs."""
    return range(2 if SWEEP == "even" else 1, last + 1, 1 if SWEEP == "all" else 2)
