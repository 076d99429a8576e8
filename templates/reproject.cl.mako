## Reprojection between celestial projections: pixel mapping + interpolation.
## Parameters:
##   real        "float" | "double"   data scalar type
##   channels    1 (real data) | 2 (complex data as real2)
##   coord       "float" | "double"   type of the pixel-mapping arithmetic
##   order       0 (nearest) | 1 (bilinear) | 3 (cubic B-spline)
##   sampling    "buffer" (global memory, on-grid taps) | "image" (image
##               object, on-grid taps) | "image-linear" (image object with a
##               linear-filtering sampler: two fetches per 4-tap cubic pass)
##   proj_out, proj_in  "SIN" | "TAN" | None (no device pixel mapping)
##   fast_math   bool: native_sqrt / native_divide in float coordinates
##   with_f64    bool: enable cl_khr_fp64
<%
    value = real if channels == 1 else real + "2"
    coord2 = coord + "2"
    image = sampling in ("image", "image-linear")
    pick = ".x" if channels == 1 else ".xy"
    fast = fast_math and coord == "float"
%>
% if with_f64:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif

typedef ${value} value_t;
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

% if image:
typedef image2d_t input_t;
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
inline value_t fetch(INPUT_ARG, int ix, int iy, int nx)
{
    return read_imagef(data, ON_GRID, (int2)(ix, iy))${pick};
}
% else:
#define INPUT_ARG __global const value_t *data
inline value_t fetch(INPUT_ARG, int ix, int iy, int nx)
{
    return data[(size_t)iy * nx + ix];
}
% endif

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

// reproject's edge rule: positions up to half a pixel outside the outer
// pixel centres are moved onto them, anything further out is blank.
inline bool snap_to_grid(coord_t *x, int n)
{
    if (!(*x >= (coord_t)-0.5 && *x <= (coord_t)n - (coord_t)0.5))
        return false;  // also catches NaN positions from a host mapping
    *x = clamp(*x, (coord_t)0, (coord_t)(n - 1));
    return true;
}

% if order == 3:
// Cubic B-spline weights, memo 089 equations (2)-(5).
inline void bspline_weights(weight_t a, weight_t *w)
{
    const weight_t a2 = a * a, a3 = a2 * a;
    w[0] = (-a3 + 3 * a2 - 3 * a + 1) / 6;
    w[1] = (3 * a3 - 6 * a2 + 4) / 6;
    w[2] = (-3 * a3 + 3 * a2 + 3 * a + 1) / 6;
    w[3] = a3 / 6;
}
% endif

inline value_t interpolate(INPUT_ARG, coord_t x, coord_t y, int nx, int ny)
{
    if (!snap_to_grid(&x, nx) || !snap_to_grid(&y, ny))
        return (value_t)(NAN);
% if order == 0:
    // scipy rounds half up for order 0: floor(x + 0.5).
    return fetch(data, (int)floor(x + (coord_t)0.5), (int)floor(y + (coord_t)0.5), nx);
% else:
    const coord_t x_floor = floor(x), y_floor = floor(y);
    const int ix = (int)x_floor, iy = (int)y_floor;
    // The fraction is taken in coord_t, so float data keeps a position
    // accurate to float precision within the pixel even for large images.
    const weight_t ax = (weight_t)(x - x_floor), ay = (weight_t)(y - y_floor);
% if order == 1:
% if sampling == "image-linear":
    return read_imagef(data, FILTERED, (float2)((float)ix + ax + TEXEL_CENTRE,
                                                (float)iy + ay + TEXEL_CENTRE))${pick};
% else:
    const int ix1 = mirror(ix + 1, nx), iy1 = mirror(iy + 1, ny);
    return (1 - ay) * ((1 - ax) * fetch(data, ix, iy, nx) + ax * fetch(data, ix1, iy, nx))
           + ay * ((1 - ax) * fetch(data, ix, iy1, nx) + ax * fetch(data, ix1, iy1, nx));
% endif
% else:
    weight_t wx[4], wy[4];
    bspline_weights(ax, wx);
    bspline_weights(ay, wy);
% if sampling == "image-linear":
    // Interior: all 16 taps on the grid, so 4 filtered fetches do them.
    if (ix >= 1 && ix + 2 <= nx - 1 && iy >= 1 && iy + 2 <= ny - 1) {
        const float gx0 = wx[0] + wx[1], gx1 = wx[2] + wx[3];
        const float gy0 = wy[0] + wy[1], gy1 = wy[2] + wy[3];
        const float ux0 = (float)ix - 1.0f + wx[1] / gx0 + TEXEL_CENTRE;
        const float ux1 = (float)ix + 1.0f + wx[3] / gx1 + TEXEL_CENTRE;
        const float uy0 = (float)iy - 1.0f + wy[1] / gy0 + TEXEL_CENTRE;
        const float uy1 = (float)iy + 1.0f + wy[3] / gy1 + TEXEL_CENTRE;
        return gy0 * (gx0 * read_imagef(data, FILTERED, (float2)(ux0, uy0))${pick}
                      + gx1 * read_imagef(data, FILTERED, (float2)(ux1, uy0))${pick})
             + gy1 * (gx0 * read_imagef(data, FILTERED, (float2)(ux0, uy1))${pick}
                      + gx1 * read_imagef(data, FILTERED, (float2)(ux1, uy1))${pick});
    }
% endif
    int cols[4];
    for (int k = 0; k < 4; ++k)
        cols[k] = mirror(ix - 1 + k, nx);
    value_t sum = (value_t)(0);
    for (int j = 0; j < 4; ++j) {
        const int row = mirror(iy - 1 + j, ny);
        value_t line = (value_t)(0);
        for (int k = 0; k < 4; ++k)
            line += wx[k] * fetch(data, cols[k], row, nx);
        sum += wy[j] * line;
    }
    return sum;
% endif
% endif
}

