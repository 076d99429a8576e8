## Gridding core, stage "correct": between the padded uv grid planes and the
## dirty image: grid correction (division by the ES kernel's Fourier
## transform), cropping / zero padding, the w-plane phase screens and the
## division by n.  The planes of one pass sit one after another in memory.
## Parameters: real ("float" | "double"), do_w (bool), divide_by_n (bool),
##             n_quadrature (int): the positive half of the Gauss-Legendre nodes
##             of the w kernel's transform (even: each counted twice);
##             float_float (bool, default False): a device without fp64 (real
##             "float"): no double anywhere; the correction in float (its
##             relative error, ~1e-6, is far below any float32 epsilon), the
##             phase screens from float-float n - 1 and w, in turns, whose
##             fraction alone goes to a float sine (a screen turns thousands
##             of times across a wide field);
##             cache_screens (bool, default False; double screens only): also
##             the kernel screen_phasors (each pixel's screen at the first
##             plane and its step, computed once) and the variants
##             planes_to_dirty_cached / dirty_to_planes_cached that read them
##             instead of two sincos a pixel (PoCL calls a scalar libm sincos:
##             15-16 ms of each 1024^2 kernel on 2 cores).
<%
    cache_screens = context.get("cache_screens", False)
    if cache_screens and context.get("float_float", False):
        raise ValueError("cache_screens: double screens only")
    vec = real + "2"
    float_float = context.get("float_float", False)
    if float_float and real != "float":
        raise ValueError("float_float: a float image only")
    # the correction's inputs and the image geometry: double, or float
    geo_t = "float" if float_float else "double"
    # w_first and dw of the phase screens, and the geometry they read
    pos_t = "float2" if float_float else "double"
%>
% if float_float:
<%include file="floatfloat.cl.mako"/>
% else:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif

// Image coordinates of pixel (i, j): l on the first axis, like ducc0.
inline ${geo_t} pixel_l(int i, int npix, ${geo_t} pixsize, ${geo_t} centre)
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
// small l, m (1 - sqrt(1 - r2) cancels badly); past the horizon (1 - l^2 -
// m^2 < 0) ducc0's continuation n = -sqrt(l^2 + m^2 - 1) (wgridder_impl.h,
// Wgridder::phase: nm1 = -sqrt(-tmp) - 1), as clgrid.core.plan.n_minus_1.
inline ${geo_t} n_minus_1(${geo_t} l, ${geo_t} m)
{
    const ${geo_t} r2 = l * l + m * m;
    const ${geo_t} tmp = 1 - r2;
    return tmp >= 0 ? -r2 / (sqrt(tmp) + 1) : -sqrt(-tmp) - 1;
}
% if float_float:

// n - 1 of pixel (i, j) in float-float, from pixel sizes and centres as pairs
inline ff_t n_minus_1_ff(int i, int j, int npix_x, int npix_y, ff_t pixsize_x,
                         ff_t pixsize_y, ff_t centre_x, ff_t centre_y)
{
    const ff_t l = ff_add(ff_mul_f(pixsize_x, (float)(i - npix_x / 2)), centre_x);
    const ff_t m = ff_add(ff_mul_f(pixsize_y, (float)(j - npix_y / 2)), centre_y);
    const ff_t r2 = ff_add(ff_mul(l, l), ff_mul(m, m));
    const ff_t tmp = ff_add_f(-r2, 1.0f);
    if (tmp.x >= 0.0f)
        return -ff_div(r2, ff_add_f(ff_sqrt(tmp), 1.0f));
    // past the horizon: ducc0's -sqrt(l^2 + m^2 - 1) - 1
    return ff_add_f(-ff_sqrt(-tmp), -1.0f);
}
% endif

// The w planes' phase screens at one pixel, exp(i sign 2 pi (w_first + p dw) eta)
// for p = 0, 1, ...: two sincos, then one complex rotation per plane (PoCL's
// sincos per plane dominated these kernels; the rotation's rounding grows by
// about 1e-16 per plane, far below any epsilon).  Float-float: the phase in
// turns, one step added per plane and a float sincos of its fraction (a
// rotation in float would gain ~1e-7 a plane).
<%def name="phase_walk(sign, cached=False)">\
% if cached:
    // this pixel's screen at the first plane and its step (screen_phasors)
    const double4 screen = screens[pixel];
    double phase_c = screen.x, phase_s = ${sign}screen.y;
    const double step_c = screen.z, step_s = ${sign}screen.w;
% elif float_float:
    const ff_t eta = n_minus_1_ff(i, j, npix_x, npix_y, pixsize_x, pixsize_y, centre_x,
                                  centre_y);
    ff_t turns = ${sign}ff_mul(w_first, eta);
    const ff_t step = ${sign}ff_mul(dw, eta);
