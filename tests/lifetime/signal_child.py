"""Real Ctrl-C during Manager.stream(), in a child process of tests/lifetime/test_signals.py
(a signal storm must not reach pytest, and a crash is then a failing test, not a dead run).

Unlike the line sweeps of test_interrupts.py (a tracer raising at a chosen line of
scopedgpu's code), these send SIGINT to the main thread from another thread at random
moments, so the KeyboardInterrupt comes wherever CPython checks for signals: inside the
pool, the door to C, numpy, the executor and the threading module too.

    python signal_child.py single MODE COUNT SEED   # one SIGINT per stream() call
    python signal_child.py storm MODE SECONDS SEED  # a SIGINT every 0.5 to 10 ms
    python signal_child.py latency MODE             # Ctrl-C in a stream whose kernel never ends

MODE: stage, import, auto (SCOPEDGPU_STREAM_HOST) or pinned (the arrays in
Manager.pinned(), copied otherwise). Prints one JSON line of figures.
"""
from __future__ import annotations

import collections
import gc
import json
import os
import random
import signal
import statistics
import sys
import threading
import time

import numpy as np

import scopedgpu as sg
from scopedgpu._shaders import builtin_spirv
from scopedgpu.manager import live_vulkan_objects

MAIN = threading.main_thread().ident


def _kill() -> None:
    signal.pthread_kill(MAIN, signal.SIGINT)   # type: ignore[arg-type]


def _fire_unless(done: threading.Event, delay: float) -> None:
    if not done.wait(delay):
        _kill()


def _state(m: sg.Manager):
    """Once the GPU work an interrupted stream left has completed (wait_idle), and the
    next call freed what it left."""
    gc.collect()
    m.wait_idle()
    m.empty_cache()
    counts = m.live_objects()
    return counts, m.memory_stats()["allocated_bytes"], live_vulkan_objects()


def _streamer(m: sg.Manager, mode: str):
    saxpy = builtin_spirv("saxpy")
    x = np.arange(1 << 15, dtype=np.float32)
    y = np.ones(1 << 15, dtype=np.float32)

    def action():
        y[:] = 1
        if mode == "pinned":
            with m.pinned(x, y):
                m.stream(saxpy, inputs=[x, y], outputs=[y], push_consts=[2.0],
                         chunk_bytes=8192, depth=3, workers=2)
        else:
            m.stream(saxpy, inputs=[x, y], outputs=[y], push_consts=[2.0],
                     chunk_bytes=8192, depth=3, workers=2)

    def correct() -> bool:
        return bool(np.array_equal(y, 2 * x + 1))

    return action, correct


def _time_one(action) -> float:
    t = time.perf_counter()
    action()
    return time.perf_counter() - t


def single(mode: str, count: int, seed: int) -> dict:
    """COUNT stream() calls, each sent one SIGINT at a random moment of its expected
    run time: after each, the manager's live objects, pool bytes and the process's
    Vulkan objects are back to their baseline."""
    rng = random.Random(seed)
    m = sg.Manager()
    action, correct = _streamer(m, mode)
    action()
    # The delays span the run time of the last 9 calls that ran whole (a median, x 1.2):
    # a run time measured once, under a passing load (other processes on the GPU or the
    # CPU), would leave most delays past the end of every later call.
    recent = collections.deque((_time_one(action) for _ in range(9)), maxlen=9)
    base = _state(m)
    landed = after = leaks = 0
    where: list[str] = []
    for _ in range(count):
        done = threading.Event()
        delay = rng.uniform(0, statistics.median(recent) * 1.2)

        t = threading.Thread(target=_fire_unless, args=(done, delay))
        finished = False
        try:
            t.start()
            t0 = time.perf_counter()
            action()
            finished = True
            recent.append(time.perf_counter() - t0)
            done.set()
            t.join()
            time.sleep(0.002)    # a signal sent just before the join lands by now
        except KeyboardInterrupt:
            if finished:
                after += 1
            else:
                landed += 1
        t.join()
        now = _state(m)
        if now != base:
            leaks += 1
            where.append(repr({k: (base[0].get(k), v) for k, v in now[0].items()
                               if base[0].get(k) != v}) + f" bytes {base[1]}->{now[1]}")
            base = now
    action()
    ok = correct()
    m.close()
    return {"mode": mode, "interrupts": count, "in_stream": landed, "after": after,
            "leaks": leaks, "leak_examples": where[:5], "correct_after": ok,
            "alive_after_close": _nonzero(live_vulkan_objects())}


def _nonzero(counts: dict) -> dict:
    return {k: v for k, v in counts.items() if v}


def storm(mode: str, seconds: float, seed: int) -> dict:
    """stream() again and again while a thread sends a SIGINT every 0.5 to 10 ms; then
    close(): no Vulkan object of the process may be left."""
    rng = random.Random(seed)
    stop = threading.Event()
    sent = [0]

    go = threading.Event()

    def storm_thread() -> None:
        go.wait()
        while not stop.wait(rng.uniform(0.0005, 0.010)):
            _kill()
            sent[0] += 1

    m = sg.Manager()
    action, correct = _streamer(m, mode)
    calls = completed = 0
    t = threading.Thread(target=storm_thread)
    end = time.monotonic() + seconds
    # Nested handlers: an interrupt landing in an `except` clause or a loop test of this
    # harness is caught one level up, and the loop goes on.
    t.start()
    while True:
        try:
            while True:
                try:
                    go.set()
                    while time.monotonic() < end:
                        try:
                            calls += 1
                            action()
                            completed += 1
                        except KeyboardInterrupt:
                            pass
                    stop.set()
                    t.join()
                    time.sleep(0.02)
                    break
                except KeyboardInterrupt:
                    pass
            break
        except KeyboardInterrupt:
            pass
    stop.set()
    t.join()
    gc.collect()
    before_close = _nonzero(m.live_objects())
    action()       # the manager still works
    ok = correct()
    m.close()
    return {"mode": mode, "seconds": seconds, "signals": sent[0], "calls": calls,
            "completed": completed, "correct_after": ok, "live_before_close": before_close,
            "alive_after_close": _nonzero(live_vulkan_objects())}


def latency(mode: str) -> dict:
    """Ctrl-C while a stream's kernel never ends: how long until the caller sees it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from endless import ENDLESS, FLAG_GLSL
    m = sg.Manager(wait_timeout=1.0)
    spirv = sg.compile_glsl(FLAG_GLSL)
    x = np.zeros(1 << 12, dtype=np.uint32)
    waits = []
    for delay in (0.05, 0.2, 0.5):
        threading.Timer(delay, _kill).start()
        t = time.perf_counter()
        try:
            m.stream(spirv, inputs=[x], outputs=[x], workgroup=ENDLESS, chunk_bytes=4096,
                     depth=3, workers=2)
        except KeyboardInterrupt:
            waits.append(time.perf_counter() - t - delay)
    m.close()
    return {"mode": mode, "latencies": waits}


def main() -> None:
    kind, mode = sys.argv[1], sys.argv[2]
    if mode in ("stage", "import", "auto"):
        os.environ["SCOPEDGPU_STREAM_HOST"] = mode
    if kind == "single":
        out = single(mode, int(sys.argv[3]), int(sys.argv[4]))
    elif kind == "storm":
        out = storm(mode, float(sys.argv[3]), int(sys.argv[4]))
    else:
        out = latency(mode)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
