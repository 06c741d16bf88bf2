"""Dask and scopedgpu: normalise an array of many blocks and histogram it, on the GPU of
each worker of a local cluster.

A LocalCluster of worker processes (one per device, round-robin; on a one-device machine
they share it) each open one Manager through scopedgpu.dask's plugin. The array's mean
and standard deviation come from dask; then two kernels run over its blocks through
scopedgpu.dask.map_blocks: one writes (x - mean) / std, the next counts each block's
values into bins (partial histograms per workgroup); dask sums them. Both results are
checked against numpy.

    python examples/dask_histogram.py [--size N] [--blocks B] [--workers W] [--bins K]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

NORMALISE = """
#version 450
layout(local_size_x = 256) in;
layout(push_constant) uniform P { float mean; float inv_std; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Z { float z[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(z.length())) z[i] = (x[i] - p.mean) * p.inv_std;
}
"""

HISTOGRAM = """
#version 450
// One invocation per bin; each workgroup counts a strided share of the block, a tile of
// NBINS values at a time (no atomics: every invocation scans the tile for its own bin).
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint NBINS = 64;
layout(push_constant) uniform P { float lo; float scale; } p;   // scale = bins / (hi - lo)
layout(set = 0, binding = 0) readonly buffer Z { float z[]; };
layout(set = 0, binding = 1) writeonly buffer H { uint counts[]; };   // groups x NBINS
shared uint tile[NBINS];
void main() {
    uint b = gl_LocalInvocationID.x, g = gl_WorkGroupID.x, groups = gl_NumWorkGroups.x;
    uint n = uint(z.length()), count = 0u;
    for (uint base = g * NBINS; base < n; base += groups * NBINS) {   // uniform per group
        uint i = base + b, bin = 0xffffffffu;
        if (i < n) {
            float f = floor((z[i] - p.lo) * p.scale);
            if (f >= 0.0 && f < float(NBINS)) bin = uint(f);
        }
        tile[b] = bin;
        barrier();
        for (uint k = 0u; k < NBINS; ++k) count += uint(tile[k] == b);
        barrier();
    }
    counts[g * NBINS + b] = count;
}
"""
GROUPS = 64     # workgroups per block, each writing its own partial histogram


def main(args: argparse.Namespace) -> int:
    import dask
    import dask.array as da
    from dask.distributed import Client, LocalCluster

    import scopedgpu.dask as sgd

    chunk = -(-args.size // args.blocks)
    t0 = time.perf_counter()
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        sgd.register(client)
        where = client.run(lambda dask_worker: sgd.manager(dask_worker).device.name)
        for addr, name in sorted(where.items()):
            print(f"worker {addr}: {name}")
        rng = da.random.default_rng(42)
        x = (rng.standard_normal(args.size, chunks=chunk) * 3.0 + 5.0).astype(np.float32)
        mean, std = dask.compute(x.mean(), x.std())
        z = sgd.map_blocks(NORMALISE, x, push_consts=[float(mean), float(1.0 / std)])
        lo, hi = -4.0, 4.0
        nblocks = x.numblocks[0]
        width = GROUPS * args.bins
        partial = sgd.map_blocks(HISTOGRAM, z, out_shape=lambda s: (1, width), dtype=np.uint32,
                                 spec_consts=[args.bins], workgroup=(GROUPS, 1, 1),
                                 push_consts=[lo, args.bins / (hi - lo)],
                                 chunks=((1,) * nblocks, (width,)), new_axis=1)
        xs, zs, sums = dask.compute(x, z, partial.sum(axis=0, dtype=np.uint64))
        hist = sums.reshape(GROUPS, args.bins).sum(axis=0)
    seconds = time.perf_counter() - t0
    print(f"{args.size:,} floats in {nblocks} blocks on {args.workers} workers: {seconds:.1f} s "
          f"(cluster start included)")

    z_ref = (xs.astype(np.float64) - np.float64(mean)) / np.float64(std)
    z_err = float(np.max(np.abs(zs - z_ref)))
    print(f"normalised: mean {zs.mean():+.2e}, std {zs.std():.6f}, largest error {z_err:.1e}")
    # The same binning in float32 as the kernel, so that every value falls in the same bin.
    f = np.floor((zs - np.float32(lo)) * np.float32(args.bins / (hi - lo)))
    keep = (f >= 0) & (f < args.bins)
    want = np.bincount(f[keep].astype(np.int64), minlength=args.bins)
    exact = np.array_equal(hist, want)
    numpy_hist, _ = np.histogram(z_ref, bins=args.bins, range=(lo, hi))
    edge = int(np.abs(hist.astype(np.int64) - numpy_hist).sum())
    print(f"histogram of {int(hist.sum()):,} values in {args.bins} bins: "
          f"same as numpy's binning of the same values: {exact}; "
          f"{edge} values in another bin than np.histogram of the float64 values")
    ok = z_err < 1e-4 and exact and edge <= max(2, args.size // 100_000)
    print("result matches numpy: OK" if ok else "result matches numpy: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=20_000_000, help="floats in the array")
    p.add_argument("--blocks", type=int, default=40)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--bins", type=int, default=64)
    sys.exit(main(p.parse_args()))
