"""kp.OpMult with an algorithm it rebuilds, over device and host tensors; the tensor
types printed as kp prints them."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

mgr = kp.Manager()
a = mgr.tensor(np.arange(1, 257, dtype=np.float32))
b = mgr.tensor(np.linspace(0.0, 2.0, 256, dtype=np.float32), kp.TensorTypes.host)
out = mgr.tensor(np.zeros(256, dtype=np.float32))

placeholder = scopedgpu.compile_glsl("""
#version 450
layout(local_size_x = 1) in;
layout(binding = 0) buffer A { float a[]; };
void main() { }
""")
algo = mgr.algorithm([a], placeholder)
seq = mgr.sequence()
seq.record(kp.OpTensorSyncDevice([a, b, out]))
seq.record(kp.OpMult([a, b, out], algo))
seq.record(kp.OpTensorSyncLocal([out]))
seq.eval()

types = [str(t.tensor_type()) for t in (a, b, out)]
print(json.dumps({"types": types, "host": f"{kp.host}", "out": out.data().tolist()}))
