"""Serving under load (issue 24): a few thousand requests at high concurrency through
scopedgpu.aio on one Manager, the pattern of examples/async_service.py and of the bench's
`serve` figure. Each request makes and destroys its two tensors, its algorithm and its
sequence in `with` blocks and awaits the GPU through `aio.eval`; at most C = 256 are in
flight (an asyncio.Semaphore), 4 batches of 750. Checked: every result against numpy,
bit for bit (one float multiply is correctly rounded); that the objects of C requests
were alive at once, their submissions queued together; that what is alive or awaiting
release never exceeds what the requests in flight hold; that the manager's live objects
and pool are back to their baseline after every batch (the `mgr` fixture checks the end
and the close as well); and that a batch ends within 60 s (a lost completion fails
instead of hanging). No timing is asserted. The same sizes with SCOPEDGPU_DEBUG=1 (about
3 s on two cores with the validation layer, 1.5 s without)."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

import numpy as np

import scopedgpu as sg
from scopedgpu import aio
from scopedgpu.testing import live_counts

SCALE = Path(__file__).resolve().parent.parent / "scopedgpu" / "bench" / "shaders" / "scale.spv"
N = 4096                        # floats per request (16 KiB), as the bench's serve figure
CONCURRENCY = 256
BATCHES = 4
PER_BATCH = 750
INPUTS = 32


def inputs() -> tuple[list[np.ndarray], list[float], list[np.ndarray]]:
    rng = np.random.default_rng(2024)
    xs = [(rng.standard_normal(N) * 4).astype(np.float32) for _ in range(INPUTS)]
    alphas = [float(np.float32(a)) for a in rng.uniform(0.5, 2.0, INPUTS)]
    return xs, alphas, [np.float32(a) * x for a, x in zip(alphas, xs)]


async def handle(mgr: sg.Manager, spirv: bytes, x: np.ndarray, a: float,
                 before_eval: Callable[[], None]) -> np.ndarray:
    with mgr.tensor(x) as tx, mgr.empty(x.size) as ty:
        with mgr.algorithm([tx, ty], spirv, push_consts=[a]) as algo:
            with mgr.sequence() as seq:
                seq.record(sg.OpTensorSyncDevice([tx]))
                seq.record(sg.OpAlgoDispatch(algo))
                seq.record(sg.OpTensorSyncLocal([ty]))
                # A service awaits something here (the rest of the request's body, say):
                # every request admitted gets this far before any is evaluated, so that
                # C requests' objects are alive, and their submissions queued, at once on
                # any device, however fast it completes one.
                await asyncio.sleep(0)
                before_eval()
                await aio.eval(seq)
                return ty.numpy()


async def serve_batch(mgr: sg.Manager, spirv: bytes, first: int, count: int,
                      data: tuple[list[np.ndarray], list[float], list[np.ndarray]]
                      ) -> dict[str, Any]:
    xs, alphas, refs = data
    gate = asyncio.Semaphore(CONCURRENCY)
    in_flight = 0
    wrong: list[int] = []
    most_alive = {"tensors": 0, "algorithms": 0, "sequences": 0}
    too_many: list[str] = []

    def probe(i: int) -> None:
        """What is alive, or destroyed and not yet released, belongs to the requests in
        flight: two tensors, one algorithm and one sequence each at most. (A finished
        request's objects were destroyed after its GPU work completed: nothing may hold
        up their release.)"""
        live = mgr.live_objects()
        for kind in most_alive:
            most_alive[kind] = max(most_alive[kind], live[kind])
        if (live["tensors"] > 2 * in_flight or live["algorithms"] > in_flight
                or live["sequences"] > in_flight
                or sum(live[k] for k in most_alive) + live["pending_releases"] > 4 * in_flight):
            too_many.append(f"request {i}: {in_flight} in flight, "
                            f"{ {k: live[k] for k in (*most_alive, 'pending_releases')} }")

    async def serve(i: int) -> None:
        nonlocal in_flight
        async with gate:
            in_flight += 1
            try:
                y = await handle(mgr, spirv, xs[i % INPUTS], alphas[i % INPUTS],
                                 lambda: probe(i) if (i - first) % 16 == 0 else None)
            finally:
                in_flight -= 1
            if not np.array_equal(y, refs[i % INPUTS]):
                wrong.append(i)
            if (i - first) % 16 == 0:
                probe(i)    # this one's objects are gone

    # Bounded: a lost completion fails the test instead of hanging it.
    await asyncio.wait_for(asyncio.gather(*(serve(i) for i in range(first, first + count))),
                           timeout=60)
    return {"wrong": wrong, "most_alive": most_alive, "too_many": too_many}


def test_thousands_of_concurrent_requests_stay_correct_and_leave_nothing(mgr):
    spirv = SCALE.read_bytes()
    data = inputs()
    baseline = live_counts(mgr)
    for b in range(BATCHES):
        res = asyncio.run(serve_batch(mgr, spirv, b * PER_BATCH, PER_BATCH, data))
        assert res["wrong"] == [], f"batch {b}: results differ from numpy's: {res['wrong'][:10]}"
        assert res["too_many"] == [], res["too_many"][:5]
        # C requests' objects were alive at once (the first request of the batch looks
        # after all C admitted ones made theirs), and no more than theirs.
        assert res["most_alive"] == {"tensors": 2 * CONCURRENCY, "algorithms": CONCURRENCY,
                                     "sequences": CONCURRENCY}, f"batch {b}"
        # Between batches the manager is back where it started: nothing accumulates.
        assert live_counts(mgr) == baseline, f"after batch {b}"
