"""One Submission class for every command buffer and fence (issue 25): the engine knows
each one its makers (sequences, storage uploads, stream()) hold, every command pool the
shim holds is one of them, each is let go of by one release(), and a release by a maker
that no longer owns it does nothing."""
from __future__ import annotations

import numpy as np

import scopedgpu as sg
from scopedgpu import _vk
from scopedgpu._shaders import builtin_spirv


def _pools_are_submissions(mgr: sg.Manager) -> None:
    """Every command pool of the device is a Submission the engine knows (none made
    outside it, none it forgot)."""
    st = mgr._state
    live = mgr.live_objects()
    made = [s for s in st.submissions if s.seq is not None]
    assert live["command_pools"] == len(made), (live["command_pools"], made)


def test_every_command_buffer_is_a_submission_the_engine_knows(mgr):
    st = mgr._state
    x = np.arange(4096, dtype=np.float32)
    y = np.ones(4096, np.float32)
    t = mgr.tensor(x, kind="storage")            # an upload's
    d = mgr.empty(4096)
    _pools_are_submissions(mgr)
    kept = mgr.sequence()
    kept.record(sg.OpTensorCopy([t, d])).record(sg.OpTensorSyncLocal([d])).eval()
    with mgr.sequence() as seq:                  # destroyed: its submission is cached
        seq.record(sg.OpTensorSyncLocal([d])).eval()
    _pools_are_submissions(mgr)
    seen: list[int] = []

    def progress(done: int, total: int) -> None:
        # while the stream runs, its slots' uploads and downloads are the engine's too
        seen.append(sum(1 for s in st.submissions if s.label.startswith("a stream")))
        _pools_are_submissions(mgr)

    out = mgr.stream(builtin_spirv("saxpy"), inputs=[x, y], outputs=[y], push_consts=[2.0],
                     chunk_bytes=4096, depth=2, progress=progress)
    np.testing.assert_array_equal(out[0], 2.0 * x + 1.0)
    assert seen and all(n == 4 for n in seen), seen          # 2 slots, 2 each
    assert not any(s.label.startswith("a stream") for s in st.submissions)
    d.data()[:] = 0.0
    kept.eval()
    np.testing.assert_array_equal(d.data(), x)
    _pools_are_submissions(mgr)
    kept.destroy()
    t.destroy()
    d.destroy()
    assert not st.released
    _pools_are_submissions(mgr)


def test_a_storage_upload_reuses_an_idle_command_buffer(mgr, monkeypatch):
    """Uploads (kind="storage") take an idle command buffer of the sequence cache and
    leave theirs there, instead of one sg_seq_create and sg_seq_destroy each (about
    1.1 ms on NVIDIA's driver)."""
    with mgr.sequence():
        pass                                     # one idle command buffer cached
    creates: list[object] = []
    real = _vk.seq_create
    monkeypatch.setattr(_vk, "seq_create", lambda *a: creates.append(a) or real(*a))
    data = [np.full(256, i, np.float32) for i in range(5)]
    tensors = [mgr.tensor(d, kind="storage") for d in data]
    assert creates == []
    assert mgr.live_objects()["cached_sequences"] == 1
    out = mgr.empty(256)
    for t, d in zip(tensors, data):
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorCopy([t, out])).record(sg.OpTensorSyncLocal([out])).eval()
        np.testing.assert_array_equal(out.data(), d)
        t.destroy()
    out.destroy()
    assert creates == []
    _pools_are_submissions(mgr)


def test_a_release_by_a_former_owner_does_nothing(mgr):
    """A sequence's release run again (its handle's release is requeue-safe: Ctrl-C cut
    the first short) after the cache gave its submission to another sequence leaves the
    other's alone."""
    t = mgr.tensor(np.arange(64, dtype=np.float32))
    first = mgr.sequence()
    sub = first._sub
    handle = first._handle
    first.destroy()
    assert mgr.live_objects()["cached_sequences"] == 1
    second = mgr.sequence()
    assert second._sub is sub                    # the cached one, now the second's
    handle.release(mgr._state, False)            # the first's release, again
    assert sub.owner is second._handle and sub not in mgr._state.released
    t.data()[:] = 7.0
    second.record(sg.OpTensorSyncDevice([t])).record(sg.OpMult([t, t, t]))
    second.record(sg.OpTensorSyncLocal([t])).eval()
    np.testing.assert_array_equal(t.data(), np.full(64, 49.0, np.float32))
    _pools_are_submissions(mgr)
    second.destroy()
    t.destroy()
