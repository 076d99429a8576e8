## W-stacking gridder and degridder with the exponential-of-semicircle (ES)
## kernel evaluated on the fly (no tables), after ducc0's wgridder
## (Arras et al. 2021).  One work-item per visibility (row, channel) of one
## polarisation.
## Parameters: real ("float" | "double"): grid and visibility precision;
##             coord ("float" | "double"): precision of uvw * freq positions;
##             support (int W), beta (float): the ES kernel;
##             do_w (bool): spread over w planes with the same kernel;
##             shifted (bool): image centre away from the phase centre.
<%
    bits = 32 if real == "float" else 64
    cplx = "c64" if bits == 32 else "c128"
    vec = real + "2"
    half_support = support / 2.0
%>
<%include file="atomics.cl.mako"/>
% if real == "double" or coord == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif

#define SUPPORT ${support}
// Kernel half-width in grid cells and the ES shape parameter.
#define HALF_SUPPORT ((${coord})${repr(half_support)})
#define BETA ((${real})${repr(float(beta))})
#define INV_HALF_SUPPORT ((${coord})${repr(1.0 / half_support)})

// phi(s) = exp(beta (sqrt(1 - (s / (W/2))^2) - 1)); zero outside |s| < W/2.
inline ${real} es_kernel(${coord} s)
{
    const ${real} z = (${real})(s * INV_HALF_SUPPORT);
    const ${real} z2 = z * z;
    return z2 < (${real})1 ? exp(BETA * (sqrt((${real})1 - z2) - (${real})1)) : (${real})0;
}

// Where one visibility sits: first grid index (wrapped) and kernel weights
// along one axis.  pos is in grid cells; the kernel covers ceil(pos - W/2)...
inline int kernel_weights(${coord} pos, int n, ${real} *weights)
{
    const ${coord} first = ceil(pos - HALF_SUPPORT);
    for (int k = 0; k < SUPPORT; ++k)
        weights[k] = es_kernel(first + k - pos);
    int start = (int)first % n;
    return start < 0 ? start + n : start;
}

typedef struct {
    ${coord} u, v, w;      // in grid cells (u, v) and in w-plane units (w)
    bool active;           // false: this visibility does not touch the plane
    ${real} w_weight;
} Position;

inline Position locate(__global const double *uvw, __global const double *freq_scale,
                       const unsigned int row, const unsigned int chan,
                       const ${coord} u_scale, const ${coord} v_scale,
                       const ${coord} w_scale, const ${coord} w_offset, const int plane)
{
    Position p;
    const ${coord} f = (${coord})freq_scale[chan];
    p.u = (${coord})uvw[3 * (size_t)row] * f * u_scale;
    p.v = (${coord})uvw[3 * (size_t)row + 1] * f * v_scale;
% if do_w:
    p.w = (${coord})uvw[3 * (size_t)row + 2] * f * w_scale - w_offset;
    const ${coord} offset = (${coord})plane - p.w;
    p.active = fabs(offset) < HALF_SUPPORT;
    p.w_weight = p.active ? es_kernel(offset) : (${real})0;
% else:
    p.w = 0;
    p.active = true;
    p.w_weight = (${real})1;
% endif
    return p;
}

% if shifted:
// exp(sign * i (u cx + v cy)) for an image centre away from the phase centre.
inline ${vec} shift_phase(__global const double *uvw, const unsigned int row, double f,
                          double shift_u, double shift_v, double sign)
{
    const double phase = sign * f * (uvw[3 * (size_t)row] * shift_u
                                     + uvw[3 * (size_t)row + 1] * shift_v);
    double c;
    const double s = sincos(phase, &c);
    return (${vec})((${real})c, (${real})s);
}
% endif

