"""Host writes wait for the GPU work of other sequences that use the same tensors.

OpTensorSyncDevice writes a tensor's host data into the memory the device reads (a 'host'
tensor's own memory) on the host, just before its sequence is submitted. Evaluating it
while another sequence still runs on that tensor must first wait for that sequence
(Sequence._submit_locked), or the running work reads the new values in the middle of its
run. Shown with a sequence whose first dispatch spins until the test sets a flag, and
which copies the tensor only after that."""
from __future__ import annotations

import threading

import numpy as np

import scopedgpu as sg
from tests.lifetime.endless import FLAG_GLSL, flag_tensor, set_flag

# Enough workgroups to spin for a minute or more on lavapipe while the flag is clear,
# about 0.1 s once it is set (see endless.py).
SPIN = (65535, 1, 1)


def test_an_upload_waits_for_a_running_sequence_that_reads_the_tensor(mgr, glsl):
    flag = flag_tensor(mgr)
    t = mgr.tensor(np.array([1.0, 2.0, 3.0, 4.0], np.float32), kind="host")
    seen = mgr.tensor(np.zeros(4, np.float32))
    spin = mgr.algorithm([flag, t], glsl(FLAG_GLSL), workgroup=SPIN)   # uses t, spins
    timer = threading.Timer(0.3, set_flag, (flag,))
    with mgr.sequence() as reader, mgr.sequence() as writer:
        try:
            reader.record(sg.OpAlgoDispatch(spin)).record(sg.OpTensorCopy([t, seen]))
            reader.record(sg.OpTensorSyncLocal([seen]))
            reader.eval_async()                        # spins until the timer sets the flag
            t.data()[:] = [10.0, 20.0, 30.0, 40.0]     # the host copy only
            timer.start()
            writer.eval(sg.OpTensorSyncDevice([t]))    # must wait for the reader first
            assert not reader.is_running
        finally:
            set_flag(flag)      # whatever failed, the spinning dispatch ends
            timer.cancel()
            if timer.ident is not None:
                timer.join()
        # The reader copied t as it was when it was submitted ...
        np.testing.assert_array_equal(
            seen.data(), [1.0, 2.0, 3.0, 4.0],
            err_msg="the upload overwrote a tensor a running sequence still reads")
        # ... and the upload landed afterwards.
        writer.eval(sg.OpTensorCopy([t, seen])).eval(sg.OpTensorSyncLocal([seen]))
        np.testing.assert_array_equal(seen.data(), [10.0, 20.0, 30.0, 40.0])
    for obj in (spin, flag, t, seen):
        obj.destroy()
