"""The validation layer makes tests fail: errors raise ValidationError from the call that
caused them, and errors reported while a manager closes (when nothing can raise) reach the
"scopedgpu" log, which tests/lifetime/conftest.py turns into a test failure."""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu._ffi import ffi, lib


@pytest.fixture
def debug_mgr():
    m = sg.Manager(debug=True)
    if not m.debug:
        m.close()
        pytest.skip("the Khronos validation layer is not installed")
    yield m
    m.close()


def test_validation_error_raises_from_the_next_call(debug_mgr):
    st = debug_mgr._state
    out = ffi.new("sg_seq **")
    assert lib.sg_seq_create(st.dev, 0, 0, out) == 0
    try:
        # Submitting a command buffer that was never recorded breaks
        # VUID-vkQueueSubmit-pCommandBuffers-00070; the shim itself does not check.
        assert lib.sg_seq_submit(out[0]) == 0
        with pytest.raises(sg.ValidationError, match="VUID-vkQueueSubmit"):
            debug_mgr.wait_idle()
    finally:
        lib.sg_seq_destroy(out[0])
    # The manager is still usable afterwards.
    t = debug_mgr.tensor(np.arange(4, dtype=np.float32))
    debug_mgr.run(sg.OpTensorSyncDevice([t]), sg.OpTensorSyncLocal([t]))
    t.destroy()


def test_validation_error_at_close_is_logged():
    """Found a gap: the manager read the layer's messages before vkDestroyDevice, so the
    errors the layer reports there (objects the device still holds) were dropped. Run in a
    subprocess: the leaked block would stay counted in this process."""
    script = textwrap.dedent("""
        import logging, sys
        import scopedgpu as sg
        from scopedgpu._ffi import ffi, lib
        records = []
        class H(logging.Handler):
            def emit(self, r):
                records.append(r)
        logging.getLogger("scopedgpu").addHandler(H())
        m = sg.Manager(debug=True)
        if not m.debug:
            print("no layer")
            sys.exit(0)
        blk = ffi.new("sg_block **")
        assert lib.sg_block_create(m._state.dev, 4096, 0, 0, blk) == 0  # never destroyed
        m.close()
        errors = [r.getMessage() for r in records if r.levelno >= logging.ERROR]
        print("logged:", errors)
        sys.exit(0 if any("VUID-vkDestroyDevice" in e for e in errors) else 1)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    if "no layer" in proc.stdout:
        pytest.skip("the Khronos validation layer is not installed")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_logged_validation_messages_fail_the_test(fail_on_validation_messages):
    """The autouse fixture collects WARNING and ERROR records of the "scopedgpu" logger;
    any record makes the test fail at teardown (checked here on its collector)."""
    logging.getLogger("scopedgpu").debug("not collected")
    assert fail_on_validation_messages.records == []
