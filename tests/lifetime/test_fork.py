"""os.fork() with a Manager alive (issue 9, class 5): the child's inherited managers are
unusable (ForkedError naming fork), its exit never waits on the parent's device, and a
new Manager in the child works. Each case runs in a script that forks; the script's
parent waits for its child with a time limit."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import source_env

HERE = Path(__file__).resolve().parent

SCRIPT = """
import os, sys, time, warnings
import numpy as np
import scopedgpu as sg
sys.path.insert(0, {here!r})
from lt_shaders import add_one_spirv
from endless import busy_sequence, flag_tensor, set_flag
warnings.simplefilter("ignore", DeprecationWarning)   # fork() of a threaded process

m = sg.Manager()
a = m.tensor(np.arange(64, dtype=np.float32))
b = m.empty(64)
algo = m.algorithm([a, b], add_one_spirv(np.float32))
seq = m.sequence("s").record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(algo))
seq.record(sg.OpTensorSyncLocal([b])).eval()
px = np.arange(4096, dtype=np.float32)
py = np.ones(4096, dtype=np.float32)
pins = m.pinned(px, py)
assert pins.pinned_bytes > 0
f = flag_tensor(m)
busy = busy_sequence(m, f)
if {running}:
    busy.eval_async()
pid = os.fork()
if pid == 0:
{child}
    sys.exit(0)   # the normal exit: atexit, the manager's finalizer
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.02)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("CHILD HUNG")
    sys.exit(3)
print("child status", os.waitstatus_to_exitcode(status))
# The parent is unaffected.
set_flag(f)
busy.eval_await(60)
seq.eval()
assert (b.data() == np.arange(64) + 1).all()
from scopedgpu._shaders import builtin_spirv
m.stream(builtin_spirv("saxpy"), inputs=[px, py], outputs=[py], push_consts=[2.0],
         chunk_bytes=4096)
assert (py == 2 * px + 1).all()
pins.destroy()
m.close()
print("parent ok")
"""

CHILDREN = {
    "untouched": "",
    "uses_inherited": """
    def expect_fork_error(call):
        try:
            call()
        except sg.ForkedError as exc:
            assert "fork" in str(exc) and "new Manager" in str(exc), str(exc)
        else:
            raise AssertionError(f"no ForkedError from {{call}}")
    assert isinstance(sg.ForkedError("x"), sg.DestroyedError)
    expect_fork_error(lambda: m.tensor([1.0]))
    expect_fork_error(lambda: m.sequence())
    expect_fork_error(lambda: m.wait_idle())
    expect_fork_error(lambda: m.memory_stats())
    expect_fork_error(lambda: seq.eval())
    expect_fork_error(lambda: busy.eval_await())
    expect_fork_error(lambda: a.numpy())
    expect_fork_error(lambda: algo.tensors and sg.OpAlgoDispatch(algo))
    expect_fork_error(lambda: m.pinned(px))
    expect_fork_error(lambda: pins.__enter__())
    assert pins.destroyed
    a.destroy(); seq.destroy(); pins.destroy()    # idempotent no-ops: no Vulkan call
    m.close()
    assert m.closed
    print("child uses ok", flush=True)
    """,
    "new_manager": """
    with sg.Manager() as m2:
        x = m2.tensor(np.arange(32, dtype=np.float32))
        y = m2.empty(32)
        m2.run(sg.OpTensorSyncDevice([x]),
               sg.OpAlgoDispatch(m2.algorithm([x, y], add_one_spirv(np.float32))),
               sg.OpTensorSyncLocal([y]))
        assert (y.data() == np.arange(32) + 1).all()
    print("child new manager ok", flush=True)
    """,
}


@pytest.mark.parametrize("running", [False, True], ids=["idle", "running"])
@pytest.mark.parametrize("case", list(CHILDREN))
def test_fork_with_a_live_manager(case, running):
    child = textwrap.indent(textwrap.dedent(CHILDREN[case]), "    ")
    code = SCRIPT.format(here=str(HERE), running=running, child=child or "    pass")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, env=source_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hung: {exc.stdout!r}")
    assert "CHILD HUNG" not in proc.stdout, (proc.stdout, proc.stderr)
    assert "child status 0" in proc.stdout, (proc.stdout, proc.stderr)
    assert "parent ok" in proc.stdout and proc.returncode == 0, (proc.stdout, proc.stderr)
    if case == "uses_inherited":
        assert "child uses ok" in proc.stdout
    if case == "new_manager":
        assert "child new manager ok" in proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
