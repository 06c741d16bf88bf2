"""Specialization constants: a list of floats for float constants, a numpy uint32 array
for a uint constant (kp passes both bit for bit)."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

shader_f = """
#version 450
layout(local_size_x = 1) in;
layout(constant_id = 0) const float scale = 1.0;
layout(constant_id = 1) const float bias = 0.0;
layout(binding = 0) buffer Data { float v[]; };
void main() { uint i = gl_GlobalInvocationID.x; v[i] = v[i] * scale + bias; }
"""
shader_u = """
#version 450
layout(local_size_x = 1) in;
layout(constant_id = 0) const uint modulus = 2;
layout(binding = 0) buffer Data { uint v[]; };
void main() { uint i = gl_GlobalInvocationID.x; v[i] = v[i] % modulus; }
"""

mgr = kp.Manager()
f = mgr.tensor(np.arange(16, dtype=np.float32))
u = mgr.tensor_t(np.arange(100, 132, dtype=np.uint32))
algo_f = mgr.algorithm([f], scopedgpu.compile_glsl(shader_f), spec_consts=[3.0, 0.25])
algo_u = mgr.algorithm([u], scopedgpu.compile_glsl(shader_u),
                       spec_consts=np.array([7], dtype=np.uint32))
(mgr.sequence()
    .record(kp.OpTensorSyncDevice([f, u]))
    .record(kp.OpAlgoDispatch(algo_f))
    .record(kp.OpAlgoDispatch(algo_u))
    .record(kp.OpTensorSyncLocal([f, u]))
    .eval())

print(json.dumps({"f": f.data().tolist(), "u": u.data().tolist()}))
