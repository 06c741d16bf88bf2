"""Debug mode (Manager(debug=True)): the forgotten sync ops, caught.

The two most common mistakes of GPU programming give no error of their own: a kernel that
reads a tensor whose host data never reached the device (a forgotten OpTensorSyncDevice:
it reads zeros, or what an earlier upload left), and host code that reads data() of a
tensor a kernel wrote after its last download (a forgotten OpTensorSyncLocal: stale data).
In debug mode the manager keeps, for each "device" and "host" tensor, a copy of its host
data as of its last sync (the data uploaded, or the data downloaded once the download
completed) and whether a kernel may have written it since. Then:

- a submission whose dispatch reads (by the shader's own instructions: loads, atomics) a
  tensor not uploaded before it in the same sequence, and whose host data differs from
  that copy (or, never synced, is not all zeros), warns SyncWarning naming the tensor,
  the algorithm and the missing OpTensorSyncDevice;
- data() (and numpy(), np.asarray) of a tensor a submitted dispatch writes (by the
  shader's stores and atomics) after its last download warns SyncWarning once, naming the
  missing OpTensorSyncLocal.

All of it runs in debug mode only, at submission and completion: outside it the manager
holds no checker (Engine.sync_check is None) and nothing costs more. The checker is
called under the manager's lock.
"""
from __future__ import annotations

import os
import inspect
import warnings
import weakref
from typing import Any, Callable

import numpy as np

from scopedgpu._errors import SyncWarning
from scopedgpu.ops import OpAlgoDispatch, OpTensorSyncDevice, OpTensorSyncLocal

__all__ = ["SyncCheck"]

FULL_COPY_MAX = 16 << 20   # bytes; larger host data is kept as a strided sample of 2^20 bytes


_HERE = os.path.dirname(os.path.abspath(__file__))


def _warn(message: str) -> None:
    """A SyncWarning attributed to the first caller outside scopedgpu (the user's line)."""
    level = 2
    f: Any = inspect.currentframe()
    f = f.f_back if f is not None else None
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _HERE:
        f = f.f_back
        level += 1
    warnings.warn(message, SyncWarning, stacklevel=level)


def _snap(host: np.ndarray) -> np.ndarray:
    """What is kept of host data to tell later whether it changed: its bytes, or a
    strided sample of them when it is large."""
    raw = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
    if raw.size <= FULL_COPY_MAX:
        return raw.copy()
    return raw[:: -(-raw.size // (1 << 20))].copy()


class _Seen:
    __slots__ = ("copy", "written", "warned")

    def __init__(self) -> None:
        self.copy: np.ndarray | None = None   # host data as of the last sync
        self.written = False    # a submitted kernel may have written it since the download
        self.warned = False     # data() warned already for this write


class SyncCheck:
    def __init__(self) -> None:
        self.seen: weakref.WeakKeyDictionary[Any, _Seen] = weakref.WeakKeyDictionary()

    def _of(self, t: Any) -> _Seen:
        s = self.seen.get(t)
        if s is None:
            s = self.seen[t] = _Seen()
        return s

    def submitted(self, ops: list[Any], owner: object) -> Callable[[], None] | None:
        """Called before `owner` (a sequence) submits `ops`; warns of forgotten uploads.
        Returns what to run once the submission completed (after its host copies), or
        None."""
        uploaded: set[int] = set()
        downloaded: list[Any] = []
        for op in ops:
            if isinstance(op, OpTensorSyncDevice):
                for t in op.tensors:
                    s = self._of(t)
                    s.copy = _snap(t.host_data)
                    uploaded.add(id(t))
            elif isinstance(op, OpAlgoDispatch):
                algo = op.algorithm
                access = algo.binding_access
                for b, t in enumerate(algo.bound):
                    if t.kind == "storage":
                        continue
                    # (a binding the module does not declare is neither read nor written)
                    reads, writes = access.get(b, (False, False)) if access is not None \
                        else (True, True)
                    if reads and id(t) not in uploaded:
                        self._check_upload(t, algo, b, owner)
                    if writes:
                        s = self._of(t)
                        s.written = True
                        s.warned = False
            # (OpTensorCopy's destinations are not tracked: scopedgpu.kp's copy refreshes
            # their host data too, as kp's does)
            elif isinstance(op, OpTensorSyncLocal):
                for t in op.tensors:
                    self._of(t).written = False
                    downloaded.append(weakref.ref(t))
        if not downloaded:
            return None

        def completed() -> None:
            for ref in downloaded:
                t = ref()
                if t is not None and not t.destroyed:
                    self._of(t).copy = _snap(t.host_data)
        return completed

    def _check_upload(self, t: Any, algo: Any, binding: int, owner: object) -> None:
        s = self.seen.get(t)
        host = _snap(t.host_data)
        base = s.copy if s is not None else None
        if base is None:
            if not host.any():
                return   # zeros: what the device holds too (fresh memory reads as zeros)
            why = "whose host data never reached the device (the kernel reads zeros there)"
        elif np.array_equal(base, host):
            return
        else:
            why = "whose host data changed since its last sync (the kernel reads the old data)"
        _warn(f"{owner!r}: {algo!r} reads {t!r} (binding {binding}) {why}: record "
              "OpTensorSyncDevice with this tensor before the dispatch")

    def host_read(self, t: Any) -> None:
        """data() of t: warns once when a kernel wrote it after its last download."""
        s = self.seen.get(t)
        if s is not None and s.written and not s.warned:
            s.warned = True
            _warn(f"{t!r}: a kernel wrote it after its last download, and data() holds the "
                  "data from before: record OpTensorSyncLocal with this tensor after the "
                  "dispatch (and evaluate it) to read the result")
