"""Interpreter exit with live managers, tensors and a running sequence: status 0, no
hang, nothing on stderr."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import source_env

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent('''
    import numpy as np, scopedgpu as sg
    from tests import shaders
    m1 = sg.Manager()
    m2 = sg.Manager()
    t = m1.tensor(np.ones(1 << 15, np.float32))
    view = t.data()
    algo = m1.algorithm([t], sg.compile_glsl(shaders.SLOW),
                        push_consts=np.array([200000], np.uint32))
    named = m1.sequence("keep")
    named.record(sg.OpTensorSyncDevice([t])).record(sg.OpAlgoDispatch(algo))
    named.record(sg.OpTensorSyncLocal([t]))
    named.eval_async()
    anon = m1.sequence().record(sg.OpAlgoDispatch(algo))
    anon.eval_async()
    x = m2.tensor([1.0, 2.0])
    cycle = [x, m2]
    cycle.append(cycle)
    print("running", named.is_running)
''')


def test_exit_with_live_objects_and_running_work():
    env = source_env()
    res = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert res.stdout.startswith("running")


def test_import_works_without_vulkan_and_first_call_says_what_to_install():
    code = ("import scopedgpu as sg\n"
            "try:\n    sg.devices()\nexcept sg.NoDeviceError as e:\n    print('NoDeviceError:', e)\n"
            "try:\n    sg.Manager()\nexcept sg.NoDeviceError as e:\n    print('NoDeviceError:', e)\n")
    env = source_env(SCOPEDGPU_VULKAN_LIBRARY="/nonexistent/libvulkan.so.1")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 2 and all(ln.startswith("NoDeviceError:") for ln in lines)
    assert "apt-get install libvulkan1 mesa-vulkan-drivers" in lines[0]
