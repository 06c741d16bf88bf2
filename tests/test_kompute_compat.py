"""Kompute 0.9.0's Python tests (python/test/ of the kp sdist; tests/kompute/ holds them
as shipped, run through scopedgpu.kp), moved to scopedgpu's native API with exactly the
edits listed in docs/migrating-from-kompute.md, "Path 2", and no others. Each edit is
marked `# migration N` where it occurs; every assertion is Kompute's.

1. `import kp` -> `import scopedgpu as sg` (kp.X -> sg.X).
2. kp's compile_source helper and pyshader -> GLSL through sg.compile_glsl.
3. `mgr.tensor(array)` keeps the array's dtype: float32 arrays where kp converted.
4. `mgr.tensor(array)` keeps the array's shape: `.data()` -> `.data().ravel()` where kp's
   flat data is compared.
5. `tensor.size()` -> `tensor.size`.
6. `x.is_init()` -> `not x.destroyed`.
7. `mgr.destroy()` -> `mgr.close()`.
8. `td.base` (the tensor behind a data() array) -> the tensor itself, `t`; `del t` goes,
   since in kp the array kept the tensor alive anyway.
9. `mgr.get_device_properties()` -> `mgr.device` and `mgr.list_devices()` ->
   `sg.devices()`: DeviceInfo objects; `"device_name" in d` -> `hasattr(d, "name")`.
10. binding a tensor of another element type on purpose -> `reinterpret=True`.
"""
from __future__ import annotations

import gc
import logging
import os

import numpy as np
import pytest

import scopedgpu as sg  # migration 1
from scopedgpu.manager import live_vulkan_objects

compile_source = sg.compile_glsl  # migration 2: kp's tests/utils.py compile_source


@pytest.fixture(autouse=True)
def no_leaks():
    """Every Vulkan object a test made is freed once its objects are unreachable."""
    gc.collect()
    before = live_vulkan_objects()
    yield
    gc.collect()
    assert live_vulkan_objects() == before


# -- test_array_multiplication.py --------------------------------------------------
def test_array_multiplication():

    # 1. Create Kompute Manager (selects device 0 by default)
    mgr = sg.Manager()

    # 2. Create Kompute Tensors to hold data
    tensor_in_a = mgr.tensor(np.array([2, 2, 2], dtype=np.float32))  # migration 3
    tensor_in_b = mgr.tensor(np.array([1, 2, 3], dtype=np.float32))  # migration 3
    tensor_out = mgr.tensor(np.array([0, 0, 0], dtype=np.float32))  # migration 3

    params = [tensor_in_a, tensor_in_b, tensor_out]

    # 4. Define the multiplication shader code to run on the GPU
    # migration 2: was a pyshader function (compute_mult), the same shader in GLSL
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
        .record(sg.OpTensorSyncDevice(params))
        .record(sg.OpAlgoDispatch(mgr.algorithm(params, compute_mult)))
        .record(sg.OpTensorSyncLocal([tensor_out]))
        .eval())

    assert tensor_out.data().tolist() == [2.0, 4.0, 6.0]
    assert np.all(tensor_out.data() == [2.0, 4.0, 6.0])


# -- test_kompute.py --------------------------------------------------------------
DIRNAME = os.path.dirname(os.path.abspath(__file__))

kp_log = logging.getLogger("kp")


