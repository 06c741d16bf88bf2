"""tensor_t with int32 and uint32 data: Collatz step counts (uint) and a signed
affine map (int), with the workgroup given explicitly."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

N = 1000
shader = """
#version 450
layout(local_size_x = 8) in;
layout(binding = 0) buffer Start { uint start[]; };
layout(binding = 1) buffer Steps { uint steps[]; };
layout(binding = 2) buffer Signed { int s[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    uint n = start[i];
    uint count = 0u;
    while (n != 1u) { n = (n % 2u == 0u) ? n / 2u : 3u * n + 1u; count++; }
    steps[i] = count;
    s[i] = s[i] * -3 + 7;
}
"""

mgr = kp.Manager()
start = mgr.tensor_t(np.arange(1, N + 1, dtype=np.uint32))
steps = mgr.tensor_t(np.zeros(N, dtype=np.uint32))
signed = mgr.tensor_t(np.arange(-N // 2, N // 2, dtype=np.int32))
params = [start, steps, signed]
algo = mgr.algorithm(params, scopedgpu.compile_glsl(shader), (N // 8, 1, 1))
(mgr.sequence()
    .record(kp.OpTensorSyncDevice(params))
    .record(kp.OpAlgoDispatch(algo))
    .record(kp.OpTensorSyncLocal([steps, signed]))
    .eval())

print(json.dumps({"dtypes": [str(t.data().dtype) for t in params],
                  "steps": steps.data().tolist(), "signed": signed.data().tolist()}))
