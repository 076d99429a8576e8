## Input preparation for reprojection: raw input -> working type on the
## device, and the B-spline prefilter (coefficients from samples) with
## blanked (non-finite) pixels kept out of it.
##
## The prefilter is scipy.ndimage.spline_filter(order, mode='mirror') (what
## scipy also uses for mode='constant') written as the exact inverse filter's
## impulse response, a symmetric FIR c[k] = gain * sum_j pole^|j| s[k+j]
## (Unser 1993: the mirror-extended signal filtered on the infinite line),
## truncated where pole^j is below the working precision.  Every output is
## independent, so rows and columns run in parallel over the whole device: one
## pass along rows, one along columns, each through a local-memory tile.
##
## Blanks: a non-finite pixel is replaced by the nearest finite value on its
## line (within the FIR reach; 0 beyond) before each pass, and the mask byte
## of a coefficient says whether the interpolation stencil based there
## touches a blank (the interpolation then returns NaN).  Far from blanks the
## fill's effect decays as pole^distance.
##
## Parameters:
##   real      "float" | "double"           working scalar type
##   channels  1 | 2 (complex as real2)
##   raw       OpenCL type of one raw input element (scalar; complex: real2 type)
##   swap      bool: raw elements are byte-swapped (big-endian FITS data)
##   raw_bytes bytes of one raw scalar (for the swap)
##   pole, gain, horizon   the filter (computed in Python); horizon = FIR half-length
##   window    (lo, hi): stencil taps relative to the mask index
##   row_group int: work-items per row tile
##   col_tile  (cols, rows, local_rows): column tile and its work-group height
##   with_f64  bool
<%
    value = real if channels == 1 else real + "2"
    lo, hi = window
    cols, tile_rows, local_rows = col_tile
    swizzle = {2: "s10", 4: "s3210", 8: "s76543210"}.get(raw_bytes)
    unsigned = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}[raw_bytes]
    halo = horizon
%>
% if with_f64:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif

typedef ${value} value_t;
typedef ${real} real_t;
typedef ${raw} raw_t;

#define HALO ${halo}

// FIR taps gain * pole^j, j = 0..HALO, exact to double precision.
__constant real_t TAPS[HALO + 1] = {
% for j in range(halo + 1):
    (real_t)${repr(gain * pole ** j)},
% endfor
};

inline int mirror(int i, int n)
{
    if (n == 1)
        return 0;
    i = abs(i);
    const int period = 2 * (n - 1);
    i %= period;
    return i <= n - 1 ? i : period - i;
}

inline value_t load_raw(__global const raw_t *raw, size_t k)
{
% if swap and channels == 1 and swizzle:
    const raw_t v = as_${raw}(as_uchar${raw_bytes}(as_${unsigned}(raw[k])).${swizzle});
% else:
    const raw_t v = raw[k];
% endif
% if channels == 1:
    return (value_t)v;
% else:
    return convert_${value}(v);
% endif
}

inline bool blank(value_t v)
{
% if channels == 1:
    return !isfinite(v);
% else:
    return !isfinite(v.x) || !isfinite(v.y);
% endif
}

// Conversion only (orders without prefilter: blanks propagate through the taps).
__kernel void convert(__global const raw_t *raw_base, __global value_t *out, const int n,
                      const long raw_offset)
{
    const int k = get_global_id(0);
    if (k < n)
        out[k] = load_raw(raw_base + raw_offset, k);
}

// Conversion, blank flag (bit 0) and the fill along the row.
__kernel void convert_fill(__global const raw_t *raw_base, __global value_t *out,
                           __global uchar *flags, const int nx, const int ny,
                           const long raw_offset)
{
    const size_t k = get_global_id(0);
    if (k >= (size_t)nx * ny)
        return;
    __global const raw_t *raw = raw_base + raw_offset;
    value_t v = load_raw(raw, k);
    const bool is_blank = blank(v);
    if (is_blank) {
        const int x = (int)(k % nx);
        const size_t row = k - x;
        v = (value_t)(0);
        for (int d = 1; d <= HALO; ++d) {
            const bool left = x - d >= 0 && !blank(load_raw(raw, row + x - d));
            const bool right = x + d < nx && !blank(load_raw(raw, row + x + d));
            if (left || right) {
                v = left && right ? (load_raw(raw, row + x - d) + load_raw(raw, row + x + d)) / 2
                    : load_raw(raw, row + x + (left ? -d : d));
                break;
            }
        }
    }
    out[k] = v;
    flags[k] = is_blank ? 1 : 0;
}

