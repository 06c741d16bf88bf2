"""Array multiplication: the "hello world" of GPU compute, as in Kompute's README.

Two tensors go to the device, a compute shader multiplies them elementwise, the product
comes back and is checked against numpy. Then the same with the built-in OpMult.

    python examples/array_multiplication.py [--size N] [--device INDEX_OR_NAME]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import scopedgpu as sg

SHADER = """
#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) writeonly buffer Out { float o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < o.length()) o[i] = a[i] * b[i];
}
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1_000_000, help="elements per array")
    p.add_argument("--device", default=None, help="device index or name substring")
    args = p.parse_args(argv)
    device = int(args.device) if args.device and args.device.isdigit() else args.device

    rng = np.random.default_rng(0)
    a = rng.standard_normal(args.size, dtype=np.float32)
    b = rng.standard_normal(args.size, dtype=np.float32)

    spirv = sg.compile_glsl(SHADER)          # cached on disk after the first run
    with sg.Manager(device) as mgr:           # closing frees everything made below
        print(f"device: {mgr.device}")
        ta, tb = mgr.tensor(a), mgr.tensor(b)
        out = mgr.empty(args.size)
        # workgroup=None: enough groups of the shader's local size (64) to cover ta.
        algo = mgr.algorithm([ta, tb, out], spirv)
        with mgr.sequence() as seq:            # anonymous: destroyed at the end of the block
            seq.record(sg.OpTensorSyncDevice([ta, tb]))
            seq.record(sg.OpAlgoDispatch(algo))
            seq.record(sg.OpTensorSyncLocal([out]))
            seq.eval()
        ok_shader = np.array_equal(out.data(), a * b)
        print(f"shader: out[:4] = {out.data()[:4]}")

        # The same with the built-in operation, in one call (mgr.run).
        out2 = mgr.empty(args.size)
        mgr.run(sg.OpMult([ta, tb, out2]), sg.OpTensorSyncLocal([out2]))
        ok_mult = np.array_equal(out2.data(), a * b)
        print(f"OpMult: out[:4] = {out2.data()[:4]}")
        print(f"numpy:  a*b[:4] = {(a * b)[:4]}")
        print(f"{args.size} elements, live objects: {mgr.live_objects()['tensors']} tensors, "
              f"{mgr.live_objects()['sequences']} sequences")
    ok = ok_shader and ok_mult
    print("result matches numpy: " + ("OK" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
