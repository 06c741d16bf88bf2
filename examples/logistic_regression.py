"""Logistic regression, Kompute's classic example: the same data, the same shader
arithmetic, the same training loop (100 iterations, learning rate 0.1), the same result.

The shader computes, for each of the 5 samples, the gradient of the loss with respect to
the two weights and the bias; the host sums them and updates the weights, as Kompute's
example does. The trained weights are compared with the same loop run in numpy (float32).

    python examples/logistic_regression.py [--iterations N] [--device INDEX_OR_NAME]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import scopedgpu as sg

SHADER = """
#version 450
layout(constant_id = 0) const uint M = 0;      // number of samples (specialized: 5)
layout(local_size_x = 1) in;

layout(set = 0, binding = 0) buffer Xi { float x_i[]; };
layout(set = 0, binding = 1) buffer Xj { float x_j[]; };
layout(set = 0, binding = 2) buffer Y { float y[]; };
layout(set = 0, binding = 3) buffer Win { float w_in[]; };
layout(set = 0, binding = 4) buffer WoutI { float w_out_i[]; };
layout(set = 0, binding = 5) buffer WoutJ { float w_out_j[]; };
layout(set = 0, binding = 6) buffer Bin { float b_in[]; };
layout(set = 0, binding = 7) buffer Bout { float b_out[]; };
layout(set = 0, binding = 8) buffer Lout { float l_out[]; };

void main() {
    uint k = gl_GlobalInvocationID.x;
    float m = float(M);
    vec2 w = vec2(w_in[0], w_in[1]);
    vec2 x = vec2(x_i[k], x_j[k]);
    float y_hat = 1.0 / (1.0 + exp(-(dot(w, x) + b_in[0])));   // sigmoid
    float d_z = y_hat - y[k];
    vec2 d_w = (1.0 / m) * x * d_z;
    w_out_i[k] = d_w.x;
    w_out_j[k] = d_w.y;
    b_out[k] = (1.0 / m) * d_z;
    l_out[k] = -(y[k] * log(y_hat) + (1.0 - y[k]) * log(1.0 - y_hat));  // cross-entropy
}
"""

X_I = [0.0, 1.0, 1.0, 1.0, 1.0]
X_J = [0.0, 0.0, 0.0, 1.0, 1.0]
Y = [0.0, 0.0, 0.0, 1.0, 1.0]
LEARNING_RATE = 0.1


def train_numpy(iterations: int) -> tuple[np.ndarray, np.float32, np.ndarray]:
    """The same loop in numpy, float32 throughout."""
    f = np.float32
    xi, xj, y = (np.array(v, f) for v in (X_I, X_J, Y))
    w, b = np.array([0.001, 0.001], f), f(0.0)
    loss = np.zeros(5, f)
    for _ in range(iterations):
        y_hat = f(1) / (f(1) + np.exp(-(w[0] * xi + w[1] * xj + b)))
        d_z = y_hat - y
        d_wi, d_wj, d_b = xi * d_z / f(5), xj * d_z / f(5), d_z / f(5)
        loss = -(y * np.log(y_hat) + (f(1) - y) * np.log(f(1) - y_hat))
        for k in range(5):                  # the host update, in Kompute's order
            w[0] -= f(LEARNING_RATE) * d_wi[k]
            w[1] -= f(LEARNING_RATE) * d_wj[k]
            b -= f(LEARNING_RATE) * d_b[k]
    return w, b, loss


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--device", default=None, help="device index or name substring")
    args = p.parse_args(argv)
    device = int(args.device) if args.device and args.device.isdigit() else args.device

    with sg.Manager(device) as mgr:
        print(f"device: {mgr.device}")
        # Python lists give float32 tensors, as in kp.
        x_i, x_j, y = mgr.tensor(X_I), mgr.tensor(X_J), mgr.tensor(Y)
        w_in = mgr.tensor([0.001, 0.001])
        w_out_i, w_out_j = mgr.tensor([0.0] * 5), mgr.tensor([0.0] * 5)
        b_in = mgr.tensor([0.0])
        b_out, l_out = mgr.tensor([0.0] * 5), mgr.tensor([0.0] * 5)
        params = [x_i, x_j, y, w_in, w_out_i, w_out_j, b_in, b_out, l_out]
        mgr.run(sg.OpTensorSyncDevice(params))

        # One invocation per sample; spec constant 0 (M) takes the shader's type (uint).
        algo = mgr.algorithm(params, sg.compile_glsl(SHADER), workgroup=(5, 1, 1),
                             spec_consts=[5])
        # A named sequence: recorded once, evaluated every iteration, kept until deleted.
        seq = (mgr.sequence("train")
               .record(sg.OpTensorSyncDevice([w_in, b_in]))
               .record(sg.OpAlgoDispatch(algo))
               .record(sg.OpTensorSyncLocal([w_out_i, w_out_j, b_out, l_out])))
        for _ in range(args.iterations):
            seq.eval()
            for k in range(b_out.size):
                w_in.data()[0] -= LEARNING_RATE * w_out_i.data()[k]
                w_in.data()[1] -= LEARNING_RATE * w_out_j.data()[k]
                b_in.data()[0] -= LEARNING_RATE * b_out.data()[k]
        mgr.delete_sequence("train")

        w, b, loss = w_in.numpy(), float(b_in.data()[0]), l_out.numpy()
        print(f"trained: w = [{w[0]:.6f}, {w[1]:.6f}], b = {b:.6f}, "
              f"mean loss {loss.mean():.6f}")
    ref_w, ref_b, ref_loss = train_numpy(args.iterations)
    print(f"numpy:   w = [{ref_w[0]:.6f}, {ref_w[1]:.6f}], b = {ref_b:.6f}, "
          f"mean loss {ref_loss.mean():.6f}")
    ok = (np.allclose(w, ref_w, rtol=1e-4, atol=1e-6) and abs(b - ref_b) <= 1e-4
          and np.allclose(loss, ref_loss, rtol=1e-3, atol=1e-5))
    if args.iterations == 100:
        # Kompute's own test asserts these bounds on the trained model.
        kp_ok = 0.0 < w[0] < 0.01 and w[1] > 1.5 and b < 0.7
        print("Kompute's checks (0 < w0 < 0.01, w1 > 1.5, b < 0.7): "
              + ("OK" if kp_ok else "FAILED"))
        ok = ok and kp_ok
    print("result matches numpy: " + ("OK" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
