"""os.fork() with a Manager alive (issues 9 and 19): the child's inherited managers are
unusable (ForkedError naming fork), its exit never waits on the parent's device and never
reaches it, the child exits with its own status however it ends, and a new Manager in the
child either works or says that this driver cannot open a device after a fork (naming
the spawn start method). Each case runs in a script that forks; the script's parent waits
for its child with a time limit, then checks that its own manager still works.

Without the exit guard (scopedgpu._engine.after_fork), every case failed on the H200: the
NVIDIA driver's exit handler, run in the child, crashed there and lost the parent's device
(VK_ERROR_DEVICE_LOST); on lavapipe without the validation layer the new-manager child
crashed in Mesa's exit handler."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import scopedgpu as sg
from tests.conftest import source_env

HERE = Path(__file__).resolve().parent

SCRIPT = """
import faulthandler, os, signal, sys, time, warnings
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
view = b.data()
pid = os.fork()
if pid == 0:
    faulthandler.enable()   # a hang: the SIGABRT below prints where each thread was
{child}
    sys.exit(0)   # the normal exit: atexit, the manager's finalizer, C's exit handlers
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.02)
else:
    os.kill(pid, signal.SIGABRT)   # (its stacks go to stderr, into the test's message)
    for _ in range(250):
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    print("CHILD HUNG")
    sys.exit(3)
print("child status", os.waitstatus_to_exitcode(status), flush=True)
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
    try:
        m2 = sg.Manager()
    except sg.DeviceError as exc:
        # A driver that cannot open a device in a forked child (NVIDIA's): a clear error.
        assert "fork" in str(exc) and "'spawn'" in str(exc), str(exc)
        print("child new manager refused:", exc, flush=True)
    else:
        with m2:
            x = m2.tensor(np.arange(32, dtype=np.float32))
            y = m2.empty(32)
            m2.run(sg.OpTensorSyncDevice([x]),
                   sg.OpAlgoDispatch(m2.algorithm([x, y], add_one_spirv(np.float32))),
                   sg.OpTensorSyncLocal([y]))
            assert (y.data() == np.arange(32) + 1).all()
        print("child new manager ok", flush=True)
    """,
    # Ends by an exception: Python prints it and exits with status 1.
    "raises": """
    raise RuntimeError("the child fails")
    """,
    "exit_code": """
    sys.exit(3)
    """,
    "os_exit": """
    os._exit(4)
    """,
    # Reads a data() view taken before the fork: its memory is the child's copy.
    "reads_view": """
    assert (view == np.arange(64) + 1).all()
    print("child view ok", flush=True)
    """,
}
STATUS = {"raises": 1, "exit_code": 3, "os_exit": 4}


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
    assert f"child status {STATUS.get(case, 0)}\n" in proc.stdout, (proc.stdout, proc.stderr)
    assert "parent ok" in proc.stdout and proc.returncode == 0, (proc.stdout, proc.stderr)
    if case == "uses_inherited":
        assert "child uses ok" in proc.stdout
    if case == "reads_view":
        assert "child view ok" in proc.stdout
    if case == "new_manager":
        refused = "child new manager refused" in proc.stdout
        assert refused != ("child new manager ok" in proc.stdout), proc.stdout
        if "llvmpipe" in sg.devices()[0].name:   # lavapipe opens a device in the child
            assert not refused, proc.stdout
    if case == "raises":
        assert proc.stderr.count("Traceback") == 1 and "the child fails" in proc.stderr
    else:
        assert "Traceback" not in proc.stderr, proc.stderr


MP_SCRIPT = """
import multiprocessing as mp, os, sys, warnings
import numpy as np
import scopedgpu as sg
sys.path.insert(0, {here!r})
from lt_shaders import add_one_spirv
warnings.simplefilter("ignore", DeprecationWarning)   # fork() of a threaded process

def numpy_only(i):
    return float(np.arange(i + 1, dtype=np.float64).sum())

def own_manager(i):
    try:
        m = sg.Manager()
    except sg.DeviceError as exc:
        return ("refused", str(exc))
    with m:
        x = m.tensor(np.arange(16, dtype=np.float32) + i)
        y = m.empty(16)
        m.run(sg.OpTensorSyncDevice([x]),
              sg.OpAlgoDispatch(m.algorithm([x, y], add_one_spirv(np.float32))),
              sg.OpTensorSyncLocal([y]))
        return ("ok", float(y.data().sum()))

def run_in_process(q, i):
    q.put({func}(i))

if __name__ == "__main__":
    m = sg.Manager()
    a = m.tensor(np.arange(64, dtype=np.float32))
    b = m.empty(64)
    seq = m.sequence("s").record(sg.OpTensorSyncDevice([a]))
    seq.record(sg.OpAlgoDispatch(m.algorithm([a, b], add_one_spirv(np.float32))))
    seq.record(sg.OpTensorSyncLocal([b])).eval()
    ctx = mp.get_context("fork")
    pool = ctx.Pool(2)
    results = pool.map({func}, range(4))
    pool.close()
    pool.join()
    q = ctx.Queue()
    procs = [ctx.Process(target=run_in_process, args=(q, i)) for i in range(2)]
    for p in procs:
        p.start()
    results += sorted((q.get(timeout=60) for _ in procs), key=repr)
    for p in procs:
        p.join(60)
    print("exit codes", [p.exitcode for p in procs], flush=True)
    print("results", repr(results), flush=True)
    seq.eval()
    assert (b.data() == np.arange(64) + 1).all()
    m.close()
    print("parent ok", flush=True)
"""


@pytest.mark.parametrize("func", ["numpy_only", "own_manager"])
def test_multiprocessing_fork_pool_with_a_live_manager(func):
    """multiprocessing's fork start method, the default on Linux before Python 3.14, with
    a Manager alive in the parent: a pool whose workers never touch the GPU, and one whose
    workers each open their own Manager (which works, or is refused naming 'spawn')."""
    code = MP_SCRIPT.format(here=str(HERE), func=func)
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=180, env=source_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hung: {exc.stdout!r} {exc.stderr!r}")
    assert proc.returncode == 0 and "parent ok" in proc.stdout, (proc.stdout, proc.stderr)
    assert "exit codes [0, 0]" in proc.stdout, proc.stdout
    results = eval(proc.stdout.split("results ", 1)[1].split("\n", 1)[0])
    assert len(results) == 6
    if func == "numpy_only":
        assert results == [0.0, 1.0, 3.0, 6.0, 0.0, 1.0]
    else:
        lavapipe = "llvmpipe" in sg.devices()[0].name
        for i, (outcome, value) in zip([0, 1, 2, 3, 0, 1], results):
            if outcome == "ok":
                assert value == float((np.arange(16) + i + 1).sum()), results
            else:
                assert outcome == "refused" and not lavapipe, results
                assert "fork" in value and "'spawn'" in value, value
    assert "Traceback" not in proc.stderr, proc.stderr