def test_end_to_end():

    mgr = sg.Manager()

    tensor_in_a = mgr.tensor([2, 2, 2])
    tensor_in_b = mgr.tensor([1, 2, 3])
    # Explicit type constructor supports int, in32, double, float and int
    tensor_out_a = mgr.tensor_t(np.array([0, 0, 0], dtype=np.uint32))
    tensor_out_b = mgr.tensor_t(np.array([0, 0, 0], dtype=np.uint32))

    params = [tensor_in_a, tensor_in_b, tensor_out_a, tensor_out_b]

    shader = """
        #version 450

        layout (local_size_x = 1) in;

        // The input tensors bind index is relative to index in parameter passed
        layout(set = 0, binding = 0) buffer buf_in_a { float in_a[]; };
        layout(set = 0, binding = 1) buffer buf_in_b { float in_b[]; };
        layout(set = 0, binding = 2) buffer buf_out_a { uint out_a[]; };
        layout(set = 0, binding = 3) buffer buf_out_b { uint out_b[]; };

        // Kompute supports push constants updated on dispatch
        layout(push_constant) uniform PushConstants {
            float val;
        } push_const;

        // Kompute also supports spec constants on initalization
        layout(constant_id = 0) const float const_one = 0;

        void main() {
            uint index = gl_GlobalInvocationID.x;
            out_a[index] += uint( in_a[index] * in_b[index] );
            out_b[index] += uint( const_one * push_const.val );
        }
    """

    workgroup = (3, 1, 1)
    spec_consts = [2]
    push_consts_a = [2]
    push_consts_b = [3]

    algo = mgr.algorithm(params, compile_source(shader), workgroup, spec_consts, push_consts_a)

    (mgr.sequence()
        .record(sg.OpTensorSyncDevice(params))
        .record(sg.OpAlgoDispatch(algo))
        .record(sg.OpAlgoDispatch(algo, push_consts_b))
        .eval())

    sq = mgr.sequence()
    sq.eval_async(sg.OpTensorSyncLocal(params))

    sq.eval_await()

    assert tensor_out_a.data().tolist() == [4, 8, 12]
    assert tensor_out_b.data().tolist() == [10, 10, 10]


def test_shader_str():
    """
    Test basic OpAlgoBase operation
    """

    shader = """
#version 450
layout(set = 0, binding = 0) buffer tensorLhs {float valuesLhs[];};
layout(set = 0, binding = 1) buffer tensorRhs {float valuesRhs[];};
layout(set = 0, binding = 2) buffer tensorOutput { float valuesOutput[];};
layout (local_size_x = 1, local_size_y = 1, local_size_z = 1) in;

void main()
{
    uint index = gl_GlobalInvocationID.x;
    valuesOutput[index] = valuesLhs[index] * valuesRhs[index];
}
    """

    spirv = compile_source(shader)

    mgr = sg.Manager()

    tensor_in_a = mgr.tensor([2, 2, 2])
    tensor_in_b = mgr.tensor([1, 2, 3])
    tensor_out = mgr.tensor([0, 0, 0])

    params = [tensor_in_a, tensor_in_b, tensor_out]

    algo = mgr.algorithm(params, spirv)

    (mgr.sequence()
        .record(sg.OpTensorSyncDevice(params))
        .record(sg.OpAlgoDispatch(algo))
        .record(sg.OpTensorSyncLocal(params))
        .eval())

    assert tensor_out.data().tolist() == [2.0, 4.0, 6.0]


def test_sequence():
    """
    Test basic OpAlgoBase operation
    """

    shader = """
        #version 450
        layout(set = 0, binding = 0) buffer tensorLhs {float valuesLhs[];};
        layout(set = 0, binding = 1) buffer tensorRhs {float valuesRhs[];};
        layout(set = 0, binding = 2) buffer tensorOutput { float valuesOutput[];};
        layout (local_size_x = 1, local_size_y = 1, local_size_z = 1) in;

        void main()
        {
            uint index = gl_GlobalInvocationID.x;
            valuesOutput[index] = valuesLhs[index] * valuesRhs[index];
        }
    """

    spirv = compile_source(shader)

    mgr = sg.Manager(0)

    tensor_in_a = mgr.tensor([2, 2, 2])
    tensor_in_b = mgr.tensor([1, 2, 3])
    tensor_out = mgr.tensor([0, 0, 0])

    params = [tensor_in_a, tensor_in_b, tensor_out]

    algo = mgr.algorithm(params, spirv)

    sq = mgr.sequence()

    sq.record(sg.OpTensorSyncDevice(params))
    sq.record(sg.OpAlgoDispatch(algo))
    sq.record(sg.OpTensorSyncLocal(params))

    sq.eval()

    assert (not sq.destroyed) == True  # noqa: E712  migration 6

    sq.destroy()

    assert (not sq.destroyed) == False  # noqa: E712  migration 6

    assert tensor_out.data().tolist() == [2.0, 4.0, 6.0]
    assert np.all(tensor_out.data() == [2.0, 4.0, 6.0])

    tensor_in_a.destroy()
    tensor_in_b.destroy()
    tensor_out.destroy()

    assert (not tensor_in_a.destroyed) == False  # noqa: E712  migration 6
    assert (not tensor_in_b.destroyed) == False  # noqa: E712  migration 6
    assert (not tensor_out.destroyed) == False  # noqa: E712  migration 6


