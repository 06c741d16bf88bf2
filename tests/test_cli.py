"""`python -m scopedgpu` (info, demo, settings, compile, bench, --version), run as a new
user would, in a subprocess."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu import __main__ as sg_main, _settings
from tests.conftest import needs_glsl_compiler

LVP = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"


def run(*args: str, env: dict[str, str] | None = None,
        cwd: str | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "scopedgpu", *args], capture_output=True,
                          text=True, env=full, timeout=300, cwd=cwd)


def test_info_reports_everything_found():
    res = run("info")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for what in ("Vulkan loader", "Vulkan driver", "Validation layer", "GLSL compiler"):
        assert what in out
    assert "MISSING" not in out
    loader = next(ln for ln in out.splitlines() if "Vulkan loader" in ln)
    assert "libvulkan.so" in loader or "libvulkan.1." in loader, loader  # not a driver's .so
    assert "* default device" in out
    assert "max wg size" in out


def test_info_says_what_is_missing_and_how_to_install_it():
    # Hide the validation layer (XDG_DATA_DIRS) and glslc (PATH); keep lavapipe.
    env = {"PATH": "/nonexistent", "XDG_DATA_DIRS": "/nonexistent"}
    if os.path.exists(LVP):
        env["VK_ICD_FILENAMES"] = LVP
    res = run("info", env=env)
    out = res.stdout
    assert "Validation layer  missing" in out
    assert "apt-get install vulkan-validationlayers" in out
    assert "GLSL compiler     missing" in out
    assert "apt-get install glslc" in out


def test_info_without_a_driver_fails_and_says_what_to_install():
    res = run("info", env={"VK_ICD_FILENAMES": "/nonexistent/icd.json",
                           "VK_DRIVER_FILES": "/nonexistent/icd.json"})
    assert res.returncode == 1
    assert "Vulkan driver     MISSING" in res.stdout
    assert "mesa-vulkan-drivers" in res.stdout
    assert "No Vulkan device" in res.stderr


def test_demo_matches_numpy():
    res = run("demo", "--batch", "8")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "result matches numpy: OK" in res.stdout


def test_info_without_a_loader_fails_and_names_the_file():
    res = run("info", env={"SCOPEDGPU_VULKAN_LIBRARY": "/nonexistent/libvulkan.so.1"})
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    loader = next(ln for ln in res.stdout.splitlines() if "Vulkan loader" in ln)
    assert "MISSING" in loader and "/nonexistent/libvulkan.so.1" in loader, loader
    assert "apt-get install libvulkan1" in res.stdout
    assert "No Vulkan device" in res.stderr


def test_demo_without_a_loader_prints_one_line():
    res = run("demo", env={"SCOPEDGPU_VULKAN_LIBRARY": "/nonexistent/libvulkan.so.1"})
    assert res.returncode == 1
    assert res.stdout == ""
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("python -m scopedgpu demo: no Vulkan device: the Vulkan "
                                 "loader could not be loaded (/nonexistent/libvulkan.so.1")


def test_bench_help_stands_on_its_own():
    res = run("bench", "--help")
    assert res.returncode == 0
    assert "SPEC" not in res.stdout
    assert "plain-C Vulkan yardstick" in res.stdout
    assert res.stdout.startswith("usage: python -m scopedgpu bench")


def test_bench_is_the_packages_own_from_any_directory(tmp_path):
    # scopedgpu.bench, wherever the command runs: a `bench` package in the working
    # directory (the name the suite had at the top of the source tree) is never imported.
    decoy = tmp_path / "bench"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise SystemExit('the top-level bench was imported')\n")
    (decoy / "yardstick.c").write_text("")
    root = os.path.dirname(os.path.dirname(os.path.abspath(sg_main.__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    res = run("bench", "--help", env={"PYTHONPATH": path}, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: python -m scopedgpu bench")
    assert "plain-C Vulkan yardstick" in res.stdout and "--only" in res.stdout
    probe = ("import sys\nfrom scopedgpu.__main__ import main\n"
             "try:\n    main(['bench', '--help'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'bench'),"
             " sys.modules['scopedgpu.bench'].__file__)\n")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=path))
    assert res.returncode == 0, res.stderr
    top, where = res.stdout.splitlines()[-1].split()   # after the help text
    assert top == "[]"
    assert where == os.path.join(root, "scopedgpu", "bench", "__init__.py")


def test_bench_options_are_the_suites_own(capsys):
    # main() hands bench's arguments over before parsing: the suite's parser answers, with
    # its usage errors (status 2) and the command's name; its help line is the suite's.
    from scopedgpu.bench import cli
    assert sg_main.BENCH_HELP == cli.HELP
    with pytest.raises(SystemExit) as exc:
        sg_main.main(["bench", "--only", "saxpyy"], prog="scopedgpu")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: scopedgpu bench ") and "invalid choice: 'saxpyy'" in err


def test_console_command_names_itself():
    # The `scopedgpu` console script calls scopedgpu.__main__:cli (pyproject.toml).
    code = "import sys; from scopedgpu.__main__ import cli; sys.argv[1:] = ['--help']; sys.exit(cli())"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: scopedgpu [-h] [--version] "
                                 "{info,demo,settings,compile,bench}")


def test_settings_shows_each_variable_its_value_and_where_it_came_from():
    blank = dict.fromkeys(_settings.SETTINGS, "")    # whatever the suite's environment holds
    ok = run("settings", env=dict(blank, SCOPEDGPU_QUEUES=" 3", SCOPEDGPU_WAIT_TIMEOUT="0.5"))
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr
    rows = {ln.split()[0]: ln.split()[1:3] for ln in ok.stdout.splitlines()
            if ln.startswith("SCOPEDGPU_")}
    assert rows["SCOPEDGPU_QUEUES"] == ["3", "environment"]
    assert rows["SCOPEDGPU_WAIT_TIMEOUT"] == ["0.5", "environment"]
    assert rows["SCOPEDGPU_DEBUG"] == ["off", "default"]      # blank is the default
    assert rows["SCOPEDGPU_STREAM_HOST"] == ["stage", "default"]
    assert len(rows) == 12 and "docs/settings.md" in ok.stdout
    bad = run("settings", env=dict(blank, SCOPEDGPU_STREAM_TRACE="0n"))
    assert bad.returncode == 1
    trace = next(ln for ln in bad.stdout.splitlines() if ln.startswith("SCOPEDGPU_STREAM_TRACE"))
    assert trace.split()[1:4] == ["'0n'", "(INVALID)", "environment"], trace
    assert bad.stderr == ("python -m scopedgpu settings: SCOPEDGPU_STREAM_TRACE='0n': "
                          "expected 1, true, yes, on (on) or 0, false, no, off (off), or "
                          "empty for the default\n")
    assert "settings" in run("--help").stdout
    table = run("settings", "--markdown").stdout
    assert table.startswith("| variable | takes | default |") and table.count("\n") == 14


def test_version_from_the_module_and_the_console_command():
    res = run("--version")
    assert (res.returncode, res.stdout, res.stderr) == (0, f"scopedgpu {sg.__version__}\n", "")
    code = ("import sys; from scopedgpu.__main__ import cli; sys.argv[1:] = ['--version']; "
            "sys.exit(cli())")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stdout) == (0, f"scopedgpu {sg.__version__}\n"), res.stderr


def test_every_sub_command_and_option_has_help():
    parser = sg_main.make_parser("scopedgpu")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    listed = {c.dest: c.help for c in sub._choices_actions}
    assert set(listed) == set(sub.choices) == {"info", "demo", "settings", "compile", "bench"}
    missing = [name for name, text in listed.items() if not text]
    for name, p in [("", parser), *sub.choices.items()]:
        missing += [f"{name} {a.option_strings or a.dest}" for a in p._actions
                    if not a.help and not isinstance(a, argparse._SubParsersAction)]
    assert not missing, missing
    # ...as a user sees it: the option and its text on one line
    batch = next(ln for ln in run("demo", "--help").stdout.splitlines()
                 if ln.lstrip().startswith("--batch"))
    assert "rows in the input batch (default: 256)" in batch, batch


SCALE = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer Data { float x[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
#ifdef DOUBLE_IT
    if (i < x.length()) x[i] = 2.0 * (x[i] + OFFSET);
#else
    if (i < x.length()) x[i] = x[i] + OFFSET;
#endif
}
"""


