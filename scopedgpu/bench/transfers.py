"""The transfer figures of the suite:

- upload / download: a recorded OpTensorSyncDevice / OpTensorSyncLocal of one large tensor
  (256 MiB where the heap allows) against the C yardstick's DMA from pinned staging;
- transfer_4KiB ... transfer_4MiB (and 16 MiB, 256 MiB for context): numpy to device and
  back, end to end as a user writes it (`t.data()[:] = x; seq.eval(); y[:] = t.data()`,
  the sequence [OpTensorSyncDevice, OpTensorSyncLocal] recorded once), against the best
  of the C yardstick's paths at that size (pinned staging, ReBAR, imported host memory);
- stream_saxpy: a numpy array streamed through saxpy in chunks (stream.py) against
  the C yardstick's concurrent host-to-device plus device-to-host DMA rate.
GB/s counts the bytes a figure moves: both ways for the round trips, input and output for
the stream.
"""
from __future__ import annotations

import functools
import statistics
import time
from typing import TYPE_CHECKING, Any

import numpy as np

import scopedgpu as sg

from .common import GiB, KiB, MiB, mem_available, pow2_floor, size_name
from .report import SPEC_STREAM_RATIO, SPEC_TRANSFER_RATIO, transfer_figure
from .stream import scopedgpu_stream

if TYPE_CHECKING:
    from .suite import Bench

C_PATHS = ("staging", "rebar", "import", "import_each")
# Alternating rounds of scopedgpu and the C yardstick per size of the round-trip goal.
SWEEP_ROUNDS = 5


def _write_and_eval(host: np.ndarray, arr: np.ndarray, seq: sg.Sequence) -> None:
    host[...] = arr     # a user's numpy array written into data(), then synced
    seq.eval()


