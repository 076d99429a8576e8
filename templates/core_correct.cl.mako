## Gridding core, stage "correct": between the padded uv grid planes and the
## dirty image: grid correction (division by the ES kernel's Fourier
## transform), cropping / zero padding, the w-plane phase screens and the
## division by n.  The planes of one pass sit one after another in memory.
## Parameters: real ("float" | "double"), do_w (bool), divide_by_n (bool),
##             n_quadrature (int): Gauss-Legendre nodes of the w kernel's transform.
<%
    vec = real + "2"
%>
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

// Image coordinates of pixel (i, j): l on the first axis, like ducc0.
inline double pixel_l(int i, int npix, double pixsize, double centre)
{
    return (i - npix / 2) * pixsize + centre;
}

// Grid cell of pixel offset t (from the image centre) on a grid of n: the
// FFT's frequency index, negative offsets wrapped to the top.
inline size_t grid_index(int t, int n)
{
    return (size_t)(t < 0 ? t + n : t);
}

// n - 1 = sqrt(1 - l^2 - m^2) - 1, written so that it keeps its digits for
// small l, m (1 - sqrt(1 - r2) cancels badly).
inline double n_minus_1(double l, double m)
{
    const double r2 = l * l + m * m;
    return -r2 / (sqrt(1.0 - r2) + 1.0);
}

// The w planes' phase screens at one pixel, exp(i sign 2 pi (w_first + p dw) eta)
// for p = 0, 1, ...: two sincos, then one complex rotation per plane (PoCL's
// sincos per plane dominated these kernels; the rotation's rounding grows by
// about 1e-16 per plane, far below any epsilon).
<%def name="phase_walk(sign)">\
    double phase_c, step_c;
    double phase_s = sincos(${sign}2.0 * M_PI * w_first * eta, &phase_c);
    const double step_s = sincos(${sign}2.0 * M_PI * dw * eta, &step_c);
</%def>\
<%def name="phase_next()">\
        {
            const double next_c = phase_c * step_c - phase_s * step_s;
            phase_s = phase_s * step_c + phase_c * step_s;
            phase_c = next_c;
        }
</%def>\

// Per-pixel correction: scale * corr_x[i] * corr_y[j] / phi_w_hat(eta dw) / n.
// phi_w_hat by quadrature (nodes s_q, kernel-times-weight values phi_q).
__kernel void correction(__global ${real} *corr, const int npix_x, const int npix_y,
                         __global const double *corr_x, __global const double *corr_y,
                         const double pixsize_x, const double pixsize_y,
                         const double centre_x, const double centre_y,
                         __global const double *s_q, __global const double *phi_q,
                         const double dw)
{
    const int i = get_global_id(0), j = get_global_id(1);
    if (i >= npix_x || j >= npix_y)
        return;
    double value = corr_x[i] * corr_y[j];
    const double l = pixel_l(i, npix_x, pixsize_x, centre_x);
    const double m = pixel_l(j, npix_y, pixsize_y, centre_y);
% if do_w:
    const double xi = n_minus_1(l, m) * dw;
    double phi_hat = 0.0;
    for (int q = 0; q < ${n_quadrature}; ++q)
        phi_hat += phi_q[q] * cos(2.0 * M_PI * s_q[q] * xi);
    value /= phi_hat;
% endif
% if divide_by_n:
    value /= sqrt(1.0 - l * l - m * m);
% endif
    corr[(size_t)i * npix_y + j] = (${real})value;
}

// Planes [plane0, plane0 + n_pass) (after the backward FFT) -> dirty image,
// accumulated in a fixed plane order: dirty += sum_p Re(grid_p exp(-2 pi i
// w_p (n - 1))) * corr * scale.  One work-item per image pixel, the first
// global dimension along the image's rows (contiguous).
__kernel void planes_to_dirty(__global const ${vec} *planes, const int nu, const int nv,
                              const int n_pass, __global ${real} *dirty,
                              __global const ${real} *corr, const int npix_x, const int npix_y,
                              const double pixsize_x, const double pixsize_y,
                              const double centre_x, const double centre_y,
                              const double w_first, const double dw, const ${real} scale,
                              const int accumulate)
{
    const int j = get_global_id(0), i = get_global_id(1);
    if (i >= npix_x || j >= npix_y)
        return;
    const size_t cell = grid_index(i - npix_x / 2, nu) * nv + grid_index(j - npix_y / 2, nv);
    const size_t plane_cells = (size_t)nu * nv;
% if do_w:
    const double eta = n_minus_1(pixel_l(i, npix_x, pixsize_x, centre_x),
                                 pixel_l(j, npix_y, pixsize_y, centre_y));
${phase_walk("-")}
% endif
    ${real} sum = 0;
    for (int p = 0; p < n_pass; ++p) {
        const ${vec} value = planes[p * plane_cells + cell];
% if do_w:
        sum += value.x * (${real})phase_c - value.y * (${real})phase_s;
${phase_next()}
% else:
        sum += value.x;
% endif
    }
    const size_t pixel = (size_t)i * npix_y + j;
    // the first pass writes (no zeroed image needed), later ones add
    dirty[pixel] = (accumulate ? dirty[pixel] : (${real})0) + sum * corr[pixel] * scale;
}

// Dirty image -> planes [plane0, plane0 + n_pass) (before the forward FFT):
// every cell of every plane is written, zero outside the image's cells.
// One work-item per grid cell, over the planes; the first global dimension
// runs along v, so neighbouring work-items write neighbouring cells (CPU
// runtimes vectorise along it).
__kernel void dirty_to_planes(__global const ${real} *dirty, __global const ${real} *corr,
                              const int npix_x, const int npix_y,
                              __global ${vec} *planes, const int nu, const int nv,
                              const int n_pass,
                              const double pixsize_x, const double pixsize_y,
                              const double centre_x, const double centre_y,
                              const double w_first, const double dw)
{
    const int y = get_global_id(0), x = get_global_id(1);
    if (x >= nu || y >= nv)
        return;
    const int i = (x < nu / 2 ? x : x - nu) + npix_x / 2;
    const int j = (y < nv / 2 ? y : y - nv) + npix_y / 2;
    const size_t plane_cells = (size_t)nu * nv;
    __global ${vec} *out = planes + (size_t)x * nv + y;
    if (!(i >= 0 && i < npix_x && j >= 0 && j < npix_y)) {
        for (int p = 0; p < n_pass; ++p)
            out[p * plane_cells] = (${vec})(0, 0);
        return;
    }
    const size_t pixel = (size_t)i * npix_y + j;
    const ${real} value = dirty[pixel] * corr[pixel];
% if do_w:
    const double eta = n_minus_1(pixel_l(i, npix_x, pixsize_x, centre_x),
                                 pixel_l(j, npix_y, pixsize_y, centre_y));
${phase_walk("")}
    for (int p = 0; p < n_pass; ++p) {
        out[p * plane_cells] = (${vec})(value * (${real})phase_c, value * (${real})phase_s);
${phase_next()}
    }
% else:
    for (int p = 0; p < n_pass; ++p)
        out[p * plane_cells] = (${vec})(value, (${real})0);
% endif
}
