"""The figures' names, units and goals, and the result table (plain text and Markdown)."""
from __future__ import annotations

from typing import Any, NamedTuple

SAXPY_K = 10            # dependent dispatches per submission in the saxpy loops
SPEC_LATENCY_RATIO = 1.1
SPEC_SAXPY_RATIO = 0.95
SPEC_TRANSFER_RATIO = 0.80
SPEC_STREAM_RATIO = 0.80
SPEC_SEQ_CHURN = 20_000
SPEC_POOL_CHURN = 200_000
SPEC_RSS_MIB = 16
SPEC_SERVE_RATE = 10_000     # requests/s at SERVE_GOAL_AT in flight
SPEC_SERVE_P99 = 4.0         # p99 / p50 at every level up to SERVE_P99_UP_TO in flight
SPEC_CHAIN_RATIO = 0.95      # of C's rate per dispatch
SERVE_LEVELS = (1, 16, 64, 256, 1024)   # requests in flight
SERVE_GOAL_AT = 64
SERVE_P99_UP_TO = 256
CHAIN_KS = (1, 10, 100, 1000)           # dependent dispatches in one sequence


class Figure(NamedTuple):
    key: str
    label: str
    unit: str
    goal: str


FIGURES = [
    Figure("latency", "re-eval latency, 1 dispatch, 64 floats (median)", "us",
           f"<= {SPEC_LATENCY_RATIO}x C poll loop"),
    Figure("saxpy", "saxpy float32, data resident", "GB/s", f">= {SPEC_SAXPY_RATIO:.0%} of C"),
    Figure("upload", "numpy (host copy) -> device", "GB/s",
           f">= {SPEC_TRANSFER_RATIO:.0%} of C DMA"),
    Figure("download", "device -> numpy (host copy)", "GB/s",
           f">= {SPEC_TRANSFER_RATIO:.0%} of C DMA"),
    Figure("stream_saxpy", "numpy -> saxpy -> numpy, streamed in chunks", "GB/s",
           f">= {SPEC_STREAM_RATIO:.0%} of C concurrent DMA"),
    Figure("stream_saxpy_pinned", "the same, streamed from pinned arrays", "GB/s",
           f">= {SPEC_STREAM_RATIO:.0%} of C concurrent DMA"),
    Figure("seq_churn", "anonymous sequences create/record/eval/destroy", "1/s",
           f">= {SPEC_SEQ_CHURN:,}/s"),
    Figure("tensor_churn", "tensors alloc+free, with many live", "1/s",
           f">= {SPEC_POOL_CHURN:,}/s"),
    Figure("rss_growth", "RSS growth over the long churn", "MiB", f"<= {SPEC_RSS_MIB} MiB"),
    Figure("live_delta", "live Vulkan objects after the long churn - before", "objects", "0"),
]
FIXED = {f.key: f for f in FIGURES}
TRANSFER_PREFIX = "transfer_"   # transfer_4KiB ... transfer_256MiB: one figure per size
CHAIN_PREFIX = "dispatch_chain_"   # dispatch_chain_1 ... dispatch_chain_1000: one per k
SERVE_PREFIX = "serve_"         # serve_1 ... serve_1024: one per level of concurrency


def transfer_figure(name: str) -> Figure:
    return Figure(TRANSFER_PREFIX + name, f"numpy -> device -> numpy, {name}", "GB/s",
                  f">= {SPEC_TRANSFER_RATIO:.0%} of C best path")


def chain_figure(k: int) -> Figure:
    return Figure(f"{CHAIN_PREFIX}{k}", f"{k:,} dependent dispatches in one sequence, "
                  "per dispatch (median)", "us",
                  f"<= {1 / SPEC_CHAIN_RATIO:.2f}x C ({SPEC_CHAIN_RATIO:.0%} of its rate), "
                  "<= CUDA graph")


def serve_goal(concurrency: int) -> str:
    parts = []
    if concurrency == SERVE_GOAL_AT:
        parts.append(f">= {SPEC_SERVE_RATE:,}/s")
    if concurrency == SERVE_LEVELS[-1]:
        parts.append(f">= the rate at {SERVE_LEVELS[1]}")
    if concurrency <= SERVE_P99_UP_TO:
        parts.append(f"p99 <= {SPEC_SERVE_P99:g}x p50")
    return "; ".join(parts)