def test_pushconsts():

    spirv = compile_source("""
          #version 450
          layout(push_constant) uniform PushConstants {
            float x;
            float y;
            float z;
          } pcs;
          layout (local_size_x = 1) in;
          layout(set = 0, binding = 0) buffer a { float pa[]; };
          void main() {
              pa[0] += pcs.x;
              pa[1] += pcs.y;
              pa[2] += pcs.z;
          }
    """)

    mgr = sg.Manager()

    tensor = mgr.tensor([0, 0, 0])

    algo = mgr.algorithm([tensor], spirv, (1, 1, 1), [], [0.1, 0.2, 0.3])

    (mgr.sequence()
        .record(sg.OpTensorSyncDevice([tensor]))
        .record(sg.OpAlgoDispatch(algo))
        .record(sg.OpAlgoDispatch(algo, [0.3, 0.2, 0.1]))
        .record(sg.OpAlgoDispatch(algo, [0.3, 0.2, 0.1]))
        .record(sg.OpTensorSyncLocal([tensor]))
        .eval())

    assert np.allclose(tensor.data(), np.array([0.7, 0.6, 0.5], dtype=np.float32))


def test_pushconsts_int():

    spirv = compile_source("""
          #version 450
          layout(push_constant) uniform PushConstants {
            int x;
            int  y;
            int  z;
          } pcs;
          layout (local_size_x = 1) in;
          layout(set = 0, binding = 0) buffer a { int  pa[]; };
          void main() {
              pa[0] += pcs.x;
              pa[1] += pcs.y;
              pa[2] += pcs.z;
          }
    """)

    mgr = sg.Manager()

    tensor = mgr.tensor_t(np.array([0, 0, 0], dtype=np.int32))

    spec_consts = np.array([], dtype=np.int32)
    push_consts = np.array([-1, -1, -1], dtype=np.int32)

    algo = mgr.algorithm([tensor], spirv, (1, 1, 1), spec_consts, push_consts)

    (mgr.sequence()
        .record(sg.OpTensorSyncDevice([tensor]))
        .record(sg.OpAlgoDispatch(algo))
        .record(sg.OpAlgoDispatch(algo, np.array([-1, -1, -1], dtype=np.int32)))
        .record(sg.OpAlgoDispatch(algo, np.array([-1, -1, -1], dtype=np.int32)))
        .record(sg.OpTensorSyncLocal([tensor]))
        .eval())

    assert np.all(tensor.data() == np.array([-3, -3, -3], dtype=np.int32))


