"""Embedding scopedgpu in a long-running service: one worker thread, one Manager for the
life of the process, requests served from a queue, and memory that stays flat.

The embedding table is uploaded once into a "storage" tensor (device memory only) and
stays resident. Each request (a batch of token-id sentences) gets its own tensors,
algorithm and sequence inside `with` blocks, so everything it allocated goes back to the
pool when the request is answered; the compiled pipeline is cached by the manager, so no
request compiles anything. The worker reports live objects (Manager.live_objects()),
pool bytes (Manager.memory_stats()) and the process RSS as it goes, and checks at the end
that all three are back where they were after warm-up.

    python examples/embedding_worker.py [--requests N] [--vocab V] [--dim D]
"""
from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
from concurrent.futures import Future

import numpy as np

import scopedgpu as sg

SHADER = """
#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer Table { float table[]; };     // vocab x dim
layout(set = 0, binding = 1) readonly buffer Ids { uint ids[]; };          // all tokens
layout(set = 0, binding = 2) readonly buffer Offsets { uint offsets[]; };  // batch + 1
layout(set = 0, binding = 3) buffer Out { float result[]; };               // batch x dim
layout(push_constant) uniform Params { uint dim; } p;
shared float partial[64];

// One workgroup per sentence: mean of its token embeddings, then L2-normalised.
void main() {
    uint s = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
    uint begin = offsets[s], end = offsets[s + 1u];
    float inv = 1.0 / float(max(end - begin, 1u));
    float sq = 0.0;
    for (uint d = lid; d < p.dim; d += 64u) {
        float acc = 0.0;
        for (uint t = begin; t < end; ++t) acc += table[ids[t] * p.dim + d];
        acc *= inv;
        result[s * p.dim + d] = acc;
        sq += acc * acc;
    }
    partial[lid] = sq;
    barrier();
    for (uint stride = 32u; stride > 0u; stride >>= 1) {
        if (lid < stride) partial[lid] += partial[lid + stride];
        barrier();
    }
    float scale = inversesqrt(max(partial[0], 1e-12));
    for (uint d = lid; d < p.dim; d += 64u) result[s * p.dim + d] *= scale;
}
"""

MiB = 1 << 20


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; elsewhere the peak from rusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class EmbeddingWorker:
    """Serves embed requests on its own thread with one Manager. submit() returns a
    Future; close() stops the thread and closes the manager (freeing the table)."""

    def __init__(self, table: np.ndarray, device: int | str | None = None):
        self._requests: queue.Queue = queue.Queue()
        self._ready = threading.Event()
        self._table = table
        self._device = device
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="embedding-worker")
        self._thread.start()
        self._ready.wait()
        if self.error is not None:
            raise self.error

    def submit(self, sentences: list[np.ndarray]) -> Future:
        fut: Future = Future()
        self._requests.put((sentences, fut))
        return fut

    def stats(self) -> Future:
        """Live objects, pool stats and RSS, measured on the worker thread between requests."""
        fut: Future = Future()
        self._requests.put(("stats", fut))
        return fut

    def close(self) -> None:
        self._requests.put(None)
        self._thread.join()

    # -- the worker thread ----------------------------------------------------------
    def _serve(self) -> None:
        try:
            mgr = sg.Manager(self._device)
        except BaseException as exc:
            self.error = exc
            self._ready.set()
            return
        with mgr:                                    # closed when the worker stops
            self.device = mgr.device
            self.dim = self._table.shape[1]
            table = mgr.tensor(self._table, kind="storage")   # resident for the worker's life
            mgr.empty_cache()             # give the upload's staging block back to the device
            spirv = sg.compile_glsl(SHADER)
            self._ready.set()
            while True:
                item = self._requests.get()
                if item is None:
                    break
                what, fut = item
                try:
                    if what == "stats":
                        fut.set_result((mgr.live_objects(), mgr.memory_stats(), rss_bytes()))
                    else:
                        fut.set_result(self._embed(mgr, table, spirv, what))
                except BaseException as exc:         # answer the request, keep serving
                    fut.set_exception(exc)

    def _embed(self, mgr: sg.Manager, table: sg.Tensor, spirv: bytes,
               sentences: list[np.ndarray]) -> np.ndarray:
        lengths = [len(s) for s in sentences]
        ids = np.concatenate(sentences).astype(np.uint32)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint32)
        # Everything this request allocates is freed at the end of these blocks.
        with mgr.tensor(ids) as t_ids, mgr.tensor(offsets) as t_off, \
                mgr.empty((len(sentences), self.dim)) as t_out:
            with mgr.algorithm([table, t_ids, t_off, t_out], spirv,
                               workgroup=(len(sentences), 1, 1),
                               push_consts=np.array([self.dim], dtype=np.uint32)) as algo:
                mgr.run(sg.OpTensorSyncDevice([t_ids, t_off]), sg.OpAlgoDispatch(algo),
                        sg.OpTensorSyncLocal([t_out]))
            return t_out.numpy()