def serve_figure(concurrency: int) -> Figure:
    return Figure(f"{SERVE_PREFIX}{concurrency}", "serving 16 KiB requests through aio, "
                  f"{concurrency:,} in flight", "1/s", serve_goal(concurrency))


# Figures of several rows, each group after the fixed figure it follows, in order of size.
GROUPS = {"latency": CHAIN_PREFIX, "download": TRANSFER_PREFIX, "tensor_churn": SERVE_PREFIX}


def _group_order(f: dict[str, Any]) -> float:
    return float(f.get("bytes") or f.get("k") or f.get("in_flight") or 0)


def figure_keys(results: dict[str, Any]) -> list[str]:
    """Fixed figures in their order; after `latency` the dispatch-chain figures, after
    `download` the per-size transfer figures, after `tensor_churn` the serve figures."""
    figs = results.get("figures", {})
    keys: list[str] = []
    for f in FIGURES:
        keys.append(f.key)
        prefix = GROUPS.get(f.key)
        if prefix:
            keys += sorted((k for k in figs if k.startswith(prefix)),
                           key=lambda k: _group_order(figs[k]))
    return keys


def notes(results: dict[str, Any]) -> list[str]:
    """Lines under the table for the figures of several rows: each serve level's
    latencies, RSS and live objects; CuPy's launches beside its graph."""
    out = []
    steal = results.get("meta", {}).get("cpu_steal_share")
    if steal is not None:
        out.append(f"host: its hypervisor took {steal:.1%} of the CPU time this machine's "
                   "processors wanted during the run (steal time, /proc/stat)")
    serve = results.get("details", {}).get("serve")
    if serve:
        for r in serve.get("levels", []):
            c = r.get("c") or {}
            rounds = [v for v in r.get("rounds_steal_share") or [] if v is not None]
            stolen = ("; steal " + ", ".join(f"{v:.1%}" for v in rounds) + " in its rounds"
                      if rounds else "")
            out.append(f"serve, {r['in_flight']:,} in flight: {r['requests']:,} requests, "
                       f"p50 {num(r['p50_us'])} us, p99 {num(r['p99_us'])} us "
                       f"(p99/p50 {num(r['p99_over_p50'])}), wrong results "
                       f"{r['wrong']}; C: p50 {num(c.get('p50_us'))} us, "
                       f"p99 {num(c.get('p99_us'))} us{stolen}")
        tuned = serve.get("gc_tuned")
        off = serve.get("gc_off") or []
        if tuned or off:
            parts = []
            if tuned:
                parts.append(f"{tuned['in_flight']:,} in flight with gc.set_threshold"
                             f"{tuple(tuned['threshold'])} {num(tuned['per_s'], '1/s')}/s")
            parts += [f"{r['in_flight']:,} in flight with the collector off "
                      f"{num(r['per_s'], '1/s')}/s" for r in off]
            parts += [f"{r['in_flight']:,} in flight after gc.freeze() "
                      f"{num(r['per_s'], '1/s')}/s" for r in serve.get("gc_frozen") or []]
            out.append("serve, the collector's part (not figures): " + "; ".join(parts))
        harness = serve.get("harness") or []
        if len(harness) == 2:
            lo, hi = harness
            c_rates = [(r.get("c") or {}).get("per_s") for r in serve.get("levels", [])
                       if r["in_flight"] in (lo["in_flight"], hi["in_flight"])]
            c_lo, c_hi = c_rates if len(c_rates) == 2 else (None, None)
            c_ratio = (f"; the C yardstick's {hi['in_flight']:,} against {lo['in_flight']:,}: "
                       f"{num(c_hi / c_lo)}" if c_lo and c_hi else "")
            out.append(f"serve, the harness alone (a task and one await a request, no "
                       f"scopedgpu call; not figures): {lo['in_flight']:,} in flight "
                       f"{num(lo['per_s'], '1/s')}/s, {hi['in_flight']:,} in flight "
                       f"{num(hi['per_s'], '1/s')}/s ({num(hi['per_s'] / lo['per_s'])} of "
                       f"{lo['in_flight']:,}; {hi['gc_share']:.0%} of the time in the "
                       f"collector){c_ratio}")
        rounds = serve.get("rss_rounds_mib") or []
        after = (" (after each round of the levels: "
                 + ", ".join(f"{v:+.1f}" for v in rounds) + ")") if rounds else ""
        out.append(f"serve: RSS {serve['rss_growth_mib']:+.1f} MiB over "
                   f"{serve['requests']:,} requests{after}; live objects "
                   + ("back to baseline" if not serve["live_delta"]
                      else f"changed: {serve['live_delta']}"))
    for key in figure_keys(results):
        f = results.get("figures", {}).get(key) or {}
        if key.startswith(CHAIN_PREFIX) and f.get("cupy_launch_us") is not None:
            out.append(f"dispatch chain, k = {f['k']:,}: CuPy {num(f['cupy_launch_us'])} us "
                       f"a launch, {num(f.get('cupy'))} us a kernel in a CUDA graph")
    return out


