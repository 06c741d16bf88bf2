"""Several devices of one host from one process: one Manager per device, one thread each.

Measures, for each device alone and then for all of them at once (threads started
together), a vec4 grid-stride saxpy over data resident on the device (float32, 10
dispatches per submission) and numpy-to-device and device-to-numpy transfers; prints the
aggregate rates, the speed-up over one device alone and the fraction of linear, and
writes JSON. The SPIR-V is committed next to this script (shaders/), so no GLSL
compiler is needed.

    python -m scopedgpu.bench.multi_device            # every device of the best kind
    python -m scopedgpu.bench.multi_device --devices 0,1 --json multi.json
    python -m scopedgpu.bench.multi_device --managers 2 --quick  # one device opened twice (lavapipe)

`python -m scopedgpu bench --multi-device` runs this script too (from a source checkout).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import scopedgpu as sg

HERE = Path(__file__).resolve().parent
MiB = 1 << 20
K = 10          # dispatches per submission


def shader(name: str) -> bytes:
    spv = HERE / "shaders" / f"{name}.spv"
    if spv.exists():
        return spv.read_bytes()
    return sg.compile_glsl((HERE / "shaders" / f"{name}.comp").read_text())


def pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


class Device:
    """One Manager and what its measurements need."""

    def __init__(self, index: int, n: int, xfer: int, spirv: bytes):
        self.mgr = sg.Manager(index)
        m = self.mgr
        self.x = m.tensor(np.full(n, 1.0, dtype=np.float32), kind="storage")
        self.y = m.tensor(np.zeros(n, dtype=np.float32))    # read back at the end
        self.dispatches = 0
        groups = min(65535, m.device.max_workgroup_count[0], -(-n // 4 // 256))
        self.algo = m.algorithm([self.x, self.y], spirv, workgroup=(groups, 1, 1),
                                push_consts=[0.5])
        self.saxpy = m.sequence()
        for _ in range(K):
            self.saxpy.record(sg.OpAlgoDispatch(self.algo))
        self.host = np.random.default_rng(index).random(xfer // 4, dtype=np.float32)
        self.t = m.tensor(self.host)
        self.up = m.sequence().record(sg.OpTensorSyncDevice([self.t]))
        self.down = m.sequence().record(sg.OpTensorSyncLocal([self.t]))
        self.n, self.xfer = n, xfer

    def run_saxpy(self) -> None:
        self.saxpy.eval()
        self.dispatches += K

    def close(self) -> None:
        self.mgr.close()


def timed(fn: Callable[[], Any], seconds: float, start: threading.Barrier | None = None) -> list[float]:
    if start is not None:
        start.wait()
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 3:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def measure(devs: list[Device], what: str, seconds: float) -> dict:
    """`what` on each device alone, then on all at once: GB/s."""
    def op(d: Device) -> Callable[[], Any]:
        ops: dict[str, Callable[[], Any]] = {"saxpy": d.run_saxpy, "upload": d.up.eval,
                                             "download": d.down.eval}
        return ops[what]

    def traffic(d: Device) -> float:
        return 12.0 * d.n * K if what == "saxpy" else float(d.xfer)

    for d in devs:                      # warm up (clocks, first-use costs)
        timed(op(d), min(seconds, 0.3))
    alone = [traffic(d) / statistics.median(timed(op(d), seconds)) / 1e9 for d in devs]
    start = threading.Barrier(len(devs) + 1)
    results: list[list[float]] = [[] for _ in devs]
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * len(devs)

    def body(i: int) -> None:
        t0 = time.perf_counter()
        results[i] = timed(op(devs[i]), seconds, start)
        spans[i] = (t0, time.perf_counter())

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(devs))]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join()
    together = [traffic(d) / statistics.median(r) / 1e9 for d, r in zip(devs, results)]
    aggregate = sum(together)
    return {"alone_gbps": alone, "together_gbps": together, "aggregate_gbps": aggregate,
            "speedup": aggregate / alone[0], "of_linear": aggregate / sum(alone)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default=None,
                   help="comma-separated device indices (default: every device of the best kind)")
    p.add_argument("--managers", type=int, default=None,
                   help="open this many managers, round-robin over the devices (e.g. 2 on a "
                        "one-device machine)")
    p.add_argument("--quick", action="store_true", help="small sizes, short runs")
    p.add_argument("--seconds", type=float, default=None, help="per measurement (default 2)")
    p.add_argument("--json", default=None, metavar="FILE")
    a = p.parse_args(argv)
    infos = sg.devices()
    if a.devices:
        pick = [int(s) for s in a.devices.split(",")]
    else:
        rank = {"discrete": 0, "integrated": 1, "virtual": 2, "cpu": 3}
        best = min(rank.get(d.type, 9) for d in infos)
        pick = [d.index for d in infos if rank.get(d.type, 9) == best]
    if a.managers:
        pick = [pick[i % len(pick)] for i in range(a.managers)]
    byidx = {d.index: d for d in infos}
    n = min(pow2_floor(min(int(byidx[i].max_storage_buffer_range) // 4,
                           (byidx[i].memory_bytes or 1 << 30) // 32)) for i in pick)
    n = min(n, 1 << 26)
    xfer = min(256 * MiB, pow2_floor(min((byidx[i].memory_bytes or 1 << 30) // 8 for i in pick)))
    if a.quick:
        n, xfer = min(n, 1 << 20), min(xfer, 8 * MiB)
    seconds = a.seconds if a.seconds is not None else (0.2 if a.quick else 2.0)
    spirv = shader("saxpy_vec4")
    print(f"{len(pick)} managers on devices {pick}: "
          f"{', '.join(byidx[i].name for i in sorted(set(pick)))}; "
          f"saxpy 2^{n.bit_length() - 1} floats, transfers {xfer // MiB} MiB", file=sys.stderr)
    devs: list[Device] = []
    out: dict[str, Any] = {"devices": pick, "names": [byidx[i].name for i in pick],
                           "saxpy_n": n, "transfer_bytes": xfer, "figures": {}}
    try:
        for i in pick:
            devs.append(Device(i, n, xfer, spirv))
        for what in ("saxpy", "upload", "download"):
            out["figures"][what] = measure(devs, what, seconds)
        # Correctness: y was 0 and every dispatch added 0.5 * x (x = 1); the transfers
        # brought the host data back unchanged.
        ok = True
        for d in devs:
            d.mgr.run(sg.OpTensorSyncLocal([d.y]))
            y = d.y.data()
            ok = ok and bool(np.all(y[:: max(1, n // 4096)] == np.float32(0.5 * d.dispatches)))
            d.t.data()[:] = 0
            d.down.eval()
            ok = ok and bool(np.array_equal(d.t.data(), d.host))
        out["roundtrip_ok"] = ok
    finally:
        for d in devs:
            d.close()
    print(f"{'figure':<10} {'one device':>12} {'all at once':>12} {'speedup':>8} {'of linear':>10}")
    for what, f in out["figures"].items():
        print(f"{what:<10} {f['alone_gbps'][0]:>9.1f} GB/s {f['aggregate_gbps']:>7.1f} GB/s "
              f"{f['speedup']:>7.2f}x {f['of_linear']:>9.0%}")
    print(f"data ok: {out['roundtrip_ok']}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0 if out["roundtrip_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
