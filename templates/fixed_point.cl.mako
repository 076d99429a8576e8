## Order-free float sums: 64-bit fixed point added with integer atomics.
## Integer additions are exact, so a grid point's total does not depend on
## the order its parts arrive in (float atomics' totals do, in their last
## bits).  Each part is scaled by 2^e, rounded to an integer and added; e is
## chosen from a bound on everything added into any one point, so that no
## sum leaves the 63 bits: the resolution is then bound * 2^-60 (a part of
## 1e-18 of the bound).  Included by core_spread_register.cl.mako
## (fixed_point); uses its atomic_f32 parameter (the PTX reduction where the
## device takes inline PTX, as its float atomics do) and bound_group (work-items
## of a bound_partials group: a power of two).
## Kernels: bound_partials / bound_total (the bound, a fixed-order sum of
## |re| + |im| of every value: the same bits every run) and fixed_to_grid.
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#define BOUND_GROUP ${bound_group}

// 2^e with bound * 2^e < 2^61: the sum of every part (each at most bound,
// less float rounding) stays below 2^62 with room for the roundings.
inline int fixed_exponent(const float value_bound, const float table_bound)
{
    const float bound = value_bound * table_bound;
    return (bound > 0.0f && isfinite(bound)) ? 60 - ilogb(bound) : 0;
}

// 2^e as two float factors (each representable for |e| <= 254): scaling by
// them is exact, and two multiplies cost less than an ldexp a part
inline float2 fixed_scale(const int e)
{
    return (float2)(ldexp(1.0f, e / 2), ldexp(1.0f, e - e / 2));
}

inline void fixed_add(volatile __global long *p, const float x, const float2 scale)
{
    // saturating: never undefined, whatever the bound missed
    const long part = convert_long_sat_rte((x * scale.x) * scale.y);
    if (part == 0)
        return;
% if atomic_f32 == "native-ptx":
    // red: fire-and-forget reduction, no return value
    asm volatile("red.global.add.u64 [%0], %1;" :: "l"(p), "l"(part) : "memory");
% else:
    atom_add(p, part);
% endif
}

inline void fixed_add_c64(volatile __global long *p, const float2 z, const float2 scale)
{
    fixed_add(p, z.x, scale);
    fixed_add(p + 1, z.y, scale);
}

// partials[group]: the sum of |re| + |im| over values group, group + groups,
// ... in a fixed order and tree (launch BOUND_GROUP work-items a group).
__kernel __attribute__((reqd_work_group_size(BOUND_GROUP, 1, 1)))
void bound_partials(__global const float2 *values, const unsigned int n,
                    __global float *partials)
{
    __local float sums[BOUND_GROUP];
    const unsigned int lid = get_local_id(0);
    const size_t stride = get_global_size(0);
    float sum = 0.0f;
    for (size_t i = get_global_id(0); i < n; i += stride)
        sum += fabs(values[i].x) + fabs(values[i].y);
    sums[lid] = sum;
    for (unsigned int step = BOUND_GROUP / 2; step > 0; step /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < step)
            sums[lid] += sums[lid + step];
    }
    if (lid == 0)
        partials[get_group_id(0)] = sums[0];
}

// bound[0] = the sum of the partials, in order (one work-item)
__kernel void bound_total(__global const float *partials, const unsigned int n_partials,
                          __global float *bound)
{
    if (get_global_id(0) != 0)
        return;
    float sum = 0.0f;
    for (unsigned int g = 0; g < n_partials; ++g)
        sum += partials[g];
    // float sums round down as well as up: 2^-10 more covers any order of them
    bound[0] = sum * (1.0f + 0x1p-10f);
}

// grid (npol, ny, nx) complex float = fixed / 2^e (added to it: accumulate),
// and the fixed grid zeroed for the next call where it was not zero: the
// points no flush reached cost a read, not a fill and a read
__kernel void fixed_to_grid(__global long2 *fixed, const unsigned int n_complex,
                            __global const float *value_bound, const float table_bound,
                            const int accumulate, __global float2 *grid)
{
    const size_t i = get_global_id(0);
    if (i >= n_complex)
        return;
    const float2 scale = fixed_scale(-fixed_exponent(*value_bound, table_bound));
    const long2 sums = fixed[i];
    if (sums.x != 0 || sums.y != 0)
        fixed[i] = (long2)(0, 0);
    const float2 value = (convert_float2(sums) * scale.x) * scale.y;
    grid[i] = accumulate ? grid[i] + value : value;
}
