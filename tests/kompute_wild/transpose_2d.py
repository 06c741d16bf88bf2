"""A 2D kernel: matrix transpose with 8x8 groups over a (rows, cols) grid, the sizes as
float push constants (kp's lists are floats) converted in the shader."""
import json

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

ROWS, COLS = 48, 80
shader = """
#version 450
layout(local_size_x = 8, local_size_y = 8) in;
layout(binding = 0) readonly buffer In { float m[]; };
layout(binding = 1) writeonly buffer Out { float t[]; };
layout(push_constant) uniform Dims { float rows; float cols; };
void main() {
    uint c = gl_GlobalInvocationID.x;
    uint r = gl_GlobalInvocationID.y;
    uint nr = uint(rows), nc = uint(cols);
    if (r < nr && c < nc) { t[c * nr + r] = m[r * nc + c]; }
}
"""

mgr = kp.Manager()
m = mgr.tensor(np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS))
t = mgr.tensor(np.zeros(ROWS * COLS, dtype=np.float32))
algo = mgr.algorithm([m, t], scopedgpu.compile_glsl(shader), (COLS // 8, ROWS // 8, 1),
                     [], [float(ROWS), float(COLS)])
(mgr.sequence()
    .record(kp.OpTensorSyncDevice([m]))
    .record(kp.OpAlgoDispatch(algo))
    .record(kp.OpTensorSyncLocal([t]))
    .eval())

print(json.dumps({"t": t.data().tolist()}))