def bench_transfers(b: Bench) -> None:
    """The large upload and download, a few sizes up to b.xfer_bytes."""
    bmax = b.xfer_bytes
    sizes = sorted({max(MiB, bmax >> s) for s in ((0, 2, 4) if b.quick else (0, 2, 4, 6, 8))})
    min_time = 0.05 if b.quick else 0.4
    mgr = b.m
    sweep: list[dict[str, Any]] = []
    for nbytes in sizes:
        arr = np.random.default_rng(1).random(nbytes // 4, dtype=np.float32)
        t = mgr.tensor(arr)
        up = mgr.sequence().record(sg.OpTensorSyncDevice([t]))
        down = mgr.sequence().record(sg.OpTensorSyncLocal([t]))
        tu = b.timed_reps(up.eval, min_time, min_reps=3, max_reps=50)
        host = t.data()
        host[...] = 0
        td = b.timed_reps(down.eval, min_time, min_reps=3, max_reps=50)
        step = max(1, host.size // 4096)
        ok = bool(np.array_equal(host[::step], arr[::step]))
        te = b.timed_reps(functools.partial(_write_and_eval, host, arr, up), min_time / 2,
                          min_reps=2, max_reps=20)
        for obj in (up, down, t):
            obj.destroy()
        del host
        mgr.empty_cache()
        reps = max(len(tu), len(td))
        c = b.c.run("dma", nbytes, reps)
        row: dict[str, Any] = {
            "bytes": nbytes, "upload_gbps": nbytes / statistics.median(tu) / 1e9,
            "download_gbps": nbytes / statistics.median(td) / 1e9,
            "upload_e2e_gbps": nbytes / statistics.median(te) / 1e9, "roundtrip_ok": ok,
            "c_upload_gbps": c[0].get("upload_gbps") if c else None,
            "c_download_gbps": c[0].get("download_gbps") if c else None, "reps": reps}
        sweep.append(row)
        b.p.say(f"transfer {nbytes // MiB} MiB: up {row['upload_gbps']:.2f} GB/s "
                f"(C DMA {row['c_upload_gbps']}), down {row['download_gbps']:.2f} GB/s "
                f"(C DMA {row['c_download_gbps']}), data ok: {ok}")
    # CuPy (cp.asarray of the same pageable array, .get() back) after scopedgpu's sizes,
    # every size in one child process.
    cupy = b.cupy_tasks("cupy_transfer", [{"task": "transfer", "bytes": r["bytes"],
                                           "reps": min(r.pop("reps"), 10)} for r in sweep])
    for row, cu in zip(sweep, cupy):
        if cu:
            row.update(cupy_upload_gbps=cu["upload_gbps"], cupy_download_gbps=cu["download_gbps"])
    b.results["sweeps"]["transfer"] = sweep
    top = sweep[-1]
    for d in ("upload", "download"):
        v, c_rate = top[f"{d}_gbps"], top[f"c_{d}_gbps"]
        what = "staging->device" if d == "upload" else "device->staging"
        b.fig(d, v, c_rate, f"C: vkCmdCopyBuffer {what}", "scopedgpu / C",
              None if not c_rate else v / c_rate >= SPEC_TRANSFER_RATIO,
              bytes=top["bytes"], cupy=top.get(f"cupy_{d}_gbps"),
              e2e_gbps=top["upload_e2e_gbps"] if d == "upload" else None)


# -- numpy to device and back, every size ------------------------------------------------
def sweep_sizes(b: Bench) -> list[int]:
    """4 KiB, 8 KiB, ..., 4 MiB, then 16 MiB and 256 MiB for context (256 MiB where the
    heap allows it, and not with --quick)."""
    sizes = [4 * KiB << i for i in range(11)] + [16 * MiB]
    if not b.quick and b.xfer_bytes >= 256 * MiB:
        sizes.append(256 * MiB)
    return sizes


def roundtrip_times(mgr: sg.Manager, x: np.ndarray, y: np.ndarray, min_time: float,
                    min_reps: int, max_reps: int, *, copied: bool) -> list[float]:
    """Seconds per round trip host -> device -> host of a tensor holding x; y receives the
    data that came back (checked by the caller). copied=False: the user's array is the
    tensor's data() (kp's way of updating inputs: written in place), a round trip is the
    recorded [sync device, sync local] re-evaluated, as the C import path's user array is
    the imported memory. copied=True: x copied into data() and data() out to y around it,
    as the C staging path's memcpys."""
    t = mgr.tensor(x)
    seq = mgr.sequence()
    up = mgr.sequence()
    down = mgr.sequence()
    try:
        seq.record(sg.OpTensorSyncDevice([t])).record(sg.OpTensorSyncLocal([t]))
        up.record(sg.OpTensorSyncDevice([t]))
        down.record(sg.OpTensorSyncLocal([t]))
        h = t.data()
        clock = time.perf_counter
        # Warm (first touch, caches, the clocks) for a tenth of the time, at least twice:
        # the C yardstick warms each path with a tenth of its round trips.
        start = clock()
        for i in range(max_reps // 10 + 2):
            seq.eval()
            if i >= 1 and clock() - start >= min_time / 10:
                break
        times: list[float] = []
        start = clock()
        while len(times) < max_reps and (len(times) < min_reps or clock() - start < min_time):
            t0 = clock()
            if copied:
                h[:] = x
                seq.eval()
                y[:] = h
            else:
                seq.eval()
            times.append(clock() - t0)
        # The data made the trip: up, host copy cleared, down.
        h[:] = x
        up.eval()
        h[:] = 0
        down.eval()
        y[:] = h
        return times
    finally:
        for obj in (seq, up, down, t):
            obj.destroy()


def bench_transfer_sweep(b: Bench) -> None:
    mgr = b.m
    min_time = 0.03 if b.quick else 0.3
    max_reps = 300 if b.quick else 5000
    rows: list[dict[str, Any]] = []
    notes: set[str] = set()
    for nbytes in sweep_sizes(b):
        x = np.random.default_rng(nbytes).random(nbytes // 4, dtype=np.float32)
        y = np.zeros_like(x)
        # Rounds alternate scopedgpu and the C yardstick (the sizes of the goal), so that a
        # change of the machine's speed during the sweep falls on both alike (the H200's
        # host was seen to switch between states tens of seconds apart, changing a round
        # trip by 2x); the figure is the median of the round medians on each side.
        rounds = 1 if b.quick or nbytes > 4 * MiB else SWEEP_ROUNDS
        ours: list[float] = []
        theirs: list[dict[str, Any]] = []
        reps = 0
        ok = True
        for _ in range(rounds):
            y[:] = 0
            times = roundtrip_times(mgr, x, y, min_time / rounds, 5, max_reps // rounds,
                                    copied=False)
            ok = ok and bool(np.array_equal(x, y))
            ours.append(statistics.median(times))
            reps += len(times)
            theirs += [r for r in b.c.run("xfer", nbytes, min(len(times), 2000))
                       if "error" not in r]
        y[:] = 0
        copied = roundtrip_times(mgr, x, y, min_time / 3, 5, max_reps // 3, copied=True)
        ok = ok and bool(np.array_equal(x, y))
        mgr.empty_cache()
        med = statistics.median(ours)
        gbps = 2 * nbytes / med / 1e9
        paths: dict[str, list[dict[str, Any]]] = {}
        for cres in theirs:
            for name, p in cres.get("paths", {}).items():
                paths.setdefault(name, []).append(p)
                if "skipped" in p:
                    notes.add(f"C path {name}: {p['skipped']}")
                elif not p.get("ok"):
                    notes.add(f"C path {name}: the data did not come back intact at "
                              f"{size_name(nbytes)}")
        # Each C path's median over the rounds; the best path is the fastest of those.
        c_us = {name: statistics.median(p["median_us"] for p in ps)
                for name, ps in paths.items()
                if all(p.get("ok") and "median_us" in p for p in ps)}
        c_name = min(c_us, key=c_us.__getitem__) if c_us else None
        c_best = 2 * nbytes / (c_us[c_name] * 1e-6) / 1e9 if c_name else None
        name = size_name(nbytes)
        row: dict[str, Any] = {
            "bytes": nbytes, "name": name, "reps": reps, "rounds": rounds, "ok": ok,
            "scopedgpu_gbps": gbps, "scopedgpu_median_us": med * 1e6,
            "round_us": [t * 1e6 for t in ours],
            "scopedgpu_copied_gbps": 2 * nbytes / statistics.median(copied) / 1e9,
            "c_best": c_name, "c_best_gbps": c_best,
            "c_best_median_us": c_us[c_name] if c_name else None,
            "c_round_us": [r.get("best_median_us") for r in theirs]}
        for pname in C_PATHS:
            row[f"c_{pname}_gbps"] = (2 * nbytes / (c_us[pname] * 1e-6) / 1e9
                                      if pname in c_us else None)
        rows.append(row)
        ratio = gbps / c_best if c_best else None
        b.fig(transfer_figure(name), gbps, c_best,
              f"C best path ({c_name})" if c_best else "C best path",
              "scopedgpu / C", None if ratio is None else ratio >= SPEC_TRANSFER_RATIO,
              bytes=nbytes, c_path=c_name, data_ok=ok, median_us=med * 1e6, rounds=rounds,
              copied_gbps=row["scopedgpu_copied_gbps"],
              c_paths={k: row[f"c_{k}_gbps"] if k in c_us else
                       next((p.get("skipped") for p in paths[k] if "skipped" in p), None)
                       for k in paths})
        rstr = "-" if ratio is None else f"{ratio:.2f}"
        b.p.say(f"round trip {name}: scopedgpu {gbps:.3f} GB/s ({med * 1e6:.1f} us), C best "
                f"{c_best if c_best is None else round(c_best, 4)} GB/s ({c_name}), ratio "
                f"{rstr}, {rounds} round(s), data ok: {ok}")
    b.results["sweeps"]["transfer_sizes"] = rows
    b.results["details"]["transfer_sweep_notes"] = sorted(notes)


# -- streamed saxpy ----------------------------------------------------------------------
def stream_sizes(b: Bench) -> tuple[int, int]:
    """(bytes of x, chunk bytes): --stream-gib, else 16 GiB on a GPU whose host has the RAM
    for x, y and the output (64 MiB with --quick and on a CPU device); chunks of
    Manager.stream()'s default (8 MiB), or --stream-chunk-mib, never beyond
    maxStorageBufferRange."""
    small = b.quick or b.info.type == "cpu"
    gib = getattr(b.args, "stream_gib", None)
    if gib is not None:
        nbytes = int(float(gib) * GiB)
    elif small:
        nbytes = 64 * MiB
    else:
        avail = mem_available() or 16 * GiB
        nbytes = max(64 * MiB, min(16 * GiB, pow2_floor(avail // 4)))
    nbytes = max(4 * KiB, nbytes // 4 * 4)
    chunk_mib = getattr(b.args, "stream_chunk_mib", None)
    chunk = int(chunk_mib * MiB) if chunk_mib else 8 * MiB
    chunk = min(chunk, pow2_floor(int(b.info.max_storage_buffer_range)), nbytes)
    return nbytes, max(4 * KiB, chunk // 4 * 4)


def bench_stream(b: Bench) -> None:
    mgr = b.m
    nbytes, chunk = stream_sizes(b)
    n = nbytes // 4
    avail = mem_available()
    if avail is not None and 3 * nbytes > avail:
        b.p.say(f"stream: {nbytes / GiB:.1f} GiB needs {3 * nbytes / GiB:.1f} GiB of host "
                f"memory, {avail / GiB:.1f} GiB is available: expect swapping or failure")
    b.p.say(f"stream: preparing 2 x {nbytes / MiB:,.0f} MiB of input")
    x = np.arange(n, dtype=np.float32)
    y = np.empty_like(x)
    y[:] = x[::-1]
    alpha = 2.0
    warm = min(n, 2 * (chunk // 4))
    out = np.empty_like(x)
    out.fill(0)         # its pages exist before the timed runs, as x's and y's do
    budget = 0.3 if b.quick else 10.0
    # Checked at random points and at every chunk edge, after each of the two ways.
    idx = np.random.default_rng(0).integers(0, n, 4096)
    edges = np.arange(0, n, max(1, chunk // 4))
    idx = np.concatenate([idx, edges, np.maximum(edges - 1, 0), [n - 1]])
    ref = np.float32(alpha) * x[idx] + y[idx]

    def check(out: np.ndarray) -> bool:
        good = bool(np.allclose(out[idx], ref, rtol=1e-6, atol=0))
        out[idx] = 0
        return good

    def timed(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> list[float]:
        scopedgpu_stream(mgr, x[:warm], y[:warm], alpha, chunk, out=out[:warm])
        times: list[float] = []
        start = time.perf_counter()
        while not times or (len(times) < 5 and time.perf_counter() - start < budget):
            t0 = time.perf_counter()
            scopedgpu_stream(mgr, x, y, alpha, chunk, out=out)
            times.append(time.perf_counter() - t0)
        return times

    times = timed(x, y, out)
    ok = check(out)
    # The same with the three arrays pinned (Manager.pinned: imported once, streamed by
    # DMA alone); the pinning is timed apart.
    t0 = time.perf_counter()
    with mgr.pinned(x, y, out) as pins:
        pin_s = time.perf_counter() - t0
        pinned_times = timed(x, y, out) if pins.pinned_bytes else []
        pinned_why = "; ".join(sorted(set(pins.unpinned.values())))
    ok = ok and check(out)
    mgr.empty_cache()
    del x, y, out
    pinned_gbps = 3 * nbytes / statistics.median(pinned_times) / 1e9 if pinned_times else None
    med = statistics.median(times)
    gbps = 3 * nbytes / med / 1e9
    # The C side: at least as many bytes each way as one stream moves in, several GiB on
    # a GPU, in chunks of 256 MiB (16 MiB on a CPU device or with --quick).
    small = b.quick or b.info.type == "cpu"
    c_chunk = min(16 * MiB if small else 256 * MiB, pow2_floor(b.xfer_bytes))
    c_total = max(c_chunk, min(8 * GiB, 2 * nbytes) // c_chunk * c_chunk)
    c = b.c.run("stream", c_total, c_chunk, 3 if small else 5)
    cres = c[0] if c else {}
    c_rate = cres.get("concurrent_gbps")
    ratio = gbps / c_rate if c_rate else None
    b.fig("stream_saxpy", gbps, c_rate, "C: concurrent H2D+D2H DMA", "scopedgpu / C",
          None if ratio is None else ratio >= SPEC_STREAM_RATIO, bytes=nbytes,
          chunk_bytes=chunk, reps=len(times), data_ok=ok,
          api="Manager.stream (upload, kernel, download overlapped)",
          c_queues=cres.get("queues"), c_h2d_gbps=cres.get("h2d_gbps"),
          c_d2h_gbps=cres.get("d2h_gbps"), c_bytes_each_way=cres.get("bytes_each_way"),
          c_chunk=cres.get("chunk"), c_error=cres.get("error"))
    pratio = pinned_gbps / c_rate if c_rate and pinned_gbps else None
    b.fig("stream_saxpy_pinned", pinned_gbps, c_rate, "C: concurrent H2D+D2H DMA",
          "scopedgpu / C", None if pratio is None else pratio >= SPEC_STREAM_RATIO,
          bytes=nbytes, chunk_bytes=chunk, reps=len(pinned_times), data_ok=ok,
          api="Manager.pinned(x, y, out) around Manager.stream", pin_seconds=pin_s,
          pin_gbps=3 * nbytes / pin_s / 1e9 if pin_s else None, not_pinned=pinned_why or None)
    if not ok:
        raise AssertionError("stream_saxpy: the streamed result differs from numpy's")
    b.p.say(f"stream: {nbytes / MiB:,.0f} MiB in {chunk / MiB:g} MiB chunks: scopedgpu "
            f"{gbps:.2f} GB/s (input + output), C concurrent DMA {c_rate} GB/s "
            f"({cres.get('queues')}; H2D {cres.get('h2d_gbps')}, D2H {cres.get('d2h_gbps')})")
    b.p.say(f"stream, arrays pinned: {pinned_gbps} GB/s (pinning {pin_s:.3f} s; "
            f"{pinned_why or 'all pinned'})")