def embed_numpy(table: np.ndarray, sentences: list[np.ndarray]) -> np.ndarray:
    pooled = np.stack([table[s].mean(axis=0) for s in sentences])
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=5000)
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--device", default=None, help="device index or name substring")
    args = p.parse_args(argv)
    device = int(args.device) if args.device and args.device.isdigit() else args.device

    rng = np.random.default_rng(0)
    table = rng.standard_normal((args.vocab, args.dim), dtype=np.float32)
    worker = EmbeddingWorker(table, device)
    print(f"device: {worker.device}")
    print(f"table {args.vocab} x {args.dim} float32 resident; serving {args.requests} "
          "requests of 1-32 sentences of 1-24 tokens")

    def make_request() -> list[np.ndarray]:
        return [rng.integers(0, args.vocab, size=int(rng.integers(1, 25)))
                for _ in range(int(rng.integers(1, 33)))]

    ok = True
    warmup = max(1, min(50, args.requests // 10))
    baseline = None
    report_every = max(1, args.requests // 5)
    keys = ("tensors", "algorithms", "sequences", "buffers", "memory_blocks", "pipelines")
    try:
        for i in range(1, args.requests + 1):
            sentences = make_request()
            got = worker.submit(sentences).result()
            if not np.allclose(got, embed_numpy(table, sentences), rtol=1e-4, atol=1e-5):
                ok = False
                print(f"request {i}: MISMATCH")
            if i == warmup or i % report_every == 0:
                live, mem, rss = worker.stats().result()
                if i == warmup:
                    baseline = (live, mem, rss)
                counts = ", ".join(f"{k} {live[k]}" for k in keys)
                print(f"after {i:6d} requests: {counts}; pool allocated "
                      f"{mem['allocated_bytes'] / MiB:.2f} MiB, reserved "
                      f"{mem['reserved_bytes'] / MiB:.1f} MiB; RSS {rss / MiB:.1f} MiB")
        live, mem, rss = worker.stats().result()
    finally:
        worker.close()
    assert baseline is not None
    b_live, b_mem, b_rss = baseline
    flat = (all(live[k] == b_live[k] for k in keys)
            and mem["allocated_bytes"] == b_mem["allocated_bytes"]
            and rss - b_rss < 16 * MiB)
    print(f"since warm-up: live objects {'unchanged' if flat else 'CHANGED'}, pool allocated "
          f"{(mem['allocated_bytes'] - b_mem['allocated_bytes']) / MiB:+.2f} MiB, "
          f"RSS {(rss - b_rss) / MiB:+.1f} MiB")
    print("memory flat: " + ("OK" if flat else "GREW"))
    print("result matches numpy: " + ("OK" if ok else "MISMATCH"))
    return 0 if ok and flat else 1


if __name__ == "__main__":
    sys.exit(main())