def test_workgroup():
    mgr = sg.Manager(0)

    tensor_a = mgr.tensor(np.zeros([16,8], dtype=np.float32))  # migration 3
    tensor_b = mgr.tensor(np.zeros([16,8], dtype=np.float32))  # migration 3

    # migration 2: was a pyshader function (compute_shader_wg), the same shader in GLSL
    compute_shader_wg = compile_source("""
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer Data1 { float data1[]; };
layout(set = 0, binding = 1) buffer Data2 { float data2[]; };
void main() {
    ivec3 idx = ivec3(gl_GlobalInvocationID);
    ivec3 wg_id = ivec3(gl_WorkGroupID);
    ivec3 wg_num = ivec3(gl_NumWorkGroups);
    int i = wg_id.x * wg_num.y + wg_id.y;
    data1[i] = float(idx.x);
    data2[i] = float(idx.y);
}
""")

    algo = mgr.algorithm([tensor_a, tensor_b], compute_shader_wg, (16,8,1))

    (mgr.sequence()
        .record(sg.OpTensorSyncDevice([tensor_a, tensor_b]))
        .record(sg.OpAlgoDispatch(algo))
        .record(sg.OpTensorSyncLocal([tensor_a, tensor_b]))
        .eval())

    print(tensor_a.data())
    print(tensor_b.data())

    assert np.all(tensor_a.data().ravel() ==  # migration 4
                  np.stack([np.arange(16)]*8, axis=1).ravel())
    assert np.all(tensor_b.data().ravel() ==  # migration 4
                  np.stack([np.arange(8)]*16, axis=0).ravel())


def test_mgr_utils():
    mgr = sg.Manager()

    props = mgr.device  # migration 9

    assert hasattr(props, "name")  # migration 9

    devices = sg.devices()  # migration 9

    assert len(devices) > 0
    assert hasattr(devices[0], "name")  # migration 9


# -- test_logistic_regression.py --------------------------------------------------
def test_logistic_regression():

    # migration 2: was a pyshader function (compute_shader), the same shader in GLSL
    compute_shader = compile_source("""
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer Bxi { float x_i[]; };
layout(set = 0, binding = 1) buffer Bxj { float x_j[]; };
layout(set = 0, binding = 2) buffer By { float y[]; };
layout(set = 0, binding = 3) buffer Bwin { float w_in[]; };
layout(set = 0, binding = 4) buffer Bwouti { float w_out_i[]; };
layout(set = 0, binding = 5) buffer Bwoutj { float w_out_j[]; };
layout(set = 0, binding = 6) buffer Bbin { float b_in[]; };
layout(set = 0, binding = 7) buffer Bbout { float b_out[]; };
layout(set = 0, binding = 8) buffer Blout { float l_out[]; };
layout(set = 0, binding = 9) buffer BM { float M[]; };
void main() {
    int i = int(gl_GlobalInvocationID.x);
    float m = M[0];
    vec2 w_curr = vec2(w_in[0], w_in[1]);
    float b_curr = b_in[0];
    vec2 x_curr = vec2(x_i[i], x_j[i]);
    float y_curr = y[i];
    float z_dot = dot(w_curr, x_curr);
    float z = z_dot + b_curr;
    float y_hat = 1.0 / (1.0 + exp(-z));
    float d_z = y_hat - y_curr;
    vec2 d_w = (1.0 / m) * x_curr * d_z;
    float d_b = (1.0 / m) * d_z;
    float loss = -((y_curr * log(y_hat)) + ((1.0 + y_curr) * log(1.0 - y_hat)));
    w_out_i[i] = d_w.x;
    w_out_j[i] = d_w.y;
    b_out[i] = d_b;
    l_out[i] = loss;
}
""")

    mgr = sg.Manager(0)

    # First we create input and ouput tensors for shader
    tensor_x_i = mgr.tensor(np.array([0.0, 1.0, 1.0, 1.0, 1.0], dtype=np.float32))  # migration 3
    tensor_x_j = mgr.tensor(np.array([0.0, 0.0, 0.0, 1.0, 1.0], dtype=np.float32))  # migration 3

    tensor_y = mgr.tensor(np.array([0.0, 0.0, 0.0, 1.0, 1.0], dtype=np.float32))  # migration 3

    tensor_w_in = mgr.tensor(np.array([0.001, 0.001], dtype=np.float32))  # migration 3
    tensor_w_out_i = mgr.tensor(np.array([0.0, 0.0, 0.0, 0.0, 0.0], dtype=np.float32))  # migration 3
    tensor_w_out_j = mgr.tensor(np.array([0.0, 0.0, 0.0, 0.0, 0.0], dtype=np.float32))  # migration 3

    tensor_b_in = mgr.tensor(np.array([0.0], dtype=np.float32))  # migration 3
    tensor_b_out = mgr.tensor(np.array([0.0, 0.0, 0.0, 0.0, 0.0], dtype=np.float32))  # migration 3

    tensor_l_out = mgr.tensor(np.array([0.0, 0.0, 0.0, 0.0, 0.0], dtype=np.float32))  # migration 3

    tensor_m = mgr.tensor(np.array([ tensor_y.size ], dtype=np.float32))  # migration 3 and 5

    # We store them in an array for easier interaction
    params = [tensor_x_i, tensor_x_j, tensor_y, tensor_w_in, tensor_w_out_i,
        tensor_w_out_j, tensor_b_in, tensor_b_out, tensor_l_out, tensor_m]

    mgr.sequence().eval(sg.OpTensorSyncDevice(params))

    # Create a managed sequence
    sq = mgr.sequence()

    # Record operation to sync memory from local to GPU memory
    sq.record(sg.OpTensorSyncDevice([tensor_w_in, tensor_b_in]))

    # Record operation to execute GPU shader against all our parameters
    sq.record(sg.OpAlgoDispatch(mgr.algorithm(params, compute_shader)))

    # Record operation to sync memory from GPU to local memory
    sq.record(sg.OpTensorSyncLocal([tensor_w_out_i, tensor_w_out_j, tensor_b_out, tensor_l_out]))

    ITERATIONS = 100
    learning_rate = 0.1

    # Perform machine learning training and inference across all input X and Y
    for i_iter in range(ITERATIONS):

        # Execute an iteration of the algorithm
        sq.eval()

        # Calculate the parameters based on the respective derivatives calculated
        for j_iter in range(tensor_b_out.size):  # migration 5
            tensor_w_in.data()[0] -= learning_rate * tensor_w_out_i.data()[j_iter]
            tensor_w_in.data()[1] -= learning_rate * tensor_w_out_j.data()[j_iter]
            tensor_b_in.data()[0] -= learning_rate * tensor_b_out.data()[j_iter]

    assert tensor_w_in.data()[0] < 0.01
    assert tensor_w_in.data()[0] > 0.0
    assert tensor_w_in.data()[1] > 1.5
    assert tensor_b_in.data()[0] < 0.7