% if proj_out is not None:
// Output pixel -> input pixel.  params: see clgrid.wcs_params.pixel_map_params.
// Returns false where a projection step is undefined (wcslib status 'bad').
inline bool map_pixel(__constant const coord_t *p, int i_out, int j_out, coord_t *x_in,
                      coord_t *y_in)
{
    const coord_t dx = (coord_t)j_out - p[4], dy = (coord_t)i_out - p[5];
    const coord_t X = p[0] * dx + p[1] * dy, Y = p[2] * dx + p[3] * dy;
    const coord_t r2 = X * X + Y * Y;
    // Native unit vector (cos t cos f, cos t sin f, sin t) with phi = atan2(X, -Y).
% if proj_out == "SIN":
    if (r2 > (coord_t)1)
        return false;  // outside the SIN disk
    const coord_t nx = -Y, ny = X, nz = SQRT((coord_t)1 - r2);
% else:
    const coord_t inv_norm = DIVIDE((coord_t)1, SQRT((coord_t)1 + r2));
    const coord_t nx = -Y * inv_norm, ny = X * inv_norm, nz = inv_norm;
% endif
    const coord_t mx = p[6] * nx + p[7] * ny + p[8] * nz;
    const coord_t my = p[9] * nx + p[10] * ny + p[11] * nz;
    const coord_t mz = p[12] * nx + p[13] * ny + p[14] * nz;
% if proj_in == "SIN":
    if (mz < (coord_t)0)
        return false;  // far hemisphere: wcslib sins2x rejects theta < 0
    const coord_t Xi = my, Yi = -mx;
% else:
    if (mz <= (coord_t)0)
        return false;  // tans2x rejects theta <= 0
    const coord_t inv_z = DIVIDE((coord_t)1, mz);
    const coord_t Xi = my * inv_z, Yi = -mx * inv_z;
% endif
    *x_in = p[15] * Xi + p[16] * Yi + p[19];
    *y_in = p[17] * Xi + p[18] * Yi + p[20];
    return true;
}

// Single plane: map and interpolate in one pass.
__kernel void reproject_fused(__constant const coord_t *params, INPUT_ARG,
                              __global value_t *out, const int nx_in, const int ny_in,
                              const int nx_out, const int ny_out)
{
    const int j = get_global_id(0), i = get_global_id(1);
    if (j >= nx_out || i >= ny_out)
        return;
    coord_t x = 0, y = 0;  // defined even where map_pixel fails (if-converted code reads them)
    value_t result = (value_t)(NAN);
    if (map_pixel(params, i, j, &x, &y))
        result = interpolate(data, x, y, nx_in, ny_in);
    out[(size_t)i * nx_out + j] = result;
}

// Pixel map only, for cubes: computed once, reused for every plane.
__kernel void map_pixels(__constant const coord_t *params, __global coord_t *x_in,
                         __global coord_t *y_in, const int nx_out, const int ny_out)
{
    const int j = get_global_id(0), i = get_global_id(1);
    if (j >= nx_out || i >= ny_out)
        return;
    coord_t x = (coord_t)(NAN), y = (coord_t)(NAN);
    if (!map_pixel(params, i, j, &x, &y))
        x = y = (coord_t)(NAN);
    const size_t k = (size_t)i * nx_out + j;
    x_in[k] = x;
    y_in[k] = y;
}
% endif

// Interpolation at given input positions (a device map or astropy's on the host).
__kernel void interpolate_at(__global const coord_t *x_in, __global const coord_t *y_in,
                             INPUT_ARG, __global value_t *out, const int nx_in,
                             const int ny_in, const int n_out)
{
    const int k = get_global_id(0);
    if (k >= n_out)
        return;
    out[k] = interpolate(data, x_in[k], y_in[k], nx_in, ny_in);
}