// FIR along rows; flags_out bit 1: a blank among the row taps of the stencil.
__kernel __attribute__((reqd_work_group_size(${row_group}, 1, 1)))
void prefilter_rows(__global const value_t *in, __global const uchar *flags,
                    __global value_t *out, __global uchar *flags_out,
                    const int nx, const int ny)
{
    __local value_t line[${row_group} + 2 * HALO];
    __local uchar blanks[${row_group} + 2 * HALO];
    const int lx = get_local_id(0), y = get_global_id(1);
    const int x0 = get_group_id(0) * ${row_group};
    const size_t row = (size_t)y * nx;
    for (int t = lx; t < ${row_group} + 2 * HALO; t += ${row_group}) {
        const int x = mirror(x0 - HALO + t, nx);
        line[t] = in[row + x];
        blanks[t] = flags[row + x] & 1;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int x = x0 + lx;
    if (x >= nx)
        return;
    const int c = lx + HALO;
    value_t acc = (value_t)(0);
    for (int j = HALO; j >= 1; --j)  // small terms first
        acc += TAPS[j] * (line[c - j] + line[c + j]);
    acc += TAPS[0] * line[c];
    uchar touched = 0;
    for (int j = ${lo}; j <= ${hi}; ++j)
        touched |= blanks[c + j];
    out[row + x] = acc;
    flags_out[row + x] = blanks[c] | (touched << 1);
}


// A blank pixel's row-filtered value replaced by the nearest non-blank one
// along its column (within the FIR reach; kept as is beyond).
inline value_t refill(__global const value_t *in, __global const uchar *flags, int x, int y,
                      int nx, int ny)
{
    for (int d = 1; d <= HALO; ++d) {
        const bool up = y - d >= 0 && !(flags[(size_t)(y - d) * nx + x] & 1);
        const bool down = y + d < ny && !(flags[(size_t)(y + d) * nx + x] & 1);
        if (up || down)
            return up && down ? (in[(size_t)(y - d) * nx + x] + in[(size_t)(y + d) * nx + x]) / 2
                : in[(size_t)(y + (up ? -d : d)) * nx + x];
    }
    return in[(size_t)y * nx + x];
}

// FIR along columns; mask = 1 where the 2-D stencil based there touches a blank.
__kernel __attribute__((reqd_work_group_size(${cols}, ${local_rows}, 1)))
void prefilter_columns(__global const value_t *in, __global const uchar *flags,
                       __global value_t *out, __global uchar *mask, const int nx,
                       const int ny)
{
    __local value_t tile[${tile_rows} + 2 * HALO][${cols}];
    __local uchar blanks[${tile_rows} + 2 * HALO][${cols}];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int x = get_group_id(0) * ${cols} + lx, y0 = get_group_id(1) * ${tile_rows};
    for (int r = ly; r < ${tile_rows} + 2 * HALO; r += ${local_rows}) {
        value_t v = (value_t)(0);
        uchar b = 0;
        if (x < nx) {
            const int y = mirror(y0 - HALO + r, ny);
            const uchar f = flags[(size_t)y * nx + x];
            v = (f & 1) ? refill(in, flags, x, y, nx, ny) : in[(size_t)y * nx + x];
            b = (f >> 1) & 1;
        }
        tile[r][lx] = v;
        blanks[r][lx] = b;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (x >= nx)
        return;
    for (int r = ly; r < ${tile_rows}; r += ${local_rows}) {
        const int y = y0 + r;
        if (y >= ny)
            break;
        const int c = r + HALO;
        value_t acc = (value_t)(0);
        for (int j = HALO; j >= 1; --j)
            acc += TAPS[j] * (tile[c - j][lx] + tile[c + j][lx]);
        acc += TAPS[0] * tile[c][lx];
        uchar touched = 0;
        for (int j = ${lo}; j <= ${hi}; ++j)
            touched |= blanks[c + j][lx];
        out[(size_t)y * nx + x] = acc;
        mask[(size_t)y * nx + x] = touched;
    }
}
