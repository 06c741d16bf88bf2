"""A storage tensor (device memory only) as the working buffer: copied in from a device
tensor, processed, copied out to a host tensor."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

N = 2048
shader = """
#version 450
layout(local_size_x = 128) in;
layout(binding = 0) buffer Work { float w[]; };
void main() { uint i = gl_GlobalInvocationID.x; w[i] = w[i] * 2.0 - 1.0; }
"""

mgr = kp.Manager()
src = mgr.tensor(np.arange(N, dtype=np.float32) % 50)
work = mgr.tensor(np.zeros(N, dtype=np.float32), kp.TensorTypes.storage)
dst = mgr.tensor(np.zeros(N, dtype=np.float32), kp.TensorTypes.host)
algo = mgr.algorithm([work], scopedgpu.compile_glsl(shader), (N // 128, 1, 1))
(mgr.sequence()
    .record(kp.OpTensorSyncDevice([src]))
    .record(kp.OpTensorCopy([src, work]))
    .record(kp.OpAlgoDispatch(algo))
    .record(kp.OpAlgoDispatch(algo))
    .record(kp.OpTensorCopy([work, dst]))
    .record(kp.OpTensorSyncLocal([dst]))
    .eval())

print(json.dumps({"kinds": [str(t.tensor_type()) for t in (src, work, dst)],
                  "dst": dst.data().tolist()}))
