"""A kp program that logs through the root handler `import kp` installs, and raises
kp's logger to see its warnings."""
import json
import logging

import numpy as np

import scopedgpu
import scopedgpu.kp as kp

logger = logging.getLogger("myapp")
logging.getLogger().setLevel(logging.INFO)
logging.getLogger("kp").setLevel(logging.DEBUG)

shader = """
#version 450
layout(local_size_x = 1) in;
layout(binding = 0) buffer Data { float v[]; };
void main() { uint i = gl_GlobalInvocationID.x; v[i] = v[i] * v[i]; }
"""

logger.info("starting on %s", kp.Manager().get_device_properties()["device_name"])
mgr = kp.Manager()
t = mgr.tensor(np.arange(10, dtype=np.float32))
algo = mgr.algorithm([t], scopedgpu.compile_glsl(shader))
seq = mgr.sequence()
seq.eval_await()   # nothing to wait for: kp logs a warning
seq.record(kp.OpTensorSyncDevice([t])).record(kp.OpAlgoDispatch(algo))
seq.record(kp.OpTensorSyncLocal([t])).eval()
logger.info("squares computed: %d", t.size())
logging.debug("hidden: the root logger is at INFO")

print(json.dumps({"v": t.data().tolist()}))