def no_compiler(code: str) -> str:
    """Python for a child that finds no GLSL compiler whatever is installed (PATH is
    emptied by the caller; this hides the `glsl` extra's wheel too)."""
    return ("import sys, scopedgpu.glsl as g; g._wheel_glslang = lambda: None\n"
            "from scopedgpu.__main__ import cli\n" + code)


@needs_glsl_compiler("the source is written at run time: no compile cache holds it")
def test_compile_writes_what_compile_glsl_returns_through_its_cache(mgr, tmp_path, monkeypatch):
    src = tmp_path / "scale.comp"
    src.write_text(SCALE)
    cache = tmp_path / "cache"
    res = run("compile", str(src), "-D", "OFFSET=1.5", "-DDOUBLE_IT", "-o",
              str(tmp_path / "out.spv"), env={"SCOPEDGPU_CACHE_DIR": str(cache)})
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    spirv = (tmp_path / "out.spv").read_bytes()
    assert len(list((cache / "spirv").iterdir())) == 1
    # The same cache entry: compile_glsl with no compiler to be found returns it.
    monkeypatch.setenv("SCOPEDGPU_CACHE_DIR", str(cache))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("scopedgpu.glsl._wheel_glslang", lambda: None)
    assert sg.compile_glsl(SCALE, defines={"OFFSET": 1.5, "DOUBLE_IT": None}) == spirv
    # ...and the defines reached the compiler: run it.
    x = np.arange(100, dtype=np.float32)
    with mgr.tensor(x) as t, mgr.algorithm([t], spirv, (2, 1, 1)) as algo:
        mgr.sequence().record(sg.OpTensorSyncDevice([t])).record(
            sg.OpAlgoDispatch(algo)).record(sg.OpTensorSyncLocal([t])).eval().destroy()
        np.testing.assert_array_equal(t.data(), 2 * (x + 1.5))
    # Without -o: beside the source, and the cache needs no compiler now.
    res = subprocess.run([sys.executable, "-c", no_compiler(
        f"sys.argv[1:] = ['compile', {str(src)!r}, '-D', 'OFFSET=1.5', '-D', 'DOUBLE_IT']\n"
        "sys.exit(cli())")], capture_output=True, text=True, timeout=120,
        env=dict(os.environ, SCOPEDGPU_CACHE_DIR=str(cache), PATH="/nonexistent"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "scale.spv").read_bytes() == spirv


@needs_glsl_compiler("a compile error is never cached")
def test_compile_error_exits_1_with_the_compilers_message(tmp_path):
    src = tmp_path / "bad.comp"
    src.write_text("#version 450\nlayout(local_size_x = 1) in;\nvoid main() { int x = ; }\n")
    res = run("compile", str(src), "-o", str(tmp_path / "bad.spv"),
              env={"SCOPEDGPU_CACHE_DIR": str(tmp_path / "cache")})
    assert res.returncode == 1 and res.stdout == ""
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith(f"python -m scopedgpu compile: {src}: GLSL compilation failed")
    assert f"{src}:3:" in res.stderr and "error" in res.stderr   # the file, not shader.comp
    assert "void main() { int x = ; }" in res.stderr
    assert not (tmp_path / "bad.spv").exists()


def test_compile_without_a_compiler_says_how_to_install_one(tmp_path):
    src = tmp_path / "k.comp"
    src.write_text(SCALE)
    res = subprocess.run([sys.executable, "-c", no_compiler(
        f"sys.argv[1:] = ['compile', {str(src)!r}, '-D', 'OFFSET=1']\nsys.exit(cli('scopedgpu'))")],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, SCOPEDGPU_CACHE_DIR=str(tmp_path / "cache"), PATH="/nonexistent"))
    assert res.returncode == 1 and res.stdout == "", res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"scopedgpu compile: {src}: no GLSL compiler found")
    assert "pip install scopedgpu[glsl]" in res.stderr and "apt-get install glslc" in res.stderr
    assert not Path(tmp_path / "k.spv").exists()
    missing = run("compile", str(tmp_path / "absent.comp"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr, missing.stderr
