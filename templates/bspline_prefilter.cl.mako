## Cubic B-spline prefilter (coefficients from samples), equivalent to
## scipy.ndimage.spline_filter(order=3, mode='mirror' == 'constant').
## One recursive causal + anti-causal pass per line (Unser 1993), one
## work-item per column: neighbouring work-items touch neighbouring
## addresses.  Rows are filtered as columns of the transposed image.
## Parameters:
##   real      "float" | "double"
##   channels  1 | 2 (complex as real2)
##   horizon   int: terms of the causal initial sum; pole^horizon is below
##             the precision of `real` (computed in Python)
##   tile      int: side of the transpose tile in local memory
##   with_f64  bool
<%
    value = real if channels == 1 else real + "2"
%>
% if with_f64:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif

typedef ${value} value_t;
typedef ${real} real_t;

// The one pole of the cubic B-spline filter, sqrt(3) - 2, and its gain
// (1 - z)(1 - 1/z) = 6.
#define POLE ((real_t)-0.267949192431122706472553658494127633)
#define GAIN ((real_t)6)
#define HORIZON ${horizon}

__kernel void prefilter_columns(__global value_t *data, const int n_rows, const int n_cols)
{
    const int col = get_global_id(0);
    if (col >= n_cols || n_rows < 2)
        return;  // a single sample is its own coefficient
    __global value_t *c = data + col;
    const size_t stride = (size_t)n_cols;
    const real_t z = POLE;
    // Causal initial value with mirror boundary (scipy _init_causal_mirror);
    // beyond HORIZON terms z^i and z^(n-1) vanish at this precision.
    const bool short_line = n_rows <= HORIZON;
    const real_t z_n_1 = short_line ? pown(z, n_rows - 1) : (real_t)0;
    const int n_terms = short_line ? n_rows - 1 : HORIZON;
    value_t first = c[0] + z_n_1 * c[(n_rows - 1) * stride];
    real_t z_i = z;
    for (int i = 1; i < n_terms; ++i) {
        first += z_i * (c[i * stride] + z_n_1 * c[(n_rows - 1 - i) * stride]);
        z_i *= z;
    }
    value_t previous = GAIN * first / (1 - z_n_1 * z_n_1);
    c[0] = previous;
    for (int i = 1; i < n_rows; ++i) {
        previous = GAIN * c[i * stride] + z * previous;
        c[i * stride] = previous;
    }
    // Anti-causal initial value (scipy _init_anticausal_mirror).
    value_t next = (z * c[(n_rows - 2) * stride] + previous) * z / (z * z - 1);
    c[(n_rows - 1) * stride] = next;
    for (int i = n_rows - 2; i >= 0; --i) {
        next = z * (next - c[i * stride]);
        c[i * stride] = next;
    }
}

// out (n_cols x n_rows) = transpose of in (n_rows x n_cols), through a
// local tile so that reads and writes are both contiguous.
__kernel void transpose(__global const value_t *in, __global value_t *out, const int n_rows,
                        const int n_cols)
{
    __local value_t tile[${tile}][${tile} + 1];  // +1: no bank conflicts on the column read
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int col = get_group_id(0) * ${tile} + lx, row = get_group_id(1) * ${tile} + ly;
    if (col < n_cols && row < n_rows)
        tile[ly][lx] = in[(size_t)row * n_cols + col];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int out_col = get_group_id(1) * ${tile} + lx, out_row = get_group_id(0) * ${tile} + ly;
    if (out_col < n_rows && out_row < n_cols)
        out[(size_t)out_row * n_rows + out_col] = tile[lx][ly];
}
