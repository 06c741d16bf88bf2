"""Several managers in one process, working at once from threads: their waits overlap and
release the GIL. On a one-device machine (lavapipe) both managers open that device."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu.testing import live_counts
from tests.conftest import DEBUG, ROOT, source_env
from tests.test_async import LCG, _long_lcg, lcg_reference


def _two_devices() -> list[int]:
    """Two device indices: two different devices where there are, else one twice."""
    idx = [d.index for d in sg.devices()]
    return [idx[0], idx[1 % len(idx)]]


def test_two_managers_wait_at_once_with_the_gil_released(glsl):
    spirv = glsl(LCG)
    managers = [sg.Manager(i, debug=DEBUG or None) for i in _two_devices()]
    try:
        baselines = [live_counts(m) for m in managers]
        # A dispatch of about 0.6 s on the first device alone; the same on the second.
        first, t0_, a0_, iters = _long_lcg(managers[0], glsl, 0.6)
        v0 = [first, first + np.uint32(1)]
        tensors = [t0_, managers[1].tensor(v0[1])]
        algos = [a0_, managers[1].algorithm([tensors[1]], spirv,
                                            push_consts=np.array([1], dtype=np.uint32))]
        spans: list[tuple[float, float]] = [(0.0, 0.0), (0.0, 0.0)]
        errors: list[BaseException] = []
        start = threading.Barrier(3)

        def body(k: int) -> None:
            try:
                m, t, algo = managers[k], tensors[k], algos[k]
                t.data()[:] = v0[k]
                with m.sequence() as seq:
                    seq.record(sg.OpTensorSyncDevice([t]))
                    seq.record(sg.OpAlgoDispatch(algo, push_consts=np.array([iters], np.uint32)))
                    seq.record(sg.OpTensorSyncLocal([t]))
                    start.wait()
                    seq.eval_async()
                    t0 = time.perf_counter()
                    seq.eval_await()            # the wait itself
                    spans[k] = (t0, time.perf_counter())
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=body, args=(k,)) for k in range(2)]
        for th in threads:
            th.start()
        start.wait()
        # Meanwhile this thread runs Python: it can only while the waiters let go of the GIL.
        stamps = []
        while any(th.is_alive() for th in threads):
            stamps.append(time.perf_counter())
            sum(range(200))
        for th in threads:
            th.join()
        assert not errors, errors
        for k in range(2):
            assert np.array_equal(tensors[k].numpy(), lcg_reference(v0[k], iters))
        both_from, both_to = max(s[0] for s in spans), min(s[1] for s in spans)
        assert both_to - both_from > 0.05, f"the waits did not overlap: {spans}"
        during = [s for s in stamps if both_from <= s <= both_to]
        assert len(during) > 100, len(during)
        # A wait that held the GIL would stop this thread for all of it (on lavapipe the
        # device's own CPU threads may delay it for a while, never for the whole wait).
        gaps = np.diff(during)
        assert gaps.max() < (both_to - both_from) / 2, (gaps.max(), both_to - both_from)
        for k in range(2):
            algos[k].destroy()
            tensors[k].destroy()
            assert live_counts(managers[k]) == baselines[k]
    finally:
        for m in managers:
            m.close()


@pytest.mark.plain_only("its bench runs with the validation layer off in either pass "
                        "(SCOPEDGPU_DEBUG is removed from its environment): the same work")
def test_multi_device_bench_quick(tmp_path):
    out = tmp_path / "multi.json"
    env = source_env()
    env.pop("SCOPEDGPU_DEBUG", None)    # validation would measure the layer
    res = subprocess.run([sys.executable, str(Path(ROOT) / "scopedgpu" / "bench" / "multi_device.py"),
                          "--managers", "2", "--quick", "--seconds", "0.05", "--json", str(out)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(out.read_text())
    assert data["roundtrip_ok"] is True and len(data["devices"]) == 2
    for what in ("saxpy", "upload", "download"):
        f = data["figures"][what]
        assert len(f["alone_gbps"]) == 2 and all(v > 0 for v in f["together_gbps"])
        assert f["aggregate_gbps"] == sum(f["together_gbps"])
    assert "speedup" in res.stdout