def num(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if unit == "1/s":
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 0.1 or v == 0:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for key in figure_keys(results):
        f = results["figures"].get(key)
        if f is None:
            d = FIXED[key]
            state = "error" if results.get("errors") else "-"
            rows.append((d.label, d.unit, state, "-", "-", d.goal, "-", "-", "-"))
            continue
        met = f["goal_met"]
        rows.append((f["label"], f["unit"], num(f["value"], f["unit"]),
                     num(f["yardstick"], f["unit"]),
                     "-" if f["ratio"] is None else f"{f['ratio']:.2f}", f["goal"],
                     "-" if met is None else ("yes" if met else "NO"),
                     num(f.get("cupy"), f["unit"]), f.get("c_path") or ""))
    return rows


HEAD = ("figure", "unit", "scopedgpu", "yardstick", "ratio", "goal", "met", "CuPy", "C path")


def table(results: dict[str, Any]) -> str:
    rows = [HEAD, *_rows(results)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    meta = results.get("meta", {})
    head = (f"scopedgpu bench on {meta.get('device')}{' (--quick)' if meta.get('quick') else ''}"
            f"\nyardstick: {meta.get('c_yardstick')}; CuPy: {meta.get('cupy') or 'not available'}")
    tail = []
    sax = results["figures"].get("saxpy") or {}
    if sax.get("roof_fraction"):
        tail.append(f"saxpy: {sax['roof_fraction']:.0%} of the copy roof "
                    f"({num(sax['copy_roof_gbps'])} GB/s, a C copy kernel with the same "
                    "access pattern)")
    st = results["figures"].get("stream_saxpy") or {}
    if st.get("c_queues"):
        tail.append(f"stream: C concurrent DMA on {st['c_queues']}; H2D alone "
                    f"{num(st.get('c_h2d_gbps'))} GB/s, D2H alone {num(st.get('c_d2h_gbps'))} GB/s")
    tail += notes(results)
    for note in results.get("details", {}).get("transfer_sweep_notes", []):
        tail.append(f"transfer sweep: {note}")
    if meta.get("device_type") == "cpu":
        tail.append("CPU device: absolute goals (per-second figures) are llvmpipe-bound; "
                    "the ratios are the goal here.")
    for k, v in results.get("errors", {}).items():
        tail.append(f"error in {k}: {v}")
    for k, v in results.get("notes", {}).items():
        tail.append(f"note, {k}: {v}")
    return "\n".join([head, *lines, *tail])


def markdown(results: dict[str, Any]) -> str:
    """The table as Markdown, for docs/benchmarks.md."""
    meta = results.get("meta", {})
    host = ""
    speed = meta.get("python_speed_ns")
    if speed is not None:
        end = meta.get("python_speed_ns_end")
        at_end = f", {end:.1f} at the end" if end is not None else ""
        host = (f" ({meta.get('cpu_model') or 'processor unknown'}; Python gauge "
                f"{speed:.1f} ns{at_end})")
    out = [f"Device: {meta.get('device')}; {meta.get('cpus')} CPUs{host}, Python "
           f"{meta.get('python')}, numpy {meta.get('numpy')}; C yardstick: "
           f"{'yes' if meta.get('c_device_name') else 'no'}; CuPy: {meta.get('cupy') or 'no'}; "
           f"{meta.get('time_utc')}; command: `{meta.get('command')}`", "",
           "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    out += ["| " + " | ".join(r) + " |" for r in _rows(results)]
    extra = notes(results)
    if extra:
        out += [""] + [f"- {line}" for line in extra]
    return "\n".join(out)
