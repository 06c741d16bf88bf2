"""`python -m scopedgpu info` and `demo`, run as a new user would, in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys

from scopedgpu import __main__ as sg_main, _settings

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


def test_bench_is_found_next_to_the_package_from_any_directory(tmp_path):
    # Not on the path through the working directory: found beside the imported package.
    root = os.path.dirname(os.path.dirname(os.path.abspath(sg_main.__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    res = run("bench", "--help", env={"PYTHONPATH": path}, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "plain-C Vulkan yardstick" in res.stdout


def test_bench_without_the_source_tree_says_where_it_is(monkeypatch, capsys):
    # What an installed wheel does: no `bench` package beside it, none on the path.
    monkeypatch.setattr(sg_main, "_bench_dirs", lambda: [])
    monkeypatch.delitem(sys.modules, "bench", raising=False)
    assert sg_main.main(["bench", "--quick"], prog="scopedgpu") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "ships with scopedgpu's source" in err and "python -m bench" in err
    assert "scopedgpu bench:" in err


def test_console_command_names_itself():
    # The `scopedgpu` console script calls scopedgpu.__main__:cli (pyproject.toml).
    code = "import sys; from scopedgpu.__main__ import cli; sys.argv[1:] = ['--help']; sys.exit(cli())"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: scopedgpu [-h] {info,demo,settings,bench}")


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
