## Complex arithmetic on float2 / double2 (x: real, y: imaginary).
## Parameter: with_f64 (bool) also emits the double versions.
<%def name="complex_ops(suffix, real, vec)">
inline ${vec} cmul_${suffix}(${vec} a, ${vec} b)
{
    return (${vec})(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
inline ${vec} cconj_${suffix}(${vec} a) { return (${vec})(a.x, -a.y); }
// a * conj(b): the degridding and correlation product.
inline ${vec} cmulconj_${suffix}(${vec} a, ${vec} b)
{
    return (${vec})(a.x * b.x + a.y * b.y, a.y * b.x - a.x * b.y);
}
// acc + a * b
inline ${vec} cmad_${suffix}(${vec} a, ${vec} b, ${vec} acc)
{
    return (${vec})(acc.x + a.x * b.x - a.y * b.y, acc.y + a.x * b.y + a.y * b.x);
}
inline ${vec} cscale_${suffix}(${vec} a, ${real} s) { return (${vec})(a.x * s, a.y * s); }
// exp(i phase)
inline ${vec} cexpi_${suffix}(${real} phase)
{
    ${real} c;
    ${real} s = sincos(phase, &c);
    return (${vec})(c, s);
}
</%def>
#ifndef CLGRID_COMPLEX_CL
#define CLGRID_COMPLEX_CL
${complex_ops("f32", "float", "float2")}
% if with_f64:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
${complex_ops("f64", "double", "double2")}
% endif
#endif
