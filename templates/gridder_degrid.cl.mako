## Table-based degridding, the exact adjoint of gridder.cl.mako: each record
## gathers sum conj(GCF) * grid over its footprint; no atomics needed.
## Parameters (validated in clgrid/gridder.py):
##   real ("float" | "double"), with_f64 (bool), npol (1, 2, 4),
##   support S, oversample O, separable (bool),
##   lanes (work-items sharing one record's footprint rows; a power of two),
##   slots (records in flight per group), records_per_slot (thread coarsening:
##   consecutive records of one track a slot handles in turn, reusing cached grid).
## Grid layout: (npol, ny, nx) complex.
<%
    vec = real + "2"
    suffix = "f32" if real == "float" else "f64"
    wg_size = lanes * slots
%>
<%include file="complex.cl.mako"/>

#define SUPPORT ${support}
#define OVERSAMPLE ${oversample}
#define NPOL ${npol}
#define LANES ${lanes}

__kernel __attribute__((reqd_work_group_size(${wg_size}, 1, 1)))
void degrid_records(__global const int4 *header,
                    const int n_records,
% if separable:
                    __global const ${vec} *gcf_u,
                    __global const ${vec} *gcf_v,
% else:
                    __global const ${vec} *gcf,
% endif
                    __global const ${vec} *grid,
                    const int nx, const int ny,
                    __global ${vec} *out)            // (n_records, npol)
{
% if lanes > 1:
    __local ${vec} partial[${wg_size} * NPOL];
% endif
    const int lid = get_local_id(0);
    const int lane = lid % LANES;
    const int slot = lid / LANES;
    const int slot_first = (get_group_id(0) * ${slots} + slot) * ${records_per_slot};
    const size_t plane_size = (size_t)nx * ny;
    for (int c = 0; c < ${records_per_slot}; ++c) {
        const int r = slot_first + c;
        ${vec} sum[NPOL];
% for p in range(npol):
        sum[${p}] = (${vec})(0, 0);
% endfor
        if (r < n_records) {
            const int4 h = header[r];
            const int fu = h.z % OVERSAMPLE;
            const int fv = h.z / OVERSAMPLE;
            for (int dv = lane; dv < SUPPORT; dv += LANES) {
                const size_t row = (size_t)(h.y + dv) * nx + h.x;
% if separable:
                const ${vec} wv = gcf_v[(h.w * OVERSAMPLE + fv) * SUPPORT + dv];
                __global const ${vec} *wu = gcf_u + (h.w * OVERSAMPLE + fu) * SUPPORT;
                ${vec} row_sum[NPOL];
%   for p in range(npol):
                row_sum[${p}] = (${vec})(0, 0);
%   endfor
                for (int du = 0; du < SUPPORT; ++du) {
                    const ${vec} weight = wu[du];
%   for p in range(npol):
                    row_sum[${p}] += cmulconj_${suffix}(grid[${p} * plane_size + row + du], weight);
%   endfor
                }
%   for p in range(npol):
                sum[${p}] += cmulconj_${suffix}(row_sum[${p}], wv);
%   endfor
% else:
                __global const ${vec} *weights = gcf
                    + (((size_t)(h.w * OVERSAMPLE + fv) * OVERSAMPLE + fu) * SUPPORT + dv) * SUPPORT;
                for (int du = 0; du < SUPPORT; ++du) {
                    const ${vec} weight = weights[du];
%   for p in range(npol):
                    sum[${p}] += cmulconj_${suffix}(grid[${p} * plane_size + row + du], weight);
%   endfor
                }
% endif
            }
        }
% if lanes > 1:
        // Tree reduction of the lanes' partial sums (uniform trip count: no
        // early exit before the barriers).
%   for p in range(npol):
        partial[lid * NPOL + ${p}] = sum[${p}];
%   endfor
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int stride = LANES / 2; stride > 0; stride /= 2) {
            if (lane < stride) {
%   for p in range(npol):
                partial[lid * NPOL + ${p}] += partial[(lid + stride) * NPOL + ${p}];
%   endfor
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lane == 0 && r < n_records) {
%   for p in range(npol):
            out[(size_t)r * NPOL + ${p}] = partial[lid * NPOL + ${p}];
%   endfor
        }
        barrier(CLK_LOCAL_MEM_FENCE);
% else:
        if (r < n_records) {
%   for p in range(npol):
            out[(size_t)r * NPOL + ${p}] = sum[${p}];
%   endfor
        }
% endif
    }
}