# -- test_tensor_types.py ---------------------------------------------------------
VK_ICD_FILENAMES = os.environ.get("VK_ICD_FILENAMES", "")

def test_type_float():

    shader = """
        #version 450
        layout(set = 0, binding = 0) buffer tensorLhs {float valuesLhs[];};
        layout(set = 0, binding = 1) buffer tensorRhs {float valuesRhs[];};
        layout(set = 0, binding = 2) buffer tensorOutput { float valuesOutput[];};
        layout (local_size_x = 1, local_size_y = 1, local_size_z = 1) in;

        void main()
        {
            uint index = gl_GlobalInvocationID.x;
            valuesOutput[index] = valuesLhs[index] * valuesRhs[index];
        }
    """

    spirv = compile_source(shader)

    arr_in_a = np.array([123., 153., 231.], dtype=np.float32)
    arr_in_b = np.array([9482, 1208, 1238], dtype=np.float32)
    arr_out = np.array([0, 0, 0], dtype=np.float32)

    mgr = sg.Manager()

    tensor_in_a = mgr.tensor(arr_in_a)
    tensor_in_b = mgr.tensor(arr_in_b)
    tensor_out = mgr.tensor(arr_out)

    params = [tensor_in_a, tensor_in_b, tensor_out]

    (mgr.sequence()
        .record(sg.OpTensorSyncDevice(params))
        .record(sg.OpAlgoDispatch(mgr.algorithm(params, spirv)))
        .record(sg.OpTensorSyncLocal([tensor_out]))
        .eval())

    assert np.all(tensor_out.data() == arr_in_a * arr_in_b)


