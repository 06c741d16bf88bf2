"""Plots a `scopedgpu bench --json FILE` result (`python -m scopedgpu bench`): transfer
rate (upload and download) and saxpy bandwidth against size, scopedgpu next to its
yardsticks (C, CuPy); and, next to the JSON (NAME.transfers.png), the round trip numpy ->
device -> numpy from 4 KiB up: scopedgpu against the C yardstick's best path at each size
(and each C path).

    python -m scopedgpu.bench.plot bench.json [-o docs/benchmarks.png]

Draws with matplotlib, the `[bench]` extra (`pip install 'scopedgpu[bench]'`, or
`pip install matplotlib`). Without it, the script says so and writes no plot (exit status
1; `bench --plot` still writes its JSON and table).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

MiB = 1 << 20
KiB = 1 << 10
Panel = dict[str, Any]   # title, xlabel, ylabel, x (values), y (name -> values or None)


def series(data: dict[str, Any]) -> list[Panel]:
    """Panels: title, x label, x values, and named y series (None where not measured)."""
    sw = data.get("sweeps", {})
    panels: list[Panel] = []
    tr = sw.get("transfer", [])
    if tr:
        x = [r["bytes"] / MiB for r in tr]
        for d in ("upload", "download"):
            panels.append({
                "title": f"{d}: numpy host copy {'->' if d == 'upload' else '<-'} device",
                "xlabel": "MiB", "ylabel": "GB/s", "x": x,
                "y": {"scopedgpu": [r.get(f"{d}_gbps") for r in tr],
                      "C DMA (pinned staging)": [r.get(f"c_{d}_gbps") for r in tr],
                      "CuPy (pageable)": [r.get(f"cupy_{d}_gbps") for r in tr]}})
    sx = sw.get("saxpy", [])
    if sx:
        panels.append({
            "title": "saxpy float32, data resident", "xlabel": "elements", "ylabel": "GB/s",
            "x": [r["n"] for r in sx],
            "y": {"scopedgpu": [r.get("scopedgpu_gbps") for r in sx],
                  "C (same SPIR-V)": [r.get("c_gbps") for r in sx],
                  "CuPy": [r.get("cupy_gbps") for r in sx]}})
    return [_drop_empty(p) for p in panels]


def sweep_series(data: dict[str, Any]) -> list[Panel]:
    """The round-trip size sweep (sweeps.transfer_sizes): GB/s against KiB, log2 x."""
    rows = data.get("sweeps", {}).get("transfer_sizes", [])
    if not rows:
        return []
    y: dict[str, list[Any]] = {
        "scopedgpu": [r.get("scopedgpu_gbps") for r in rows],
        "C best path": [r.get("c_best_gbps") for r in rows]}
    for path in ("staging", "rebar", "import", "import_each"):
        y[f"C {path}"] = [r.get(f"c_{path}_gbps") for r in rows]
    return [_drop_empty({
        "title": "numpy -> device -> numpy round trip (2 x bytes / time)", "xlabel": "KiB",
        "ylabel": "GB/s", "x": [r["bytes"] / KiB for r in rows], "y": y})]


def _drop_empty(p: Panel) -> Panel:
    p["y"] = {k: v for k, v in p["y"].items() if any(e is not None for e in v)}
    return p


def draw(panels: list[Panel], title: str, out: Path) -> Path:
    """Draws the panels side by side into `out` (its suffix picks the format: .png, .svg,
    .pdf...); returns `out`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, p in zip(axes[0], panels):
        for name, ys in p["y"].items():
            pts = [(x, y) for x, y in zip(p["x"], ys) if y is not None]
            ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_title(p["title"], fontsize=10)
        ax.set_xlabel(p["xlabel"])
        ax.set_ylabel(p["ylabel"])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


NO_MATPLOTLIB = ("plot: matplotlib is not installed, so no plot was written "
                 "(pip install 'scopedgpu[bench]', or pip install matplotlib)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("json", help="the bench's --json output")
    ap.add_argument("-o", "--out", default=None, help="output file (default: JSON name .png)")
    a = ap.parse_args(argv)
    if importlib.util.find_spec("matplotlib") is None:
        print(NO_MATPLOTLIB, file=sys.stderr)
        return 1
    data = json.loads(Path(a.json).read_text())
    panels = series(data)
    sweep = sweep_series(data)
    if not panels and not sweep:
        print("plot: the JSON has no sweeps to plot", file=sys.stderr)
        return 1
    meta = data.get("meta", {})
    title = f"scopedgpu bench on {meta.get('device_name', '?')}" + \
        (" (--quick)" if meta.get("quick") else "")
    out = Path(a.out) if a.out else Path(a.json).with_suffix(".png")
    if panels:
        print(f"wrote {draw(panels, title, out)}")
    if sweep:
        # next to the JSON: NAME.transfers.png (the main plot's format)
        side = Path(a.json).with_suffix(".transfers" + (out.suffix or ".png"))
        print(f"wrote {draw(sweep, title, side)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
