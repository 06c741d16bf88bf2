"""The `scopedgpu` logger at DEBUG: the device chosen and why, compile_glsl's compiler and
cache, pipeline builds and pipeline-cache hits, pool growth; nothing above DEBUG, and with
DEBUG off nothing is formatted on the per-call paths."""
from __future__ import annotations

import hashlib
import itertools
import logging
import re

import numpy as np

import scopedgpu as sg
from scopedgpu import _caches, glsl
from scopedgpu._shaders import builtin_spirv
from scopedgpu.testing import default_device, leak_checked_manager
from tests.conftest import DEBUG, needs_glsl_compiler

ADD = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer Data { float x[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < x.length()) x[i] += OFFSET;
}
"""
MiB = 1 << 20


def messages(caplog, prefix: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "scopedgpu" and r.getMessage().startswith(prefix)]


@needs_glsl_compiler("a fresh compile cache: the first compile must run the compiler")
def test_debug_records_say_what_was_chosen_compiled_built_and_grown(caplog, monkeypatch,
                                                                   tmp_path):
    monkeypatch.setenv("SCOPEDGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SCOPEDGPU_DEVICE", "")    # blank: the default choice
    caplog.set_level(logging.DEBUG, logger="scopedgpu")

    spirv = sg.compile_glsl(ADD, defines={"OFFSET": 2})
    assert sg.compile_glsl(ADD, defines={"OFFSET": 2}) == spirv
    name, path = glsl._compiler()
    miss, = messages(caplog, "compile_glsl: cache miss")
    entry = re.search(r"cache entry (\S+)$", miss)
    assert entry and entry.group(1).startswith(str(tmp_path / "spirv")), miss
    assert f"compiled with {name} ({path}) in " in miss
    assert f": {len(spirv)} bytes of SPIR-V, defines {{'OFFSET': '2'}}, " in miss
    hit, = messages(caplog, "compile_glsl: cache hit")
    assert hit == f"compile_glsl: cache hit, {len(spirv)} bytes of SPIR-V from {entry.group(1)}"

    x = np.arange(1000, dtype=np.float32)
    with leak_checked_manager(debug=DEBUG or None) as mgr:
        info = mgr.device
        chosen, = messages(caplog, "Manager: device")
        why = ("by default (the best type" if default_device() is None else
               f"by the argument device={default_device()!r}")
        assert chosen.startswith(f"Manager: device {info.index}, {info.name} ({info.type}, "
                                 f"Vulkan {info.api_version}), chosen {why}"), chosen
        assert chosen.endswith(f"; validation {'on' if mgr.debug else 'off'}"), chosen

        # Nine 1 MiB tensors: more than one 8 MiB small-class block of device memory.
        ts = [mgr.tensor(np.full(MiB // 4, i, dtype=np.float32)) for i in range(9)]
        t = mgr.tensor(x)
        with mgr.algorithm([t], spirv, (16, 1, 1)) as a1, \
                mgr.algorithm([ts[0]], spirv, (MiB // 4 // 64, 1, 1)) as a2:
            mgr.run(sg.OpTensorSyncDevice([t, ts[0]]), sg.OpAlgoDispatch(a1),
                    sg.OpAlgoDispatch(a2), sg.OpTensorSyncLocal([t, ts[0]]))
            np.testing.assert_array_equal(t.data(), x + 2)
            np.testing.assert_array_equal(ts[0].data(), np.full(MiB // 4, 2, np.float32))
        shown = (f"SPIR-V {hashlib.sha256(spirv).hexdigest()[:12]} ({len(spirv)} bytes, "
                 f"local size 64x1x1), 1 bindings, specialization constants []")
        built, = messages(caplog, "pipeline built in ")
        assert re.fullmatch(rf"pipeline built in [0-9.]+ ms: {re.escape(shown)}; "
                            r"\d+ pipelines cached", built), built
        assert messages(caplog, "pipeline cache hit") == [
            f"pipeline cache hit (used by 1 algorithms): {shown}"]

        stats = mgr.memory_stats()
        grown = messages(caplog, "pool: new ")
        assert len(grown) == stats["blocks"] and len(grown) >= 3, grown
        small = [g for g in grown if g.startswith(f"pool: new device block of {8 * MiB} "
                                                  f"bytes (small class, for ")]
        assert len(small) >= 2, grown     # the first block filled up: the pool grew
        reserved = [int(re.search(r"reserved now (\d+) bytes", g).group(1)) for g in grown]
        sizes = [int(re.search(r"block of (\d+) bytes", g).group(1)) for g in grown]
        assert reserved == list(itertools.accumulate(sizes)), grown       # each after its block
        assert reserved[-1] == stats["reserved_bytes"], (grown, stats)
        for t_ in ts:
            t_.destroy()
        t.destroy()

    ours = [r for r in caplog.records if r.name == "scopedgpu"]
    assert ours and {r.levelno for r in ours} == {logging.DEBUG}, [
        (r.levelname, r.getMessage()) for r in ours]


def test_debug_choice_by_the_environment_and_nothing_formatted_when_off(caplog, monkeypatch):
    # With DEBUG off, the per-call paths (a pipeline-cache hit here) format nothing.
    def describe(*args):
        raise AssertionError("pipeline described with DEBUG off")
    monkeypatch.setattr(_caches, "_describe", describe)
    caplog.set_level(logging.INFO, logger="scopedgpu")
    n = 512
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    with leak_checked_manager(debug=DEBUG or None) as mgr:
        with mgr.tensor(x) as tx, mgr.tensor(y) as ty, \
                mgr.algorithm([tx, ty], builtin_spirv("saxpy"), (2, 1, 1), push_consts=[3.0]) as a, \
                mgr.algorithm([tx, ty], builtin_spirv("saxpy"), (2, 1, 1), push_consts=[3.0]) as b:
            mgr.run(sg.OpTensorSyncDevice([tx, ty]), sg.OpAlgoDispatch(a),
                    sg.OpAlgoDispatch(b), sg.OpTensorSyncLocal([ty]))
            np.testing.assert_array_equal(ty.data(), 6 * x + 1)
        index = mgr.device.index
    assert [r for r in caplog.records if r.name == "scopedgpu"] == []

    # SCOPEDGPU_DEVICE's choice is named as such (the argument None defers to it).
    monkeypatch.setenv("SCOPEDGPU_DEVICE", str(index))
    caplog.set_level(logging.DEBUG, logger="scopedgpu")
    before = sg.live_vulkan_objects()
    with sg.Manager() as mgr2:
        assert mgr2.device.index == index
    assert sg.live_vulkan_objects() == before
    chosen, = messages(caplog, "Manager: device")
    assert f"chosen by SCOPEDGPU_DEVICE={index!r}; " in chosen, chosen