def test_type_float_double_incorrect():

    shader = """
        #version 450
        layout(set = 0, binding = 0) buffer tensorLhs {float valuesLhs[];};
        layout(set = 0, binding = 1) buffer tensorRhs {float valuesRhs[];};
        layout(set = 0, binding = 2) buffer tensorOutput { float valuesOutput[];};
        layout (local_size_x = 1, local_size_y = 1, local_size_z = 1) in;

        void main()
        {
            uint index = gl_GlobalInvocationID.x;
            valuesOutput[index] = valuesLhs[index] * valuesRhs[index];
        }
    """

    spirv = compile_source(shader)

    arr_in_a = np.array([123., 153., 231.], dtype=np.float32)
    arr_in_b = np.array([9482, 1208, 1238], dtype=np.uint32)
    arr_out = np.array([0, 0, 0], dtype=np.float32)

    mgr = sg.Manager()

    tensor_in_a = mgr.tensor_t(arr_in_a)
    tensor_in_b = mgr.tensor_t(arr_in_b)
    tensor_out = mgr.tensor_t(arr_out)

    params = [tensor_in_a, tensor_in_b, tensor_out]

    (mgr.sequence()
        .record(sg.OpTensorSyncDevice(params))
        .record(sg.OpAlgoDispatch(mgr.algorithm(params, spirv, reinterpret=True)))  # migration 10
        .record(sg.OpTensorSyncLocal([tensor_out]))
        .eval())

    assert np.all(tensor_out.data() != arr_in_a * arr_in_b)

@pytest.mark.skipif("broadcom" in VK_ICD_FILENAMES,
                    reason="Broadcom doesn't support double")
@pytest.mark.skipif("swiftshader" in VK_ICD_FILENAMES,
                    reason="Swiftshader doesn't support double")
def test_type_double():

    shader = """
        #version 450
        layout(set = 0, binding = 0) buffer tensorLhs { double valuesLhs[]; };
        layout(set = 0, binding = 1) buffer tensorRhs { double valuesRhs[]; };
        layout(set = 0, binding = 2) buffer tensorOutput { double valuesOutput[]; };
        layout (local_size_x = 1, local_size_y = 1, local_size_z = 1) in;

        void main()
        {
            uint index = gl_GlobalInvocationID.x;
            valuesOutput[index] = valuesLhs[index] * valuesRhs[index];
        }
    """

    spirv = compile_source(shader)

    arr_in_a = np.array([123., 153., 231.], dtype=np.float64)
    arr_in_b = np.array([9482, 1208, 1238], dtype=np.float64)
    arr_out = np.array([0, 0, 0], dtype=np.float64)

    mgr = sg.Manager()

    tensor_in_a = mgr.tensor_t(arr_in_a)
    tensor_in_b = mgr.tensor_t(arr_in_b)
    tensor_out = mgr.tensor_t(arr_out)

    params = [tensor_in_a, tensor_in_b, tensor_out]

    (mgr.sequence()
        .record(sg.OpTensorSyncDevice(params))
        .record(sg.OpAlgoDispatch(mgr.algorithm(params, spirv)))
        .record(sg.OpTensorSyncLocal([tensor_out]))
        .eval())

    print(f"Dtype value {tensor_out.data().dtype}")

    assert np.all(tensor_out.data() == arr_in_a * arr_in_b)

