## Imaging weights: a gridded weight histogram and a gather that applies
## uniform or Briggs (robust) weighting from it.  Two ways to build the
## histogram: `weight_histogram` adds with float atomics (fast, the order of
## the additions -- so the last bits -- varies run to run), or bit-
## reproducibly: `weight_histogram_fixed` adds weights scaled to 64-bit fixed
## point with integer atomics (exact, so the order cannot matter) and
## `fixed_to_histogram` folds them into the float histogram; where the device
## lacks 64-bit integer atomics, `cell_keys` + clgrid's stable radix sort +
## `cell_sums` (each cell summed by one work-item in sample order).
## Parameters also: int64_atomics (bool: cl_khr_int64_base_atomics).
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

% if int64_atomics:
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable

// Deterministic histogram in fixed point: hist_fixed[cell] += rint(w * scale)
// with scale a power of two chosen by the host so that the chunk's total
// weight times scale stays below 2^62: integer additions are exact, so the
// sums do not depend on the order the work-items run in.
__kernel void weight_histogram_fixed(__global const ${coord} *uvw_m,
                                     __global const ${coord} *freq_hz,
                                     __global const float *weight,
                                     const unsigned int nrow, const unsigned int nchan,
                                     const ${coord} u_scale, const ${coord} v_scale,
                                     const int nu, const int nv,
                                     const float scale,
                                     volatile __global long *hist_fixed,
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
    atom_add(hist_fixed + cell, (long)rint(w * scale));   // w * 2^k: exact in float
}

// hist += hist_fixed / scale (one writer per cell), and hist_fixed cleared
// for the next chunk.
__kernel void fixed_to_histogram(__global long *hist_fixed, const ${coord} inverse_scale,
                                 const unsigned int n_cells, __global float *hist)
{
    const size_t cell = get_global_id(0);
    if (cell >= n_cells)
        return;
    const long fixed = hist_fixed[cell];
    if (fixed != 0) {
        hist[cell] += (float)((${coord})fixed * inverse_scale);
        hist_fixed[cell] = 0;
    }
}

% endif
// Deterministic histogram, step 1: the cell of every sample as a sort key;
// samples without a positive weight or off the grid get the sentinel
// 0xffffffff (the sort maps it to nu * nv: last, never summed).
__kernel void cell_keys(__global const ${coord} *uvw_m,
                        __global const ${coord} *freq_hz,
                        __global const float *weight,
                        const unsigned int nrow, const unsigned int nchan,
                        const ${coord} u_scale, const ${coord} v_scale,
                        const int nu, const int nv,
                        __global unsigned int *keys,
                        volatile __global unsigned int *n_outside)
{
    const size_t sample = get_global_id(0);
    if (sample >= (size_t)nrow * nchan)
        return;
    const float w = weight[sample];
    if (!(w > 0.0f)) {
        keys[sample] = 0xffffffffu;
        return;
    }
    const size_t row = sample / nchan;
    const long cell = uv_cell(uvw_m[3 * row], uvw_m[3 * row + 1], freq_hz[sample % nchan],
                              u_scale, v_scale, nu, nv);
    if (cell < 0)
        atomic_inc(n_outside);  // an integer count: exact in any order
    keys[sample] = cell < 0 ? 0xffffffffu : (unsigned int)cell;
}

// Deterministic histogram, step 2: after the stable sort, the first sample
// of each cell's run sums the run in sample order (${coord} accumulator)
// and adds it to the cell: one writer per cell, a fixed order, no atomics.
__kernel void cell_sums(__global const unsigned int *sorted_keys,
                        __global const unsigned int *order,   // input position of each
                        __global const float *weight,
                        const unsigned int n, const unsigned int n_cells,
                        __global float *hist)
{
    const size_t i = get_global_id(0);
    if (i >= n)
        return;
    const unsigned int key = sorted_keys[i];
    if (key >= n_cells || (i > 0 && sorted_keys[i - 1] == key))
        return;
    ${coord} sum = 0;
    for (size_t j = i; j < n && sorted_keys[j] == key; ++j)
        sum += weight[order[j]];
    hist[key] += (float)sum;
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
