"""GPU timestamps of a sequence (one before the first op, one after each), as a kp
profiling script takes them."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

shader = """
#version 450
layout(local_size_x = 32) in;
layout(binding = 0) buffer Data { float v[]; };
void main() { uint i = gl_GlobalInvocationID.x; v[i] = sqrt(v[i]) + 1.0; }
"""

mgr = kp.Manager()
props = mgr.get_device_properties()
t = mgr.tensor(np.arange(1024, dtype=np.float32))
algo = mgr.algorithm([t], scopedgpu.compile_glsl(shader), (1024 // 32, 1, 1))

seq = mgr.sequence(total_timestamps=16)
seq.record(kp.OpTensorSyncDevice([t]))
seq.record(kp.OpAlgoDispatch(algo))
seq.record(kp.OpAlgoDispatch(algo))
seq.record(kp.OpTensorSyncLocal([t]))
seq.eval()
stamps = seq.get_timestamps()
deltas = [b - a for a, b in zip(stamps, stamps[1:])]

print(json.dumps({"supported": props["timestamps_supported"], "count": len(stamps),
                  "ints": all(isinstance(s, int) for s in stamps),
                  "nondecreasing": all(d >= 0 for d in deltas), "v": t.data().tolist()}))
