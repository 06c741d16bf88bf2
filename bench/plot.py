"""Plots a `python -m scopedgpu bench --json FILE` result: transfer rate (upload and
download) and saxpy bandwidth against size, scopedgpu next to its yardsticks (C, CuPy).

    python bench/plot.py bench.json [-o docs/benchmarks.png]

Uses matplotlib when it is installed (PNG); without it, writes an SVG with the same
curves (pass -o name.svg, or the .png name is changed to .svg), so the script never fails
for want of a plotting library.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

MiB = 1 << 20


def series(data: dict) -> list[dict]:
    """Panels: title, x label, x values, and named y series (None where not measured)."""
    sw = data.get("sweeps", {})
    panels = []
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
    for p in panels:
        p["y"] = {k: v for k, v in p["y"].items() if any(e is not None for e in v)}
    return panels


def plot_matplotlib(panels: list[dict], title: str, out: Path) -> None:
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


def plot_svg(panels: list[dict], title: str, out: Path) -> None:
    w, h, pad = 420, 320, 50
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * len(panels)}" '
             f'height="{h + 30}" font-family="sans-serif" font-size="11">',
             f'<text x="10" y="15">{title}</text>']
    for i, p in enumerate(panels):
        ox = i * w
        xs = [math.log2(x) for x in p["x"]]
        ys = [y for v in p["y"].values() for y in v if y is not None] or [1.0]
        x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
        ymax = max(ys) * 1.1 or 1.0

        def px(x: float) -> float:
            return ox + pad + (math.log2(x) - x0) / (x1 - x0) * (w - 2 * pad)

        def py(y: float) -> float:
            return 30 + h - pad - y / ymax * (h - 2 * pad)
        parts.append(f'<text x="{ox + pad}" y="40">{p["title"]} ({p["ylabel"]} vs '
                     f'{p["xlabel"]}, log2 x)</text>')
        parts.append(f'<rect x="{ox + pad}" y="{30 + pad}" width="{w - 2 * pad}" '
                     f'height="{h - 2 * pad}" fill="none" stroke="#999"/>')
        parts.append(f'<text x="{ox + 5}" y="{py(ymax / 1.1) + 4:.0f}">{ymax / 1.1:.3g}</text>')
        for j, (name, v) in enumerate(p["y"].items()):
            pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(p["x"], v) if y is not None)
            c = colors[j % len(colors)]
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
            parts.append(f'<text x="{ox + pad + 5}" y="{30 + pad + 14 * (j + 1)}" fill="{c}">'
                         f'{name}</text>')
    parts.append("</svg>")
    out.write_text("\n".join(parts))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="the bench's --json output")
    ap.add_argument("-o", "--out", default=None, help="output file (default: JSON name .png)")
    a = ap.parse_args(argv)
    data = json.loads(Path(a.json).read_text())
    panels = series(data)
    if not panels:
        print("plot: the JSON has no sweeps to plot", file=sys.stderr)
        return 1
    meta = data.get("meta", {})
    title = f"scopedgpu bench on {meta.get('device_name', '?')}" + \
        (" (--quick)" if meta.get("quick") else "")
    out = Path(a.out) if a.out else Path(a.json).with_suffix(".png")
    if out.suffix != ".svg":
        try:
            plot_matplotlib(panels, title, out)
            print(f"wrote {out}")
            return 0
        except ImportError:
            out = out.with_suffix(".svg")
            print("plot: matplotlib is not installed; writing SVG instead", file=sys.stderr)
    plot_svg(panels, title, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
