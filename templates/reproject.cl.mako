## Reprojection between celestial projections: pixel mapping + interpolation.
## Parameters:
##   real        "float" | "double"   data scalar type
##   channels    1 (real data) | 2 (complex data as real2)
##   out_real    "float" | "double"   scalar type of the output array
##   foot        None | "float" | "double" | "uchar": footprint array type
##   coord       "float" | "double"   type of the pixel-mapping arithmetic
##   order       0 (nearest) | 1 (bilinear) | 2, 3 (B-spline)
##   masked      bool: a blank mask (reproject_bspline.cl.mako) says where
##               the stencil touches a blanked pixel
##   sampling    "buffer" (global memory, on-grid taps) | "image" (image
##               object, on-grid taps) | "image-linear" (image object with a
##               linear-filtering sampler: two fetches per 4-tap cubic pass)
##   proj_out, proj_in  projection codes (clgrid.reproject.wcs_params.DEVICE_PROJECTIONS)
##               or None (no device pixel mapping)
##   fast_math   bool: native_sqrt / native_divide in float coordinates
##   with_f64    bool: enable cl_khr_fp64
##
## The input may be a window of the full image (block processing): taps are
## mirrored at the full image's edges, then offset by the window origin.
<%
    value = real if channels == 1 else real + "2"
    out_value = out_real if channels == 1 else out_real + "2"
    image = sampling in ("image", "image-linear")
    pick = ".x" if channels == 1 else ".xy"
    fast = fast_math and coord == "float"
    taps = {0: 1, 1: 2, 2: 3, 3: 4}[order]
    codes = [c for c in dict.fromkeys([proj_out, proj_in]) if c is not None]
%>
% if with_f64:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif

typedef ${value} value_t;
typedef ${out_value} out_t;
typedef ${coord} coord_t;
// Interpolation weights: data precision (float for image sampling).
typedef ${real} weight_t;

% if fast:
#define SQRT(x) native_sqrt(x)
#define DIVIDE(a, b) native_divide((a), (b))
% else:
#define SQRT(x) sqrt(x)
#define DIVIDE(a, b) ((a) / (b))
% endif
#define PI_C ((coord_t)3.14159265358979323846)

% if image:
// On-grid reads: integer coordinates, no filtering.
__constant sampler_t ON_GRID = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP_TO_EDGE
                               | CLK_FILTER_NEAREST;
% if sampling == "image-linear":
// Filtered reads: the sampler's linear interpolation does one tap pair (memo 089, 2.1).
__constant sampler_t FILTERED = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP_TO_EDGE
                                | CLK_FILTER_LINEAR;
// OpenCL samples texel centres at integer + 0.5.
#define TEXEL_CENTRE 0.5f
% endif
#define INPUT_ARG __read_only image2d_t data
inline value_t fetch(INPUT_ARG, int ix, int iy, int stride)
{
    return read_imagef(data, ON_GRID, (int2)(ix, iy))${pick};
}
% else:
#define INPUT_ARG __global const value_t *data
inline value_t fetch(INPUT_ARG, int ix, int iy, int stride)
{
    return data[(size_t)iy * stride + ix];
}
% endif

// Where the input lies: full image size (edges, mirroring), window origin and row stride.
typedef struct { int nx, ny, x0, y0, stride; } grid_t;

// scipy's spline taps beyond the edge reflect about the edge pixel's centre
// (mode 'mirror', which scipy also uses for mode 'constant' inside the grid).
inline int mirror(int i, int n)
{
    if (n == 1)
        return 0;
    i = abs(i);
    const int period = 2 * (n - 1);
    i %= period;
    return i <= n - 1 ? i : period - i;
}

// reproject's edge rule: positions in the outer half of the outer pixels are
// moved onto their centres; anything further out (x < -0.5 or x >= n - 0.5)
// is blank.
inline bool snap_to_grid(coord_t *x, int n)
{
    if (!(*x >= (coord_t)-0.5 && *x < (coord_t)n - (coord_t)0.5))
        return false;  // also catches NaN positions
    *x = clamp(*x, (coord_t)0, (coord_t)(n - 1));
    return true;
}

% if order >= 2:
// B-spline weights of the taps start..start+${taps - 1}.
inline void bspline_weights(weight_t a, weight_t *w)
{
% if order == 3:
    // a = x - floor(x); memo 089 equations (2)-(5).
    const weight_t a2 = a * a, a3 = a2 * a;
    w[0] = (-a3 + 3 * a2 - 3 * a + 1) / 6;
    w[1] = (3 * a3 - 6 * a2 + 4) / 6;
    w[2] = (-3 * a3 + 3 * a2 + 3 * a + 1) / 6;
    w[3] = a3 / 6;
% else:
    // a = x - round(x) in [-1/2, 1/2).
    w[0] = ((weight_t)0.5 - a) * ((weight_t)0.5 - a) / 2;
    w[1] = (weight_t)0.75 - a * a;
    w[2] = ((weight_t)0.5 + a) * ((weight_t)0.5 + a) / 2;
% endif
}
% endif

