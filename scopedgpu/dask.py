"""Dask: one Manager per worker, on its own device, and kernels over the blocks of a dask
array. Install with `pip install scopedgpu[dask]` (dask and distributed).

    from dask.distributed import Client, LocalCluster
    import dask.array as da
    import scopedgpu.dask as sgd

    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as client:
        sgd.register(client)                     # each worker opens one Manager
        x = da.random.random(10_000_000, chunks=1_000_000).astype("float32")
        y = sgd.map_blocks(SAXPY_GLSL, x, x, push_consts=[2.0])   # a dask array
        print(y.sum().compute())

Which device a worker uses, first that applies: the plugin's `device` argument; the
`SCOPEDGPU_DEVICE` variable in the worker's environment (an index or a name substring;
set it per worker when starting workers by hand, as one would CUDA_VISIBLE_DEVICES);
otherwise round-robin by the worker's name (LocalCluster names its workers 0, 1, ...)
over the devices of the best kind present (discrete GPUs before integrated ones before
the CPU), so that on a two-GPU host two workers take one GPU each.

The Manager is shared by every task on that worker (and by its threads: a Manager is
thread-safe), so pipelines compiled for one block are reused by the next; it is closed
when the worker closes. Each block's tensors, algorithm and sequence live in `with`
blocks inside the task: when a task returns, everything it allocated is back in the
worker's pool. A worker that dies takes its Manager with it (the device frees its
memory with the process); Dask reruns its tasks elsewhere.

Tasks that run outside a worker with the plugin (dask's threaded scheduler, or a worker
without it) use one process-wide Manager, opened on first use and closed at exit.
"""
from __future__ import annotations

import threading
import zlib
from typing import Any, Callable, Sequence as Seq

import numpy as np

import scopedgpu as sg
from scopedgpu._device import _RANK
from scopedgpu._settings import get as setting

try:
    import dask.array as da
    from distributed import WorkerPlugin, get_worker
except ImportError as exc:   # pragma: no cover - exercised only without the extra
    raise ImportError("scopedgpu.dask needs dask and distributed: "
                      "pip install 'scopedgpu[dask]'") from exc

__all__ = ["ManagerPlugin", "register", "manager", "spirv", "map_blocks", "run_kernel",
           "PLUGIN_NAME"]

PLUGIN_NAME = "scopedgpu"


def _worker_index(name: Any, address: str) -> int:
    """A small number per worker: its name when it is (or ends in) an integer, otherwise
    a hash of its address."""
    text = str(name)
    digits = text[len(text.rstrip("0123456789")):]
    return int(digits) if digits else zlib.crc32(address.encode())


def pick_device(index: int) -> int:
    """Round-robin over the devices of the best kind present: the device index for the
    worker numbered `index`."""
    infos = sg.devices()
    if not infos:
        raise sg.NoDeviceError("no Vulkan device")
    best = min(_RANK.get(d.type, 9) for d in infos)
    pool = [d.index for d in infos if _RANK.get(d.type, 9) == best]
    return pool[index % len(pool)]


class ManagerPlugin(WorkerPlugin):
    """Gives each worker one Manager (see the module docstring for which device), opened
    when the plugin is set up on the worker and closed when the worker closes."""

    name = PLUGIN_NAME

    def __init__(self, *, device: int | str | None = None, memory_limit: int | None = None,
                 debug: bool | None = None):
        self.device = device
        self.memory_limit = memory_limit
        self.debug = debug
        self.manager: sg.Manager | None = None

    def setup(self, worker: Any) -> None:
        device: int | str | None = self.device
        if device is None and setting("SCOPEDGPU_DEVICE") is None:
            device = pick_device(_worker_index(worker.name, worker.address))
        self.manager = sg.Manager(device, memory_limit=self.memory_limit, debug=self.debug)

    def teardown(self, worker: Any) -> None:
        if self.manager is not None:
            self.manager.close()    # waits for the worker's GPU work, then frees it all
            self.manager = None

    def __getstate__(self) -> dict:
        # The plugin travels from the client to each worker before setup: no manager yet.
        return {"device": self.device, "memory_limit": self.memory_limit, "debug": self.debug,
                "manager": None}


def register(client: Any, **kwargs: Any) -> None:
    """Registers a ManagerPlugin (keyword arguments: device, memory_limit, debug) on every
    worker of `client`'s cluster, present and future (a restarted worker gets one too)."""
    client.register_plugin(ManagerPlugin(**kwargs), name=PLUGIN_NAME)


_fallback: sg.Manager | None = None
_fallback_lock = threading.Lock()


