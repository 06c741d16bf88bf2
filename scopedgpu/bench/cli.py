"""The bench's command line: what `scopedgpu bench` (`python -m scopedgpu bench`) hands its
arguments to; also `python -m scopedgpu.bench`, and `python -m bench` from a source
checkout (a shim)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from .report import markdown, table


WHAT = ("measure dispatch latency, chains of dependent dispatches, saxpy bandwidth, "
        "host<->device transfers (large, and every size from 4 KiB to 4 MiB), a streamed "
        "kernel, object churn, a request-serving workload through asyncio and memory "
        "growth, each next to a plain-C Vulkan yardstick run on the same device (and CuPy "
        "where present, in a process of its own)")
HELP = "measure the performance figures next to a plain-C Vulkan yardstick"


# The phases of the suite, in the order they run (suite.py's run()).
PHASES = ["latency", "dispatch chain", "saxpy", "transfers", "transfer sweep", "stream",
          "sequence churn", "tensor churn", "serve", "long churn"]


class OnlyAction(argparse.Action):
    """--only PHASE[,PHASE...], repeatable; an underscore stands for a space
    (`--only serve,dispatch_chain`). A name that is no phase is argparse's usage error."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        chosen = list(getattr(namespace, self.dest, None) or [])
        for name in str(values).split(","):
            phase = name.strip().replace("_", " ")
            if phase not in PHASES:
                parser.error(f"argument {option_string}: invalid choice: {name.strip()!r} "
                             f"(choose from {', '.join(map(repr, PHASES))})")
            if phase not in chosen:
                chosen.append(phase)
        setattr(namespace, self.dest, chosen)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="index or name substring")
    p.add_argument("--quick", action="store_true", help="small sizes and short runs (CI)")
    p.add_argument("--json", metavar="FILE", default=None, help="write all results as JSON")
    p.add_argument("--markdown", metavar="FILE", default=None,
                   help="write the table as Markdown (for docs/benchmarks.md)")
    p.add_argument("--plot", action="store_true",
                   help="with --json: also draw the curves next to it (scopedgpu.bench.plot)")
    p.add_argument("--cycles", type=int, default=None,
                   help="cycles of the long churn (default 1,000,000; --quick 3,000)")
    p.add_argument("--max-churn-seconds", type=float, default=150.0,
                   help="stop the long churn after this long (default 150)")
    p.add_argument("--stream-gib", type=float, default=None,
                   help="GiB of float32 input streamed through saxpy (default 16 on a GPU "
                        "whose host has 3x that in RAM, else less; 1/16 with --quick or "
                        "on a CPU device)")
    p.add_argument("--stream-chunk-mib", type=float, default=None,
                   help="chunk of the stream in MiB (default 8, Manager.stream's)")
    p.add_argument("--only", metavar="PHASE[,PHASE...]", action=OnlyAction, default=None,
                   help="run only these phases (repeatable; '_' for a space): "
                        + ", ".join(PHASES))
    p.add_argument("--no-c", action="store_true", help="skip the C yardstick")
    p.add_argument("--no-cupy", action="store_true", help="skip CuPy even if importable")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--multi-device", action="store_true",
                   help="instead: saxpy and transfer rates of every device at once against "
                        "one alone (scopedgpu.bench.multi_device; --device takes a list: 0,1)")


def parser(prog: str = "python -m scopedgpu.bench") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=WHAT[0].upper() + WHAT[1:] + ". The "
                                "goal column is scopedgpu's own target for each figure.")
    add_arguments(p)
    return p


def cmd_multi_device(args: argparse.Namespace) -> int:
    """--multi-device: the figures of several devices at once, measured by
    scopedgpu.bench.multi_device (one Manager per device, one thread each)."""
    cmd = [sys.executable, "-m", "scopedgpu.bench.multi_device",
           *(["--quick"] if args.quick else []),
           *(["--json", args.json] if args.json else []),
           *(["--devices", str(args.device)] if args.device is not None else [])]
    # The child imports scopedgpu: the same one as this process, installed or not.
    import scopedgpu
    env = dict(os.environ)
    pkg_parent = str(Path(scopedgpu.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    return subprocess.run(cmd, env=env).returncode


def cmd_bench(args: argparse.Namespace) -> int:
    if args.multi_device:
        return cmd_multi_device(args)
    if args.device is not None and str(args.device).isdigit():
        args.device = int(args.device)
    from .suite import Bench
    bench = Bench(args)
    try:
        results = bench.run()
    except Exception as exc:
        print(f"bench: cannot run: {type(exc).__name__}: {exc}", file=sys.stderr)
        results = bench.results
        results["errors"]["setup"] = f"{type(exc).__name__}: {exc}"
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str))
        return 1
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1, default=str))
        bench.p.say(f"wrote {path}")
        if args.plot:
            from . import plot
            plot.main([str(path)])
    if args.markdown:
        Path(args.markdown).write_text(markdown(results) + "\n")
    print(table(results))
    return 0 if not results["errors"] else 2


def main(argv: list[str] | None = None, prog: str = "python -m scopedgpu.bench") -> int:
    """Runs the bench with argv (default sys.argv[1:]); returns the exit status: 0 when
    every phase ran, 2 when one failed, 1 when nothing could run."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser(prog).parse_args(argv)
    args.command = " ".join([prog, *argv])
    return cmd_bench(args)
