"""kp's README example at scale: array multiplication with the default workgroup (one
group of local_size_x = 1 per element, as kp dispatches tensors[0].size() groups)."""
import json
import sys

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

N = int(sys.argv[1]) if len(sys.argv) > 1 else 65_535

shader = """
#version 450
layout (local_size_x = 1) in;
layout(set = 0, binding = 0) buffer buf_in_a { float in_a[]; };
layout(set = 0, binding = 1) buffer buf_in_b { float in_b[]; };
layout(set = 0, binding = 2) buffer buf_out { float out_a[]; };
void main() {
    uint index = gl_GlobalInvocationID.x;
    out_a[index] = in_a[index] * in_b[index] + 1.0;
}
"""

mgr = kp.Manager()
tensor_in_a = mgr.tensor(np.arange(N) % 97)
tensor_in_b = mgr.tensor(np.arange(N) % 13 - 6)
tensor_out = mgr.tensor(np.zeros(N))
params = [tensor_in_a, tensor_in_b, tensor_out]

algo = mgr.algorithm(params, scopedgpu.compile_glsl(shader))
(mgr.sequence()
    .record(kp.OpTensorSyncDevice(params))
    .record(kp.OpAlgoDispatch(algo))
    .record(kp.OpTensorSyncLocal([tensor_out]))
    .eval())

print(json.dumps({"out": tensor_out.data().tolist()}))