def manager(worker: Any = None) -> sg.Manager:
    """The Manager of `worker`, by default the worker running the current task (in a
    function run by `client.run`, which is not a task, pass its `dask_worker` argument);
    outside such a worker, one process-wide Manager (default device), opened on first use."""
    global _fallback
    if worker is None:
        try:
            worker = get_worker()
        except ValueError:        # not inside a task on a worker
            worker = None
    plugin = None if worker is None else worker.plugins.get(PLUGIN_NAME)
    if plugin is not None and plugin.manager is not None:
        return plugin.manager
    with _fallback_lock:
        if _fallback is None or _fallback.closed:
            _fallback = sg.Manager()
        return _fallback


_compiled: dict[str, bytes] = {}


def spirv(kernel: str | bytes) -> bytes:
    """SPIR-V bytes of `kernel`: SPIR-V bytes as they are, GLSL source compiled once per
    process (and cached on disk by compile_glsl)."""
    if isinstance(kernel, (bytes, bytearray, memoryview)):
        return bytes(kernel)
    code = _compiled.get(kernel)
    if code is None:
        code = _compiled[kernel] = sg.compile_glsl(kernel)
    return code


def run_kernel(kernel: str | bytes, *blocks: np.ndarray, out_shape: Seq[int] | None = None,
               out_dtype: Any = None, push_consts: Any = None, spec_consts: Any = None,
               workgroup: Seq[int] | None = None, zero_output: bool = False,
               mgr: sg.Manager | None = None) -> np.ndarray:
    """Runs `kernel` once over numpy `blocks` on this worker's Manager and returns the
    output as a new numpy array. Bindings: the blocks in order, then the output (zero-
    filled; shape `out_shape`, default the first block's; dtype `out_dtype`, default the
    first block's). `workgroup` None: enough groups of the shader's local size to cover
    the first block. Everything it creates is destroyed before it returns."""
    mgr = mgr if mgr is not None else manager()
    code = spirv(kernel)
    first = np.asarray(blocks[0])
    shape = tuple(first.shape if out_shape is None else out_shape)
    dtype = first.dtype if out_dtype is None else np.dtype(out_dtype)
    if any(np.size(b) == 0 for b in blocks) or 0 in shape:
        return np.zeros(shape, dtype=dtype)   # an empty block: nothing to dispatch
    tensors: list[sg.Tensor] = []
    try:
        for b in blocks:
            tensors.append(mgr.tensor(np.ascontiguousarray(b)))
        out = mgr.empty(shape, dtype=dtype)
        tensors.append(out)
        with mgr.algorithm(tensors, code, workgroup=workgroup, spec_consts=spec_consts,
                           push_consts=push_consts) as algo:
            with mgr.sequence() as seq:
                seq.record(sg.OpTensorSyncDevice(tensors if zero_output else tensors[:-1]))
                seq.record(sg.OpAlgoDispatch(algo))
                seq.record(sg.OpTensorSyncLocal([out]))
                seq.eval()
        return out.numpy()
    finally:
        for t in tensors:
            t.destroy()


def map_blocks(kernel: str | bytes, *arrays: Any, out_shape: Callable[..., Seq[int]] | None = None,
               dtype: Any = None, push_consts: Any = None, spec_consts: Any = None,
               workgroup: Seq[int] | None = None, zero_output: bool = False,
               **kwargs: Any) -> Any:
    """A dask array: `kernel` run over each set of corresponding blocks of `arrays` (dask
    arrays with the same chunks), on the Manager of the worker that runs the block (see
    run_kernel for the bindings). `out_shape(*block_shapes)` gives a block's output shape
    when it is not the first block's; pass `chunks=` (and `drop_axis=`/`new_axis=`) to
    describe the result then, as with dask.array.map_blocks, which takes the other
    keyword arguments. GLSL source is compiled on the client, once."""
    code = spirv(kernel)
    out_dtype = np.dtype(dtype) if dtype is not None else arrays[0].dtype

    def block(*bs: np.ndarray) -> np.ndarray:
        shape = None if out_shape is None else tuple(out_shape(*(b.shape for b in bs)))
        return run_kernel(code, *bs, out_shape=shape, out_dtype=out_dtype,
                          push_consts=push_consts, spec_consts=spec_consts, workgroup=workgroup,
                          zero_output=zero_output)

    kwargs.setdefault("token", "scopedgpu-kernel")
    # Without meta, dask would call `block` on empty arrays here to learn the output type
    # (and open a Manager on the client).
    new, drop = kwargs.get("new_axis", ()), kwargs.get("drop_axis", ())
    ndim = arrays[0].ndim + len(np.atleast_1d(new)) - len(np.atleast_1d(drop))
    kwargs.setdefault("meta", np.empty((0,) * ndim, dtype=out_dtype))
    return da.map_blocks(block, *arrays, dtype=out_dtype, **kwargs)
