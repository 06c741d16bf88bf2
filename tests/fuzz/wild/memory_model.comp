// exercises: the Vulkan memory model (GL_KHR_memory_scope_semantics): atomicLoad/atomicStore with release/acquire semantics on shared memory, controlBarrier with explicit scopes
#version 450
#pragma use_vulkan_memory_model
#extension GL_KHR_memory_scope_semantics : require

layout(local_size_x = 64) in;

layout(std430, binding = 0) writeonly buffer Out { uint out_values[]; };

shared uint ready;
shared uint payload[64];

void main() {
    uint lid = gl_LocalInvocationIndex;
    if (lid == 0u) {
        atomicStore(ready, 0u, gl_ScopeWorkgroup, gl_StorageSemanticsNone, gl_SemanticsRelaxed);
    }
    payload[lid] = lid * lid;
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
    if (lid == 0u) {
        atomicStore(ready, 1u, gl_ScopeWorkgroup, gl_StorageSemanticsShared, gl_SemanticsRelease);
    }
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
    uint flag = atomicLoad(ready, gl_ScopeWorkgroup, gl_StorageSemanticsShared, gl_SemanticsAcquire);
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(out_values.length())) {
        out_values[i] = flag * payload[63u - lid];
    }
}
