"""The fuzz worker: a child process that receives SPIR-V modules and, for each, creates an
algorithm through the public API and, when that succeeds, dispatches it; a crash or a
hang ends this process only, and the parent (harness.py) sees it, saves the input and
starts a new worker.

Protocol: the parent writes each case as a 4-byte little-endian length and the bytes (a
length of 0xFFFFFFFF ends the worker); the worker answers with lines: "S <stage>" before each
stage that may crash or hang, then "R <json>" with the outcome.

Replay a saved case in this process (a crash is then the interpreter's):
    PYTHONPATH=. python tests/fuzz/worker.py --replay build/fuzz-crashes/crash-....spv
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
import warnings
from typing import Any, BinaryIO

import numpy as np

import scopedgpu as sg
from scopedgpu._spirv import reflect

try:
    from scopedgpu import _spirv_val
except ImportError:
    _spirv_val = None  # type: ignore[assignment]

N = 1024            # elements per tensor: enough for one workgroup of any built-in
MAX_BINDINGS = 16   # tensors bound at most (binding i is tensors[i])
END = 0xFFFFFFFF    # the length that ends the worker
# A dispatch of one workgroup takes milliseconds; one still running after this is
# counted as endless (the stage timeout in harness.py is for hangs in host calls).
DISPATCH_SECONDS = float(os.environ.get("SCOPEDGPU_FUZZ_DISPATCH_SECONDS", "10"))
_DTYPES = {("float", 32): np.float32, ("int", 32): np.int32, ("uint", 32): np.uint32,
           ("float", 64): np.float64, ("int", 64): np.int64, ("uint", 64): np.uint64,
           ("float", 16): np.float16, ("int", 16): np.int16, ("uint", 16): np.uint16,
           ("int", 8): np.int8, ("uint", 8): np.uint8}


def leak_counts(mgr: sg.Manager, collect: bool = True) -> dict[str, int]:
    if collect:
        gc.collect()
    mgr.empty_cache()
    counts = mgr.live_objects()
    counts.update({f"process_{k}": v for k, v in sg.live_vulkan_objects().items()})
    return counts


def classify(spirv: bytes, device: sg.DeviceInfo, message: str) -> str:
    """Which check refused the module: the validator, the structural, interface or
    capability checks (all in scopedgpu._spirv_val, whose verdict is cached), a later one
    (reflection, limits) or the driver itself (a module that passed every check)."""
    api = tuple(int(x) for x in device.api_version.split(".")[:2])
    if _spirv_val is None:    # scopedgpu before its SPIR-V checks (to show what they fix)
        return "rejected_driver" if "the driver rejected" in message else "rejected_other"
    key = (hashlib.sha256(spirv).digest(), api, _spirv_val.device_features(device))
    verdict = _spirv_val._verdicts.get(key)
    if verdict is None:
        return "rejected_driver" if "the driver rejected" in message else "rejected_other"
    if "SPIR-V validator" in verdict:
        return "rejected_validator"
    if "SPIR-V capability" in verdict:
        return "rejected_capability"
    return "rejected_interface" if "not a built-in" in verdict else "rejected_structure"


def run_case(mgr: sg.Manager, spirv: bytes, stage: Any) -> dict[str, Any]:
    """Creates an algorithm from `spirv` over tensors that fit its declared bindings and
    dispatches it once; returns the outcome. Every object is destroyed before return."""
    try:
        info = reflect(spirv)
    except sg.ShaderError:
        info = None
    tensors = []
    push = None
    if info is not None:
        # One tensor for every binding number up to the highest the module declares: a
        # gap (a binding the shader does not use) gets a float32 tensor. A highest
        # binding of MAX_BINDINGS or more is refused (ShaderError: too few tensors).
        for b in range(min(max(info.bindings, default=-1) + 1, MAX_BINDINGS)):
            dt = _DTYPES.get(info.element_types.get(b, ("float", 32)), np.float32)
            try:
                tensors.append(mgr.tensor(np.zeros(N, dt)))
            except TypeError:     # a dtype this device lacks
                tensors.append(mgr.tensor(np.zeros(N, np.float32)))
        if 0 < info.push_constant_size <= 256:
            push = np.zeros(info.push_constant_size, np.uint8)
    if not tensors:
        tensors.append(mgr.tensor(np.zeros(N, np.float32)))
    endless = False
    try:
        stage("create")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", sg.DtypeWarning)
                algo = mgr.algorithm(tensors, spirv, workgroup=(1, 1, 1), push_consts=push)
        except sg.ShaderError as exc:
            return {"outcome": classify(spirv, mgr.device, str(exc)), "message": str(exc)[:600]}
        except sg.ValidationError as exc:
            # debug mode: the validation layer refused what the checks let through (a
            # typed error, counted apart: without the layer the driver gets the module)
            return {"outcome": "rejected_layer", "message": str(exc)[:600]}
        except (ValueError, TypeError) as exc:
            # the module's declarations do not fit these tensors (sizes, counts): a
            # refusal before any Vulkan call, like a ShaderError
            return {"outcome": "rejected_other", "message": f"{type(exc).__name__}: {exc}"[:300]}
        stage("dispatch")
        seq = mgr.sequence()
        seq.record(sg.OpAlgoDispatch(algo))
        try:
            seq.eval_async()
            done = seq.eval_await(DISPATCH_SECONDS)
        except sg.DeviceError as exc:
            if "VK_ERROR_DEVICE_LOST" not in str(exc):
                raise
            # A valid module that faults on a real GPU (an index out of bounds: no check
            # can know, see docs/troubleshooting.md): the driver gives the device up and
            # scopedgpu says so with a DeviceError. Nothing more runs on it: a new worker.
            endless = True   # (nothing is freed on a lost device either)
            return {"outcome": "device_lost", "message": str(exc)[:300], "restart": True}
        if not done:
            # A valid module may loop for ever (a mutated loop bound): the device still
            # runs it, so nothing it uses can be freed. The parent ends this worker.
            endless = True
            return {"outcome": "endless", "restart": True}
        seq.destroy()
        algo.destroy()
        return {"outcome": "dispatched"}
    finally:
        if not endless:
            for t in tensors:
                t.destroy()


def _read(stream: BinaryIO, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def serve() -> int:
    inp = sys.stdin.buffer
    out = sys.stdout
    debug = os.environ.get("SCOPEDGPU_DEBUG", "") not in ("", "0")
    mgr = sg.Manager(debug=debug or None)
    baseline = leak_counts(mgr)

    def stage(name: str) -> None:
        out.write(f"S {name}\n")
        out.flush()

    stage("ready")
    while True:
        try:
            n = int.from_bytes(_read(inp, 4), "little")
            if n == END:
                break
            spirv = _read(inp, n)
        except EOFError:
            break
        try:
            res = run_case(mgr, spirv, stage)
        except Exception as exc:     # not a refusal: the parent fails the case
            res = {"outcome": "error", "message": f"{type(exc).__name__}: {exc}"[:2000]}
        if res.get("restart"):
            out.write("R " + json.dumps(res) + "\n")
            out.flush()
            os._exit(0)   # no teardown: the device still runs the endless dispatch
        after = leak_counts(mgr, collect=False)   # every object was destroyed explicitly
        if after != baseline:
            after = leak_counts(mgr)              # unless a cycle still holds one
        if after != baseline:
            res["leak"] = {k: (baseline.get(k), v) for k, v in after.items()
                           if baseline.get(k) != v}
            baseline = after          # report each leak once
        out.write("R " + json.dumps(res) + "\n")
        out.flush()
    mgr.close()
    return 0


def replay(path: str) -> int:
    with open(path, "rb") as f:
        spirv = f.read()
    with sg.Manager() as mgr:
        res = run_case(mgr, spirv, lambda name: print(f"stage: {name}", flush=True))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--replay":
        sys.exit(replay(sys.argv[2]))
    sys.exit(serve())