def test_type_int():

    shader = """
        #version 450
        layout(set = 0, binding = 0) buffer tensorLhs { int valuesLhs[]; };
        layout(set = 0, binding = 1) buffer tensorRhs { int valuesRhs[]; };
        layout(set = 0, binding = 2) buffer tensorOutput { int valuesOutput[]; };
        layout (local_size_x = 1, local_size_y = 1, local_size_z = 1) in;

        void main()
        {
            uint index = gl_GlobalInvocationID.x;
            valuesOutput[index] = valuesLhs[index] * valuesRhs[index];
        }
    """

    spirv = compile_source(shader)

    arr_in_a = np.array([123, 153, 231], dtype=np.int32)
    arr_in_b = np.array([9482, 1208, 1238], dtype=np.int32)
    arr_out = np.array([0, 0, 0], dtype=np.int32)

    mgr = sg.Manager()

    tensor_in_a = mgr.tensor_t(arr_in_a)
    tensor_in_b = mgr.tensor_t(arr_in_b)
    tensor_out = mgr.tensor_t(arr_out)

    params = [tensor_in_a, tensor_in_b, tensor_out]

    (mgr.sequence()
        .record(sg.OpTensorSyncDevice(params))
        .record(sg.OpAlgoDispatch(mgr.algorithm(params, spirv)))
        .record(sg.OpTensorSyncLocal([tensor_out]))
        .eval())

    print(f"Dtype value {tensor_out.data().dtype}")

    assert np.all(tensor_out.data() == arr_in_a * arr_in_b)

def test_type_unsigned_int():

    shader = """
        #version 450
        layout(set = 0, binding = 0) buffer tensorLhs { uint valuesLhs[]; };
        layout(set = 0, binding = 1) buffer tensorRhs { uint valuesRhs[]; };
        layout(set = 0, binding = 2) buffer tensorOutput { uint valuesOutput[]; };
        layout (local_size_x = 1, local_size_y = 1, local_size_z = 1) in;

        void main()
        {
            uint index = gl_GlobalInvocationID.x;
            valuesOutput[index] = valuesLhs[index] * valuesRhs[index];
        }
    """

    spirv = compile_source(shader)

    arr_in_a = np.array([123, 153, 231], dtype=np.uint32)
    arr_in_b = np.array([9482, 1208, 1238], dtype=np.uint32)
    arr_out = np.array([0, 0, 0], dtype=np.uint32)

    mgr = sg.Manager()

    tensor_in_a = mgr.tensor_t(arr_in_a)
    tensor_in_b = mgr.tensor_t(arr_in_b)
    tensor_out = mgr.tensor_t(arr_out)

    params = [tensor_in_a, tensor_in_b, tensor_out]

    (mgr.sequence()
        .record(sg.OpTensorSyncDevice(params))
        .record(sg.OpAlgoDispatch(mgr.algorithm(params, spirv)))
        .record(sg.OpTensorSyncLocal([tensor_out]))
        .eval())

    print(f"Dtype value {tensor_out.data().dtype}")

    assert np.all(tensor_out.data() == arr_in_a * arr_in_b)

def test_tensor_numpy_ownership():

    arr_in = np.array([1, 2, 3])

    m = sg.Manager()

    t = m.tensor(arr_in.astype(np.float32))  # migration 3

    # This should increment refcount for tensor sharedptr
    td = t.data()

    assert (not t.destroyed) == True  # noqa: E712  migration 8 and 6
    assert np.all(td == arr_in)

    # migration 8: `del t` goes (in kp, td kept the tensor alive)

    assert (not t.destroyed) == True  # noqa: E712  migration 8 and 6
    assert np.all(td == arr_in)

    m.close()  # migration 7

    assert (not t.destroyed) == False  # noqa: E712  migration 8 and 6


# -- why edit 3 (not one of Kompute's tests) ---------------------------------------------
def test_float64_array_needs_the_dtype_kp_gave_it():
    """What happens without edit 3: kp's np.zeros([16, 8]) would reach `float data[]` as
    float64, and algorithm() says so."""
    shader = """#version 450
        layout(local_size_x = 1) in;
        layout(set = 0, binding = 0) buffer a { float d[]; };
        void main() { d[gl_GlobalInvocationID.x] = 1.0; }
    """
    with sg.Manager() as mgr:
        tensor = mgr.tensor(np.zeros([16, 8]))
        with pytest.raises(sg.ShaderError, match=r"binding 0 .*float64.*`float\[\]`"):
            mgr.algorithm([tensor], compile_source(shader), (16, 8, 1))