inline ${vec} cmul(${vec} a, ${vec} b)
{
    return (${vec})(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// Visibilities -> one w plane of the grid (nu x nv, complex, row-major).
// Rows come through row_index (sorted by w, so each plane only launches the
// rows that can reach it); vis is (nrow, nchan, npol), one pol per launch.
__kernel void grid(__global const double *uvw, __global const double *freq_scale,
                   __global const unsigned int *row_index, const unsigned int first_row,
                   const unsigned int n_rows, const unsigned int nchan,
                   __global const ${vec} *vis, const unsigned int npol, const unsigned int pol,
                   volatile __global ${real} *grid, const int nu, const int nv,
                   const ${coord} u_scale, const ${coord} v_scale,
                   const ${coord} w_scale, const ${coord} w_offset, const int plane,
                   const double shift_u, const double shift_v)
{
    const unsigned int r = get_global_id(0);
    const unsigned int chan = get_global_id(1);
    if (r >= n_rows || chan >= nchan)
        return;
    const unsigned int row = row_index[first_row + r];
    const Position p = locate(uvw, freq_scale, row, chan, u_scale, v_scale, w_scale,
                              w_offset, plane);
    if (!p.active)
        return;
    ${vec} value = vis[((size_t)row * nchan + chan) * npol + pol];
    if (value.x == (${real})0 && value.y == (${real})0)
        return;  // flagged or zero-weight: nothing to add
% if shifted:
    value = cmul(value, shift_phase(uvw, row, freq_scale[chan], shift_u, shift_v, 1.0));
% endif
    value *= p.w_weight;
    ${real} ku[SUPPORT], kv[SUPPORT];
    int iu = kernel_weights(p.u, nu, ku);
    const int iv0 = kernel_weights(p.v, nv, kv);
    for (int a = 0; a < SUPPORT; ++a) {
        const ${vec} row_value = value * ku[a];
        int iv = iv0;
        for (int b = 0; b < SUPPORT; ++b) {
            atomic_add_${cplx}(grid + 2 * ((size_t)iu * nv + iv), row_value * kv[b]);
            iv = (iv + 1 == nv) ? 0 : iv + 1;
        }
        iu = (iu + 1 == nu) ? 0 : iu + 1;
    }
}

// One w plane of the grid -> visibilities, added to out (the adjoint of grid).
// Each work-item owns its visibility: no atomics.
__kernel void degrid(__global const double *uvw, __global const double *freq_scale,
                     __global const unsigned int *row_index, const unsigned int first_row,
                     const unsigned int n_rows, const unsigned int nchan,
                     __global ${vec} *out, const unsigned int npol, const unsigned int pol,
                     __global const ${vec} *grid, const int nu, const int nv,
                     const ${coord} u_scale, const ${coord} v_scale,
                     const ${coord} w_scale, const ${coord} w_offset, const int plane,
                     const double shift_u, const double shift_v)
{
    const unsigned int r = get_global_id(0);
    const unsigned int chan = get_global_id(1);
    if (r >= n_rows || chan >= nchan)
        return;
    const unsigned int row = row_index[first_row + r];
    const Position p = locate(uvw, freq_scale, row, chan, u_scale, v_scale, w_scale,
                              w_offset, plane);
    if (!p.active)
        return;
    ${real} ku[SUPPORT], kv[SUPPORT];
    int iu = kernel_weights(p.u, nu, ku);
    const int iv0 = kernel_weights(p.v, nv, kv);
    ${vec} sum = (${vec})(0, 0);
    for (int a = 0; a < SUPPORT; ++a) {
        ${vec} row_sum = (${vec})(0, 0);
        int iv = iv0;
        for (int b = 0; b < SUPPORT; ++b) {
            row_sum += grid[(size_t)iu * nv + iv] * kv[b];
            iv = (iv + 1 == nv) ? 0 : iv + 1;
        }
        sum += row_sum * ku[a];
        iu = (iu + 1 == nu) ? 0 : iu + 1;
    }
    sum *= p.w_weight;
% if shifted:
    sum = cmul(sum, shift_phase(uvw, row, freq_scale[chan], shift_u, shift_v, -1.0));
% endif
    out[((size_t)row * nchan + chan) * npol + pol] += sum;
}
