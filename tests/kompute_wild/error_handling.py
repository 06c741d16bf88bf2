"""A kp program that tries a device index and falls back, and guards its calls with
`except RuntimeError`, as kp raised it."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

try:
    mgr = kp.Manager(42)
    fallback = False
except RuntimeError:
    mgr = kp.Manager(0)
    fallback = True

a = mgr.tensor([1.0, 2.0, 3.0])
b = mgr.tensor([4.0, 5.0, 6.0, 7.0])
shader = """
#version 450
layout(local_size_x = 1) in;
layout(binding = 0) buffer A { float a[]; };
void main() { a[gl_GlobalInvocationID.x] *= 10.0; }
"""
algo = mgr.algorithm([a], scopedgpu.compile_glsl(shader))

caught = {}
attempts = {
    "queue": lambda: mgr.sequence(queue_index=4),
    "empty": lambda: mgr.tensor([]),
    "copy_sizes": lambda: kp.OpTensorCopy([a, b]),
    "copy_one": lambda: kp.OpTensorCopy([a]),
    "mult_two": lambda: kp.OpMult([a, b], algo),
    "dtype": lambda: mgr.tensor_t(np.array([1, 2], dtype=np.int16)),
    "push_dtype": lambda: kp.OpAlgoDispatch(algo, np.array([1], dtype=np.int8)),
    "no_timestamps": lambda: mgr.sequence().get_timestamps(),
}
for name, attempt in attempts.items():
    try:
        attempt()
        caught[name] = False
    except RuntimeError:
        caught[name] = True

(mgr.sequence()
    .record(kp.OpTensorSyncDevice([a]))
    .record(kp.OpAlgoDispatch(algo))
    .record(kp.OpTensorSyncLocal([a]))
    .eval())
print(json.dumps({"fallback": fallback, "caught": caught, "a": a.data().tolist()}))
