import numpy as np
import kp

from .utils import compile_source

def test_logistic_regression():

    # scopedgpu: was a pyshader function (compute_shader), the same shader in GLSL
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

    mgr = kp.Manager(0)

    # First we create input and ouput tensors for shader
    tensor_x_i = mgr.tensor(np.array([0.0, 1.0, 1.0, 1.0, 1.0]))
    tensor_x_j = mgr.tensor(np.array([0.0, 0.0, 0.0, 1.0, 1.0]))

    tensor_y = mgr.tensor(np.array([0.0, 0.0, 0.0, 1.0, 1.0]))

    tensor_w_in = mgr.tensor(np.array([0.001, 0.001]))
    tensor_w_out_i = mgr.tensor(np.array([0.0, 0.0, 0.0, 0.0, 0.0]))
    tensor_w_out_j = mgr.tensor(np.array([0.0, 0.0, 0.0, 0.0, 0.0]))

    tensor_b_in = mgr.tensor(np.array([0.0]))
    tensor_b_out = mgr.tensor(np.array([0.0, 0.0, 0.0, 0.0, 0.0]))

    tensor_l_out = mgr.tensor(np.array([0.0, 0.0, 0.0, 0.0, 0.0]))

    tensor_m = mgr.tensor(np.array([ tensor_y.size() ]))

    # We store them in an array for easier interaction
    params = [tensor_x_i, tensor_x_j, tensor_y, tensor_w_in, tensor_w_out_i,
        tensor_w_out_j, tensor_b_in, tensor_b_out, tensor_l_out, tensor_m]

    mgr.sequence().eval(kp.OpTensorSyncDevice(params))

    # Create a managed sequence
    sq = mgr.sequence()

    # Record operation to sync memory from local to GPU memory
    sq.record(kp.OpTensorSyncDevice([tensor_w_in, tensor_b_in]))

    # Record operation to execute GPU shader against all our parameters
    sq.record(kp.OpAlgoDispatch(mgr.algorithm(params, compute_shader)))

    # Record operation to sync memory from GPU to local memory
    sq.record(kp.OpTensorSyncLocal([tensor_w_out_i, tensor_w_out_j, tensor_b_out, tensor_l_out]))

    ITERATIONS = 100
    learning_rate = 0.1

    # Perform machine learning training and inference across all input X and Y
    for i_iter in range(ITERATIONS):

        # Execute an iteration of the algorithm
        sq.eval()

        # Calculate the parameters based on the respective derivatives calculated
        for j_iter in range(tensor_b_out.size()):
            tensor_w_in.data()[0] -= learning_rate * tensor_w_out_i.data()[j_iter]
            tensor_w_in.data()[1] -= learning_rate * tensor_w_out_j.data()[j_iter]
            tensor_b_in.data()[0] -= learning_rate * tensor_b_out.data()[j_iter]

    assert tensor_w_in.data()[0] < 0.01
    assert tensor_w_in.data()[0] > 0.0
    assert tensor_w_in.data()[1] > 1.5
    assert tensor_b_in.data()[0] < 0.7
