"""The benchmark suite: every figure of SPEC.md's Performance section, next to its
yardstick measured in the same run on the same device, and the ratio.

Yardsticks: a plain C program against Vulkan (yardstick.c, compiled at run time with the
system C compiler and cached: yardstick.py), driving the same SPIR-V on the same
device; and CuPy where it imports, always in a child process (cupy_child.py), so
that no CUDA context shares this process with scopedgpu's figures. Without a C compiler,
or without CuPy, the rows stay and say so; no ratio is made up.

Sizes come from what the device reports (maxStorageBufferRange, heap size), never
hard-coded: 2^26 floats and 256 MiB where they fit, less where they do not (lavapipe).
--quick runs everything small, for CI. The transfer figures (the large upload and
download, the size sweep from 4 KiB, the streamed saxpy) live in transfers.py, the dispatch
chain in chain.py, the serving workload in serve.py.

The suite uses scopedgpu's public API only (and the built-in shaders' files).
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
import traceback
from typing import Any, Callable

import numpy as np

import scopedgpu as sg
from scopedgpu.ops import elementwise_groups

from .common import (MiB, Progress, builtin_shader, cpu_model, cpu_ticks, pow2_floor,
                     python_speed_ns, rss_bytes, steal_share)
from .cupy_child import CupyChild
from .report import (
    FIXED,
    SAXPY_K,
    SPEC_LATENCY_RATIO,
    SPEC_POOL_CHURN,
    SPEC_RSS_MIB,
    SPEC_SAXPY_RATIO,
    SPEC_SEQ_CHURN,
    Figure,
)
from .yardstick import Yardstick, build_yardstick

# Seconds of untimed evaluations before each timed round of the latency and chain
# phases, at least (the C yardstick's WARM_S, the same): on lavapipe a process whose
# threads sat idle while the other side's round ran evaluates slower for a while (some
# 2,000 one-dispatch evaluations at 52 to 72 us, then 29; docs/benchmarks.md, session 51).
WARM_S = 0.2

# -- the bench ---------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.quick = bool(args.quick)
        self.p = Progress(quiet=args.quiet)
        # errors: a phase that failed; notes: an optional yardstick (CuPy) that failed
        self.results: dict[str, Any] = {"figures": {}, "sweeps": {}, "details": {},
                                        "errors": {}, "notes": {}}
        self.cupy = CupyChild(not args.no_cupy, self.p.say)
        self.mgr: sg.Manager | None = None
        self.c = Yardstick(None, "not built yet", builtin_shader("saxpy"), 0, self.p.say)

    # helpers
    def fig(self, key: str | Figure, value: float | None, yard: float | None, yard_name: str,
            ratio_kind: str, met: bool | None, **extra: Any) -> None:
        """Records a figure: a key of report.FIGURES, or a Figure (the per-size ones)."""
        d = key if isinstance(key, Figure) else FIXED[key]
        key, label, unit, goal = d
        ratio = None
        if value is not None and yard:
            ratio = value / yard
        rec = {"label": label, "unit": unit, "value": value, "yardstick": yard,
               "yardstick_name": yard_name, "ratio": ratio, "ratio_kind": ratio_kind,
               "goal": goal, "goal_met": met}
        rec.update(extra)
        self.results["figures"][key] = rec

    def cupy_tasks(self, note: str, tasks: list[dict[str, Any]]
                   ) -> list[dict[str, Any] | None]:
        """CuPy's results for tasks, in order, from one child process (None for each where
        CuPy is unavailable or the task failed; a failure goes to notes[note])."""
        if not self.cupy.available:
            return [None] * len(tasks)
        res = self.cupy.run(tasks)
        out: list[dict[str, Any] | None] = []
        errors = []
        for i in range(len(tasks)):
            r = res[i] if i < len(res) else None
            if r is None or "error" in r:
                errors.append(r["error"] if r else "no result (the child died: "
                              + ("; ".join(self.cupy.errors[-1:]) or "?") + ")")
                r = None
            out.append(r)
        if errors:
            self.results["notes"][note] = "; ".join(dict.fromkeys(errors))
        return out

    def timed_reps(self, fn: Callable[[], Any], min_time: float, min_reps: int = 3,
                   max_reps: int = 50, warm_tenth: bool = False) -> list[float]:
        """fn timed at least min_reps and at most max_reps times, for min_time seconds
        where it can; after one untimed call, or (warm_tenth) untimed calls for a tenth
        of min_time and at most a tenth of max_reps, at least one, then more until WARM_S
        seconds have passed: as the C yardstick warms each of its rounds, for phases
        whose rounds alternate with its processes."""
        fn()  # warm
        if warm_tenth:
            start = time.perf_counter()
            for _ in range(max_reps // 10):
                if time.perf_counter() - start >= min_time / 10:
                    break
                fn()
            while time.perf_counter() - start < WARM_S:
                fn()
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < max_reps and (len(times) < min_reps or
                                         time.perf_counter() - start < min_time):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return times

    def phase(self, name: str, fn: Callable[[], None]) -> None:
        only = getattr(self.args, "only", None)
        if only and name not in only:
            return
        self.p.say(f"{name} ...")
        try:
            fn()
        except Exception as exc:  # a failed phase is reported, the others still run
            self.results["errors"][name] = f"{type(exc).__name__}: {exc}"
            self.p.say(f"{name} FAILED: {type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stderr)
        finally:
            gc.collect()
            if self.mgr is not None and not self.m.closed:
                self.m.empty_cache()

    # phases
    def run(self) -> dict[str, Any]:
        from . import chain, serve, transfers
        a = self.args
        saxpy_spv = builtin_shader("saxpy")
        self.spirv = saxpy_spv.read_bytes()
        mgr = self.mgr = sg.Manager(a.device)
        info = self.info = mgr.device
        exe, note = (None, "disabled by --no-c") if a.no_c else build_yardstick(self.p.say)
        self.p.say(f"C yardstick: {note}")
        self.p.say(f"CuPy: {self.cupy.note}")
        self.c = Yardstick(exe, note, saxpy_spv, info.index, self.p.say)
        heap = info.memory_bytes or (1 << 30)
        rng = int(info.max_storage_buffer_range)
        self.saxpy_n = min(1 << 26, pow2_floor(rng // 4), pow2_floor(heap // 32))
        self.xfer_bytes = min(256 * MiB, pow2_floor(heap // 8))
        if self.quick:
            self.saxpy_n = min(self.saxpy_n, 1 << 20)
            self.xfer_bytes = min(self.xfer_bytes, 16 * MiB)
        ticks0 = cpu_ticks()
        self.results["meta"] = {
            "command": getattr(a, "command", None),
            "quick": self.quick, "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "device": str(info), "device_name": info.name, "device_type": info.type,
            "device_index": info.index, "api_version": info.api_version,
            "driver": info.driver, "memory_bytes": info.memory_bytes,
            "max_storage_buffer_range": rng,
            "max_memory_allocation_count": info.max_memory_allocation_count,
            "python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "cpu_model": cpu_model(), "load_avg": list(os.getloadavg()),
            "python_speed_ns": python_speed_ns(),
            "scopedgpu": sg.__version__, "c_yardstick": note,
            "cupy": self.cupy.version, "cupy_note": self.cupy.note,
            "saxpy_n": self.saxpy_n, "transfer_bytes": self.xfer_bytes,
        }
        self.p.say(f"device: {info}; saxpy 2^{self.saxpy_n.bit_length() - 1} floats, "
                   f"transfers {self.xfer_bytes // MiB} MiB{' (quick)' if self.quick else ''}")
        try:
            # (the names --only takes: PHASES)
            self.phase("latency", self.bench_latency)
            self.phase("dispatch chain", lambda: chain.bench_dispatch_chain(self))
            self.phase("saxpy", self.bench_saxpy)
            self.phase("transfers", lambda: transfers.bench_transfers(self))
            self.phase("transfer sweep", lambda: transfers.bench_transfer_sweep(self))
            self.phase("stream", lambda: transfers.bench_stream(self))
            self.phase("sequence churn", self.bench_seq_churn)
            self.phase("tensor churn", self.bench_tensor_churn)
            self.phase("serve", lambda: serve.bench_serve(self))
            self.phase("long churn", self.bench_long_churn)
        finally:
            mgr.close()
        self.results["meta"]["c_device_name"] = self.c.device_name
        self.results["meta"]["c_device"] = self.c.device
        if self.c.errors:
            self.results["notes"]["c_yardstick"] = "; ".join(self.c.errors)
        if self.cupy.errors:
            self.results["notes"]["cupy_child"] = "; ".join(self.cupy.errors)
        # The gauge again: a host whose speed changed during the run shows it here.
        self.results["meta"]["python_speed_ns_end"] = python_speed_ns()
        # And how much of the machine's CPU time its hypervisor took meanwhile.
        self.results["meta"]["cpu_steal_share"] = steal_share(ticks0, cpu_ticks())
        self.results["meta"]["seconds"] = round(time.perf_counter() - self.p.t0, 1)
        return self.results

    @property
    def m(self) -> sg.Manager:
        """The manager, while the run holds one."""
        if self.mgr is None:
            raise RuntimeError("the bench has no manager (run() makes it)")
        return self.mgr

    def saxpy_algo(self, n: int, kind: str = "storage"
                    ) -> tuple[sg.Tensor, sg.Tensor, sg.Algorithm]:
        x = self.m.empty(n, kind=kind)
        y = self.m.empty(n, kind=kind)
        groups = elementwise_groups(n, self.info.max_workgroup_count[0])
        algo = self.m.algorithm([x, y], self.spirv, workgroup=groups, push_consts=[2.0])
        return x, y, algo

    def bench_latency(self) -> None:
        iters = 300 if self.quick else 5000
        rounds = 1 if self.quick else 5
        x, y, algo = self.saxpy_algo(64)
        times: list[int] = []
        c_rounds: list[dict] = []
        clock = time.perf_counter_ns
        with self.m.sequence() as seq:
            seq.record(sg.OpAlgoDispatch(algo))
            for _ in range(iters // 10 + 1):
                seq.eval()
            # Rounds alternate scopedgpu and the C loop, so that load from elsewhere on
            # the machine falls on both alike.
            round_medians: list[float] = []
            for _ in range(rounds):
                # Each round warmed as each C round is (a tenth of its evaluations and
                # one, and at least WARM_S seconds of them, untimed): a round that
                # starts right after a C process ended would otherwise time the
                # host's return to this process.
                warm_start = time.perf_counter()
                for _ in range(iters // rounds // 10 + 1):
                    seq.eval()
                while time.perf_counter() - warm_start < WARM_S:
                    seq.eval()
                start = len(times)
                for _ in range(iters // rounds):
                    t0 = clock()
                    seq.eval()
                    times.append(clock() - t0)
                round_medians.append(statistics.median(times[start:]) / 1e3)
                c_rounds += self.c.run("latency", iters // rounds)
        for t in (algo, x, y):
            t.destroy()
        times.sort()
        # The median of the round medians, as the C loop's figure is taken: the H200's
        # host has a state in which a submission's round trip takes some 50 us instead of
        # 15, for whole rounds of either side, so both sides are summed up alike.
        med = statistics.median(round_medians)
        det = {"iters": len(times), "rounds": rounds, "median_us": med,
               "pooled_median_us": times[len(times) // 2] / 1e3,
               "p10_us": times[len(times) // 10] / 1e3,
               "p90_us": times[9 * len(times) // 10] / 1e3,
               "rounds_median_us": round_medians}
        cres = None
        if c_rounds:
            cres = {k: statistics.median(r[k] for r in c_rounds)
                    for k in c_rounds[0] if k.endswith("_us")}
            cres["rounds"] = c_rounds
        (cu,) = self.cupy_tasks("cupy_latency", [{"task": "latency", "iters": iters}])
        cupy_us = cu["median_us"] if cu else None
        self.results["details"]["latency"] = {"scopedgpu": det, "c": cres, "cupy_us": cupy_us}
        cy = cres["poll_median_us"] if cres else None
        ratio = med / cy if cy else None
        self.fig("latency", med, cy, "C: submit, poll vkGetFenceStatus", "scopedgpu / C",
                 None if ratio is None else ratio <= SPEC_LATENCY_RATIO,
                 c_wait_us=cres["wait_median_us"] if cres else None, cupy=cupy_us)
        self.p.say(f"latency: scopedgpu {med:.1f} us, C poll {cy} us, CuPy {cupy_us} us")

    def bench_saxpy(self) -> None:
        nmax = self.saxpy_n
        sizes = sorted({max(1 << 10, nmax >> s) for s in ((0, 3, 6) if self.quick else
                                                        (0, 2, 4, 6, 8, 10))})
        min_time = 0.05 if self.quick else 0.5
        if not self.quick:
            # Bring the GPU to its working clocks first: on the H200 a cold start measured
            # the first saxpy rows up to a quarter slower than the C loop that ran after it.
            x, y, algo = self.saxpy_algo(nmax)
            with self.m.sequence() as seq:
                for _ in range(SAXPY_K):
                    seq.record(sg.OpAlgoDispatch(algo))
                end = time.perf_counter() + 2.0
                while time.perf_counter() < end:
                    seq.eval()
            for t in (algo, x, y):
                t.destroy()
            self.m.empty_cache()
        sweep: list[dict[str, Any]] = []
        for n in sizes:
            # scopedgpu, then the C yardstick with as many repetitions, then CuPy: per
            # size, close together in time (other load on the machine shifts both alike).
            x, y, algo = self.saxpy_algo(n)
            with self.m.sequence() as seq:
                for _ in range(SAXPY_K):
                    seq.record(sg.OpAlgoDispatch(algo))
                times = self.timed_reps(seq.eval, min_time, min_reps=3, max_reps=50)
            for t in (algo, x, y):
                t.destroy()
            self.m.empty_cache()
            c = self.c.run("saxpy", n, SAXPY_K, len(times))
            traffic = 12.0 * n * SAXPY_K
            gbps = traffic / statistics.median(times) / 1e9
            row = {"n": n, "bytes": 12 * n, "reps": len(times), "scopedgpu_gbps": gbps,
                   "scopedgpu_best_gbps": traffic / min(times) / 1e9,
                   "c_gbps": c[0]["gbps"] if c else None,
                   "c_best_gbps": c[0]["best_gbps"] if c else None, "cupy_gbps": None}
            sweep.append(row)
            self.p.say(f"saxpy n=2^{n.bit_length() - 1}: scopedgpu {gbps:.2f} GB/s, "
                       f"C {row['c_gbps']}")
        # CuPy after scopedgpu's sweep, every size in one child process.
        cupy = self.cupy_tasks("cupy_saxpy", [{"task": "saxpy", "n": r["n"], "k": SAXPY_K,
                                               "reps": r["reps"]} for r in sweep])
        for row, cu in zip(sweep, cupy):
            if cu:
                row["cupy_gbps"] = cu["gbps"]
                self.p.say(f"saxpy n=2^{row['n'].bit_length() - 1}: CuPy {cu['gbps']:.2f} GB/s")
        self.results["sweeps"]["saxpy"] = sweep
        top = sweep[-1]
        ratio = top["scopedgpu_gbps"] / top["c_gbps"] if top["c_gbps"] else None
        roof = self._copy_roof(top["n"], top["reps"])
        self.fig("saxpy", top["scopedgpu_gbps"], top["c_gbps"],
                 f"C: same shader, {SAXPY_K} dispatches per submit", "scopedgpu / C",
                 None if ratio is None else ratio >= SPEC_SAXPY_RATIO, n=top["n"],
                 cupy=top["cupy_gbps"], copy_roof_gbps=roof,
                 roof_fraction=top["scopedgpu_gbps"] / roof if roof else None)
        if roof:
            self.p.say(f"saxpy at {top['scopedgpu_gbps'] / roof:.0%} of the copy roof "
                       f"({roof:.1f} GB/s: a C copy kernel, same access pattern)")

    def _copy_roof(self, n: int, reps: int) -> float | None:
        """The device's copy bandwidth as a kernel sees it: the C yardstick running
        copy_roof.spv (y = x, the saxpy kernel's access pattern) over n floats. The
        yardstick counts saxpy's 12 bytes an element; a copy moves 8."""
        if self.c.exe is None:
            return None
        copy = self.c.with_shader(builtin_shader("copy_roof"))
        res = copy.run("saxpy", n, SAXPY_K, max(3, reps))
        return res[0]["gbps"] * 8 / 12 if res else None

    def bench_seq_churn(self) -> None:
        seconds = 0.3 if self.quick else 3.0
        x, y, algo = self.saxpy_algo(64)
        mgr = self.m
        base = mgr.live_objects()
        for _ in range(50):  # warm: pipeline cached, caches filled
            with mgr.sequence() as s:
                s.record(sg.OpAlgoDispatch(algo))
                s.eval()
        count = 0
        t0 = time.perf_counter()
        while True:
            for _ in range(64):
                with mgr.sequence() as s:
                    s.record(sg.OpAlgoDispatch(algo))
                    s.eval()
            count += 64
            el = time.perf_counter() - t0
            if el >= seconds:
                break
        rate = count / el
        gc.collect()
        after = mgr.live_objects()
        for t in (algo, x, y):
            t.destroy()
        c = self.c.run("churn", seconds)
        cr = c[0]["per_s"] if c else None
        self.results["details"]["seq_churn"] = {"count": count, "seconds": el,
                                                "live_before": base, "live_after": after}
        self.fig("seq_churn", rate, cr, "C: pool+buffer+fence create, record, submit, "
                 "poll, destroy", "scopedgpu / C",
                 None if self.info.type == "cpu" else rate >= SPEC_SEQ_CHURN)
        self.p.say(f"sequence churn: scopedgpu {rate:,.0f}/s, C {cr}")

    def bench_tensor_churn(self) -> None:
        mgr = self.m
        live_n = 10_000 if self.quick else 100_000
        pairs = 20_000 if self.quick else 300_000
        small = np.zeros(16, dtype=np.float32)
        t0 = time.perf_counter()
        live: list[sg.Tensor] = []
        for i in range(live_n):
            live.append(mgr.tensor(small))
            if i % 4096 == 0:
                self.p.tick(f"tensor churn: {i + 1:,} live tensors")
        create_s = time.perf_counter() - t0
        stats = mgr.memory_stats()
        tensor = mgr.tensor
        # Five rounds, the median rate: one round alone is at the mercy of the machine.
        n = 0
        rates = []
        for _ in range(5):
            done = 0
            t0 = time.perf_counter()
            while done < pairs // 5:
                for _ in range(256):
                    tensor(small).destroy()
                done += 256
            rates.append(done / (time.perf_counter() - t0))
            n += done
        rate = statistics.median(rates)
        t0 = time.perf_counter()
        for t in live:
            t.destroy()
        destroy_s = time.perf_counter() - t0
        live.clear()
        c = self.c.run("alloc", 2000 if self.quick else 20_000)
        cr = c[0]["per_s"] if c else None
        self.results["details"]["tensor_churn"] = {
            "live_tensors": live_n, "create_live_s": create_s, "destroy_live_s": destroy_s,
            "blocks_with_live": stats["blocks"],
            "max_memory_allocation_count": self.info.max_memory_allocation_count,
            "pairs": n, "round_rates": rates}
        self.fig("tensor_churn", rate, cr, "C: vkCreateBuffer+vkAllocateMemory per buffer",
                 "scopedgpu / C", None if self.info.type == "cpu" else rate >= SPEC_POOL_CHURN,
                 live_tensors=live_n, blocks=stats["blocks"])
        self.p.say(f"tensor churn with {live_n:,} live ({stats['blocks']} blocks): "
                   f"{rate:,.0f}/s; C per-buffer alloc {cr}")

    def bench_long_churn(self) -> None:
        mgr = self.m
        cycles = self.args.cycles if self.args.cycles else (3000 if self.quick else 1_000_000)
        cap = 10.0 if self.quick else float(self.args.max_churn_seconds)
        x, y, algo = self.saxpy_algo(64)
        small = np.ones(64, dtype=np.float32)

        def cycle() -> None:
            t = mgr.tensor(small)
            with mgr.sequence() as s:
                s.record(sg.OpTensorSyncDevice([t]))
                s.record(sg.OpAlgoDispatch(algo))
                s.eval()
            t.destroy()
        warm = min(2000, max(100, cycles // 50))
        for _ in range(warm):
            cycle()
        gc.collect()
        live0 = mgr.live_objects()
        rss0 = rss_bytes()
        samples = [{"cycle": 0, "t": 0.0, "rss_mib": rss0 / MiB}]
        t0 = time.perf_counter()
        done = 0
        step = max(1, cycles // 100)
        while done < cycles:
            for _ in range(min(step, cycles - done)):
                cycle()
            done += min(step, cycles - done)
            el = time.perf_counter() - t0
            rss_mib = rss_bytes() / MiB
            samples.append({"cycle": done, "t": el, "rss_mib": rss_mib})
            self.p.tick(f"long churn: {done:,}/{cycles:,} cycles, RSS {rss_mib:.1f} MiB")
            if el > cap:
                self.p.say(f"long churn: stopping at {done:,} cycles after {el:.0f} s "
                           "(--max-churn-seconds)")
                break
        gc.collect()
        rss1 = rss_bytes()
        live1 = mgr.live_objects()
        for t in (algo, x, y):
            t.destroy()
        keys = [k for k in live0 if k not in ("tensors", "algorithms", "sequences",
                                               "pending_releases")]
        delta = {k: live1[k] - live0[k] for k in live0 if live1.get(k) != live0[k]}
        vk_delta = sum(abs(live1[k] - live0[k]) for k in keys)
        growth = (rss1 - rss0) / MiB
        el = time.perf_counter() - t0
        self.results["details"]["long_churn"] = {
            "cycles": done, "cycles_asked": cycles, "seconds": el, "per_s": done / el,
            "cycle": "tensor create, anonymous sequence (sync + dispatch) eval, destroy",
            "live_before": live0, "live_after": live1, "delta": delta, "samples": samples}
        self.fig("rss_growth", growth, float(SPEC_RSS_MIB), "goal", "growth / limit",
                 growth <= SPEC_RSS_MIB, cycles=done)
        self.fig("live_delta", float(vk_delta), None, "baseline after warm-up", "",
                 vk_delta == 0 and not delta, cycles=done)
        self.p.say(f"long churn: {done:,} cycles in {el:.0f} s, RSS {growth:+.2f} MiB, "
                   f"live-object delta {delta or 0}")


