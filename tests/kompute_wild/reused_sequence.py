"""The logistic-regression pattern: one sequence recorded once and evaluated in a loop,
the host updating an input between evaluations and reading an output after each."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

N = 512
shader = """
#version 450
layout(local_size_x = 1) in;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) buffer W { float w[]; };
layout(binding = 2) buffer Out { float o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    o[i] = x[i] * w[0];
    x[i] = x[i] + 1.0;
}
"""

mgr = kp.Manager()
x = mgr.tensor(np.zeros(N))
w = mgr.tensor([1.0])
out = mgr.tensor(np.zeros(N))
algo = mgr.algorithm([x, w, out], scopedgpu.compile_glsl(shader))

mgr.sequence().eval(kp.OpTensorSyncDevice([x]))
seq = (mgr.sequence()
       .record(kp.OpTensorSyncDevice([w]))
       .record(kp.OpAlgoDispatch(algo))
       .record(kp.OpTensorSyncLocal([out, x])))
sums = []
for it in range(12):
    w.data()[0] = 0.5 * it
    seq.eval()
    sums.append(float(out.data().sum()))
seq.rerecord()
w.data()[0] = -1.0
seq.eval()

print(json.dumps({"sums": sums, "last": out.data().tolist(), "x": x.data().tolist()}))
