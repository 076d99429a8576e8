## Gridding core, stage "interpolate" (degridding): padded uv grid planes ->
## visibilities, the adjoint of core_spread.  One work-item per visibility,
## taken in the order of the device sort so that neighbouring work-items read
## neighbouring cells; each work-item owns its output, so no atomics.  With
## w-stacking the planes of one pass [plane0, plane0 + n_pass) are summed with
## their w-kernel weights and added to out (passes run in a fixed order).
## Parameters: real ("float" | "double"): grid precision; vis_real: output
##             precision; support (int W), beta; do_w, shifted, weighted,
##             masked (bool); with_f64 (always True); kernel_eval ("exp" |
##             "horner"): the kernel's taps by the formula or by the spreader's
##             per-tap polynomials (horner: their coefficients, as
##             eskernel.horner_coefficients), the same as spread_vector's so
##             that the two stay adjoint.  out starts zeroed (points with no
##             valid position are never visited).
<%
    csuffix = "f32" if real == "float" else "f64"
    vec = real + "2"
    vvec = vis_real + "2"
%>
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
<%include file="es_kernel.cl.mako"/>
<%include file="complex.cl.mako"/>
<%include file="footprint.cl.mako"/>
% if kernel_eval == "horner":
<%
    suffix = "f" if real == "float" else ""
    def literal(value):
        return ("%.9e" % value + "f") if real == "float" else "%.17e" % value
    def horner_expression(tap):
        variable = "x0" if tap == 0 else ("x1" if tap == support - 1 else "x")
        expression = literal(horner[0][tap])
        for row in horner[1:]:
            expression = "fma(%s, %s, %s)" % (expression, variable, literal(row[tap]))
        return expression
%>

// The W taps phi(t + a - W/2) of a point at offset t in [0, 1) past its
// footprint's first cell, by Horner's rule as spread_vector: each in its
// variable (eskernel.horner_variables): x = 2t - 1 inside, x0 = 2 sqrt(t) - 1
// for the first tap, x1 = 2 sqrt(1 - t) - 1 for the last.
inline void kernel_taps(const ${real} t, ${real} *taps)
{
    const ${real}2 roots = sqrt((${real}2)(t, (${real})1 - t));
    const ${real} x = fma(t, (${real})2, (${real})-1);
    const ${real} x0 = fma(roots.x, (${real})2, (${real})-1);
    const ${real} x1 = fma(roots.y, (${real})2, (${real})-1);
%   for tap in range(support):
    taps[${tap}] = ${horner_expression(tap)};
%   endfor
}
% endif


__kernel void interpolate(__global const unsigned int *sorted_index, const unsigned int n_points,
                          __global const double *uvw, __global const double *freq_scale,
                          const unsigned int nchan,
                          __global ${vvec} *out, const unsigned int npol, const unsigned int pol,
                          __global const ${vis_real} *wgt, __global const unsigned char *mask,
                          __global const ${vec} *planes, const int nu, const int nv,
                          const double u_scale, const double v_scale,
                          const double w_scale, const double w_offset,
                          const int plane0, const int n_pass,
                          const double shift_u, const double shift_v)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_points)
        return;
    const unsigned int k = sorted_index[i];
    const size_t row = k / nchan;
    const double f = freq_scale[k - row * nchan];
    const double u = uvw[3 * row] * f * u_scale;
    const double v = uvw[3 * row + 1] * f * v_scale;
    const double fu = footprint_start(u), fv = footprint_start(v);
    const int cu = wrap_cell(fu, nu), cv = wrap_cell(fv, nv);
    ${real} ku[SUPPORT], kv[SUPPORT];
    int iv[SUPPORT];
% if kernel_eval == "horner":
    kernel_taps((${real})(fu - u + 0.5 * SUPPORT), ku);
    kernel_taps((${real})(fv - v + 0.5 * SUPPORT), kv);
    for (int a = 0; a < SUPPORT; ++a)
        iv[a] = (cv + a) < nv ? cv + a : cv + a - nv;
% else:
    const ${real} xu = (${real})(fu - u), xv = (${real})(fv - v);
    for (int a = 0; a < SUPPORT; ++a) {
        ku[a] = es_kernel(xu + (${real})a);
        kv[a] = es_kernel(xv + (${real})a);
        iv[a] = (cv + a) < nv ? cv + a : cv + a - nv;
    }
% endif
% if do_w:
    const double w = uvw[3 * row + 2] * f * w_scale - w_offset;
    const int p_first = max((int)footprint_start(w), plane0);
    const int p_end = min((int)footprint_start(w) + SUPPORT, plane0 + n_pass);
%   if kernel_eval == "horner":
    ${real} kw[SUPPORT];
    kernel_taps((${real})(footprint_start(w) - w + 0.5 * SUPPORT), kw);
%   endif
% else:
    const int p_first = plane0, p_end = plane0 + 1;
% endif
    ${vec} sum = (${vec})(0, 0);
    for (int p = p_first; p < p_end; ++p) {
        __global const ${vec} *grid = planes + (size_t)(p - plane0) * nu * nv;
        ${vec} plane_sum = (${vec})(0, 0);
        int iu = cu;
        for (int a = 0; a < SUPPORT; ++a) {
            __global const ${vec} *grid_row = grid + (size_t)iu * nv;
            ${vec} row_sum = (${vec})(0, 0);
            for (int b = 0; b < SUPPORT; ++b)
                row_sum += grid_row[iv[b]] * kv[b];
            plane_sum += row_sum * ku[a];
            iu = (iu + 1 == nu) ? 0 : iu + 1;
        }
% if do_w and kernel_eval == "horner":
        sum += plane_sum * kw[p - (int)footprint_start(w)];
% elif do_w:
        sum += plane_sum * es_kernel((${real})((double)p - w));
% else:
        sum += plane_sum;
% endif
    }
% if shifted:
    {
        double c;
        const double s = sincos(-f * (uvw[3 * row] * shift_u + uvw[3 * row + 1] * shift_v), &c);
        sum = cmul_${csuffix}(sum, (${vec})((${real})c, (${real})s));
    }
% endif
% if weighted:
    sum *= (${real})wgt[k];
% endif
% if masked:
    sum = mask[k] ? sum : (${vec})(0, 0);
% endif
    const size_t o = (size_t)k * npol + pol;
    out[o] += (${vvec})((${vis_real})sum.x, (${vis_real})sum.y);
}
