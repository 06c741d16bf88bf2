

import hashlib
import os
import shutil

import scopedgpu

# scopedgpu: compile_source was `glslangValidator -V` through os.system, writing
# tmp_kp_shader.comp(.spv) in the working directory. It now compiles with
# scopedgpu.compile_glsl when a GLSL compiler is installed, and otherwise loads the same
# shader precompiled from spirv/<sha256 of the source>.spv (machines without glslc).
# KOMPUTE_TESTS_WRITE_SPIRV=1 writes those files. See NOTICE.md.
SPIRV_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spirv")


def compile_source(source):
    path = os.path.join(SPIRV_DIR, hashlib.sha256(source.encode()).hexdigest()[:24] + ".spv")
    if shutil.which("glslc") or shutil.which("glslangValidator"):
        spirv = scopedgpu.compile_glsl(source)
        if os.environ.get("KOMPUTE_TESTS_WRITE_SPIRV"):
            with open(path, "wb") as f:
                f.write(spirv)
        elif not os.path.exists(path):
            # Where glslc is (CI), a shader without its precompiled file fails here, not
            # later on a machine without a compiler (the H200 of the device tool).
            raise FileNotFoundError(f"no precompiled {path} for a machine without a GLSL "
                                    "compiler: run the tests once with KOMPUTE_TESTS_WRITE_SPIRV=1")
        return spirv
    if not os.path.exists(path):
        raise FileNotFoundError(f"no GLSL compiler, and no precompiled {path}: run the "
                                "tests once with KOMPUTE_TESTS_WRITE_SPIRV=1 where glslc is")
    with open(path, "rb") as f:
        return f.read()
