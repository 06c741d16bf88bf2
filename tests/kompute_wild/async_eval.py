"""Two sequences evaluated at once with eval_async(), then awaited; is_running() in
between (kp: true until eval_await() returns)."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

N = 4096
shader = """
#version 450
layout(local_size_x = 64) in;
layout(binding = 0) buffer Data { float v[]; };
layout(constant_id = 0) const float factor = 1.0;
void main() {
    uint i = gl_GlobalInvocationID.x;
    float acc = v[i];
    for (int k = 0; k < 64; k++) { acc = acc * factor + 1.0; }
    v[i] = acc;
}
"""
spirv = scopedgpu.compile_glsl(shader)

mgr = kp.Manager()
a = mgr.tensor(np.arange(N, dtype=np.float32) / N)
b = mgr.tensor(np.ones(N, dtype=np.float32))
algo_a = mgr.algorithm([a], spirv, (N // 64, 1, 1), [0.5])
algo_b = mgr.algorithm([b], spirv, (N // 64, 1, 1), [0.25])

mgr.sequence().eval_async(kp.OpTensorSyncDevice([a, b])).eval_await()

sq_a = mgr.sequence().record(kp.OpAlgoDispatch(algo_a)).record(kp.OpTensorSyncLocal([a]))
sq_b = mgr.sequence().record(kp.OpAlgoDispatch(algo_b)).record(kp.OpTensorSyncLocal([b]))
sq_a.eval_async()
sq_b.eval_async()
running = [sq_a.is_running(), sq_b.is_running()]
sq_a.eval_await()
sq_b.eval_await(10_000_000_000)
done = [sq_a.is_running(), sq_b.is_running()]

print(json.dumps({"running": running, "done": done, "a": a.data().tolist(),
                  "b": b.data().tolist()}))