inline value_t interpolate(INPUT_ARG, __global const uchar *mask, coord_t x, coord_t y,
                           grid_t g)
{
    if (!snap_to_grid(&x, g.nx) || !snap_to_grid(&y, g.ny))
        return (value_t)(NAN);
% if order == 0:
    // scipy rounds half up for order 0: floor(x + 0.5).
    return fetch(data, (int)floor(x + (coord_t)0.5) - g.x0,
                 (int)floor(y + (coord_t)0.5) - g.y0, g.stride);
% else:
% if order == 2:
    const coord_t x_base = floor(x + (coord_t)0.5), y_base = floor(y + (coord_t)0.5);
% else:
    const coord_t x_base = floor(x), y_base = floor(y);
% endif
    const int ix = (int)x_base, iy = (int)y_base;
% if masked:
    if (mask[(size_t)(iy - g.y0) * g.stride + (ix - g.x0)])
        return (value_t)(NAN);  // the stencil touches a blanked pixel
% endif
    // The fraction is taken in coord_t, so float data keeps a position
    // accurate to float precision within the pixel even for large images.
    const weight_t ax = (weight_t)(x - x_base), ay = (weight_t)(y - y_base);
% if order == 1:
% if sampling == "image-linear":
    return read_imagef(data, FILTERED, (float2)((float)(ix - g.x0) + ax + TEXEL_CENTRE,
                                                (float)(iy - g.y0) + ay + TEXEL_CENTRE))${pick};
% else:
    const int ix1 = mirror(ix + 1, g.nx) - g.x0, iy1 = mirror(iy + 1, g.ny) - g.y0;
    const int ix0 = ix - g.x0, iy0 = iy - g.y0;
    return (1 - ay) * ((1 - ax) * fetch(data, ix0, iy0, g.stride)
                       + ax * fetch(data, ix1, iy0, g.stride))
           + ay * ((1 - ax) * fetch(data, ix0, iy1, g.stride)
                   + ax * fetch(data, ix1, iy1, g.stride));
% endif
% else:
    weight_t wx[${taps}], wy[${taps}];
    bspline_weights(ax, wx);
    bspline_weights(ay, wy);
% if sampling == "image-linear" and order == 3:
    // Interior: all 16 taps on the grid, so 4 filtered fetches do them.
    if (ix >= 1 && ix + 2 <= g.nx - 1 && iy >= 1 && iy + 2 <= g.ny - 1) {
        const float gx0 = wx[0] + wx[1], gx1 = wx[2] + wx[3];
        const float gy0 = wy[0] + wy[1], gy1 = wy[2] + wy[3];
        const float ux0 = (float)(ix - g.x0) - 1.0f + wx[1] / gx0 + TEXEL_CENTRE;
        const float ux1 = (float)(ix - g.x0) + 1.0f + wx[3] / gx1 + TEXEL_CENTRE;
        const float uy0 = (float)(iy - g.y0) - 1.0f + wy[1] / gy0 + TEXEL_CENTRE;
        const float uy1 = (float)(iy - g.y0) + 1.0f + wy[3] / gy1 + TEXEL_CENTRE;
        return gy0 * (gx0 * read_imagef(data, FILTERED, (float2)(ux0, uy0))${pick}
                      + gx1 * read_imagef(data, FILTERED, (float2)(ux1, uy0))${pick})
             + gy1 * (gx0 * read_imagef(data, FILTERED, (float2)(ux0, uy1))${pick}
                      + gx1 * read_imagef(data, FILTERED, (float2)(ux1, uy1))${pick});
    }
% endif
    int cols[${taps}], rows[${taps}];
    if (ix - 1 >= 0 && ix + ${taps - 2} < g.nx && iy - 1 >= 0 && iy + ${taps - 2} < g.ny) {
        for (int k = 0; k < ${taps}; ++k) {  // interior: no mirroring
            cols[k] = ix - 1 + k - g.x0;
            rows[k] = iy - 1 + k - g.y0;
        }
    } else {
        for (int k = 0; k < ${taps}; ++k) {
            cols[k] = mirror(ix - 1 + k, g.nx) - g.x0;
            rows[k] = mirror(iy - 1 + k, g.ny) - g.y0;
        }
    }
    value_t sum = (value_t)(0);
    for (int j = 0; j < ${taps}; ++j) {
        value_t line = (value_t)(0);
        for (int k = 0; k < ${taps}; ++k)
            line += wx[k] * fetch(data, cols[k], rows[j], g.stride);
        sum += wy[j] * line;
    }
    return sum;
% endif
% endif
}

