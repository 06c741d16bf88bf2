"""Streaming: arrays larger than you want on the GPU pushed through a kernel in chunks,
with upload, compute and download overlapped (Manager.stream).

y = a * x + y over float32 arrays, chunk by chunk: while the kernel runs on one chunk, the
next is uploaded and the previous downloaded, on the device's transfer queues when it has
them. The result is checked against numpy. With --pinned, x and y are imported into the
device once (Manager.pinned) and the chunks move by DMA alone, without copies through
staging; the pinning is timed apart.

    python examples/stream_saxpy.py [--size N] [--chunk-mib M] [--pinned] [--device I]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import scopedgpu as sg
from scopedgpu._shaders import builtin_spirv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1 << 24, help="elements (default 2^24)")
    ap.add_argument("--chunk-mib", type=int, default=4, help="chunk size in MiB (default 4)")
    ap.add_argument("--pinned", action="store_true", help="pin x and y first")
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.random(args.size, dtype=np.float32)
    y = rng.random(args.size, dtype=np.float32)
    expect = np.float32(3.0) * x + y
    chunk = args.chunk_mib << 20
    with sg.Manager(args.device) as mgr:
        t0 = time.perf_counter()
        pins = mgr.pinned(x, y) if args.pinned else None
        if pins is not None:
            print(f"pinned {pins.pinned_bytes >> 20} MiB in {(time.perf_counter() - t0) * 1e3:.1f}"
                  f" ms{'; not pinned: ' + str(pins.unpinned) if pins.unpinned else ''}")
        t0 = time.perf_counter()
        # Binding 0 is x, binding 1 is y: y is read and written, so it is in both lists.
        mgr.stream(builtin_spirv("saxpy"), inputs=[x, y], outputs=[y], push_consts=[3.0],
                   chunk_bytes=chunk, workgroup=sg.ops.elementwise_groups(chunk // 4))
        dt = time.perf_counter() - t0
        if pins is not None:
            pins.destroy()
    ok = np.allclose(y, expect, rtol=1e-6)
    moved = 3 * x.nbytes
    print(f"{args.size} elements, {x.nbytes >> 20} MiB per array, in chunks of "
          f"{args.chunk_mib} MiB: {dt * 1e3:.1f} ms, {moved / dt / 1e9:.2f} GB/s "
          f"(x and y in, y out)")
    print(f"result matches numpy: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
