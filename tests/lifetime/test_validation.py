"""The validation layer makes tests fail: errors raise ValidationError from the call that
caused them, and errors reported while a manager closes (when nothing can raise) reach the
"scopedgpu" log, which tests/conftest.py turns into a test failure (warnings too)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu._ffi import ffi, lib

pytest_plugins = ["pytester"]


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


def test_logged_validation_warnings_fail_the_test(pytester, monkeypatch):
    """The project's rule (tests/conftest.py's autouse fixture): a WARNING or ERROR on the
    "scopedgpu" logger, where the manager puts validation warnings (and errors it cannot
    raise), fails the test that logged it, unless the test is marked
    allow_scopedgpu_log. Run on a small test file with that conftest as a plugin."""
    from tests.conftest import ROOT
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    pytester.makepyfile(test_logs="""
        import logging
        import pytest
        log = logging.getLogger("scopedgpu")
        WARNING = ("Vulkan validation: Validation Warning: [ WARNING-Example ] | "
                   "MessageID = 0x1 | a warning the layer reported")

        def test_validation_warning():
            log.warning(WARNING)

        def test_validation_error_at_close():
            log.error("Vulkan validation: VUID-vkDestroyDevice-device-05137")

        @pytest.mark.allow_scopedgpu_log
        def test_expected_warning():
            log.warning(WARNING)

        def test_debug_and_info():
            log.debug("not a finding")
            log.info("not a finding")

        def test_other_logger():
            logging.getLogger("elsewhere").warning("not scopedgpu's")

        def test_missing_layer():
            log.warning("debug=True, but the Khronos validation layer is not installed")
    """)
    res = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p", "tests.conftest")
    res.assert_outcomes(passed=6, errors=2)   # a teardown error counts as both
    res.stdout.fnmatch_lines(["*ERROR at teardown of test_validation_warning*",
                              "*scopedgpu logged:*", "*WARNING: Vulkan validation: *"
                              "WARNING-Example*"])
    res.stdout.fnmatch_lines(["*ERROR at teardown of test_validation_error_at_close*",
                              "*ERROR: Vulkan validation: VUID-vkDestroyDevice*"])
