import kp
import numpy as np

from .utils import compile_source


def test_array_multiplication():

    # 1. Create Kompute Manager (selects device 0 by default)
    mgr = kp.Manager()

    # 2. Create Kompute Tensors to hold data
    tensor_in_a = mgr.tensor(np.array([2, 2, 2]))
    tensor_in_b = mgr.tensor(np.array([1, 2, 3]))
    tensor_out = mgr.tensor(np.array([0, 0, 0]))

    params = [tensor_in_a, tensor_in_b, tensor_out]

    # 4. Define the multiplication shader code to run on the GPU
    # scopedgpu: was a pyshader function (compute_mult), the same shader in GLSL
    compute_mult = compile_source("""
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer Data1 { float data1[]; };
layout(set = 0, binding = 1) buffer Data2 { float data2[]; };
layout(set = 0, binding = 2) buffer Data3 { float data3[]; };
void main() {
    int i = int(gl_GlobalInvocationID.x);
    data3[i] = data1[i] * data2[i];
}
""")

    (mgr.sequence()
        .record(kp.OpTensorSyncDevice(params))
        .record(kp.OpAlgoDispatch(mgr.algorithm(params, compute_mult)))
        .record(kp.OpTensorSyncLocal([tensor_out]))
        .eval())

    assert tensor_out.data().tolist() == [2.0, 4.0, 6.0]
    assert np.all(tensor_out.data() == [2.0, 4.0, 6.0])