% else:
    const double eta = n_minus_1(pixel_l(i, npix_x, pixsize_x, centre_x),
                                 pixel_l(j, npix_y, pixsize_y, centre_y));
    double phase_c, step_c;
    double phase_s = sincos(${sign}2.0 * M_PI * w_first * eta, &phase_c);
    const double step_s = sincos(${sign}2.0 * M_PI * dw * eta, &step_c);
% endif
</%def>\
<%def name="phase_now()">\
% if float_float:
        const float2 phase = ff_expi_turns(turns);
        const float phase_c = phase.x, phase_s = phase.y;
% endif
</%def>\
<%def name="phase_next()">\
% if float_float:
        turns = ff_add(turns, step);
% else:
        {
            const double next_c = phase_c * step_c - phase_s * step_s;
            phase_s = phase_s * step_c + phase_c * step_s;
            phase_c = next_c;
        }
% endif
</%def>\

// phi_w_hat(eta dw) of pixel coordinates (l, m) by quadrature (nodes s_q,
// kernel-times-weight values phi_q).
inline ${geo_t} w_kernel_hat(const ${geo_t} l, const ${geo_t} m, __global const ${geo_t} *s_q,
                             __global const ${geo_t} *phi_q, const ${geo_t} dw)
{
    const ${geo_t} xi = n_minus_1(l, m) * dw;
    ${geo_t} phi_hat = 0;
    for (int q = 0; q < ${n_quadrature}; ++q)
        phi_hat += phi_q[q] * cos(2 * ${"M_PI_F" if float_float else "M_PI"} * s_q[q] * xi);
    return phi_hat;
}
% if do_w:

// An image centred on the phase centre: phi_w_hat depends on l^2 and m^2
// only, so it is computed for the pixel offsets (|i - npix_x / 2|, |j -
// npix_y / 2|) once, a quarter of the pixels (a new observation's plan on
// 2 CPU cores: 100 cosines a pixel, 10.5 ms of a 512^2 image), and read by
// correction.  The same l^2 and m^2 as the pixel's own, so the same values.
__kernel void w_kernel_hat_quadrant(__global ${geo_t} *hat, const int npix_x, const int npix_y,
                                    const ${geo_t} pixsize_x, const ${geo_t} pixsize_y,
                                    __global const ${geo_t} *s_q,
                                    __global const ${geo_t} *phi_q, const ${geo_t} dw)
{
    const int a = get_global_id(0), b = get_global_id(1);
    const int n_a = npix_x / 2 + 1, n_b = npix_y / 2 + 1;
    if (a >= n_a || b >= n_b)
        return;
    hat[(size_t)a * n_b + b] = w_kernel_hat(pixel_l(a + npix_x / 2, npix_x, pixsize_x, 0),
                                            pixel_l(b + npix_y / 2, npix_y, pixsize_y, 0),
                                            s_q, phi_q, dw);
}
% endif

// Per-pixel correction: scale * corr_x[i] * corr_y[j] / phi_w_hat(eta dw) / n;
// with quadrant (w, an image at the phase centre) phi_w_hat from
// w_kernel_hat_quadrant's hat.
__kernel void correction(__global ${real} *corr, const int npix_x, const int npix_y,
                         __global const ${geo_t} *corr_x, __global const ${geo_t} *corr_y,
                         const ${geo_t} pixsize_x, const ${geo_t} pixsize_y,
                         const ${geo_t} centre_x, const ${geo_t} centre_y,
                         __global const ${geo_t} *s_q, __global const ${geo_t} *phi_q,
                         const ${geo_t} dw, __global const ${geo_t} *hat, const int quadrant)
{
    const int i = get_global_id(0), j = get_global_id(1);
    if (i >= npix_x || j >= npix_y)
        return;
    ${geo_t} value = corr_x[i] * corr_y[j];
    const ${geo_t} l = pixel_l(i, npix_x, pixsize_x, centre_x);
    const ${geo_t} m = pixel_l(j, npix_y, pixsize_y, centre_y);
% if do_w:
    value /= quadrant ? hat[(size_t)abs(i - npix_x / 2) * (npix_y / 2 + 1) + abs(j - npix_y / 2)]
                      : w_kernel_hat(l, m, s_q, phi_q, dw);
% endif
% if divide_by_n:
    // n; past the horizon (n <= 0) ducc0 zeroes the pixel ("beyond the
    // horizon, don't really know what to do here", wgridder_impl.h,
    // apply_global_corrections; at n = 0 exactly its reference does too)
    const ${geo_t} n2 = 1 - l * l - m * m;
    value = n2 > 0 ? value / sqrt(n2) : 0;
% endif
    corr[(size_t)i * npix_y + j] = (${real})value;
}

<%def name="screen_kernels(cached)">
<%
    suffix = "_cached" if cached else ""
    screens_arg = ",\n                              __global const double4 *screens" if cached else ""
