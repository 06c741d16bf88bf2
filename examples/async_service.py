"""An asyncio service on one Manager: many concurrent requests, none blocking the loop.

Each request is a vector of scores and its own parameters (a temperature and a bias);
the service answers with the logistic of each score, computed on the GPU. A handler
scopes its request's tensors and sequence in `with` blocks and awaits the GPU through
`scopedgpu.aio.eval`, so the event loop keeps serving other requests (and a ticker keeps
ticking) while the GPU works; the pipeline is compiled once and cached by the manager.
At the end every answer is checked against numpy and the manager's live objects are back
where they were before the first request.

    python examples/async_service.py [--requests N] [--concurrency C] [--size S]
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

import numpy as np

import scopedgpu as sg
from scopedgpu import aio

SHADER = """
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform P { float inv_temperature; float bias; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(y.length())) y[i] = 1.0 / (1.0 + exp(-(x[i] * p.inv_temperature + p.bias)));
}
"""


def reference(x: np.ndarray, temperature: float, bias: float) -> np.ndarray:
    z = x.astype(np.float64) / temperature + bias
    return 1.0 / (1.0 + np.exp(-z))


async def handle(mgr: sg.Manager, spirv: bytes, x: np.ndarray, temperature: float,
                 bias: float) -> np.ndarray:
    """One request: its tensors, algorithm and sequence live only inside this call."""
    with mgr.tensor(x) as tx, mgr.empty(x.size) as ty:
        with mgr.algorithm([tx, ty], spirv, push_consts=[1.0 / temperature, bias]) as algo:
            with mgr.sequence() as seq:
                seq.record(sg.OpTensorSyncDevice([tx]))
                seq.record(sg.OpAlgoDispatch(algo))
                seq.record(sg.OpTensorSyncLocal([ty]))
                await aio.eval(seq)          # the loop serves others meanwhile
                return ty.numpy()


async def main(args: argparse.Namespace) -> int:
    spirv = sg.compile_glsl(SHADER)
    rng = np.random.default_rng(7)
    requests = [(rng.standard_normal(int(rng.integers(args.size // 2, args.size + 1)))
                 .astype(np.float32) * 4, float(rng.uniform(0.5, 2.0)),
                 float(rng.uniform(-1, 1))) for _ in range(args.requests)]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    with sg.Manager() as mgr:
        baseline = mgr.live_objects()
        gate = asyncio.Semaphore(args.concurrency)
        in_flight = peak = 0

        async def serve(req: tuple[np.ndarray, float, float]) -> np.ndarray:
            nonlocal in_flight, peak
            async with gate:
                in_flight += 1
                peak = max(peak, in_flight)
                try:
                    return await handle(mgr, spirv, *req)
                finally:
                    in_flight -= 1

        tick_task = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        answers = await asyncio.gather(*(serve(r) for r in requests))
        seconds = time.perf_counter() - t0
        tick_task.cancel()
        print(f"device: {mgr.device.name}")
        print(f"served {len(answers)} requests in {seconds:.2f} s "
              f"({len(answers) / seconds:.0f}/s), up to {peak} at once; "
              f"the loop ticked {ticks} times meanwhile")
        worst = max(float(np.max(np.abs(a - reference(*r)))) for a, r in zip(answers, requests))
        print(f"largest error against numpy: {worst:.2e}")
        mgr.empty_cache()           # cached pool blocks and pipelines go back to the device
        leaked = mgr.live_objects() != baseline
        print(f"live objects back to baseline: {'no' if leaked else 'yes'}")
    ok = worst < 1e-5 and not leaked and all(a.shape == r[0].shape for a, r in zip(answers, requests))
    print("result matches numpy: OK" if ok else "result matches numpy: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight at most")
    p.add_argument("--size", type=int, default=100_000, help="largest request, in floats")
    sys.exit(asyncio.run(main(p.parse_args())))
