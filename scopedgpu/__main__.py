"""`scopedgpu {info,demo,settings,compile,bench}` and `--version`, also
`python -m scopedgpu ...`.

Without a Vulkan device (or without the loader) each command prints one line saying what
is missing and exits with status 1; no traceback. `compile` needs no device: GLSL to
SPIR-V through compile_glsl (its compiler and its cache). `bench` runs the benchmark
suite, the subpackage scopedgpu.bench (`pip install 'scopedgpu[bench]'` adds its plots'
and memory figures' libraries), imported only when that sub-command runs."""
from __future__ import annotations

import argparse
import sys
import textwrap
import time
from pathlib import Path

import numpy as np


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def cmd_info(args: argparse.Namespace) -> int:
    """The loader, drivers, validation layer and GLSL compiler found (or what is missing
    and how to install it), then the devices as a table. Exit status 1 without a device."""
    from scopedgpu import _device, _diagnose
    print(_diagnose.header())
    checks, devs, error = _diagnose.environment()
    width = max(len(c.what) for c in checks)
    for c in checks:
        status = "ok" if c.ok else ("MISSING" if c.required else "missing")
        print(f"  {c.what.ljust(width)}  {status.ljust(7)}  {c.found}")
        if not c.ok and c.fix:
            print(f"  {''.ljust(width)}  {''.ljust(7)}  -> {c.fix}")
    print()
    if not devs:
        print(f"No Vulkan device: {error or 'see above'}. {_device.INSTALL_HINT}",
              file=sys.stderr)
        return 1
    default = _device.choose_device(devs, None)
    rows = [("", "#", "name", "type", "Vulkan", "driver", "memory", "max wg size",
             "max inv.", "subgroup", "f64", "f16", "i8", "timestamps")]
    for d in devs:
        rows.append(("*" if d.index == default.index else "", str(d.index), d.name,
                     d.type, d.api_version, d.driver[:40], _fmt_bytes(d.memory_bytes),
                     "x".join(map(str, d.max_workgroup_size)), str(d.max_workgroup_invocations),
                     str(d.subgroup_size), "yes" if d.float64 else "no",
                     "yes" if d.float16 else "no", "yes" if d.int8 else "no",
                     "yes" if d.timestamps else "no"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print("* default device (SCOPEDGPU_DEVICE overrides)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """A two-layer perceptron over a batch, on the GPU, checked against numpy: two
    dispatches of one shader specialised two ways, an OpMult, and the transfers."""
    import scopedgpu as sg
    from scopedgpu._shaders import builtin_spirv

    rng = np.random.default_rng(0)
    batch, n_in, n_hidden, n_out = args.batch, 256, 512, 64
    x = rng.standard_normal((batch, n_in), dtype=np.float32)
    w1 = rng.standard_normal((n_hidden, n_in), dtype=np.float32) / np.float32(np.sqrt(n_in))
    b1 = rng.standard_normal(n_hidden, dtype=np.float32)
    w2 = rng.standard_normal((n_out, n_hidden), dtype=np.float32) / np.float32(np.sqrt(n_hidden))
    b2 = rng.standard_normal(n_out, dtype=np.float32)
    gate = rng.random((batch, n_out), dtype=np.float32)
    assert all(a.dtype == np.float32 for a in (x, w1, b1, w2, b2, gate))

    spirv = builtin_spirv("demo_linear")
    with sg.Manager(args.device) as mgr:
        print(f"device: {mgr.device}")
        tx, tw1, tb1, tw2, tb2, tgate = (mgr.tensor(a) for a in (x, w1, b1, w2, b2, gate))
        h = mgr.empty((batch, n_hidden), kind="storage")
        y = mgr.empty((batch, n_out))
        out = mgr.empty((batch, n_out))
        groups = lambda rows: ((rows * batch + 63) // 64, 1, 1)  # local size 64
        layer1 = mgr.algorithm([tx, tw1, tb1, h], spirv, groups(n_hidden), spec_consts=[1],
                               push_consts=np.array([n_hidden, n_in, batch], dtype=np.uint32))
        layer2 = mgr.algorithm([h, tw2, tb2, y], spirv, groups(n_out), spec_consts=[0],
                               push_consts=np.array([n_out, n_hidden, batch], dtype=np.uint32))
        t0 = time.perf_counter()
        with mgr.sequence(timestamps=mgr.device.timestamps) as seq:
            seq.record(sg.OpTensorSyncDevice([tx, tw1, tb1, tw2, tb2, tgate]))
            seq.record(sg.OpAlgoDispatch(layer1))
            seq.record(sg.OpAlgoDispatch(layer2))
            seq.record(sg.OpMult([y, tgate, out]))
            seq.record(sg.OpTensorSyncLocal([y, out]))
            seq.eval()
            wall = time.perf_counter() - t0
            stamps = seq.timestamps() if mgr.device.timestamps else []
        hidden = np.maximum(x @ w1.T + b1, 0)
        ref_y = hidden @ w2.T + b2
        ref = ref_y * gate
        err = float(np.max(np.abs(out.data() - ref)) / max(1e-6, float(np.max(np.abs(ref)))))
        ok = np.allclose(y.data(), ref_y, rtol=1e-4, atol=1e-4) and np.allclose(
            out.data(), ref, rtol=1e-4, atol=1e-4)
        flops = 2 * batch * (n_in * n_hidden + n_hidden * n_out)
        print(f"workload: 2-layer perceptron, batch {batch}, {n_in}->{n_hidden}->{n_out}, "
              f"then an elementwise gate ({flops / 1e6:.1f} MFLOP)")
        print(f"first evaluation: {wall * 1e3:.2f} ms wall")
        if stamps:
            names = ["upload", "layer 1", "layer 2", "gate", "download"]
            parts = ", ".join(f"{n} {(b - a) / 1e3:.1f} us" for n, a, b in
                              zip(names, stamps, stamps[1:]))
            print(f"GPU timestamps: {parts}")
        print(f"output[0, :4] = {np.array2string(out.data()[0, :4], precision=4)}")
        print(f"numpy [0, :4] = {np.array2string(ref[0, :4], precision=4)}")
        print(f"max relative error vs numpy: {err:.2e}")
        live = mgr.live_objects()
        print(f"live objects: {live['tensors']} tensors, {live['algorithms']} algorithms, "
              f"{live['sequences']} sequences")
    print("result matches numpy: " + ("OK" if ok else "MISMATCH"))
    return 0 if ok else 1


def cmd_settings(args: argparse.Namespace) -> int:
    """Every SCOPEDGPU_* variable: its value now, and whether it came from the environment
    or is the default (docs/settings.md says what each does). Exit status 1 when one is
    set to a value scopedgpu refuses (each such error printed on stderr)."""
    from scopedgpu import _settings
    if args.markdown:
        print(_settings.markdown_table(), end="")
        return 0
    rows = [("variable", "value", "from", "takes", "")]
    errors = []
    for s in _settings.SETTINGS.values():
        raw = _settings.raw(s.name)
        source = "default" if raw is None or not raw.strip() else "environment"
        try:
            value = _settings.show(s.read()) if source == "environment" or \
                s.default is not None else s.shown
        except ValueError as exc:
            value = f"{raw!r} (INVALID)"
            errors.append(str(exc))
        rows.append((s.name, value, source, s.kind, s.meaning))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.replace("`", "").ljust(w) for c, w in zip(r, widths)).rstrip())
        if r[4]:
            print(textwrap.fill(r[4].replace("`", ""), 96, initial_indent="    ",
                                subsequent_indent="    "))
    print("More on each: docs/settings.md (`--markdown` prints its table).")
    for e in errors:
        print(f"{args.prog} settings: {e}", file=sys.stderr)
    return 1 if errors else 0


def _defines(items: list[str]) -> dict[str, str | None]:
    """-D NAME=VALUE / -D NAME (argparse's list) as compile_glsl's defines."""
    out: dict[str, str | None] = {}
    for item in items:
        name, eq, value = item.partition("=")
        out[name] = value if eq else None
    return out


def cmd_compile(args: argparse.Namespace) -> int:
    """GLSL to SPIR-V through scopedgpu.compile_glsl: the same compiler, flags (Vulkan
    1.1 target) and on-disk cache, so the file holds exactly what compile_glsl returns
    for that source and those defines. Exit status 1, with the reason on stderr, when the
    source cannot be read, the compiler fails (its message, with the file's name for
    `shader.comp`), none is installed (how to get one) or the output cannot be written."""
    from scopedgpu._errors import ShaderError
    from scopedgpu.glsl import compile_glsl
    src = Path(args.file)
    out = Path(args.output) if args.output else src.with_suffix(".spv")
    where = f"{args.prog} compile"
    if out.resolve() == src.resolve():
        print(f"{where}: the output {out} would overwrite the source; give -o", file=sys.stderr)
        return 1
    try:
        source = src.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"{where}: cannot read {src}: {exc}", file=sys.stderr)
        return 1
    try:
        spirv = compile_glsl(source, defines=_defines(args.define))
    except ShaderError as exc:
        print(f"{where}: {src}: {str(exc).replace('shader.comp:', f'{src}:')}",
              file=sys.stderr)
        return 1
    try:
        out.write_bytes(spirv)
    except OSError as exc:
        print(f"{where}: cannot write {out}: {exc}", file=sys.stderr)
        return 1
    return 0


BENCH_HELP = "measure the performance figures next to a plain-C Vulkan yardstick"


def cmd_bench(argv: list[str], prog: str) -> int:
    """Hands argv to the benchmark suite, scopedgpu.bench (imported here only: nothing else
    in the library imports it). Its exit status: 0, 2 when a phase failed, 1 when nothing
    could run."""
    from scopedgpu.bench import cli
    return int(cli.main(argv, prog=f"{prog} bench"))


def make_parser(prog: str) -> argparse.ArgumentParser:
    """The command line of every sub-command but `bench` (whose options are
    scopedgpu.bench's own: main() hands them over before parsing)."""
    from scopedgpu._version import __version__
    parser = argparse.ArgumentParser(prog=prog,
                                     description="scopedgpu: GPU compute on any Vulkan device")
    parser.add_argument("--version", action="version", version=f"scopedgpu {__version__}",
                        help="print scopedgpu's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="check the Vulkan setup and list the devices")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("demo", help="run a real workload on the default device, checked "
                                    "against numpy")
    p.add_argument("--device", default=None,
                   help="the device's index or a substring of its name (`info` lists "
                        "them); default: SCOPEDGPU_DEVICE, else the best device")
    p.add_argument("--batch", type=int, default=256, metavar="N",
                   help="rows in the input batch (default: %(default)s)")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("settings", help="show every SCOPEDGPU_* environment variable: its "
                                        "value and whether it came from the environment")
    p.add_argument("--markdown", action="store_true",
                   help="print the table of docs/settings.md instead")
    p.set_defaults(func=cmd_settings, prog=prog)
    p = sub.add_parser("compile", help="compile a GLSL compute shader to SPIR-V (the "
                                       "compiler and cache of scopedgpu.compile_glsl)",
                       description="Compiles FILE (GLSL 450, a compute shader) to SPIR-V "
                                   "for Vulkan 1.1 through scopedgpu.compile_glsl: the same "
                                   "compiler (glslc, else glslangValidator) and the same "
                                   "on-disk cache, so the output is what compile_glsl "
                                   "returns for that source and those defines.")
    p.add_argument("file", metavar="FILE", help="the GLSL source (e.g. shader.comp)")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="where to write the SPIR-V (default: FILE with the suffix .spv)")
    p.add_argument("-D", "--define", action="append", default=[], metavar="NAME[=VALUE]",
                   help="a preprocessor macro, as compile_glsl's defines={NAME: VALUE} "
                        "(repeatable)")
    p.set_defaults(func=cmd_compile, prog=prog)
    # `bench` is handled above; this entry is for the command list of --help.
    sub.add_parser("bench", help=BENCH_HELP, add_help=False)
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m scopedgpu") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        return cmd_bench(argv[1:], prog)
    args = make_parser(prog).parse_args(argv)
    from scopedgpu._errors import NoDeviceError
    from scopedgpu._settings import device_spec
    if getattr(args, "device", None) is not None:
        args.device = device_spec(args.device)
    try:
        return int(args.func(args))
    except NoDeviceError as exc:
        print(f"{prog} {args.command}: no Vulkan device: {exc}", file=sys.stderr)
        return 1


def cli(prog: str = "scopedgpu") -> int:
    """The `scopedgpu` console command (and `python -m scopedgpu`)."""
    try:
        return main(prog=prog)
    except ImportError as exc:  # the compiled extension is missing or does not load
        print(f"scopedgpu: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(cli("python -m scopedgpu"))
