// exercises: a runtime array of std430 structs (vec3 after float padding, uint, vec4), whole-struct loads and stores, .length() of a struct array
#version 450

layout(local_size_x = 32) in;

struct Particle {
    vec3 position;
    float mass;
    vec3 velocity;
    uint flags;
    vec4 color;
};

layout(std430, binding = 0) buffer ParticleBuffer {
    Particle particles[];
};

layout(push_constant) uniform Sim {
    vec3 gravity;
    float dt;
} sim;

const uint FLAG_PINNED = 1u;
const uint FLAG_DEAD = 2u;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(particles.length())) {
        return;
    }
    Particle p = particles[i];
    if ((p.flags & (FLAG_PINNED | FLAG_DEAD)) != 0u) {
        return;
    }
    float inv_mass = p.mass > 0.0 ? 1.0 / p.mass : 0.0;
    p.velocity += sim.gravity * sim.dt * inv_mass;
    p.position += p.velocity * sim.dt;
    if (p.position.y < 0.0) {
        p.position.y = -p.position.y;
        p.velocity.y *= -0.5;
        p.flags |= (length(p.velocity) < 1e-3) ? FLAG_DEAD : 0u;
    }
    p.color.a = clamp(p.color.a - sim.dt, 0.0, 1.0);
    particles[i] = p;
}
