"""A parallel sum: a shared-memory tree reduction, pass after pass, in one sequence.

Each workgroup of 256 invocations loads 512 values, adds them pairwise in shared memory
and writes one partial sum; the next dispatch reduces the partial sums the same way,
until one value is left. All passes are recorded in one sequence: scopedgpu inserts the
barrier between a pass that writes the partial sums and the next that reads them.

    python examples/reduction.py [--size N] [--device INDEX_OR_NAME]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import scopedgpu as sg

LOCAL = 256
PER_GROUP = 2 * LOCAL
SHADER = """
#version 450
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) readonly buffer In { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Out { float partial[]; };
layout(push_constant) uniform Params { uint n; } p;   // values to reduce in this pass
shared float s[256];

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint i = gl_WorkGroupID.x * 512u + lid;
    float v = i < p.n ? x[i] : 0.0;
    if (i + 256u < p.n) v += x[i + 256u];
    s[lid] = v;
    barrier();                       // also orders the shared-memory writes
    for (uint stride = 128u; stride > 0u; stride >>= 1) {
        if (lid < stride) s[lid] += s[lid + stride];
        barrier();
    }
    if (lid == 0u) partial[gl_WorkGroupID.x] = s[0];
}
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=10_000_000)
    p.add_argument("--device", default=None, help="device index or name substring")
    args = p.parse_args(argv)
    device = int(args.device) if args.device and args.device.isdigit() else args.device

    rng = np.random.default_rng(0)
    x = rng.random(args.size, dtype=np.float32)
    spirv = sg.compile_glsl(SHADER)
    with sg.Manager(device) as mgr:
        print(f"device: {mgr.device}")
        levels = [mgr.tensor(x)]
        n = args.size
        algos = []
        while n > 1:
            groups = (n + PER_GROUP - 1) // PER_GROUP
            # Intermediate sums never need host memory: "storage" tensors.
            out = mgr.empty(groups, kind="storage" if groups > 1 else "device")
            algos.append(mgr.algorithm([levels[-1], out], spirv, workgroup=(groups, 1, 1),
                                       push_consts=np.array([n], dtype=np.uint32)))
            levels.append(out)
            n = groups
        result = levels[-1]
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([levels[0]]))
            for algo in algos:
                seq.record(sg.OpAlgoDispatch(algo))
            seq.record(sg.OpTensorSyncLocal([result]))
            seq.eval()
        total = float(result.data()[0]) if args.size > 1 else float(x[0])
        print(f"{args.size} values in {len(algos)} passes "
              f"({' -> '.join(str(t.size) for t in levels)})")
    ref = float(np.sum(x, dtype=np.float64))
    rel = abs(total - ref) / max(abs(ref), 1e-30)
    print(f"GPU sum {total:.6f}, numpy (float64) {ref:.6f}, relative error {rel:.1e}")
    ok = rel < 1e-5
    print("result matches numpy: " + ("OK" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
