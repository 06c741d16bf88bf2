"""The settings (scopedgpu/_settings.py): docs/settings.md's table is the one the module
generates, every SCOPEDGPU_ variable the package names is in it, each type has one parser
(every boolean spelling; a bad value's message names the variable, its value and what it
takes), and the variables have their documented effect on real managers and streams."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import scopedgpu as sg
import scopedgpu.stream as sst
from scopedgpu import _settings
from scopedgpu._shaders import builtin_spirv
from scopedgpu.manager import live_vulkan_objects
from scopedgpu.testing import leak_checked_manager

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_MD = ROOT / "docs" / "settings.md"
FLAGS = [s.name for s in _settings.SETTINGS.values() if s.parse is _settings.flag]
SAXPY = builtin_spirv("saxpy")      # binding 0: x, binding 1: y; y = a * x + y


@pytest.fixture
def clean_env(monkeypatch):
    """No SCOPEDGPU_ variable of the table set (the debug pass sets SCOPEDGPU_DEBUG)."""
    for name in _settings.SETTINGS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def generated_part(text: str) -> str:
    """The table between docs/settings.md's generated-table comments."""
    start = text.index("-->\n", text.index("<!-- The table below is generated")) + 4
    end = text.index("<!-- end of the generated table -->")
    return text[start:end].strip("\n") + "\n"


def test_the_docs_table_is_the_one_the_module_generates():
    assert generated_part(SETTINGS_MD.read_text()) == _settings.markdown_table(), \
        "docs/settings.md is out of date: paste `python -m scopedgpu settings --markdown` " \
        "between its generated-table comments"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_each_variable_links_a_section_that_exists():
    for s in _settings.SETTINGS.values():
        page, _, anchor = s.more.partition("#")
        text = (ROOT / "docs" / page).read_text()
        anchors = {_slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}
        assert anchor in anchors, f"{s.name}: docs/{page} has no section #{anchor}"


def test_every_variable_the_package_or_the_docs_name_is_in_a_table():
    """In the package: the settings table. In README and docs/: that table, or the test
    profiles of docs/settings.md (variables of tests/ only)."""
    pattern = re.compile(r"SCOPEDGPU_[A-Z][A-Z_]*[A-Z]")
    in_package = {n for p in (ROOT / "scopedgpu").glob("*.py")
                  for n in pattern.findall(p.read_text())}
    assert in_package == set(_settings.SETTINGS)
    text = SETTINGS_MD.read_text()
    profiles = set(pattern.findall(text.split("## Test profiles")[1]))
    assert len(profiles) == 9 and not profiles & set(_settings.SETTINGS)
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named = set(pattern.findall(doc.read_text()))
        assert named <= set(_settings.SETTINGS) | profiles, (doc.name, named)


@pytest.mark.parametrize("name", FLAGS)
def test_every_boolean_spelling(clean_env, name):
    for word, value in [(w, True) for w in _settings.TRUE] + [(w, False) for w in _settings.FALSE]:
        for spelling in (word, word.upper(), f" {word.title()}\n"):
            clean_env.setenv(name, spelling)
            assert _settings.get(name) is value, (name, spelling)
    for blank in ("", "  "):
        clean_env.setenv(name, blank)
        assert _settings.get(name) is _settings.default(name)
    clean_env.setenv(name, "maybe")
    with pytest.raises(ValueError) as bad:
        _settings.get(name)
    assert str(bad.value) == (f"{name}='maybe': expected 1, true, yes, on (on) or 0, false, "
                              "no, off (off), or empty for the default")


BAD = {"SCOPEDGPU_DEBUG": "2", "SCOPEDGPU_SPIRV_VALIDATOR": "disabled",
       "SCOPEDGPU_STREAM_TRACE": "-", "SCOPEDGPU_QUEUES": "0", "SCOPEDGPU_WAIT_TIMEOUT": "nan",
       "SCOPEDGPU_MEMORY_LIMIT": "2GB", "SCOPEDGPU_STREAM_HOST": "pin",
       "SCOPEDGPU_HOST_BLOCKS": "malloc"}
GOOD = {"SCOPEDGPU_QUEUES": ("64", 64), "SCOPEDGPU_WAIT_TIMEOUT": (" 0.5", 0.5),
        "SCOPEDGPU_MEMORY_LIMIT": ("1e9", 10**9), "SCOPEDGPU_STREAM_HOST": ("Import", "import"),
        "SCOPEDGPU_HOST_BLOCKS": ("driver", "driver"), "SCOPEDGPU_DEVICE": (" 1 ", 1),
        "SCOPEDGPU_CACHE_DIR": ("/tmp/sg cache", "/tmp/sg cache"),
        "SCOPEDGPU_VULKAN_LIBRARY": ("libvulkan.so.1", "libvulkan.so.1"),
        "SCOPEDGPU_SPIRV_TOOLS_LIBRARY": ("x.so", "x.so")}


@pytest.mark.parametrize("name", sorted(_settings.SETTINGS))
def test_each_default_and_each_bad_value(clean_env, name):
    """Unset and blank give the documented default; a good value is parsed, a bad one is
    a ValueError naming the variable and its value."""
    s = _settings.lookup(name)
    assert _settings.get(name) == s.default
    if s.default is not None:     # the docs table shows this very value
        assert s.shown.strip("`") == _settings.show(s.default)
    clean_env.setenv(name, " ")
    assert _settings.get(name) == s.default
    if name in GOOD:
        clean_env.setenv(name, GOOD[name][0])
        assert _settings.get(name) == GOOD[name][1]
    assert (name in BAD) == (s.parse not in (_settings._text, _settings._device))
    if name in BAD:
        clean_env.setenv(name, BAD[name])
        with pytest.raises(ValueError, match=re.escape(f"{name}") + ".*" +
                           re.escape(repr(BAD[name]))):
            _settings.get(name)


