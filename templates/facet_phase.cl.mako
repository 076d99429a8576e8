## A visibility's facet phase (center_x / center_y): exp(+i theta_k), theta_k
## = 2 pi (freq_k / c) (u shift_u + v shift_v), which the spreaders multiply
## in and the interpolators divide out (core_spread.cl.mako, point_value;
## core_interp.cl.mako, store_point).  Included by both; reads the Mako
## parameters real, shifted and float_float (a device without fp64: uvw,
## freq / c and the shifts as float-float pairs, shift_u and shift_v in
## turns per metre wavelength, and only the turns' fraction goes to a float
## sine; else doubles, shift_u and shift_v in radians).
<%
    _vec = real + "2"
    _ff = context.get("float_float", False)
    _pos = "float2" if _ff else "double"
%>
% if shifted:

inline ${_vec} facet_phasor(const unsigned int k, __global const ${_pos} *uvw,
                            __global const ${_pos} *freq_scale, const unsigned int nchan,
                            const ${_pos} shift_u, const ${_pos} shift_v)
{
    const size_t row = k / nchan;
%   if _ff:
    const ff_t turns = ff_mul(freq_scale[k - row * nchan],
                              ff_add(ff_mul(uvw[3 * row], shift_u),
                                     ff_mul(uvw[3 * row + 1], shift_v)));
    return ff_expi_turns(turns);
%   else:
    const double f = freq_scale[k - row * nchan];
    double c;
    const double s = sincos(f * (uvw[3 * row] * shift_u + uvw[3 * row + 1] * shift_v), &c);
    return (${_vec})((${real})c, (${real})s);
%   endif
}

// Every visibility's phasor, once per plan, where the phases are kept
// (clgrid.core.spread.keeps_facet_phases: CPUs, whose double sincos a
// visibility cost more than the rest of a facet's call).
__kernel void facet_phasors(__global const ${_pos} *uvw, __global const ${_pos} *freq_scale,
                            const unsigned int nchan, const unsigned int n_vis,
                            const ${_pos} shift_u, const ${_pos} shift_v,
                            __global ${_vec} *phasors)
{
    const unsigned int k = get_global_id(0);
    if (k < n_vis)
        phasors[k] = facet_phasor(k, uvw, freq_scale, nchan, shift_u, shift_v);
}
% endif