%>
// Planes [plane0, plane0 + n_pass) (after the backward FFT) -> dirty image,
// accumulated in a fixed plane order: dirty += sum_p Re(grid_p exp(-2 pi i
// w_p (n - 1))) * corr * scale.  One work-item per image pixel, the first
// global dimension along the image's rows (contiguous).
__kernel void planes_to_dirty${suffix}(__global const ${vec} *planes, const int nu, const int nv,
                              const int n_pass, __global ${real} *dirty,
                              __global const ${real} *corr, const int npix_x, const int npix_y,
                              const ${pos_t} pixsize_x, const ${pos_t} pixsize_y,
                              const ${pos_t} centre_x, const ${pos_t} centre_y,
                              const ${pos_t} w_first, const ${pos_t} dw, const ${real} scale,
                              const int accumulate${screens_arg})
{
    const int j = get_global_id(0), i = get_global_id(1);
    if (i >= npix_x || j >= npix_y)
        return;
    const size_t cell = grid_index(i - npix_x / 2, nu) * nv + grid_index(j - npix_y / 2, nv);
    const size_t plane_cells = (size_t)nu * nv;
    const size_t pixel = (size_t)i * npix_y + j;
% if do_w:
${phase_walk("-", cached)}
% endif
    ${real} sum = 0;
    for (int p = 0; p < n_pass; ++p) {
        const ${vec} value = planes[p * plane_cells + cell];
% if do_w:
${phase_now()}
        sum += value.x * (${real})phase_c - value.y * (${real})phase_s;
${phase_next()}
% else:
        sum += value.x;
% endif
    }
    // the first pass writes (no zeroed image needed), later ones add
    dirty[pixel] = (accumulate ? dirty[pixel] : (${real})0) + sum * corr[pixel] * scale;
}

// Dirty image -> planes [plane0, plane0 + n_pass) (before the forward FFT):
// every cell of every plane is written, zero outside the image's cells.
// One work-item per grid cell, over the planes; the first global dimension
// runs along v, so neighbouring work-items write neighbouring cells (CPU
// runtimes vectorise along it).
__kernel void dirty_to_planes${suffix}(__global const ${real} *dirty, __global const ${real} *corr,
                              const int npix_x, const int npix_y,
                              __global ${vec} *planes, const int nu, const int nv,
                              const int n_pass,
                              const ${pos_t} pixsize_x, const ${pos_t} pixsize_y,
                              const ${pos_t} centre_x, const ${pos_t} centre_y,
                              const ${pos_t} w_first, const ${pos_t} dw${screens_arg})
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
${phase_walk("", cached)}
    for (int p = 0; p < n_pass; ++p) {
${phase_now()}
        out[p * plane_cells] = (${vec})(value * (${real})phase_c, value * (${real})phase_s);
${phase_next()}
    }
% else:
    for (int p = 0; p < n_pass; ++p)
        out[p * plane_cells] = (${vec})(value, (${real})0);
% endif
}
</%def>
${screen_kernels(False)}
% if cache_screens and do_w:

// Each pixel's screen exp(2 pi i w_first (n - 1)) at the pass's first plane
// and its step exp(2 pi i dw (n - 1)), once per plan (the _cached kernels
// conjugate them where their sign is negative).
__kernel void screen_phasors(__global double4 *screens, const int npix_x, const int npix_y,
                             const double pixsize_x, const double pixsize_y,
                             const double centre_x, const double centre_y,
                             const double w_first, const double dw)
{
    const int j = get_global_id(0), i = get_global_id(1);
    if (i >= npix_x || j >= npix_y)
        return;
${phase_walk("")}
    screens[(size_t)i * npix_y + j] = (double4)(phase_c, phase_s, step_c, step_s);
}

// The same screens of an image at the phase centre, a work-item a pixel
// offset (a, b) of a quadrant: n - 1 depends on l^2 and m^2 only, so the up
// to four pixels (npix_x / 2 +- a, npix_y / 2 +- b) share one pair of sincos
// (PoCL's scalar libm: a new observation's first call).
__kernel void screen_phasors_quadrant(__global double4 *screens, const int npix_x,
                                      const int npix_y, const double pixsize_x,
                                      const double pixsize_y, const double w_first,
                                      const double dw)
{
    const int b = get_global_id(0), a = get_global_id(1);
    if (a > npix_x / 2 || b > npix_y / 2)
        return;
    const int i = npix_x / 2 + a, j = npix_y / 2 + b;   // i = npix_x: its mirror only
    const int i2 = npix_x / 2 - a, j2 = npix_y / 2 - b;
    const double centre_x = 0, centre_y = 0;
${phase_walk("")}
    const double4 screen = (double4)(phase_c, phase_s, step_c, step_s);
    if (i < npix_x && j < npix_y)
        screens[(size_t)i * npix_y + j] = screen;
    if (i < npix_x)
        screens[(size_t)i * npix_y + j2] = screen;
    if (j < npix_y)
        screens[(size_t)i2 * npix_y + j] = screen;
    screens[(size_t)i2 * npix_y + j2] = screen;
}
${screen_kernels(True)}
% endif
