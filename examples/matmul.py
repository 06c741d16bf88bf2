"""A tiled matrix multiply, C = A @ B, checked against numpy.

Each workgroup computes a TILE x TILE block of C: its invocations load one tile of A and
one of B into shared memory, multiply them, and move along K. The tile size is a
preprocessor define given to sg.compile_glsl, the matrix sizes are push constants, and
sizes that are not multiples of the tile are handled by bounds checks.

    python examples/matmul.py [--m M --k K --n N] [--tile 16] [--device INDEX_OR_NAME]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import scopedgpu as sg

SHADER = """
#version 450
layout(local_size_x = TILE, local_size_y = TILE) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };    // M x K, row-major
layout(set = 0, binding = 1) readonly buffer B { float b[]; };    // K x N
layout(set = 0, binding = 2) writeonly buffer C { float c[]; };   // M x N
layout(push_constant) uniform Dims { uint M; uint N; uint K; } d;
shared float ta[TILE][TILE];
shared float tb[TILE][TILE];

void main() {
    uint row = gl_GlobalInvocationID.y, col = gl_GlobalInvocationID.x;
    uint ly = gl_LocalInvocationID.y, lx = gl_LocalInvocationID.x;
    float acc = 0.0;
    for (uint t = 0u; t < (d.K + TILE - 1u) / TILE; ++t) {
        uint ka = t * TILE + lx, kb = t * TILE + ly;
        ta[ly][lx] = (row < d.M && ka < d.K) ? a[row * d.K + ka] : 0.0;
        tb[ly][lx] = (kb < d.K && col < d.N) ? b[kb * d.N + col] : 0.0;
        barrier();
        for (uint k = 0u; k < TILE; ++k) acc += ta[ly][k] * tb[k][lx];
        barrier();
    }
    if (row < d.M && col < d.N) c[row * d.N + col] = acc;
}
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--k", type=int, default=256)
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--tile", type=int, default=16)
    p.add_argument("--device", default=None, help="device index or name substring")
    args = p.parse_args(argv)
    device = int(args.device) if args.device and args.device.isdigit() else args.device
    m, k, n, tile = args.m, args.k, args.n, args.tile

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    spirv = sg.compile_glsl(SHADER, defines={"TILE": f"{tile}u"})
    with sg.Manager(device) as mgr:
        print(f"device: {mgr.device}")
        ta, tb, tc = mgr.tensor(a), mgr.tensor(b), mgr.empty((m, n))
        groups = ((n + tile - 1) // tile, (m + tile - 1) // tile, 1)
        algo = mgr.algorithm([ta, tb, tc], spirv, workgroup=groups,
                             push_consts=np.array([m, n, k], dtype=np.uint32))
        mgr.run(sg.OpTensorSyncDevice([ta, tb]))
        t0 = time.perf_counter()
        mgr.run(sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([tc]))
        dt = time.perf_counter() - t0
        c = tc.numpy()
    ref = a @ b
    err = float(np.max(np.abs(c - ref)))
    print(f"{m}x{k} @ {k}x{n}, tile {tile}: {2 * m * n * k / dt / 1e9:.2f} GFLOP/s "
          f"({dt * 1e3:.1f} ms), max abs error vs numpy {err:.2e}")
    ok = np.allclose(c, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    print("result matches numpy: " + ("OK" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
