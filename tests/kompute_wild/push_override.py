"""One algorithm dispatched several times in a sequence, each dispatch overriding the
push constants (lists, and a numpy float32 array)."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

shader = """
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer Buf { float buf[]; };
layout(push_constant) uniform PushConstants { float scale; float offset; } pc;
void main() {
    uint i = gl_GlobalInvocationID.x;
    buf[i] = buf[i] * pc.scale + pc.offset;
}
"""

mgr = kp.Manager()
data = mgr.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
algo = mgr.algorithm([data], scopedgpu.compile_glsl(shader), (8, 1, 1), [], [1.0, 0.0])

(mgr.sequence()
    .record(kp.OpTensorSyncDevice([data]))
    .record(kp.OpAlgoDispatch(algo))
    .record(kp.OpAlgoDispatch(algo, [2.0, 3.0]))
    .record(kp.OpAlgoDispatch(algo, [0.5, -1.0]))
    .record(kp.OpAlgoDispatch(algo, np.array([3.0, 1.0], dtype=np.float32)))
    .record(kp.OpTensorSyncLocal([data]))
    .eval())

print(json.dumps({"data": data.data().tolist()}))
