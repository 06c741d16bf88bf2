// exercises: GL_EXT_buffer_reference (PhysicalStorageBuffer64 pointers in a push constant, pointer arithmetic through uint64_t); scopedgpu enables no buffer device address
// expect-refusal: PhysicalStorageBufferAddresses
#version 450
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

layout(local_size_x = 64) in;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer FloatArray {
    float v[];
};

layout(buffer_reference) buffer Node;   // forward declaration: the node points to itself
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Node {
    vec4 value;
    Node next;
};

layout(push_constant) uniform Pointers {
    FloatArray input_ptr;
    FloatArray output_ptr;
    Node head;
    uint count;
} ptrs;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= ptrs.count) {
        return;
    }
    float acc = ptrs.input_ptr.v[i];
    Node node = ptrs.head;
    for (int k = 0; k < 4 && uint64_t(node) != 0ul; ++k) {
        acc += node.value.x;
        node = node.next;
    }
    FloatArray shifted = FloatArray(uint64_t(ptrs.output_ptr) + 4ul * uint64_t(i));
    shifted.v[0] = acc;
}
