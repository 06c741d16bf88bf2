"""Memory stays flat over create/sync/destroy cycles of big tensors, for every kind.

Each case makes a tensor of one kind and size, syncs it both ways (a storage tensor is
uploaded when made and copied back into a device tensor on the last cycle), destroys it,
and does that again; after a warm-up of WARMUP cycles, reserved pool bytes must not grow
at all and process RSS by at most 16 MiB; empty_cache() then gives back everything the
cycles reserved and live objects are back to their baseline.

The default suite runs a few cycles per case (enough to catch growth: before the pool
reused big blocks, each cycle of a 40 MiB tensor reserved 40 MiB more). The full profile,
1,000 cycles of every case (about 4 minutes on lavapipe), prints one line of figures per
case:

    SCOPEDGPU_MEMFLAT_CYCLES=1000 python -m pytest -s -p no:cacheprovider \\
        tests/lifetime/test_memory_flat.py
"""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import scopedgpu as sg

MiB = 1 << 20
WARMUP = 3
RSS_SLACK = 16 * MiB
FULL = int(os.environ.get("SCOPEDGPU_MEMFLAT_CYCLES", "0"))
# Default cycles per size: enough to see per-cycle growth, cheap on two cores.
DEFAULT_CYCLES = {1: 100, 4: 60, 40: 12, 100: 8}


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def assert_equal(a: np.ndarray, b: np.ndarray) -> None:
    """np.testing.assert_array_equal in 1 MiB slices. Whole, it makes a bool temporary of
    a quarter of the data (25 MiB at 100 MiB): glibc serves the first by mmap, raises its
    mmap threshold when it is freed, and serves the next from the heap, which it keeps, so
    RSS rose by 25 MiB on the checked last cycle whenever the heap had no such hole (the
    test failed now and then in the full suite, never the library's memory)."""
    step = MiB // a.itemsize
    for i in range(0, len(a), step):
        np.testing.assert_array_equal(a[i:i + step], b[i:i + step])


def cycle(mgr: sg.Manager, src: np.ndarray, kind: str, check: sg.Tensor | bool | None) -> None:
    """One cycle; `check`: compare the data with src (a storage tensor is copied into the
    device tensor `check` to read it)."""
    t = mgr.tensor(src, kind=kind)
    if kind == "storage":
        if isinstance(check, sg.Tensor):
            check.data()[:] = 0
            mgr.run(sg.OpTensorCopy([t, check]), sg.OpTensorSyncLocal([check]))
            assert_equal(check.data(), src)
    else:
        t.data()[:1] = -1.0
        mgr.run(sg.OpTensorSyncDevice([t]), sg.OpTensorSyncLocal([t]))
        if check is not None:
            assert t.data()[0] == -1.0
            assert_equal(t.data()[1:], src[1:])
    t.destroy()


@pytest.mark.parametrize("mib", [1, 4, 40, 100])
@pytest.mark.parametrize("kind", ["device", "host", "storage"])
def test_memory_stays_flat_over_big_tensor_cycles(kind, mib):
    with sg.Manager() as mgr:
        # The size asked for, or the device's limit where that is smaller.
        nbytes = min(mib * MiB, mgr.device.max_storage_buffer_range,
                     mgr.device.max_memory_allocation_size or mib * MiB)
        src = np.arange(nbytes // 4, dtype=np.float32)
        live0 = mgr.live_objects()
        check: sg.Tensor | bool = mgr.tensor(np.zeros_like(src)) if kind == "storage" \
            else True
        base = mgr.memory_stats()["reserved_bytes"]
        cycles = FULL or DEFAULT_CYCLES[mib]
        for i in range(WARMUP):   # the check's memory is touched here first
            cycle(mgr, src, kind, check if i == WARMUP - 1 else None)
        reserved_warm = mgr.memory_stats()["reserved_bytes"]
        rss_warm = rss()
        peak_reserved = reserved_warm
        peak_rss = rss_warm
        for i in range(cycles):
            cycle(mgr, src, kind, check if i == cycles - 1 else None)
            if i % 4 == 0 or i == cycles - 1:
                peak_reserved = max(peak_reserved, mgr.memory_stats()["reserved_bytes"])
                peak_rss = max(peak_rss, rss())
        stats = mgr.memory_stats()
        if FULL:
            print(f"\n{kind:8s} {nbytes / MiB:6.1f} MiB x {cycles}: reserved "
                  f"{reserved_warm / MiB:.1f} MiB after warm-up, peak {peak_reserved / MiB:.1f}"
                  f" MiB; RSS {rss_warm / MiB:.1f} MiB after warm-up, peak "
                  f"{peak_rss / MiB:.1f} MiB (+{(peak_rss - rss_warm) / MiB:.1f})")
        assert peak_reserved == reserved_warm, (kind, nbytes, peak_reserved, reserved_warm)
        assert reserved_warm <= base + 4 * max(nbytes, 64 * MiB)
        assert peak_rss - rss_warm <= RSS_SLACK, (kind, nbytes, peak_rss - rss_warm)
        assert stats["tensors"] == (kind == "storage")
        if isinstance(check, sg.Tensor):
            check.destroy()
        gc.collect()
        mgr.empty_cache()
        stats = mgr.memory_stats()
        assert stats["reserved_bytes"] == stats["allocated_bytes"] == stats["tensors"] == 0
        assert mgr.live_objects() == live0
