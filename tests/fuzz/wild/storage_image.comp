// exercises: storage images (image2D rgba32f and r32ui, imageLoad/imageStore/imageSize/imageAtomicAdd); scopedgpu binds storage buffers only
// expect-refusal: scopedgpu binds tensors as storage buffers of set 0
#version 450

layout(local_size_x = 8, local_size_y = 8) in;

layout(binding = 0, rgba32f) uniform readonly image2D src_image;
layout(binding = 1, rgba32f) uniform writeonly image2D dst_image;
layout(binding = 2, r32ui) uniform uimage2D counts;

void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    ivec2 size = imageSize(src_image);
    if (any(greaterThanEqual(p, size))) {
        return;
    }
    vec4 c = imageLoad(src_image, p);
    float luma = dot(c.rgb, vec3(0.2126, 0.7152, 0.0722));
    imageStore(dst_image, p, vec4(vec3(luma), c.a));
    imageAtomicAdd(counts, ivec2(int(luma * 15.0), 0), 1u);
}
