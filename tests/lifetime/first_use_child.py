"""Child process of test_first_use.py: the first algorithm() of a fresh process,
interrupted at the k-th line it runs in the lazily initialised code behind it (cffi and
its parser pycparser, the SPIR-V validator's loader, the compiler front end), then a
second algorithm() that must work, with the validator loaded.

    python first_use_child.py MODE K      MODE: native or kp; K: 0 counts the lines

Prints one line of JSON: count (lines seen), bodies (the first and the last of them
run in a module's body: the imports), fired (where the interrupt fired, or ""),
validator (whether the SPIR-V validator was loaded, where from or why not) and out (the result of
the second algorithm's dispatch); an error of the second algorithm() exits 1 with its
traceback."""
from __future__ import annotations

import json
import os
import sys

import numpy as np

import scopedgpu as sg
import scopedgpu.kp as kp
from scopedgpu import _spirv_val
from untraced import skipped   # (this script's folder is on sys.path)

ADD_ONE = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() { a[gl_GlobalInvocationID.x] += 1.0; }
"""
PKG = os.path.dirname(os.path.abspath(sg.__file__))
WATCHED = (f"{os.sep}cffi{os.sep}", f"{os.sep}pycparser{os.sep}", f"{os.sep}ply{os.sep}",
           os.path.join(PKG, "_spirv_val.py"), os.path.join(PKG, "glsl.py"),
           os.path.join(PKG, "_lazy.py"))


class Inject:
    def __init__(self, k: int):
        self.k, self.count, self.fired = k, 0, ""
        self.bodies = [0, 0]    # the first and last line counted in a module's body

    def globaltrace(self, frame, event, arg):
        name = frame.f_code.co_filename
        if event == "call" and any(w in name for w in WATCHED):
            return self.localtrace
        return None

    def localtrace(self, frame, event, arg):
        if event == "line" and not self.fired and frame.f_lasti not in skipped(frame.f_code):
            self.count += 1
            if frame.f_code.co_name == "<module>":
                self.bodies = [self.bodies[0] or self.count, self.count]
            if self.count == self.k:
                self.fired = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                raise KeyboardInterrupt
        return self.localtrace


def main() -> None:
    mode, k = sys.argv[1], int(sys.argv[2])
    spirv = sg.compile_glsl(ADD_ONE)     # from the parent's cache: no compiler runs
    if mode == "kp":
        km = kp.Manager()
        t = km.tensor([1.0, 2.0, 3.0])

        def algorithm():
            return km.algorithm([t], spirv)

        def run(algo):
            km.sequence().eval(kp.OpTensorSyncDevice([t])).eval(kp.OpAlgoDispatch(algo)) \
                .eval(kp.OpTensorSyncLocal([t]))
            return t.data().tolist()
    else:
        m = sg.Manager()
        t = m.tensor(np.array([1.0, 2.0, 3.0], np.float32))

        def algorithm():
            return m.algorithm([t], spirv)

        def run(algo):
            m.run(sg.OpTensorSyncDevice([t]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([t]))
            return t.data().tolist()

    inj = Inject(k)
    sys.settrace(inj.globaltrace)
    try:
        algorithm()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    out = run(algorithm())          # the second algorithm(): must work
    v = _spirv_val.validator()
    print(json.dumps({"count": inj.count, "bodies": inj.bodies, "fired": inj.fired,
                      "validator": [v.ok, v.found], "out": out}))


if __name__ == "__main__":
    main()