% for code in codes:
// ${code}: intermediate (X, Y, radians) -> native unit vector, wcslib ${code.lower()}x2s
// with its bounds checks; lam is PV2_1 (CEA).
inline bool deproject_${code}(coord_t X, coord_t Y, coord_t lam, coord_t *v)
{
% if code == "SIN":
    const coord_t r2 = X * X + Y * Y;
    if (r2 > (coord_t)1)
        return false;  // outside the SIN disk
    v[0] = -Y; v[1] = X; v[2] = SQRT((coord_t)1 - r2);
% elif code == "TAN":
    const coord_t s = DIVIDE((coord_t)1, SQRT((coord_t)1 + X * X + Y * Y));
    v[0] = -Y * s; v[1] = X * s; v[2] = s;
% elif code == "ARC":
    const coord_t r = SQRT(X * X + Y * Y);  // = 90 deg - theta
    if (r > PI_C)
        return false;
    const coord_t s = r > (coord_t)0 ? DIVIDE(sin(r), r) : (coord_t)1;
    v[0] = -Y * s; v[1] = X * s; v[2] = cos(r);
% elif code == "ZEA":
    const coord_t r2 = X * X + Y * Y;  // r = 2 sin((90 deg - theta) / 2)
    if (r2 > (coord_t)4)
        return false;
    const coord_t s = SQRT((coord_t)1 - r2 / 4);
    v[0] = -Y * s; v[1] = X * s; v[2] = (coord_t)1 - r2 / 2;
% elif code == "STG":
    const coord_t t2 = (X * X + Y * Y) / 4;  // r = 2 tan((90 deg - theta) / 2)
    const coord_t s = DIVIDE((coord_t)1, (coord_t)1 + t2);
    v[0] = -Y * s; v[1] = X * s; v[2] = ((coord_t)1 - t2) * s;
% else:
    // Cylindrical: phi = X; wcslib rejects |phi| > 180 deg.
    if (fabs(X) > PI_C)
        return false;
% if code == "CAR":
    if (fabs(Y) > PI_C / 2)
        return false;
    const coord_t cos_t = cos(Y), sin_t = sin(Y);
% elif code == "CEA":
    const coord_t sin_t = Y * lam;
    if (fabs(sin_t) > (coord_t)1)
        return false;
    const coord_t cos_t = SQRT((coord_t)1 - sin_t * sin_t);
% elif code == "MER":
    const coord_t sin_t = tanh(Y), cos_t = DIVIDE((coord_t)1, cosh(Y));
% endif
    v[0] = cos_t * cos(X); v[1] = cos_t * sin(X); v[2] = sin_t;
% endif
    return true;
}

// ${code}: native unit vector -> intermediate (radians), wcslib ${code.lower()}s2x.
inline bool project_${code}(const coord_t *v, coord_t lam, coord_t *X, coord_t *Y)
{
% if code == "SIN":
    if (v[2] < (coord_t)0)
        return false;  // far hemisphere: wcslib sins2x rejects theta < 0
    *X = v[1]; *Y = -v[0];
% elif code == "TAN":
    if (v[2] <= (coord_t)0)
        return false;  // tans2x rejects theta <= 0
    const coord_t s = DIVIDE((coord_t)1, v[2]);
    *X = v[1] * s; *Y = -v[0] * s;
% elif code == "ARC":
    const coord_t rho = SQRT(v[0] * v[0] + v[1] * v[1]);
    const coord_t r = atan2(rho, v[2]);
    const coord_t s = rho > (coord_t)0 ? DIVIDE(r, rho) : (coord_t)1;
    *X = v[1] * s; *Y = -v[0] * s;
% elif code == "ZEA":
    if (v[2] <= (coord_t)-1)
        return false;
    const coord_t s = SQRT(DIVIDE((coord_t)2, (coord_t)1 + v[2]));
    *X = v[1] * s; *Y = -v[0] * s;
% elif code == "STG":
    if (v[2] <= (coord_t)-1)
        return false;
    const coord_t s = DIVIDE((coord_t)2, (coord_t)1 + v[2]);
    *X = v[1] * s; *Y = -v[0] * s;
% else:
    *X = atan2(v[1], v[0]);
% if code == "CAR":
    *Y = atan2(v[2], SQRT(v[0] * v[0] + v[1] * v[1]));
% elif code == "CEA":
    *Y = DIVIDE(v[2], lam);
% elif code == "MER":
    if (fabs(v[2]) >= (coord_t)1)
        return false;
    *Y = atanh(v[2]);
% endif
% endif
    return true;
}
% endfor

