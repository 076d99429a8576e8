## Imaging weights: a gridded weight histogram and a gather that applies
## uniform or Briggs (robust) weighting from it.
## Parameters: coord ("float" | "double": precision of the cell-index
##             arithmetic), scheme ("uniform" | "briggs").
## Layout: uvw_m is (nrow, 3); weight arrays are (nrow, nchan) row-major;
## the histogram is (nu, nv) row-major with u on the first axis, zero
## frequency at (nu / 2, nv / 2), like ducc0's image axes.
<%include file="atomics.cl.mako"/>
% if coord == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif

// Cell of a sample in the (nu, nv) uv grid, or -1 when it falls off it.
// A visibility and its conjugate, V(-u, -v) = conj(V(u, v)), describe the
// same measurement, so both fold onto the half-plane u >= 0 (u == 0: v >= 0)
// and land in one cell: the count a sample sees is then the same whether
// the imager grids it at (u, v) or at (-u, -v).
inline long uv_cell(const ${coord} u_m, const ${coord} v_m, const ${coord} freq_hz,
                    const ${coord} u_scale, const ${coord} v_scale,
                    const int nu, const int nv)
{
    ${coord} u = u_m * freq_hz * u_scale;
    ${coord} v = v_m * freq_hz * v_scale;
    if (u < 0 || (u == 0 && v < 0)) {
        u = -u;
        v = -v;
    }
    const long iu = (long)floor(u + (${coord})0.5) + nu / 2;
    const long iv = (long)floor(v + (${coord})0.5) + nv / 2;
    if (iu < 0 || iu >= nu || iv < 0 || iv >= nv)
        return -1;
    return iu * nv + iv;
}

// hist[cell] += weight of every sample with a positive weight.
__kernel void weight_histogram(__global const ${coord} *uvw_m,
                               __global const ${coord} *freq_hz,
                               __global const float *weight,
                               const unsigned int nrow, const unsigned int nchan,
                               const ${coord} u_scale, const ${coord} v_scale,
                               const int nu, const int nv,
                               volatile __global float *hist,
                               volatile __global unsigned int *n_outside)
{
    const size_t sample = get_global_id(0);
    if (sample >= (size_t)nrow * nchan)
        return;
    const float w = weight[sample];
    if (!(w > 0.0f))
        return;
    const size_t row = sample / nchan;
    const long cell = uv_cell(uvw_m[3 * row], uvw_m[3 * row + 1], freq_hz[sample % nchan],
                              u_scale, v_scale, nu, nv);
    if (cell < 0) {
        atomic_inc(n_outside);
        return;
    }
    atomic_add_f32(hist + cell, w);
}

// weight_out[i] = weight[i] / density of its cell: uniform divides by the
// cell's summed weight W_k, Briggs by (1 + W_k f^2).  Samples off the grid
// get weight 0 (and are counted), as a uniform weight is undefined there.
__kernel void apply_weights(__global const ${coord} *uvw_m,
                            __global const ${coord} *freq_hz,
                            __global const float *weight,
                            const unsigned int nrow, const unsigned int nchan,
                            const ${coord} u_scale, const ${coord} v_scale,
                            const int nu, const int nv,
                            __global const float *hist,
                            const float briggs_f2,
                            __global float *weight_out,
                            volatile __global unsigned int *n_outside)
{
    const size_t sample = get_global_id(0);
    if (sample >= (size_t)nrow * nchan)
        return;
    const float w = weight[sample];
    if (!(w > 0.0f)) {
        weight_out[sample] = 0.0f;
        return;
    }
    const size_t row = sample / nchan;
    const long cell = uv_cell(uvw_m[3 * row], uvw_m[3 * row + 1], freq_hz[sample % nchan],
                              u_scale, v_scale, nu, nv);
    if (cell < 0) {
        atomic_inc(n_outside);
        weight_out[sample] = 0.0f;
        return;
    }
% if scheme == "uniform":
    weight_out[sample] = w / hist[cell];
% else:
    weight_out[sample] = w / (1.0f + hist[cell] * briggs_f2);
% endif
}
