"""saxpy over float tensors read as vec4 buffers, 64 invocations per group, the scale
as a push constant: once as given to the algorithm, once overridden."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

N = 16384
shader = """
#version 450
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer X { vec4 x[]; };
layout(binding = 1) buffer Y { vec4 y[]; };
layout(push_constant) uniform Params { float a; } params;
void main() {
    uint i = gl_GlobalInvocationID.x;
    y[i] = params.a * x[i] + y[i];
}
"""

mgr = kp.Manager()
x = mgr.tensor(np.linspace(-1.0, 1.0, N, dtype=np.float32))
y = mgr.tensor(np.full(N, 0.5, dtype=np.float32))
algo = mgr.algorithm([x, y], scopedgpu.compile_glsl(shader), [N // 4 // 64, 1, 1], [], [2.0])

seq = mgr.sequence()
seq.record(kp.OpTensorSyncDevice([x, y]))
seq.record(kp.OpAlgoDispatch(algo))
seq.record(kp.OpAlgoDispatch(algo, [-0.25]))
seq.record(kp.OpTensorSyncLocal([y]))
seq.eval()

print(json.dumps({"y": y.data().tolist()}))