% if proj_out is not None:
<%def name="mapping(name, deproject, project)">
// Pixel -> pixel through the native unit vectors.  p: see
// clgrid.reproject.wcs_params.pixel_map_params (one 23-number block).
inline bool ${name}(__constant const coord_t *p, coord_t x, coord_t y, coord_t *x_in,
                    coord_t *y_in)
{
    const coord_t dx = x - p[4], dy = y - p[5];
    coord_t v[3], m[3], X, Y;
    if (!deproject_${deproject}(p[0] * dx + p[1] * dy, p[2] * dx + p[3] * dy, p[21], v))
        return false;
    for (int r = 0; r < 3; ++r)
        m[r] = p[6 + 3 * r] * v[0] + p[7 + 3 * r] * v[1] + p[8 + 3 * r] * v[2];
    if (!project_${project}(m, p[22], &X, &Y))
        return false;
    *x_in = p[15] * X + p[16] * Y + p[19];
    *y_in = p[17] * X + p[18] * Y + p[20];
    return true;
}
</%def>
${mapping("map_forward", proj_out, proj_in)}
${mapping("map_backward", proj_in, proj_out)}

// Output pixel (j, i) -> input pixel; with roundtrip, reproject's check that
// mapping back lands within one pixel of where it started.
inline bool map_pixel(__constant const coord_t *p, int i, int j, int roundtrip,
                      coord_t *x, coord_t *y)
{
    if (!map_forward(p, (coord_t)j, (coord_t)i, x, y))
        return false;
    if (!roundtrip)
        return true;
    coord_t xb, yb;
    if (!map_backward(p + 23, *x, *y, &xb, &yb))
        return false;
    return fabs(xb - (coord_t)j) <= (coord_t)1 && fabs(yb - (coord_t)i) <= (coord_t)1;
}
% endif

inline void store(__global out_t *out, __global ${foot or "uchar"} *footprint, long k,
                  value_t result)
{
% if channels == 1:
    out[k] = (out_t)result;
% else:
    out[k] = convert_${out_value}(result);
% endif
% if foot is not None:
% if channels == 1:
    footprint[k] = isnan(result) ? 0 : 1;
% else:
    footprint[k] = isnan(result.x) ? 0 : 1;
% endif
% endif
}

#define GRID_ARGS const int nx_in, const int ny_in, const int x0_in, const int y0_in, \
                  const int stride_in
#define GRID_SETUP const grid_t grid = {nx_in, ny_in, x0_in, y0_in, stride_in}

% if proj_out is not None:
// Map and interpolate in one pass; output rows row0 .. row0 + ny_out - 1.
__kernel void reproject_fused(__constant const coord_t *params, INPUT_ARG,
                              __global const uchar *mask, __global out_t *out,
                              __global ${foot or "uchar"} *footprint, GRID_ARGS,
                              const int nx_out, const int ny_out, const int row0,
                              const int roundtrip, const long out_offset)
{
    const int j = get_global_id(0), i = get_global_id(1);
    if (j >= nx_out || i >= ny_out)
        return;
    GRID_SETUP;
    coord_t x = 0, y = 0;  // defined even where map_pixel fails (if-converted code reads them)
    value_t result = (value_t)(NAN);
    if (map_pixel(params, row0 + i, j, roundtrip, &x, &y))
        result = interpolate(data, mask, x, y, grid);
    store(out, footprint, out_offset + (size_t)i * nx_out + j, result);
}

// Pixel map only (tests, block bounds).
__kernel void map_pixels(__constant const coord_t *params, __global coord_t *x_in,
                         __global coord_t *y_in, const int nx_out, const int ny_out,
                         const int row0, const int roundtrip)
{
    const int j = get_global_id(0), i = get_global_id(1);
    if (j >= nx_out || i >= ny_out)
        return;
    coord_t x = (coord_t)(NAN), y = (coord_t)(NAN);
    if (!map_pixel(params, row0 + i, j, roundtrip, &x, &y))
        x = y = (coord_t)(NAN);
    const size_t k = (size_t)i * nx_out + j;
    x_in[k] = x;
    y_in[k] = y;
}
% endif

// Interpolation at given input positions (astropy's map computed on the host).
__kernel void interpolate_at(__global const coord_t *x_in, __global const coord_t *y_in,
                             INPUT_ARG, __global const uchar *mask, __global out_t *out,
                             __global ${foot or "uchar"} *footprint, GRID_ARGS, const int n_out,
                             const long out_offset)
{
    const int k = get_global_id(0);
    if (k >= n_out)
        return;
    GRID_SETUP;
    store(out, footprint, out_offset + k, interpolate(data, mask, x_in[k], y_in[k], grid));
}
