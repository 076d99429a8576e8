## Float atomic adds for global memory, one implementation per device path.
## Parameters: atomic_f32 in {native-ptx, native-cl, cas};
##             atomic_f64 in {native-ptx, native-cl, cas, none} (none: no fp64).
## Provides atomic_add_f32(p, x), atomic_add_c64(p, z) (float2 at p[0], p[1])
## and, unless atomic_f64 == 'none', atomic_add_f64 / atomic_add_c128.
<%def name="cas_add(suffix, real, uint, cmpxchg)">
inline void atomic_add_${suffix}(volatile __global ${real} *p, ${real} x)
{
    // Retry until no other work-item changed *p between our guess and swap.
    // The first guess is 0 (grids start zeroed) rather than a plain read of
    // *p: a plain read would race with other work-items' swaps.
    union { ${uint} u; ${real} f; } expected, desired, seen;
    seen.u = 0;
    do {
        expected.u = seen.u;
        desired.f = expected.f + x;
        seen.u = ${cmpxchg}((volatile __global ${uint} *)p, expected.u, desired.u);
    } while (seen.u != expected.u);
}
</%def>
<%def name="native_cl_add(suffix, real, atomic_type)">
inline void atomic_add_${suffix}(volatile __global ${real} *p, ${real} x)
{
    atomic_fetch_add_explicit((volatile __global ${atomic_type} *)p, x,
                              memory_order_relaxed, memory_scope_device);
}
</%def>
<%def name="native_ptx_add(suffix, real, ptx_type, constraint)">
inline void atomic_add_${suffix}(volatile __global ${real} *p, ${real} x)
{
    // red: fire-and-forget reduction, no return value, no retry loop.
    asm volatile("red.global.add.${ptx_type} [%0], %1;" :: "l"(p), "${constraint}"(x) : "memory");
}
</%def>
#ifndef CLGRID_ATOMICS_CL
#define CLGRID_ATOMICS_CL
% if atomic_f32 == "cas":
${cas_add("f32", "float", "unsigned int", "atomic_cmpxchg")}
% elif atomic_f32 == "native-cl":
${native_cl_add("f32", "float", "atomic_float")}
% elif atomic_f32 == "native-ptx":
${native_ptx_add("f32", "float", "f32", "f")}
% else:
<% raise ValueError("unknown atomic_f32 path " + repr(atomic_f32)) %>
% endif
inline void atomic_add_c64(volatile __global float *p, float2 z)
{
    atomic_add_f32(p, z.x);
    atomic_add_f32(p + 1, z.y);
}
% if atomic_f64 != "none":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% if atomic_f64 == "cas":
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
## atom_cmpxchg, not atomic_cmpxchg: the latter is ambiguous for 64 bits on PoCL 5.
${cas_add("f64", "double", "unsigned long", "atom_cmpxchg")}
% elif atomic_f64 == "native-cl":
${native_cl_add("f64", "double", "atomic_double")}
% elif atomic_f64 == "native-ptx":
${native_ptx_add("f64", "double", "f64", "d")}
% else:
<% raise ValueError("unknown atomic_f64 path " + repr(atomic_f64)) %>
% endif
inline void atomic_add_c128(volatile __global double *p, double2 z)
{
    atomic_add_f64(p, z.x);
    atomic_add_f64(p + 1, z.y);
}
% endif
#endif