def test_manager_defaults(clean_env):
    with leak_checked_manager(debug=None) as m:
        assert m.debug is False
        assert m.wait_timeout == 10.0
        assert m.queue_count == min(8, m.device.queue_count)
        assert m.memory_stats()["memory_limit"] == 0
    assert sg.glsl.cache_dir().name == "scopedgpu"


def test_stream_trace_zero_means_off(clean_env, mgr):
    """SCOPEDGPU_STREAM_TRACE=0 once turned tracing on (any non-empty value did)."""
    traces = []
    run = sst.Streamer.run

    def traced_run(self):
        run(self)
        traces.append(self.trace)

    clean_env.setattr(sst.Streamer, "run", traced_run)
    x = np.arange(1000, dtype=np.float32)
    for value in ("1", "0", "off", None, "ON"):
        if value is None:
            clean_env.delenv("SCOPEDGPU_STREAM_TRACE")
        else:
            clean_env.setenv("SCOPEDGPU_STREAM_TRACE", value)
        y = np.ones(1000, np.float32)
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[2.0], chunk_bytes=1024)
        np.testing.assert_array_equal(y, 2 * x + 1)
    on = traces[0]
    assert [type(t).__name__ for t in traces] == ["list", "NoneType", "NoneType",
                                                  "NoneType", "list"]
    assert {c for c, _, _ in on} == set(range(4))      # 4000 bytes in chunks of 1024
    assert {p for _, p, _ in on} >= {"up", "kernel", "down"}
    clean_env.setenv("SCOPEDGPU_STREAM_TRACE", "sometimes")
    with pytest.raises(ValueError, match="SCOPEDGPU_STREAM_TRACE='sometimes'"):
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[2.0])


def test_wait_timeout_bad_value(clean_env):
    before = live_vulkan_objects()
    for bad in ("soon", "-1", "inf", "nan"):
        clean_env.setenv("SCOPEDGPU_WAIT_TIMEOUT", bad)
        with pytest.raises(ValueError, match=re.escape(
                f"SCOPEDGPU_WAIT_TIMEOUT={bad!r}: expected a finite number of seconds >= 0")):
            sg.Manager()
        assert live_vulkan_objects() == before
    with sg.Manager(wait_timeout=1.5) as m:    # the argument wins, the variable unread
        assert m.wait_timeout == 1.5
    assert live_vulkan_objects() == before
    clean_env.setenv("SCOPEDGPU_WAIT_TIMEOUT", "2.5")
    with leak_checked_manager() as m:
        assert m.wait_timeout == 2.5


def test_debug_spellings_and_a_bad_value(clean_env):
    clean_env.setenv("SCOPEDGPU_DEBUG", "No")
    with leak_checked_manager(debug=None) as m:
        assert m.debug is False
    clean_env.setenv("SCOPEDGPU_DEBUG", "maybe")   # was on: anything but 0/false/no/off
    before = live_vulkan_objects()
    with pytest.raises(ValueError, match="SCOPEDGPU_DEBUG='maybe'"):
        sg.Manager()
    assert live_vulkan_objects() == before
    clean_env.setenv("SCOPEDGPU_HOST_BLOCKS", "malloc")   # was: imported, silently
    clean_env.setenv("SCOPEDGPU_DEBUG", "off")
    with pytest.raises(ValueError, match="SCOPEDGPU_HOST_BLOCKS='malloc'"):
        sg.Manager()
    assert live_vulkan_objects() == before


def test_device_by_index_and_by_name(clean_env):
    """Manager() and kp.Manager() parse SCOPEDGPU_DEVICE alike (kp once took ' 0 ' for a
    name), and an unknown one's error names the variable."""
    from scopedgpu import kp
    devs = sg.devices()
    last = devs[-1]
    x = np.arange(16, dtype=np.float32)
    for value in (f" {last.index} ", last.name[:5].swapcase()):
        clean_env.setenv("SCOPEDGPU_DEVICE", value)
        with leak_checked_manager() as m:
            assert m.device.index == last.index, value
            t = m.tensor(x)
            m.run(sg.OpTensorSyncDevice([t]), sg.OpMult([t, t, t]), sg.OpTensorSyncLocal([t]))
            np.testing.assert_array_equal(t.data(), x * x)
            t.destroy()
        km = kp.Manager()
        assert km.get_device_properties()["device_name"] == last.name
        km.destroy()
    before = live_vulkan_objects()
    clean_env.setenv("SCOPEDGPU_DEVICE", str(len(devs)))
    with pytest.raises(sg.NoDeviceError, match=rf"index {len(devs)} \(SCOPEDGPU_DEVICE\)"):
        sg.Manager()
    clean_env.setenv("SCOPEDGPU_DEVICE", "no-such-gpu")
    with pytest.raises(sg.NoDeviceError, match=r"'no-such-gpu' \(SCOPEDGPU_DEVICE\)"):
        kp.Manager()
    with leak_checked_manager(last.index) as m:    # the argument wins
        assert m.device.index == last.index
    assert live_vulkan_objects() == before
