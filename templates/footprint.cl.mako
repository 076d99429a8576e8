## Shared helper of the core's kernels: where a point's kernel footprint
## starts, and where visibility k lies on the padded grid (point_place).
## Needs SUPPORT (the kernel width W in cells or planes) defined.
## Parameters: real ("float" | "double": the offsets' type), do_w (bool),
##             float_float (bool, default False): positions in float-float
##             pairs (floatfloat.cl.mako included before; devices without
##             fp64) instead of double.
<%
    float_float = context.get("float_float", False)
    pos_t = "float2" if float_float else "double"
%>
% if float_float:

// First cell (or plane) of the footprint of a point at float-float pos,
// ceil(pos - W/2), and the offset t in [0, 1] of the point past it.
inline float footprint_start_ff(const ff_t pos, float *t)
{
    const ff_t x = ff_add_f(pos, -0.5f * SUPPORT);
    float start = ceil(x.x);
    if (start == x.x && x.y > 0.0f)   // x.x whole: the low part decides
        start += 1.0f;
    *t = clamp((start - x.x) - x.y, 0.0f, 1.0f);
    return start;
}

// A cell index wrapped into [0, n) on a periodic axis of n cells (in float:
// a finite cell beyond int range, from bad uvw, still lands on the grid).
inline int wrap_cell(const float cell, const int n)
{
    const float c = cell - (float)n * floor(cell / (float)n);
    return clamp((int)c, 0, n - 1);
}
% else:

// First cell (or plane) of the footprint of a point at pos: ceil(pos - W/2).
inline double footprint_start(const double pos)
{
    return ceil(pos - 0.5 * SUPPORT);
}

// A cell index wrapped into [0, n) on a periodic axis of n cells (in double:
// a finite cell beyond int range, from bad uvw, still lands on the grid).
inline int wrap_cell(const double cell, const int n)
{
    const double c = cell - (double)n * floor(cell / (double)n);
    return clamp((int)c, 0, n - 1);
}
% endif

// Where visibility k (row k / nchan) lies: 0, with *cell = (first footprint
// cell in u, in v (wrapped), first w plane, k) and *t the offsets in [0, 1]
// of the point past those cells (cell = pos - W/2 + t); 1 where u, v or w
// is not finite.  uvw in metres times freq / c times the scales (to cells,
// and to w planes less w_offset); in double, or float-float.
inline int point_place(const unsigned int k, __global const ${pos_t} *uvw,
                       __global const ${pos_t} *freq_scale, const unsigned int nchan,
                       const int nu, const int nv, const ${pos_t} u_scale,
                       const ${pos_t} v_scale, const ${pos_t} w_scale,
                       const ${pos_t} w_offset, int4 *cell, ${real}4 *t)
{
    const size_t row = k / nchan;
% if float_float:
    const ff_t f = freq_scale[k - row * nchan];
    const ff_t u = ff_mul(ff_mul(uvw[3 * row], f), u_scale);
    const ff_t v = ff_mul(ff_mul(uvw[3 * row + 1], f), v_scale);
    const ff_t w = ff_add(ff_mul(ff_mul(uvw[3 * row + 2], f), w_scale), -w_offset);
    if (!(isfinite(u.x) && isfinite(v.x) && isfinite(w.x)))
        return 1;
    float tu, tv, tw = 1.0f;
    const float fu = footprint_start_ff(u, &tu), fv = footprint_start_ff(v, &tv);
%   if do_w:
    const float fw = footprint_start_ff(w, &tw);
%   else:
    const float fw = 0.5f * SUPPORT;
%   endif
    *t = (float4)(tu, tv, tw, 0.0f);
% else:
    const double f = freq_scale[k - row * nchan];
    const double u = uvw[3 * row] * f * u_scale;
    const double v = uvw[3 * row + 1] * f * v_scale;
    const double w = uvw[3 * row + 2] * f * w_scale - w_offset;
    if (!(isfinite(u) && isfinite(v) && isfinite(w)))
        return 1;
    const double fu = footprint_start(u), fv = footprint_start(v);
%   if do_w:
    const double fw = footprint_start(w);
    const double tw = clamp(fw - w + 0.5 * SUPPORT, 0.0, 1.0);
%   else:
    const double fw = 0.5 * SUPPORT, tw = 1.0;
%   endif
    // in [0, 1] also after rounding (the CPU taps take square roots of t, 1 - t)
    *t = (${real}4)((${real})clamp(fu - u + 0.5 * SUPPORT, 0.0, 1.0),
                    (${real})clamp(fv - v + 0.5 * SUPPORT, 0.0, 1.0), (${real})tw, (${real})0);
% endif
    *cell = (int4)(wrap_cell(fu, nu), wrap_cell(fv, nv), (int)fw, (int)k);
    return 0;
}
