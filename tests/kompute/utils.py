

import hashlib
import os
import shutil
import subprocess

import scopedgpu

# scopedgpu: compile_source was `glslangValidator -V` through os.system, writing
# tmp_kp_shader.comp(.spv) in the working directory. It now compiles with
# scopedgpu.compile_glsl when a GLSL compiler is installed, and otherwise loads the same
# shader precompiled from spirv/<sha256 of the source>.spv (machines without glslc).
# KOMPUTE_TESTS_WRITE_SPIRV=1 writes those files. See NOTICE.md.
SPIRV_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spirv")


def compile_source(source, target_env=None):
    # scopedgpu: target_env, glslc's --target-env (e.g. "vulkan1.2": SPIR-V 1.5), for
    # tests of scopedgpu's own that need a module of that version; precompiled apart
    # (the key hashes the target with the source).
    key = source if target_env is None else f"{target_env}\n{source}"
    path = os.path.join(SPIRV_DIR, hashlib.sha256(key.encode()).hexdigest()[:24] + ".spv")
    glslc = shutil.which("glslc")
    if glslc if target_env else (glslc or shutil.which("glslangValidator")):
        if target_env is None:
            spirv = scopedgpu.compile_glsl(source)
        else:
            spirv = subprocess.run([glslc, f"--target-env={target_env}", "-fshader-stage=comp",
                                    "-", "-o", "-"], input=source.encode(),
                                   capture_output=True, check=True).stdout
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
